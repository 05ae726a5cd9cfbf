// rope_inv_freq: the inv_freq buffer and attention scaling that transformers' modeling_rope_utils.py computes.
//
// Notation: d = rope_dim (head_dim, or int(head_dim * partial_rotary_factor)), i = 0 .. d/2-1,
// θ = rope_theta, f = factor, fl() = round to float32.
//   default: p_i = θ^(2i/d);  inv_i = 1 / p_i;  attention_scaling = 1
//   linear:  inv_i = (1 / p_i) / f;  attention_scaling = 1
//   llama3:  L = original_max_position_embeddings (absent: max_position_embeddings), lo/hi = low/high_freq_factor,
//            inv = default inv, wl_i = 2π / inv_i;
//            wl_i > L/lo        -> inv_i / f                       (low frequencies: fully interpolated)
//            wl_i < L/hi        -> inv_i                           (high frequencies: untouched)
//            otherwise          -> (1 - s_i) inv_i / f + s_i inv_i, s_i = (L / wl_i - lo) / (hi - lo)
//            attention_scaling = 1
//   yarn:    L = original_max_position_embeddings (absent: max_position_embeddings); f = factor, or when
//            config.json gives factor: null, max_position_embeddings / L (recent 4.x and 5.x: an explicit
//            factor is used as is; some older 4.x replaced it by max_position_embeddings / L when L was given);
//            cdim(r) = d ln(L / (2π r)) / (2 ln θ);
//            lo = max(floor(cdim(beta_fast)), 0), hi = min(ceil(cdim(beta_slow)), d - 1)
//            (truncate false: no floor/ceil; an explicit "truncate": null also means false, as `if truncate:`);
//            if lo == hi: hi += 0.001;  ramp_i = clamp((i - lo) / (hi - lo), 0, 1), e_i = 1 - ramp_i;
//            inv_i = (1 / (f p_i)) (1 - e_i) + (1 / p_i) e_i;
//            mscale(s, m) = s <= 1 ? 1 : 0.1 m ln(s) + 1;
//            attention_scaling = attention_factor if given, else mscale(f, mscale) / mscale(f, mscale_all_dim)
//            when both are given and non-zero, else mscale(f, 1).
//   longrope: L = original_max_position_embeddings (the top-level one, Phi-3's 4096 when absent; else the
//            dict's; else max_position_embeddings), e = long_factor when the sequence's length > L, else
//            short_factor (fl() each); inv_i = 1 / fl(e_i p_i);  f = factor, else max_position_embeddings / L;
//            attention_scaling = attention_factor if given, else f <= 1 ? 1 : sqrt(1 + ln f / ln L).
//
// Precision, mirrored from the torch code: every tensor op there is float32 with its own rounding, and
// Python scalars (θ, f, 2π, L, lo, hi, ...) are rounded to float32 when they meet a float32 tensor. So:
// exponents 2i/d are fl(fl(2i) / fl(d)); p_i = fl(fl(θ)^e) (computed in double, then rounded: the correctly
// rounded float32 power); `a / tensor` is torch's reciprocal(tensor) * a; every following op is one float32
// op in torch's order. Scalar-only math (wavelength bounds, correction range, mscale) stays in double as in
// Python. Checked against the same ops in torch 1.13 (CPU) on 510 configs / 17680 values: every op after
// the power is bit-exact; 54 values differ by 1 ulp where torch's own powf (Sleef, <= 1 ulp; glibc for loop
// tails; CUDA's powf on GPU) is not correctly rounded, so torch's buffer itself varies by device there.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/rope.h"

