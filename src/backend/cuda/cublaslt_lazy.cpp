// cuBLASLt, loaded on first use. Linking libcublasLt maps it, with its relocations, into every
// process at start: about 200 MiB of resident memory before any work, even for `--device cpu`.
// These definitions stand in for the library's entry points the backend calls: the first call
// dlopen()s the library and each forwards to the real function. Nothing here runs for a CPU run.
#include <cublasLt.h>
#include <cublas_api.h>

#include <mutex>
#include <string>

#include "backend/cuda/lazy_library.h"

namespace {

void* library() {
  static void* handle = oomb::cuda::open_first(
      {("libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR)).c_str(), "libcublasLt.so"});
  return handle;
}

}  // namespace

#define OOMB_LAZY(name, params, args) \
  OOMB_LAZY_SYMBOL(library, cublasStatus_t, CUBLASWINAPI, CUBLAS_STATUS_NOT_INITIALIZED, name, params, args)

OOMB_LAZY(cublasLtCreate, (cublasLtHandle_t * h), (h))
OOMB_LAZY(cublasLtDestroy, (cublasLtHandle_t h), (h))
OOMB_LAZY(cublasLtMatmul,
          (cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void* alpha, const void* A, cublasLtMatrixLayout_t Ad,
           const void* B, cublasLtMatrixLayout_t Bd, const void* beta, const void* C, cublasLtMatrixLayout_t Cd,
           void* D, cublasLtMatrixLayout_t Dd, const cublasLtMatmulAlgo_t* algo, void* ws, size_t ws_bytes,
           cudaStream_t s),
          (h, d, alpha, A, Ad, B, Bd, beta, C, Cd, D, Dd, algo, ws, ws_bytes, s))
OOMB_LAZY(cublasLtMatmulAlgoGetHeuristic,
          (cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t A, cublasLtMatrixLayout_t B,
           cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D, cublasLtMatmulPreference_t p, int n,
           cublasLtMatmulHeuristicResult_t results[], int* count),
          (h, d, A, B, C, D, p, n, results, count))
OOMB_LAZY(cublasLtMatmulDescCreate, (cublasLtMatmulDesc_t * d, cublasComputeType_t c, cudaDataType_t s), (d, c, s))
OOMB_LAZY(cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t d), (d))
OOMB_LAZY(cublasLtMatmulDescSetAttribute,
          (cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void* buf, size_t n), (d, a, buf, n))
OOMB_LAZY(cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t * p), (p))
OOMB_LAZY(cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t p), (p))
OOMB_LAZY(cublasLtMatmulPreferenceSetAttribute,
          (cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a, const void* buf, size_t n),
          (p, a, buf, n))
OOMB_LAZY(cublasLtMatrixLayoutCreate, (cublasLtMatrixLayout_t * l, cudaDataType t, uint64_t r, uint64_t c, int64_t ld),
          (l, t, r, c, ld))
OOMB_LAZY(cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t l), (l))
