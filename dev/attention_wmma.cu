// Lab variant: paged attention forward on tensor cores (WMMA, bf16 inputs, fp32 accumulation),
// over the same block table as src/backend/cuda/kernels_attention.cu (shared/DESIGN.md section 3).
//   grid (ceil(T / 64), H), 4 warps; warp w owns queries [16w, 16w + 16) of the CUDA block's 64.
//   Per 64-key tile of a block: K, V -> bf16 shared; S = Q K^T (WMMA) -> shared fp32; online
//   softmax by rows (two lanes a row); P -> bf16 shared; O (fp32 shared) = O * c + P V (WMMA).
// Q, K, V round to bf16 before the products (the planned bf16 backend's numerics); the softmax,
// its statistics and O stay fp32. Deterministic: fixed order, no atomics. Needs D % 16 == 0,
// D <= kWmmaMaxD. Written without a GPU: the lab checks it against the CPU reference first.
#include <cuda_bf16.h>
#include <mma.h>

#include <cmath>
#include <type_traits>

#include "attention_wmma.h"

namespace oomb::cuda::lab {

namespace {

using namespace nvcuda;
using k::AttnBlock;
using k::AttnParams;

constexpr int kBM = 64, kBN = 64, kWarps = 4;

// Shared-memory strides (elements): padded against bank conflicts, multiples WMMA accepts
// (8 for bf16, 4 for fp32), and 16-row tiles stay 32-byte aligned.
struct Smem {
  int ld_qkv, ld_s, ld_p, ld_o;
  size_t q, k, v, s, p, o, total;  // byte offsets
  __host__ __device__ explicit Smem(int D) : ld_qkv(D + 8), ld_s(kBN + 4), ld_p(kBN + 8), ld_o(D + 4) {
    q = 0;
    k = q + size_t(kBM) * ld_qkv * 2;
    v = k + size_t(kBN) * ld_qkv * 2;
    s = v + size_t(kBN) * ld_qkv * 2;
    p = s + size_t(kWarps) * 16 * ld_s * 4;
    o = p + size_t(kWarps) * 16 * ld_p * 2;
    total = o + size_t(kWarps) * 16 * ld_o * 4;
  }
};

__device__ inline float ld_kv(const void* base, bool bf16, int64_t i) {
  return bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]) : static_cast<const float*>(base)[i];
}

// 64 rows of (T, H, D) fp32 from row t0 of head h -> bf16 shared (zeros past T)
__device__ inline void load_rows_bf16(__nv_bfloat16* dst, int ld, const float* src, int64_t t0, int64_t T,
                                      int64_t H, int64_t h, int D) {
  for (int64_t i = threadIdx.x; i < int64_t(64) * D; i += blockDim.x) {
    const int64_t r = i / D, c = i % D;
    dst[r * ld + c] = __float2bfloat16_rn(t0 + r < T ? src[((t0 + r) * H + h) * D + c] : 0.0f);
  }
}
// 64 keys from key j0 of a block, kv head g -> bf16 shared (zeros past len)
__device__ inline void load_keys_bf16(__nv_bfloat16* dst, int ld, const void* src, bool bf16, int64_t j0,
                                      int64_t len, int64_t G, int64_t g, int D) {
  for (int64_t i = threadIdx.x; i < int64_t(64) * D; i += blockDim.x) {
    const int64_t r = i / D, c = i % D, j = j0 + r;
    dst[r * ld + c] = __float2bfloat16_rn(j < len ? ld_kv(src, bf16, (j * G + g) * D + c) : 0.0f);
  }
}
// C (16 x 64, fp32, ldc) = A (16 x D rows of a, lda) . B^T, B = 64 rows of b (ldb): scores-shaped products
__device__ inline void rows_times_keys(const __nv_bfloat16* a, int lda, const __nv_bfloat16* b, int ldb, int D,
                                       float* c, int ldc) {
  for (int nt = 0; nt < 4; ++nt) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int kt = 0; kt < D / 16; ++kt) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb;
      wmma::load_matrix_sync(fa, a + kt * 16, lda);
      wmma::load_matrix_sync(fb, b + nt * 16 * ldb + kt * 16, ldb);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(c + nt * 16, acc, ldc, wmma::mem_row_major);
  }
}
// C (16 x D, fp32 in shared, ldc) += A (16 x 64) . B (64 x D, row-major ldb); A row-major, or
// transposed when Layout is col_major (A[i][k] read at a + k * lda + i)
template <typename Layout>
__device__ inline void accumulate_times_rows(const __nv_bfloat16* a, int lda, const __nv_bfloat16* b, int ldb, int D,
                                             float* c, int ldc) {
  for (int dt = 0; dt < D / 16; ++dt) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::load_matrix_sync(acc, c + dt * 16, ldc, wmma::mem_row_major);
    for (int kt = 0; kt < 4; ++kt) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, Layout> fa;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fb;
      if constexpr (std::is_same<Layout, wmma::row_major>::value) wmma::load_matrix_sync(fa, a + kt * 16, lda);
      else wmma::load_matrix_sync(fa, a + kt * 16 * lda, lda);
      wmma::load_matrix_sync(fb, b + kt * 16 * ldb + dt * 16, ldb);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(c + dt * 16, acc, ldc, wmma::mem_row_major);
  }
}

