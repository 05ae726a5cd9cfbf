// What simt's barriers cost per thread (docs/BENCHMARKS.md, "simt's cost per barrier"): a warp
// shuffle, a __syncthreads and an empty kernel's thread, in blocks of 32 and 256 threads.
//   build/simt_costs
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>

#include "backend/cuda/launch.cuh"

using oomb::cuda::k::launch;

namespace {

// each thread: `iters` rounds of a five-shuffle butterfly (block_sum's first half)
__global__ void shuffles_k(float* out, int iters) {
  float v = float(threadIdx.x);
  for (int i = 0; i < iters; ++i)
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  out[blockIdx.x * blockDim.x + threadIdx.x] = v;
}

__global__ void syncs_k(float* out, int iters) {
  float v = float(threadIdx.x);
  for (int i = 0; i < iters; ++i) {
    __syncthreads();
    v += 1.0f;
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = v;
}

__global__ void empty_k(float* out) { out[blockIdx.x * blockDim.x + threadIdx.x] = 1.0f; }

template <class F>
double seconds(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main() {
  constexpr unsigned kBlocks = 20;
  float* d = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&d), kBlocks * 256 * sizeof(float));
  std::printf("%8s %22s %22s %22s\n", "threads", "ns per lane-shuffle", "ns per __syncthreads", "ns per empty thread");
  for (unsigned threads : {32u, 256u}) {
    const double n = double(kBlocks) * threads;
    const double shfl = seconds([&] { launch(shuffles_k, kBlocks, threads, 0, nullptr, d, 200); }) / (n * 200 * 5);
    const double sync = seconds([&] { launch(syncs_k, kBlocks, threads, 0, nullptr, d, 1000); }) / (n * 1000);
    const double empty = seconds([&] {
                           for (int i = 0; i < 200; ++i) launch(empty_k, kBlocks, threads, 0, nullptr, d);
                         }) / (n * 200);
    std::printf("%8u %22.1f %22.1f %22.1f\n", threads, shfl * 1e9, sync * 1e9, empty * 1e9);
  }
  cudaFree(d);
}
