// Without MPI (the build found no MPI library): one rank only.
#include <cstdlib>

#include "core/error.h"
#include "dist/mpi_comm.h"

namespace oomb {

bool mpi_built() { return false; }
bool mpi_active() { return false; }
int mpi_rank() { return 0; }
std::unique_ptr<Comm> mpi_world(double) {
  fail("this oomb was built without MPI (install libopenmpi-dev and rebuild): --sp, --dp and mpirun need it");
}
void mpi_abort(int code) { std::_Exit(code); }

}  // namespace oomb