// q, o: (T, H, D); lse: (T, H)
__global__ void __launch_bounds__(kWarps * 32) attn_fwd_wmma_k(AttnParams p, const float* q, float* o, float* lse) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int D = int(p.D);
  const Smem L(D);
  __nv_bfloat16* sQ = reinterpret_cast<__nv_bfloat16*>(smem + L.q);
  __nv_bfloat16* sK = reinterpret_cast<__nv_bfloat16*>(smem + L.k);
  __nv_bfloat16* sV = reinterpret_cast<__nv_bfloat16*>(smem + L.v);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float* sS = reinterpret_cast<float*>(smem + L.s) + warp * 16 * L.ld_s;
  __nv_bfloat16* sP = reinterpret_cast<__nv_bfloat16*>(smem + L.p) + warp * 16 * L.ld_p;
  float* sO = reinterpret_cast<float*>(smem + L.o) + warp * 16 * L.ld_o;
  const int64_t h = blockIdx.y, g = h / (p.H / p.G), t0 = int64_t(blockIdx.x) * kBM;
  const int64_t rows = p.T - t0 < kBM ? p.T - t0 : kBM;

  // Q tile (zeros past T) and this warp's O accumulator
  load_rows_bf16(sQ, L.ld_qkv, q, t0, p.T, p.H, h, D);
  for (int i = lane; i < 16 * D; i += 32) sO[(i / D) * L.ld_o + i % D] = 0.0f;

  // this lane's row (two lanes a row, each over half the tile's columns)
  const int r = lane >> 1, half = lane & 1;
  const int64_t t = t0 + warp * 16 + r, qi = p.q_idx0 + t;
  const bool row_ok = t < p.T;
  const int32_t qdoc = row_ok && p.q_doc ? p.q_doc[t] : 0;
  float m = -INFINITY, l = 0.0f;
  const int64_t qi_last = p.q_idx0 + t0 + rows - 1;  // the CUDA block's last query

  for (int64_t b = 0; b < p.n_blocks; ++b) {
    const AttnBlock kb = p.blocks[b];
    const bool bf16 = kb.kv_bf16 != 0;
    int64_t n = qi_last - kb.idx0 + 1;  // keys any query of this CUDA block sees
    n = n < 0 ? 0 : n > kb.len ? kb.len : n;
    for (int64_t j0 = 0; j0 < n; j0 += kBN) {
      __syncthreads();  // every warp is done with the previous K, V tile
      load_keys_bf16(sK, L.ld_qkv, kb.k, bf16, j0, n, p.G, g, D);
      load_keys_bf16(sV, L.ld_qkv, kb.v, bf16, j0, n, p.G, g, D);
      __syncthreads();

      // S (16 x 64) = Q_w (16 x D) K^T
      rows_times_keys(sQ + warp * 16 * L.ld_qkv, L.ld_qkv, sK, L.ld_qkv, D, sS, L.ld_s);
      __syncwarp();

      // online softmax over the row's 64 scores; P to bf16, O rescaled
      float s[kBN / 2];
      float tmax = -INFINITY;
#pragma unroll
      for (int c = 0; c < kBN / 2; ++c) {
        const int col = half * (kBN / 2) + c;
        const int64_t j = j0 + col;
        const bool vis = row_ok && j < n && kb.idx0 + j <= qi && (!p.q_doc || !kb.doc || kb.doc[j] == qdoc);
        s[c] = vis ? sS[r * L.ld_s + col] * p.scale : -INFINITY;
        tmax = fmaxf(tmax, s[c]);
      }
      tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
      const float m_new = fmaxf(m, tmax);
      const float corr = m_new == -INFINITY ? 1.0f : expf(m - m_new);  // m = -inf: nothing to rescale
      float psum = 0.0f;
#pragma unroll
      for (int c = 0; c < kBN / 2; ++c) {
        const float pj = s[c] == -INFINITY ? 0.0f : expf(s[c] - m_new);
        psum += pj;
        sP[r * L.ld_p + half * (kBN / 2) + c] = __float2bfloat16_rn(pj);
      }
      psum += __shfl_xor_sync(0xffffffffu, psum, 1);
      l = l * corr + psum;
      m = m_new;
      for (int c = half; c < D; c += 2) sO[r * L.ld_o + c] *= corr;
      __syncwarp();

      // O_w (16 x D) += P (16 x 64) V (64 x D)
      accumulate_times_rows<wmma::row_major>(sP, L.ld_p, sV, L.ld_qkv, D, sO, L.ld_o);
      __syncwarp();
    }
  }

  __syncwarp();  // sO's zeros (no tile at all) or last products, written by other lanes
  if (!row_ok) return;
  float* orow = o + (t * p.H + h) * D;
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  for (int c = half; c < D; c += 2) orow[c] = sO[r * L.ld_o + c] * inv;
  if (half == 0) lse[t * p.H + h] = l > 0.0f ? m + logf(l) : -INFINITY;
}

