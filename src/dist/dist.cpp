#include "dist/dist.h"

#include <cstdlib>
#include <cstring>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "dist/mpi_comm.h"
#include "dist/nccl_comm.h"

namespace oomb {

void check_dist_options(const DistOptions& o) {
  OOMB_CHECK(o.sp >= 1, "--sp: must be at least 1, got {}", o.sp);
  OOMB_CHECK(o.head_chunks >= 1, "--sp-head-chunks: must be at least 1, got {}", o.head_chunks);
  OOMB_CHECK(o.dp >= 1, "--dp: must be at least 1, got {}", o.dp);
  OOMB_CHECK(o.zero >= 0 && o.zero <= 3, "--zero: {} is not one of 0, 1, 2, 3", o.zero);
  OOMB_CHECK(o.timeout_s > 0, "--dist-timeout: must be positive, got {}", o.timeout_s);
  OOMB_CHECK(o.comm == "auto" || o.comm == "mpi" || o.comm == "nccl", "--comm: '{}' is not one of auto, mpi, nccl",
             o.comm);
}

static int env_int(std::initializer_list<const char*> keys, int otherwise) {
  for (const char* k : keys)
    if (const char* v = std::getenv(k)) return std::atoi(v);
  return otherwise;
}
int local_rank() { return env_int({"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}, 0); }
static int g_host_ranks = 0;  // the ranks on this host as the launched ranks counted them (share_cores); 0: not yet
int local_ranks() {
  return g_host_ranks > 0 ? g_host_ranks
                          : env_int({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"}, 1);
}

// Open MPI's, PMIx's and Slurm's (PMI) markers of a rank a launcher started; one definition for
// builds with and without MPI.
bool launched_by_mpi() {
  for (const char* k : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
    if (std::getenv(k)) return true;
  return false;
}

Dist::Dist() : world_(make_single_comm()) { make_groups(); }

static std::unique_ptr<Comm> world_for(const DistOptions& o) {
  check_dist_options(o);
  if (launched_by_mpi()) return mpi_world(o.timeout_s);
  OOMB_CHECK(o.sp * o.dp == 1, "--sp {} --dp {}: {} ranks, but this process was not started by mpirun (run "
             "`mpirun -np {} oomb train ...`)", o.sp, o.dp, o.sp * o.dp, o.sp * o.dp);
  return make_single_comm();
}

Dist::Dist(const DistOptions& o) : Dist(o, world_for(o)) {
  if (launched_by_mpi()) {
    threads_ = share_cores(*world_);
    g_host_ranks = threads_.local_ranks;
  }
}

Dist::Dist(const DistOptions& o, std::unique_ptr<Comm> world) : o_(o), world_(std::move(world)) {
  check_dist_options(o);
  OOMB_CHECK(int64_t(world_->size()) == o.sp * o.dp, "--sp {} x --dp {} = {} ranks, but mpirun started {} (-np must "
             "equal sp x dp)", o.sp, o.dp, o.sp * o.dp, world_->size());
  make_groups();
}

Dist::~Dist() {  // the NCCL groups before the MPI groups they were started over
  dev_sp_.reset();
  dev_world_.reset();
}

void Dist::attach(Backend& be) {
  if (size() == 1 || o_.comm == "mpi" || (o_.comm == "auto" && be.name() != "cuda")) return;
  std::string why = be.name() != "cuda" ? fmt::format("the {} backend is not a GPU's (NCCL needs --device cuda)",
                                                      be.name())
                                        : nccl_unavailable(local_ranks());
  double unable = why.empty() ? 0.0 : 1.0;
  world_->all_reduce_max(&unable, 1);  // every rank decides the same
  if (unable > 0) {
    if (o_.comm == "auto") return;
    fail("--comm nccl: {}", why.empty() ? "another rank cannot use NCCL (it names why)" : why);
  }
  use_device_comm(nccl_comm(*world_, be, o_.timeout_s));
}

void Dist::use_device_comm(std::unique_ptr<Comm> world) {
  OOMB_CHECK(world->on_device() && world->size() == size() && world->rank() == rank(),
             "dist: a device group must hold this run's ranks in order");
  dev_world_ = std::move(world);
  dev_sp_ = dev_world_->split(dp_rank(), sp_rank());
}

void Dist::make_groups() {
  sp_ = world_->split(dp_rank(), sp_rank());
  dp_ = world_->split(sp_rank(), dp_rank());
}

void Dist::check_same_flags(const std::string& text) {
  uint64_t n = text.size();
  world_->broadcast(&n, sizeof n, 0);
  std::string root = rank() == 0 ? text : std::string(n, '\0');
  world_->broadcast(root.data(), n, 0);
  double differs = root != text ? 1.0 : 0.0;
  world_->all_reduce_max(&differs, 1);
  if (differs == 0) return;
  if (root == text)
    fail("the ranks run with different flags (another rank names the difference); every rank must get the same "
         "command line");
  std::istringstream a(root), b(text);
  std::string la, lb;
  while (true) {
    const bool ga = bool(std::getline(a, la)), gb = bool(std::getline(b, lb));
    if (!ga && !gb) break;
    if (!ga) la = "(nothing)";
    if (!gb) lb = "(nothing)";
    if (la != lb) break;
  }
  fail("rank {} runs with other flags than rank 0: rank 0 has `{}`, rank {} has `{}`", rank(), la, rank(), lb);
}

}  // namespace oomb