namespace oomb {
namespace {

constexpr double kPi = 3.14159265358979323846;

// One float32 multiply. noinline keeps the compiler from fusing it with a following add into an FMA,
// which torch's separate elementwise ops never do.
[[gnu::noinline]] float mul32(float a, float b) { return a * b; }

double yarn_mscale(double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; }

}  // namespace

int64_t rope_dim(int64_t head_dim, double partial_rotary_factor) {
  return int64_t(double(head_dim) * partial_rotary_factor);  // Python's int(): truncation
}

int64_t rope_switch_length(const ModelConfig& c) {
  return c.rope.type == "longrope" ? c.rope.original_max_position_embeddings : 0;
}

std::vector<float> rope_inv_freq(const ModelConfig& c, float* attention_scaling, int64_t length) {
  const RopeConfig& r = c.rope;
  const int64_t d = rope_dim(c);
  OOMB_CHECK(d > 0 && d % 2 == 0 && d <= c.head_dim && d <= (int64_t(1) << 20), "rope_inv_freq: the rotary dims "
             "(head_dim {} * partial_rotary_factor {}) must be even and positive, got {}", c.head_dim,
             c.rope.partial_rotary_factor, d);
  OOMB_CHECK(r.theta > 0 && std::isfinite(r.theta), "rope_inv_freq: rope_theta must be positive, got {}",
             r.theta);
  const size_t half = size_t(d / 2);
  const float theta32 = float(r.theta), f32 = float(r.factor);
  std::vector<float> pos(half), inv(half);
  for (size_t i = 0; i < half; ++i) {
    float e = float(2 * i) / float(d);
    pos[i] = float(std::pow(double(theta32), double(e)));
    inv[i] = 1.0f / pos[i];
  }
  float att = 1.0f;
  if (r.type == "default") {
  } else if (r.type == "linear") {
    for (auto& v : inv) v = v / f32;
  } else if (r.type == "llama3") {
    const int64_t L = r.original_max_position_embeddings > 0 ? r.original_max_position_embeddings
                                                             : c.max_position_embeddings;
    const float low_wl = float(double(L) / r.low_freq_factor), high_wl = float(double(L) / r.high_freq_factor);
    const float two_pi = float(2 * kPi), L32 = float(L), lo32 = float(r.low_freq_factor);
    const float span = float(r.high_freq_factor - r.low_freq_factor);
    for (auto& v : inv) {
      float wl = mul32(1.0f / v, two_pi);
      float scaled = wl > low_wl ? v / f32 : v;
      if (!(wl < high_wl) && !(wl > low_wl)) {
        float s = (mul32(1.0f / wl, L32) - lo32) / span;
        float a = mul32(1.0f - s, scaled) / f32, b = mul32(s, scaled);
        scaled = a + b;
      }
      v = scaled;
    }
  } else if (r.type == "yarn") {
    const double L = double(r.original_max_position_embeddings > 0 ? r.original_max_position_embeddings
                                                                   : c.max_position_embeddings);
    auto cdim = [&](double rot) { return double(d) * std::log(L / (rot * 2 * kPi)) / (2 * std::log(r.theta)); };
    double lo = cdim(r.beta_fast), hi = cdim(r.beta_slow);
    if (r.truncate) lo = std::floor(lo), hi = std::ceil(hi);
    lo = std::max(lo, 0.0), hi = std::min(hi, double(d - 1));
    if (lo == hi) hi += 0.001;
    const float lo32 = float(lo), span = float(hi - lo);
    for (size_t i = 0; i < half; ++i) {
      float ramp = std::clamp((float(i) - lo32) / span, 0.0f, 1.0f);
      float extra = 1.0f - ramp;  // inv_freq_extrapolation_factor
      float interp = 1.0f / mul32(f32, pos[i]);
      inv[i] = mul32(interp, 1.0f - extra) + mul32(inv[i], extra);
    }
    double a;
    if (r.attention_factor)
      a = *r.attention_factor;
    else if (r.mscale && *r.mscale != 0 && r.mscale_all_dim && *r.mscale_all_dim != 0)
      a = yarn_mscale(r.factor, *r.mscale) / yarn_mscale(r.factor, *r.mscale_all_dim);
    else
      a = yarn_mscale(r.factor, 1.0);
    att = float(a);
  } else if (r.type == "longrope") {
    const std::vector<double>& e = length > rope_switch_length(c) ? r.long_factor : r.short_factor;
    OOMB_CHECK(e.size() == half, "rope_inv_freq: longrope needs {} factors (rope_dim / 2), has {}", half, e.size());
    for (size_t i = 0; i < half; ++i) inv[i] = 1.0f / mul32(float(e[i]), pos[i]);
    const double L = double(rope_switch_length(c));
    att = float(r.attention_factor ? *r.attention_factor
                : r.factor <= 1.0   ? 1.0
                                    : std::sqrt(1.0 + std::log(r.factor) / std::log(L)));
  } else {
    fail("unsupported rope_type '{}' (supported: default, linear, llama3, yarn, longrope)", r.type);
  }
  if (attention_scaling) *attention_scaling = att;
  return inv;
}

std::vector<float> rope_inv_freq_plain(const ModelConfig& c) {
  ModelConfig plain = c;
  const double theta = c.sliding_rope_theta > 0 ? c.sliding_rope_theta : c.rope.theta;
  const double partial = c.rope.partial_rotary_factor;
  plain.rope = RopeConfig{};
  plain.rope.theta = theta, plain.rope.partial_rotary_factor = partial;
  float scaling = 1.0f;
  return rope_inv_freq(plain, &scaling);
}

}  // namespace oomb
