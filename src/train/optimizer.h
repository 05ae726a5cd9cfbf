// Optimizers over the flat parameter buffer: AdamW (fp32 master weights and moments, decoupled
// weight decay on matrices only) and plain SGD; global-norm clipping; the learning-rate schedule
// (warmup, then cosine, linear, constant or warmup-stable-decay).
// The update runs where the parameters are: on the backend, or, when they live in host memory
// (--offload params), on the host CPU (the CPU backend's ops; or, with the store's update
// (overlap_with), backend/cpu/cpu_optimizer's fused pass called directly: the same bits).
#pragma once
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "dist/grad_sync.h"
#include "model/param_store.h"
#include "model/params.h"
#include "model/update_gate.h"

namespace oomb {

struct OptimConfig {
  std::string kind = "adamw";  // adamw | sgd
  float lr = 1e-3f;
  float weight_decay = 0.0f;   // AdamW only; applied to 2-D weights (not norms, biases)
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  float grad_clip = 1.0f;      // max global L2 norm; 0 disables
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  float min_lr_ratio = 0.1f;   // cosine, linear and wsd decay to lr * min_lr_ratio at the last step
  bool skip_nonfinite = false; // a non-finite gradient skips the step instead of stopping the run
  bool overlap_update = true;  // --offload params: the update beside the next step (Optimizer::overlap_with)
  // --update-threads: the host update's OpenMP threads (0: every thread OpenMP would use, less one
  // beside the next step, which leaves the thread driving the device a core of its own)
  int update_threads = 0;
  std::string schedule = "cosine";  // after the warmup: cosine | linear | constant | wsd (--lr-schedule)
  int64_t decay_steps = 0;          // wsd: the last steps, decaying (0: a tenth of those after the warmup)
};

// Learning rate at step k (from 0): linear warmup over warmup_steps (step 0 gets lr / warmup), then
// over the S = total - warmup steps after it, f = lr * min_lr_ratio the floor:
//   cosine:   from lr at the first to f at the last, f + (lr - f) (1 + cos(pi j / (S - 1))) / 2, j = 0 .. S-1
//   linear:   the same line, f + (lr - f) (1 - j / (S - 1))
//   constant: lr
//   wsd:      lr (stable), then the last D = wsd_decay_steps steps down a line to f at the last,
//             f + (lr - f) (1 - i / D), i = 1 .. D (MiniCPM's warmup-stable-decay, linear decay)
// A single step after the warmup keeps lr (cosine, linear).
float lr_at(const OptimConfig& c, int64_t step);
// wsd's decay steps: decay_steps, or a tenth (rounded, at least 1) of the steps after the warmup.
int64_t wsd_decay_steps(const OptimConfig& c);
// The schedule's settings, each bad one named by its flag (--lr-schedule, --min-lr-ratio,
// --decay-steps, --warmup-steps); total_steps set.
void check_schedule(const OptimConfig& c);

// With ZeRO (--zero 1, 2) an optimizer updates only its rank's shard [lo, hi) of the flat buffers
// and holds moments for that shard alone; norm_comm (zero 2: each rank holds only its shard's
// gradient sum) adds the shards' squares into the global norm. --zero 3: no range (the buffers are
// the rank's packed shards, model/param_shards.h, updated whole), norm_comm set.
struct OptimShard {
  Shard range;              // empty (hi = 0): every parameter
  Comm* norm_comm = nullptr;
  bool on() const { return range.hi > 0; }
};

class Optimizer {
 public:
  Optimizer(const OptimConfig& c, Params& params, Params& grads, Backend& be, OptimShard shard = {});
  // Clips the gradients (if configured) and updates the parameters. Returns the pre-clip norm. A
  // non-finite norm stops the run naming the step and the first tensor holding it, or, with
  // skip_nonfinite, leaves the parameters as they are and returns the norm (NaN or Inf).
  double step(int64_t k, float* lr_used);
  // From now on step() returns once the norm is known, and the update itself (clipping, AdamW or
  // SGD, unit by unit in the order the next pass reads them: ParamStore::update_unit) runs
  // on a thread of its own beside the next step's first layers, which wait for each unit
  // (ParamStore::begin_overlapped_update). beside false (--no-overlap-update): the same units, in
  // the same single pass over memory each (images and zeroed gradients with the step), run
  // within step(). The same bits as the update in place. Needs the store's can_overlap_update()
  // and every parameter (no shard).
  void overlap_with(ParamStore& store, bool beside = true);
  // Waits for an overlapped update to end (rethrowing its error): before anything reads the
  // parameters or moments other than the next pass (checkpoints, the end of training).
  void finish() const;
  // The host's update (the parameters in host memory): seconds the last finished one took (on its
  // own thread when overlapped: the previous step's, which ran beside this one, from the thread's
  // start; < 0 before any, or when it failed), and seconds the passes waited for an overlapped
  // update's units, and finish() for its end, since the last call. host: false where the update
  // runs on the model's backend (and a sharded update is not timed).
  struct HostUpdateTimes {
    bool host = false;
    double update_s = -1, waited_s = 0;
    int threads = 0;  // the threads the last finished one ran on (0 before any)
  };
  int update_threads() const;
  HostUpdateTimes host_update_times();
  ~Optimizer();
  // Tests: the overlapped update sleeps this long before each unit (0: never)
  static void delay_update_for_test(int64_t microseconds);
  // Tests: the overlapped update does each unit only once the pass waits for it or a later one, or
  // finish() is called (UpdateGate's hold): what a pass without one of its waits reads before its
  // next wait is the old weights, however loaded the machine
  static void hold_update_for_test(bool hold);
  // The name of the first gradient tensor (in the checkpoint's order) holding NaN or Inf; "" if none.
  std::string first_nonfinite() const;
  static double grad_norm(Params& grads, Backend& be);
  // AdamW's state (checkpoints): the moments beside the parameters (null for SGD or a shard) and the
  // bias-correction count (updates made; steps skipped by skip_nonfinite do not count).
  Params* exp_avg() const { return m_.get(); }
  Params* exp_avg_sq() const { return v_.get(); }
  // Sharded (--zero 1, 2): this rank's range of the flat layout and AdamW's moments for it alone
  // (shard().range.size() values each, in the parameters' memory; empty for SGD).
  const OptimShard& shard() const { return shard_; }
  Tensor exp_avg_shard() const { return shard_moment(ms_); }
  Tensor exp_avg_sq_shard() const { return shard_moment(vs_); }
  const Params& params() const { return p_; }
  int64_t adam_step() const { return t_; }
  void set_adam_step(int64_t t) { t_ = t; }
  const OptimConfig& config() const { return c_; }

