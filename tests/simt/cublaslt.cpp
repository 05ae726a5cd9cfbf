// cuBLASLt on simt: D = alpha op(A) op(B) + beta C (+ bias per row of D), run when the stream gets
// there (tests/simt/runtime.cpp), every matrix column-major
// (rows, cols, ld), as the library documents it; products summed in fp64 and rounded once (the
// library sums in fp32 in an order of its own: the CPU reference's order is neither). The checks
// are the library's: what it would refuse, this refuses with the status it returns.
#include <atomic>
#include <cublasLt.h>

#include "simt/cublaslt_calls.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

struct cublasLtContext {};
struct cublasLtMatmulDescOpaque_t {
  cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const float* bias = nullptr;
};
struct cublasLtMatrixLayoutOpaque_t {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
};
struct cublasLtMatmulPreferenceOpaque_t {
  uint64_t workspace = 0;
  uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D: the library assumes 256 unless told less
};

namespace {

constexpr uint64_t kMagic = 0x73696d74616c676fULL;  // an algorithm this heuristic returned

cublasStatus_t refuse(cublasStatus_t s, const char* why) {
  std::fprintf(stderr, "simt cuBLASLt: %s\n", why);
  return s;
}

uint32_t alignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al != 0) al /= 2;
  return al;
}

float element(const void* p, cudaDataType_t t, size_t i) {
  if (t == CUDA_R_32F) return static_cast<const float*>(p)[i];
  uint16_t h;
  std::memcpy(&h, static_cast<const char*>(p) + 2 * i, 2);
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
  *h = new cublasLtContext;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute, cudaDataType_t scale) {
  if (compute != CUBLAS_COMPUTE_32F || scale != CUDA_R_32F)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "a compute or scale type other than fp32");
  *d = new cublasLtMatmulDescOpaque_t;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  delete d;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a,
                                              const void* buf, size_t n) {
  switch (a) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB:
      if (n != sizeof(cublasOperation_t)) return refuse(CUBLAS_STATUS_INVALID_VALUE, "TRANSA/B: wrong size");
      std::memcpy(a == CUBLASLT_MATMUL_DESC_TRANSA ? &d->ta : &d->tb, buf, n);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      if (n != sizeof(cublasLtEpilogue_t)) return refuse(CUBLAS_STATUS_INVALID_VALUE, "EPILOGUE: wrong size");
      std::memcpy(&d->epilogue, buf, n);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      if (n != sizeof(void*)) return refuse(CUBLAS_STATUS_INVALID_VALUE, "BIAS_POINTER: wrong size");
      std::memcpy(&d->bias, buf, n);
      return CUBLAS_STATUS_SUCCESS;
  }
  return refuse(CUBLAS_STATUS_INVALID_VALUE, "a descriptor attribute simt does not know");
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType t, uint64_t rows, uint64_t cols,
                                          int64_t ld) {
  if (ld < int64_t(rows) || ld < 1) return refuse(CUBLAS_STATUS_INVALID_VALUE, "a leading dimension below the rows");
  *l = new cublasLtMatrixLayoutOpaque_t{t, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete l;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
  *p = new cublasLtMatmulPreferenceOpaque_t;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t a, const void* buf, size_t n) {
  if (a == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) {
    if (n != sizeof(uint64_t)) return refuse(CUBLAS_STATUS_INVALID_VALUE, "MAX_WORKSPACE_BYTES: wrong size");
    std::memcpy(&p->workspace, buf, n);
    return CUBLAS_STATUS_SUCCESS;
  }
  if (n != sizeof(uint32_t)) return refuse(CUBLAS_STATUS_INVALID_VALUE, "an alignment preference: wrong size");
  std::memcpy(&p->align[a - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], buf, n);
  return CUBLAS_STATUS_SUCCESS;
}

namespace {
// the shapes agree (op(A) m x k, op(B) k x n, C and D m x n) and the types have a kernel
cublasStatus_t check(cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t A, cublasLtMatrixLayout_t B,
                     cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D) {
  const uint64_t m = D->rows, n = D->cols;
  const uint64_t am = d->ta == CUBLAS_OP_N ? A->rows : A->cols, k = d->ta == CUBLAS_OP_N ? A->cols : A->rows;
  const uint64_t bk = d->tb == CUBLAS_OP_N ? B->rows : B->cols, bn = d->tb == CUBLAS_OP_N ? B->cols : B->rows;
  if (am != m || bk != k || bn != n || C->rows != m || C->cols != n)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "matrix dimensions that do not agree");
  if (A->type != B->type || (A->type != CUDA_R_32F && A->type != CUDA_R_16BF) || C->type != CUDA_R_32F ||
      D->type != CUDA_R_32F)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "operand types without a kernel");
  return CUBLAS_STATUS_SUCCESS;
}
}  // namespace

