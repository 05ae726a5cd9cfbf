// The external oracle: loss and every parameter gradient of the same model, tokens and weights,
// computed by PyTorch in float64 (tests/oracle/torch_oracle.py), against the engine's fp32 results.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <vector>
#include <iostream>
#include <fmt/format.h>

#include "backend/backend.h"
#include "hf/checkpoint.h"
#include "hf/peft.h"
#include "train/model.h"
#include "hf/safetensors.h"
#include "model_fixture.h"
#include "test_util.h"

using namespace oomb;
using namespace oomb::testing;
using nlohmann::json;

namespace {

struct Case {
  std::string name;
  json cfg;
  int64_t N;
  int64_t chunk = 0;  // 0: the whole sequence
  int64_t page = 128;
  DType dtype = DType::F32;  // of the checkpoint both sides load
  LoraConfig lora;           // rank > 0: a LoRA adapter (random A and B) trains on the frozen model
  uint64_t dropout_key = 0;  // lora.dropout > 0: the sequence's window key (backend/dropout_mask.h)
  // --doc-mask: documents of these lengths (each ended by the separator, the vocabulary's last id;
  // their sum N), positions restarting in each, the separators' targets not trained
  std::vector<int64_t> docs;
};

// A PEFT adapter for c.lora with every tensor random (B too, so every path carries signal).
void write_random_adapter(const std::filesystem::path& dir, const ModelConfig& cfg, const Case& c) {
  Params base(cfg, Tier::Host, Tag::IO), t(cfg, lora_layout(cfg, c.lora), Tier::Host, Tag::IO);
  load_weights(dir / "model", cfg, base);
  init_lora(t, base, 5);
  const std::vector<float> r = randn(size_t(t.flat().numel()), 6, 0.2f);
  for (const ParamSpec& s : t.specs())
    for (int64_t i = 0; i < s.numel(); ++i) t.view(s).f()[i] += r[size_t(s.offset + i)];
  save_adapter(dir / "adapter", cfg, c.lora, t, (dir / "model").string());
}

// A case with its files written, waiting for the oracle's run.
struct Prepared {
  Case c;
  std::filesystem::path dir;
  std::vector<int32_t> toks;
  int32_t sep = -1;
  std::string args;  // torch_oracle.py's
};

// a path as one shell word (the jobs file's lines and the command are shell words)
std::string sh_word(const std::filesystem::path& p) {
  std::string q = "'";
  for (const char ch : p.string()) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

// The case's model, tokens, documents and adapter in its directory, and the oracle's arguments.
void prepare(const Case& c, Prepared& p) {
  SCOPED_TRACE(c.name);
  p.c = c;
  const auto dir = p.dir = temp_dir("_" + c.name);
  // A BF16 / F16 checkpoint is the engine's save of the fp32 weights (the same seed saved in F32 is
  // beside it): the oracle checks that every value is torch's rounding of the fp32 one, then both
  // sides load the same low-precision file, torch with its own decoding.
  const ModelConfig cfg = write_tiny_model(dir / "model", c.cfg, 11, c.dtype);
  std::string extra;
  if (c.dtype != DType::F32) {
    write_tiny_model(dir / "model_f32", c.cfg, 11, DType::F32);
    extra = " --expect-rounded-from " + sh_word(dir / "model_f32");
  }
  auto toks = write_tokens(dir / "tokens.bin", c.N + 1, cfg.vocab, 12);
  const int32_t sep = c.docs.empty() ? -1 : int32_t(cfg.vocab - 1);
  if (sep >= 0) {  // the separators where the documents end, nowhere else; the oracle's document ids
    for (int32_t& t : toks) t = t == sep ? sep - 1 : t;
    std::vector<uint32_t> doc_ids;
    for (size_t d = 0, at = 0; d < c.docs.size(); ++d) {
      for (int64_t i = 0; i < c.docs[d]; ++i) doc_ids.push_back(uint32_t(d));
      at += size_t(c.docs[d]);
      toks[at - 1] = sep;
    }
    ASSERT_EQ(int64_t(doc_ids.size()), c.N);
    std::ofstream(dir / "tokens.bin", std::ios::binary)
        .write(reinterpret_cast<const char*>(toks.data()), std::streamsize(toks.size() * 4));
    std::ofstream(dir / "docs.bin", std::ios::binary)
        .write(reinterpret_cast<const char*>(doc_ids.data()), std::streamsize(doc_ids.size() * 4));
    extra += fmt::format(" --doc-ids {} --ignore-targets-of {}", sh_word(dir / "docs.bin"), sep);
  }
  if (c.lora.on()) {
    write_random_adapter(dir, cfg, c);
    extra += " --lora " + sh_word(dir / "adapter");
    if (c.lora.dropout > 0) extra += fmt::format(" --lora-dropout-key {}", c.dropout_key);
  }
  p.toks = toks;
  p.sep = sep;
  p.args = fmt::format("{} --model {} --tokens {} --out {}{}", sh_word(dir / "oracle.log"), sh_word(dir / "model"),
                       sh_word(dir / "tokens.bin"), sh_word(dir / "oracle.safetensors"), extra);
}

// The engine's loss and gradients against the oracle's (its run done).
void compare(const Prepared& p, const std::filesystem::path& jobs_log) {
  const Case& c = p.c;
  SCOPED_TRACE(c.name);
  const auto& dir = p.dir;
  const auto& toks = p.toks;
  const int32_t sep = p.sep;
  ASSERT_TRUE(std::filesystem::exists(dir / "oracle.safetensors"))
      << "oracle failed: " << read_text(std::filesystem::exists(dir / "oracle.log") ? dir / "oracle.log" : jobs_log);

  auto be = make_cpu_backend();
  const ModelConfig loaded = load_config(dir / "model");
  ChunkPlan plan{c.chunk > 0 ? c.chunk : c.N, c.page};
  plan.lora = c.lora;
  plan.doc_sep = sep;
  Model model(loaded, *be, plan);
  load_weights(dir / "model", loaded, model.params());
  if (c.lora.on()) load_adapter(dir / "adapter", model.params(), model.trainable());
  model.enable_grads();
  model.set_dropout_key(c.dropout_key);
  std::vector<int32_t> ids(toks.begin(), toks.end() - 1), targets(toks.begin() + 1, toks.end());
  const LossStats ls = model.forward_backward(ids.data(), targets.data(), c.N, 1.0f);
  EXPECT_EQ(ls.targets, c.N - int64_t(c.docs.size()));  // (each separator's target is not trained)
  if (c.lora.dropout > 0) {  // control: dropout changed the training loss (evaluation drops nothing)
    const double ev = model.evaluate(ids.data(), targets.data(), c.N).loss_sum;
    EXPECT_GT(std::abs(ls.loss_sum - ev) / std::abs(ev), 1e-4) << "--lora-dropout changed nothing";
  }

  const SafetensorsModel ref = SafetensorsModel::open(dir / "oracle.safetensors");
  std::vector<float> ref_loss(1);
  ref.read_f32("loss", ref_loss.data());
  // the engine's fp32 against torch's float64; bounds about 3x the worst measured over the cases here
  // (were 1e-5 for both: 50-130x above the loss error, 5x above the gradients')
  const double loss_err = std::abs(ls.loss_sum / double(ls.targets) - ref_loss[0]) / std::abs(ref_loss[0]);
  EXPECT_LE(loss_err, 2.5e-7) << "loss";  // measured <= 7.5e-8 (mistral)
  int checked = 0;
  double worst = 0;
  std::set<std::string> read;
  for (const ParamSpec& s : model.grads().specs()) {
    std::vector<float> want(static_cast<size_t>(s.numel()));
    int64_t row0, total;
    const std::string name = hf_tensor_of(loaded, s.name, row0, total);  // (Phi-3: the oracle's are the fused)
    read.insert(name);
    if (total < 0) {
      ref.read_f32("grad." + name, want.data(), s.shape);
    } else {
      std::vector<float> whole(static_cast<size_t>(total * s.shape[1]));
      ref.read_f32("grad." + name, whole.data(), {total, s.shape[1]});
      std::copy_n(whole.begin() + row0 * s.shape[1], want.size(), want.begin());
    }
    const double err = rel_error(model.grads().view(s).f(), want.data(), want.size());
    EXPECT_LE(err, 6e-6) << s.name;  // measured <= 2.2e-6 (qwen2_4x6_over_32_C5_P4), most cases <= 1.2e-6
    worst = std::max(worst, err);
    ++checked;
  }
  std::cout << fmt::format("[ oracle   ] {:<24} N={:<3} loss {:.8f} vs {:.8f} (rel. error {:.1e}), worst gradient rel. error {:.2e} over {} tensors\n",
                           c.name, c.N, ls.loss_sum / double(ls.targets), ref_loss[0], loss_err, worst, checked);
  EXPECT_EQ(read.size(), ref.names().size() - 1) << "the oracle and the engine disagree on the parameter set";
}

// The oracle for every prepared case in one interpreter (torch_oracle.py --jobs: importing torch takes
// seconds, once a test rather than once a case), then each case compared.
void run_oracle(const std::vector<Prepared>& cases) {
  if (cases.empty()) return;
  const auto dir = temp_dir(".jobs");  // (each case's is "_" + its name)
  {
    std::ofstream jobs(dir / "jobs.txt");
    for (const Prepared& p : cases)
      if (!p.args.empty()) jobs << p.args << "\n";  // (empty: its preparation failed, and said so)
  }
  const std::string cmd = fmt::format("{} {} --jobs {} > {} 2>&1", sh_word(torch_python()),
                                      sh_word(source_dir() / "tests" / "oracle" / "torch_oracle.py"),
                                      sh_word(dir / "jobs.txt"), sh_word(dir / "jobs.log"));
  const int code = std::system(cmd.c_str());
  for (const Prepared& p : cases)
    if (!p.args.empty()) compare(p, dir / "jobs.log");
  EXPECT_EQ(code, 0) << read_text(dir / "jobs.log");
}

// check_against_oracle(c) writes the case's files at once; the oracle runs for all of a test's cases
// at its end (TearDown), and each is compared then, its name in the failures' trace.
class Oracle : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!torch_available(&why)) OOMB_MISSING_REFERENCE(why);
  }
  void TearDown() override { run_oracle(pending_); }
  void check_against_oracle(const Case& c) {
    for (const Prepared& p : pending_)  // (its directory would replace the earlier case's before the run)
      if (p.c.name == c.name) {
        ADD_FAILURE() << "two cases named " << c.name << " in one test";
        return;
      }
    pending_.emplace_back();
    prepare(c, pending_.back());
  }

 private:
  std::vector<Prepared> pending_;
};

