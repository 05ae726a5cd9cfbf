// Comm over MPI (Open MPI from Debian): the processes `mpirun -np P` (or Slurm's srun through the
// MPI library) started. Collectives are MPI's non-blocking ones, tested until done or the timeout.
#pragma once
#include <memory>

#include "dist/comm.h"

namespace oomb {

// Whether this build has MPI, and whether this process was started by an MPI launcher (mpirun,
// srun): its environment says so.
bool mpi_built();
bool launched_by_mpi();
// Initialises MPI once (threads: funneled) and returns MPI_COMM_WORLD as a Comm whose calls give
// up after timeout_s seconds. Finalised at exit.
std::unique_ptr<Comm> mpi_world(double timeout_s);
// Ends the whole job at once (every rank), after this rank has printed its error.
[[noreturn]] void mpi_abort(int code);
bool mpi_active();  // MPI was initialised and not yet finalised
int mpi_rank();     // this process's rank in MPI_COMM_WORLD (0 without MPI)

}  // namespace oomb
