#include "model_fixture.h"

#include <gtest/gtest.h>

#include <fmt/format.h>
#include <cmath>
#include <fstream>
#include <random>

#include "hf/checkpoint.h"
#include "model/init.h"
#include "model/params.h"
#include "hf/safetensors.h"
#include "data/repeat_task.h"
#include "train/trainer.h"
#include "test_util.h"
#include <sstream>

namespace oomb::testing {

nlohmann::json tiny_config_json(const std::string& arch, int64_t kv_heads) {
  const std::string cls = arch == "qwen2"     ? "Qwen2ForCausalLM"
                          : arch == "qwen3"   ? "Qwen3ForCausalLM"
                          : arch == "mistral" ? "MistralForCausalLM"
                          : arch == "granite" ? "GraniteForCausalLM"
                          : arch == "smollm3" ? "SmolLM3ForCausalLM"
                          : arch == "olmo2"   ? "Olmo2ForCausalLM"
                          : arch == "olmo3"   ? "Olmo3ForCausalLM"
                          : arch == "gemma3_text" ? "Gemma3ForCausalLM"
                          : arch == "glm"     ? "GlmForCausalLM"
                          : arch == "glm4"    ? "Glm4ForCausalLM"
                                              : "LlamaForCausalLM";
  nlohmann::json j = {{"architectures", {cls}},     {"model_type", arch},        {"hidden_size", 32},
          {"intermediate_size", 48},    {"num_hidden_layers", 2},    {"num_attention_heads", 4},
          {"num_key_value_heads", kv_heads}, {"head_dim", 8},        {"rms_norm_eps", 1e-6},
          {"vocab_size", 61},           {"max_position_embeddings", 64}, {"rope_theta", 10000.0},
          {"tie_word_embeddings", false}, {"torch_dtype", "float32"}};
  if (arch == "mistral") j["sliding_window"] = nullptr;  // transformers' default is 4096
  if (arch == "smollm3") j["pad_token_id"] = nullptr;    // (SmolLM3Config's 128004 is past this vocabulary)
  if (arch == "glm" || arch == "glm4") j["pad_token_id"] = nullptr;  // (GlmConfig's 151329 too)
  return j;
}

nlohmann::json tiny_granite_json(int64_t kv_heads) {
  nlohmann::json j = tiny_config_json("granite", kv_heads);
  j["embedding_multiplier"] = 3.5, j["residual_multiplier"] = 0.37, j["attention_multiplier"] = 0.21;
  j["logits_scaling"] = 2.7, j["tie_word_embeddings"] = true, j["pad_token_id"] = 0;
  return j;
}

nlohmann::json tiny_gemma3_json(int64_t kv_heads) {
  nlohmann::json j = tiny_config_json("gemma3_text", kv_heads);
  j.erase("tie_word_embeddings");
  j["sliding_window"] = 6, j["layer_types"] = {"sliding_attention", "full_attention"};
  j["rope_local_base_freq"] = 100.0, j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  j["query_pre_attn_scalar"] = 20, j["head_dim"] = 16;
  return j;
}

void load_for_training(Model& m, const std::filesystem::path& dir) {
  Params host(m.config(), m.host_layout(), Tier::Host, Tag::IO);
  load_weights(dir, m.config(), host);
  m.upload_params(host);
  m.enable_grads();
}

StepResult one_step(Backend& be, const std::filesystem::path& dir, const std::vector<int32_t>& ids,
                    const std::vector<int32_t>& targets, const ChunkPlan& plan) {
  const ModelConfig cfg = load_config(dir);
  Model m(cfg, be, plan);
  load_for_training(m, dir);
  const LossStats ls = m.forward_backward(ids.data(), targets.data(), int64_t(ids.size()), 1.0f);
  StepResult s{ls.loss_sum / double(ls.targets), host_grads(m)};
  EXPECT_EQ(m.kv().pages_in_use(), 0);
  EXPECT_EQ(m.kv_grad().pages_in_use(), 0);
  return s;
}

namespace {
// the model dir and the 79 tokens (ids, targets) those two checks step over
struct TinyRun {
  std::filesystem::path dir;
  std::vector<int32_t> ids, targets;
};
TinyRun tiny_run(const nlohmann::json& config, uint64_t seed) {
  TinyRun r{temp_dir(fmt::format("_tiny_run_{}", seed)), {}, {}};
  write_tiny_model(r.dir, config, seed);
  const auto toks = write_tokens(r.dir / "t.bin", 80, 61, seed + 1);
  r.ids.assign(toks.begin(), toks.end() - 1);
  r.targets.assign(toks.begin() + 1, toks.end());
  return r;
}
}  // namespace

void expect_kept_attention_bits(const nlohmann::json& config, uint64_t seed) {
  const TinyRun r = tiny_run(config, seed);
  auto be = make_cpu_backend();
  for (const DType precision : {DType::F32, DType::BF16})
    for (const bool layer_order : {false, true}) {
      SCOPED_TRACE(fmt::format("{} {}", dtype_name(precision), layer_order ? "layer order" : "chunk order"));
      ChunkPlan plan{23, 8};
      plan.precision = precision;
      plan.sweep = layer_order ? SweepOrder::Layer : SweepOrder::Chunk;
      const StepResult recomputed = one_step(*be, r.dir, r.ids, r.targets, plan);
      plan.keep_attention = int64_t(r.ids.size());
      const StepResult kept = one_step(*be, r.dir, r.ids, r.targets, plan);
      EXPECT_EQ(kept.loss, recomputed.loss);
      EXPECT_EQ(kept.grads, recomputed.grads);
    }
}

std::pair<double, double> bf16_against_f32(const nlohmann::json& config, uint64_t seed) {
  const TinyRun r = tiny_run(config, seed);
  auto be = make_cpu_backend();
  ChunkPlan plan{23, 8};
  const StepResult f32 = one_step(*be, r.dir, r.ids, r.targets, plan);
  plan.precision = DType::BF16;
  const StepResult bf16 = one_step(*be, r.dir, r.ids, r.targets, plan);
  return {std::abs(bf16.loss - f32.loss) / f32.loss, rel_error(bf16.grads, f32.grads)};
}

int64_t frozen_bf16_bytes(const ModelConfig& cfg) {
  int64_t at = 0;
  for (const ParamSpec& s : param_layout(cfg)) {
    const bool bf16 = s.shape.size() == 2 && s.name != "model.embed_tokens.weight";
    at = (at + s.numel() * (bf16 ? 2 : 4) + 255) / 256 * 256;
  }
  return at;
}

std::string hf_tensor_of(const ModelConfig& cfg, const std::string& name, int64_t& row0, int64_t& total) {
  row0 = 0, total = -1;
  const bool glm = cfg.arch == Arch::Glm || cfg.arch == Arch::Glm4;  // (GLM's files fuse gate and up alone)
  if (cfg.arch != Arch::Phi3 && !glm) return name;
  const int64_t qd = cfg.heads * cfg.head_dim, kd = cfg.kv_heads * cfg.head_dim, I = cfg.intermediate;
  const struct {
    const char *part, *fused;
    int64_t row0, total;
  } kParts[] = {{"self_attn.q_proj.weight", "self_attn.qkv_proj.weight", 0, qd + 2 * kd},
                {"self_attn.k_proj.weight", "self_attn.qkv_proj.weight", qd, qd + 2 * kd},
                {"self_attn.v_proj.weight", "self_attn.qkv_proj.weight", qd + kd, qd + 2 * kd},
                {"mlp.gate_proj.weight", "mlp.gate_up_proj.weight", 0, 2 * I},
                {"mlp.up_proj.weight", "mlp.gate_up_proj.weight", I, 2 * I}};
  for (const auto& p : kParts)
    if (name.ends_with(p.part) && (!glm || std::string(p.fused) == "mlp.gate_up_proj.weight")) {
      row0 = p.row0, total = p.total;
      return name.substr(0, name.size() - std::string(p.part).size()) + p.fused;
    }
  return name;
}

std::vector<float> host_grads(Model& m) {
  std::vector<float> g(static_cast<size_t>(m.grads().flat().numel()));
  m.backend().copy(g.data(), Tier::Host, m.grads().flat().data, m.grads().flat().tier, g.size() * 4);
  return g;
}

std::vector<int64_t> param_shape(const ModelConfig& c, const std::string& name) {
  for (const ParamSpec& s : param_layout(c))
    if (s.name == name) return s.shape;
  return {};
}

void expect_bf16_tracks_f32(const nlohmann::json& config, uint64_t seed, const std::string& name) {
  const auto [loss_err, grad_err] = bf16_against_f32(config, seed);
  EXPECT_LE(loss_err, 1e-2);
  EXPECT_LE(grad_err, 3e-2);
  EXPECT_GT(grad_err, 1e-4) << "no bf16 rounding happened";
  std::cout << fmt::format("[ {:<8} ] bf16 against fp32: loss {:.1e}, whole gradient {:.2e}\n", name, loss_err,
                           grad_err);
}

std::string expect_cli_trains(const std::filesystem::path& dir, const std::filesystem::path& model,
                              const std::filesystem::path& out) {
  std::vector<uint32_t> cycle(400);
  for (size_t i = 0; i < cycle.size(); ++i) cycle[i] = uint32_t(1 + (i * 7) % 13);
  std::ofstream(dir / "t.bin", std::ios::binary)
      .write(reinterpret_cast<const char*>(cycle.data()), std::streamsize(cycle.size() * 4));
  const CmdResult r = oomb_cmd(dir, fmt::format("train --model {} --data {} --seq-len 32 --chunk-size 16 --lr 1e-2 "
                                                "--steps 6 --out {}", model.string(), (dir / "t.bin").string(),
                                                out.string()));
  EXPECT_EQ(r.code, 0) << r.out;
  const std::vector<double> losses = losses_of(r.out);
  EXPECT_EQ(losses.size(), 6u) << r.out;
  EXPECT_TRUE(losses.size() == 6 && losses.back() < losses.front()) << r.out;
  return r.out;
}

ModelConfig write_tiny_model(const std::filesystem::path& dir, const nlohmann::json& cfg_json, uint64_t seed,
                             DType dtype) {
  std::filesystem::create_directories(dir);
  const ModelConfig cfg = parse_config(cfg_json, "test config");
  Params p(cfg, Tier::Host, Tag::Weights);
  init_params(p, seed, 0.15f);
  std::mt19937_64 rng(seed + 7);
  std::normal_distribution<float> nd(0.0f, 0.1f);
  for (const ParamSpec& s : p.specs()) {
    const bool norm = s.name.ends_with("norm.weight"), bias = s.name.ends_with(".bias");
    if (!norm && !bias) continue;
    float* x = p.view(s).f();  // (a norm scales by about 1: Gemma 3's 1 + w by w about 0)
    for (int64_t i = 0; i < s.numel(); ++i) x[i] = (norm ? 1.0f - cfg.norm_offset() : 0.0f) + nd(rng);
  }
  save_model(dir, cfg, p, dtype);
  write_file_atomic(dir / "config.json", cfg_json.dump(2));  // exactly the JSON under test
  return cfg;
}

std::vector<int32_t> write_tokens(const std::filesystem::path& path, int64_t n, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  std::vector<uint32_t> raw(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) raw[i] = uint32_t(ids[i] = int32_t(rng() % uint64_t(vocab)));
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(raw.data()), std::streamsize(raw.size() * 4));
  return ids;
}

