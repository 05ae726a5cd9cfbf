// NCCL between the GPUs of a run (issue: many GPUs). The ranks mpirun started, one GPU each, form
// an NCCL communicator: rank 0's unique id goes out over the MPI group, and the tensors that cross
// ranks (Ulysses' all-to-alls, the gradient sums and shard gathers) go GPU to GPU without host
// staging. Every call takes device memory and runs on the backend's compute stream, after the
// work already issued there; the host then waits for it, polling NCCL's error state, and after the
// group's timeout aborts the communicator and throws naming the call, its bytes and the rank (as
// the MPI group does). NCCL itself (libnccl.so.2) is loaded on first use, so a build with this
// path runs on machines without it until NCCL is asked for.
#pragma once
#include <memory>
#include <string>

#include "backend/backend.h"
#include "dist/comm.h"

namespace oomb {

// Whether this build has the NCCL path (a CUDA build that found nccl.h).
bool nccl_built();
// Why NCCL cannot serve `ranks` ranks on this machine with `local_ranks` of them here ("" when it
// can): the build, the library, or fewer visible GPUs than local ranks (NCCL needs a GPU per rank).
std::string nccl_unavailable(int local_ranks);
// boot's ranks as an NCCL group over be's GPU (a CUDA backend); collective over boot.
std::unique_ptr<Comm> nccl_comm(Comm& boot, Backend& be, double timeout_s);

}  // namespace oomb
