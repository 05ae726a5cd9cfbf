// Model-level behaviour: determinism, memory tags, SGD semantics, checkpoint round trips, bad checkpoints.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <omp.h>
#include <sstream>

#include "backend/backend.h"
#include "data/packed_tokens.h"
#include "hf/checkpoint.h"
#include "train/model.h"
#include "hf/safetensors.h"
#include "model/init.h"
#include "model_fixture.h"
#include "test_util.h"
#include "train/optimizer.h"
#include "train/trainer.h"

using namespace oomb;
using namespace oomb::testing;
using ::testing::HasSubstr;

namespace {

struct Loaded {
  std::unique_ptr<Backend> be = make_cpu_backend();
  ModelConfig cfg;
  std::unique_ptr<Model> model;
  Loaded(const std::filesystem::path& dir, int64_t N) : cfg(load_config(dir)) {
    model = std::make_unique<Model>(cfg, *be, ChunkPlan{N, 128});
    load_weights(dir, cfg, model->params());
    model->enable_grads();
  }
};

// One plain SGD step (lr 0.5, no clipping) over `accum` windows of N; returns the parameters before it.
std::vector<float> sgd_step(Loaded& m, TokenSource& data, int64_t N, int64_t accum) {
  std::vector<float> p0(m.model->params().flat().f(), m.model->params().flat().f() + param_count(m.cfg));
  TrainOptions o{N, 1, accum, 1, {}, ""};
  o.optim.kind = "sgd";
  o.optim.lr = 0.5f;
  o.optim.grad_clip = 0;
  std::ostringstream log;
  train(*m.model, data, o, log);
  return p0;
}

TEST(Model, SameInputsGiveTheSameBits) {
  const auto dir = temp_dir();
  write_tiny_model(dir, tiny_config_json("qwen2", 2), 3);
  const auto toks = write_tokens(dir / "t.bin", 41, 61, 4);
  std::vector<std::vector<float>> runs;
  for (int r = 0; r < 2; ++r) {
    Loaded m(dir, 40);
    m.model->forward_backward(toks.data(), toks.data() + 1, 40, 1.0f);
    const Tensor& g = m.model->grads().flat();
    runs.emplace_back(g.f(), g.f() + g.numel());
  }
  EXPECT_EQ(0, std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * 4));
}

TEST(Model, EveryAllocationIsTaggedWithTheExpectedSize) {
  const auto dir = temp_dir();
  const ModelConfig c = write_tiny_model(dir, tiny_config_json("llama", 2), 3);
  const int64_t N = 50;
  Accountant& acc = Accountant::global();
  const auto before = [&](Tag t) { return acc.get(Tier::Host, t).current; };
  const int64_t w0 = before(Tag::Weights), g0 = before(Tag::Grads), o0 = before(Tag::Optimizer);
  {
    Loaded m(dir, N);
    const int64_t P = param_count(c);
    EXPECT_EQ(before(Tag::Weights) - w0, P * 4);
    EXPECT_EQ(before(Tag::Grads) - g0, P * 4);
    EXPECT_GT(before(Tag::Activations), 0);
    Optimizer opt({}, m.model->params(), m.model->grads(), *m.be);
    EXPECT_EQ(before(Tag::Optimizer) - o0, 2 * P * 4);  // AdamW: two fp32 moments
  }
  EXPECT_EQ(before(Tag::Weights), w0) << "weights freed with the model";
  EXPECT_EQ(before(Tag::Optimizer), o0);
}

