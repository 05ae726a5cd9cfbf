// lm_head + cross-entropy over vocabulary tiles, each call tiled over tokens: at most (tile x Vt)
// logits exist at once. Pass 1 merges each row's max, sum of exp, target logit and argmax tile by
// tile; the loss reads them; pass 2 recomputes a tile's logits for its gradients.
#include <cblas.h>

#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_ops.h"

namespace oomb::cpu {

namespace {

// stats row: {max logit, sum of exp(logit - max), target logit, argmax id}
enum : int { kMax = 0, kSum = 1, kTarget = 2, kArg = 3 };

// the logits workspace (tile, >= Vt) the backend passes
void check_workspace(const char* op, const Tensor& w, const Tensor& logits) {
  OOMB_CHECK(logits.dtype == DType::F32 && logits.ndim == 2 && logits.dim(1) >= w.dim(0) && logits.dim(0) > 0,
             "{}: workspace {} must be (tile, >= {}) f32", op, logits.shape_str(), w.dim(0));
}

// lg (n, Vt) = hf (n, d) . wf^T (Vt, d), leading dimension ld
void tile_logits(const float* hf, const float* wf, int64_t n, int64_t Vt, int64_t d, float* lg, int64_t ld) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(n), int(Vt), int(d), 1.0f, hf, int(d), wf, int(d), 0.0f,
              lg, int(ld));
}

}  // namespace

int64_t lm_head_widen_elems(const Tensor& h, const Tensor& w, int64_t tile) {
  return h.dtype == DType::BF16 ? w.numel() + std::min(tile, h.dim(0)) * h.dim(1) : 0;
}

// h: (T, d), w: (Vt, d) = lm_head rows [v0, v0 + Vt), targets: (T) i32, stats: (T, 4) f64,
// logits workspace: (tile, >= Vt)
void lm_head_xent_stats(const Tensor& h, const Tensor& w, int64_t v0, const Tensor& targets, Tensor& stats,
                        Tensor& logits, float* widen) {
  check_workspace("lm_head_xent_stats", w, logits);
  const int64_t T = h.dim(0), d = h.dim(1), Vt = w.dim(0), tile = logits.dim(0), ld = logits.dim(1);
  const int32_t* tg = targets.as<int32_t>();
  double* st = stats.as<double>();
  const float* wf = widened(w, widen);
  for (int64_t t0 = 0; t0 < T; t0 += tile) {
    const int64_t n = std::min(tile, T - t0);
    float* lg = logits.f();
    float* tile_scratch = widen;
    tile_logits(widened(h.rows(t0, n), tile_scratch), wf, n, Vt, d, lg, ld);
#pragma omp parallel for if (n * Vt >= kParallelMin)
    for (int64_t r = 0; r < n; ++r) {
      const float* row = lg + r * ld;
      double* s = st + (t0 + r) * 4;
      const int32_t y = tg[t0 + r];
      if (v0 == 0) s[kMax] = -INFINITY, s[kSum] = 0, s[kTarget] = 0, s[kArg] = -1;
      if (y < 0) continue;  // ignored target: no loss, no gradient
      int64_t arg = 0;
      for (int64_t v = 1; v < Vt; ++v)
        if (row[v] > row[arg]) arg = v;
      const float m_old = float(s[kMax]), m = v0 == 0 || row[arg] > m_old ? row[arg] : m_old;
      if (v0 == 0 || row[arg] > m_old) s[kArg] = double(v0 + arg);  // ties: the earlier tile's lower id
      double sum = 0;
      for (int64_t v = 0; v < Vt; ++v) sum += std::exp(double(row[v] - m));
      // the earlier tiles' sum rescaled to the new max (none for the first tile)
      s[kSum] = v0 == 0 ? sum : s[kSum] * std::exp(double(m_old) - double(m)) + sum;
      s[kMax] = m;
      if (y >= v0 && y < v0 + Vt) s[kTarget] = row[y - v0];
    }
  }
}

void lm_head_xent_loss(const Tensor& stats, const Tensor& targets, Tensor& sums) {
  const int64_t T = targets.dim(0);
  const int32_t* tg = targets.as<int32_t>();
  const double* st = stats.as<double>();
  double loss = 0;
  int64_t hits = 0;
  for (int64_t t = 0; t < T; ++t) {  // in row order: thread-count independent
    const double* s = st + t * 4;
    if (tg[t] < 0) continue;
    loss += double(float(s[kMax])) + std::log(s[kSum]) - s[kTarget];
    hits += int64_t(s[kArg]) == tg[t];
  }
  sums.as<double>()[0] += loss;
  sums.as<double>()[1] += double(hits);
}

// bf16 h and w: w widened once, h a tile at a time; the logits' gradient rounded to bf16 values.
void lm_head_xent_grad(const Tensor& h, const Tensor& w, int64_t v0, const Tensor& targets, const Tensor& stats,
                       float scale, Tensor* dh, bool dh_accumulate, Tensor* dw, Tensor& logits, float* widen) {
  check_workspace("lm_head_xent_grad", w, logits);
  const int64_t T = h.dim(0), d = h.dim(1), Vt = w.dim(0), tile = logits.dim(0), ld = logits.dim(1);
  const int32_t* tg = targets.as<int32_t>();
  const double* st = stats.as<double>();
  const bool bf16 = h.dtype == DType::BF16;
  const float* wf = widened(w, widen);
  for (int64_t t0 = 0; t0 < T; t0 += tile) {
    const int64_t n = std::min(tile, T - t0);
    float* lg = logits.f();
    float* tile_scratch = widen;
    const float* hf = widened(h.rows(t0, n), tile_scratch);  // (n, d)
    tile_logits(hf, wf, n, Vt, d, lg, ld);
#pragma omp parallel for if (n * Vt >= kParallelMin)
    for (int64_t r = 0; r < n; ++r) {
      float* row = lg + r * ld;
      const int32_t y = tg[t0 + r];
      if (y < 0) {  // ignored target: no gradient
        std::fill_n(row, Vt, 0.0f);
        continue;
      }
      const double* s = st + (t0 + r) * 4;
      const double lse = double(float(s[kMax])) + std::log(s[kSum]);
      for (int64_t v = 0; v < Vt; ++v) row[v] = float(std::exp(double(row[v]) - lse)) * scale;
      if (y >= v0 && y < v0 + Vt) row[y - v0] -= scale;
      if (bf16)  // the backward matmuls' input, as the bf16 GEMMs read it
        for (int64_t v = 0; v < Vt; ++v) row[v] = bf16_to_f32(f32_to_bf16(row[v]));
    }
    if (dh)  // dh (n, d) (+)= dlogits (n, Vt) . w (Vt, d)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(n), int(d), int(Vt), 1.0f, lg, int(ld), wf, int(d),
                  dh_accumulate ? 1.0f : 0.0f, dh->f() + t0 * d, int(d));
    if (dw)  // dw (Vt, d) += dlogits^T (Vt, n) . h (n, d)
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(Vt), int(d), int(n), 1.0f, lg, int(ld), hf, int(d),
                  1.0f, dw->f(), int(d));
  }
}

}  // namespace oomb::cpu
