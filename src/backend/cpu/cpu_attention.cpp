// Causal GQA attention over a list of KV blocks (design notes: shared/DESIGN.md, section 3), CPU reference.
// Blocks hold K/V in f32 or bf16 (pages with --kv-dtype bf16), each read as fp32.
// Forward folds blocks in with an online softmax and keeps LSE; never forms a T x N matrix.
// Each (query, head) scores a whole block at once so the exponentials vectorize.
// Backward: pass 1 computes dq per (query, head); pass 2 accumulates dk/dv per (kv head, block),
// so no two threads write the same element and results are deterministic.
#include <algorithm>
#include <cmath>
#include <limits>

#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/fast_exp.h"

namespace oomb::cpu {

namespace {

struct Dims {
  int64_t T, H, G, D, group;
};

// The shapes (checked once, op_checks.cpp): q (T, H, D), every block (len, G, D).
Dims dims_of(const Tensor& q, std::span<const KVBlock> blocks) {
  Dims d{q.dim(0), q.dim(1), blocks.empty() ? 0 : blocks[0].k.dim(1), q.dim(2), 0};
  if (d.G > 0) d.group = d.H / d.G;
  return d;
}

// K/V elements: f32, or bf16 (uint16_t) widened exactly to fp32, so a bf16 block gives the same
// bits as an f32 block holding the same values.
inline float ld(float x) { return x; }
inline float ld(uint16_t x) { return bf16_to_f32(x); }

// Calls fn(k, v) with the block's K and V as typed pointers (const float* or const uint16_t*).
template <typename Fn>
inline decltype(auto) with_kv(const KVBlock& kb, Fn&& fn) {
  if (kb.k.dtype == DType::BF16) return fn(static_cast<const uint16_t*>(kb.k.data), static_cast<const uint16_t*>(kb.v.data));
  return fn(static_cast<const float*>(kb.k.data), static_cast<const float*>(kb.v.data));
}

// Four partial sums in a fixed order: deterministic, and the compiler can keep them in one vector.
template <typename E>
inline float dot(const float* a, const E* b, int64_t n) {
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += a[i] * ld(b[i]);
    s1 += a[i + 1] * ld(b[i + 1]);
    s2 += a[i + 2] * ld(b[i + 2]);
    s3 += a[i + 3] * ld(b[i + 3]);
  }
  for (; i < n; ++i) s0 += a[i] * ld(b[i]);
  return (s0 + s1) + (s2 + s3);
}

// Keys j of block kb visible to query at sequence index qi: j < visible(); plus the doc check.
inline int64_t visible(const KVBlock& kb, int64_t qi) {
  return std::min(kb.k.dim(0), std::max<int64_t>(0, qi - kb.idx0 + 1));
}
inline bool same_doc(const AttnArgs& a, int64_t t, const KVBlock& kb, int64_t j) {
  return a.q_doc == nullptr || kb.doc == nullptr || a.q_doc[t] == kb.doc[j];
}
// Whether kv head g (and its query heads) reads the block (KVBlock::heads).
inline bool reads(const KVBlock& kb, int64_t g) { return g >= 64 || (kb.heads >> g & 1) != 0; }
// Whether every key of the block is behind query qi's window (such a block is skipped).
inline bool before_window(const AttnArgs& a, const KVBlock& kb, int64_t qi) {
  return a.window > 0 && kb.idx0 + kb.k.dim(0) - 1 <= qi - a.window;
}

// Scores of query qv against the n visible keys of block kb for kv head g, times scale; keys of
// other documents get -inf. Returns the row maximum.
template <typename E>
[[gnu::always_inline]] inline float block_scores(const AttnArgs& a, const Dims& d, const KVBlock& kb, const E* K, int64_t g, int64_t t,
                   const float* qv, int64_t n, float* s) {
  const float ninf = -std::numeric_limits<float>::infinity();
  float mx = ninf;
  int64_t j = 0;
  if (a.window > 0) {  // keys before the sliding window: decided once, not per key
    for (const int64_t lo = std::clamp<int64_t>(a.q_idx0 + t - a.window + 1 - kb.idx0, 0, n); j < lo; ++j) s[j] = ninf;
  }
  for (; j < n; ++j) {
    s[j] = same_doc(a, t, kb, j) ? dot(qv, K + (j * d.G + g) * d.D, d.D) * a.scale : ninf;
    mx = std::max(mx, s[j]);
  }
  return mx;
}

// p_j = exp(s_j - shift), in place; returns the sum.
float exp_shifted(float* s, int64_t n, float shift) {
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < n; ++j) {
    s[j] = exp_fast(s[j] - shift);
    sum += s[j];
  }
  return sum;
}

