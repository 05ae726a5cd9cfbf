// Builds without CUDA or without nccl.h: no NCCL path; the ranks talk over MPI.
#include "core/error.h"
#include "dist/nccl_comm.h"

namespace oomb {

bool nccl_built() { return false; }
std::string nccl_unavailable(int) { return "this build has no NCCL (it needs CUDA and nccl.h)"; }
std::unique_ptr<Comm> nccl_comm(Comm&, Backend&, double) { fail("nccl: {}", nccl_unavailable(0)); }

}  // namespace oomb
