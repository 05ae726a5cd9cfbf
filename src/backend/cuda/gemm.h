// Row-major fp32 GEMMs on cuBLASLt: C (M, N) = alpha op(A) op(B) + beta C [+ bias (N) per row],
// where op(A) is (M, K) (A stored (M, K), or (K, M) when ta) and op(B) is (K, N) (B stored (K, N),
// or (N, K) when tb). fp32 compute without TF32, to match the CPU reference op by op. Plans
// (descriptors and the heuristic's algorithm) are built once per shape and cached.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>

namespace oomb::cuda {

class Gemm {
 public:
  Gemm(cudaStream_t stream, void* workspace, size_t workspace_bytes);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;
  void run(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
           int64_t ldb, float* C, int64_t ldc, float alpha, float beta, const float* bias = nullptr);

 private:
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool>;
  Plan& plan(const Key& k);
  cudaStream_t stream_;
  cublasLtHandle_t lt_ = nullptr;
  void* ws_;
  size_t ws_bytes_;
  std::map<Key, Plan> plans_;
};

}  // namespace oomb::cuda