TEST(Model, SgdStepMovesEveryParameterByMinusLrTimesGradient) {
  const auto dir = temp_dir();
  write_tiny_model(dir, tiny_config_json("llama", 2), 5);
  write_tokens(dir / "t.bin", 64, 61, 6);
  Loaded ref(dir, 32);
  PackedTokens data(std::make_unique<FileTokens>(dir / "t.bin", TokenFormat::U32), 61, {});
  std::vector<int32_t> ids(32), tg(32);
  data.window(0, 32, ids.data(), tg.data());
  ref.model->forward_backward(ids.data(), tg.data(), 32, 1.0f);
  Loaded m(dir, 32);
  const std::vector<float> p0 = sgd_step(m, data, 32, 1);
  const float* p1 = m.model->params().flat().f();
  const float* g = ref.model->grads().flat().f();
  for (size_t i = 0; i < p0.size(); ++i) ASSERT_EQ(p1[i], p0[i] - 0.5f * g[i]) << "parameter element " << i;
}

TEST(Model, GradAccumulationAveragesConsecutiveWindows) {
  const auto dir = temp_dir();
  write_tiny_model(dir, tiny_config_json("llama", 2), 5);
  write_tokens(dir / "t.bin", 100, 61, 6);
  PackedTokens data(std::make_unique<FileTokens>(dir / "t.bin", TokenFormat::U32), 61, {});
  std::vector<std::vector<float>> g;
  for (int64_t w : {0, 1}) {  // the gradient of windows 0 and 1 on their own
    Loaded one(dir, 16);
    one.model->forward_backward([&](int64_t t0, int64_t n, int32_t* i, int32_t* t) { data.read(w, 16, t0, n, i, t); },
                                16, 1.0f);
    g.emplace_back(one.model->grads().flat().f(), one.model->grads().flat().f() + param_count(one.cfg));
  }
  Loaded m(dir, 16);
  const std::vector<float> p0 = sgd_step(m, data, 16, 2);  // one step over windows 0 and 1
  const float* p1 = m.model->params().flat().f();
  for (size_t i = 0; i < p0.size(); ++i)
    // the formula in fp32, a few ulps of the parameter apart
    ASSERT_NEAR(p1[i], p0[i] - 0.5f * 0.5f * (g[0][i] + g[1][i]), 1e-6f * (1 + std::abs(p0[i]))) << i;
}

TEST(Model, EvaluateMatchesTheTrainingLossAndTouchesNoGradient) {
  const auto dir = temp_dir();
  write_tiny_model(dir, tiny_config_json("qwen2", 1), 5);
  const auto toks = write_tokens(dir / "t.bin", 70, 61, 7);
  Loaded m(dir, 16);  // chunks of 16 over 69 tokens
  const LossStats ev = m.model->evaluate(toks.data(), toks.data() + 1, 69);
  EXPECT_EQ(m.model->kv().pages_in_use(), 0);
  EXPECT_EQ(Optimizer::grad_norm(m.model->grads(), *m.be), 0.0);
  const LossStats tr = m.model->forward_backward(toks.data(), toks.data() + 1, 69, 1.0f);
  EXPECT_EQ(ev.targets, 69);
  EXPECT_NEAR(ev.loss_sum, tr.loss_sum, 1e-9 * std::abs(tr.loss_sum));
  EXPECT_EQ(ev.correct, tr.correct);
}

TEST(Model, TrainingLowersTheLossOnRepeatedData) {
  const auto dir = temp_dir();
  write_tiny_model(dir, tiny_config_json("qwen2", 2), 8);
  write_tokens(dir / "t.bin", 33, 61, 9);  // one window, seen every step
  Loaded m(dir, 32);
  PackedTokens data(std::make_unique<FileTokens>(dir / "t.bin", TokenFormat::U32), 61, {});
  TrainOptions o{32, 30, 1, 100, {}, ""};
  o.optim.lr = 1e-2f;
  std::vector<double> losses;
  std::ostringstream log;
  train(*m.model, data, o, log, [&](const StepStats& s) { losses.push_back(s.loss); });
  EXPECT_LT(losses.back(), 0.5 * losses.front());
}

