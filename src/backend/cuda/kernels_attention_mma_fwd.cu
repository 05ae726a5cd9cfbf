// Causal GQA attention forward over a table of KV blocks on tensor cores: the fast path under
// --precision bf16 (AttnArgs::bf16), the algebra of shared/DESIGN.md section 3 and the same block
// table, masks and fold as kernels_attention.cu. A CUDA block per (64 queries, head), 4 warps of 16
// queries. Per 64-key tile of a block: S = Q K^T in registers; online softmax in registers (log2
// units, each row's max over the 4 lanes of a quad); P -> bf16 A fragments; O += P V. The key tiles
// are double-buffered: bf16 pages (16-byte aligned, D % 8 == 0) by cp.async, so the next tile
// arrives while this one computes (under --precision bf16 the model hands the chunk's own keys as
// bf16 copies too); f32 keys by plain loads.
// Numerics: Q, K, V round to bf16 (under --precision bf16 they already hold bf16 values), P rounds
// to bf16 for its product (as FlashAttention does), statistics, softmax and every accumulation fp32.
// Deterministic: fixed order, no atomics, one writer per output element; a fold over several calls
// keeps the state exactly (o unnormalized, lse the running max in log2 units, run_sum), so it gives
// the bits of one call over the same blocks in the same order. Head dims up to 128 (even), padded
// with zeros to 16, 32, 64 or 128 in shared memory. (Building blocks: attention_mma_frag.cuh,
// attention_mma_tiles.cuh; the backward: kernels_attention_mma_bwd.cu.)
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "backend/cuda/attention_mma_tiles.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"

namespace oomb::cuda::k {

namespace {

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
void fwd(const AttnParams& p, const float* q, float* o, float* lse, cudaStream_t s) {
  static const bool raised =
      (allow_shared(attn_fwd_mma_k<DP>, FwdSmem<DP>::kBytes, "attention forward (tensor cores)"), true);
  (void)raised;
  const dim3 grid(unsigned((p.T + kBM - 1) / kBM), unsigned(p.H));
  launch(attn_fwd_mma_k<DP>, grid, kThreads, FwdSmem<DP>::kBytes, s, p, q, o, lse);
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

}  // namespace oomb::cuda::k
