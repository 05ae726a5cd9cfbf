// Causal GQA attention backward over a table of KV blocks on tensor cores (the forward:
// kernels_attention_mma_fwd.cu; the same tiling, masks and numerics).
//   dq:      a CUDA block per (64 queries, head), as the forward: S, dP = dO V^T,
//            dS = P (dP - dsum) scale, dq += dS K; the key tiles double-buffered as there.
//   dk, dv:  a CUDA block per (block, kv head, 64 keys), 4 warps of 16 keys; it walks the queries
//            in tiles of 32 (heads of the group inside), P^T and dS^T from K Q^T and V dO^T,
//            dV += P^T dO, dK += dS^T Q in registers, then adds into the block's gradient rows
//            once. It takes each query tile's q and dO rows while the last tile computes: bf16
//            copies (AttnParams::q16, do16; the model's under --precision bf16) by cp.async straight
//            into a second pair of tiles; else f32 rows by cp.async (D % 4 == 0, aligned; else plain
//            loads) into a stage, converted to bf16 in shared memory.
// Numerics: dO rounds to bf16 as Q, K, V do, dS rounds to bf16 for its products; every accumulation
// fp32. Deterministic: fixed order, no atomics, one writer per output element.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "backend/cuda/attention_mma_tiles.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"

namespace oomb::cuda::k {

namespace {

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
