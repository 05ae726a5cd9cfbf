// Sparse attention's page metadata and page scores (--sparse-pages), CPU reference.
// Both run in a fixed order (no reduction depends on the thread count), so the choice they feed
// is deterministic.
#include <algorithm>
#include <vector>

#include "backend/cpu/cpu_ops.h"

namespace oomb::cpu {

namespace {
void check_means(const char* op, const Tensor& means, int64_t G, int64_t D) {
  OOMB_CHECK(!means.empty() && means.dtype == DType::BF16 && means.ndim == 3 && host_addressable(means.tier),
             "{}: means must be a host (pages, G, D) bf16 tensor, got {} {}", op, dtype_name(means.dtype),
             means.shape_str());
  OOMB_CHECK(means.dim(1) == G && means.dim(2) == D, "{}: means {} do not fit (G={}, D={})", op, means.shape_str(), G,
             D);
}
}  // namespace

// k: (T, G, D) f32 of tokens [t0, t0 + T); means: (pages, G, D) bf16
void page_key_means(const Tensor& k, int64_t t0, int64_t page_size, Tensor& means) {
  check_f32("page_key_means", "k", k, 3);
  const int64_t T = k.dim(0), G = k.dim(1), D = k.dim(2), P = page_size;
  check_means("page_key_means", means, G, D);
  OOMB_CHECK(P > 0 && t0 >= 0, "page_key_means: page size {} and t0 {} must be positive", P, t0);
  OOMB_CHECK(T == 0 || (t0 + T - 1) / P < means.dim(0), "page_key_means: tokens [{}, {}) reach past the {} pages of means",
             t0, t0 + T, means.dim(0));
  uint16_t* m = means.as<uint16_t>();
  std::vector<double> sum(size_t(G * D));
  for (int64_t i = 0; i < T;) {  // page by page
    const int64_t t = t0 + i, p = t / P, r = t % P, n = std::min(P - r, T - i);
    std::fill(sum.begin(), sum.end(), 0.0);
    for (int64_t j = 0; j < n; ++j)  // rows in order
      for (int64_t e = 0; e < G * D; ++e) sum[size_t(e)] += double(k.f()[(i + j) * G * D + e]);
    uint16_t* row = m + p * G * D;
    for (int64_t e = 0; e < G * D; ++e) {
      const double before = r > 0 ? double(bf16_to_f32(row[e])) * double(r) : 0.0;
      row[e] = f32_to_bf16(float((before + sum[size_t(e)]) / double(r + n)));
    }
    i += n;
  }
}

// q: (T, H, D) f32; means: (pages, G, D) bf16; scores: (tiles, S, pages) f32, S = G or 1
void page_scores(const Tensor& q, int64_t tile, const Tensor& means, Tensor& scores) {
  check_f32("page_scores", "q", q, 3);
  check_f32("page_scores", "scores", scores, 3);
  const int64_t T = q.dim(0), H = q.dim(1), D = q.dim(2);
  OOMB_CHECK(means.ndim == 3 && means.dim(1) > 0 && H % means.dim(1) == 0,
             "page_scores: means {} do not fit q {}", means.shape_str(), q.shape_str());
  const int64_t G = means.dim(1), pages = means.dim(0);
  check_means("page_scores", means, G, D);
  OOMB_CHECK(tile > 0, "page_scores: tile must be positive, got {}", tile);
  const int64_t tiles = (T + tile - 1) / tile, S = scores.dim(1);
  OOMB_CHECK(scores.dim(0) == tiles && (S == G || S == 1) && scores.dim(2) == pages,
             "page_scores: scores {} must be ({}, {} or 1, {})", scores.shape_str(), tiles, G, pages);
  const int64_t group = H / G;
  std::vector<float> qs(size_t(G * D));  // per kv head: the tile's queries of its heads, summed
  for (int64_t i = 0; i < tiles; ++i) {
    std::fill(qs.begin(), qs.end(), 0.0f);
    for (int64_t t = i * tile; t < std::min(T, i * tile + tile); ++t)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < D; ++d) qs[size_t((h / group) * D + d)] += q.f()[(t * H + h) * D + d];
    const uint16_t* m = means.as<uint16_t>();
#pragma omp parallel for schedule(static) if (pages * G * D >= kParallelMin)
    for (int64_t p = 0; p < pages; ++p) {
      float shared = 0;
      for (int64_t g = 0; g < G; ++g) {
        float s = 0;
        for (int64_t d = 0; d < D; ++d) s += qs[size_t(g * D + d)] * bf16_to_f32(m[(p * G + g) * D + d]);
        if (S == G) scores.f()[(i * S + g) * pages + p] = s;
        shared += s;  // kv heads in order
      }
      if (S == 1) scores.f()[i * pages + p] = shared;
    }
  }
}

}  // namespace oomb::cpu