// ---- backward ----
// Shared layout of the backward kernels (D <= 128: dK/dV accumulators of 64 keys stay resident).
struct BwdSmem {
  int ld_qkv, ld_s, ld_p, ld_o;
  size_t q, dout, k, v, s, dp, p, ds, dq_or_dk, dv, total;
  __host__ __device__ explicit BwdSmem(int D) : ld_qkv(D + 8), ld_s(kBN + 4), ld_p(kBN + 8), ld_o(D + 4) {
    const size_t tile = size_t(64) * ld_qkv * 2, sc = size_t(64) * ld_s * 4, pb = size_t(64) * ld_p * 2,
                 acc = size_t(64) * ld_o * 4;
    q = 0, dout = q + tile, k = dout + tile, v = k + tile;
    s = v + tile, dp = s + sc, p = dp + sc, ds = p + pb, dq_or_dk = ds + pb, dv = dq_or_dk + acc;
    total = dv + acc;
  }
};

// dsum (T, H) = rowsum(dout * o); grid (T, H), one warp
__global__ void attn_dsum_wmma_k(AttnParams p, const float* o, const float* dout, float* dsum) {
  const int64_t t = blockIdx.x, h = blockIdx.y;
  const float *orow = o + (t * p.H + h) * p.D, *drow = dout + (t * p.H + h) * p.D;
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < p.D; i += 32) s += drow[i] * orow[i];
  for (int w = 16; w > 0; w >>= 1) s += __shfl_xor_sync(0xffffffffu, s, w);
  if (threadIdx.x == 0) dsum[t * p.H + h] = s;
}

