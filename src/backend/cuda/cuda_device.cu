// CUDA device runtime: device discovery and the accountant's device allocator.
#include <cuda_runtime.h>

#include <cstring>

#include "backend/cuda/cuda_device.h"
#include "core/error.h"
#include "core/memory.h"

namespace oomb::cuda {

bool device_available(std::string* why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    if (why) *why = e != cudaSuccess ? std::string("no usable GPU: ") + cudaGetErrorString(e) : "no GPU visible";
    cudaGetLastError();  // clear the sticky error state
    return false;
  }
  return true;
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

void use_device(int index) {
  const cudaError_t e = cudaSetDevice(index);
  OOMB_CHECK(e == cudaSuccess, "cudaSetDevice({}) failed: {}", index, cudaGetErrorString(e));
}

// Zero-filled, as host buffers are (gradients and optimizer moments rely on it).
static void* device_alloc(size_t bytes) {
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, bytes);
  OOMB_CHECK(e == cudaSuccess, "cudaMalloc of {} failed: {}", format_bytes(int64_t(bytes)), cudaGetErrorString(e));
  e = cudaMemset(p, 0, bytes);
  OOMB_CHECK(e == cudaSuccess, "zeroing {} of device memory failed: {}", format_bytes(int64_t(bytes)),
             cudaGetErrorString(e));
  return p;
}
static void device_free(void* p) { cudaFree(p); }

// Page-locked host memory (tier pinned), zero-filled: copies to and from it run asynchronously.
static void* pinned_alloc(size_t bytes) {
  void* p = nullptr;
  cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocDefault);
  OOMB_CHECK(e == cudaSuccess, "cudaHostAlloc of {} failed: {}", format_bytes(int64_t(bytes)), cudaGetErrorString(e));
  std::memset(p, 0, bytes);
  return p;
}
static void pinned_free(void* p) { cudaFreeHost(p); }

void install_device_allocator() {
  set_device_allocator(DeviceAllocator{&device_alloc, &device_free});
  set_pinned_allocator(DeviceAllocator{&pinned_alloc, &pinned_free});
  set_device_memory_is_host(false);
}

void copy_to_device(void* dst, const void* src, size_t bytes) {
  cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
  OOMB_CHECK(e == cudaSuccess, "copy to device: {}", cudaGetErrorString(e));
}
void copy_to_host(void* dst, const void* src, size_t bytes) {
  cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost);
  OOMB_CHECK(e == cudaSuccess, "copy to host: {}", cudaGetErrorString(e));
}

size_t free_memory() {
  size_t free = 0, total = 0;
  return cudaMemGetInfo(&free, &total) == cudaSuccess ? free : 0;
}

std::string device_name() {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) return "";
  return p.name;
}

// NVIDIA's dense (no sparsity) bf16 tensor-core peaks.
double peak_bf16_flops(const std::string& name) {
  auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  if (has("H200")) return 989.4e12;
  if (has("H100") && has("PCIe")) return 756.0e12;
  if (has("H100") && has("NVL")) return 835.0e12;
  if (has("H100")) return 989.4e12;  // SXM
  if (has("A100")) return 312.0e12;
  return 0.0;
}

}  // namespace oomb::cuda

