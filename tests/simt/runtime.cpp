// The CUDA runtime on simt: one device whose memory is host memory, every call complete on return.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>

namespace {

constexpr size_t kTotal = size_t(80) << 30;  // the device's memory as cudaMemGetInfo states it (an H100's)
thread_local cudaError_t g_last = cudaSuccess;
std::mutex g_mu;
std::unordered_map<void*, size_t> g_device;  // device allocations: bytes
size_t g_used = 0;

cudaError_t fail(cudaError_t e, const std::string& why) {
  std::fprintf(stderr, "simt: %s\n", why.c_str());
  g_last = e;
  return e;
}

void* aligned(size_t bytes) {
  void* p = nullptr;
  return posix_memalign(&p, 256, bytes > 0 ? bytes : 1) == 0 ? p : nullptr;
}

}  // namespace

cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  return device == 0 ? cudaSuccess : fail(cudaErrorInvalidDevice, "cudaSetDevice: simt has one device");
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  if (device != 0) return fail(cudaErrorInvalidDevice, "cudaGetDeviceProperties: simt has one device");
  *p = {};
  std::snprintf(p->name, sizeof p->name, "simt (CUDA kernels on the CPU)");
  p->totalGlobalMem = kTotal;
  p->sharedMemPerBlockOptin = 227 << 10;
  p->multiProcessorCount = 1;
  p->major = 9;
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  std::lock_guard<std::mutex> l(g_mu);
  *total = kTotal;
  *free = kTotal > g_used ? kTotal - g_used : 0;
  return cudaSuccess;
}
cudaError_t cudaGetLastError() {
  const cudaError_t e = g_last;
  g_last = cudaSuccess;
  return e;
}
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
  }
  return "unknown error";
}

cudaError_t cudaMalloc(void** p, size_t bytes) {
  *p = aligned(bytes);
  if (!*p) return fail(cudaErrorMemoryAllocation, "cudaMalloc: out of host memory");
  std::lock_guard<std::mutex> l(g_mu);
  g_device[*p] = bytes;
  g_used += bytes;
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  {
    std::lock_guard<std::mutex> l(g_mu);
    const auto it = g_device.find(p);
    if (it == g_device.end()) return fail(cudaErrorInvalidValue, "cudaFree of a pointer cudaMalloc did not return");
    g_used -= it->second;
    g_device.erase(it);
  }
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned) {
  *p = aligned(bytes);
  return *p ? cudaSuccess : fail(cudaErrorMemoryAllocation, "cudaHostAlloc: out of host memory");
}
cudaError_t cudaFreeHost(void* p) {
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  if (bytes > 0) std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t) {
  return cudaMemcpy(dst, src, bytes, kind);
}
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind, cudaStream_t) {
  if (width > dpitch || width > spitch)
    return fail(cudaErrorInvalidValue, "cudaMemcpy2DAsync: a row wider than its pitch");
  for (size_t r = 0; r < height; ++r)
    std::memmove(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch, width);
  return cudaSuccess;
}
cudaError_t cudaMemset(void* p, int value, size_t bytes) {
  std::memset(p, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t) { return cudaMemset(p, value, bytes); }

// Streams and events: handles only, every operation having completed in order already.
cudaError_t cudaStreamCreate(cudaStream_t* s) {
  *s = reinterpret_cast<cudaStream_t>(new char(0));
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  delete reinterpret_cast<char*>(s);
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) { return cudaSuccess; }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) {
  *e = reinterpret_cast<cudaEvent_t>(new char(0));
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete reinterpret_cast<char*>(e);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }

cudaError_t simt_func_set_max_shared(const void* kernel, int bytes) {
  const std::string why = bytes < 0 ? "a negative size" : simt::set_max_shared(kernel, size_t(bytes));
  return why.empty() ? cudaSuccess : fail(cudaErrorInvalidValue, "cudaFuncSetAttribute: " + why);
}

void simt_launch(const void* kernel, dim3 grid, dim3 block, size_t shared, simt::Body body, void* arg) {
  const std::string why =
      simt::launch(kernel, {grid.x, grid.y, grid.z}, {block.x, block.y, block.z}, shared, body, arg);
  if (!why.empty()) fail(cudaErrorInvalidConfiguration, "a kernel launch CUDA refuses: " + why);
}
