#include "cli/dist_flags.h"

#include "cli/commands.h"

namespace oomb::cli {

void add_dist_flags(CLI::App* c, DistOptions& o, bool with_timeout) {
  c->add_option("--sp", o.sp, "Sequence parallelism (Ulysses): ranks sharing each sequence, each holding 1/sp of "
                "every chunk's tokens and of the heads in attention (its K/V pages: kv heads / sp); run under "
                "`mpirun -np sp*dp`")->check(count())->capture_default_str();
  c->add_option("--sp-head-chunks", o.head_chunks, "With --sp: attention takes each rank's heads in this many "
                "groups of whole kv heads (it must divide kv heads / sp), one group's all-to-all, attention and "
                "all-to-all back at a time, so attention's buffers hold heads / (sp x K) heads (Untied Ulysses); "
                "the same bits as 1, more all-to-alls in the backward")->check(count())->capture_default_str();
  c->add_option("--dp", o.dp, "Data parallelism: sequences trained side by side, gradients summed")
      ->check(count())->capture_default_str();
  c->add_option("--zero", o.zero, "0: every rank holds all optimizer state; 1: AdamW's moments sharded over the "
                "ranks; 2: gradients reduce-scattered too; 3: master weights, gradients and moments sharded, each layer "
                "gathered just in time into device slots (with 2 ranks or more: needs --device sim or cuda; the shards "
                "pinned with --offload params, else on the device; with one rank each is the whole). Checkpoints hold the same files whatever --zero")
      ->check(CLI::IsMember({0, 1, 2, 3}))->capture_default_str();
  c->add_option("--comm", o.comm, "What tensors cross ranks over: nccl (GPU to GPU; needs --device cuda, NCCL, a GPU "
                "per rank), mpi (through host memory), or auto (nccl where it can, else mpi)")
      ->check(CLI::IsMember({"auto", "mpi", "nccl"}))->capture_default_str();
  if (with_timeout)
    c->add_option("--dist-timeout", o.timeout_s, "Seconds a collective call waits for the other ranks before the "
                  "run stops with an error naming the call")->check(positive())->capture_default_str();
}

void check_comm_device(const DistOptions& o, const std::string& device) {
  OOMB_CHECK(o.comm != "nccl" || device == "cuda", "--comm nccl: needs --device cuda (NCCL moves GPU memory), got "
             "--device {}; give --comm mpi or auto", device);
}

void set_dist(const DistOptions& o, int64_t rank, ChunkPlan& plan) {
  check_dist_options(o);
  plan.sp = o.sp;
  plan.head_chunks = o.head_chunks;
  plan.ranks = o.sp * o.dp;
  plan.rank = rank;
  plan.zero = o.zero;
  plan.device_comm = o.comm == "nccl";  // a run decides auto once it sees its GPUs (Dist::attach)
}

}  // namespace oomb::cli
