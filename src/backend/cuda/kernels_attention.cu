// Causal GQA attention over a table of KV blocks (pages, partial pages, the chunk's own K/V), the
// algebra of shared/DESIGN.md section 3. Correctness-first kernels, fp32:
//   forward, dq: one warp per (query, head); each 32-key tile scores one key per lane, folds the
//     tile into an online softmax, then accumulates P V (or dS K) with lanes over the head dim.
//   dk, dv:      one warp per (block, kv head, 32 keys); it walks the queries in order (heads of the
//     group inside), accumulating in shared memory, then adds into the block's gradient rows once.
// No atomics: each output element has one writer and a fixed order, so results are deterministic.
// Head dims up to kMaxHeadDim (each lane holds D/32 of a row). A block's K/V are f32 or bf16, read
// as fp32 (bf16 widens exactly, so a bf16 block gives the bits of an f32 block of the same values).
#include <cuda_bf16.h>

#include <cmath>

#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"

namespace oomb::cuda::k {

namespace {

constexpr unsigned kFull = 0xffffffffu;
constexpr int kPerLane = int(kMaxHeadDim / 32);
constexpr int kWarps = 4;  // queries per CUDA block (forward, dq)

__device__ inline float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
  return v;
}
__device__ inline float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

// keys of block b visible to the query at sequence index qi: [0, visible)
__device__ inline int64_t visible(const AttnBlock& b, int64_t qi) {
  const int64_t n = qi - b.idx0 + 1;
  return n < 0 ? 0 : n > b.len ? b.len : n;
}

// K or V of a block (global): element i as fp32, from f32 or bf16 storage
struct Rows {
  const void* p;
  bool bf16;
  __device__ float operator()(int64_t i) const {
    return bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]) : static_cast<const float*>(p)[i];
  }
};

// a (shared) . b[off, off + D) (global), four partial sums as the CPU's dot
__device__ inline float dot(const float* a, const Rows& b, int64_t off, int64_t D) {
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = 0;
  for (; i + 4 <= D; i += 4) {
    s0 += a[i] * b(off + i);
    s1 += a[i + 1] * b(off + i + 1);
    s2 += a[i + 2] * b(off + i + 2);
    s3 += a[i + 3] * b(off + i + 3);
  }
  for (; i < D; ++i) s0 += a[i] * b(off + i);
  return (s0 + s1) + (s2 + s3);
}

__device__ inline void load_row(float* dst, const float* src, int64_t D, int lane) {
  for (int64_t i = lane; i < D; i += 32) dst[i] = src[i];
  __syncwarp();
}

// q, o: (T, H, D); lse: (T, H). grid (ceil(T / kWarps), H), kWarps warps; shared: kWarps * D floats
__global__ void attn_fwd_k(AttnParams p, const float* q, float* o, float* lse) {
  OOMB_DYNAMIC_SHARED(float, smem);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t h = blockIdx.y, t = int64_t(blockIdx.x) * kWarps + warp, D = p.D;
  if (t >= p.T) return;  // whole warps leave; only warp-level sync below
  const int64_t g = h / (p.H / p.G), qi = p.q_idx0 + t;
  float* sq = smem + warp * D;
  load_row(sq, q + (t * p.H + h) * D, D, lane);
  const int32_t qdoc = p.q_doc ? p.q_doc[t] : 0;
  float* orow = o + (t * p.H + h) * D;
  float acc[kPerLane];
  float m = -INFINITY, l = 0.0f;
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int64_t i = lane + 32 * k;
    acc[k] = !p.first && i < D ? orow[i] : 0.0f;  // a fold's later call: the state left in o
  }
  if (!p.first) m = lse[t * p.H + h], l = p.run_sum[t * p.H + h];
  for (int64_t b = 0; b < p.n_blocks; ++b) {
    const AttnBlock kb = p.blocks[b];
    if (g < 64 && !((kb.heads >> g) & 1)) continue;  // masked for this kv head group (sparse)
    const Rows K{kb.k, kb.kv_bf16 != 0}, V{kb.v, kb.kv_bf16 != 0};
    const int64_t n = visible(kb, qi);
    for (int64_t j0 = 0; j0 < n; j0 += 32) {
      const int64_t j = j0 + lane;
      float s = -INFINITY;
      if (j < n && (!p.q_doc || !kb.doc || kb.doc[j] == qdoc) && (p.window <= 0 || kb.idx0 + j > qi - p.window))
        s = dot(sq, K, (j * p.G + g) * D, D) * p.scale;
      const float tmax = warp_max(s);
      if (tmax == -INFINITY) continue;  // the tile's keys are all in other documents
      if (tmax > m) {
        const float c = expf(m - tmax);
        l *= c;
#pragma unroll
        for (int k = 0; k < kPerLane; ++k) acc[k] *= c;
        m = tmax;
      }
      const float pj = s == -INFINITY ? 0.0f : expf(s - m);
      l += warp_sum(pj);
      const int cnt = int(n - j0 < 32 ? n - j0 : 32);
      for (int jj = 0; jj < cnt; ++jj) {
        const float pv = __shfl_sync(kFull, pj, jj);
        if (pv == 0.0f) continue;
        const int64_t vr = ((j0 + jj) * p.G + g) * D;
#pragma unroll
        for (int k = 0; k < kPerLane; ++k) {
          const int64_t i = lane + 32 * k;
          if (i < D) acc[k] += pv * V(vr + i);
        }
      }
    }
  }
  __syncwarp();
  if (!p.last) {  // keep the state for the next call
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int64_t i = lane + 32 * k;
      if (i < D) orow[i] = acc[k];
    }
    if (lane == 0) lse[t * p.H + h] = m, p.run_sum[t * p.H + h] = l;
    return;
  }
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int64_t i = lane + 32 * k;
    if (i < D) orow[i] = l > 0.0f ? acc[k] / l : 0.0f;
  }
  if (lane == 0) lse[t * p.H + h] = l > 0.0f ? m + logf(l) : -INFINITY;
}

