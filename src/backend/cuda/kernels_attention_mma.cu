// Causal GQA attention over a table of KV blocks on tensor cores (mma.sync m16n8k16, bf16 inputs,
// fp32 accumulation): the fast path under --precision bf16 (AttnArgs::bf16), the algebra of
// shared/DESIGN.md section 3 and the same block table, masks and fold as kernels_attention.cu.
//   forward: a CUDA block per (64 queries, head), 4 warps of 16 queries. Per 64-key tile of a
//     block: S = Q K^T in registers; online softmax in registers (log2 units, each row's max over
//     the 4 lanes of a quad); P -> bf16 A fragments; O += P V.
//   dq:      the same tiling: S, dP = dO V^T, dS = P (dP - dsum) scale, dq += dS K.
//   dk, dv:  a CUDA block per (block, kv head, 64 keys), 4 warps of 16 keys; it walks the queries
//     in tiles of 32 (heads of the group inside), P^T and dS^T from K Q^T and V dO^T, dV += P^T dO,
//     dK += dS^T Q in registers, then adds into the block's gradient rows once.
// Memory: every tile sits in shared memory row-major, bf16 (rows padded by 16 bytes, so ldmatrix's
// eight rows hit every bank once); fragments come by ldmatrix, transposed ones (V for P V, K for
// dS K, Q and dO for the dk, dv products) by ldmatrix.trans. The forward and dq kernels double-buffer
// the key tiles: bf16 pages (16-byte aligned, D % 8 == 0) by cp.async, so the next tile arrives
// while this one computes (under --precision bf16 the model hands the chunk's own keys as bf16
// copies too); f32 keys by plain loads. The dk, dv walk takes each query tile's q and dO rows
// while the last tile computes: bf16 copies (AttnParams::q16, do16; the model's under --precision
// bf16) by cp.async straight into a second pair of tiles; else f32 rows by cp.async (D % 4 == 0,
// aligned; else plain loads) into a stage, converted to bf16 in shared memory.
// Numerics: Q, K, V, dO round to bf16 (under --precision bf16 they already hold bf16 values), P
// and dS round to bf16 for their products (as FlashAttention does), statistics, softmax and every
// accumulation fp32. Deterministic: fixed order, no atomics, one writer per output element; a
// fold over several calls keeps the state exactly (o unnormalized, lse the running max in log2
// units, run_sum), so it gives the bits of one call over the same blocks in the same order.
// Head dims up to 128 (even), padded with zeros to 16, 32, 64 or 128 in shared memory.
// Fragment layouts (PTX ISA, mma.m16n8k16 .bf16): lane = 4 gq + tq; A (16 x 16, row): {(gq, 2tq..),
// (gq + 8, 2tq..), (gq, 2tq + 8..), (gq + 8, 2tq + 8..)}; B (16 x 8, col): {(2tq.., gq), (2tq + 8.., gq)};
// C (16 x 8): {(gq, 2tq), (gq, 2tq + 1), (gq + 8, 2tq), (gq + 8, 2tq + 1)}. A C tile pair of S is
// therefore P's A fragment for the next product with no data movement.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"