// dq (T, H, D) = sum over visible keys of dS K * scale. grid (ceil(T / 64), H), 4 warps; warp w
// owns queries [16w, 16w + 16). Per 64-key tile: S = Q K^T, dP = dO V^T (WMMA), dS by rows, dQ += dS K.
__global__ void __launch_bounds__(kWarps * 32) attn_dq_wmma_k(AttnParams p, const float* q, const float* lse,
                                                              const float* dout, const float* dsum, float* dq) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int D = int(p.D);
  const BwdSmem L(D);
  auto* sQ = reinterpret_cast<__nv_bfloat16*>(smem + L.q);
  auto* sDO = reinterpret_cast<__nv_bfloat16*>(smem + L.dout);
  auto* sK = reinterpret_cast<__nv_bfloat16*>(smem + L.k);
  auto* sV = reinterpret_cast<__nv_bfloat16*>(smem + L.v);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, r = lane >> 1, half = lane & 1;
  float* sS = reinterpret_cast<float*>(smem + L.s) + warp * 16 * L.ld_s;
  float* sDP = reinterpret_cast<float*>(smem + L.dp) + warp * 16 * L.ld_s;
  auto* sDS = reinterpret_cast<__nv_bfloat16*>(smem + L.ds) + warp * 16 * L.ld_p;
  float* sDQ = reinterpret_cast<float*>(smem + L.dq_or_dk) + warp * 16 * L.ld_o;
  const int64_t h = blockIdx.y, g = h / (p.H / p.G), t0 = int64_t(blockIdx.x) * 64;
  const int64_t rows = p.T - t0 < 64 ? p.T - t0 : 64;
  load_rows_bf16(sQ, L.ld_qkv, q, t0, p.T, p.H, h, D);
  load_rows_bf16(sDO, L.ld_qkv, dout, t0, p.T, p.H, h, D);
  for (int i = lane; i < 16 * D; i += 32) sDQ[(i / D) * L.ld_o + i % D] = 0.0f;
  const int64_t t = t0 + warp * 16 + r, qi = p.q_idx0 + t;
  const bool row_ok = t < p.T;
  const float Lr = row_ok ? lse[t * p.H + h] : -INFINITY, Dr = row_ok ? dsum[t * p.H + h] : 0.0f;
  const int32_t qdoc = row_ok && p.q_doc ? p.q_doc[t] : 0;
  const int64_t qi_last = p.q_idx0 + t0 + rows - 1;
  for (int64_t b = 0; b < p.n_blocks; ++b) {
    const AttnBlock kb = p.blocks[b];
    int64_t n = qi_last - kb.idx0 + 1;
    n = n < 0 ? 0 : n > kb.len ? kb.len : n;
    for (int64_t j0 = 0; j0 < n; j0 += kBN) {
      __syncthreads();  // the previous tile is no longer read (and Q, dO are loaded)
      load_keys_bf16(sK, L.ld_qkv, kb.k, kb.kv_bf16 != 0, j0, n, p.G, g, D);
      load_keys_bf16(sV, L.ld_qkv, kb.v, kb.kv_bf16 != 0, j0, n, p.G, g, D);
      __syncthreads();
      rows_times_keys(sQ + warp * 16 * L.ld_qkv, L.ld_qkv, sK, L.ld_qkv, D, sS, L.ld_s);
      rows_times_keys(sDO + warp * 16 * L.ld_qkv, L.ld_qkv, sV, L.ld_qkv, D, sDP, L.ld_s);
      __syncwarp();
      for (int c = half * 32; c < half * 32 + 32; ++c) {
        const int64_t j = j0 + c;
        const bool vis = row_ok && !isinf(Lr) && j < n && kb.idx0 + j <= qi && (!p.q_doc || !kb.doc || kb.doc[j] == qdoc);
        const float pj = vis ? expf(sS[r * L.ld_s + c] * p.scale - Lr) : 0.0f;
        sDS[r * L.ld_p + c] = __float2bfloat16_rn(pj * (sDP[r * L.ld_s + c] - Dr) * p.scale);
      }
      __syncwarp();
      accumulate_times_rows<wmma::row_major>(sDS, L.ld_p, sK, L.ld_qkv, D, sDQ, L.ld_o);
      __syncwarp();
    }
  }
  __syncwarp();  // sDQ's zeros (no tile at all) or last products, written by other lanes
  if (!row_ok) return;
  float* out = dq + (t * p.H + h) * D;
  for (int c = half; c < D; c += 2) out[c] = sDQ[r * L.ld_o + c];
}

