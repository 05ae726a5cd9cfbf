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
  for (int64_t i = threadIdx.x; i < int64_t(kBM) * D; i += blockDim.x) {
    const int64_t r = i / D, c = i % D;
    sQ[r * L.ld_qkv + c] = __float2bfloat16_rn(r < rows ? q[((t0 + r) * p.H + h) * D + c] : 0.0f);
  }
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
      for (int64_t i = threadIdx.x; i < int64_t(kBN) * D; i += blockDim.x) {
        const int64_t jr = i / D, c = i % D, j = j0 + jr;
        const bool in = j < n;
        const int64_t at = (j * p.G + g) * D + c;
        sK[jr * L.ld_qkv + c] = __float2bfloat16_rn(in ? ld_kv(kb.k, bf16, at) : 0.0f);
        sV[jr * L.ld_qkv + c] = __float2bfloat16_rn(in ? ld_kv(kb.v, bf16, at) : 0.0f);
      }
      __syncthreads();

      // S (16 x 64) = Q_w (16 x D) K^T
      for (int nt = 0; nt < kBN / 16; ++nt) {
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::fill_fragment(acc, 0.0f);
        for (int kt = 0; kt < D / 16; ++kt) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
          wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> bk;
          wmma::load_matrix_sync(a, sQ + warp * 16 * L.ld_qkv + kt * 16, L.ld_qkv);
          wmma::load_matrix_sync(bk, sK + nt * 16 * L.ld_qkv + kt * 16, L.ld_qkv);  // B[d][j] = K[j][d]
          wmma::mma_sync(acc, a, bk, acc);
        }
        wmma::store_matrix_sync(sS + nt * 16, acc, L.ld_s, wmma::mem_row_major);
      }
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
      for (int dt = 0; dt < D / 16; ++dt) {
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::load_matrix_sync(acc, sO + dt * 16, L.ld_o, wmma::mem_row_major);
        for (int kt = 0; kt < kBN / 16; ++kt) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
          wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> bv;
          wmma::load_matrix_sync(a, sP + kt * 16, L.ld_p);
          wmma::load_matrix_sync(bv, sV + kt * 16 * L.ld_qkv + dt * 16, L.ld_qkv);
          wmma::mma_sync(acc, a, bv, acc);
        }
        wmma::store_matrix_sync(sO + dt * 16, acc, L.ld_o, wmma::mem_row_major);
      }
      __syncwarp();
    }
  }

  if (!row_ok) return;
  float* orow = o + (t * p.H + h) * D;
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  for (int c = half; c < D; c += 2) orow[c] = sO[r * L.ld_o + c] * inv;
  if (half == 0) lse[t * p.H + h] = l > 0.0f ? m + logf(l) : -INFINITY;
}

}  // namespace

const char* attention_fwd_wmma_unsupported(const AttnParams& p) {
  if (p.D % 16 != 0 || p.D > kWmmaMaxD) return "head dim must be a multiple of 16, at most 256";
  if (p.H % p.G != 0) return "query heads must be a multiple of kv heads";
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