TEST(Checkpoint, SaveInLoadedDtypeAndReload) {
  const auto dir = temp_dir();
  const ModelConfig c = write_tiny_model(dir / "in", tiny_config_json("llama", 1), 2, DType::BF16);
  Loaded m(dir / "in", 8);
  EXPECT_EQ(load_weights(dir / "in", c, m.model->params()), DType::BF16);
  save_model(dir / "out", c, m.model->params(), DType::BF16, dir / "in");
  const SafetensorsModel st = SafetensorsModel::open(dir / "out");
  EXPECT_EQ(st.get("model.embed_tokens.weight").dtype, DType::BF16);
  Loaded again(dir / "out", 8);
  const Tensor& a = m.model->params().flat();
  EXPECT_EQ(0, std::memcmp(a.data, again.model->params().flat().data, a.bytes()));
  EXPECT_EQ(load_config(dir / "out").hidden, c.hidden);
}

TEST(Checkpoint, TiedConfigRejectsADifferentLmHead) {
  const auto dir = temp_dir();
  write_tiny_model(dir, tiny_config_json("llama", 2), 2);  // untied: lm_head differs from the embedding
  nlohmann::json j = tiny_config_json("llama", 2);
  j["tie_word_embeddings"] = true;
  write_file_atomic(dir / "config.json", j.dump());
  const ModelConfig tied = load_config(dir);
  Params p(tied, Tier::Host, Tag::Weights);
  EXPECT_THAT(error_of([&] { load_weights(dir, tied, p); }), HasSubstr("'lm_head.weight' differs"));
}

TEST(Checkpoint, SavingLeavesOtherFilesAlone) {
  const auto dir = temp_dir();
  const ModelConfig c = write_tiny_model(dir, tiny_config_json("llama", 2), 2);
  write_bytes(dir / "model_backup.safetensors", "mine");
  write_bytes(dir / "model-lora.safetensors", "mine too");
  Params p(c, Tier::Host, Tag::Weights);
  load_weights(dir, c, p);
  save_model(dir, c, p, DType::F32);
  EXPECT_EQ(read_text(dir / "model_backup.safetensors"), "mine");
  EXPECT_EQ(read_text(dir / "model-lora.safetensors"), "mine too");
}

TEST(Checkpoint, BadCheckpointsNameTheTensor) {
  const auto dir = temp_dir();
  const ModelConfig c = write_tiny_model(dir, tiny_config_json("llama", 2), 2);
  auto be = make_cpu_backend();
  // a config with biases the checkpoint lacks
  ModelConfig biased = c;
  biased.qkv_bias = true;
  Params pb(biased, Tier::Host, Tag::Weights);
  EXPECT_THAT(error_of([&] { load_weights(dir, biased, pb); }),
              HasSubstr("tensor 'model.layers.0.self_attn.q_proj.bias' is missing"));
  // a config with fewer layers than the checkpoint holds
  ModelConfig shallow = c;
  shallow.layers = 1;
  Params ps(shallow, Tier::Host, Tag::Weights);
  EXPECT_THAT(error_of([&] { load_weights(dir, shallow, ps); }), HasSubstr("'model.layers.1."));
  // a shape mismatch
  ModelConfig wide = c;
  wide.intermediate = 40;
  Params pw(wide, Tier::Host, Tag::Weights);
  EXPECT_THAT(error_of([&] { load_weights(dir, wide, pw); }), HasSubstr("gate_proj.weight"));
}

}  // namespace

