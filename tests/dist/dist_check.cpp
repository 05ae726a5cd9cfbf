// Run under `mpirun -np P` by the test_dist_* suites (and, built against simt as simt_dist_check, on
// the CUDA backend's code by test_dist_simt): one distributed run (--sp, --dp, --zero, chunking,
// --doc-mask, offload) against the single-rank run of the same windows, which rank 0 also runs.
// Prints one line per figure ("name value"); exits 1 when a figure exceeds its bound, 0 otherwise.
//   gradient check  the gradients of one step, summed over the ranks, against the single rank's
//                   (1e-6 per tensor, or twice the single rank's own fp32 noise where larger:
//                   its runs in one chunk and in half-size chunks against its run in the chunks)
//   --sweep layer   the same step in the chunk order on the same ranks: the same bits (loss and
//                   every gradient), and the single rank's run in the layer order as above
//   --sp-head-chunks K > 1: the same step and training with K = 1 on the same ranks: the same bits
//                   (loss, every gradient, every step's loss, the final weights), and this rank's
//                   peaks at K = 1 minus those at K equal to the plans' difference, per (tier, tag)
//   training check  --steps steps of the trainer (AdamW): every loss and the final weights
//   memory          this rank's peak per (tier, tag) against its plan; kv and kv_grad against the
//                   single rank's peaks / sp; the optimizer's (--zero 1..3), and the masters' and
//                   gradients' in pinned memory (--zero 3), against the single rank's / ranks
// --zero 3: the gradients and weights are this rank's shards, gathered for the comparisons.
// --precision bf16: the single rank runs bf16 too; rank 0 also prints the fp32 single rank's
// gradients against the run's (bf16_vs_fp32_grad_rel_err, a control test_dist bounds from below).
// The first step's loss and gradients keep fp32's bounds (1e-6) unless --bf16-order-noise: then
// they may differ by twice bf16's own reduction-order noise where larger (the single rank against
// itself in one chunk and in half-size chunks; the CPU's BLAS sums a rank's t rows in another order
// than the single rank's T, and bf16 rounds some of those last-place differences up to its own,
// which the layers after carry on). The later steps' losses always may (the same single-rank
// runs, at most 1e-3), since they read bf16 images that such sums can round the other way; the
// weights keep 1e-4 unless --bf16-order-noise (twice the same runs' weights' difference).
// Faults for test_dist: --skip-reduce (no gradient sum, nor --zero 3's reduce-scatter: the check
// must fail), --die-rank r (rank r exits mid-step), --stall-rank r (rank r sleeps past --dist-timeout),
// --layer-fault tied-head (the layer order adds a tied head's gradient in its loss pass: the bits
// differ from the chunk order's), --layer-fault reduce-once (--zero 3's layer order reduces a
// layer's gradients once, summed over its chunks, not chunk by chunk: the same values, other bits),
// --group-fault (the head groups' exchange back puts group j's rows in group K - 1 - j's columns:
// the bits differ from K = 1's). --tie: the embedding tied to the lm_head. --masked: window w's
// first (w % 3) quarters of targets ignored (a prompt's), so that windows and ranks hold unequal
// counts and the trainer's loss, the mean over every target of a step, weighs them by those.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>
#include <iostream>
#include <sstream>
#include <thread>
#include <unistd.h>

#include "dist/dist.h"
#include "dist/grad_sync.h"
#include "dist/mpi_comm.h"
#include "dist/ulysses.h"
#include "model/bf16_weights.h"
#include "model/init.h"
#include "model/param_shards.h"
#include "model_fixture.h"
#include "test_util.h"
#include "train/trainer.h"

using namespace oomb;

namespace {
struct Args {
  DistOptions dist;
  int64_t seq = 256, chunk = 64, page = 16, steps = 3, accum = 1, kv_heads = 2, heads = 4;
  std::string arch = "llama", device = "cpu", offload, sweep = "chunk", layer_fault, precision = "fp32";
  bool doc_mask = false, skip_reduce = false, tie = false, sim_device_comm = false, group_fault = false;
  bool masked = false;
  bool keep_attention = false;  // --keep-attention: every layer's attention output kept for the backward
  bool bf16_order_noise = false;  // --bf16-order-noise: the first step's bf16 bounds from bf16's own noise too
  int die_rank = -1, stall_rank = -1;
};

// Windows of pseudo-random ids with an EOS (id 0) about every 29 tokens; window w, token i.
class Windows final : public TokenSource {
 public:
  Windows(int64_t vocab, bool masked) : vocab_(vocab), masked_(masked) {}
  void read(int64_t w, int64_t N, int64_t t0, int64_t n, int32_t* ids, int32_t* tg) override {
    for (int64_t i = 0; i < n; ++i) {
      ids[i] = id(w, t0 + i);
      tg[i] = t0 + i + 1 < N + 1 && !(masked_ && t0 + i < (w % 3) * N / 4) ? id(w, t0 + i + 1) : -1;
    }
  }
  std::string describe() const override { return "dist_check windows"; }

