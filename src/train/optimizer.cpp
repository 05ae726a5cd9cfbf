#include "train/optimizer.h"

#include <cmath>

namespace oomb {

float lr_at(const OptimConfig& c, int64_t k) {
  if (k < c.warmup_steps) return c.lr * float(k + 1) / float(c.warmup_steps);
  const int64_t span = c.total_steps - c.warmup_steps;
  if (span <= 1) return c.lr;
  const double frac = double(k - c.warmup_steps) / double(span - 1);
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * std::min(frac, 1.0)));
  return float(c.lr * (c.min_lr_ratio + (1.0 - c.min_lr_ratio) * cosine));
}

Optimizer::Optimizer(const OptimConfig& c, Params& params, Params& grads, Backend& be)
    : c_(c), p_(params), g_(grads), be_(be) {
  OOMB_CHECK(c.kind == "adamw" || c.kind == "sgd", "--optimizer: '{}' is not one of adamw, sgd", c.kind);
  OOMB_CHECK(c.lr > 0 && std::isfinite(c.lr), "--lr: must be positive, got {}", c.lr);
  OOMB_CHECK(c.grad_clip >= 0, "--grad-clip: must be >= 0 (0 disables), got {}", c.grad_clip);
  OOMB_CHECK(c.weight_decay >= 0, "--weight-decay: must be >= 0, got {}", c.weight_decay);
  OOMB_CHECK(c.warmup_steps >= 0, "--warmup-steps: must be >= 0, got {}", c.warmup_steps);
  const Tier home = params.flat().tier;
  OOMB_CHECK(grads.flat().tier == home, "optimizer: parameters in {} memory but gradients in {}", tier_name(home),
             tier_name(grads.flat().tier));
  if (home != be.tier()) host_ = make_cpu_backend();
  if (c.kind == "adamw") {
    m_ = std::make_unique<Params>(params.config(), params.specs(), home, Tag::Optimizer);
    v_ = std::make_unique<Params>(params.config(), params.specs(), home, Tag::Optimizer);
  }
}

double Optimizer::grad_norm(Params& grads, Backend& be) { return std::sqrt(be.sum_squares(grads.flat())); }

std::string Optimizer::first_nonfinite() const {
  for (const ParamSpec& s : g_.specs()) {
    Tensor g = g_.view(s);
    if (!std::isfinite(ops().sum_squares(g))) return s.name;
  }
  return "";
}

double Optimizer::step(int64_t k, float* lr_used) {
  Backend& be = ops();
  const double norm = grad_norm(g_, be);
  if (!std::isfinite(norm)) {
    if (c_.skip_nonfinite) return norm;  // the parameters and moments stay as they were
    fail("step {}: the gradient norm is {}: tensor '{}' holds a non-finite gradient (the run diverged: try a "
         "lower --lr, or --skip-nonfinite to skip such steps)", k, norm, first_nonfinite());
  }
  if (c_.grad_clip > 0 && norm > c_.grad_clip) be.scale(g_.flat(), float(c_.grad_clip / (norm + 1e-6)));
  const float lr = lr_at(c_, k);
  if (lr_used) *lr_used = lr;
  if (c_.kind == "sgd") {
    be.sgd_step(p_.flat(), g_.flat(), lr);
    return norm;
  }
  ++t_;
  for (const ParamSpec& s : p_.specs()) {
    Tensor p = p_.view(s), g = g_.view(s), m = m_->view(s), v = v_->view(s);
    const float wd = s.shape.size() >= 2 ? c_.weight_decay : 0.0f;
    be.adamw_step(p, g, m, v, {lr, c_.beta1, c_.beta2, c_.eps, wd, t_});
  }
  return norm;
}

}  // namespace oomb