// LoRA of rank 3, alpha 5 on `targets`
LoraConfig lora_of(const char* targets, bool rslora, bool embed_norms, double dropout = 0) {
  LoraConfig l;
  l.rank = 3;
  l.alpha = 5;
  l.rslora = rslora;
  l.dropout = dropout;
  l.train_embeddings_norms = embed_norms;
  parse_lora_targets(targets, l);
  return l;
}

json with(json j, const json& patch) {
  j.merge_patch(patch);
  return j;
}

// LoRA: non-zero A and B loaded from a PEFT directory, every adapter gradient (and, LongLoRA-style,
// the trainable embeddings and norms), full-sequence and chunked, rsLoRA, tied and untied.
TEST_F(Oracle, LoraAdaptersEmbeddingsAndNorms) {
  auto lora = [](const char* targets, bool rs, bool embed_norms) { return lora_of(targets, rs, embed_norms); };
  const json qwen3 = tiny_config_json("qwen3", 2);
  check_against_oracle({"lora_llama_all", tiny_config_json("llama", 2), 21, 0, 128, DType::F32,
                        lora("all", false, false)});
  check_against_oracle({"lora_llama_all_C5_P4", tiny_config_json("llama", 2), 21, 5, 4, DType::F32,
                        lora("all", false, false)});
  check_against_oracle({"lora_qwen2_tied_qv_rs_emb", with(tiny_config_json("qwen2", 1), {{"tie_word_embeddings", true}}),
                        19, 6, 4, DType::F32, lora("q,v", true, true)});
  check_against_oracle({"lora_qwen3_o_down_emb", qwen3, 17, 0, 128, DType::F32, lora("o,down,k", false, true)});
  // Phi-3: PEFT adapts the fused qkv_proj and gate_up_proj, one A shared by the parts, B's rows theirs
  json phi3 = tiny_config_json("llama", 2);
  phi3["architectures"] = {"Phi3ForCausalLM"}, phi3["model_type"] = "phi3", phi3["pad_token_id"] = nullptr;
  check_against_oracle({"lora_phi3_all_C5_P4", phi3, 21, 5, 4, DType::F32, lora("all", false, false)});
  check_against_oracle({"lora_phi3_qkv_down_emb", phi3, 17, 0, 128, DType::F32, lora("qkv_proj,down", true, true)});
}