 private:
  OptimConfig c_;
  Params& p_;
  Params& g_;
  Backend& be_;
  std::unique_ptr<Backend> host_;  // the host CPU, when the parameters are in host memory
  Backend& ops() const { return host_ ? *host_ : be_; }
  std::unique_ptr<Params> m_, v_;  // AdamW moments (tag optimizer)
  OptimShard shard_;
  Buffer ms_, vs_;                 // a shard's moments (tag optimizer)
  int64_t t_ = 0;
  void step_shard(float clip, float lr);  // clip: the gradients' scale (1: none)
  Backend::AdamW adamw_args(const ParamSpec& s, float lr) const;  // weight decay on matrices only
  // the overlapped update of the specs `unit` (indices into p_.specs()) on the host, clipped by
  // `clip` (1: none), with each tensor's image and zeroed gradient (ParamStore::update_dest)
  void update(const std::vector<size_t>& specs, float clip, float lr);
  // overlapped (overlap_with): the store, the specs of each of its units, the gate, the thread
  ParamStore* store_ = nullptr;
  bool beside_ = true;
  std::vector<std::vector<size_t>> units_;
  mutable UpdateGate gate_;     // (finish() is const: the update's end, seen by readers of const state)
  mutable std::thread worker_;
  double worker_update_s_ = -1;        // written by the worker, read after it is joined
  int worker_team_ = 0;                // (its team's threads, likewise)
  mutable int last_team_ = 0;
  mutable double last_update_s_ = -1;  // the last finished host update's seconds (host_update_times)
  mutable double join_waited_s_ = 0;   // seconds finish() waited to join the update (host_update_times)
  Tensor shard_moment(const Buffer& b) const {
    return b.data() ? Tensor(b.data(), DType::F32, {shard_.range.size()}, b.tier()) : Tensor();
  }
  Tensor range(const Tensor& flat) const { return flat.rows(shard_.range.lo, shard_.range.size()); }
};

}  // namespace oomb
