#include "train_steps.h"

#include <fmt/format.h>
#include <cstring>

#include "model_fixture.h"
#include "test_util.h"
#include "hf/checkpoint.h"
#include "model/lora.h"
#include "train/model.h"
#include "train/optimizer.h"

namespace oomb::testing {

std::vector<int32_t> step_tokens(int64_t n, uint64_t seed, int64_t vocab, int32_t sep) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  uint64_t x = seed * 2654435761ULL + 1;
  for (size_t i = 0; i < t.size(); ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    t[i] = sep >= 0 && i % 11 == 7 ? sep : int32_t((x >> 33) % uint64_t(vocab));
  }
  return t;
}

std::vector<float> on_host(Backend& be, const Params& p) {
  std::vector<float> v(static_cast<size_t>(p.flat().numel()));
  be.copy(v.data(), Tier::Host, p.flat().data, p.flat().tier, v.size() * 4);
  return v;
}

void start_lora(Model& m, const std::filesystem::path& dir, const ChunkPlan& plan) {
  if (!plan.lora.on()) return;
  const ModelConfig& cfg = m.config();
  Params base(cfg, Tier::Host, Tag::IO), adapters(cfg, m.trainable().specs(), Tier::Host, Tag::IO);
  load_weights(dir, cfg, base);
  init_lora(adapters, base, 5);
  m.upload_trainable(adapters);
}

Trained train_steps(Backend& be, const std::filesystem::path& dir, const ChunkPlan& plan, const std::string& opt,
                    int64_t N, int steps, int accum, bool overlap, bool beside) {
  const ModelConfig cfg = load_config(dir);
  Model m(cfg, be, plan);
  load_for_training(m, dir);
  start_lora(m, dir, plan);
  OptimConfig oc;
  oc.kind = opt;
  oc.lr = 2e-2f;
  oc.weight_decay = opt == "adamw" ? 0.1f : 0.0f;
  oc.grad_clip = 0.5f;  // clipped every step here: the scale runs where the gradients are
  oc.warmup_steps = 1;
  oc.total_steps = steps;
  Optimizer o(oc, m.trainable(), m.grads(), be);
  if (overlap && m.store().can_overlap_update()) o.overlap_with(m.store(), beside);
  Trained r;
  for (int k = 0; k < steps; ++k) {
    m.zero_grads();
    double loss = 0;
    for (int micro = 0; micro < accum; ++micro) {
      const auto t = step_tokens(N + 1, uint64_t(k * accum + micro), cfg.vocab, plan.doc_sep);
      const std::vector<int32_t> ids(t.begin(), t.end() - 1), tg(t.begin() + 1, t.end());
      m.set_dropout_key(dropout_window_key(0, k * accum + micro));  // (the trainer's windows, --seed 0)
      loss += m.forward_backward(ids.data(), tg.data(), N, 1.0f / float(accum)).loss_sum;
    }
    r.losses.push_back(loss);
    r.grads.push_back(on_host(be, m.grads()));
    o.step(k, nullptr);
  }
  o.finish();
  r.weights = on_host(be, m.trainable());
  if (o.exp_avg()) r.exp_avg = on_host(be, *o.exp_avg()), r.exp_avg_sq = on_host(be, *o.exp_avg_sq());
  return r;
}

namespace {
bool same(const std::vector<float>& a, const std::vector<float>& b) {
  // (empty vectors may hold no pointer: memcmp must not see it)
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}
}  // namespace

WaitsPerStep waits_per_step(Backend& be, const std::filesystem::path& dir, const ChunkPlan& plan, int64_t N) {
  const ModelConfig cfg = load_config(dir);
  Model m(cfg, be, plan);
  load_for_training(m, dir);
  start_lora(m, dir, plan);
  OptimConfig oc;
  oc.lr = 1e-3f, oc.grad_clip = 1.0f, oc.total_steps = 3;
  Optimizer opt(oc, m.trainable(), m.grads(), be);
  Backend::HostWaits before{};
  int64_t allocations = 0;
  for (int k = 0; k < 3; ++k) {
    if (k == 1) before = be.host_waits(), allocations = Accountant::global().allocations();
    m.zero_grads();
    for (int s = 0; s < 2; ++s) {
      const auto t = step_tokens(N + 1, uint64_t(3 * k + s), cfg.vocab, plan.doc_sep);
      m.forward_backward(t.data(), t.data() + 1, N, 0.5f);
    }
    opt.step(k, nullptr);
  }
  const Backend::HostWaits after = be.host_waits();
  return {(after.drains - before.drains) / 2, (after.event_waits - before.event_waits) / 2,
          Accountant::global().allocations() - allocations};
}

std::string difference(const Trained& a, const Trained& b) {
  for (size_t k = 0; k < a.losses.size(); ++k) {
    if (std::memcmp(&a.losses[k], &b.losses[k], sizeof(double)) != 0)
      return fmt::format("step {}: loss {} vs {}", k, a.losses[k], b.losses[k]);
    if (!same(a.grads[k], b.grads[k]))
      return fmt::format("step {}: gradients differ (rel. error {:.2e})", k, rel_error(a.grads[k], b.grads[k]));
  }
  if (!same(a.weights, b.weights)) return fmt::format("weights differ (rel. error {:.2e})", rel_error(a.weights, b.weights));
  if (!same(a.exp_avg, b.exp_avg) || !same(a.exp_avg_sq, b.exp_avg_sq)) return "AdamW moments differ";
  return "";
}

}  // namespace oomb::testing