// --lora-dropout: PEFT's dropout on each adapter's input, the oracle drawing oomb's masks from
// backend/dropout_mask.h's text: the loss and every adapter gradient, full-sequence and in chunks
// (each chunk's rows are the sequence's positions), LongLoRA's trainable embeddings and norms.
TEST_F(Oracle, LoraDropout) {
  auto lora = [](const char* targets, double p, bool embed_norms) { return lora_of(targets, false, embed_norms, p); };
  const json llama = tiny_config_json("llama", 2);
  check_against_oracle({"dropout_llama_all", llama, 21, 0, 128, DType::F32, lora("all", 0.3, false), 77});
  check_against_oracle({"dropout_llama_all_C5_P4", llama, 21, 5, 4, DType::F32, lora("all", 0.3, false), 77});
  check_against_oracle({"dropout_qwen2_tied_qvo_emb_C6", with(tiny_config_json("qwen2", 1), {{"tie_word_embeddings", true}}),
                        19, 6, 4, DType::F32, lora("q,v,o,down", 0.1, true), 0xfeedf00dcafe1234ull});
  // Phi-3's fused linears: one mask per adapter (PEFT drops qkv_proj's input once), keyed as q's, gate's
  json phi3 = tiny_config_json("llama", 2);
  phi3["architectures"] = {"Phi3ForCausalLM"}, phi3["model_type"] = "phi3", phi3["pad_token_id"] = nullptr;
  check_against_oracle({"dropout_phi3_all_C5_P4", phi3, 21, 5, 4, DType::F32, lora("all", 0.3, false), 77});
}

