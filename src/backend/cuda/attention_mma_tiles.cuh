// What the attention kernels on tensor cores share above the fragments (attention_mma_frag.cuh):
// tiles of rows into shared memory, the block table's masks (causal, bottom-right; documents;
// windows), the walk over a CUDA block's key tiles (double-buffered by cp.async where the keys are
// bf16 and aligned) and a block's query tile and the thread's rows in it.
#pragma once
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "backend/cuda/attention_mma_frag.cuh"
#include "backend/cuda/kernels.h"

namespace oomb::cuda::k {

namespace {

// Rows [row0, row0 + R) of a source whose element (r, d) is at src[r * stride + off + d] (f32, or
// bf16 when src_bf16), d < D, into bf16 shared memory dst (R, ld) row-major. Rows at or past nrows
// and columns D..DP are zeros (a zero V row times a zero P adds nothing; garbage could be NaN).
// async: bf16 rows by cp.async (16-byte aligned rows, D % 8 == 0); else plain loads.
template <int R, int DP>
__device__ inline void load_tile(bf16* dst, int ld, const void* src, bool src_bf16, bool async, int64_t off,
                                 int64_t row0, int64_t nrows, int64_t stride, int D) {
  if (async) {
    constexpr int kChunks = DP / 8;
    const bf16* s16 = static_cast<const bf16*>(src);
    for (int i = threadIdx.x; i < R * kChunks; i += kThreads) {
      const int r = i / kChunks, d = 8 * (i % kChunks);
      const bool valid = row0 + r < nrows && d < D;
      cp_async<16>(dst + r * ld + d, valid ? s16 + (row0 + r) * stride + off + d : s16, valid);
    }
    return;
  }
  constexpr int kPairs = DP / 2;
  for (int i = threadIdx.x; i < R * kPairs; i += kThreads) {
    const int r = i / kPairs, d = 2 * (i % kPairs);
    __nv_bfloat162 v = __floats2bfloat162_rn(0.0f, 0.0f);
    if (row0 + r < nrows && d < D) {
      const int64_t e = (row0 + r) * stride + off + d;
      if (src_bf16) v = *reinterpret_cast<const __nv_bfloat162*>(static_cast<const bf16*>(src) + e);
      else v = __float22bfloat162_rn(*reinterpret_cast<const float2*>(static_cast<const float*>(src) + e));
    }
    *reinterpret_cast<__nv_bfloat162*>(dst + r * ld + d) = v;
  }
}

// the key j of block kb seen from query t (sequence index qi, document qdoc)?
__device__ inline bool sees(const AttnParams& p, const AttnBlock& kb, int64_t j, int64_t n, int64_t qi, int32_t qdoc) {
  return j < n && kb.idx0 + j <= qi && (!p.q_doc || !kb.doc || kb.doc[j] == qdoc) &&
         (p.window <= 0 || kb.idx0 + j > qi - p.window);
}

// The key tiles of block kb a run of queries [qi_first, qi_last] may see: [j_begin, n), tiles of
// kBN from j_begin (a multiple of kBN). Empty when the block is masked for kv head group g.
struct KeyRange {
  int64_t j_begin = 0, n = 0;
};
__device__ inline KeyRange key_range(const AttnParams& p, const AttnBlock& kb, int64_t g, int64_t qi_first,
                                     int64_t qi_last) {
  KeyRange r;
  if (g < 64 && !((kb.heads >> g) & 1)) return r;
  const int64_t n = qi_last - kb.idx0 + 1;
  r.n = n < 0 ? 0 : n > kb.len ? kb.len : n;
  if (p.window > 0) {  // keys at qi_first - window or before are outside every query's window
    const int64_t lo = qi_first - p.window + 1 - kb.idx0;
    if (lo > 0) r.j_begin = lo / kBN * kBN;
  }
  return r;
}
// no mask inside a tile of keys [j0, j0 + kBN) for the queries [qi_first, qi_last]
__device__ inline bool whole_tile(const AttnParams& p, const AttnBlock& kb, int64_t j0, int64_t n, int64_t qi_first,
                                  int64_t qi_last) {
  return j0 + kBN <= n && kb.idx0 + j0 + kBN - 1 <= qi_first && !(p.q_doc && kb.doc) &&
         (p.window <= 0 || kb.idx0 + j0 > qi_last - p.window);
}

// whether block kb's K and V rows can come by cp.async: bf16 pages, aligned rows (D % 8 == 0)
__device__ inline bool kv_async(const AttnBlock& kb, int64_t D) {
  return kb.kv_bf16 && D % 8 == 0 && aligned16(kb.k) && aligned16(kb.v);
}
// Keys [j0, j0 + kBN) of kv head g of block kb into sK, sV (kBN, ld), zeros at n and past
template <int DP>
__device__ inline void load_kv(bf16* sK, bf16* sV, int ld, const AttnParams& p, const AttnBlock& kb, bool async,
                               int64_t g, int64_t j0, int64_t n) {
  const int D = int(p.D);
  load_tile<kBN, DP>(sK, ld, kb.k, kb.kv_bf16 != 0, async, g * D, j0, n, p.G * D, D);
  load_tile<kBN, DP>(sV, ld, kb.v, kb.kv_bf16 != 0, async, g * D, j0, n, p.G * D, D);
}

// The key tiles a CUDA block's queries [qi_first, qi_last] of kv head group g read, in the table's
// order: keys [j0, j0 + kBN) of block b (kb), within its key range kr; async: kv_async(kb), once a
// block (derived again per tile, it cost the D 64 kernels spills)
struct TileWalk {
  AttnBlock kb{};
  KeyRange kr;
  int64_t b = -1, j0 = 0;
  bool async = false;
  __device__ bool next(const AttnParams& p, int64_t g, int64_t qi_first, int64_t qi_last) {
    j0 += kBN;
    while (b < 0 || j0 >= kr.n) {
      if (++b >= p.n_blocks) return false;
      kb = p.blocks[b];
      kr = key_range(p, kb, g, qi_first, qi_last);
      j0 = kr.j_begin;
      async = kv_async(kb, p.D);
    }
    return true;
  }
  // its K and V rows (zeros past the range) into sK, sV (kBN, ld)
  template <int DP>
  __device__ void load(bf16* sK, bf16* sV, int ld, const AttnParams& p, int64_t g) const {
    load_kv<DP>(sK, sV, ld, p, kb, async, g, j0, kr.n);
  }
};

// f(w, cK, cV) for every key tile of the walk, in order, with the tile's K and V rows in shared
// memory: double-buffered in sK, sV (two tiles of `tile` elements each), the next tile arriving
// while f computes on this one. Every thread of the CUDA block calls it.
template <int DP, typename F>
__device__ inline void each_key_tile(const AttnParams& p, int64_t g, int64_t qi_first, int64_t qi_last, bf16* sK,
                                     bf16* sV, int ld, size_t tile, F f) {
  TileWalk w;
  bool have = w.next(p, g, qi_first, qi_last);
  if (have) w.load<DP>(sK, sV, ld, p, g);
  cp_commit();
  for (int buf = 0; have; buf ^= 1) {
    cp_wait_all();
    __syncthreads();  // this tile is in; every warp is done with the other buffer's
    TileWalk nx = w;
    const bool more = nx.next(p, g, qi_first, qi_last);
    if (more) nx.load<DP>(sK + (buf ^ 1) * tile, sV + (buf ^ 1) * tile, ld, p, g);
    cp_commit();
    f(w, sK + buf * tile, sV + buf * tile);
    w = nx;
    have = more;
  }
}

// A CUDA block's kBM queries of head h (forward, dq) and this thread's place: its two rows are
// t[0] = t0 + 16 warp + gq and t[1] = t[0] + 8. The query tiles go last first (blockIdx.x 0: the
// last tile): under the causal mask the later queries see the most keys, and the GPU starts blocks
// in index order, so the longest start first and the grid's last wave is of the shortest
// (FlashAttention-2 orders its causal tiles so too). Each tile's result is the same either way.
struct QueryTile {
  int warp, lane, gq, tq, D;
  int64_t h, g, t0, qi_first, qi_last, t[2], qi[2];
  __device__ explicit QueryTile(const AttnParams& p)
      : warp(int(threadIdx.x >> 5)), lane(int(threadIdx.x & 31)), gq(lane >> 2), tq(lane & 3), D(int(p.D)),
        h(blockIdx.y), g(h / (p.H / p.G)), t0(int64_t(gridDim.x - 1 - blockIdx.x) * kBM), qi_first(p.q_idx0 + t0),
        qi_last(qi_first + (p.T - t0 < kBM ? p.T - t0 : kBM) - 1) {
    for (int i = 0; i < 2; ++i) t[i] = t0 + 16 * warp + gq + 8 * i, qi[i] = p.q_idx0 + t[i];
  }
  // this thread's accumulator elements of rows (T, H, D) x: read (zeros where `from` is false, past
  // T or D), or written (with `divide`, row i divided by l_i, 0 where l_i is 0; values, not an
  // array, so that the caller's sums stay in registers)
  template <int OT>
  __device__ void read(float (*acc)[4], const float* x, const AttnParams& p, bool from) const {
    for (int dt = 0; dt < OT; ++dt)
      for (int e = 0; e < 4; ++e) {
        const int i = e >> 1, d = dt * 8 + 2 * tq + (e & 1);
        acc[dt][e] = from && t[i] < p.T && d < D ? x[(t[i] * p.H + h) * D + d] : 0.0f;
      }
  }
  template <int OT>
  __device__ void write(const float (*acc)[4], float* x, const AttnParams& p, bool divide = false, float l0 = 0.0f,
                        float l1 = 0.0f) const {
    for (int dt = 0; dt < OT; ++dt)
      for (int e = 0; e < 4; e += 2) {
        const int i = e >> 1, d = dt * 8 + 2 * tq;
        if (t[i] >= p.T || d >= D) continue;
        float2 v{acc[dt][e], acc[dt][e + 1]};
        const float l = i == 0 ? l0 : l1;
        if (divide) v = l > 0.0f ? float2{v.x / l, v.y / l} : float2{0.0f, 0.0f};
        *reinterpret_cast<float2*>(x + (t[i] * p.H + h) * D + d) = v;
      }
  }
};

}  // namespace

}  // namespace oomb::cuda::k
