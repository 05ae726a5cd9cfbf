// Fused lm_head + cross-entropy, tiled over tokens: at most (tile x V) logits exist at once.
#include <cblas.h>

#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_ops.h"

namespace oomb::cpu {

int64_t lm_head_widen_elems(const Tensor& h, const Tensor& w, int64_t tile) {
  return h.dtype == DType::BF16 ? w.numel() + std::min(tile, h.dim(0)) * h.dim(1) : 0;
}

// h: (T, d), w: (V, d), targets: (T) i32, logits workspace: (tile, V), row_losses: (tile) f64.
// bf16 h and w: w widened once, h a tile at a time; the logits' gradient rounded to bf16 values.
double lm_head_xent(const Tensor& h, const Tensor& w, const Tensor& targets, float scale, Tensor* dh, Tensor* dw,
                    int64_t* correct, Tensor& logits, Tensor& row_losses, float* widen) {
  const int64_t T = h.dim(0), d = h.dim(1), V = w.dim(0), tile = logits.dim(0);
  OOMB_CHECK(logits.dim(1) == V && tile > 0, "lm_head_xent: workspace {} must be (tile, {})", logits.shape_str(), V);
  OOMB_CHECK(row_losses.dtype == DType::F64 && row_losses.numel() >= tile, "lm_head_xent: row-loss workspace too small");
  const int32_t* tg = targets.as<int32_t>();
  for (int64_t t = 0; t < T; ++t)
    OOMB_CHECK(tg[t] < V, "lm_head_xent: target id {} at position {} is outside the vocabulary (size {})", tg[t], t,
               V);
  double loss = 0;
  int64_t hits = 0;
  double* row_loss = row_losses.as<double>();  // summed in row order below: thread-count independent
  const bool bf16 = h.dtype == DType::BF16;
  const float* wf = widened(w, widen);
  for (int64_t t0 = 0; t0 < T; t0 += tile) {
    const int64_t n = std::min(tile, T - t0);
    float* lg = logits.f();
    float* tile_scratch = widen;
    const float* hf = widened(h.rows(t0, n), tile_scratch);  // (n, d)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(n), int(V), int(d), 1.0f, hf, int(d), wf, int(d), 0.0f,
                lg, int(V));
#pragma omp parallel for reduction(+ : hits) if (n * V >= kParallelMin)
    for (int64_t r = 0; r < n; ++r) {
      float* row = lg + r * V;
      const int32_t y = tg[t0 + r];
      row_loss[r] = 0;
      if (y < 0) {  // ignored target: no loss, no gradient
        std::fill_n(row, V, 0.0f);
        continue;
      }
      int64_t arg = 0;
      for (int64_t v = 1; v < V; ++v)
        if (row[v] > row[arg]) arg = v;
      const float m = row[arg];
      double sum = 0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(double(row[v] - m));
      const double lse = double(m) + std::log(sum);
      row_loss[r] = lse - double(row[y]);
      hits += arg == y;
      for (int64_t v = 0; v < V; ++v) row[v] = float(std::exp(double(row[v]) - lse)) * scale;
      row[y] -= scale;
      if (bf16)  // the backward matmuls' input, as the bf16 GEMMs read it
        for (int64_t v = 0; v < V; ++v) row[v] = bf16_to_f32(f32_to_bf16(row[v]));
    }
    for (int64_t r = 0; r < n; ++r) loss += row_loss[r];
    if (dh)  // dh (n, d) = dlogits (n, V) . w (V, d)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(n), int(d), int(V), 1.0f, lg, int(V), wf, int(d),
                  0.0f, dh->f() + t0 * d, int(d));
    if (dw)  // dw (V, d) += dlogits^T (V, n) . h (n, d)
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(V), int(d), int(n), 1.0f, lg, int(V), hf, int(d), 1.0f,
                  dw->f(), int(d));
  }
  if (correct) *correct = hits;
  return loss;
}

}  // namespace oomb::cpu
