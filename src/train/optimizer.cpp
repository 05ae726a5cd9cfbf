#include "train/optimizer.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include "backend/cpu/cpu_optimizer.h"

namespace oomb {

int64_t wsd_decay_steps(const OptimConfig& c) {
  return c.decay_steps > 0 ? c.decay_steps : std::max<int64_t>(1, (c.total_steps - c.warmup_steps + 5) / 10);
}

void check_schedule(const OptimConfig& c) {
  OOMB_CHECK(c.schedule == "cosine" || c.schedule == "linear" || c.schedule == "constant" || c.schedule == "wsd",
             "--lr-schedule: '{}' is not one of cosine, linear, constant, wsd", c.schedule);
  OOMB_CHECK(c.min_lr_ratio >= 0 && c.min_lr_ratio <= 1, "--min-lr-ratio: must be within [0, 1], got {}",
             c.min_lr_ratio);
  OOMB_CHECK(c.warmup_steps >= 0, "--warmup-steps: must be >= 0, got {}", c.warmup_steps);
  OOMB_CHECK(c.decay_steps == 0 || c.schedule == "wsd", "--decay-steps: only with --lr-schedule wsd (the {} schedule "
             "decays over every step after the warmup)", c.schedule);
  if (c.schedule == "wsd") {
    OOMB_CHECK(c.warmup_steps < c.total_steps, "--warmup-steps {}: --lr-schedule wsd needs steps after the warmup "
               "to decay over (--steps {})", c.warmup_steps, c.total_steps);
    OOMB_CHECK(wsd_decay_steps(c) <= c.total_steps - c.warmup_steps, "--decay-steps {}: more than the {} steps after "
               "the warmup (--steps {} less --warmup-steps {})", wsd_decay_steps(c),
               c.total_steps - c.warmup_steps, c.total_steps, c.warmup_steps);
  }
}

float lr_at(const OptimConfig& c, int64_t k) {
  if (k < c.warmup_steps) return c.lr * float(k + 1) / float(c.warmup_steps);
  const double floor = c.min_lr_ratio;
  if (c.schedule == "constant") return c.lr;
  if (c.schedule == "wsd") {
    const int64_t d = wsd_decay_steps(c), i = k - (c.total_steps - d) + 1;  // i = 1 .. d: the decay's steps
    if (i <= 0) return c.lr;
    return float(c.lr * (floor + (1.0 - floor) * (1.0 - double(std::min(i, d)) / double(d))));
  }
  const int64_t span = c.total_steps - c.warmup_steps;
  if (span <= 1) return c.lr;
  const double frac = std::min(double(k - c.warmup_steps) / double(span - 1), 1.0);
  const double shape = c.schedule == "linear" ? 1.0 - frac : 0.5 * (1.0 + std::cos(M_PI * frac));
  return float(c.lr * (floor + (1.0 - floor) * shape));
}

Optimizer::Optimizer(const OptimConfig& c, Params& params, Params& grads, Backend& be, OptimShard shard)
    : c_(c), p_(params), g_(grads), be_(be), shard_(shard) {
  OOMB_CHECK(c.kind == "adamw" || c.kind == "sgd", "--optimizer: '{}' is not one of adamw, sgd", c.kind);
  OOMB_CHECK(c.lr > 0 && std::isfinite(c.lr), "--lr: must be positive, got {}", c.lr);
  OOMB_CHECK(c.grad_clip >= 0, "--grad-clip: must be >= 0 (0 disables), got {}", c.grad_clip);
  OOMB_CHECK(c.weight_decay >= 0, "--weight-decay: must be >= 0, got {}", c.weight_decay);
  check_schedule(c);
  const Tier home = params.flat().tier;
  OOMB_CHECK(grads.flat().tier == home, "optimizer: parameters in {} memory but gradients in {}", tier_name(home),
             tier_name(grads.flat().tier));
  if (home != be.tier()) host_ = make_cpu_backend();
  // the moments: only the update reads them, so beside pinned masters (the host's update) they
  // need no pinning
  const Tier moments = host_side(home);
  if (c.kind == "adamw" && shard.on()) {
    const size_t b = size_t(shard.range.held()) * 4;
    ms_ = Buffer(moments, Tag::Optimizer, b);
    vs_ = Buffer(moments, Tag::Optimizer, b);
  } else if (c.kind == "adamw") {
    m_ = std::make_unique<Params>(params.config(), params.specs(), moments, Tag::Optimizer);
    v_ = std::make_unique<Params>(params.config(), params.specs(), moments, Tag::Optimizer);
  }
}


double Optimizer::grad_norm(Params& grads, Backend& be) { return std::sqrt(be.sum_squares(grads.flat())); }

std::string Optimizer::first_nonfinite() const { return oomb::first_nonfinite(g_, ops()); }

namespace {
int64_t g_update_delay_us = 0;
bool g_hold_update = false;

// This thread's OpenMP team set to n for the scope, then put back.
class TeamScope {
 public:
  explicit TeamScope(int n) : before_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~TeamScope() { omp_set_num_threads(before_); }
  TeamScope(const TeamScope&) = delete;
  TeamScope& operator=(const TeamScope&) = delete;

