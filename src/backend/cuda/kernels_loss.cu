// The softmax cross-entropy of a logits tile (n, Vt) of the lm_head's vocabulary tile [v0, v0 + Vt)
// (the loss tiles its GEMMs around these): pass 1 merges each row's statistics, the loss reads
// them, pass 2 turns a recomputed tile into its gradient. The CPU's arithmetic (cpu_loss.cpp).
#include <cfloat>

#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"

namespace oomb::cuda::k {

namespace {

constexpr int kThreads = 1024;
enum : int { kMax = 0, kSum = 1, kTarget = 2, kArg = 3 };  // a stats row (T, 4) f64

// logits: (n, ld), the tile's Vt columns; stats: (n, 4); grid n. The argmax is the first index of
// the tile's maximum, replacing the row's only when strictly greater (ties to the lower id).
__global__ void xent_stats_k(const float* logits, int64_t ld, const int32_t* targets, int64_t v0, int64_t Vt,
                             double* stats) {
  const int64_t r = blockIdx.x;
  const float* row = logits + r * ld;
  double* s = stats + r * 4;
  const int32_t y = targets[r];
  if (y < 0) {  // ignored target: no loss, no gradient
    if (threadIdx.x == 0 && v0 == 0) s[kMax] = -INFINITY, s[kSum] = 0, s[kTarget] = 0, s[kArg] = -1;
    return;
  }
  // per thread over its columns (ascending, strict >), then a (value, lowest index) tree; arg == Vt
  // marks a thread without columns, which never wins (even against -inf or NaN logits)
  float best = -FLT_MAX;
  int64_t arg = Vt;
  for (int64_t v = threadIdx.x; v < Vt; v += blockDim.x)
    if (row[v] > best || arg == Vt) best = row[v], arg = v;
  __shared__ float bv[32];
  __shared__ int64_t bi[32];
  __shared__ double part[32];
  __shared__ float m_row;
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, best, o);
    const int64_t oi = __shfl_xor_sync(0xffffffffu, arg, o);
    if (oi != Vt && (arg == Vt || ov > best || (ov == best && oi < arg))) best = ov, arg = oi;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  if (lane == 0) bv[warp] = best, bi[warp] = arg;
  __syncthreads();
  best = lane < nw ? bv[lane] : -FLT_MAX;
  arg = lane < nw ? bi[lane] : Vt;
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, best, o);
    const int64_t oi = __shfl_xor_sync(0xffffffffu, arg, o);
    if (oi != Vt && (arg == Vt || ov > best || (ov == best && oi < arg))) best = ov, arg = oi;
  }
  // thread 0 (warp 0 holds the block's argmax) merges the tile's maximum into the row's
  const float m_old = float(s[kMax]);
  const bool first = v0 == 0, higher = first || row[arg] > m_old;
  if (threadIdx.x == 0) m_row = higher ? row[arg] : m_old;
  __syncthreads();
  const float m = m_row;
  // sum of exp(logit - max) in fp64, fixed tree
  double sum = 0;
  for (int64_t v = threadIdx.x; v < Vt; v += blockDim.x) sum += exp(double(row[v] - m));
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (lane == 0) part[warp] = sum;
  __syncthreads();
  sum = lane < nw ? part[lane] : 0.0;
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (threadIdx.x != 0) return;
  if (higher) s[kArg] = double(v0 + arg);
  s[kSum] = first ? sum : s[kSum] * exp(double(m_old) - double(m)) + sum;
  s[kMax] = m;
  if (first) s[kTarget] = 0;
  if (y >= v0 && y < v0 + Vt) s[kTarget] = row[y - v0];
}

// acc (2) += {sum over rows with a target of lse - target logit, argmax hits}, rows in order
__global__ void xent_loss_k(const double* stats, const int32_t* targets, int64_t n, double* acc) {
  double loss = 0, hits = 0;
  for (int64_t r = 0; r < n; ++r) {
    const double* s = stats + r * 4;
    if (targets[r] < 0) continue;
    loss += double(float(s[kMax])) + log(s[kSum]) - s[kTarget];
    hits += double(int64_t(s[kArg]) == targets[r]);
  }
  acc[0] += loss;
  acc[1] += hits;
}

// logits (n, ld) in place -> (exp(logit - lse) - onehot(y)) * scale over the tile's Vt columns;
// rows with y < 0 become zero; grid n
__global__ void xent_grad_k(float* logits, int64_t ld, const int32_t* targets, int64_t v0, int64_t Vt,
                            const double* stats, float scale) {
  const int64_t r = blockIdx.x;
  float* row = logits + r * ld;
  const int32_t y = targets[r];
  if (y < 0) {
    for (int64_t v = threadIdx.x; v < Vt; v += blockDim.x) row[v] = 0.0f;
    return;
  }
  const double* s = stats + r * 4;
  const double lse = double(float(s[kMax])) + log(s[kSum]);
  for (int64_t v = threadIdx.x; v < Vt; v += blockDim.x) {
    float g = float(exp(double(row[v]) - lse)) * scale;
    if (v0 + v == y) g -= scale;
    row[v] = g;
  }
}

}  // namespace

void xent_stats(const float* logits, int64_t ld, const int32_t* targets, int64_t v0, int64_t Vt, int64_t n,
                double* stats, cudaStream_t s) {
  if (n > 0) launch(xent_stats_k, unsigned(n), kThreads, 0, s, logits, ld, targets, v0, Vt, stats);
}

void xent_loss(const double* stats, const int32_t* targets, int64_t n, double* acc, cudaStream_t s) {
  launch(xent_loss_k, 1, 1, 0, s, stats, targets, n, acc);
}

void xent_grad(float* logits, int64_t ld, const int32_t* targets, int64_t v0, int64_t Vt, int64_t n,
               const double* stats, float scale, cudaStream_t s) {
  if (n > 0) launch(xent_grad_k, unsigned(n), kThreads, 0, s, logits, ld, targets, v0, Vt, stats, scale);
}

}  // namespace oomb::cuda::k