TEST_F(Oracle, LlamaKvHeadRatios) {
  for (int64_t g : {4, 2, 1})
    check_against_oracle({fmt::format("llama_kv{}", g), tiny_config_json("llama", g), 23});
}

TEST_F(Oracle, LlamaTiedAndBiases) {
  const json base = tiny_config_json("llama", 2);
  check_against_oracle({"llama_tied", with(base, {{"tie_word_embeddings", true}}), 19});
  check_against_oracle({"llama_bias", with(base, {{"attention_bias", true}, {"mlp_bias", true}}), 19});
}

TEST_F(Oracle, Qwen2TiedUntiedAndRatios) {
  check_against_oracle({"qwen2_tied_kv1", with(tiny_config_json("qwen2", 1), {{"tie_word_embeddings", true}}), 29});
  check_against_oracle({"qwen2_untied_kv4", tiny_config_json("qwen2", 4), 17});
}

TEST_F(Oracle, ChunkRecurrentRunsAgree) {
  // chunks shorter than a page, odd chunks across page boundaries, GQA, both architectures
  check_against_oracle({"chunked_llama_C5_P16", tiny_config_json("llama", 2), 37, 5, 16});
  check_against_oracle({"chunked_qwen2_C13_P16", tiny_config_json("qwen2", 1), 41, 13, 16});
  // past one loss tile (256 tokens) and many attention blocks
  check_against_oracle({"chunked_qwen2_N300_C64", tiny_config_json("qwen2", 2), 300, 64, 16});
  check_against_oracle({"chunked_llama_C16_P16",
                        with(tiny_config_json("llama", 4), {{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0},
                                                                              {"original_max_position_embeddings", 16}}}}),
                        48, 16, 16});
}

// Low-precision checkpoints: saved by the engine, loaded by the engine and by torch from the same file
TEST_F(Oracle, Bf16AndF16Checkpoints) {
  check_against_oracle({"llama_bf16", tiny_config_json("llama", 2), 19, 0, 128, DType::BF16});
  check_against_oracle({"qwen2_f16_C7_P16", tiny_config_json("qwen2", 1), 23, 7, 16, DType::F16});
}

// head count x head dim != hidden (as in Qwen3: 16 x 128 over 1024)
TEST_F(Oracle, HeadsTimesHeadDimIsNotHidden) {
  check_against_oracle({"llama_4x16_over_32", with(tiny_config_json("llama", 2), {{"head_dim", 16}}), 21});
  check_against_oracle({"qwen2_4x6_over_32_C5_P4", with(tiny_config_json("qwen2", 1), {{"head_dim", 6}}), 19, 5, 4});
}

// Qwen3: per-head q/k RMSNorm before RoPE, head_dim apart from hidden / heads, no qkv bias (and
// attention_bias on q/k/v/o when asked), tied and untied, GQA, full-sequence and chunked.
TEST_F(Oracle, Qwen3) {
  const nlohmann::json base = tiny_config_json("qwen3", 2);
  check_against_oracle({"qwen3_untied_kv2", base, 23});
  check_against_oracle({"qwen3_tied_kv1", with(tiny_config_json("qwen3", 1), {{"tie_word_embeddings", true}}), 19});
  check_against_oracle({"qwen3_4x16_over_32_bias", with(base, {{"head_dim", 16}, {"attention_bias", true}}), 21});
  check_against_oracle({"chunked_qwen3_C7_P4", with(tiny_config_json("qwen3", 4), {{"head_dim", 6}}), 29, 7, 4});
}

// Sliding windows (a query sees the keys less than the window behind it), full-sequence and
// chunked with the window smaller than, equal to and larger than the chunk; Qwen2 from
// max_window_layers on, Qwen3 by layer_types.
TEST_F(Oracle, SlidingWindows) {
  const nlohmann::json m = tiny_config_json("mistral", 2);
  check_against_oracle({"mistral_window5", with(m, {{"sliding_window", 5}}), 23});
  check_against_oracle({"mistral_window5_C9_P4", with(m, {{"sliding_window", 5}}), 31, 9, 4});
  check_against_oracle({"mistral_window9_C9_P4", with(m, {{"sliding_window", 9}}), 31, 9, 4});
  check_against_oracle({"mistral_window17_C6_P4", with(m, {{"sliding_window", 17}}), 41, 6, 4});
  check_against_oracle({"qwen2_window6_from_layer1_C7_P4",
                        with(tiny_config_json("qwen2", 2),
                             {{"use_sliding_window", true}, {"sliding_window", 6}, {"max_window_layers", 1}}),
                        29, 7, 4});
  check_against_oracle({"qwen3_window4_layer0_C5_P2",
                        with(tiny_config_json("qwen3", 1), {{"use_sliding_window", true}, {"sliding_window", 4},
                                                            {"layer_types", {"sliding_attention", "full_attention"}}}),
                        27, 5, 2});
}