// acc (D) += sum_j p_j * rows_j (D), rows_j at rows + j * stride
template <typename E>
inline void axpy_rows(const float* __restrict p, const E* __restrict rows, int64_t stride, int64_t n, int64_t D,
                      float* __restrict acc) {
  for (int64_t j = 0; j < n; ++j) {
    const float pj = p[j];
    const E* __restrict r = rows + j * stride;
    for (int64_t i = 0; i < D; ++i) acc[i] += pj * ld(r[i]);
  }
}

// A per-thread scores buffer of at least n floats, grown once to the largest block.
float* scores_buffer(int64_t n) {
  static thread_local std::vector<float> buf;
  if (int64_t(buf.size()) < n) buf.resize(size_t(n));
  return buf.data();
}

int64_t max_block(std::span<const KVBlock> blocks) {
  int64_t m = 0;
  for (const KVBlock& b : blocks) m = std::max(m, b.k.dim(0));
  return m;
}

}  // namespace

// q, o: (T, H, D); each block k, v: (L, G, D); lse: (T, H)
void attention_fwd(const Tensor& q, std::span<const KVBlock> blocks, const AttnArgs& a, Tensor& o, Tensor& lse) {
  const Dims d = dims_of(q, blocks);
  const float ninf = -std::numeric_limits<float>::infinity();
  const int64_t bmax = max_block(blocks);
#pragma omp parallel for collapse(2) schedule(dynamic, 16)
  for (int64_t t = 0; t < d.T; ++t)
    for (int64_t h = 0; h < d.H; ++h) {
      const int64_t g = h / d.group, qi = a.q_idx0 + t;
      const float* qv = q.f() + (t * d.H + h) * d.D;
      float* acc = o.f() + (t * d.H + h) * d.D;
      float* s = scores_buffer(bmax);
      float m = ninf, l = 0;
      if (a.first) {
        std::fill_n(acc, d.D, 0.0f);
      } else {  // the state the previous call left: unnormalized acc, running max and sum
        m = lse.f()[t * d.H + h];
        l = a.run_sum.f()[t * d.H + h];
      }
      for (const KVBlock& kb : blocks) {  // fold each block in with an online softmax
        if (!reads(kb, g)) continue;
        const int64_t n = visible(kb, qi);
        if (n == 0 || before_window(a, kb, qi)) continue;
        with_kv(kb, [&](const auto* K, const auto* V) {
          const float bm = block_scores(a, d, kb, K, g, t, qv, n, s);
          if (bm == ninf) return;  // every visible key is in another document
          if (bm > m) {
            const float c = std::exp(m - bm);
            l *= c;
            for (int64_t i = 0; i < d.D; ++i) acc[i] *= c;
            m = bm;
          }
          l += exp_shifted(s, n, m);
          axpy_rows(s, V + g * d.D, d.G * d.D, n, d.D, acc);
        });
      }
      if (!a.last) {
        lse.f()[t * d.H + h] = m;
        a.run_sum.f()[t * d.H + h] = l;
        continue;
      }
      if (l > 0)
        for (int64_t i = 0; i < d.D; ++i) acc[i] /= l;
      lse.f()[t * d.H + h] = l > 0 ? m + std::log(l) : ninf;
    }
}