namespace {
std::atomic<size_t> heuristic_calls{0};
}  // namespace

namespace oomb::cuda::cublaslt {
size_t simt_heuristic_calls() { return heuristic_calls.load(); }
}  // namespace oomb::cuda::cublaslt

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t A,
                                              cublasLtMatrixLayout_t B, cublasLtMatrixLayout_t C,
                                              cublasLtMatrixLayout_t D, cublasLtMatmulPreference_t p, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* count) {
  *count = 0;
  ++heuristic_calls;
  if (requested < 1) return refuse(CUBLAS_STATUS_INVALID_VALUE, "no result asked for");
  if (const cublasStatus_t s = check(d, A, B, C, D); s != CUBLAS_STATUS_SUCCESS) return s;
  // OOMB_SIMT_CUBLASLT_NO_BIAS=1: no algorithm offers the bias epilogue (as the library may answer
  // for a shape), so the caller's fallback runs
  static const bool no_bias = std::getenv("OOMB_SIMT_CUBLASLT_NO_BIAS") != nullptr;
  if (no_bias && d->epilogue == CUBLASLT_EPILOGUE_BIAS) return CUBLAS_STATUS_NOT_SUPPORTED;
  results[0] = {};
  cublasLtMatmulAlgo_t& a = results[0].algo;
  for (int i = 0; i < 4; ++i) a.data[i] = p->align[i];
  a.data[4] = uint64_t(d->epilogue);
  a.data[5] = kMagic;
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *count = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t d, const void* alpha, const void* Ap,
                              cublasLtMatrixLayout_t A, const void* Bp, cublasLtMatrixLayout_t B, const void* beta,
                              const void* Cp, cublasLtMatrixLayout_t C, void* Dp, cublasLtMatrixLayout_t D,
                              const cublasLtMatmulAlgo_t* algo, void*, size_t, cudaStream_t s) {
  if (const cublasStatus_t st = check(d, A, B, C, D); st != CUBLAS_STATUS_SUCCESS) return st;
  if (!algo || algo->data[5] != kMagic) return refuse(CUBLAS_STATUS_INVALID_VALUE, "an algorithm no heuristic gave");
  if (algo->data[4] != uint64_t(d->epilogue))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "an epilogue other than the one the algorithm was chosen for");
  const void* ptrs[4] = {Ap, Bp, Cp, Dp};
  for (int i = 0; i < 4; ++i)
    if (alignment(ptrs[i]) < algo->data[i])
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "a pointer less aligned than the algorithm was chosen for");
  if (d->epilogue == CUBLASLT_EPILOGUE_BIAS && !d->bias) return refuse(CUBLAS_STATUS_INVALID_VALUE, "a null bias");
  // the scalars (host pointers) and descriptors as they are now; the product when the stream gets there
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  simt_issue(s, [=, dd = *d, a = *A, b = *B, c = *C, dl = *D] {
    const uint64_t m = dl.rows, n = dl.cols, k = dd.ta == CUBLAS_OP_N ? a.cols : a.rows;
    std::vector<double> acc(m);
    std::vector<float> col(m);
    for (uint64_t j = 0; j < n; ++j) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (uint64_t kk = 0; kk < k; ++kk) {
        const double bv = element(Bp, b.type, dd.tb == CUBLAS_OP_N ? kk + j * uint64_t(b.ld) : j + kk * uint64_t(b.ld));
        for (uint64_t i = 0; i < m; ++i) {
          const size_t at = dd.ta == CUBLAS_OP_N ? i + kk * uint64_t(a.ld) : kk + i * uint64_t(a.ld);
          acc[i] += double(element(Ap, a.type, at)) * bv;
        }
      }
      for (uint64_t i = 0; i < m; ++i) {  // C is not read when beta is 0, as the library does
        float v = al * float(acc[i]);
        if (be != 0.0f) v += be * static_cast<const float*>(Cp)[i + j * uint64_t(c.ld)];
        if (dd.epilogue == CUBLASLT_EPILOGUE_BIAS) v += dd.bias[i];
        col[i] = v;
      }
      std::memcpy(static_cast<float*>(Dp) + j * uint64_t(dl.ld), col.data(), m * 4);
    }
  });
  return CUBLAS_STATUS_SUCCESS;
}