TEST_F(Oracle, Mistral) { check_against_oracle({"mistral", tiny_config_json("mistral", 2), 17}); }

// SmolLM3: NoPE layers (no RoPE on q and k), as no_rope_layers lists them or SmolLM3Config's
// no_rope_layer_interval makes them; its default tie (absent: tied); attention and MLP biases; its
// sliding window, which SmolLM3Config puts on the NoPE layers; YaRN (its 128K) over the RoPE layers;
// full-sequence and chunked; LoRA.
TEST_F(Oracle, SmolLM3NoPeLayers) {
  const json s = tiny_config_json("smollm3", 2);
  json untold_tie = with(s, {{"no_rope_layers", {1, 0}}});
  untold_tie.erase("tie_word_embeddings");
  check_against_oracle({"smollm3_nope1_tied_by_default", untold_tie, 23});
  // (a NoPE layer's k bias adds one constant to each query's scores: softmax ignores it, so its gradient
  // is zero but for rounding, no relative error to hold; attention_bias goes where every layer turns)
  check_against_oracle({"smollm3_nope0_C7_P4_mlp_bias", with(s, {{"no_rope_layers", {0, 1, 1}}, {"mlp_bias", true}}),
                        29, 7, 4});
  check_against_oracle({"smollm3_rope_both_attention_bias", with(s, {{"no_rope_layers", {1, 1}},
                                                                     {"attention_bias", true}}), 17});
  check_against_oracle({"smollm3_interval2", with(s, {{"no_rope_layer_interval", 2}}), 19});
  check_against_oracle({"smollm3_window_on_nope_C6_P4",
                        with(s, {{"no_rope_layers", {1, 0}}, {"use_sliding_window", true}, {"sliding_window", 5}}), 31,
                        6, 4});
  check_against_oracle({"smollm3_yarn_nope_C9_P4",
                        with(s, {{"no_rope_layers", {0, 1}}, {"rope_scaling", {{"rope_type", "yarn"}, {"factor", 2.0},
                                                                             {"original_max_position_embeddings", 16}}}}),
                        37, 9, 4});
  check_against_oracle({"smollm3_lora_C5_P4", with(s, {{"no_rope_layers", {1, 0}}}), 21, 5, 4, DType::F32,
                        lora_of("all", false, true)});
}

// Granite: the embedding's output, each residual branch, attention's scores and the logits scaled by
// the file's multipliers (none a power of two, attention's apart from 1/sqrt(head_dim)): untied and
// tied with GQA, biases and a pad row, chunked, LoRA with dropout (LongLoRA's embeddings and norms),
// a bf16 checkpoint; and GraniteConfig's defaults (1.0 each: attention's scale 1, not 1/sqrt(8)).
TEST_F(Oracle, Granite) {
  const json mults = {{"embedding_multiplier", 3.5}, {"residual_multiplier", 0.37}, {"attention_multiplier", 0.21},
                      {"logits_scaling", 2.7}};
  const json g = with(tiny_config_json("granite", 2), mults);
  check_against_oracle({"granite_untied_kv2", g, 23});
  check_against_oracle({"granite_tied_kv1_bias_pad",
                        with(with(tiny_config_json("granite", 1), mults),
                             {{"tie_word_embeddings", true}, {"attention_bias", true}, {"mlp_bias", true},
                              {"pad_token_id", 0}}),
                        19});
  check_against_oracle({"granite_C7_P4", g, 29, 7, 4});
  check_against_oracle({"granite_defaults", tiny_config_json("granite", 4), 17});
  check_against_oracle({"granite_lora_dropout_C5_P4", g, 21, 5, 4, DType::F32, lora_of("all", false, true, 0.5),
                        91});
  check_against_oracle({"granite_bf16", g, 19, 0, 128, DType::BF16});
}

// OLMo 2: each branch reads the residual stream and its output is normalized (post_attention_layernorm,
// post_feedforward_layernorm), q and k normalized over the whole projection before RoPE: untied with
// GQA and Olmo2Config's pad (1), tied with attention_bias, chunked (the recompute and the pages' dK/dV
// through the post-norms), YaRN chunked, LoRA with dropout and LongLoRA's norms (OLMo 2's names), a
// bf16 checkpoint, and --sweep's other order is the layer tests' (test_sweep).
TEST_F(Oracle, Olmo2PostNorms) {
  const json o = tiny_config_json("olmo2", 2);
  check_against_oracle({"olmo2_kv2_pad1", o, 23});
  check_against_oracle({"olmo2_tied_kv1_attention_bias",
                        with(tiny_config_json("olmo2", 1), {{"tie_word_embeddings", true}, {"attention_bias", true}}),
                        19});
  check_against_oracle({"olmo2_C7_P4", o, 29, 7, 4});
  check_against_oracle({"olmo2_yarn_C9_P4",
                        with(o, {{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 2.0},
                                                   {"original_max_position_embeddings", 16}}}}),
                        37, 9, 4});
  check_against_oracle({"olmo2_lora_dropout_C5_P4", o, 21, 5, 4, DType::F32, lora_of("all", false, true, 0.5), 77});
  check_against_oracle({"olmo2_bf16", o, 19, 0, 128, DType::BF16});
  // heads wider than the hidden size (H D = 64, d = 32: q_norm wider than every other norm), LoRA with
  // the norms frozen (their gradients go to the layer's scratch, as wide as q_norm)
  check_against_oracle({"olmo2_head_dim16_lora_frozen_norms_C6_P4", with(o, {{"head_dim", 16}}), 23, 6, 4, DType::F32,
                        lora_of("all", false, false)});
}