// dsum (T, H) = rowsum(dout * o); grid (ceil(T / kWarps), H)
__global__ void attn_dsum_k(AttnParams p, const float* o, const float* dout, float* dsum) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t h = blockIdx.y, t = int64_t(blockIdx.x) * kWarps + warp;
  if (t >= p.T) return;
  const float *orow = o + (t * p.H + h) * p.D, *drow = dout + (t * p.H + h) * p.D;
  float s = 0.0f;
  for (int64_t i = lane; i < p.D; i += 32) s += drow[i] * orow[i];
  s = warp_sum(s);
  if (lane == 0) dsum[t * p.H + h] = s;
}

// dq; grid (ceil(T / kWarps), H); shared: 2 kWarps D floats
__global__ void attn_dq_k(AttnParams p, const float* q, const float* lse, const float* dout, const float* dsum,
                          float* dq) {
  OOMB_DYNAMIC_SHARED(float, smem);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t h = blockIdx.y, t = int64_t(blockIdx.x) * kWarps + warp, D = p.D;
  if (t >= p.T) return;
  const int64_t g = h / (p.H / p.G), qi = p.q_idx0 + t;
  float *sq = smem + 2 * warp * D, *sdo = sq + D;
  load_row(sq, q + (t * p.H + h) * D, D, lane);
  load_row(sdo, dout + (t * p.H + h) * D, D, lane);
  float* dqrow = dq + (t * p.H + h) * D;
  float acc[kPerLane];
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int64_t i = lane + 32 * k;
    acc[k] = !p.first && i < D ? dqrow[i] : 0.0f;  // a fold's later call accumulates
  }
  const float L = lse[t * p.H + h], ds_sum = dsum[t * p.H + h];
  const int32_t qdoc = p.q_doc ? p.q_doc[t] : 0;
  if (!isinf(L)) {
    for (int64_t b = 0; b < p.n_blocks; ++b) {
      const AttnBlock kb = p.blocks[b];
      if (g < 64 && !((kb.heads >> g) & 1)) continue;  // masked for this kv head group (sparse)
      const Rows K{kb.k, kb.kv_bf16 != 0}, V{kb.v, kb.kv_bf16 != 0};
      const int64_t n = visible(kb, qi);
      for (int64_t j0 = 0; j0 < n; j0 += 32) {
        const int64_t j = j0 + lane;
        float ds = 0.0f;
        if (j < n && (!p.q_doc || !kb.doc || kb.doc[j] == qdoc) && (p.window <= 0 || kb.idx0 + j > qi - p.window)) {
          const float pj = expf(dot(sq, K, (j * p.G + g) * D, D) * p.scale - L);
          if (pj != 0.0f) ds = pj * (dot(sdo, V, (j * p.G + g) * D, D) - ds_sum) * p.scale;
        }
        const int cnt = int(n - j0 < 32 ? n - j0 : 32);
        for (int jj = 0; jj < cnt; ++jj) {
          const float dsj = __shfl_sync(kFull, ds, jj);
          if (dsj == 0.0f) continue;
          const int64_t kr = ((j0 + jj) * p.G + g) * D;
#pragma unroll
          for (int k = 0; k < kPerLane; ++k) {
            const int64_t i = lane + 32 * k;
            if (i < D) acc[k] += dsj * K(kr + i);
          }
        }
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int64_t i = lane + 32 * k;
    if (i < D) dqrow[i] = acc[k];
  }
}

// dk, dv; grid (n_blocks, G, ceil(max_len / 32)), one warp. Shared: dK and dV of the warp's 32
// keys, rows padded to D + 1 (odd: no bank conflicts between lanes), then the q and dout rows.
__global__ void attn_dkdv_k(AttnParams p, const float* q, const float* lse, const float* dout, const float* dsum) {
  OOMB_DYNAMIC_SHARED(float, smem);
  const int lane = threadIdx.x;
  const AttnBlock kb = p.blocks[blockIdx.x];
  const int64_t g = blockIdx.y, j0 = int64_t(blockIdx.z) * 32, j = j0 + lane, D = p.D, stride = D + 1;
  if (j0 >= kb.len || (g < 64 && !((kb.heads >> g) & 1))) return;  // masked for this group: its rows stay as they are
  const int64_t group = p.H / p.G;
  float *dk = smem + lane * stride, *dv = smem + (32 + lane) * stride;
  float *sq = smem + 64 * stride, *sdo = sq + D;
  for (int64_t i = 0; i < D; ++i) dk[i] = 0.0f, dv[i] = 0.0f;
  const bool have = j < kb.len;
  const Rows K{kb.k, kb.kv_bf16 != 0}, V{kb.v, kb.kv_bf16 != 0};
  const int64_t row = (j * p.G + g) * D;  // the lane's key (read only when have)
  const int32_t kdoc = have && kb.doc ? kb.doc[j] : 0;
  const int64_t t_first = kb.idx0 + j0 - p.q_idx0;  // the first query that sees the tile's first key
#ifdef OOMB_MUTANT_DROP_QUERY  // a negative control (scripts/gpu_bundle.sh): the chunk's last query is lost
  const int64_t t_end = p.T - 1;
#else
  const int64_t t_end = p.T;
#endif
  for (int64_t t = t_first > 0 ? t_first : 0; t < t_end; ++t) {
    const int64_t qi = p.q_idx0 + t;
    const bool vis = have && kb.idx0 + j <= qi && (!p.q_doc || !kb.doc || kdoc == p.q_doc[t]) &&
                     (p.window <= 0 || kb.idx0 + j > qi - p.window);
    for (int64_t h = g * group; h < (g + 1) * group; ++h) {
      const float L = lse[t * p.H + h];
      if (isinf(L)) continue;
      __syncwarp();  // the previous rows are no longer read
      load_row(sq, q + (t * p.H + h) * D, D, lane);
      load_row(sdo, dout + (t * p.H + h) * D, D, lane);
      if (!vis) continue;
      const float pj = expf(dot(sq, K, row, D) * p.scale - L);
      if (pj == 0.0f) continue;
      const float ds = pj * (dot(sdo, V, row, D) - dsum[t * p.H + h]) * p.scale;
      for (int64_t i = 0; i < D; ++i) {
        dv[i] += pj * sdo[i];
        dk[i] += ds * sq[i];
      }
    }
  }
  if (!have) return;
  const int64_t at = row;
  if (kb.grad_bf16) {
    __nv_bfloat16 *k16 = static_cast<__nv_bfloat16*>(kb.dk) + at, *v16 = static_cast<__nv_bfloat16*>(kb.dv) + at;
    for (int64_t i = 0; i < D; ++i) {
      k16[i] = __float2bfloat16_rn(__bfloat162float(k16[i]) + dk[i]);
      v16[i] = __float2bfloat16_rn(__bfloat162float(v16[i]) + dv[i]);
    }
  } else {
    float *k32 = static_cast<float*>(kb.dk) + at, *v32 = static_cast<float*>(kb.dv) + at;
    for (int64_t i = 0; i < D; ++i) k32[i] += dk[i], v32[i] += dv[i];
  }
}

size_t dkdv_shared_bytes(int64_t D) { return size_t(64 * (D + 1) + 2 * D) * sizeof(float); }

}  // namespace