// dK, dV of 64 keys of one block and kv head, added once into the block's gradient rows (f32 or
// bf16). grid (n_blocks, G, ceil(max_len / 64)), 4 warps. Per (64-query tile, head of the group):
// S, dP (warp w: queries [16w, 16w + 16)), P and dS by rows; then dV += P^T dO, dK += dS^T Q
// (warp w: keys [16w, 16w + 16)). Queries and heads in ascending order: deterministic.
__global__ void __launch_bounds__(kWarps * 32) attn_dkdv_wmma_k(AttnParams p, const float* q, const float* lse,
                                                                const float* dout, const float* dsum) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int D = int(p.D);
  const BwdSmem L(D);
  const AttnBlock kb = p.blocks[blockIdx.x];
  const int64_t g = blockIdx.y, j0 = int64_t(blockIdx.z) * 64, group = p.H / p.G;
  if (j0 >= kb.len) return;  // the whole CUDA block leaves together
  auto* sQ = reinterpret_cast<__nv_bfloat16*>(smem + L.q);
  auto* sDO = reinterpret_cast<__nv_bfloat16*>(smem + L.dout);
  auto* sK = reinterpret_cast<__nv_bfloat16*>(smem + L.k);
  auto* sV = reinterpret_cast<__nv_bfloat16*>(smem + L.v);
  float* sS = reinterpret_cast<float*>(smem + L.s);
  float* sDP = reinterpret_cast<float*>(smem + L.dp);
  auto* sP = reinterpret_cast<__nv_bfloat16*>(smem + L.p);
  auto* sDS = reinterpret_cast<__nv_bfloat16*>(smem + L.ds);
  float* sDK = reinterpret_cast<float*>(smem + L.dq_or_dk);
  float* sDV = reinterpret_cast<float*>(smem + L.dv);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, r = lane >> 1, half = lane & 1;
  load_keys_bf16(sK, L.ld_qkv, kb.k, kb.kv_bf16 != 0, j0, kb.len, p.G, g, D);
  load_keys_bf16(sV, L.ld_qkv, kb.v, kb.kv_bf16 != 0, j0, kb.len, p.G, g, D);
  for (int64_t i = threadIdx.x; i < int64_t(64) * D; i += blockDim.x)
    sDK[(i / D) * L.ld_o + i % D] = 0.0f, sDV[(i / D) * L.ld_o + i % D] = 0.0f;
  const int64_t first = kb.idx0 + j0 - p.q_idx0;  // the first query that sees the tile's first key
  for (int64_t t0 = first > 0 ? first : 0; t0 < p.T; t0 += 64)
    for (int64_t h = g * group; h < (g + 1) * group; ++h) {
      __syncthreads();  // the previous (t0, h) products are done with sQ, sDO, sP, sDS
      load_rows_bf16(sQ, L.ld_qkv, q, t0, p.T, p.H, h, D);
      load_rows_bf16(sDO, L.ld_qkv, dout, t0, p.T, p.H, h, D);
      __syncthreads();
      rows_times_keys(sQ + warp * 16 * L.ld_qkv, L.ld_qkv, sK, L.ld_qkv, D, sS + warp * 16 * L.ld_s, L.ld_s);
      rows_times_keys(sDO + warp * 16 * L.ld_qkv, L.ld_qkv, sV, L.ld_qkv, D, sDP + warp * 16 * L.ld_s, L.ld_s);
      __syncwarp();
      const int64_t row = warp * 16 + r, t = t0 + row;
      const bool row_ok = t < p.T;
      const float Lr = row_ok ? lse[t * p.H + h] : -INFINITY, Dr = row_ok ? dsum[t * p.H + h] : 0.0f;
      const int32_t qdoc = row_ok && p.q_doc ? p.q_doc[t] : 0;
      for (int c = half * 32; c < half * 32 + 32; ++c) {
        const int64_t j = j0 + c;
        const bool vis = row_ok && !isinf(Lr) && j < kb.len && kb.idx0 + j <= p.q_idx0 + t &&
                         (!p.q_doc || !kb.doc || kb.doc[j] == qdoc);
        const float pj = vis ? expf(sS[row * L.ld_s + c] * p.scale - Lr) : 0.0f;
        sP[row * L.ld_p + c] = __float2bfloat16_rn(pj);
        sDS[row * L.ld_p + c] = __float2bfloat16_rn(pj * (sDP[row * L.ld_s + c] - Dr) * p.scale);
      }
      __syncthreads();  // every query row of P and dS is written
      // keys [16w, 16w + 16): A = P^T (A[key][query] = P[query][key], read column-major)
      accumulate_times_rows<wmma::col_major>(sP + warp * 16, L.ld_p, sDO, L.ld_qkv, D, sDV + warp * 16 * L.ld_o, L.ld_o);
      accumulate_times_rows<wmma::col_major>(sDS + warp * 16, L.ld_p, sQ, L.ld_qkv, D, sDK + warp * 16 * L.ld_o, L.ld_o);
    }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < int64_t(64) * D; i += blockDim.x) {
    const int64_t jr = i / D, c = i % D, j = j0 + jr;
    if (j >= kb.len) continue;
    const int64_t at = (j * p.G + g) * D + c;
    const float dk = sDK[jr * L.ld_o + c], dv = sDV[jr * L.ld_o + c];
    if (kb.grad_bf16) {
      auto *k16 = static_cast<__nv_bfloat16*>(kb.dk) + at, *v16 = static_cast<__nv_bfloat16*>(kb.dv) + at;
      *k16 = __float2bfloat16_rn(__bfloat162float(*k16) + dk);
      *v16 = __float2bfloat16_rn(__bfloat162float(*v16) + dv);
    } else {
      static_cast<float*>(kb.dk)[at] += dk;
      static_cast<float*>(kb.dv)[at] += dv;
    }
  }
}

}  // namespace

