// kernels_runs.cu: dense attention through cuDNN in runs of keys (cudnn_attention.cpp).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels.h"

namespace oomb::cuda::k {

// k16, v16: (R, G, D) bf16 = the keys and values at sequence indices [a, a + R) of the table's
// entries [first, first + count) (those holding them)
void gather_run(const AttnParams& p, int64_t first, int64_t count, int64_t a, int64_t R, uint16_t* k16,
                uint16_t* v16, cudaStream_t s);
// those entries' dk, dv (f32 or bf16 pages) += their rows of dk16, dv16: (R, G, D) bf16 at [a, a + R)
void fold_run(const AttnParams& p, int64_t first, int64_t count, int64_t a, int64_t R, const uint16_t* dk16,
              const uint16_t* dv16, cudaStream_t s);
// o: (rows, D), lse: (rows) <- the softmax-weighted mean of themselves and o_run, lse_run (natural log)
void merge_run(float* o, float* lse, const float* o_run, const float* lse_run, int64_t rows, int64_t D,
               cudaStream_t s);

// A fold over several calls (AttnArgs::first / last): o, lse, run_sum hold the oomb tensor-core
// kernels' state between calls (o the unnormalized sum, lse the running max in log2 units, run_sum
// the denominator), so a fold may change kernels between calls. The run's (o_run, lse_run: natural
// log) joins it; init: the state is empty (not read); finish: o and lse come out normalized, lse
// in natural log, as a whole call gives them.
void merge_fold(float* o, float* lse, float* run_sum, const float* o_run, const float* lse_run, bool init,
                bool finish, int64_t rows, int64_t D, cudaStream_t s);

}  // namespace oomb::cuda::k
