// The learning-rate schedule and global-norm clipping.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <cmath>

#include "backend/backend.h"
#include "model/init.h"
#include "model_fixture.h"
#include "test_util.h"
#include "train/flops.h"
#include "train/optimizer.h"

using namespace oomb;

TEST(Schedule, WarmupThenCosineToTheFloor) {
  OptimConfig c;
  c.lr = 1.0f;
  c.warmup_steps = 4;
  c.total_steps = 14;
  c.min_lr_ratio = 0.1f;
  EXPECT_FLOAT_EQ(lr_at(c, 0), 0.25f);  // step 0 already moves
  EXPECT_FLOAT_EQ(lr_at(c, 3), 1.0f);
  EXPECT_FLOAT_EQ(lr_at(c, 4), 1.0f);  // cosine starts at the peak
  // step 8 is 4 of the 9 cosine intervals in
  EXPECT_NEAR(lr_at(c, 8), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 4.0 / 9.0)), 1e-6);
  EXPECT_FLOAT_EQ(lr_at(c, 13), 0.1f);  // the last step reaches the floor
  for (int64_t k = 5; k < 14; ++k) EXPECT_LT(lr_at(c, k), lr_at(c, k - 1));
  c.warmup_steps = 0;
  c.total_steps = 1;
  EXPECT_FLOAT_EQ(lr_at(c, 0), 1.0f);  // a single step uses the full lr
}

// The other shapes, each step's lr from the formulas written out here: linear the cosine's line,
// constant the peak, wsd the peak until its decay's D steps, the last at the floor.
TEST(Schedule, LinearConstantAndWarmupStableDecay) {
  OptimConfig c;
  c.lr = 2.0f;
  c.warmup_steps = 2;
  c.total_steps = 12;
  c.min_lr_ratio = 0.25f;
  c.schedule = "linear";
  EXPECT_FLOAT_EQ(lr_at(c, 0), 1.0f);
  EXPECT_FLOAT_EQ(lr_at(c, 2), 2.0f);
  for (int64_t k = 2; k < 12; ++k)  // 10 steps after the warmup: 9 intervals from 2 down to 0.5
    EXPECT_NEAR(lr_at(c, k), 0.5 + 1.5 * (1.0 - double(k - 2) / 9.0), 1e-6) << k;
  c.schedule = "constant";
  for (int64_t k = 2; k < 12; ++k) EXPECT_EQ(lr_at(c, k), 2.0f) << k;
  EXPECT_FLOAT_EQ(lr_at(c, 1), 2.0f);  // (warmup: 2 x 2 / 2)
  c.schedule = "wsd";
  c.decay_steps = 4;  // steps 8, 9, 10, 11: 2 - 1.5 x (1/4, 2/4, 3/4, 4/4)
  for (int64_t k = 2; k < 8; ++k) EXPECT_EQ(lr_at(c, k), 2.0f) << k;
  const float decay[] = {1.625f, 1.25f, 0.875f, 0.5f};
  for (int64_t k = 8; k < 12; ++k) EXPECT_FLOAT_EQ(lr_at(c, k), decay[k - 8]) << k;
  c.decay_steps = 0;  // a tenth of the 10 steps after the warmup: the last alone, at the floor
  EXPECT_EQ(wsd_decay_steps(c), 1);
  EXPECT_EQ(lr_at(c, 10), 2.0f);
  EXPECT_FLOAT_EQ(lr_at(c, 11), 0.5f);
  c.total_steps = 2 + 25;
  EXPECT_EQ(wsd_decay_steps(c), 3);  // 2.5, rounded
  c.min_lr_ratio = 0;
  c.schedule = "cosine";
  EXPECT_EQ(lr_at(c, 26), 0.0f);
}

