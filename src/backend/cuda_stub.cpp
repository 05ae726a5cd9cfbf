// Built when nvcc is absent: the CUDA backend does not exist in this build.
#include "backend/backend.h"

namespace oomb {
std::unique_ptr<Backend> make_cuda_backend(std::string* why) {
  if (why) *why = "this build has no CUDA backend (nvcc was not found at configure time)";
  return nullptr;
}
}  // namespace oomb
