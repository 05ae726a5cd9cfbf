// cuDNN, loaded on first use, as cuBLASLt is (../cublaslt_lazy.cpp): a build links no cuDNN, a run
// that never asks for cuDNN attention never maps it, and a machine without it gets a clear error
// from cudnn_sdpa.cpp rather than a program that will not start. libcudnn.so.9 is cuDNN's small
// front library; it loads its engines itself.
#if __has_include(<cudnn_graph.h>)
#include <cudnn_graph.h>
#include "backend/cuda/lazy_library.h"

namespace {

void* library() {
  static void* handle = oomb::cuda::open_first({"libcudnn.so.9",
#ifdef OOMB_CUDA_LIB_DIR
                                                OOMB_CUDA_LIB_DIR "/libcudnn.so.9"
#endif
  });
  return handle;
}

}  // namespace

#define OOMB_LAZY(name, params, args) \
  OOMB_LAZY_SYMBOL(library, cudnnStatus_t, CUDNNWINAPI, CUDNN_STATUS_NOT_INITIALIZED, name, params, args)

OOMB_LAZY_SYMBOL(library, size_t, CUDNNWINAPI, 0, cudnnGetVersion, (void), ())  // 0: no library
OOMB_LAZY_SYMBOL(library, const char*, CUDNNWINAPI, "cuDNN not loaded", cudnnGetErrorString, (cudnnStatus_t s), (s))
extern "C" void CUDNNWINAPI cudnnGetLastErrorString(char* message, size_t max_size) {
  static auto* const f = oomb::cuda::resolve(library(), &cudnnGetLastErrorString, "cudnnGetLastErrorString");
  if (f) f(message, max_size);
  else if (max_size > 0) message[0] = '\0';
}
OOMB_LAZY(cudnnCreate, (cudnnHandle_t * h), (h))
OOMB_LAZY(cudnnDestroy, (cudnnHandle_t h), (h))
OOMB_LAZY(cudnnSetStream, (cudnnHandle_t h, cudaStream_t s), (h, s))
OOMB_LAZY(cudnnBackendCreateDescriptor, (cudnnBackendDescriptorType_t t, cudnnBackendDescriptor_t* d), (t, d))
OOMB_LAZY(cudnnBackendDestroyDescriptor, (cudnnBackendDescriptor_t d), (d))
OOMB_LAZY(cudnnBackendFinalize, (cudnnBackendDescriptor_t d), (d))
OOMB_LAZY(cudnnBackendSetAttribute,
          (cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, int64_t n,
           const void* v),
          (d, a, t, n, v))
OOMB_LAZY(cudnnBackendGetAttribute,
          (cudnnBackendDescriptor_t const d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t,
           int64_t requested, int64_t* count, void* v),
          (d, a, t, requested, count, v))
OOMB_LAZY(cudnnBackendExecute, (cudnnHandle_t h, cudnnBackendDescriptor_t plan, cudnnBackendDescriptor_t pack),
          (h, plan, pack))

// whether libcudnn loaded (cudnn_sdpa.cpp names it in its error)
bool oomb_cudnn_loaded() { return library() != nullptr; }
#endif
