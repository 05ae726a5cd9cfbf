// The CUDA backend's row-major GEMMs map onto cuBLASLt's column-major ones through lt_layout. This
// checks that arithmetic on the CPU, where no GPU is needed: a column-major GEMM computed exactly
// as cuBLASLt defines it (with the shape checks it makes) from lt_layout's output must equal the
// row-major product, for the backend's own call sites and all four transpositions, with fp32 and
// with bf16 operands.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "core/dtype.h"
#ifdef OOMB_HAVE_CUDA
#include "backend/cuda/gemm.h"
#endif

namespace {

#ifdef OOMB_HAVE_CUDA
using oomb::cuda::LtLayout;

// An operand's value: fp32, or bf16 (uint16_t bits) widened exactly, as the GEMMs read them.
float value(float x) { return x; }
float value(uint16_t h) { return oomb::bf16_to_f32(h); }

// cuBLASLt: D (m, n) = op_a(A) op_b(B) [+ bias (m) per row of D], column-major, A and B of type In
// (fp32 or bf16) indexed in elements, C and D fp32. Fails like cuBLASLt would on layouts that do
// not fit m, n, k.
template <typename In>
void lt_emulate(const LtLayout& l, const In* A, const In* B, float* C, const float* bias, float beta) {
  ASSERT_EQ(l.trans_a ? l.a_cols : l.a_rows, l.m);
  ASSERT_EQ(l.trans_a ? l.a_rows : l.a_cols, l.k);
  ASSERT_EQ(l.trans_b ? l.b_cols : l.b_rows, l.k);
  ASSERT_EQ(l.trans_b ? l.b_rows : l.b_cols, l.n);
  ASSERT_EQ(l.c_rows, l.m);
  ASSERT_EQ(l.c_cols, l.n);
  ASSERT_GE(l.a_ld, l.a_rows);
  ASSERT_GE(l.b_ld, l.b_rows);
  ASSERT_GE(l.c_ld, l.c_rows);
  for (int64_t i = 0; i < l.m; ++i)
    for (int64_t j = 0; j < l.n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < l.k; ++p) {
        const float a = value(l.trans_a ? A[p + i * l.a_ld] : A[i + p * l.a_ld]);
        const float b = value(l.trans_b ? B[j + p * l.b_ld] : B[p + j * l.b_ld]);
        s += double(a) * b;
      }
      float& c = C[i + j * l.c_ld];
      c = float(s + (bias ? bias[i] : 0.0) + beta * c);
    }
}

// What Gemm::run computes for row-major arguments, through lt_layout.
template <typename In>
std::vector<float> via_lt(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const std::vector<In>& A, int64_t lda,
                          const std::vector<In>& B, int64_t ldb, std::vector<float> C, int64_t ldc, float beta,
                          const float* bias) {
  const LtLayout l = oomb::cuda::lt_layout(ta, tb, M, N, K, lda, ldb, ldc);
  EXPECT_TRUE(l.swap);
  lt_emulate(l, B.data(), A.data(), C.data(), bias, beta);
  return C;
}

// The plain row-major statement.
template <typename In>
std::vector<float> reference(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const std::vector<In>& A,
                             int64_t lda, const std::vector<In>& B, int64_t ldb, std::vector<float> C, int64_t ldc,
                             float beta, const float* bias) {
  for (int64_t r = 0; r < M; ++r)
    for (int64_t c = 0; c < N; ++c) {
      double s = 0;
      for (int64_t p = 0; p < K; ++p)
        s += double(value(ta ? A[p * lda + r] : A[r * lda + p])) * value(tb ? B[c * ldb + p] : B[p * ldb + c]);
      C[r * ldc + c] = float(s + (bias ? bias[c] : 0.0) + beta * C[r * ldc + c]);
    }
  return C;
}

std::vector<float> rnd(size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> h;
  for (float x : v) h.push_back(oomb::f32_to_bf16(x));
  return h;
}

