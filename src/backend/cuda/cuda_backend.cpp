// The CUDA backend's entry point. The op set (cuBLASLt GEMMs, paged attention kernels) is the
// CUDA-backend issue's work; until it lands, this says so instead of returning a partial backend.
#include "backend/backend.h"
#include "backend/cuda/cuda_device.h"

namespace oomb {
std::unique_ptr<Backend> make_cuda_backend(std::string* why) {
  if (!cuda::device_available(why)) return nullptr;
  cuda::install_device_allocator();
  if (why) *why = "the CUDA op set is not implemented yet (device memory and transfers are)";
  return nullptr;
}
}  // namespace oomb
