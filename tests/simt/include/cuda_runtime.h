// The CUDA runtime API and kernel language as simt runs them on the CPU (tests/simt/include/simt.h):
// what oomb's CUDA backend uses, no more. Device memory is host memory; a stream's work runs as late
// as CUDA allows (tests/simt/runtime.cpp); a launch runs the whole grid.
#pragma once
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>

#include "simt.h"

// ---- the kernel language ----
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
// a block's threads share it (the blocks run one after another); in a section of its own, which
// each block starts with as garbage (0xCD), as on a GPU, not with the last block's values. GCC
// ignores the section inside a function template: declare static shared memory in a plain
// function (kernels_basic.cu's lanes_total) or use dynamic shared memory there (CTest's
// simt.lint.StaticSharedOutsideTemplates checks, tests/simt/lint_static_shared.py).
#define __shared__ static __attribute__((section("simt_shared")))
#define __restrict__ __restrict

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct alignas(8) float2 {
  float x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};

#define threadIdx (::simt::thread_idx)
#define blockIdx (::simt::block_idx)
#define blockDim (::simt::block_dim)
#define gridDim (::simt::grid_dim)
constexpr int warpSize = 32;
using std::isfinite;  // CUDA declares these for device code in the global namespace
using std::isinf;
using std::isnan;

inline void __syncthreads() { simt::sync_block(); }
inline void __syncwarp(unsigned = 0xffffffffu) { simt::sync_warp(); }
// Shuffles over segments of `width` lanes (a power of two), as CUDA defines them: the source lane
// taken modulo the width within the caller's segment; xor reaching past the segment's end returns
// the caller's own value.
template <class T>
[[gnu::always_inline]] inline T __shfl_sync(unsigned, T v, int src, int width = 32) {
  const int base = simt::lane() & ~(width - 1);
  return simt::exchange(v)[base + (src & (width - 1))];
}
template <class T>
[[gnu::always_inline]] inline T __shfl_xor_sync(unsigned, T v, int mask, int width = 32) {
  const int base = simt::lane() & ~(width - 1), to = simt::lane() ^ mask;
  const auto all = simt::exchange(v);
  return to >= base + width ? v : all[to & 31];
}
inline unsigned __ballot_sync(unsigned mask, int pred) {  // exited lanes vote 0
  const auto all = simt::exchange(int(pred != 0));
  unsigned r = 0;
  for (int l = 0; l < simt::warp_lanes(); ++l)
    if (all.valid >> l & 1) r |= unsigned(all[l] != 0) << l;
  return r & mask;
}
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline unsigned __float_as_uint(float f) { return std::bit_cast<unsigned>(f); }
inline float __uint_as_float(unsigned u) { return std::bit_cast<float>(u); }

// ---- the runtime ----
enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorLaunchFailure = 719,
};
using cudaError = cudaError_t;
struct CUstream_st;
using cudaStream_t = CUstream_st*;
struct CUevent_st;
using cudaEvent_t = CUevent_st*;
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
constexpr unsigned cudaHostAllocDefault = 0;
constexpr unsigned cudaEventDisableTiming = 2;
struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  size_t sharedMemPerBlockOptin;
  int multiProcessorCount;
  int major, minor;
};
enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_16BF = 14 };
using cudaDataType = cudaDataType_t;

cudaError_t cudaGetDeviceCount(int* n);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device);
cudaError_t cudaMemGetInfo(size_t* free, size_t* total);
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();  // (the error, kept)
const char* cudaGetErrorString(cudaError_t e);
cudaError_t cudaMalloc(void** p, size_t bytes);
cudaError_t cudaFree(void* p);
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned flags);
cudaError_t cudaFreeHost(void* p);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s = nullptr);
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind kind, cudaStream_t s = nullptr);
cudaError_t cudaMemset(void* p, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t s = nullptr);
cudaError_t cudaStreamCreate(cudaStream_t* s);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags = 0);
cudaError_t cudaEventCreate(cudaEvent_t* e);  // (timing enabled)
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventQuery(cudaEvent_t e);
// ms from when start's stream reached it to when end's did (simt: when it ran the work before them)
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t simt_func_set_max_shared(const void* kernel, int bytes);
template <class F>
cudaError_t cudaFuncSetAttribute(F* kernel, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaErrorInvalidValue;
  return simt_func_set_max_shared(reinterpret_cast<const void*>(kernel), value);
}
// A kernel launch (src/backend/cuda/launch.cuh): body runs every thread of the grid when stream s
// reaches it; a configuration CUDA refuses sets the error cudaGetLastError returns, running nothing.
void simt_launch(const void* kernel, dim3 grid, dim3 block, size_t shared, cudaStream_t s,
                 std::function<void()> body);
// Other work on stream s (a library's, such as cuBLASLt's): runs when the stream reaches it.
void simt_issue(cudaStream_t s, std::function<void()> work);