void attention_fwd(const AttnParams& p, const float* q, float* o, float* lse, cudaStream_t s) {
  if (p.T == 0) return;
  const dim3 grid(unsigned((p.T + kWarps - 1) / kWarps), unsigned(p.H));
  launch(attn_fwd_k, grid, kWarps * 32, size_t(kWarps * p.D) * sizeof(float), s, p, q, o, lse);
}

void attention_dsum(const AttnParams& p, const float* o, const float* dout, float* dsum, cudaStream_t s) {
  if (p.T == 0) return;
  const dim3 grid(unsigned((p.T + kWarps - 1) / kWarps), unsigned(p.H));
  launch(attn_dsum_k, grid, kWarps * 32, 0, s, p, o, dout, dsum);
}

void attention_bwd(const AttnParams& p, const float* q, const float* o, const float* lse, const float* dout,
                   float* dq, float* dsum, cudaStream_t s) {
  if (p.T == 0) return;
  const dim3 grid(unsigned((p.T + kWarps - 1) / kWarps), unsigned(p.H));
  attention_dsum(p, o, dout, dsum, s);
  launch(attn_dq_k, grid, kWarps * 32, size_t(2 * kWarps * p.D) * sizeof(float), s, p, q, lse, dout, dsum, dq);
  if (p.n_blocks == 0 || p.max_len == 0) return;
  const size_t shared = dkdv_shared_bytes(p.D);
  static const bool raised =
      (allow_shared(attn_dkdv_k, dkdv_shared_bytes(kMaxHeadDim), "attention backward's dK/dV (fp32 reference)"), true);
  (void)raised;
  const dim3 kv_grid(unsigned(p.n_blocks), unsigned(p.G), unsigned((p.max_len + 31) / 32));
  launch(attn_dkdv_k, kv_grid, 32, shared, s, p, q, lse, dout, dsum);
}

}  // namespace oomb::cuda::k
