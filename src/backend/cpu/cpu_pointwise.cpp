// RMSNorm, RoPE and the gated MLP activation (SwiGLU, GeGLU) on the CPU, with their backward passes; dropout.
#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_ops.h"
#include "core/dtype.h"

namespace oomb::cpu {

namespace {

// An output element: the f32 value, or it rounded to bf16 (nearest even: cast's bits).
inline void put(float* o, int64_t i, float v) { o[i] = v; }
inline void put(uint16_t* o, int64_t i, float v) { o[i] = f32_to_bf16(v); }

// Calls fn with the output's elements as float* (f32) or uint16_t* (bf16).
template <typename Fn>
void with_out(Tensor& out, Fn fn) {
  if (out.dtype == DType::BF16) fn(out.as<uint16_t>());
  else fn(out.f());
}

}  // namespace

// x, y: (T, d); w: (d); rstd: (T); y f32 or bf16
void rmsnorm_fwd(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd, float w_offset) {
  const int64_t T = x.dim(0), d = x.dim(1);
  with_out(y, [&](auto* yp) {
#pragma omp parallel for if (T * d >= kParallelMin)
    for (int64_t t = 0; t < T; ++t) {
      const float* xr = x.f() + t * d;
      auto* yr = yp + t * d;
      double ss = 0;
      for (int64_t i = 0; i < d; ++i) ss += double(xr[i]) * xr[i];
      float r = float(1.0 / std::sqrt(ss / double(d) + eps));
      rstd.f()[t] = r;
      for (int64_t i = 0; i < d; ++i) put(yr, i, xr[i] * r * (w.f()[i] + w_offset));
    }
  });
}

// y = x r w', w' = w + w_offset, r = (mean x^2 + eps)^-1/2:  dx = r (g - x r^2 mean(g x)),  g = dy w';
// dw += sum_t dy x r
void rmsnorm_bwd(const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy, Tensor& dx,
                 bool dx_accumulate, Tensor& dw, float w_offset) {
  const int64_t T = x.dim(0), d = x.dim(1);
  const float* wp = w.f();
#pragma omp parallel for if (T * d >= kParallelMin)
  for (int64_t t = 0; t < T; ++t) {
    const float *xr = x.f() + t * d, *dyr = dy.f() + t * d;
    float* dxr = dx.f() + t * d;
    const float r = rstd.f()[t];
    double dot = 0;
    for (int64_t i = 0; i < d; ++i) dot += double(dyr[i]) * (wp[i] + w_offset) * xr[i];
    const float c = float(dot / double(d)) * r * r;
    for (int64_t i = 0; i < d; ++i) {
      float g = r * (dyr[i] * (wp[i] + w_offset) - xr[i] * c);
      dxr[i] = dx_accumulate ? dxr[i] + g : g;
    }
  }
  // dw: columns split across threads, tokens summed in order (deterministic)
#pragma omp parallel for if (T * d >= kParallelMin)
  for (int64_t i = 0; i < d; ++i) {
    double s = 0;
    for (int64_t t = 0; t < T; ++t) s += double(dy.f()[t * d + i]) * x.f()[t * d + i] * rstd.f()[t];
    dw.f()[i] += float(s);
  }
}

// x: (T, H, D) in place.  Rotate-half over each head's first R = rope.dims(D) dims: (x1, x2) ->
// (x1 c - x2 s, x2 c + x1 s), x1 = x[i], x2 = x[i + R/2] (interleaved: x[2i], x[2i + 1]); inverse uses
// -s; dims R.. untouched.
// The angle is pos * inv_freq rounded to fp32 (as transformers computes it); cos/sin in double.
void rope(Tensor& x, const Tensor& pos, const RopeTable& rope, bool inverse) {
  const int64_t T = x.dim(0), H = x.dim(1), D = x.dim(2), half = rope.dims(D) / 2;
  const double sgn = inverse ? -1.0 : 1.0;
#pragma omp parallel for if (T * H * D >= kParallelMin)
  for (int64_t t = 0; t < T; ++t) {
    const float p = float(pos.as<int32_t>()[t]);
    for (int64_t i = 0; i < half; ++i) {
      const float angle = p * rope.inv_freq[i];
      const float c = float(std::cos(double(angle)) * rope.attention_scaling);
      const float s = float(sgn * std::sin(double(angle)) * rope.attention_scaling);
      for (int64_t h = 0; h < H; ++h) {
        float* xr = x.f() + (t * H + h) * D;
        const int64_t a = rope.first(i), b = rope.second(i, half);
        const float x1 = xr[a], x2 = xr[b];
        xr[a] = x1 * c - x2 * s;
        xr[b] = x2 * c + x1 * s;
      }
    }
  }
}

static inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// GELU's tanh approximation, as PyTorch's gelu(approximate='tanh') computes it in float:
// y = 0.5 g (1 + t), t = tanh(b (g + k g^3)), b = sqrt(2/pi), k = 0.044715
constexpr float kGeluBeta = 0.7978845608028654f, kGeluKappa = 0.044715f;
static inline float gelu_tanh(float g) {
  const float t = std::tanh(kGeluBeta * (g + kGeluKappa * g * g * g));
  return 0.5f * g * (1.0f + t);
}
// dy/dg = 0.5 (1 + t) + 0.5 g (1 - t^2) b (1 + 3 k g^2)
static inline float gelu_tanh_grad(float g) {
  const float t = std::tanh(kGeluBeta * (g + kGeluKappa * g * g * g));
  return 0.5f * (1.0f + t) + 0.5f * g * (1.0f - t * t) * kGeluBeta * (1.0f + 3.0f * kGeluKappa * g * g);
}

// gate, up, out: (T, I); out f32 or bf16
void glu_fwd(const Tensor& gate, const Tensor& up, Tensor& out, Act act) {
  const int64_t n = gate.numel();
  const float *g = gate.f(), *u = up.f();
  with_out(out, [&](auto* o) {
    if (act == Act::GeluTanh) {
#pragma omp parallel for if (n >= kParallelMin)
      for (int64_t i = 0; i < n; ++i) put(o, i, gelu_tanh(g[i]) * u[i]);
      return;
    }
#pragma omp parallel for if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) put(o, i, g[i] * sigmoid(g[i]) * u[i]);
  });
}

// d/dg [g sig(g)] = sig(g) (1 + g (1 - sig(g))) (GeGLU: gelu_tanh_grad);  dgate, dup f32 or bf16 (one dtype)
void glu_bwd(const Tensor& gate, const Tensor& up, const Tensor& dout, Tensor& dgate, Tensor& dup, Act act) {
  const int64_t n = gate.numel();
  const float *g = gate.f(), *u = up.f(), *d = dout.f();
  with_out(dgate, [&](auto* dg) {
    auto* du = reinterpret_cast<decltype(dg)>(dup.data);
    if (act == Act::GeluTanh) {
#pragma omp parallel for if (n >= kParallelMin)
      for (int64_t i = 0; i < n; ++i) {
        put(du, i, d[i] * gelu_tanh(g[i]));
        put(dg, i, d[i] * u[i] * gelu_tanh_grad(g[i]));
      }
      return;
    }
#pragma omp parallel for if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      const float s = sigmoid(g[i]);
      put(du, i, d[i] * g[i] * s);
      put(dg, i, d[i] * u[i] * s * (1.0f + g[i] * (1.0f - s)));
    }
  });
}

// x, y: (T, n); x f32 or bf16, y f32 or bf16 (accumulate: f32)
void dropout(const Tensor& x, const DropoutMask& m, Tensor& y, bool accumulate) {
  const int64_t T = x.dim(0), n = x.dim(1);
  auto in = [&](int64_t i) { return x.dtype == DType::BF16 ? bf16_to_f32(x.as<uint16_t>()[i]) : x.f()[i]; };
  auto kept = [&](int64_t t, int64_t i) { return m.kept(t, i) ? in(t * n + i) * m.scale : 0.0f; };
  if (accumulate) {
    float* o = y.f();
#pragma omp parallel for if (T * n >= kParallelMin)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < n; ++i) o[t * n + i] += kept(t, i);
    return;
  }
  with_out(y, [&](auto* o) {
#pragma omp parallel for if (T * n >= kParallelMin)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < n; ++i) put(o, t * n + i, kept(t, i));
  });
}

}  // namespace oomb::cpu
