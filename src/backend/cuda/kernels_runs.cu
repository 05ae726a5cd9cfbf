// Dense attention through cuDNN (cuda_backend.cpp): the keys of one run [a, a + R) gathered from
// the blocks into contiguous bf16, the run's key and value gradients folded back into the blocks,
// and the runs' partial outputs merged by the LSE algebra. Each run's work is one cuDNN call.
#include "backend/cuda/bf16.cuh"
#include "backend/cuda/kernels_runs.h"
#include "backend/cuda/launch.cuh"

namespace oomb::cuda::k {

namespace {

constexpr int kThreads = 256;
constexpr unsigned kSlices = 8;  // grid.y: slices of a block's rows

// the rows [lo, hi) of block b inside the run [a, a + R); empty when lo >= hi
struct Rows {
  int64_t lo, hi;
};
__device__ inline Rows rows_in_run(const AttnBlock& b, int64_t a, int64_t R) {
  return {b.idx0 > a ? b.idx0 : a, b.idx0 + b.len < a + R ? b.idx0 + b.len : a + R};
}

// grid (the run's blocks, kSlices): k16, v16 (R, G, D) rows r - a = the blocks' rows at sequence index r
__global__ void gather_run_k(const AttnBlock* blocks, int64_t a, int64_t R, int64_t GD, uint16_t* k16,
                             uint16_t* v16) {
  const AttnBlock b = blocks[blockIdx.x];
  const Rows r = rows_in_run(b, a, R);
  const int64_t n = (r.hi - r.lo) * GD, src0 = (r.lo - b.idx0) * GD, dst0 = (r.lo - a) * GD;
  for (int64_t e = int64_t(blockIdx.y) * blockDim.x + threadIdx.x; e < n; e += int64_t(gridDim.y) * blockDim.x) {
    if (b.kv_bf16) {
      k16[dst0 + e] = static_cast<const uint16_t*>(b.k)[src0 + e];
      v16[dst0 + e] = static_cast<const uint16_t*>(b.v)[src0 + e];
    } else {
      k16[dst0 + e] = to_bf16(static_cast<const float*>(b.k)[src0 + e]);
      v16[dst0 + e] = to_bf16(static_cast<const float*>(b.v)[src0 + e]);
    }
  }
}

__device__ inline void add_to(void* grad, bool grad_bf16, int64_t i, float g) {
  if (grad_bf16) {
    uint16_t* p = static_cast<uint16_t*>(grad) + i;
    *p = to_bf16(from_bf16(*p) + g);
  } else {
    static_cast<float*>(grad)[i] += g;
  }
}

// grid (the run's blocks, kSlices): each block's dk, dv += the run's rows of dk16, dv16 (R, G, D)
__global__ void fold_run_k(const AttnBlock* blocks, int64_t a, int64_t R, int64_t GD, const uint16_t* dk16,
                           const uint16_t* dv16) {
  const AttnBlock b = blocks[blockIdx.x];
  const Rows r = rows_in_run(b, a, R);
  const int64_t n = (r.hi - r.lo) * GD, dst0 = (r.lo - b.idx0) * GD, src0 = (r.lo - a) * GD;
  for (int64_t e = int64_t(blockIdx.y) * blockDim.x + threadIdx.x; e < n; e += int64_t(gridDim.y) * blockDim.x) {
    add_to(b.dk, b.grad_bf16, dst0 + e, from_bf16(dk16[src0 + e]));
    add_to(b.dv, b.grad_bf16, dst0 + e, from_bf16(dv16[src0 + e]));
  }
}

// grid (T * H): one CTA per (query, head) row of D: (o, lse) <- the softmax-weighted mean of
// (o, lse) and (o_run, lse_run); rows that saw no key yet (lse -inf) take the run's
__global__ void merge_run_k(float* o, float* lse, const float* o_run, const float* lse_run, int64_t D) {
  const int64_t row = blockIdx.x;
  const float l = lse[row], lr = lse_run[row];
  const float m = fmaxf(l, lr);
  if (m == -INFINITY) return;  // neither saw a key
  const float w = l == -INFINITY ? 0.0f : expf(l - m), wr = lr == -INFINITY ? 0.0f : expf(lr - m);
  const float inv = 1.0f / (w + wr);
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x)
    o[row * D + i] = (w * o[row * D + i] + wr * o_run[row * D + i]) * inv;
  __syncthreads();  // every thread has read lse[row] before it changes
  if (threadIdx.x == 0) lse[row] = m + logf(w + wr);
}

// grid (T * H), as merge_run_k, into the fold's state (kernels_runs.h: merge_fold). The run's
// weight in log2 units: its lse times log2(e), its denominator 1 (o_run is normalized).
__global__ void merge_fold_k(float* o, float* lse, float* run_sum, const float* o_run, const float* lse_run,
                             bool init, bool finish, int64_t D) {
  constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;
  const int64_t row = blockIdx.x;
  const float m = init ? -INFINITY : lse[row], l = init ? 0.0f : run_sum[row];
  const float mr = lse_run[row] == -INFINITY ? -INFINITY : lse_run[row] * kLog2e;
  const float mn = fmaxf(m, mr);
  const float c = m == -INFINITY ? 0.0f : exp2f(m - mn), cr = mr == -INFINITY ? 0.0f : exp2f(mr - mn);
  const float ln = l * c + cr;
  const float norm = finish ? (ln > 0.0f ? 1.0f / ln : 0.0f) : 1.0f;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    const float sum = (init ? 0.0f : o[row * D + i] * c) + o_run[row * D + i] * cr;
    o[row * D + i] = sum * norm;
  }
  __syncthreads();  // every thread has read lse[row] and run_sum[row] before they change
  if (threadIdx.x != 0) return;
  if (finish) {
    lse[row] = ln > 0.0f ? mn * kLn2 + logf(ln) : -INFINITY;
  } else {
    lse[row] = mn, run_sum[row] = ln;
  }
}

}  // namespace

void merge_fold(float* o, float* lse, float* run_sum, const float* o_run, const float* lse_run, bool init,
                bool finish, int64_t rows, int64_t D, cudaStream_t s) {
  if (rows > 0) launch(merge_fold_k, unsigned(rows), 128, 0, s, o, lse, run_sum, o_run, lse_run, init, finish, D);
}

void gather_run(const AttnParams& p, int64_t first, int64_t count, int64_t a, int64_t R, uint16_t* k16,
                uint16_t* v16, cudaStream_t s) {
  if (count > 0 && R > 0)
    launch(gather_run_k, dim3(unsigned(count), kSlices), kThreads, 0, s, p.blocks + first, a, R, p.G * p.D, k16, v16);
}
void fold_run(const AttnParams& p, int64_t first, int64_t count, int64_t a, int64_t R, const uint16_t* dk16,
              const uint16_t* dv16, cudaStream_t s) {
  if (count > 0 && R > 0)
    launch(fold_run_k, dim3(unsigned(count), kSlices), kThreads, 0, s, p.blocks + first, a, R, p.G * p.D, dk16, dv16);
}
void merge_run(float* o, float* lse, const float* o_run, const float* lse_run, int64_t rows, int64_t D,
               cudaStream_t s) {
  if (rows > 0) launch(merge_run_k, unsigned(rows), 128, 0, s, o, lse, o_run, lse_run, D);
}

}  // namespace oomb::cuda::k
