// Phi-3's checkpoints (hf/fused_projections.h): q, k and v are one qkv_proj, gate and up one
// gate_up_proj. The same weights saved as a Llama and as a Phi-3 load the same; the Phi-3 file's fused
// tensors are the Llama file's parts one after another; parts that are not adjacent in memory join the
// same way; a training checkpoint of a Phi-3 holds the fused tensors and resumes bit for bit; LoRA adapts
// the fused linears whole, as PEFT does (a part alone refused), and its adapter saves, loads and merges.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <algorithm>
#include <cstring>
#include <fstream>
#include <random>

#include "hf/checkpoint.h"
#include "hf/fused_projections.h"
#include "hf/peft.h"
#include "hf/safetensors.h"
#include "checkpoint_runs.h"
#include "model/lora.h"
#include "model_fixture.h"
#include "test_util.h"

using namespace oomb;
using namespace oomb::testing;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

namespace {

nlohmann::json phi3_json(int64_t kv_heads) {
  nlohmann::json j = tiny_config_json("llama", kv_heads);
  j["architectures"] = {"Phi3ForCausalLM"}, j["model_type"] = "phi3";
  j["pad_token_id"] = nullptr;  // (Phi3Config's default, 32000, is outside this vocabulary)
  return j;
}

// The raw bytes of `name` in the model directory `dir`.
std::vector<char> raw(const fs::path& dir, const std::string& name) {
  const SafetensorsModel st = SafetensorsModel::open(dir);
  const TensorInfo* t = st.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return {};
  std::vector<float> v(static_cast<size_t>(t->numel()));
  st.read_f32(name, v.data());
  std::vector<char> out(v.size() * 4);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

TEST(Phi3, FusedTensorsAreTheLlamaPartsInOrder) {
  for (int64_t kv : {1, 4}) {
    SCOPED_TRACE(kv);
    const auto dir = temp_dir("_kv" + std::to_string(kv));
    const ModelConfig llama = write_tiny_model(dir / "llama", tiny_config_json("llama", kv), 5);
    const ModelConfig phi3 = parse_config(phi3_json(kv), "phi3");
    Params w(llama, Tier::Host, Tag::IO);
    load_weights(dir / "llama", llama, w);
    save_model(dir / "phi3", phi3, w, DType::F32);

    const SafetensorsModel st = SafetensorsModel::open(dir / "phi3");
    for (const std::string& n : st.names()) {
      EXPECT_EQ(n.find("q_proj"), std::string::npos) << n;
      EXPECT_EQ(n.find("gate_proj"), std::string::npos) << n;
    }
    EXPECT_EQ(st.names().size(), SafetensorsModel::open(dir / "llama").names().size() - 2 * 3);  // 5 -> 2 per layer
    for (int l = 0; l < 2; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      for (const auto& [fused, parts] : std::vector<std::pair<std::string, std::vector<std::string>>>{
               {"self_attn.qkv_proj.weight", {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"}},
               {"mlp.gate_up_proj.weight", {"mlp.gate_proj.weight", "mlp.up_proj.weight"}}}) {
        std::vector<char> joined;
        for (const std::string& part : parts) {
          const std::vector<char> b = raw(dir / "llama", p + part);
          joined.insert(joined.end(), b.begin(), b.end());
        }
        EXPECT_EQ(raw(dir / "phi3", p + fused), joined) << p + fused;
      }
    }
    Params back(phi3, Tier::Host, Tag::IO);
    load_weights(dir / "phi3", phi3, back);
    EXPECT_EQ(0, std::memcmp(back.flat().data, w.flat().data, w.flat().bytes()));
    // a Llama-shaped checkpoint is not a Phi-3's, and the error says what was looked for
    EXPECT_THAT(error_of([&] { load_weights(dir / "llama", phi3, back); }),
                HasSubstr("tensor 'model.layers.0.self_attn.qkv_proj.weight' is missing from the checkpoint (config: 2 "
                          "layers, untied embeddings, fused q/k/v and gate/up as Phi-3 saves them)"));
  }
}

TEST(Phi3, PartsApartInMemoryJoinTheSame) {
  const ModelConfig c = parse_config(phi3_json(2), "phi3");
  const int64_t d = c.hidden, qd = c.heads * c.head_dim, kd = c.kv_heads * c.head_dim;
  std::vector<float> q(size_t(qd * d)), k(size_t(kd * d)), v(size_t(kd * d));
  for (size_t i = 0; i < q.size(); ++i) q[i] = float(i);
  for (size_t i = 0; i < k.size(); ++i) k[i] = -float(i), v[i] = 0.5f + float(i);
  const std::string p = "model.layers.1.self_attn.";
  const SaveTensor in[] = {{p + "v_proj.weight", DType::F32, {kd, d}, v.data()},  // in any order
                           {p + "q_proj.weight", DType::F32, {qd, d}, q.data()},
                           {p + "k_proj.weight", DType::F32, {kd, d}, k.data()}};
  std::vector<Buffer> storage;
  const std::vector<SaveTensor> out = fuse_for_save(c, in, storage);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].name, p + "qkv_proj.weight");
  EXPECT_EQ(out[0].shape, (std::vector<int64_t>{qd + 2 * kd, d}));
  std::vector<float> want = q;
  want.insert(want.end(), k.begin(), k.end());
  want.insert(want.end(), v.begin(), v.end());
  EXPECT_EQ(0, std::memcmp(out[0].data, want.data(), want.size() * 4));
  EXPECT_EQ(storage.size(), 1u);  // copied: the parts were apart
  EXPECT_THAT(error_of([&] { fuse_for_save(c, std::span(in + 1, 2), storage); }),
              HasSubstr("'model.layers.1.self_attn.qkv_proj.weight' needs 'model.layers.1.self_attn.v_proj.weight'"));
  const SaveTensor no_q[] = {in[0], in[2]};  // k and v without q: refused, not dropped
  EXPECT_THAT(error_of([&] { fuse_for_save(c, no_q, storage); }),
              HasSubstr("'model.layers.1.self_attn.qkv_proj.weight' needs 'model.layers.1.self_attn.q_proj.weight'"));
}

// A Phi-3's training checkpoint is a Phi-3 model directory, and resuming from it gives the run that
// was not interrupted, bit for bit.
TEST(Phi3, TrainingCheckpointHoldsFusedTensorsAndResumes) {
  const auto dir = temp_dir();
  write_tiny_model(dir, phi3_json(2), 3);
  write_tokens(dir / "t.bin", 2000, 61, 4);
  auto be = make_cpu_backend();
  const ChunkPlan plan{16, 8};
  const RunResult whole = checkpoint_run(*be, "cpu", plan, dir, "adamw");
  const RunResult first = checkpoint_run(*be, "cpu", plan, dir, "adamw", {}, 3);
  EXPECT_NE(SafetensorsModel::open(first.checkpoint).find("model.layers.1.mlp.gate_up_proj.weight"), nullptr);
  EXPECT_EQ(SafetensorsModel::open(first.checkpoint).find("model.layers.1.mlp.up_proj.weight"), nullptr);
  const RunResult rest = checkpoint_run(*be, "cpu", plan, dir, "adamw", first.checkpoint);
  EXPECT_EQ(resume_difference(whole, first, rest, 3), "");
}

// LoRA on Phi-3 is PEFT's: one adapter per fused linear (qkv_proj, gate_up_proj), named and shaped as
// PEFT's, target_modules naming the fused modules; a part alone is refused. (Its numbers: the oracle's
// lora_phi3_* and dropout_phi3_* cases.)
TEST(Phi3, LoraAdaptsTheFusedLinearsAsPeftDoes) {
  const ModelConfig c = parse_config(phi3_json(2), "phi3");
  LoraConfig l;
  l.rank = 2;
  parse_lora_targets("q,v", l);
  EXPECT_THAT(error_of([&] { lora_layout(c, l); }),
              HasSubstr("LoRA on Phi3ForCausalLM: q_proj and k_proj are one linear in its files "
                        "(model.layers.0.self_attn.qkv_proj.weight), which PEFT adapts as one module: adapt both or "
                        "neither"));
  parse_lora_targets("gate", l);
  EXPECT_THAT(error_of([&] { lora_layout(c, l); }), HasSubstr("gate_proj and up_proj are one linear"));
  parse_lora_targets("all", l);
  const std::vector<ParamSpec> s = lora_layout(c, l);
  ASSERT_EQ(s.size(), 2u * 4 * 2);  // A and B of qkv, o, gate_up and down in both layers
  const int64_t qkv_rows = 4 * 8 + 2 * 2 * 8, gate_up_rows = 2 * 48;
  EXPECT_EQ(s[0].name, "base_model.model.model.layers.0.self_attn.qkv_proj.lora_A.weight");
  EXPECT_EQ(s[0].shape, (std::vector<int64_t>{2, 32}));
  EXPECT_EQ(s[1].name, "base_model.model.model.layers.0.self_attn.qkv_proj.lora_B.weight");
  EXPECT_EQ(s[1].shape, (std::vector<int64_t>{qkv_rows, 2}));
  EXPECT_EQ(s[4].name, "base_model.model.model.layers.0.mlp.gate_up_proj.lora_A.weight");
  EXPECT_EQ(s[5].shape, (std::vector<int64_t>{gate_up_rows, 2}));
  EXPECT_EQ(l.target_names(true, true), (std::vector<std::string>{"qkv_proj", "o_proj", "gate_up_proj", "down_proj"}));
  LoraConfig back;
  parse_lora_targets("qkv_proj,o_proj,gate_up_proj,down_proj", back);  // as PEFT's adapter_config.json names them
  EXPECT_EQ(back.target_names(), l.target_names());
  // the parts' views: A shared, B's rows in the fused tensor's order
  Params p(c, s, Tier::Host, Tag::IO);
  const auto get = [&](const std::string& n) { return p.get(n); };
  const LoraPair q = lora_pair(get, c, 1, kQ), k = lora_pair(get, c, 1, kK), v = lora_pair(get, c, 1, kV);
  EXPECT_EQ(q.a.data, k.a.data);
  EXPECT_EQ(k.a.data, v.a.data);
  EXPECT_EQ(q.b.dim(0), 32);
  EXPECT_EQ(k.b.dim(0), 16);
  EXPECT_EQ(static_cast<float*>(k.b.data), q.b.f() + 32 * 2);
  EXPECT_EQ(static_cast<float*>(v.b.data), k.b.f() + 16 * 2);
  EXPECT_EQ(lora_pair(get, c, 1, kUp).b.f(), lora_pair(get, c, 1, kGate).b.f() + 48 * 2);
}

// A Phi-3 adapter saved is PEFT's (fused names and target_modules), loads back to the same numbers, and
// the model merged from it (each part's rows of B times the shared A, into q, k, v) computes what base +
// adapter compute.
TEST(Phi3, LoraAdapterSavesLoadsAndMerges) {
  const auto dir = temp_dir();
  const ModelConfig cfg = write_tiny_model(dir, phi3_json(2), 5);
  ChunkPlan plan{19, 8};
  plan.lora.rank = 3;
  plan.lora.alpha = 6;
  parse_lora_targets("all", plan.lora);
  auto be = make_cpu_backend();
  Model m(cfg, *be, plan);
  load_weights(dir, cfg, m.params());
  init_lora(m.trainable(), m.params(), 11);
  std::mt19937 rng(3);  // B non-zero, so the adapter changes the model
  std::normal_distribution<float> nd(0.0f, 0.2f);
  for (const ParamSpec& s : m.trainable().specs())
    if (s.name.ends_with("lora_B.weight"))
      for (int64_t i = 0; i < s.numel(); ++i) m.trainable().view(s).f()[i] = nd(rng);
  const fs::path out = temp_dir("_adapter") / "a";
  save_adapter(out, cfg, plan.lora, m.trainable(), dir.string());
  const SafetensorsFile f = SafetensorsFile::open(out / "adapter_model.safetensors");
  EXPECT_NE(f.find("base_model.model.model.layers.1.self_attn.qkv_proj.lora_B.weight"), nullptr);
  EXPECT_NE(f.find("base_model.model.model.layers.1.mlp.gate_up_proj.lora_A.weight"), nullptr);
  EXPECT_EQ(f.find("base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight"), nullptr);
  const LoraConfig back = load_adapter_config(out);
  EXPECT_EQ(back.target_names(), plan.lora.target_names());
  std::ifstream cf(out / "adapter_config.json");
  auto tm = nlohmann::json::parse(cf).at("target_modules").get<std::vector<std::string>>();
  std::sort(tm.begin(), tm.end());
  EXPECT_EQ(tm, (std::vector<std::string>{"down_proj", "gate_up_proj", "o_proj", "qkv_proj"}));
  Params again(cfg, lora_layout(cfg, back), Tier::Host, Tag::IO);
  load_adapter(out, m.params(), again);
  EXPECT_EQ(std::memcmp(again.flat().data, m.trainable().flat().data, again.flat().bytes()), 0);

  std::vector<int32_t> ids(19);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 7 + 3) % 61);
  const int64_t N = int64_t(ids.size());
  std::vector<float> want(size_t(N * cfg.vocab)), got(want.size()), base(want.size());
  m.logits(ids.data(), N, want.data());
  Params merged(cfg, Tier::Host, Tag::IO);
  load_weights(dir, cfg, merged);
  merge_adapter(merged, m.trainable(), plan.lora);
  Model plain(cfg, *be, {N, 8});
  ASSERT_EQ(plain.params().flat().bytes(), merged.flat().bytes());
  std::memcpy(plain.params().flat().data, merged.flat().data, merged.flat().bytes());
  plain.logits(ids.data(), N, got.data());
  Model b(cfg, *be, {N, 8});
  load_weights(dir, cfg, b.params());
  b.logits(ids.data(), N, base.data());
  EXPECT_LE(rel_error(got, want), 3e-6);
  EXPECT_GT(rel_error(base, want), 1e-3);  // (the adapter does change the model)
}