// OLMo 3: OLMo 2 with sliding windows on three layers of four (Olmo3Config's layer_types: four layers
// here) or as layer_types says, the sliding layers turning q and k by the plain RoPE of rope_theta
// while the full layers take the configured YaRN (as OLMo-core trains them), chunked over the window.
TEST_F(Oracle, Olmo3SlidingLayersAndTheirRope) {
  const json o = tiny_config_json("olmo3", 2);
  const json yarn = {{"rope_type", "yarn"}, {"factor", 2.0}, {"original_max_position_embeddings", 16}};
  check_against_oracle({"olmo3_4layers_window5_yarn_C9_P4",
                        with(o, {{"num_hidden_layers", 4}, {"sliding_window", 5}, {"rope_scaling", yarn}}), 37, 9, 4});
  check_against_oracle({"olmo3_layer_types_window6_yarn_C7_P4",
                        with(o, {{"sliding_window", 6}, {"layer_types", {"full_attention", "sliding_attention"}},
                                 {"rope_scaling", yarn}}),
                        29, 7, 4});
  // transformers 5's rope_parameters per layer type: the sliding layers' own theta, the full ones' YaRN
  check_against_oracle({"olmo3_rope_per_layer_type_C9_P4",
                        with(o, {{"num_hidden_layers", 4}, {"sliding_window", 5},
                                 {"rope_parameters", {{"full_attention", {{"rope_type", "yarn"}, {"rope_theta", 5e5},
                                                                          {"factor", 2.0},
                                                                          {"original_max_position_embeddings", 16}}},
                                                      {"sliding_attention", {{"rope_type", "default"},
                                                                             {"rope_theta", 100.0}}}}}}),
                        37, 9, 4});
  check_against_oracle({"olmo3_default_window_tied_bias", with(o, {{"tie_word_embeddings", true},
                                                                   {"attention_bias", true}}), 19});
}

// Gemma 3: each branch's input and output normalized, every norm scaling by 1 + w, q and k normalized per
// head (heads of 16: q twice as wide as hidden, as Gemma's), GELU's tanh approximation gating the MLP, the
// embedding times sqrt(hidden) and the scores times query_pre_attn_scalar^-1/2; five sliding layers of six
// (here: six layers) turning q and k by the plain
// RoPE of rope_local_base_freq while the full layer takes the configured linear scaling of rope_theta;
// chunked over the window; as layer_types says; transformers 5's rope_parameters per layer type; tied (its
// default) with attention_bias and its pad (0); LoRA with dropout and LongLoRA's four layer norms; a bf16
// checkpoint; LoRA with the norms frozen.
TEST_F(Oracle, Gemma3SandwichNormsAndGelu) {
  const json o = with(tiny_config_json("gemma3_text", 2),
                      {{"tie_word_embeddings", nullptr}, {"pad_token_id", nullptr}, {"query_pre_attn_scalar", 20},
                       {"rope_theta", 1e6}, {"rope_local_base_freq", 100.0}, {"head_dim", 16}});
  const json linear = {{"rope_type", "linear"}, {"factor", 2.0}};
  check_against_oracle({"gemma3_6layers_window5_linear_C9_P4",
                        with(o, {{"num_hidden_layers", 6}, {"sliding_window", 5}, {"rope_scaling", linear}}), 37, 9,
                        4});
  check_against_oracle({"gemma3_layer_types_window6_kv1_untied_C7_P4",
                        with(with(o, {{"sliding_window", 6}, {"layer_types", {"full_attention", "sliding_attention"}},
                                      {"tie_word_embeddings", false}}),
                             {{"num_key_value_heads", 1}}),
                        29, 7, 4});
  check_against_oracle({"gemma3_rope_per_layer_type_C9_P4",
                        with(o, {{"num_hidden_layers", 3}, {"sliding_window", 5}, {"sliding_window_pattern", 3},
                                 {"rope_parameters", {{"full_attention", {{"rope_type", "linear"}, {"rope_theta", 5e5},
                                                                          {"factor", 3.0}}},
                                                      {"sliding_attention", {{"rope_type", "default"},
                                                                             {"rope_theta", 50.0}}}}}}),
                        37, 9, 4});
  // (8 heads, num_key_value_heads absent: Gemma3TextConfig's 4, not the head count)
  check_against_oracle({"gemma3_defaults_kv4_of_8_bias_pad0",
                        with(tiny_config_json("gemma3_text", 4),
                             {{"tie_word_embeddings", nullptr}, {"pad_token_id", nullptr}, {"attention_bias", true},
                              {"num_attention_heads", 8}, {"num_key_value_heads", nullptr}}),
                        19});
  check_against_oracle({"gemma3_lora_dropout_C5_P4", o, 21, 5, 4, DType::F32, lora_of("all", false, true, 0.5), 83});
  // the norms frozen: their gradients (the post-norms' too) go to the layer's scratch
  check_against_oracle({"gemma3_lora_frozen_norms_C6_P4", o, 23, 6, 4, DType::F32, lora_of("all", false, false)});
  check_against_oracle({"gemma3_bf16", o, 19, 0, 128, DType::BF16});
}

