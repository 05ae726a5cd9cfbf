// rope_inv_freq (default, linear, Llama 3, YaRN, LongRoPE) against straightforward double-precision
// re-derivations.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "hf/config.h"
#include "model/rope.h"
#include "phi35_config.h"

using namespace oomb;
using json = nlohmann::json;

namespace {

json small() {  // a minimal valid Llama config
  return json{{"architectures", {"LlamaForCausalLM"}}, {"hidden_size", 64}, {"intermediate_size", 128},
              {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
              {"vocab_size", 100}, {"max_position_embeddings", 128}};
}

}  // namespace

ModelConfig rope_model(int64_t head_dim, double theta, json scaling, int64_t max_pos = 128) {
  json j = small();
  j["num_attention_heads"] = 2, j["num_key_value_heads"] = 1, j["head_dim"] = head_dim;
  j["rope_theta"] = theta, j["max_position_embeddings"] = max_pos, j["rope_scaling"] = scaling;
  return parse_config(j, "rope.json");
}

std::vector<double> ref_default(int dim, double theta) {
  std::vector<double> v(dim / 2);
  for (int i = 0; i < dim / 2; ++i) v[i] = 1.0 / std::pow(theta, 2.0 * i / dim);
  return v;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-6 * std::fabs(want[i])) << "i=" << i;
}

TEST(RopeInvFreq, DefaultAndLinear) {
  for (double theta : {10000.0, 500000.0}) {
    float att = 0;
    expect_close(rope_inv_freq(rope_model(16, theta, nullptr), &att), ref_default(16, theta));
    EXPECT_EQ(att, 1.0f);
    auto ref = ref_default(16, theta);
    for (auto& v : ref) v /= 2.5;
    expect_close(rope_inv_freq(rope_model(16, theta, {{"rope_type", "linear"}, {"factor", 2.5}}), &att), ref);
    EXPECT_EQ(att, 1.0f);
  }
  json qwen = small();  // head_dim absent: hidden 896 / 14 heads (Qwen2.5-0.5B's), 32 frequencies
  qwen["hidden_size"] = 896, qwen["num_attention_heads"] = 14, qwen["num_key_value_heads"] = 2;
  EXPECT_EQ(rope_inv_freq(parse_config(qwen, "q"), nullptr).size(), 32u);
}

TEST(RopeInvFreq, Llama3) {
  const double f = 8, lo = 1, hi = 4, L = 8192, pi = std::acos(-1.0);
  for (double theta : {10000.0, 500000.0}) {
    std::vector<double> ref = ref_default(16, theta);
    int regions[3] = {0, 0, 0};
    for (auto& v : ref) {
      double wl = 2 * pi / v;
      if (wl < L / hi) {
        regions[0]++;
      } else if (wl > L / lo) {
        v /= f, regions[1]++;
      } else {
        double s = (L / wl - lo) / (hi - lo);
        v = (1 - s) * v / f + s * v, regions[2]++;
      }
    }
    if (theta == 500000.0) {
      EXPECT_TRUE(regions[0] && regions[1] && regions[2]);
    }
    float att = 0;
    json rs = {{"rope_type", "llama3"}, {"factor", f}, {"low_freq_factor", lo}, {"high_freq_factor", hi},
               {"original_max_position_embeddings", 8192}};
    expect_close(rope_inv_freq(rope_model(16, theta, rs, 131072), &att), ref);
    EXPECT_EQ(att, 1.0f);
  }
}

// YaRN per the paper / transformers, in double.
std::vector<double> ref_yarn(int dim, double theta, double factor, double L, bool truncate) {
  const double pi = std::acos(-1.0);
  auto cdim = [&](double rot) { return dim * std::log(L / (rot * 2 * pi)) / (2 * std::log(theta)); };
  double lo = cdim(32), hi = cdim(1);
  if (truncate) lo = std::floor(lo), hi = std::ceil(hi);
  lo = std::max(lo, 0.0), hi = std::min(hi, dim - 1.0);
  if (lo == hi) hi += 0.001;
  std::vector<double> v(dim / 2);
  for (int i = 0; i < dim / 2; ++i) {
    double p = std::pow(theta, 2.0 * i / dim);
    double ramp = std::min(std::max((i - lo) / (hi - lo), 0.0), 1.0);
    double e = 1 - ramp;
    v[i] = 1 / (factor * p) * (1 - e) + 1 / p * e;
  }
  return v;
}