// P = exp(S - lse); dV += P^T dO; dP = dO V^T; dS = P (dP - Dsum); dQ = dS K scale; dK += dS^T Q scale
void attention_bwd(const Tensor& q, const Tensor& o, const Tensor& lse, const Tensor& dout,
                   std::span<const KVBlock> blocks, const AttnArgs& a, Tensor& dq) {
  const Dims d = dims_of(q, blocks);
  const float* L = lse.f();
  const int64_t bmax = max_block(blocks);
  auto dsum = [&](int64_t t, int64_t h) {  // rowsum(dO * O)
    return dot(dout.f() + (t * d.H + h) * d.D, o.f() + (t * d.H + h) * d.D, d.D);
  };

  // pass 1: dq, one (query, head) per iteration
#pragma omp parallel for collapse(2) schedule(dynamic, 16)
  for (int64_t t = 0; t < d.T; ++t)
    for (int64_t h = 0; h < d.H; ++h) {
      const int64_t g = h / d.group, qi = a.q_idx0 + t;
      const float *qv = q.f() + (t * d.H + h) * d.D, *dov = dout.f() + (t * d.H + h) * d.D;
      float* dqv = dq.f() + (t * d.H + h) * d.D;
      float* s = scores_buffer(bmax);
      if (a.first) std::fill_n(dqv, d.D, 0.0f);  // later calls of a fold accumulate
      const float lse_th = L[t * d.H + h];
      if (std::isinf(lse_th)) continue;
      const float ds_sum = dsum(t, h);
      for (const KVBlock& kb : blocks) {
        if (!reads(kb, g)) continue;
        const int64_t n = visible(kb, qi);
        if (n == 0 || before_window(a, kb, qi)) continue;
        with_kv(kb, [&](const auto* K, const auto* V) {
          block_scores(a, d, kb, K, g, t, qv, n, s);
          exp_shifted(s, n, lse_th);
          for (int64_t j = 0; j < n; ++j) {
            if (s[j] == 0.0f) continue;
            const auto* kr = K + (j * d.G + g) * d.D;
            const float ds = s[j] * (dot(dov, V + (j * d.G + g) * d.D, d.D) - ds_sum) * a.scale;
            for (int64_t i = 0; i < d.D; ++i) dqv[i] += ds * ld(kr[i]);
          }
        });
      }
    }

  // pass 2: dk, dv, one (block, kv head) per iteration; each key sums over queries, then heads,
  // in ascending order into an fp32 scratch, which is then added into the block's gradient rows
  // (f32, or bf16 rounded once per call)
  const int64_t nb = int64_t(blocks.size());
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t g = 0; g < d.G; ++g) {
      const KVBlock& kb = blocks[b];
      if (!reads(kb, g)) continue;  // masked for this group: its gradient rows stay as they are
      const int64_t len = kb.k.dim(0);
      float* s = scores_buffer(bmax);
      static thread_local std::vector<float> acc;
      acc.assign(size_t(2 * len * d.D), 0.0f);
      float *dks = acc.data(), *dvs = acc.data() + len * d.D;  // (len, D) each
      for (int64_t t = std::max<int64_t>(0, kb.idx0 - a.q_idx0); t < d.T; ++t) {
        const int64_t n = before_window(a, kb, a.q_idx0 + t) ? 0 : visible(kb, a.q_idx0 + t);
        for (int64_t h = g * d.group; h < (g + 1) * d.group; ++h) {
          const float lse_th = L[t * d.H + h];
          if (n == 0 || std::isinf(lse_th)) continue;
          const float *qv = q.f() + (t * d.H + h) * d.D, *dov = dout.f() + (t * d.H + h) * d.D;
          const float ds_sum = dsum(t, h);
          with_kv(kb, [&](const auto* K, const auto* V) {
            block_scores(a, d, kb, K, g, t, qv, n, s);
            exp_shifted(s, n, lse_th);
            for (int64_t j = 0; j < n; ++j) {
              if (s[j] == 0.0f) continue;
              const float p = s[j];
              const float ds = p * (dot(dov, V + (j * d.G + g) * d.D, d.D) - ds_sum) * a.scale;
              for (int64_t i = 0; i < d.D; ++i) {
                dvs[j * d.D + i] += p * dov[i];
                dks[j * d.D + i] += ds * qv[i];
              }
            }
          });
        }
      }
      for (int64_t j = 0; j < len; ++j)
        for (int64_t i = 0; i < d.D; ++i) {
          const int64_t at = (j * d.G + g) * d.D + i;
          if (kb.dk.dtype == DType::F32) {
            kb.dk.f()[at] += dks[j * d.D + i];
            kb.dv.f()[at] += dvs[j * d.D + i];
          } else {
            uint16_t *k16 = kb.dk.as<uint16_t>() + at, *v16 = kb.dv.as<uint16_t>() + at;
            *k16 = f32_to_bf16(bf16_to_f32(*k16) + dks[j * d.D + i]);
            *v16 = f32_to_bf16(bf16_to_f32(*v16) + dvs[j * d.D + i]);
          }
        }
    }
}

}  // namespace oomb::cpu