 private:
  int before_;
};
}  // namespace

void Optimizer::delay_update_for_test(int64_t microseconds) { g_update_delay_us = microseconds; }
void Optimizer::hold_update_for_test(bool hold) { g_hold_update = hold; }

Optimizer::~Optimizer() {
  gate_.release();
  if (worker_.joinable()) worker_.join();
  if (store_) store_->end_overlapped_update();
}

void Optimizer::overlap_with(ParamStore& store, bool beside) {
  OOMB_CHECK(store.can_overlap_update() && !shard_.on() && !shard_.norm_comm && host_ != nullptr,
             "optimizer: an update beside the next pass needs every fp32 master in pinned memory");
  store_ = &store;
  beside_ = beside;
  units_.assign(size_t(store.update_units()), {});
  for (size_t i = 0; i < p_.specs().size(); ++i) {
    const ParamSpec& s = p_.specs()[i];
    const int64_t u = store.update_unit(s.offset);
    OOMB_CHECK(store.update_unit(s.offset + s.numel() - 1) == u, "optimizer: {} spans two of the store's units", s.name);
    units_[size_t(u)].push_back(i);
  }
}

void Optimizer::finish() const {
  if (worker_.joinable()) {
    gate_.release();  // (a test's held update: its units now)
    const auto t0 = std::chrono::steady_clock::now();
    worker_.join();  // (at once when the passes waited for every unit)
    join_waited_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    last_update_s_ = worker_update_s_, last_team_ = worker_team_;
  }
  if (store_) store_->end_overlapped_update();
  gate_.wait(int64_t(units_.size()));  // (rethrows the update's error)
}

// One pass over each tensor's memory (cpu::adamw_update): the clip, the step, the image the next
// pass copies to the device and the gradient zeroed, each element's bits those of Backend::scale,
// adamw_step (or sgd_step), core/dtype's rounding and a memset.
void Optimizer::update(const std::vector<size_t>& specs, float clip, float lr) {
  for (const size_t i : specs) {
    const ParamSpec& s = p_.specs()[i];
    const ParamStore::UpdateDest d = store_->update_dest(s);
    const cpu::UpdateOut out{clip, d.image, d.image_bf16, d.zero_grad};
    float *p = p_.view(s).f(), *g = g_.view(s).f();
    if (c_.kind == "sgd")
      cpu::sgd_update(p, g, s.numel(), lr, out);
    else
      cpu::adamw_update(p, g, m_->view(s).f(), v_->view(s).f(), s.numel(), adamw_args(s, lr), out);
  }
}

Backend::AdamW Optimizer::adamw_args(const ParamSpec& s, float lr) const {
  return {lr, c_.beta1, c_.beta2, c_.eps, s.shape.size() >= 2 ? c_.weight_decay : 0.0f, t_};
}

double Optimizer::step(int64_t k, float* lr_used) {
  finish();  // (the last step's update: done by now, the pass having waited for every unit)
  Backend& be = ops();
  double norm;
  if (shard_.norm_comm) {  // zero 2: each rank holds its shard's gradient sum (zero 3: all it holds is its shard)
    double ss = !shard_.on() ? be.sum_squares(g_.flat()) : shard_.range.size() > 0 ? be.sum_squares(range(g_.flat())) : 0.0;
    shard_.norm_comm->all_reduce_sum(&ss, 1);
    norm = std::sqrt(ss);
  } else {
    norm = grad_norm(g_, be);
  }
  if (!std::isfinite(norm)) {
    if (c_.skip_nonfinite) return norm;  // the parameters and moments stay as they were
    fail("step {}: the gradient norm is {}: tensor '{}' holds a non-finite gradient (the run diverged: try a "
         "lower --lr, or --skip-nonfinite to skip such steps)", k + 1, norm, first_nonfinite());
  }
  const float lr = lr_at(c_, k);
  if (lr_used) *lr_used = lr;
  const float clip = c_.grad_clip > 0 && norm > c_.grad_clip ? float(c_.grad_clip / (norm + 1e-6)) : 1.0f;
  // the host's update here (not beside the next step: several ranks, --zero): on --update-threads' team
  std::optional<TeamScope> team;
  if (host_ && !store_ && c_.update_threads > 0) team.emplace(c_.update_threads);
  if (shard_.on()) return step_shard(clip, lr), norm;
  if (store_) {  // unit by unit, on the update's thread or (not beside) here: the same elementwise bits as below
    if (c_.kind == "adamw") ++t_;
    gate_.start(int64_t(units_.size()), beside_ && g_hold_update);
    try {
      store_->begin_overlapped_update(&gate_);
      worker_update_s_ = -1;  // (an update that fails reports none)
      const auto t0 = std::chrono::steady_clock::now();  // (the thread's start counted too)
      // (the team from this thread's setting, which a new thread does not inherit: --update-threads,
      // or OpenMP's, as share_cores may have set it for this rank)
      const int threads = update_threads();
      const auto units = [this, clip, lr, t0, threads] {
        omp_set_num_threads(threads);  // (this thread's own setting: the worker's, or restored below)
        int team = 0;  // the threads its loops run on, as OpenMP makes the team
#pragma omp parallel
#pragma omp single
        team = omp_get_num_threads();
        worker_team_ = team;
        for (size_t u = 0; u < units_.size(); ++u) {
          if (g_update_delay_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(g_update_delay_us));
          gate_.hold_unit(int64_t(u));
          update(units_[u], clip, lr);
          gate_.done(int64_t(u));
        }
        worker_update_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      };
      if (!beside_) {
        const TeamScope restore(omp_get_max_threads());  // (units() sets its own)
        units();
        last_update_s_ = worker_update_s_, last_team_ = worker_team_;
        return norm;
      }
      worker_ = std::thread([this, units] {
        try {
          units();
        } catch (...) {
          gate_.fail(std::current_exception());
        }
      });
    } catch (...) {  // no thread, or the update within step() failed: nothing may wait for it (a
      // later finish() rethrows the error)
      last_update_s_ = -1, last_team_ = 0;
      gate_.fail(std::current_exception());
      store_->end_overlapped_update();
      throw;
    }
    return norm;
  }
  const auto t0 = std::chrono::steady_clock::now();
  if (clip != 1.0f) be.scale(g_.flat(), clip);
  if (c_.kind == "sgd") {
    be.sgd_step(p_.flat(), g_.flat(), lr);
  } else {
    ++t_;
    for (const ParamSpec& s : p_.specs()) {
      Tensor p = p_.view(s), g = g_.view(s), m = m_->view(s), v = v_->view(s);
      be.adamw_step(p, g, m, v, adamw_args(s, lr));
    }
  }
  if (host_) {
    last_update_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    last_team_ = omp_get_max_threads();  // (the backend's loops: OpenMP's team)
  }
  return norm;
}

Optimizer::HostUpdateTimes Optimizer::host_update_times() {
  if (!host_) return {};
  const double waited = gate_.take_waited_s() + join_waited_s_;
  join_waited_s_ = 0;
  return {true, last_update_s_, waited, last_team_};
}

int Optimizer::update_threads() const {
  if (c_.update_threads > 0) return c_.update_threads;
  return std::max(1, omp_get_max_threads() - (store_ && beside_ ? 1 : 0));
}

// The same update on the shard [lo, hi) alone: clipping, SGD, and AdamW per tensor's part in it
// (elementwise, so each element gets the bits the whole update gives it).
void Optimizer::step_shard(float clip, float lr) {
  Backend& be = ops();
  const Shard& r = shard_.range;
  if (r.size() == 0) {
    if (c_.kind == "adamw") ++t_;
    return;
  }
  Tensor g = range(g_.flat()), p = range(p_.flat());
  if (clip != 1.0f) be.scale(g, clip);
  if (c_.kind == "sgd") return be.sgd_step(p, g, lr);
  ++t_;
  const Tensor m = shard_moment(ms_), v = shard_moment(vs_);
  for (const ParamSpec& s : p_.specs()) {
    const int64_t a = std::max(s.offset, r.lo), b = std::min(s.offset + s.numel(), r.hi);
    if (a >= b) continue;
    Tensor pt = p_.flat().rows(a, b - a), gt = g_.flat().rows(a, b - a), mt = m.rows(a - r.lo, b - a),
           vt = v.rows(a - r.lo, b - a);
    be.adamw_step(pt, gt, mt, vt, adamw_args(s, lr));
  }
}

}  // namespace oomb