namespace oomb::cuda::k {

namespace {

using bf16 = __nv_bfloat16;
constexpr int kBM = 64;  // queries per CUDA block (forward, dq)
constexpr int kBN = 64;  // keys per tile
constexpr int kBQ = 32;  // queries per tile of the dk, dv walk
constexpr int kThreads = 128;
constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;
// CUDA blocks per SM the registers must allow: 2 for head dims above 64 (shared memory allows 2
// there), 3 up to 64 (ptxas gave the dq kernel 244 registers otherwise, 2 blocks; with 3, 168 and no
// spills, nvcc 13, sm_90)
template <int DP>
constexpr int kMinBlocks = DP <= 64 ? 3 : 2;

__device__ inline uint32_t pack(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
__device__ inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// c (16 x 8) += a (16 x 16) b (16 x 8)
__device__ inline void mma(float c[4], const uint32_t a[4], const uint32_t b[2]) {
#ifdef OOMB_SIMT
  simt::mma_m16n8k16_bf16(c, a, b);
#else
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

// Four 8 x 8 bf16 matrices from shared memory (ldmatrix .x4): lane l gives the address of row l % 8
// of matrix l / 8; r[i] is matrix i's fragment (row l / 4, columns 2 (l % 4)..), or transposed
// (rows 2 (l % 4).., column l / 4)
__device__ inline void ldsm4(uint32_t r[4], const bf16* row, bool trans) {
#ifdef OOMB_SIMT
  simt::ldmatrix_x4(r, row, trans);
#else
  const uint32_t at = uint32_t(__cvta_generic_to_shared(row));
  if (trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(at));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(at));
#endif
}
// A fragment of rows [r0, r0 + 16), columns [c0, c0 + 16) of a row-major bf16 tile
__device__ inline void frag_a(uint32_t a[4], const bf16* s, int ld, int r0, int c0, int lane) {
  ldsm4(a, s + (r0 + (lane & 15)) * ld + c0 + 8 * (lane >> 4), false);
}
// B fragments (k in [k0, k0 + 16)) of the n-tiles [n0, n0 + 8) (b[0..1]) and [n0 + 8, n0 + 16) (b[2..3])
// of B[k][n] = s[(n0 + n) ld + k0 + k]: a tile stored n-major (its rows are B's columns)
__device__ inline void frag_b2(uint32_t b[4], const bf16* s, int ld, int n0, int k0, int lane) {
  ldsm4(b, s + (n0 + (lane & 7) + 8 * (lane >> 4)) * ld + k0 + 8 * ((lane >> 3) & 1), false);
}
// the same of B[k][n] = s[(k0 + k) ld + n0 + n]: a row-major (k, n) tile, read transposed
__device__ inline void frag_bt2(uint32_t b[4], const bf16* s, int ld, int k0, int n0, int lane) {
  ldsm4(b, s + (k0 + (lane & 7) + 8 * ((lane >> 3) & 1)) * ld + n0 + 8 * (lane >> 4), true);
}
// the A fragment of k-slice kk (columns [16 kk, 16 kk + 16)) of a 16-row C tile set c[n-tile][4]
__device__ inline void c_to_a(uint32_t a[4], const float (*c)[4], int kk) {
  a[0] = pack(c[2 * kk][0], c[2 * kk][1]), a[1] = pack(c[2 * kk][2], c[2 * kk][3]);
  a[2] = pack(c[2 * kk + 1][0], c[2 * kk + 1][1]), a[3] = pack(c[2 * kk + 1][2], c[2 * kk + 1][3]);
}

// Two products side by side, k-slice by k-slice: s (16 x 8 NT) += A B and s2 += A2 B2, A rows
// [r0, r0 + 16) of the row-major tile a (KD x 16 columns), B[k][n] = b[n][k] (n-major tile b):
// S = Q K^T with dP = dO V^T, and their transposes
template <int KD, int NT>
__device__ inline void mma_a_bt2(float (*s)[4], const bf16* a, const bf16* b, float (*s2)[4], const bf16* a2,
                                 const bf16* b2, int ld, int r0, int lane) {
  for (int kk = 0; kk < KD; ++kk) {
    uint32_t fa[4], fa2[4];
    frag_a(fa, a, ld, r0, 16 * kk, lane);
    frag_a(fa2, a2, ld, r0, 16 * kk, lane);
    for (int nt = 0; nt < NT; nt += 2) {
      uint32_t bb[4];
      frag_b2(bb, b, ld, 8 * nt, 16 * kk, lane);
      mma(s[nt], fa, bb);
      mma(s[nt + 1], fa, bb + 2);
      frag_b2(bb, b2, ld, 8 * nt, 16 * kk, lane);
      mma(s2[nt], fa2, bb);
      mma(s2[nt + 1], fa2, bb + 2);
    }
  }
}
// acc (16 x 8 OT) += X B: X the C tile set x (16 x 16 KS, as A fragments), B the row-major tile b
// (16 KS rows): O += P V, dq += dS K, dV += P^T dO, dK += dS^T Q
template <int KS, int OT>
__device__ inline void mma_c_b(float (*acc)[4], const float (*x)[4], const bf16* b, int ld, int lane) {
  for (int kk = 0; kk < KS; ++kk) {
    uint32_t fa[4];
    c_to_a(fa, x, kk);
    for (int dt = 0; dt < OT; dt += 2) {
      uint32_t bb[4];
      frag_bt2(bb, b, ld, 16 * kk, 8 * dt, lane);
      mma(acc[dt], fa, bb);
      mma(acc[dt + 1], fa, bb + 2);
    }
  }
}

// N bytes (16, or 4) from global to shared memory, asynchronously (cp.async: .cg at 16 bytes, .ca
// at 4; zeros where !valid, src then not read); a thread's copies are done after cp_wait_all,
// everyone's after a barrier too
template <int N>
__device__ inline void cp_async(void* dst, const void* src, bool valid) {
  static_assert(N == 16 || N == 4, "cp.async .cg takes 16 bytes; 4 go by .ca");
#ifdef OOMB_SIMT
  if (valid) std::memcpy(dst, src, N);
  else std::memset(dst, 0, N);
#else
  const uint32_t at = uint32_t(__cvta_generic_to_shared(dst));
  if constexpr (N == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(at), "l"(src), "r"(valid ? 16 : 0));
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(at), "l"(src), "r"(valid ? 4 : 0));
#endif
}
__device__ inline void cp_commit() {
#ifndef OOMB_SIMT
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
__device__ inline void cp_wait_all() {
#ifndef OOMB_SIMT
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
#endif
}

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

template <int DP>
struct FwdSmem {
  static constexpr int kLd = DP + 8;  // padded by 16 bytes: ldmatrix's 8 rows hit 8 bank groups
  static constexpr size_t kTile = size_t(kBN) * kLd;  // elements of a key tile (and of Q: kBM == kBN)
  static constexpr size_t kQ = 0, kK = kQ + kTile * 2, kV = kK + 2 * kTile * 2, kBytes = kV + 2 * kTile * 2;
};
static_assert(kBM == kBN, "Q shares the key tiles' shape");

// q, o: (T, H, D) fp32; lse: (T, H). grid (ceil(T / kBM), H), kThreads; shared FwdSmem<DP>::kBytes
template <int DP>
__global__ void __launch_bounds__(kThreads, kMinBlocks<DP>)
    attn_fwd_mma_k(AttnParams p, const float* q, float* o, float* lse) {
  using S = FwdSmem<DP>;
  constexpr int KD = DP / 16, OT = DP / 8, NT = kBN / 8;
  OOMB_DYNAMIC_SHARED(unsigned char, smem);
  bf16 *sQ = reinterpret_cast<bf16*>(smem + S::kQ), *sK = reinterpret_cast<bf16*>(smem + S::kK),
       *sV = reinterpret_cast<bf16*>(smem + S::kV);
  const QueryTile Q(p);
  const int warp = Q.warp, lane = Q.lane, tq = Q.tq, D = Q.D;
  const int64_t h = Q.h, g = Q.g, t0 = Q.t0, qi_first = Q.qi_first, qi_last = Q.qi_last, *t = Q.t, *qi = Q.qi;
  const float sl2 = p.scale * kLog2e;
  load_tile<kBM, DP>(sQ, S::kLd, q, false, false, h * D, t0, p.T, p.H * D, D);

  int32_t qdoc[2];
  bool ok[2];
  float m[2], l[2], acc[OT][4];
  for (int i = 0; i < 2; ++i) {
    ok[i] = t[i] < p.T;
    qdoc[i] = ok[i] && p.q_doc ? p.q_doc[t[i]] : 0;
    m[i] = -INFINITY, l[i] = 0.0f;
    if (!p.first && ok[i]) {  // a fold's later call: the state the last call left, as it was
      m[i] = lse[t[i] * p.H + h];
      l[i] = p.run_sum[t[i] * p.H + h];
    }
  }
  Q.read<OT>(acc, o, p, !p.first);  // a fold's later call: the unnormalized sum so far
  __syncthreads();
  uint32_t qa[KD][4];
  for (int kk = 0; kk < KD; ++kk) frag_a(qa[kk], sQ, S::kLd, 16 * warp, 16 * kk, lane);

  each_key_tile<DP>(p, g, qi_first, qi_last, sK, sV, S::kLd, S::kTile, [&](const TileWalk& w, const bf16* cK,
                                                                           const bf16* cV) {
    const AttnBlock& kb = w.kb;
    const int64_t j0 = w.j0;

    float s[NT][4] = {};
    for (int kk = 0; kk < KD; ++kk)
      for (int nt = 0; nt < NT; nt += 2) {
        uint32_t bb[4];
        frag_b2(bb, cK, S::kLd, 8 * nt, 16 * kk, lane);
        mma(s[nt], qa[kk], bb);
        mma(s[nt + 1], qa[kk], bb + 2);
      }
    const bool whole = whole_tile(p, kb, j0, w.kr.n, qi_first, qi_last);
    float mx[2] = {-INFINITY, -INFINITY};
    for (int nt = 0; nt < NT; ++nt)
      for (int e = 0; e < 4; ++e) {
        const int i = e >> 1;
        const int64_t j = j0 + 8 * nt + 2 * tq + (e & 1);
        s[nt][e] = ok[i] && (whole || sees(p, kb, j, w.kr.n, qi[i], qdoc[i])) ? s[nt][e] * sl2 : -INFINITY;
        mx[i] = fmaxf(mx[i], s[nt][e]);
      }
    float c[2];
    for (int i = 0; i < 2; ++i) {
      mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
      mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
      const float mn = fmaxf(m[i], mx[i]);
      c[i] = mn == -INFINITY ? 1.0f : exp2f(m[i] - mn);
      m[i] = mn, l[i] *= c[i];
    }
    float rs[2] = {0.0f, 0.0f};
    for (int nt = 0; nt < NT; ++nt)
      for (int e = 0; e < 4; ++e) {
        const int i = e >> 1;
        s[nt][e] = s[nt][e] == -INFINITY ? 0.0f : exp2f(s[nt][e] - m[i]);
        rs[i] += s[nt][e];
      }
    for (int i = 0; i < 2; ++i) {  // the tile's row sum over the quad: the same bits in its 4 lanes
      rs[i] += __shfl_xor_sync(0xffffffffu, rs[i], 1);
      rs[i] += __shfl_xor_sync(0xffffffffu, rs[i], 2);
      l[i] += rs[i];
    }
    for (int dt = 0; dt < OT; ++dt) acc[dt][0] *= c[0], acc[dt][1] *= c[0], acc[dt][2] *= c[1], acc[dt][3] *= c[1];
    mma_c_b<NT / 2, OT>(acc, s, cV, S::kLd, lane);
  });

  Q.write<OT>(acc, o, p, p.last != 0, l[0], l[1]);
  if (tq != 0) return;
  for (int i = 0; i < 2; ++i) {
    if (!ok[i]) continue;
    const int64_t at = t[i] * p.H + h;
    if (!p.last) {  // keep the state for the next call as it is (the running max in log2 units)
      lse[at] = m[i];
      p.run_sum[at] = l[i];
    } else {
      lse[at] = l[i] > 0.0f ? m[i] * kLn2 + logf(l[i]) : -INFINITY;
    }
  }
}

template <int DP>
struct DqSmem {
  static constexpr int kLd = DP + 8;
  static constexpr size_t kTile = size_t(kBN) * kLd;
  static constexpr size_t kQ = 0, kDo = kQ + kTile * 2, kK = kDo + kTile * 2, kV = kK + 2 * kTile * 2,
                          kBytes = kV + 2 * kTile * 2;
};

// dq (T, H, D) = (or += after a fold's first call) dS K. grid (ceil(T / kBM), H), kThreads
template <int DP>
__global__ void __launch_bounds__(kThreads, kMinBlocks<DP>)
    attn_dq_mma_k(AttnParams p, const float* q, const float* lse, const float* dout, const float* dsum, float* dq) {
  using S = DqSmem<DP>;
  constexpr int KD = DP / 16, OT = DP / 8, NT = kBN / 8;
  OOMB_DYNAMIC_SHARED(unsigned char, smem);
  bf16 *sQ = reinterpret_cast<bf16*>(smem + S::kQ), *sDo = reinterpret_cast<bf16*>(smem + S::kDo),
       *sK = reinterpret_cast<bf16*>(smem + S::kK), *sV = reinterpret_cast<bf16*>(smem + S::kV);
  const QueryTile Q(p);
  const int warp = Q.warp, lane = Q.lane, tq = Q.tq, D = Q.D;
  const int64_t h = Q.h, g = Q.g, t0 = Q.t0, qi_first = Q.qi_first, qi_last = Q.qi_last, *t = Q.t, *qi = Q.qi;
  const float sl2 = p.scale * kLog2e;
  load_tile<kBM, DP>(sQ, S::kLd, q, false, false, h * D, t0, p.T, p.H * D, D);
  load_tile<kBM, DP>(sDo, S::kLd, dout, false, false, h * D, t0, p.T, p.H * D, D);

  int32_t qdoc[2];
  bool ok[2];
  float L[2], ds[2], acc[OT][4];
  for (int i = 0; i < 2; ++i) {
    const float lv = t[i] < p.T ? lse[t[i] * p.H + h] : -INFINITY;
    ok[i] = lv != -INFINITY;  // a query that sees no key has no gradient
    L[i] = lv * kLog2e, ds[i] = ok[i] ? dsum[t[i] * p.H + h] : 0.0f;
    qdoc[i] = ok[i] && p.q_doc ? p.q_doc[t[i]] : 0;
  }
  Q.read<OT>(acc, dq, p, !p.first);  // a fold's later call accumulates

  // (the first tile's barrier also publishes sQ, sDo)
  each_key_tile<DP>(p, g, qi_first, qi_last, sK, sV, S::kLd, S::kTile, [&](const TileWalk& w, const bf16* cK,
                                                                           const bf16* cV) {
    const AttnBlock& kb = w.kb;
    const int64_t j0 = w.j0;

    float s[NT][4] = {}, dp[NT][4] = {};
    mma_a_bt2<KD, NT>(s, sQ, cK, dp, sDo, cV, S::kLd, 16 * warp, lane);
    const bool whole = whole_tile(p, kb, j0, w.kr.n, qi_first, qi_last);
    for (int nt = 0; nt < NT; ++nt)
      for (int e = 0; e < 4; ++e) {
        const int i = e >> 1;
        const int64_t j = j0 + 8 * nt + 2 * tq + (e & 1);
        const float pj =
            ok[i] && (whole || sees(p, kb, j, w.kr.n, qi[i], qdoc[i])) ? exp2f(s[nt][e] * sl2 - L[i]) : 0.0f;
        s[nt][e] = pj * (dp[nt][e] - ds[i]) * p.scale;  // dS
      }
    mma_c_b<NT / 2, OT>(acc, s, cK, S::kLd, lane);
  });
  Q.write<OT>(acc, dq, p);
}

// Q16: q and dO come as bf16 copies (AttnParams::q16, do16) straight into the tile after next's
// buffers; else as f32 rows into a stage, converted into the one tile buffer.
template <int DP, bool Q16>
struct DkdvSmem {
  static constexpr int kLd = DP + 8;
  static constexpr size_t kQTile = size_t(kBQ) * kLd * 2;  // bytes of a query tile (q or dO)
  static constexpr int kQBufs = Q16 ? 2 : 1;
  static constexpr size_t kK = 0, kV = kK + size_t(kBN) * kLd * 2, kQ = kV + size_t(kBN) * kLd * 2,
                          kDo = kQ + kQBufs * kQTile,
                          kRow = kDo + kQBufs * kQTile,  // a tile's lse, dsum, documents: (2, 3, kBQ), two tiles'
                          kStage = kRow + 2 * 3 * kBQ * 4,  // f32: the next tile's q, dO rows (2, kBQ, DP)
                          kBytes = kStage + (Q16 ? 0 : 2 * size_t(kBQ) * DP * 4);
};

// The dk, dv walk's query tiles: tile i is queries [t_start + (i / group) kBQ, + kBQ) of head
// g group + i % group.
struct QueryWalk {
  int64_t t_start, t_end, group, g;
  __device__ int64_t t0(int64_t i) const { return t_start + (i / group) * kBQ; }
  __device__ int64_t head(int64_t i) const { return g * group + i % group; }
};

// Stages tile i's lse, dsum and documents into row (3, kBQ) (past t_end: lse -inf, zeros), and its
// q and dO: Q16, the bf16 copies into the tiles sq, sdo by cp.async (the launcher takes that kernel
// only where D % 8 == 0 and the rows are aligned); else f32 into st (2, kBQ, DP) (zeros past t_end
// and D; async: cp.async, D % 4 == 0 and aligned rows). Zeros past D in either.
template <int DP, bool Q16>
__device__ inline void stage_queries(bf16* sq, bf16* sdo, float* st, float* row, const AttnParams& p,
                                     const QueryWalk& qw, int64_t i, bool async, const float* q, const float* dout,
                                     const float* lse, const float* dsum) {
  const int64_t tq0 = qw.t0(i), h = qw.head(i);
  const int D = int(p.D);
  if constexpr (Q16) {
    constexpr int kLd = DkdvSmem<DP, true>::kLd;
    load_tile<kBQ, DP>(sq, kLd, p.q16, true, true, h * D, tq0, qw.t_end, p.H * D, D);
    load_tile<kBQ, DP>(sdo, kLd, p.do16, true, true, h * D, tq0, qw.t_end, p.H * D, D);
  } else {
    constexpr int kChunks = DP / 4;
    for (int c = threadIdx.x; c < kBQ * kChunks; c += kThreads) {
      const int r = c / kChunks, d = 4 * (c % kChunks);
      const int64_t t = tq0 + r, at = (t * p.H + h) * D + d;
      for (int x = 0; x < 2; ++x) {
        const float* src = x == 0 ? q : dout;
        float* dst = st + (x * kBQ + r) * DP + d;
        if (async) {
          const bool valid = t < qw.t_end && d < D;
          cp_async<16>(dst, valid ? src + at : src, valid);
        } else {
          for (int e = 0; e < 4; ++e) dst[e] = t < qw.t_end && d + e < D ? src[at + e] : 0.0f;
        }
      }
    }
  }
  for (int c = threadIdx.x; c < kBQ; c += kThreads) {
    const int64_t t = tq0 + c;
    const bool valid = t < qw.t_end;
    if (valid) cp_async<4>(row + c, lse + t * p.H + h, true);
    else row[c] = -INFINITY;  // past t_end: no key, no gradient
    cp_async<4>(row + kBQ + c, valid ? dsum + t * p.H + h : dsum, valid);
    cp_async<4>(row + 2 * kBQ + c, valid && p.q_doc ? static_cast<const void*>(p.q_doc + t) : lse, valid && p.q_doc);
  }
}

// every block's dk, dv += (rows of kv head g). grid (n_blocks, G, ceil(max_len / kBN)), kThreads.
// Q16: q and dO read from p.q16, p.do16 (q, dout unused).
template <int DP, bool Q16>
__global__ void __launch_bounds__(kThreads, kMinBlocks<DP>)
    attn_dkdv_mma_k(AttnParams p, const float* q, const float* lse, const float* dout, const float* dsum) {
  using S = DkdvSmem<DP, Q16>;
  constexpr int KD = DP / 16, OT = DP / 8, QT = kBQ / 8;
  constexpr size_t kQElems = S::kQTile / 2;
  OOMB_DYNAMIC_SHARED(unsigned char, smem);
  bf16 *sK = reinterpret_cast<bf16*>(smem + S::kK), *sV = reinterpret_cast<bf16*>(smem + S::kV),
       *sQ0 = reinterpret_cast<bf16*>(smem + S::kQ), *sDo0 = reinterpret_cast<bf16*>(smem + S::kDo);
  float* sSt = Q16 ? nullptr : reinterpret_cast<float*>(smem + S::kStage);  // (Q16: no stage)
  float* sRow0 = reinterpret_cast<float*>(smem + S::kRow);
  const AttnBlock kb = p.blocks[blockIdx.x];
  const int64_t g = blockIdx.y, j0 = int64_t(blockIdx.z) * kBN, group = p.H / p.G;
  if (j0 >= kb.len || (g < 64 && !((kb.heads >> g) & 1))) return;  // masked for this group: rows stay
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3, D = int(p.D);
  const float sl2 = p.scale * kLog2e;

  int64_t j[2];  // this thread's two keys (rows of the warp's 16)
  int32_t kdoc[2];
  for (int i = 0; i < 2; ++i) {
    j[i] = j0 + 16 * warp + gq + 8 * i;
    kdoc[i] = j[i] < kb.len && kb.doc ? kb.doc[j[i]] : 0;
  }
  float dk[OT][4] = {}, dv[OT][4] = {};
  const int64_t n_keys = j0 + kBN < kb.len ? kBN : kb.len - j0;
  const int64_t last_key = kb.idx0 + j0 + n_keys - 1;  // sequence index
  const int64_t t_first = kb.idx0 + j0 - p.q_idx0;  // the first query that sees the tile's first key
#ifdef OOMB_MUTANT_DROP_QUERY  // a negative control (scripts/gpu_bundle.sh): the chunk's last query is lost
  const int64_t t_end = p.T - 1;
#else
  const int64_t t_end = p.T;
#endif
  // queries from t_start; with a window, those at last_key + window or later see none of these keys
  const int64_t t_start = t_first > 0 ? t_first : 0;
  int64_t t_lim = t_end;
  if (p.window > 0 && last_key + p.window - p.q_idx0 < t_lim) t_lim = last_key + p.window - p.q_idx0;
  const QueryWalk qw{t_start, t_end, group, g};
  const int64_t n_it = t_lim > t_start ? (t_lim - t_start + kBQ - 1) / kBQ * group : 0;
  const bool q_async = !Q16 && D % 4 == 0 && aligned16(q) && aligned16(dout);  // (f32 rows)
  // tile i's buffers: its q and dO (Q16: two of each, tile i in buffer i % 2), and its rows
  auto q_buf = [&](bf16* base, int64_t i) { return Q16 ? base + (i & 1) * kQElems : base; };
  auto row_buf = [&](int64_t i) { return sRow0 + (i & 1) * 3 * kBQ; };
  if (n_it > 0) {  // K, V and the first query tile (no query: the rows get zeros added, as they are)
    load_kv<DP>(sK, sV, S::kLd, p, kb, kv_async(kb, D), g, j0, kb.len);
    stage_queries<DP, Q16>(sQ0, sDo0, sSt, row_buf(0), p, qw, 0, q_async, q, dout, lse, dsum);
  }
  cp_commit();
  for (int64_t it = 0; it < n_it; ++it) {
    const int64_t tq0 = qw.t0(it);
    bf16 *sQ = q_buf(sQ0, it), *sDo = q_buf(sDo0, it);
    cp_wait_all();
    __syncthreads();  // tile it is staged (K, V in too); every warp is done with tile it - 1's buffers
    if constexpr (!Q16) {
      constexpr int kPairs = DP / 2;
      for (int c = threadIdx.x; c < 2 * kBQ * kPairs; c += kThreads) {
        const int r = c / kPairs, d = 2 * (c % kPairs);  // r: row of (2 kBQ): q's rows, then dO's
        const float2 v = *reinterpret_cast<const float2*>(sSt + r * DP + d);
        bf16* dst = r < kBQ ? sQ + r * S::kLd : sDo + (r - kBQ) * S::kLd;
        *reinterpret_cast<__nv_bfloat162*>(dst + d) = __float22bfloat162_rn(v);
      }
      __syncthreads();  // tile it is in bf16; the stage is free
    }
    if (it + 1 < n_it)
      stage_queries<DP, Q16>(q_buf(sQ0, it + 1), q_buf(sDo0, it + 1), sSt, row_buf(it + 1), p, qw, it + 1, q_async,
                             q, dout, lse, dsum);
    cp_commit();
    const float* rL = row_buf(it);  // lse, then dsum, then documents (past t_end: -inf, 0, 0)
    const int32_t* rDoc = reinterpret_cast<const int32_t*>(rL + 2 * kBQ);

    float st[QT][4] = {}, dpt[QT][4] = {};  // S^T, dP^T: (16 keys, kBQ queries) of this warp
    mma_a_bt2<KD, QT>(st, sK, sQ, dpt, sV, sDo, S::kLd, 16 * warp, lane);
    // every pair visible by the masks: whole keys, the tile's first query at or after its last key,
    // no documents, the window behind none (a query whose lse is -inf still has no gradient)
    const bool whole = n_keys == kBN && tq0 + kBQ <= t_end && p.q_idx0 + tq0 >= last_key && !(p.q_doc && kb.doc) &&
                       (p.window <= 0 || kb.idx0 + j0 > p.q_idx0 + tq0 + kBQ - 1 - p.window);
#pragma unroll  // (st, dpt stay in registers only if every index is known)
    for (int nt = 0; nt < QT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = e >> 1, c = 8 * nt + 2 * tq + (e & 1);
        const int64_t qi = p.q_idx0 + tq0 + c, key = kb.idx0 + j[i];
        const float L = rL[c] * kLog2e;  // -inf: no key, no gradient
        const bool vis = L != -INFINITY &&
                         (whole || (j[i] < kb.len && key <= qi && (!p.q_doc || !kb.doc || kdoc[i] == rDoc[c]) &&
                                    (p.window <= 0 || key > qi - p.window)));
        const float pj = vis ? exp2f(st[nt][e] * sl2 - L) : 0.0f;
        st[nt][e] = pj, dpt[nt][e] = pj * (dpt[nt][e] - (L != -INFINITY ? rL[kBQ + c] : 0.0f)) * p.scale;  // P^T, dS^T
      }
    mma_c_b<QT / 2, OT>(dv, st, sDo, S::kLd, lane);  // dV += P^T dO
    mma_c_b<QT / 2, OT>(dk, dpt, sQ, S::kLd, lane);  // dK += dS^T Q
  }
  for (int dt = 0; dt < OT; ++dt)
    for (int e = 0; e < 4; e += 2) {
      const int i = e >> 1, d = dt * 8 + 2 * tq;
      if (j[i] >= kb.len || d >= D) continue;
      const int64_t at = (j[i] * p.G + g) * D + d;
      if (kb.grad_bf16) {
        auto* k16 = reinterpret_cast<__nv_bfloat162*>(static_cast<bf16*>(kb.dk) + at);
        auto* v16 = reinterpret_cast<__nv_bfloat162*>(static_cast<bf16*>(kb.dv) + at);
        const float2 k0 = __bfloat1622float2(*k16), v0 = __bfloat1622float2(*v16);
        *k16 = __floats2bfloat162_rn(k0.x + dk[dt][e], k0.y + dk[dt][e + 1]);
        *v16 = __floats2bfloat162_rn(v0.x + dv[dt][e], v0.y + dv[dt][e + 1]);
      } else {
        auto* k32 = reinterpret_cast<float2*>(static_cast<float*>(kb.dk) + at);
        auto* v32 = reinterpret_cast<float2*>(static_cast<float*>(kb.dv) + at);
        const float2 k0 = *k32, v0 = *v32;
        *k32 = {k0.x + dk[dt][e], k0.y + dk[dt][e + 1]};
        *v32 = {v0.x + dv[dt][e], v0.y + dv[dt][e + 1]};
      }
    }
}

template <int DP>
void fwd(const AttnParams& p, const float* q, float* o, float* lse, cudaStream_t s) {
  static const bool raised =
      (allow_shared(attn_fwd_mma_k<DP>, FwdSmem<DP>::kBytes, "attention forward (tensor cores)"), true);
  (void)raised;
  const dim3 grid(unsigned((p.T + kBM - 1) / kBM), unsigned(p.H));
  launch(attn_fwd_mma_k<DP>, grid, kThreads, FwdSmem<DP>::kBytes, s, p, q, o, lse);
}

template <int DP>
void bwd(const AttnParams& p, const float* q, const float* lse, const float* dout, const float* dsum, float* dq,
         cudaStream_t s, int parts) {
  static const bool raised =
      (allow_shared(attn_dq_mma_k<DP>, DqSmem<DP>::kBytes, "attention backward's dq (tensor cores)"),
       allow_shared(attn_dkdv_mma_k<DP, false>, DkdvSmem<DP, false>::kBytes, "attention backward's dK/dV (tensor cores)"),
       allow_shared(attn_dkdv_mma_k<DP, true>, DkdvSmem<DP, true>::kBytes,
                    "attention backward's dK/dV (tensor cores, bf16 q and dO)"),
       true);
  (void)raised;
  const dim3 grid(unsigned((p.T + kBM - 1) / kBM), unsigned(p.H));
  if (parts & kBwdDq) launch(attn_dq_mma_k<DP>, grid, kThreads, DqSmem<DP>::kBytes, s, p, q, lse, dout, dsum, dq);
  if (!(parts & kBwdDkdv) || p.n_blocks == 0 || p.max_len == 0) return;
  const dim3 kv_grid(unsigned(p.n_blocks), unsigned(p.G), unsigned((p.max_len + kBN - 1) / kBN));
  if (reads_q16(p))
    launch(attn_dkdv_mma_k<DP, true>, kv_grid, kThreads, DkdvSmem<DP, true>::kBytes, s, p, q, lse, dout, dsum);
  else
    launch(attn_dkdv_mma_k<DP, false>, kv_grid, kThreads, DkdvSmem<DP, false>::kBytes, s, p, q, lse, dout, dsum);
}

}  // namespace

const char* attention_mma_unsupported(const AttnParams& p) {
  if (p.D > kMaxMmaHeadDim) return "head dim above 128";
  if (p.D % 2 != 0) return "odd head dim";
  return nullptr;
}

void attention_fwd_mma(const AttnParams& p, const float* q, float* o, float* lse, cudaStream_t s) {
  if (p.T == 0) return;
  if (p.D <= 16) fwd<16>(p, q, o, lse, s);
  else if (p.D <= 32) fwd<32>(p, q, o, lse, s);
  else if (p.D <= 64) fwd<64>(p, q, o, lse, s);
  else fwd<128>(p, q, o, lse, s);
}

void attention_bwd_mma(const AttnParams& p, const float* q, const float* o, const float* lse, const float* dout,
                       float* dq, float* dsum, cudaStream_t s, int parts) {
  if (p.T == 0) return;
  if (parts & kBwdDq) attention_dsum(p, o, dout, dsum, s);
  if (p.D <= 16) bwd<16>(p, q, lse, dout, dsum, dq, s, parts);
  else if (p.D <= 32) bwd<32>(p, q, lse, dout, dsum, dq, s, parts);
  else if (p.D <= 64) bwd<64>(p, q, lse, dout, dsum, dq, s, parts);
  else bwd<128>(p, q, lse, dout, dsum, dq, s, parts);
}

}  // namespace oomb::cuda::k