// LongRoPE per transformers' _compute_longrope_parameters, in double: inv_i = 1 / (e_i theta^(2i/d)),
// e the long factors past the switch length, else the short ones.
TEST(RopeInvFreq, LongRope) {
  json j = phi35();
  const ModelConfig c = parse_config(j, "phi.json");
  EXPECT_EQ(rope_switch_length(c), 4096);
  const std::vector<double> base = ref_default(96, 10000.0);
  for (int64_t length : {0, 1, 4096, 4097, 131072}) {
    const std::vector<double>& e = length > 4096 ? c.rope.long_factor : c.rope.short_factor;
    std::vector<double> want(48);
    for (size_t i = 0; i < 48; ++i) want[i] = base[i] / e[i];
    float att = 0;
    expect_close(rope_inv_freq(c, &att, length), want);
    EXPECT_NEAR(att, std::sqrt(1 + std::log(32.0) / std::log(4096.0)), 1e-6) << length;  // 1.19024
  }
  j["rope_scaling"]["attention_factor"] = 0.75;
  float att = 0;
  rope_inv_freq(parse_config(j, "phi_att.json"), &att, 5000);
  EXPECT_EQ(att, 0.75f);
  j["rope_scaling"]["factor"] = 2.0;  // the dict's factor, the switch where it was
  j["rope_scaling"].erase("attention_factor");
  const ModelConfig f = parse_config(j, "phi_factor.json");
  EXPECT_EQ(rope_switch_length(f), 4096);
  rope_inv_freq(f, &att, 131072);
  EXPECT_NEAR(att, std::sqrt(1 + std::log(2.0) / std::log(4096.0)), 1e-6);
  EXPECT_EQ(rope_switch_length(parse_config(small(), "s")), 0);
}

TEST(RopeInvFreq, Yarn) {
  for (int64_t L : {32, 2048}) {
    for (bool truncate : {true, false}) {
      json rs = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", L},
                 {"truncate", truncate}};
      float att = 0;
      expect_close(rope_inv_freq(rope_model(16, 10000.0, rs), &att), ref_yarn(16, 10000.0, 4, double(L), truncate));
      EXPECT_NEAR(att, 0.1 * std::log(4.0) + 1, 1e-7);
      rs["mscale"] = 0.707, rs["mscale_all_dim"] = 0.707;
      expect_close(rope_inv_freq(rope_model(16, 10000.0, rs), &att), ref_yarn(16, 10000.0, 4, double(L), truncate));
      EXPECT_NEAR(att, 1.0, 1e-7);
      rs["mscale"] = 1.0, rs["mscale_all_dim"] = 0.5;
      rope_inv_freq(rope_model(16, 10000.0, rs), &att);
      EXPECT_NEAR(att, (0.1 * std::log(4.0) + 1) / (0.05 * std::log(4.0) + 1), 1e-7);
      rs["mscale_all_dim"] = 0.0;  // falsy: plain get_mscale(factor)
      rope_inv_freq(rope_model(16, 10000.0, rs), &att);
      EXPECT_NEAR(att, 0.1 * std::log(4.0) + 1, 1e-7);
      rs["attention_factor"] = 0.5;
      rope_inv_freq(rope_model(16, 10000.0, rs), &att);
      EXPECT_EQ(att, 0.5f);
    }
  }
  // original_max_position_embeddings absent: max_position_embeddings; factor null: max_pos / orig
  float att = 0;
  expect_close(rope_inv_freq(rope_model(16, 500000.0, {{"rope_type", "yarn"}, {"factor", 2.0}}, 4096), &att),
               ref_yarn(16, 500000.0, 2, 4096, true));
  expect_close(rope_inv_freq(rope_model(16, 10000.0,
                                        {{"rope_type", "yarn"}, {"factor", nullptr},
                                         {"original_max_position_embeddings", 1024}}, 4096), &att),
               ref_yarn(16, 10000.0, 4, 1024, true));
  EXPECT_NEAR(att, 0.1 * std::log(4.0) + 1, 1e-7);
}
