// simt's cuBLASLt stand-in (tests/simt/cublaslt.cpp) counts the algorithm searches asked of it, so a
// test can tell that GEMM plans are made once per shape (backend/cuda/gemm.cpp's cache). Only in
// simt builds (OOMB_SIMT).
#pragma once

#include <cstddef>

namespace oomb::cuda::cublaslt {

size_t simt_heuristic_calls();  // cublasLtMatmulAlgoGetHeuristic calls so far

}  // namespace oomb::cuda::cublaslt
