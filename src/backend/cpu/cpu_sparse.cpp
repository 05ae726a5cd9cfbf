// Sparse attention's page metadata, page scores and top-K (--sparse-pages), CPU reference.
// Each runs in a fixed order (no reduction depends on the thread count), so the choice they feed
// is deterministic.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_ops.h"

namespace oomb::cpu {

// Shapes, dtypes and page ranges are checked once, for every backend (op_checks.cpp).

// k: (T, G, D) f32 of tokens [t0, t0 + T); means: (pages, G, D) bf16
void page_key_means(const Tensor& k, int64_t t0, int64_t page_size, Tensor& means) {
  const int64_t T = k.dim(0), G = k.dim(1), D = k.dim(2), P = page_size;
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
  const int64_t T = q.dim(0), H = q.dim(1), D = q.dim(2);
  const int64_t G = means.dim(1), pages = means.dim(0);
  const int64_t tiles = (T + tile - 1) / tile, S = scores.dim(1);
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

// k: (T, G, D) f32 of tokens [t0, t0 + T); minmax: (pages, 2, G, D) bf16
void page_key_minmax(const Tensor& k, int64_t t0, int64_t page_size, Tensor& minmax) {
  const int64_t T = k.dim(0), G = k.dim(1), D = k.dim(2), P = page_size, GD = G * D;
  uint16_t* m = minmax.as<uint16_t>();
  std::vector<float> a(static_cast<size_t>(GD)), b(static_cast<size_t>(GD));
  for (int64_t i = 0; i < T;) {  // page by page
    const int64_t t = t0 + i, p = t / P, r = t % P, n = std::min(P - r, T - i);
    uint16_t *lo = m + p * 2 * GD, *hi = lo + GD;
    // rows in order, then the page's earlier bounds: the device's comparisons in the device's order
    std::copy(k.f() + i * GD, k.f() + (i + 1) * GD, a.begin());
    std::copy(k.f() + i * GD, k.f() + (i + 1) * GD, b.begin());
    for (int64_t j = 1; j < n; ++j)
      for (int64_t e = 0; e < GD; ++e) {
        const float x = k.f()[(i + j) * GD + e];
        a[size_t(e)] = x < a[size_t(e)] ? x : a[size_t(e)];
        b[size_t(e)] = x > b[size_t(e)] ? x : b[size_t(e)];
      }
    for (int64_t e = 0; e < GD; ++e) {
      float &mn = a[size_t(e)], &mx = b[size_t(e)];
      if (r > 0) {  // the page's earlier rows: their bounds are bf16 values, exact in f32
        const float a0 = bf16_to_f32(lo[e]), b0 = bf16_to_f32(hi[e]);
        mn = a0 < mn ? a0 : mn;
        mx = b0 > mx ? b0 : mx;
      }
      lo[e] = f32_to_bf16_down(mn);
      hi[e] = f32_to_bf16_up(mx);
    }
    i += n;
  }
}

// q: (T, H, D) f32; minmax: (pages, 2, G, D) bf16; scores: (tiles, S, pages) f32, S = G or 1
void page_quest_scores(const Tensor& q, int64_t tile, const Tensor& minmax, Tensor& scores) {
  const int64_t T = q.dim(0), H = q.dim(1), D = q.dim(2);
  const int64_t G = minmax.dim(2), pages = minmax.dim(0), GD = G * D;
  const int64_t tiles = (T + tile - 1) / tile, S = scores.dim(1), group = H / G;
  // per kv head: the sums of the positive and of the other parts of its heads' queries in the tile
  std::vector<float> qp(static_cast<size_t>(GD)), qn(static_cast<size_t>(GD));
  for (int64_t i = 0; i < tiles; ++i) {
    std::fill(qp.begin(), qp.end(), 0.0f);
    std::fill(qn.begin(), qn.end(), 0.0f);
    for (int64_t t = i * tile; t < std::min(T, i * tile + tile); ++t)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < D; ++d) {
          const float v = q.f()[(t * H + h) * D + d];
          const size_t e = size_t((h / group) * D + d);
          if (v > 0)
            qp[e] += v;
          else
            qn[e] += v;
        }
    const uint16_t* m = minmax.as<uint16_t>();
#pragma omp parallel for schedule(static) if (pages * GD >= kParallelMin)
    for (int64_t p = 0; p < pages; ++p) {
      const uint16_t *lo = m + p * 2 * GD, *hi = lo + GD;
      float shared = 0;
      for (int64_t g = 0; g < G; ++g) {
        float s = 0;
        for (int64_t d = g * D; d < (g + 1) * D; ++d)
          s += qp[size_t(d)] * bf16_to_f32(hi[d]) + qn[size_t(d)] * bf16_to_f32(lo[d]);
        if (S == G) scores.f()[(i * S + g) * pages + p] = s;
        shared += s;  // kv heads in order
      }
      if (S == 1) scores.f()[i * pages + p] = shared;
    }
  }
}

// scores: (tiles, S, pages) f32; chosen: (tiles, S, K) int32
void page_topk(const Tensor& scores, int64_t first, Tensor& chosen) {
  const int64_t rows = scores.dim(0) * scores.dim(1), pages = scores.dim(2);
  const int64_t K = chosen.dim(2);
#pragma omp parallel for schedule(static) if (rows * pages >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    static thread_local std::vector<int64_t> order;  // the candidates
    order.clear();
    for (int64_t p = first; p < pages; ++p) order.push_back(p);
    const float* row = scores.f() + r * pages;
    if (int64_t(order.size()) > K) {
      auto key = [&](int64_t p) {
        const float v = row[p];
        return std::isnan(v) ? -std::numeric_limits<float>::infinity() : v;
      };
      // higher score first, ties to the lower page: a strict total order, so the choice is deterministic
      auto before = [&](int64_t a, int64_t b) { return key(a) > key(b) || (key(a) == key(b) && a < b); };
      std::nth_element(order.begin(), order.begin() + K - 1, order.end(), before);
      order.resize(size_t(K));
      std::sort(order.begin(), order.end());
    }
    int32_t* out = chosen.as<int32_t>() + r * K;
    for (int64_t j = 0; j < K; ++j) out[j] = j < int64_t(order.size()) ? int32_t(order[size_t(j)]) : -1;
  }
}

}  // namespace oomb::cpu
