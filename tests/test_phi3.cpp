// Phi-3's checkpoints (hf/fused_projections.h): q, k and v are one qkv_proj, gate and up one
// gate_up_proj. The same weights saved as a Llama and as a Phi-3 load the same; the Phi-3 file's fused
// tensors are the Llama file's parts one after another; parts that are not adjacent in memory join the
// same way; a training checkpoint of a Phi-3 holds the fused tensors and resumes bit for bit; LoRA on a
// fused linear is refused, naming the way out.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "hf/checkpoint.h"
#include "hf/fused_projections.h"
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

TEST(Phi3, LoraOnAFusedLinearIsRefused) {
  const ModelConfig c = parse_config(phi3_json(2), "phi3");
  LoraConfig l;
  l.rank = 2;
  parse_lora_targets("q,v", l);
  EXPECT_THAT(error_of([&] { lora_layout(c, l); }),
              HasSubstr("LoRA target q_proj on Phi3ForCausalLM: Phi-3 fuses q, k and v into qkv_proj and gate and up "
                        "into gate_up_proj, which oomb does not adapt; use --lora-targets o,down"));
  parse_lora_targets("o,down", l);
  EXPECT_EQ(lora_layout(c, l).size(), 2u * 2 * 2);  // A and B of o and down in both layers
}

}  // namespace
