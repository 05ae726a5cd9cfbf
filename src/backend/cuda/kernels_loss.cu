// The softmax cross-entropy of one logits tile (the fused lm_head + loss tiles its GEMMs around it).
#include <cfloat>

#include "backend/cuda/kernels.h"

namespace oomb::cuda::k {

namespace {

constexpr int kThreads = 1024;

// logits: (n, V); grid n. The argmax is the first index of the maximum, as on the CPU.
__global__ void xent_rows_k(float* logits, const int32_t* targets, float scale, int64_t V, double* row_loss,
                            int32_t* row_hit) {
  const int64_t r = blockIdx.x;
  float* row = logits + r * V;
  const int32_t y = targets[r];
  if (y < 0) {  // ignored target: no loss, no gradient
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) row[v] = 0.0f;
    if (threadIdx.x == 0) row_loss[r] = 0.0, row_hit[r] = 0;
    return;
  }
  // argmax: per thread over its columns (ascending, strict >), then a (value, lowest index) tree;
  // arg == V marks a thread without columns, which never wins (even against -inf or NaN logits)
  float best = -FLT_MAX;
  int64_t arg = V;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x)
    if (row[v] > best || arg == V) best = row[v], arg = v;
  __shared__ float bv[32];
  __shared__ int64_t bi[32];
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, best, o);
    const int64_t oi = __shfl_xor_sync(0xffffffffu, arg, o);
    if (oi != V && (arg == V || ov > best || (ov == best && oi < arg))) best = ov, arg = oi;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  if (lane == 0) bv[warp] = best, bi[warp] = arg;
  __syncthreads();
  best = lane < nw ? bv[lane] : -FLT_MAX;
  arg = lane < nw ? bi[lane] : V;
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, best, o);
    const int64_t oi = __shfl_xor_sync(0xffffffffu, arg, o);
    if (oi != V && (arg == V || ov > best || (ov == best && oi < arg))) best = ov, arg = oi;
  }
  const float m = row[arg];
  // sum of exp(logit - max) in fp64, fixed tree
  double sum = 0;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) sum += exp(double(row[v] - m));
  __shared__ double part[32];
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (lane == 0) part[warp] = sum;
  __syncthreads();
  sum = lane < nw ? part[lane] : 0.0;
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  const double lse = double(m) + log(sum);
  if (threadIdx.x == 0) row_loss[r] = lse - double(row[y]), row_hit[r] = arg == y;
  __syncthreads();  // row[y] is read above before it is overwritten below
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
    float g = float(exp(double(row[v]) - lse)) * scale;
    if (v == y) g -= scale;
    row[v] = g;
  }
}

__global__ void xent_accumulate_k(const double* row_loss, const int32_t* row_hit, int64_t n, double* acc) {
  double loss = acc[0], hits = acc[1];
  for (int64_t r = 0; r < n; ++r) loss += row_loss[r], hits += double(row_hit[r]);
  acc[0] = loss;
  acc[1] = hits;
}

__global__ void add_f64_k(double* y, const double* x, int64_t n) {
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) y[i] += x[i];
}

}  // namespace

void xent_accumulate(const double* row_loss, const int32_t* row_hit, int64_t n, double* acc, cudaStream_t s) {
  xent_accumulate_k<<<1, 1, 0, s>>>(row_loss, row_hit, n, acc);
}

void add_f64(double* y, const double* x, int64_t n, cudaStream_t s) {
  if (n > 0) add_f64_k<<<1, 32, 0, s>>>(y, x, n);
}

void xent_rows(float* logits, const int32_t* targets, float scale, int64_t n, int64_t V, double* row_loss,
               int32_t* row_hit, cudaStream_t s) {
  if (n > 0) xent_rows_k<<<unsigned(n), kThreads, 0, s>>>(logits, targets, scale, V, row_loss, row_hit);
}

}  // namespace oomb::cuda::k