 private:
  int32_t id(int64_t w, int64_t i) const {
    uint64_t h = uint64_t(w) * 0x9E3779B97F4A7C15ull + uint64_t(i) * 0xBF58476D1CE4E5B9ull + 12345;
    h ^= h >> 31, h *= 0x94D049BB133111EBull, h ^= h >> 29;
    return h % 29 == 0 ? 0 : int32_t(1 + h % uint64_t(vocab_ - 1));
  }
  int64_t vocab_;
  bool masked_;
};

// head_chunks: --sp-head-chunks (0: the flag's; a single rank takes 1)
ChunkPlan plan_of(const Args& a, int64_t sp, int64_t ranks, int64_t rank, int zero, bool device_comm = false,
                  int64_t head_chunks = 0) {
  ChunkPlan p;
  p.head_chunks = sp == 1 ? 1 : head_chunks > 0 ? head_chunks : a.dist.head_chunks;
  p.chunk = a.chunk;
  p.page_size = a.page;
  p.doc_sep = a.doc_mask ? 0 : -1;
  p.offload_kv = a.offload.find("kv") != std::string::npos;
  p.offload_params = a.offload.find("params") != std::string::npos;
  p.offload_attention = a.offload.find("attention") != std::string::npos;
  p.sp = sp, p.ranks = ranks, p.rank = rank, p.zero = zero;
  p.sweep = a.sweep == "layer" ? SweepOrder::Layer : SweepOrder::Chunk;
  p.precision = a.precision == "bf16" ? DType::BF16 : DType::F32;
  p.kv_dtype = p.precision;  // (as oomb train's --kv-dtype auto: bf16 pages under bf16)
  p.device_comm = device_comm;
  p.keep_attention = a.keep_attention ? a.seq : 0;
  return p;
}

// A group's calls presented as taking device memory (Comm::on_device): with --device sim, whose
// device memory the host reads, MPI's group takes NCCL's code path (device staging, strided packs,
// the plan's device bytes) without NCCL. --comm sim-device. As NCCL's calls (nccl_comm.cpp), each
// comes after the work issued on the compute stream so far, and returns with its data in place: the
// host waits for that stream's work first (the CUDA backend's kernels in simt_dist_check run only
// then; the other streams' work is not waited for, as NCCL does not, except under sync()'s other order).
class OnDevice final : public Comm {
 public:
  OnDevice(std::unique_ptr<Comm> c, Backend& be) : c_(std::move(c)), be_(be), issued_(be.new_event()) {
    const char* o = std::getenv("OOMB_SIMT_ORDER");
    every_stream_ = o && std::strcmp(o, "reverse") == 0;
  }
  int rank() const override { return c_->rank(); }
  int size() const override { return c_->size(); }
  bool on_device() const override { return true; }
  std::string name() const override { return c_->name() + " (as on device)"; }
  void all_to_all(const void* s, void* r, size_t b) override { sync(), c_->all_to_all(s, r, b); }
  void all_gather(const void* s, void* r, size_t b) override { sync(), c_->all_gather(s, r, b); }
  void all_reduce_sum(float* d, size_t n) override { sync(), c_->all_reduce_sum(d, n); }
  void all_reduce_sum(double* d, size_t n) override { sync(), c_->all_reduce_sum(d, n); }
  void all_reduce_max(double* d, size_t n) override { sync(), c_->all_reduce_max(d, n); }
  void reduce_scatter_sum(const float* s, float* r, size_t n) override {
    sync(), c_->reduce_scatter_sum(s, r, n);
  }
  void broadcast(void* d, size_t b, int root) override { sync(), c_->broadcast(d, b, root); }
  void barrier() override { sync(), c_->barrier(); }
  std::unique_ptr<Comm> split(int color, int key) override {
    return std::make_unique<OnDevice>(c_->split(color, key), be_);
  }