// GLM (GlmForCausalLM): RoPE on interleaved pairs (2i, 2i + 1) of the first half of each head (GlmConfig's
// partial_rotary_factor 0.5, by default), q/k/v biases (attention_bias, true by default) and none on o_proj,
// gate and up fused in the checkpoint: chunked; the whole head turned, without biases; YaRN over the part
// turned; LoRA with dropout on every linear (the fused gate_up_proj one adapter, one mask) and LongLoRA's
// norms. GLM-4 (Glm4ForCausalLM): the same with a norm after each branch too (post_self_attn_layernorm,
// post_mlp_layernorm; its post_attention_layernorm normalizes the MLP's input): chunked; tied with a pad;
// LoRA with its four layer norms trained, and frozen; a bf16 checkpoint.
TEST_F(Oracle, GlmInterleavedPartialRopeAndGlm4Norms) {
  const json glm = with(tiny_config_json("glm", 2), {{"head_dim", 16}});  // (RoPE on 8 of 16 dims)
  check_against_oracle({"glm_defaults_C7_P4", glm, 29, 7, 4});
  check_against_oracle({"glm_whole_head_no_bias", with(glm, {{"partial_rotary_factor", 1.0},
                                                             {"attention_bias", false}}), 19});
  check_against_oracle({"glm_yarn_C9_P4", with(glm, {{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 2.0},
                                                                       {"original_max_position_embeddings", 16}}}}),
                        37, 9, 4});
  check_against_oracle({"glm_lora_dropout_C5_P4", glm, 21, 5, 4, DType::F32, lora_of("all", false, true, 0.5), 87});
  const json glm4 = tiny_config_json("glm4", 2);
  check_against_oracle({"glm4_C7_P4", glm4, 29, 7, 4});
  check_against_oracle({"glm4_tied_pad_C6_P4", with(glm4, {{"tie_word_embeddings", true}, {"pad_token_id", 7}}), 23, 6,
                        4});
  check_against_oracle({"glm4_lora_norms_C5_P4", glm4, 21, 5, 4, DType::F32, lora_of("all", false, true)});
  check_against_oracle({"glm4_lora_frozen_norms", glm4, 19, 0, 128, DType::F32, lora_of("gate_up,down", false, false)});
  check_against_oracle({"glm4_bf16", glm4, 19, 0, 128, DType::BF16});
}

