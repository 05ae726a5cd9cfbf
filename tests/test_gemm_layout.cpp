// The CUDA backend's row-major GEMMs map onto cuBLASLt's column-major ones through lt_layout. This
// checks that arithmetic on the CPU, where no GPU is needed: a column-major GEMM computed exactly
// as cuBLASLt defines it (with the shape checks it makes) from lt_layout's output must equal the
// row-major product, for the backend's own call sites and all four transpositions.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#ifdef OOMB_HAVE_CUDA
#include "backend/cuda/gemm.h"
#endif

namespace {

#ifdef OOMB_HAVE_CUDA
using oomb::cuda::LtLayout;

// cuBLASLt: D (m, n) = op_a(A) op_b(B) [+ bias (m) per row of D], column-major. Fails like
// cuBLASLt would on layouts that do not fit m, n, k.
void lt_emulate(const LtLayout& l, const float* A, const float* B, float* C, const float* bias, float beta) {
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
        const float a = l.trans_a ? A[p + i * l.a_ld] : A[i + p * l.a_ld];
        const float b = l.trans_b ? B[j + p * l.b_ld] : B[p + j * l.b_ld];
        s += double(a) * b;
      }
      float& c = C[i + j * l.c_ld];
      c = float(s + (bias ? bias[i] : 0.0) + beta * c);
    }
}

// What Gemm::run computes for row-major arguments, through lt_layout.
std::vector<float> via_lt(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const std::vector<float>& A, int64_t lda,
                          const std::vector<float>& B, int64_t ldb, std::vector<float> C, int64_t ldc, float beta,
                          const float* bias) {
  const LtLayout l = oomb::cuda::lt_layout(ta, tb, M, N, K, lda, ldb, ldc);
  EXPECT_TRUE(l.swap);
  lt_emulate(l, B.data(), A.data(), C.data(), bias, beta);
  return C;
}

// The plain row-major statement.
std::vector<float> reference(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const std::vector<float>& A,
                             int64_t lda, const std::vector<float>& B, int64_t ldb, std::vector<float> C, int64_t ldc,
                             float beta, const float* bias) {
  for (int64_t r = 0; r < M; ++r)
    for (int64_t c = 0; c < N; ++c) {
      double s = 0;
      for (int64_t p = 0; p < K; ++p) s += double(ta ? A[p * lda + r] : A[r * lda + p]) * (tb ? B[c * ldb + p] : B[p * ldb + c]);
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

void check(bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc, float beta,
           bool with_bias) {
  SCOPED_TRACE(::testing::Message() << "ta=" << ta << " tb=" << tb << " M=" << M << " N=" << N << " K=" << K);
  const auto A = rnd(size_t((ta ? K : M) * lda), 1), B = rnd(size_t((tb ? N : K) * ldb), 2);
  const auto C = rnd(size_t(M * ldc), 3), bias = rnd(size_t(N), 4);
  const float* b = with_bias ? bias.data() : nullptr;
  EXPECT_EQ(via_lt(ta, tb, M, N, K, A, lda, B, ldb, C, ldc, beta, b),
            reference(ta, tb, M, N, K, A, lda, B, ldb, C, ldc, beta, b));
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
