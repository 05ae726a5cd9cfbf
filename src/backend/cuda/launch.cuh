// How oomb's kernels start: launch(kernel, grid, block, shared bytes, stream, args...) is
// kernel<<<grid, block, shared, stream>>>(args...) under nvcc. Built with OOMB_SIMT (tests/simt: the
// CUDA backend's sources on the CPU, for tests), it issues the whole grid's run on the stream
// there instead, and the few spellings below that only nvcc knows take simt's.
#pragma once
#include <cuda_runtime.h>

#include <tuple>
#include <utility>

#include "backend/cuda/stream_timeline.h"
#include "core/error.h"

#ifdef OOMB_SIMT
#define OOMB_DYNAMIC_SHARED(type, name) type* name = static_cast<type*>(::simt::dynamic_shared())
#else
#define OOMB_DYNAMIC_SHARED(type, name) extern __shared__ __align__(16) type name[]
#endif

namespace oomb::cuda::k {

template <typename... P, typename... A>
inline void launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t shared, cudaStream_t s, A&&... args) {
  about_to_submit(s);  // (OOMB_CUDA_TIMELINE: an op's start)
#ifdef OOMB_SIMT
  // the arguments by value, as CUDA copies them at the launch; every thread runs the kernel on them
  simt_launch(reinterpret_cast<const void*>(kernel), grid, block, shared, s,
              [kernel, a = std::tuple<P...>(std::forward<A>(args)...)] { std::apply(kernel, a); });
#else
  kernel<<<grid, block, shared, s>>>(std::forward<A>(args)...);
#endif
}

// lets `kernel` (named `name` in errors) take `bytes` of dynamic shared memory, above the 48 KB a launch gets
// unasked; a GPU that allows less is named with both figures here, not as an "invalid argument" at the launch
template <typename F>
void allow_shared(F* kernel, size_t bytes, const char* name) {
  const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();  // taken here, so the next op's check does not report it as its own
  int device = 0;
  cudaDeviceProp prop{};
  const bool known = cudaGetDevice(&device) == cudaSuccess && cudaGetDeviceProperties(&prop, device) == cudaSuccess;
  ::oomb::fail("{} needs {} B of shared memory per block; this GPU ({}) allows {} B: {}", name, bytes,
       known ? prop.name : "unknown", known ? prop.sharedMemPerBlockOptin : size_t(0), cudaGetErrorString(e));
}

}  // namespace oomb::cuda::k