// A non-finite loss stops the run naming the step; a non-finite gradient names the first tensor
// that holds it; --skip-nonfinite skips such a step and leaves every parameter as it was.
TEST(Model, NonFiniteLossOrGradientIsNamedOrSkipped) {
  const auto dir = temp_dir();
  write_tiny_model(dir, tiny_config_json("llama", 2), 81);
  write_tokens(dir / "t.bin", 65, 61, 82);
  PackedTokens data(std::make_unique<FileTokens>(dir / "t.bin", TokenFormat::U32), 61, {});
  {
    Loaded m(dir, 32);
    m.model->params().get("model.norm.weight").f()[3] = std::numeric_limits<float>::quiet_NaN();
    TrainOptions o{32, 2, 1, 1, {}, ""};
    std::ostringstream log;
    EXPECT_THAT(error_of([&] { train(*m.model, data, o, log); }),
                HasSubstr("step 1: the loss is nan: tensor 'model.norm.weight' holds a non-finite weight"));
    o.optim.skip_nonfinite = true;
    const std::vector<float> before(m.model->params().flat().f(), m.model->params().flat().f() + param_count(m.cfg));
    const StepStats st = train(*m.model, data, o, log);
    EXPECT_TRUE(st.skipped);
    EXPECT_THAT(log.str(), HasSubstr("step 2: skipped"));
    OptimConfig sched = o.optim;
    sched.total_steps = 2;
    EXPECT_EQ(st.lr, lr_at(sched, 1));  // a skipped step's lr is the schedule's (its floor here)
    EXPECT_FLOAT_EQ(st.lr, 0.1f * o.optim.lr);
    EXPECT_EQ(std::memcmp(before.data(), m.model->params().flat().f(), before.size() * 4), 0);
  }
  {  // finite weights that overflow the activations: no tensor holds it, and the message says so
    Loaded m(dir, 32);
    Tensor norm = m.model->params().get("model.norm.weight");
    for (int64_t i = 0; i < norm.numel(); ++i) norm.f()[i] = 3e38f;
    TrainOptions o{32, 2, 1, 1, {}, ""};
    std::ostringstream log;
    EXPECT_THAT(error_of([&] { train(*m.model, data, o, log); }),
                AllOf(HasSubstr("step 1: the loss is "),
                      HasSubstr("nan: every weight is finite, so the activations overflowed: the run diverged")));
  }
  {  // an infinite gradient in one tensor: the optimizer names it and updates nothing
    Loaded m(dir, 32);
    Optimizer opt({}, m.model->params(), m.model->grads(), *m.be);
    m.model->grads().get("model.layers.1.mlp.up_proj.weight").f()[5] = std::numeric_limits<float>::infinity();
    EXPECT_THAT(error_of([&] { opt.step(7, nullptr); }),
                HasSubstr("step 8: the gradient norm is inf: tensor 'model.layers.1.mlp.up_proj.weight' holds a "
                          "non-finite gradient"));
  }
}

// Every tensor has its own generator, so init fills them on every core: the bits must be one
// thread's, for a model in memory (fp32 and the frozen bf16 base's mixed layout) and one written
// to a directory (bf16).
TEST(Init, TheSameBitsOnOneThreadAsOnMany) {
  const ModelConfig c = preset_config("tiny-qwen3");
  const int threads0 = omp_get_max_threads();
  auto in_memory = [&](int threads, bool mixed) {
    omp_set_num_threads(threads);
    Params p = mixed ? Params(c, frozen_bf16_layout(c), Tier::Host, Tag::Weights) : Params(c, Tier::Host, Tag::Weights);
    init_params(p, 7);
    std::string bits;  // each tensor's bytes (a mixed layout's padding between them aside)
    for (const ParamSpec& s : p.specs()) {
      const Tensor t = p.view(s);
      bits.append(static_cast<const char*>(t.data), t.bytes());
    }
    return bits;
  };
  const auto dir = temp_dir();
  auto written = [&](int threads) {
    omp_set_num_threads(threads);
    write_random_model(dir / std::to_string(threads), c, 7, DType::BF16);
    return read_text(dir / std::to_string(threads) / "model.safetensors");
  };
  const int many = std::max(4, omp_get_num_procs());
  for (bool mixed : {false, true}) EXPECT_EQ(in_memory(1, mixed), in_memory(many, mixed)) << "mixed " << mixed;
  EXPECT_EQ(written(1), written(many));
  omp_set_num_threads(threads0);
}