// Each bad setting is named by its flag.
TEST(Schedule, BadSettingsAreNamed) {
  using oomb::testing::error_of;
  OptimConfig c;
  c.total_steps = 10;
  c.schedule = "step";
  EXPECT_THAT(error_of([&] { check_schedule(c); }), ::testing::HasSubstr("--lr-schedule: 'step' is not one of"));
  c.schedule = "cosine";
  c.min_lr_ratio = 1.5f;
  EXPECT_THAT(error_of([&] { check_schedule(c); }), ::testing::HasSubstr("--min-lr-ratio: must be within [0, 1]"));
  c.min_lr_ratio = 0.1f;
  c.decay_steps = 3;
  EXPECT_THAT(error_of([&] { check_schedule(c); }), ::testing::HasSubstr("--decay-steps: only with --lr-schedule wsd"));
  c.schedule = "wsd";
  c.warmup_steps = 8;
  EXPECT_THAT(error_of([&] { check_schedule(c); }),
              ::testing::HasSubstr("--decay-steps 3: more than the 2 steps after the warmup (--steps 10 less "
                                   "--warmup-steps 8)"));
  c.warmup_steps = 10;
  EXPECT_THAT(error_of([&] { check_schedule(c); }),
              ::testing::HasSubstr("--warmup-steps 10: --lr-schedule wsd needs steps after the warmup"));
  c.warmup_steps = 7;
  EXPECT_EQ(error_of([&] { check_schedule(c); }), "(no error)");
}

TEST(Clipping, ScalesTheGlobalNormDownToTheLimitOnly) {
  const ModelConfig cfg = preset_config("tiny");
  auto be = make_cpu_backend();
  Params p(cfg, Tier::Host, Tag::Weights), g(cfg, Tier::Host, Tag::Grads);
  for (int64_t i = 0; i < g.flat().numel(); ++i) g.flat().f()[i] = float((i % 7) - 3);
  const double norm = Optimizer::grad_norm(g, *be);
  OptimConfig c;
  c.kind = "sgd";
  c.lr = 1.0f;
  c.grad_clip = float(norm / 4);
  Optimizer opt(c, p, g, *be);
  float lr = 0;
  EXPECT_DOUBLE_EQ(opt.step(0, &lr), norm);  // reports the norm before clipping
  // measured 0; the clip's 1e-6 guard (clip / (norm + 1e-6)) allows 1e-6 / norm
  EXPECT_NEAR(Optimizer::grad_norm(g, *be), norm / 4, 1e-6 * norm);
  // a step under the limit leaves the gradients untouched
  const double now = Optimizer::grad_norm(g, *be);
  c.grad_clip = float(now * 2);
  Optimizer opt2(c, p, g, *be);
  opt2.step(0, &lr);
  EXPECT_DOUBLE_EQ(Optimizer::grad_norm(g, *be), now);
}

TEST(Optimizer, RejectsBadSettingsNamingTheFlag) {
  const ModelConfig cfg = preset_config("tiny");
  auto be = make_cpu_backend();
  Params p(cfg, Tier::Host, Tag::Weights), g(cfg, Tier::Host, Tag::Grads);
  OptimConfig c;
  c.lr = -1;
  EXPECT_THROW(Optimizer(c, p, g, *be), Error);
  c.lr = 1e-3f;
  c.grad_clip = -2;
  try {
    Optimizer o(c, p, g, *be);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--grad-clip"), std::string::npos);
  }
}

TEST(Flops, TheStatedFormulaByHand) {
  // hidden 32, 2 layers, 4 heads and 2 kv heads of dim 8, intermediate 48, vocab 61
  const ModelConfig c = parse_config(oomb::testing::tiny_config_json("llama", 2), "tiny");
  // per layer: q 32x32, k and v 32x16 each, o 32x32, gate/up/down 32x48 each; lm_head 61x32
  EXPECT_EQ(linear_weights(c), 2 * (1024 + 2 * 512 + 1024 + 3 * 1536) + 61 * 32);
  // N = 10: 3 x (2 N weights + 4 L H D N (N + 1) / 2)
  EXPECT_DOUBLE_EQ(train_flops(c, 10), 3.0 * (2.0 * 10 * 17312 + 4.0 * 2 * 4 * 8 * 55));
}