// Phi-3: fused q/k/v and gate/up in the checkpoint, a sliding window on every layer, and LongRoPE,
// whose long factors serve a sequence past original_max_position_embeddings (16 here) and its short
// ones a sequence within it.
TEST_F(Oracle, Phi3AndLongRope) {
  json phi3 = tiny_config_json("llama", 2);
  phi3["architectures"] = {"Phi3ForCausalLM"}, phi3["model_type"] = "phi3", phi3["pad_token_id"] = nullptr;
  check_against_oracle({"phi3_window5_C5_P4", with(phi3, {{"sliding_window", 5}}), 17, 5, 4});
  // a pad token (transformers' padding_idx) that the sequence holds twice: its embedding row takes no
  // gradient from the lookup; tied, the lm_head's still reaches it
  const auto toks = write_tokens(temp_dir("_pad") / "t.bin", 18, 61, 12);  // check_against_oracle's tokens
  ASSERT_GE(std::count(toks.begin(), toks.end() - 1, toks[3]), 2);
  check_against_oracle({"phi3_pad_C5_P4", with(phi3, {{"pad_token_id", toks[3]}}), 17, 5, 4});
  check_against_oracle({"llama_pad_tied", with(tiny_config_json("llama", 2), {{"pad_token_id", toks[3] - 61},
                                                                             {"tie_word_embeddings", true}}), 17});
  std::vector<double> shorts, longs;
  for (int i = 0; i < 4; ++i) shorts.push_back(1.0 + 0.1 * i), longs.push_back(1.5 + 2.0 * i * i);
  const json longrope = with(phi3, {{"original_max_position_embeddings", 16},
                                    {"rope_scaling", {{"type", "longrope"}, {"short_factor", shorts},
                                                      {"long_factor", longs}}}});
  check_against_oracle({"phi3_longrope_long_C7_P4", longrope, 23, 7, 4});
  // --doc-mask: transformers chooses by max(position_ids) + 1, the longest document's length; 40
  // tokens of documents within 16 take the short factors, one of 25 makes them all long
  Case docs{"phi3_longrope_docs_short_C7_P4", longrope, 40, 7, 4};
  docs.docs = {10, 14, 16};
  check_against_oracle(docs);
  docs.name = "phi3_longrope_docs_long_C7_P4", docs.docs = {9, 25, 6};
  check_against_oracle(docs);
  check_against_oracle({"phi3_longrope_short", longrope, 16});
  check_against_oracle({"phi3_su_kv1", with(with(longrope, {{"num_key_value_heads", 1}}),
                                            {{"rope_scaling", {{"type", "su"}, {"short_factor", shorts},
                                                               {"long_factor", longs}}}}), 19});
  // LongRoPE on a Llama, with its own attention_factor
  check_against_oracle({"llama_longrope_attention_factor",
                        with(tiny_config_json("llama", 2),
                             {{"original_max_position_embeddings", 8},
                              {"rope_scaling", {{"rope_type", "longrope"}, {"short_factor", shorts},
                                                {"long_factor", longs}, {"attention_factor", 1.25}}}}),
                        21, 6, 4});
  // transformers 5's form: the length and the factor inside rope_parameters
  json v5 = tiny_config_json("qwen2", 2);
  v5.erase("rope_theta");
  v5["rope_parameters"] = {{"rope_type", "longrope"}, {"rope_theta", 500.0}, {"short_factor", shorts},
                           {"long_factor", longs}, {"original_max_position_embeddings", 8}, {"factor", 3.0}};
  check_against_oracle({"qwen2_longrope_parameters", v5, 19});
}

// Phi-3's partial rotation (Phi-4-mini: partial_rotary_factor 0.75): each head's first int(8 f) dims
// turn, the others pass through, with the default RoPE and with LongRoPE's shorter factor lists
TEST_F(Oracle, Phi3PartialRotary) {
  json phi3 = tiny_config_json("llama", 2);
  phi3["architectures"] = {"Phi3ForCausalLM"}, phi3["model_type"] = "phi3", phi3["pad_token_id"] = nullptr;
  check_against_oracle({"phi3_partial_half_C5_P4", with(phi3, {{"partial_rotary_factor", 0.5}}), 17, 5, 4});
  const json phi4mini = with(phi3, {{"partial_rotary_factor", 0.75}, {"original_max_position_embeddings", 16},
                                    {"tie_word_embeddings", true},
                                    {"rope_scaling", {{"type", "longrope"}, {"short_factor", {1.0, 1.25, 1.5}},
                                                      {"long_factor", {2.0, 6.0, 18.0}}}}});
  check_against_oracle({"phi4mini_longrope_long_C7_P4", phi4mini, 23, 7, 4});
  check_against_oracle({"phi4mini_longrope_short", phi4mini, 16});
  // transformers 5's form: the factor inside rope_parameters
  json v5 = phi3;
  v5.erase("rope_theta");
  v5["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500.0}, {"partial_rotary_factor", 0.25}};
  check_against_oracle({"phi3_partial_rope_parameters", v5, 19});
}

TEST_F(Oracle, RopeTypes) {
  const json base = tiny_config_json("llama", 2);
  check_against_oracle({"rope_linear", with(base, {{"rope_scaling", {{"rope_type", "linear"}, {"factor", 2.5}}}}), 31});
  check_against_oracle({"rope_llama3",
                        with(base, {{"rope_theta", 500.0},
                                    {"rope_scaling",
                                     {{"rope_type", "llama3"}, {"factor", 4.0}, {"low_freq_factor", 1.0},
                                      {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 16}}}}),
                        31});
  check_against_oracle(
      {"rope_yarn", with(base, {{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0},
                                                   {"original_max_position_embeddings", 16}}}}), 31});
  check_against_oracle({"rope_yarn_mscale",
                        with(base, {{"rope_scaling", {{"type", "yarn"}, {"factor", 3.0}, {"mscale", 0.8},
                                                      {"mscale_all_dim", 0.5}, {"beta_fast", 16}, {"beta_slow", 2}}}}),
                        31});
  // transformers 5 style: everything inside rope_parameters
  json v5 = tiny_config_json("qwen2", 2);
  v5.erase("rope_theta");
  v5["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 1000.0}, {"factor", 2.0},
                           {"original_max_position_embeddings", 32}, {"truncate", false}};
  check_against_oracle({"rope_parameters_yarn", v5, 31});
  json v5d = tiny_config_json("llama", 1);
  v5d.erase("rope_theta");
  v5d["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 100.0}};
  check_against_oracle({"rope_parameters_default", v5d, 23});
}

}  // namespace
