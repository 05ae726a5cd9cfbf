// Row-major GEMMs on cuBLASLt: C (M, N) = alpha op(A) op(B) + beta C [+ bias (N) per row],
// where op(A) is (M, K) (A stored (M, K), or (K, M) when ta) and op(B) is (K, N) (B stored (K, N),
// or (N, K) when tb); leading dimensions in elements. A and B both fp32 (fp32 compute without
// TF32, to match the CPU reference op by op) or both bf16 (tensor cores, CUBLAS_COMPUTE_32F: fp32
// accumulation); C, D, the bias, alpha and beta fp32 always. Plans (descriptors and the
// heuristic's first algorithm: deterministic, where timing candidates could pick another one from
// run to run and change the bits) are built once per shape, dtype and pointer alignment (fp32
// parameters are slices of one flat buffer, aligned to as little as 4 bytes; bf16 rows to 2) and
// cached. The bias goes through cuBLASLt's epilogue when it is 16-byte aligned and the heuristic
// offers an algorithm with it, else through a kernel.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>

namespace oomb::cuda {

// How a row-major GEMM maps onto cuBLASLt's column-major one (pure arithmetic, tested on the CPU):
// cuBLASLt computes D (m, n) = op_a(A) (m, k) op_b(B) (k, n), every matrix column-major (rows, cols, ld).
struct LtLayout {
  bool swap;                // cuBLASLt's A is our B (and its B our A)
  bool trans_a, trans_b;    // cuBLASLt's op_a, op_b
  int64_t m, n, k;
  int64_t a_rows, a_cols, a_ld, b_rows, b_cols, b_ld, c_rows, c_cols, c_ld;
};
LtLayout lt_layout(bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc);
// The alignment a plan is made for: the largest power of two from 2 to 256 dividing the address.
int lt_alignment(const void* p);

class Gemm {
 public:
  Gemm(cudaStream_t stream, void* workspace, size_t workspace_bytes);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;
  // bf16: A and B hold bf16 (else fp32)
  void run(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void* A, int64_t lda, const void* B, int64_t ldb,
           float* C, int64_t ldc, float alpha, float beta, const float* bias = nullptr, bool bf16 = false);

 private:
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool epilogue = false;  // the bias goes through the epilogue (else through a kernel after)
  };
  // ta, tb, M, N, K, lda, ldb, ldc, bias, alignment of A, B, C, bf16
  using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, int, int, int, bool>;
  Plan& plan(const Key& k);
  cudaStream_t stream_;
  cublasLtHandle_t lt_ = nullptr;
  void* ws_;
  size_t ws_bytes_;
  std::map<Key, Plan> plans_;
};

}  // namespace oomb::cuda
