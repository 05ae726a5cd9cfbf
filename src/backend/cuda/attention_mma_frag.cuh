// Tensor-core building blocks of the attention kernels (kernels_attention_mma_fwd.cu, _bwd.cu):
// mma.sync m16n8k16 (bf16 inputs, fp32 accumulation), ldmatrix, cp.async, and the tiles' sizes.
// Memory: every tile sits in shared memory row-major, bf16 (rows padded by 16 bytes, so ldmatrix's
// eight rows hit every bank once); fragments come by ldmatrix, transposed ones (V for P V, K for
// dS K, Q and dO for the dk, dv products) by ldmatrix.trans.
// Fragment layouts (PTX ISA, mma.m16n8k16 .bf16): lane = 4 gq + tq; A (16 x 16, row): {(gq, 2tq..),
// (gq + 8, 2tq..), (gq, 2tq + 8..), (gq + 8, 2tq + 8..)}; B (16 x 8, col): {(2tq.., gq), (2tq + 8.., gq)};
// C (16 x 8): {(gq, 2tq), (gq, 2tq + 1), (gq + 8, 2tq), (gq + 8, 2tq + 1)}. A C tile pair of S is
// therefore P's A fragment for the next product with no data movement.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

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

}  // namespace

}  // namespace oomb::cuda::k