const char* attention_bwd_wmma_unsupported(const AttnParams& p) {
  if (p.D % 16 != 0 || p.D > kWmmaMaxBwdD) return "head dim must be a multiple of 16, at most 128";
  if (p.G <= 0 || p.H % p.G != 0) return "query heads must be a positive multiple of kv heads";
  if ((p.max_len + 63) / 64 > 65535 || p.G > 65535) return "a block of more than 65535 64-key tiles";
  return nullptr;
}

cudaError_t attention_bwd_wmma(const AttnParams& p, const float* q, const float* o, const float* lse,
                               const float* dout, float* dq, float* dsum, cudaStream_t s) {
  if (p.T == 0) return cudaSuccess;
  const size_t shared = BwdSmem(int(p.D)).total;
  cudaError_t e = cudaFuncSetAttribute(attn_dq_wmma_k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared));
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(attn_dkdv_wmma_k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared));
  if (e != cudaSuccess) return e;
  attn_dsum_wmma_k<<<dim3(unsigned(p.T), unsigned(p.H)), 32, 0, s>>>(p, o, dout, dsum);
  attn_dq_wmma_k<<<dim3(unsigned((p.T + 63) / 64), unsigned(p.H)), kWarps * 32, shared, s>>>(p, q, lse, dout, dsum, dq);
  if (p.n_blocks > 0 && p.max_len > 0)
    attn_dkdv_wmma_k<<<dim3(unsigned(p.n_blocks), unsigned(p.G), unsigned((p.max_len + 63) / 64)), kWarps * 32, shared,
                       s>>>(p, q, lse, dout, dsum);
  return cudaGetLastError();
}

const char* attention_fwd_wmma_unsupported(const AttnParams& p) {
  if (p.D % 16 != 0 || p.D > kWmmaMaxD) return "head dim must be a multiple of 16, at most 256";
  if (p.G <= 0 || p.H % p.G != 0) return "query heads must be a positive multiple of kv heads";
  return nullptr;
}

size_t attention_fwd_wmma_shared_bytes(int64_t D) { return Smem(int(D)).total; }

cudaError_t attention_fwd_wmma(const AttnParams& p, const float* q, float* o, float* lse, cudaStream_t s) {
  if (p.T == 0) return cudaSuccess;
  const size_t shared = attention_fwd_wmma_shared_bytes(p.D);
  cudaError_t e = cudaFuncSetAttribute(attn_fwd_wmma_k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared));
  if (e != cudaSuccess) return e;
  const dim3 grid(unsigned((p.T + kBM - 1) / kBM), unsigned(p.H));
  attn_fwd_wmma_k<<<grid, kWarps * 32, shared, s>>>(p, q, o, lse);
  return cudaGetLastError();
}

}  // namespace oomb::cuda::lab