MemoryPlan train_for_peaks(const ModelConfig& cfg, const ChunkPlan& plan, int64_t N, bool sim, int64_t steps) {
  return train_for_peaks_on([sim] { return sim ? make_sim_backend() : make_cpu_backend(); }, cfg, plan, N, steps);
}

MemoryPlan train_for_peaks_on(const std::function<std::unique_ptr<Backend>()>& make, const ModelConfig& cfg,
                              const ChunkPlan& plan, int64_t N, int64_t steps) {
  auto be = make();
  Model m(cfg, *be, plan);
  if (m.params().flat().tier != Tier::Device) {
    init_params(m.params(), 1);
  } else {
    Params host(cfg, m.host_layout(), Tier::Host, Tag::IO);
    init_params(host, 1);
    m.upload_params(host);
  }
  RepeatTask task(2, cfg.vocab);
  TrainOptions o{N, steps, 1, 1, {}, ""};
  std::ostringstream log;
  train(m, task, o, log);
  return plan_memory(cfg, plan, N, o.optim.kind, be->workspace_bytes(workspace_shape(cfg, plan)), be->tier(),
                     be->pinned_workspace_bytes());
}

void expect_peaks_equal(const MemoryPlan& plan) {
  const Accountant& acc = Accountant::global();
  for (Tier tier : kTiers)
    for (int i = 0; i < kNumTags; ++i) {
      if (Tag(i) == Tag::IO) continue;
      EXPECT_EQ(acc.get(tier, Tag(i)).peak, plan.get(tier, Tag(i))) << tier_name(tier) << " " << tag_name(Tag(i));
    }
}

}  // namespace oomb::testing
