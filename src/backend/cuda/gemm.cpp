#include "backend/cuda/gemm.h"

#include "backend/cuda/kernels.h"
#include "backend/cuda/stream_timeline.h"
#include "core/error.h"

namespace oomb::cuda {

static void lt_check(cublasStatus_t s, const char* what) {
  OOMB_CHECK(s == CUBLAS_STATUS_SUCCESS, "cuBLASLt: {} failed with status {}", what, int(s));
}

Gemm::Gemm(cudaStream_t stream, void* workspace, size_t workspace_bytes)
    : stream_(stream), ws_(workspace), ws_bytes_(workspace_bytes) {
  lt_check(cublasLtCreate(&lt_), "cublasLtCreate");
}

Gemm::~Gemm() {
  for (auto& [k, p] : plans_) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.c);
    cublasLtMatmulDescDestroy(p.op);
  }
  if (lt_) cublasLtDestroy(lt_);
}

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLASLt's "A" is our B and its
// "B" our A, each read through its column-major view (a row-major (r, c) matrix is (c, r) there).
LtLayout lt_layout(bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc) {
  LtLayout l{};
  l.swap = true;
  l.trans_a = tb, l.trans_b = ta;
  l.m = N, l.n = M, l.k = K;
  l.a_rows = tb ? K : N, l.a_cols = tb ? N : K, l.a_ld = ldb;  // our B: (K, N) row-major, or (N, K) when tb
  l.b_rows = ta ? M : K, l.b_cols = ta ? K : M, l.b_ld = lda;  // our A: (M, K) row-major, or (K, M) when ta
  l.c_rows = N, l.c_cols = M, l.c_ld = ldc;                    // C (M, N) row-major
  return l;
}

int lt_alignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  int al = 256;
  while (al > 2 && a % uintptr_t(al) != 0) al /= 2;
  return al;
}

Gemm::Plan& Gemm::plan(const Key& key) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  const auto [ta, tb, M, N, K, lda, ldb, ldc, bias, align_a, align_b, align_c, bf16] = key;
  const cudaDataType_t in = bf16 ? CUDA_R_16BF : CUDA_R_32F;  // A, B; C and D are fp32
  Plan p;
  cublasLtMatmulPreference_t pref = nullptr;
  auto cleanup = [&] {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (p.a) cublasLtMatrixLayoutDestroy(p.a);
    if (p.b) cublasLtMatrixLayoutDestroy(p.b);
    if (p.c) cublasLtMatrixLayoutDestroy(p.c);
    if (p.op) cublasLtMatmulDescDestroy(p.op);
  };
  try {
    const LtLayout l = lt_layout(ta, tb, M, N, K, lda, ldb, ldc);
    lt_check(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
    const cublasOperation_t op_a = l.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = l.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    lt_check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a), "TRANSA");
    lt_check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b), "TRANSB");
    if (bias) {
      const cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_BIAS;
      lt_check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e), "EPILOGUE");
    }
    lt_check(cublasLtMatrixLayoutCreate(&p.a, in, uint64_t(l.a_rows), uint64_t(l.a_cols), l.a_ld), "layout A");
    lt_check(cublasLtMatrixLayoutCreate(&p.b, in, uint64_t(l.b_rows), uint64_t(l.b_cols), l.b_ld), "layout B");
    lt_check(cublasLtMatrixLayoutCreate(&p.c, CUDA_R_32F, uint64_t(l.c_rows), uint64_t(l.c_cols), l.c_ld), "layout C");
    lt_check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
    const uint64_t ws = ws_bytes_;
    lt_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
             "workspace preference");
    // cuBLASLt's A is our B and its B our A (lt_layout); C is also D
    const uint32_t al[4] = {uint32_t(align_b), uint32_t(align_a), uint32_t(align_c), uint32_t(align_c)};
    const cublasLtMatmulPreferenceAttributes_t which[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; ++i)
      lt_check(cublasLtMatmulPreferenceSetAttribute(pref, which[i], &al[i], sizeof al[i]), "alignment preference");
    cublasLtMatmulHeuristicResult_t res{};
    int found = 0;
    // no algorithm comes back as found = 0 or, for some shapes and epilogues, as NOT_SUPPORTED
    auto heuristic = [&] {
      found = 0;
      const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt_, p.op, p.a, p.b, p.c, p.c, pref, 1, &res, &found);
      if (st == CUBLAS_STATUS_NOT_SUPPORTED) found = 0;
      else lt_check(st, "cublasLtMatmulAlgoGetHeuristic");
    };
    heuristic();
    p.epilogue = bias;
    if (found == 0 && bias) {  // no algorithm with the bias epilogue: plain GEMM, bias by a kernel
      const cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_DEFAULT;
      lt_check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e), "EPILOGUE");
      heuristic();
      p.epilogue = false;
    }
    OOMB_CHECK(found > 0, "cuBLASLt: no algorithm for a {}x{}x{} {} GEMM (alignments {}, {}, {} bytes)", M, N, K,
               bf16 ? "bf16" : "fp32", align_a, align_b, align_c);
    p.algo = res.algo;
    cublasLtMatmulPreferenceDestroy(pref);
  } catch (...) {
    cleanup();
    throw;
  }
  return plans_.emplace(key, p).first->second;
}

void Gemm::run(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void* A, int64_t lda, const void* B,
               int64_t ldb, float* C, int64_t ldc, float alpha, float beta, const float* bias, bool bf16) {
  if (M == 0 || N == 0) return;
  const bool aligned_bias = bias && lt_alignment(bias) >= 16;
  if (K == 0) {  // cuBLASLt wants K > 0; op(A) op(B) is zero
    OOMB_CHECK(beta == 1.0f || beta == 0.0f, "GEMM: K = 0 with beta {}", beta);
    OOMB_CHECK(!bias || ldc == N, "GEMM: a bias needs contiguous rows of C");
    if (beta == 0.0f) {
      about_to_submit(stream_);
      for (int64_t r = 0; r < M; ++r)
        OOMB_CHECK(cudaMemsetAsync(C + r * ldc, 0, size_t(N) * 4, stream_) == cudaSuccess, "GEMM: memset failed");
    }
    if (bias) k::add_rows(C, bias, M, N, stream_);
    return;
  }
  Plan& p =
      plan({ta, tb, M, N, K, lda, ldb, ldc, aligned_bias, lt_alignment(A), lt_alignment(B), lt_alignment(C), bf16});
  OOMB_CHECK(!bias || p.epilogue || ldc == N, "GEMM: a bias needs contiguous rows of C");
  if (p.epilogue)
    lt_check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias), "BIAS_POINTER");
  about_to_submit(stream_);  // (OOMB_CUDA_TIMELINE: an op's start)
  lt_check(cublasLtMatmul(lt_, p.op, &alpha, B, p.a, A, p.b, &beta, C, p.c, C, p.c, &p.algo, ws_, ws_bytes_, stream_),
           "cublasLtMatmul");
  if (bias && !p.epilogue) k::add_rows(C, bias, M, N, stream_);
}

}  // namespace oomb::cuda