// fp32 operands, and (bf16) the same arguments with A and B stored as bf16: leading dimensions
// count elements whatever their size, and C stays fp32.
void check(bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc, float beta,
           bool with_bias, bool bf16 = false) {
  SCOPED_TRACE(::testing::Message() << "ta=" << ta << " tb=" << tb << " M=" << M << " N=" << N << " K=" << K
                                    << (bf16 ? " bf16" : " fp32"));
  const auto A = rnd(size_t((ta ? K : M) * lda), 1), B = rnd(size_t((tb ? N : K) * ldb), 2);
  const auto C = rnd(size_t(M * ldc), 3), bias = rnd(size_t(N), 4);
  const float* b = with_bias ? bias.data() : nullptr;
  if (!bf16) {
    EXPECT_EQ(via_lt(ta, tb, M, N, K, A, lda, B, ldb, C, ldc, beta, b),
              reference(ta, tb, M, N, K, A, lda, B, ldb, C, ldc, beta, b));
    return;
  }
  const auto A16 = to_bf16(A), B16 = to_bf16(B);
  const auto got = via_lt(ta, tb, M, N, K, A16, lda, B16, ldb, C, ldc, beta, b);
  EXPECT_EQ(got, reference(ta, tb, M, N, K, A16, lda, B16, ldb, C, ldc, beta, b));
  EXPECT_NE(got, reference(ta, tb, M, N, K, A, lda, B, ldb, C, ldc, beta, b)) << "the bf16 operands were not read";
}
#endif

}  // namespace

TEST(GemmLayout, RowMajorGemmsMapOntoColumnMajorCublasLt) {
#ifndef OOMB_HAVE_CUDA
  GTEST_SKIP() << "this build has no CUDA backend (nvcc not found at configure time)";
#else
  const int64_t T = 7, in = 5, out = 3, V = 11, d = 4, n = 6;
  // the backend's call sites, with their exact arguments
  check(false, true, T, out, in, in, in, out, 0.0f, true);    // linear_fwd: y = x w^T + b
  check(false, false, T, in, out, out, in, in, 1.0f, false);  // linear_bwd: dx (+)= dy w
  check(true, false, out, in, T, out, in, in, 1.0f, false);   // linear_bwd: dw += dy^T x
  check(false, true, n, V, d, d, d, V, 0.0f, false);          // lm_head_xent: logits = h w^T
  check(false, false, n, d, V, V, d, d, 0.0f, false);         // lm_head_xent: dh = dlogits w
  check(true, false, V, d, n, V, d, d, 1.0f, false);          // lm_head_xent: dw += dlogits^T h
  // every transposition, leading dimensions beyond the minimum
  for (bool ta : {false, true})
    for (bool tb : {false, true}) check(ta, tb, 5, 9, 4, (ta ? 5 : 4) + 3, (tb ? 4 : 9) + 2, 9 + 1, 0.5f, true);
#endif
}

// --precision bf16: the same call sites with A and B in bf16 (C fp32), and the alignment a plan is
// made for, which for bf16 rows (2-byte elements) can be 2.
TEST(GemmLayout, Bf16OperandsMapTheSameWay) {
#ifndef OOMB_HAVE_CUDA
  GTEST_SKIP() << "this build has no CUDA backend (nvcc not found at configure time)";
#else
  const int64_t T = 7, in = 5, out = 3, V = 11, d = 4, n = 6;
  check(false, true, T, out, in, in, in, out, 0.0f, true, true);    // linear_fwd
  check(false, false, T, in, out, out, in, in, 1.0f, false, true);  // linear_bwd dx
  check(true, false, out, in, T, out, in, in, 1.0f, false, true);   // linear_bwd dw
  check(false, true, n, V, d, d, d, V, 0.0f, false, true);          // lm_head_xent: logits
  check(false, false, n, d, V, V, d, d, 0.0f, false, true);         // dh from the bf16 gradient tile
  check(true, false, V, d, n, V, d, d, 1.0f, false, true);          // dw += bf16 tile^T h
  for (bool ta : {false, true})
    for (bool tb : {false, true}) check(ta, tb, 5, 9, 4, (ta ? 5 : 4) + 3, (tb ? 4 : 9) + 2, 9 + 1, 0.5f, true, true);
  alignas(256) static uint16_t h[256];
  alignas(256) static float f[64];
  EXPECT_EQ(oomb::cuda::lt_alignment(h), 256);
  EXPECT_EQ(oomb::cuda::lt_alignment(h + 1), 2);  // a bf16 row of odd width: 2-byte aligned
  EXPECT_EQ(oomb::cuda::lt_alignment(h + 2), 4);
  EXPECT_EQ(oomb::cuda::lt_alignment(h + 8), 16);
  EXPECT_EQ(oomb::cuda::lt_alignment(h + 24), 16);
  EXPECT_EQ(oomb::cuda::lt_alignment(f + 1), 4);
  EXPECT_EQ(oomb::cuda::lt_alignment(f + 16), 64);
#endif
}
