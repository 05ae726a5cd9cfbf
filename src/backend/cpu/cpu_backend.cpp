// The CPU backend (cpu_backend.h).
#include "backend/cpu/cpu_backend.h"

namespace oomb {

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace oomb
