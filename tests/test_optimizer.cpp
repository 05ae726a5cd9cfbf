// The learning-rate schedule and global-norm clipping.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/backend.h"
#include "model/init.h"
#include "model_fixture.h"
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

