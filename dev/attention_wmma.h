// Lab variant of the paged attention forward on tensor cores (dev/attention_wmma.cu).
#pragma once
#include <cuda_runtime.h>

#include "backend/cuda/kernels.h"

namespace oomb::cuda::lab {

constexpr int64_t kWmmaMaxD = 256;
// null when the variant handles these parameters, else why not
const char* attention_fwd_wmma_unsupported(const k::AttnParams& p);
size_t attention_fwd_wmma_shared_bytes(int64_t D);
// q, o: (T, H, D) fp32; lse: (T, H). Q, K, V are rounded to bf16 for the products.
cudaError_t attention_fwd_wmma(const k::AttnParams& p, const float* q, float* o, float* lse, cudaStream_t s);

// Backward on tensor cores: dsum (T, H) = rowsum(dout * o) (a workspace), dq (T, H, D) =, and every
// block's dk, dv += (f32 or bf16 gradient rows, added once per call). D <= kWmmaMaxBwdD.
constexpr int64_t kWmmaMaxBwdD = 128;
const char* attention_bwd_wmma_unsupported(const k::AttnParams& p);
cudaError_t attention_bwd_wmma(const k::AttnParams& p, const float* q, const float* o, const float* lse,
                               const float* dout, float* dq, float* dsum, cudaStream_t s);

}  // namespace oomb::cuda::lab