// Through the CLI: --lora-rank alone on a Phi-3 adapts qkv_proj (the default q,v's linear), the adapter
// is PEFT's, and the model merged from it computes what base + adapter compute; a part alone is refused.
TEST(Phi3, CliLoraDefaultsToQkvAndMerges) {
  const auto dir = temp_dir();
  const fs::path m = dir / "m", a = dir / "a", merged = dir / "merged";
  nlohmann::json j = phi3_json(2);
  j["bos_token_id"] = 1, j["eos_token_id"] = 2;  // (Phi3Config's 32000 is past this vocabulary; saves write it)
  write_tiny_model(m, j, 9);
  write_tokens(dir / "t.bin", 400, 61, 2);
  const std::string data = (dir / "t.bin").string();
  CmdResult r = oomb_cmd(dir, fmt::format("train --model {} --data {} --seq-len 32 --chunk-size 16 --lr 1e-2 --steps 3 "
                                          "--lora-rank 4 --out {}", m.string(), data, a.string()));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("LoRA: rank 4, alpha 16, on qkv_proj ("));
  const auto cfg = nlohmann::json::parse(read_text(a / "adapter_config.json"));
  EXPECT_EQ(cfg["target_modules"], nlohmann::json::array({"qkv_proj"}));
  r = oomb_cmd(dir, fmt::format("merge --model {} --lora {} --out {}", m.string(), a.string(), merged.string()));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(SafetensorsModel::open(merged).find("model.layers.0.self_attn.qkv_proj.weight"), nullptr);
  auto first_loss = [&](const std::string& args) {  // one step of SGD at a tiny lr prints the loss
    const CmdResult s = oomb_cmd(dir, fmt::format("train --data {} --seq-len 32 --chunk-size 16 --steps 1 "
                                                  "--optimizer sgd --lr 1e-9 {}", data, args));
    EXPECT_EQ(s.code, 0) << s.out;
    const auto at = s.out.find("loss ");
    return at == std::string::npos ? -1.0 : std::stod(s.out.substr(at + 5));
  };
  const double adapted = first_loss(fmt::format("--model {} --lora {}", m.string(), a.string())),
               plain = first_loss(fmt::format("--model {}", merged.string())),
               base = first_loss(fmt::format("--model {}", m.string()));
  EXPECT_NEAR(plain, adapted, 1e-4 * adapted);  // the progress line's 4 decimals
  EXPECT_NE(adapted, base) << "the adapter changed nothing";
  EXPECT_THAT(oomb_cmd(dir, fmt::format("train --model {} --data {} --seq-len 32 --steps 1 --lora-rank 4 "
                                        "--lora-targets q,v", m.string(), data)).out,
              HasSubstr("q_proj and k_proj are one linear in its files"));
}

}  // namespace