 private:
  // (OOMB_SIMT_ORDER=reverse: every stream's work first, the other order for work on the other
  // streams that simt otherwise runs after the call, as late as CUDA allows)
  void sync() {
    if (every_stream_) return be_.synchronize();
    be_.record(*issued_, Stream::Compute);
    be_.synchronize(*issued_);
  }
  std::unique_ptr<Comm> c_;
  Backend& be_;
  std::unique_ptr<Event> issued_;
  bool every_stream_ = false;
};

// The tensors of a run over --comm: attach's choice, or MPI's group as on device (sim-device).
void attach(Dist& d, Backend& be, const Args& a) {
  if (a.sim_device_comm) return d.use_device_comm(std::make_unique<OnDevice>(d.world().split(0, d.rank()), be));
  d.attach(be);
}

// cpu, sim, or cuda (each rank on GPU local rank mod the GPUs visible; in simt's build, simt_dist_check,
// the CUDA backend's own code on the CPU)
std::unique_ptr<Backend> backend(const Args& a) {
#ifdef OOMB_SIMT
  if (a.device == "cuda") {
    std::string why;
    auto be = make_cuda_backend(&why);  // (simt's: make_simt_cuda_backend)
    OOMB_CHECK(be != nullptr, "--device cuda: {}", why);
    return be;
  }
#endif
  return make_backend(a.device, 0, local_rank());
}

void init(Model& m, uint64_t seed) {
  Params host(m.config(), Tier::Host, Tag::IO);
  init_params(host, seed, 0.15f);
  m.upload_params(host);
}

std::vector<float> download(Model& m, const Tensor& flat) {
  std::vector<float> v(size_t(flat.numel()));
  m.backend().copy(v.data(), Tier::Host, flat.data, flat.tier, v.size() * 4);
  return v;
}

// The whole flat layout: the buffer itself, or (--zero 3) every rank's shards of it gathered.
std::vector<float> whole(Model& m, const Tensor& flat, Comm& world) {
  if (!m.sharded()) return download(m, flat);
  std::vector<float> v(size_t(param_count(m.config())));
  ParamShards::gather(m.config(), world, flat.f(), v.data());
  return v;
}

// The worst relative error over the tensors of a layout.
double worst_by_tensor(const std::vector<float>& got, const std::vector<float>& want, const Params& layout,
                       std::string* where) {
  double worst = 0;
  for (const ParamSpec& s : layout.specs()) {
    const double e = testing::rel_error(got.data() + s.offset, want.data() + s.offset, size_t(s.numel()));
    if (e > worst) worst = e, *where = s.name;
  }
  return worst;
}

struct Peaks {
  std::array<std::array<int64_t, kNumTags>, kNumTiers> b{};
};
Peaks peaks() {
  Peaks p;
  for (Tier t : kTiers)
    for (int i = 0; i < kNumTags; ++i) p.b[size_t(t)][size_t(i)] = Accountant::global().get(t, Tag(i)).peak;
  return p;
}
}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"dist_check"};
  app.add_option("--sp", a.dist.sp);
  app.add_option("--sp-head-chunks", a.dist.head_chunks);
  app.add_flag("--group-fault", a.group_fault);
  app.add_option("--dp", a.dist.dp);
  app.add_option("--zero", a.dist.zero);
  app.add_option("--dist-timeout", a.dist.timeout_s);
  app.add_option("--comm", a.dist.comm);
  app.add_option("--seq-len", a.seq);
  app.add_option("--chunk-size", a.chunk);
  app.add_option("--page-size", a.page);
  app.add_option("--steps", a.steps);
  app.add_option("--grad-accum", a.accum);
  app.add_option("--kv-heads", a.kv_heads);
  app.add_option("--heads", a.heads);
  app.add_option("--arch", a.arch);
  app.add_option("--device", a.device);
  app.add_option("--offload", a.offload);
  app.add_flag("--doc-mask", a.doc_mask);
  app.add_flag("--keep-attention", a.keep_attention);
  app.add_flag("--bf16-order-noise", a.bf16_order_noise);
  app.add_option("--sweep", a.sweep)->check(CLI::IsMember({"chunk", "layer"}));
  app.add_flag("--tie", a.tie);
  app.add_flag("--masked", a.masked);
  app.add_option("--precision", a.precision)->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_option("--layer-fault", a.layer_fault);
  app.add_flag("--skip-reduce", a.skip_reduce);
  app.add_option("--die-rank", a.die_rank);
  app.add_option("--stall-rank", a.stall_rank);
  CLI11_PARSE(app, argc, argv);
  if (a.dist.comm == "sim-device") {
    a.sim_device_comm = true;
    a.dist.comm = "mpi";
#ifdef OOMB_SIMT
    const bool host_reads_device = a.device == "sim" || a.device == "cuda";  // simt's device memory is the host's
#else
    const bool host_reads_device = a.device == "sim";
#endif
    if (!host_reads_device) {
      std::cerr << "dist_check: --comm sim-device needs --device sim (or cuda in simt_dist_check)" << std::endl;
      return 2;
    }
  }
  try {
    Dist dist(a.dist);
    const int R = dist.size(), r = dist.rank();
    const bool z3 = a.dist.zero == 3;
    if (z3 && a.skip_reduce) ParamStore::skip_reduce_for_test(true);
    const int64_t dp = a.dist.dp, N = a.seq;
    // (--arch granite: with its four multipliers off 1, tiny_granite_json's; gemma3_text: a sliding layer
    // and a full one, tiny_gemma3_json's)
    nlohmann::json cj = a.arch == "granite"       ? testing::tiny_granite_json(a.kv_heads)
                        : a.arch == "gemma3_text" ? testing::tiny_gemma3_json(a.kv_heads)
                                                  : testing::tiny_config_json(a.arch, a.kv_heads);
    cj["tie_word_embeddings"] = a.tie;
    cj["num_attention_heads"] = a.heads;
    const ModelConfig cfg = parse_config(cj, "dist_check");
    if (!a.layer_fault.empty()) Model::layer_sweep_fault_for_test(a.layer_fault.c_str());
    if (a.group_fault) SeqParallel::group_fault_for_test(true);
    const int64_t K = a.dist.head_chunks;
    Windows data(cfg.vocab, a.masked);
    const uint64_t seed = 7;
    bool ok = true;
    auto report = [&](const std::string& name, double v, double bound) {
      if (r == 0) std::cout << fmt::format("{} {:.3e} (bound {:.1e})", name, v, bound) << std::endl;
      ok = ok && v <= bound;
    };

    // 1. One step's gradients, summed over the ranks, against the single rank's.
    // (head_chunks: --sp-head-chunks of the run, 0: the flag's)
    auto one_step = [&](int64_t head_chunks, double& loss, std::vector<float>& g) {
      auto be = backend(a);  // each run its own backend, so that its workspace counts in its own peaks only
      Dist d(a.dist, dist.world().split(0, r));  // the same ranks, their tensors over --comm on this backend
      attach(d, *be, a);
      Model m(cfg, *be, plan_of(a, a.dist.sp, R, r, z3 ? 3 : 0, d.device_comm(), head_chunks), &d.tensor_sp(),
              &d.world());
      init(m, seed);
      m.enable_grads();
      loss = 0;
      for (int64_t i = 0; i < a.accum; ++i) {
        const int64_t w = i * dp + dist.dp_rank();
        if (r == a.stall_rank) std::this_thread::sleep_for(std::chrono::duration<double>(a.dist.timeout_s * 3));
        const LossStats ls = m.forward_backward(
            [&](int64_t t0, int64_t n, int32_t* ids, int32_t* tg) { data.read(w, N, t0, n, ids, tg); }, N,
            1.0f / float(a.accum * dp));
        if (r == a.die_rank) _exit(9);
        loss += ls.loss_sum / double(ls.targets);
      }
      dist.dp().all_reduce_sum(&loss, 1);
      loss /= double(a.accum * dp);
      const Tier gt = m.grads().flat().tier;
      GradSync sync(d.group_for(gt), *be, m.grads().flat().numel(), 0, gt);
      if (!a.skip_reduce && !z3) sync.reduce(m.grads().flat());  // (--zero 3: the store reduced them)
      g = whole(m, m.grads().flat(), d.world());
    };
    std::vector<float> g_dist, g_ref;
    double loss_dist = 0, loss_ref = 0;
    one_step(0, loss_dist, g_dist);
    if (a.sweep == "layer") {  // the same ranks and windows in the chunk order: the same bits
      auto be = backend(a);
      Dist d(a.dist, dist.world().split(0, r));
      attach(d, *be, a);
      ChunkPlan chunk = plan_of(a, a.dist.sp, R, r, z3 ? 3 : 0, d.device_comm());
      chunk.sweep = SweepOrder::Chunk;
      Model m(cfg, *be, chunk, &d.tensor_sp(), &d.world());
      init(m, seed);
      m.enable_grads();
      double loss = 0;
      for (int64_t i = 0; i < a.accum; ++i) {
        const int64_t w = i * dp + dist.dp_rank();
        const LossStats ls = m.forward_backward(
            [&](int64_t t0, int64_t n, int32_t* ids, int32_t* tg) { data.read(w, N, t0, n, ids, tg); }, N,
            1.0f / float(a.accum * dp));
        loss += ls.loss_sum / double(ls.targets);
      }
      dist.dp().all_reduce_sum(&loss, 1);
      loss /= double(a.accum * dp);
      GradSync sync(d.group_for(m.grads().flat().tier), *be, m.grads().flat().numel(), 0, m.grads().flat().tier);
      if (!a.skip_reduce && !z3) sync.reduce(m.grads().flat());
      const std::vector<float> g_chunk = whole(m, m.grads().flat(), d.world());
      double differ = loss == loss_dist ? 0 : 1;
      for (size_t i = 0; i < g_chunk.size(); ++i) differ += std::memcmp(&g_chunk[i], &g_dist[i], 4) != 0;
      dist.world().all_reduce_sum(&differ, 1);
      report("layer_vs_chunk_order_differing", differ, 0);
    }
    if (K > 1) {  // the same ranks and windows with one head group: the same bits
      double loss = 0;
      std::vector<float> g_one;
      one_step(1, loss, g_one);
      double differ = loss == loss_dist ? 0 : 1;
      for (size_t i = 0; i < g_one.size(); ++i) differ += std::memcmp(&g_one[i], &g_dist[i], 4) != 0;
      dist.world().all_reduce_sum(&differ, 1);
      report("head_chunks_vs_one_differing", differ, 0);
      if (r == 0) std::cout << fmt::format("(loss and {} gradients, --sp-head-chunks {} against 1)", g_one.size(), K)
                            << std::endl;
    }
    // The single rank's loss and gradients of the same windows, with the run's precision or fp32.
    auto single_rank = [&](const Args& ra, double* loss, std::vector<float>* g) {
      auto be_ref = backend(ra);  // (a backend of its own: its workspace must not count in this rank's peaks below)
      Model ref(cfg, *be_ref, plan_of(ra, 1, 1, 0, 0));
      init(ref, seed);
      ref.enable_grads();
      for (int64_t w = 0; w < ra.accum * dp; ++w) {
        const LossStats ls = ref.forward_backward(
            [&](int64_t t0, int64_t n, int32_t* ids, int32_t* tg) { data.read(w, N, t0, n, ids, tg); }, N,
            1.0f / float(ra.accum * dp));
        *loss += ls.loss_sum / double(ls.targets);
      }
      *loss /= double(ra.accum * dp);
      *g = download(ref, ref.grads().flat());
    };
    if (r == 0) {
      single_rank(a, &loss_ref, &g_ref);
      Params layout(cfg, Tier::Host, Tag::IO);
      std::string where;
      const double e = worst_by_tensor(g_dist, g_ref, layout, &where);
      // fp32's reduction-order noise, as the single rank's own: the same windows in one chunk and
      // in chunks of half the size (the same math, summed in other orders), the larger of the two.
      // The ranks' sums may differ from the single rank's by 1e-6, or by twice that noise where a
      // tensor's cancellation makes it larger (per tensor; a Qwen3 layer's k_proj reaches 1.2e-6
      // to 1.5e-6 on some builds' BLAS kernels). bf16: 1e-6 as it stands, or with
      // --bf16-order-noise bf16's own noise so measured, the loss's too.
      const bool bf16 = a.precision == "bf16";
      double bound = 1e-6, loss_bound = 1e-6;
      if ((!bf16 || a.bf16_order_noise) && a.chunk < N) {
        double noise = 0, loss_noise = 0;
        std::string noisiest, orders;
        for (const int64_t C : {N, a.chunk % 2 == 0 ? a.chunk / 2 : int64_t(0)}) {
          if (C <= 0) continue;
          Args other = a;
          other.chunk = C;
          double loss_other = 0;
          std::vector<float> g_other;
          single_rank(other, &loss_other, &g_other);
          std::string where_other;
          const double e_other = worst_by_tensor(g_other, g_ref, layout, &where_other);
          if (e_other > noise) noise = e_other, noisiest = where_other;
          loss_noise = std::max(loss_noise, std::abs(loss_other - loss_ref) / std::abs(loss_ref));
          orders += fmt::format("{}{}", orders.empty() ? "" : ", ", C);
        }
        std::cout << fmt::format("grad_noise_single_rank {:.3e} ({}: chunks of {} against chunks of {})", noise,
                                 noisiest, orders, a.chunk) << std::endl;
        bound = std::max(bound, 2 * noise);
        if (bf16) {
          std::cout << fmt::format("loss_noise_single_rank {:.3e}", loss_noise) << std::endl;
          loss_bound = std::max(loss_bound, 2 * loss_noise);
        }
      }
      report("loss_rel_err", std::abs(loss_dist - loss_ref) / std::abs(loss_ref), loss_bound);
      report("grad_rel_err", e, bound);
      std::cout << "grad_worst_tensor " << where << std::endl;
      if (a.precision == "bf16") {  // control: bf16 is not fp32 (test_dist bounds it from below)
        Args f = a;
        f.precision = "fp32";
        double loss32 = 0;
        std::vector<float> g32;
        single_rank(f, &loss32, &g32);
        std::cout << fmt::format("bf16_vs_fp32_grad_rel_err {:.3e}", worst_by_tensor(g_dist, g32, layout, &where))
                  << std::endl;
      }
    }

    // 2. The trainer: every step's loss and the final weights; this rank's memory against its plan.
    OptimConfig oc;
    oc.lr = 3e-3f;
    oc.weight_decay = 0.01f;
    Accountant::global().reset_peaks();
    std::vector<double> losses;
    std::vector<float> w_dist;
    Peaks measured;
    MemoryPlan planned;
    auto train_dist = [&](int zero, std::vector<double>* ls, std::vector<float>* w, bool measure,
                          int64_t head_chunks = 0) {
      auto be_run = backend(a);
      DistOptions o_zero = a.dist;
      o_zero.zero = zero;
      Dist d(o_zero, dist.world().split(0, r));  // the same ranks, this run's --zero
      attach(d, *be_run, a);
      const ChunkPlan p = plan_of(a, a.dist.sp, R, r, zero, d.device_comm(), head_chunks);
      Model m(cfg, *be_run, p, &d.tensor_sp(), &d.world());
      init(m, seed);
      TrainOptions o{N, a.steps, a.accum, 1000, oc, ""};
      o.dist = &d;
      std::ostringstream quiet;
      train(m, data, o, quiet, [&](const StepStats& s) { ls->push_back(s.loss); });
      *w = whole(m, m.params().flat(), d.world());
      if (!measure) return;
      measured = peaks();
      planned = plan_memory(cfg, p, N, oc.kind,
                            be_run->workspace_bytes(workspace_shape(cfg, p)), be_run->tier(),
                            be_run->pinned_workspace_bytes());
    };
    train_dist(a.dist.zero, &losses, &w_dist, true);
    double mismatches = 0;
    std::string first;
    for (Tier t : kTiers)
      for (int i = 0; i < kNumTags; ++i)
        if (Tag(i) != Tag::IO && measured.b[size_t(t)][size_t(i)] != planned.get(t, Tag(i))) {
          if (first.empty())
            first = fmt::format("rank {} {}/{}: measured {} planned {}", r, tier_name(t), tag_name(Tag(i)),
                                measured.b[size_t(t)][size_t(i)], planned.get(t, Tag(i)));
          ++mismatches;
        }
    if (!first.empty()) std::cerr << "plan mismatch: " << first << std::endl;
    dist.world().all_reduce_sum(&mismatches, 1);
    report("plan_mismatches", mismatches, 0);
    // this rank's kv, kv_grad and optimizer bytes, for rank 0 to set beside the single rank's
    const Tier dev = a.device != "cpu" ? Tier::Device : Tier::Host, kv_home = a.offload.find("kv") != std::string::npos ? Tier::Pinned : dev;
    const bool offloaded = a.offload.find("params") != std::string::npos, bf16 = a.precision == "bf16";
    const Tier opt_home = offloaded ? Tier::Pinned : dev, moments_home = host_side(opt_home);
    std::vector<double> mine = {double(measured.b[size_t(kv_home)][size_t(Tag::KV)]),
                                double(measured.b[size_t(kv_home)][size_t(Tag::KVGrad)]),
                                double(measured.b[size_t(moments_home)][size_t(Tag::Optimizer)]),
                                double(measured.b[size_t(opt_home)][size_t(Tag::Weights)]),
                                double(measured.b[size_t(opt_home)][size_t(Tag::Grads)])};
    std::vector<double> all(mine.size() * size_t(R));
    dist.world().all_gather(mine.data(), all.data(), mine.size() * 8);

    if (K > 1) {  // K = 1 on the same ranks: the same bits; its peaks minus K's = its plan minus K's
      const Peaks at_k = measured;
      const MemoryPlan plan_k = planned;
      Accountant::global().reset_peaks();
      std::vector<double> l1;
      std::vector<float> w1;
      train_dist(a.dist.zero, &l1, &w1, true, 1);
      double differ = l1.size() == losses.size() ? 0 : 1;
      for (size_t i = 0; i < l1.size() && i < losses.size(); ++i) differ += l1[i] != losses[i];
      for (size_t i = 0; i < w1.size(); ++i) differ += std::memcmp(&w1[i], &w_dist[i], 4) != 0;
      dist.world().all_reduce_sum(&differ, 1);
      report("head_chunks_vs_one_trained_differing", differ, 0);
      double off = 0;
      int64_t saved = 0, saved_planned = 0;  // this rank's bytes, every tier and tag
      for (Tier t : kTiers)
        for (int i = 0; i < kNumTags; ++i) {
          if (Tag(i) == Tag::IO) continue;
          const int64_t got = measured.b[size_t(t)][size_t(i)] - at_k.b[size_t(t)][size_t(i)],
                        want = planned.get(t, Tag(i)) - plan_k.get(t, Tag(i));
          off += got != want;
          saved += got, saved_planned += want;
          if (got != 0 && r == 0)
            std::cout << fmt::format("head_chunk_saving {}/{} {} (planned {})", tier_name(t), tag_name(Tag(i)), got,
                                     want)
                      << std::endl;
        }
      dist.world().all_reduce_sum(&off, 1);
      report("head_chunk_saving_vs_plan_mismatches", off, 0);
      if (r == 0)
        std::cout << fmt::format("head_chunk_saving_bytes {} (planned {})", saved, saved_planned) << std::endl;
      measured = at_k, planned = plan_k;
    }
    if (a.dist.zero > 0) {  // sharded AdamW updates each element as the whole update does: equal bits
      std::vector<double> l0;
      std::vector<float> w0;
      train_dist(0, &l0, &w0, false);
      double differ = 0;
      for (size_t i = 0; i < w0.size(); ++i) differ += w0[i] != w_dist[i];
      dist.world().all_reduce_sum(&differ, 1);
      report(fmt::format("zero{}_vs_zero0_weights_differing", a.dist.zero), differ, a.dist.zero == 1 ? 0 : 1e9);
      if (r == 0) std::cout << fmt::format("(of {} weights)", w0.size()) << std::endl;
    }
    if (r == 0) {
      // the single rank's AdamW steps over ra's chunks: every step's loss, the weights after them
      auto train_single = [&](const Args& ra, std::vector<double>* l, std::vector<float>* w) {
        auto be = backend(ra);
        Model m(cfg, *be, plan_of(ra, 1, 1, 0, 0));
        init(m, seed);
        std::ostringstream quiet;
        train(m, data, TrainOptions{N, a.steps, a.accum * dp, 1000, oc, ""}, quiet,
              [&](const StepStats& s) { l->push_back(s.loss); });
        *w = download(m, m.params().flat());
      };
      Accountant::global().reset_peaks();
      std::vector<double> ref_losses;
      std::vector<float> w_ref;
      train_single(a, &ref_losses, &w_ref);
      const Peaks single = peaks();
      const Params layout(cfg, Tier::Host, Tag::IO);
      auto worst_loss = [&](const std::vector<double>& l) {
        double worst = 0;
        for (size_t k = 0; k < l.size(); ++k)
          worst = std::max(worst, std::abs(l[k] - ref_losses[k]) / std::abs(ref_losses[k]));
        return worst;
      };
      std::string where;
      // Under bf16 the steps after the first read the weights' bf16 images, and the fp32 gradient
      // sums, in the ranks' order or the single rank's, may round an image the other way (e.g.
      // --dp 4 --zero 3 --sweep layer --doc-mask: 1.2e-5 on an Intel Xeon's OpenBLAS kernels, 0 on
      // an AMD EPYC's): the later losses are bounded by bf16's own noise, twice the single rank's
      // largest difference from itself in one chunk and in chunks of half the size, at most 1e-3
      // (a missing sum or a stale image moves them by far more; the first step's loss and
      // gradient keep their bounds above, the weights 1e-4, or with --bf16-order-noise, whose
      // gradients may differ by bf16's noise, twice the same runs' weights' difference).
      double loss_bound = 1e-6, weights_bound = 1e-4;
      if (a.precision == "bf16") {
        double ln = 0, wn = 0;
        std::string orders;
        for (const int64_t c : {a.seq, a.chunk / 2}) {
          if (c == a.chunk || c < 1 || a.seq % c != 0 || (c == a.chunk / 2 && c == a.seq)) continue;
          Args h = a;
          h.chunk = c;
          std::vector<double> other_losses;
          std::vector<float> w_other;
          train_single(h, &other_losses, &w_other);
          ln = std::max(ln, worst_loss(other_losses));
          wn = std::max(wn, worst_by_tensor(w_other, w_ref, layout, &where));
          orders += fmt::format("{}{}", orders.empty() ? "" : ", ", c);
        }
        if (!orders.empty()) {  // (no other chunk size divides the sequence: the bounds stay)
          std::cout << fmt::format("train_loss_noise_single_rank {:.3e} (chunks of {} against {})", ln, orders, a.chunk)
                    << std::endl;
          loss_bound = std::min(1e-3, std::max(loss_bound, 2 * ln));
          if (a.bf16_order_noise) {
            std::cout << fmt::format("weights_noise_single_rank {:.3e}", wn) << std::endl;
            weights_bound = std::max(weights_bound, 2 * wn);
          }
        }
      }
      report("train_loss_rel_err", worst_loss(losses), loss_bound);
      // AdamW divides by sqrt(v): where a gradient is near zero, its fp32 rounding (the ranks sum in
      // another order) moves the update by much more than 1e-6 of itself; measured up to 2.4e-5
      report("weights_rel_err", worst_by_tensor(w_dist, w_ref, layout, &where), weights_bound);
      const double kv1 = double(single.b[size_t(kv_home)][size_t(Tag::KV)]),
                   kg1 = double(single.b[size_t(kv_home)][size_t(Tag::KVGrad)]),
                   op1 = double(single.b[size_t(moments_home)][size_t(Tag::Optimizer)]),
                   // (bf16: less the single rank's pinned images, or its device bf16 copy when not
                   // offloaded, which --zero 3 does not keep)
                   // (offloaded: less the single rank's staging of the embedding's rows, which --zero 3
                   // gathers onto the device instead)
                   stage_w = offloaded ? double(ParamStore::embed_staging_bytes(cfg, false, a.chunk, Tag::Weights)) : 0,
                   stage_g = offloaded ? double(ParamStore::embed_staging_bytes(cfg, false, a.chunk, Tag::Grads)) : 0,
                   w1 = double(single.b[size_t(opt_home)][size_t(Tag::Weights)]) - stage_w -
                        (z3 && bf16 ? double(offloaded ? ParamStore::host_image_bytes(cfg) : Bf16Weights::bytes(cfg))
                                    : 0.0),
                   g1 = double(single.b[size_t(opt_home)][size_t(Tag::Grads)]) - stage_g;
      // --zero 3 without --offload params: each rank's device slots and head beside its shards
      const double slots_w = z3 && !offloaded ? double(ParamStore::device_weight_bytes(cfg, bf16, true)) : 0.0,
                   slots_g = z3 && !offloaded ? double(ParamStore::device_bytes(cfg, true)) : 0.0;
      double kv_off = 0, opt_off = 0, params_off = 0;
      const size_t F = mine.size();
      for (int q = 0; q < R; ++q) {
        const double* x = all.data() + F * size_t(q);
        kv_off = std::max({kv_off, std::abs(x[0] * double(a.dist.sp) - kv1) / kv1,
                           std::abs(x[1] * double(a.dist.sp) - kg1) / kg1});
        if (a.dist.zero > 0) opt_off = std::max(opt_off, std::abs(x[2] * double(R) - op1) / op1);
        if (z3)
          params_off = std::max({params_off, std::abs((x[3] - slots_w) * double(R) - w1) / w1,
                                 std::abs((x[4] - slots_g) * double(R) - g1) / g1});
      }
      if (z3)
        std::cout << fmt::format("{} weights single {} rank0 {} | {} grads single {} rank0 {}", tier_name(opt_home), w1,
                                 all[3], tier_name(opt_home), g1, all[4])
                  << std::endl;
      std::cout << fmt::format("kv_bytes single {} rank0 {} | kv_grad single {} rank0 {} | optimizer single {} "
                               "rank0 {}", kv1, all[0], kg1, all[1], op1, all[2])
                << std::endl;
      report("kv_per_rank_vs_single_over_sp", kv_off, 0);
      if (a.dist.zero > 0) report("optimizer_per_rank_vs_single_over_ranks", opt_off, 0.01);
      if (z3) report("weights_grads_per_rank_vs_single_over_ranks", params_off, 0.01);
    }
    double bad = ok ? 0 : 1;
    dist.world().all_reduce_max(&bad, 1);
    if (r == 0) std::cout << (bad == 0 ? "PASS" : "FAIL") << std::endl;
    return bad == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "dist_check: error: " << e.what() << std::endl;
    std::cerr.flush();
    oomb::mpi_abort(1);
  }
}
