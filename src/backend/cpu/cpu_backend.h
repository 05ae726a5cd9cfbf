// The CPU backend: the readable reference every other backend is checked against. The simulated
// device derives from it (the same ops on memory accounted as device memory).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_optimizer.h"
#include "backend/cpu/cpu_ops.h"

namespace oomb {

class CpuBackend : public Backend {
 public:
  // tier: the memory the ops run on (host; device for the simulated device, host-addressable)
  explicit CpuBackend(Tier tier = Tier::Host) : tier_(tier) {}
  std::string_view name() const override { return "cpu"; }
  Tier tier() const override { return tier_; }
  bool computes_on(Tier t) const override { return host_addressable(t); }

  // the logits tile (min(256, tokens) x lm_head_vocab_tile(V) fp32); with bf16 matmuls the fp32
  // scratch their widened operands take at the most: a linear's backward (x, w, dy; the widest is
  // d <-> max(H D, I)) or the loss (a vocabulary tile of the lm_head and a tile of h)
  size_t workspace_bytes(const WorkspaceShape& s) const override {
    const int64_t rows = std::clamp<int64_t>(s.scored(), 1, kLossTile), Vt = lm_head_vocab_tile(s.vocab);
    int64_t wide = 0;
    if (s.bf16) {
      const int64_t d = s.hidden, X = std::max(s.q_width, s.intermediate), T = s.scored();
      wide = std::max(T * (d + X) + d * X, Vt * d + rows * d);
    }
    return size_t(rows * Vt) * 4 + size_t(wide) * 4;
  }

  void copy(void* dst, Tier dst_tier, const void* src, Tier src_tier, size_t bytes) override {
    OOMB_CHECK(host_addressable(dst_tier) && host_addressable(src_tier), "copy: the CPU backend has only host memory");
    if (dst != src && bytes > 0) std::memcpy(dst, src, bytes);
  }
  void fill_zero(void* dst, size_t bytes) override {
    if (bytes > 0) std::memset(dst, 0, bytes);
  }


 protected:
  void do_linear_fwd(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y) override {
    cpu::linear_fwd(x, w, b, y, widen(cpu::widen_elems({&x, &w})));
  }
  void do_linear_bwd(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, bool acc, Tensor* dw,
                  Tensor* db) override {
    cpu::linear_bwd(x, w, dy, dx, acc, dw, db, widen(cpu::widen_elems({&x, &w, &dy})));
  }
  void do_embedding_fwd(const Tensor& ids, const Tensor& table, Tensor& out) override {
    cpu::embedding_fwd(ids, table, out);
  }
  void do_embedding_bwd(const Tensor& ids, const Tensor& dout, Tensor& dtable, int64_t skip) override {
    cpu::embedding_bwd(ids, dout, dtable, skip);
  }
  void do_rmsnorm_fwd(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd, float off) override {
    cpu::rmsnorm_fwd(x, w, eps, y, rstd, off);
  }
  void do_rmsnorm_bwd(const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy, Tensor& dx, bool acc,
                      Tensor& dw, float off) override {
    cpu::rmsnorm_bwd(x, w, rstd, dy, dx, acc, dw, off);
  }
  void do_rope_fwd(Tensor& x, const Tensor& pos, const RopeTable& r) override { cpu::rope(x, pos, r, false); }
  void do_rope_bwd(Tensor& dx, const Tensor& pos, const RopeTable& r) override { cpu::rope(dx, pos, r, true); }
  void do_glu_fwd(const Tensor& gate, const Tensor& up, Tensor& out, Act act) override {
    cpu::glu_fwd(gate, up, out, act);
  }
  void do_glu_bwd(const Tensor& gate, const Tensor& up, const Tensor& dout, Tensor& dgate, Tensor& dup,
                  Act act) override {
    cpu::glu_bwd(gate, up, dout, dgate, dup, act);
  }
  void do_page_key_means(const Tensor& k, int64_t t0, int64_t page_size, Tensor& means) override {
    cpu::page_key_means(k, t0, page_size, means);
  }
  void do_page_scores(const Tensor& q, int64_t tile, const Tensor& means, Tensor& scores) override {
    cpu::page_scores(q, tile, means, scores);
  }
  void do_page_key_minmax(const Tensor& k, int64_t t0, int64_t page_size, Tensor& minmax) override {
    cpu::page_key_minmax(k, t0, page_size, minmax);
  }
  void do_page_quest_scores(const Tensor& q, int64_t tile, const Tensor& minmax, Tensor& scores) override {
    cpu::page_quest_scores(q, tile, minmax, scores);
  }
  void do_page_topk(const Tensor& scores, int64_t first, Tensor& chosen) override { cpu::page_topk(scores, first, chosen); }
  void do_attention_fwd(const Tensor& q, std::span<const KVBlock> blocks, const AttnArgs& a, Tensor& o,
                     Tensor& lse) override {
    cpu::attention_fwd(q, blocks, a, o, lse);
  }
  void do_attention_bwd(const Tensor& q, const Tensor& o, const Tensor& lse, const Tensor& dout,
                     std::span<const KVBlock> blocks, const AttnArgs& a, Tensor& dq) override {
    cpu::attention_bwd(q, o, lse, dout, blocks, a, dq);
  }

  void do_lm_head_xent_stats(const Tensor& h, const Tensor& w, int64_t v0, const Tensor& targets,
                             Tensor& stats) override {
    cpu::lm_head_xent_stats(h, w, v0, targets, stats, logits_tile(h, w),
                            widen(cpu::lm_head_widen_elems(h, w, kLossTile)));
  }
  void do_lm_head_xent_loss(const Tensor& stats, const Tensor& targets, Tensor& sums) override {
    cpu::lm_head_xent_loss(stats, targets, sums);
  }
  void do_lm_head_xent_grad(const Tensor& h, const Tensor& w, int64_t v0, const Tensor& targets, const Tensor& stats,
                            float scale, Tensor* dh, bool dh_accumulate, Tensor* dw) override {
    cpu::lm_head_xent_grad(h, w, v0, targets, stats, scale, dh, dh_accumulate, dw, logits_tile(h, w),
                           widen(cpu::lm_head_widen_elems(h, w, kLossTile)));
  }

  void do_cast(const Tensor& src, Tensor& dst) override {
    const int64_t n = src.numel();
    if (src.dtype == dst.dtype) {
      if (n > 0 && src.data != dst.data) std::memcpy(dst.data, src.data, src.bytes());
    } else if (src.dtype == DType::F32) {
      cpu::cast_to_bf16(src.f(), dst.as<uint16_t>(), n);
    } else {
      const uint16_t* s = src.as<uint16_t>();
      float* d = dst.f();
#pragma omp parallel for if (n >= cpu::kParallelMin)
      for (int64_t i = 0; i < n; ++i) d[i] = bf16_to_f32(s[i]);
    }
  }
  void do_round_bf16(Tensor& x) override {
    const int64_t n = x.numel();
    float* p = x.f();
#pragma omp parallel for if (n >= cpu::kParallelMin)
    for (int64_t i = 0; i < n; ++i) p[i] = bf16_to_f32(f32_to_bf16(p[i]));
  }

  void do_add(Tensor& y, const Tensor& x) override {
    const int64_t n = y.numel();
    if (x.dtype == DType::BF16) {
      const uint16_t* xb = x.as<uint16_t>();
#pragma omp parallel for if (n >= cpu::kParallelMin)
      for (int64_t i = 0; i < n; ++i) y.f()[i] += bf16_to_f32(xb[i]);
      return;
    }
#pragma omp parallel for if (n >= cpu::kParallelMin)
    for (int64_t i = 0; i < n; ++i) y.f()[i] += x.f()[i];
  }
  void do_zero(Tensor& y) override { std::fill_n(static_cast<char*>(y.data), y.bytes(), 0); }
  void do_scale(const Tensor& x, float s, Tensor& y) override {
    const int64_t n = y.numel();
    const bool xb = x.dtype == DType::BF16, yb = y.dtype == DType::BF16;
#pragma omp parallel for if (n >= cpu::kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      const float v = (xb ? bf16_to_f32(x.as<uint16_t>()[i]) : x.f()[i]) * s;
      if (yb) y.as<uint16_t>()[i] = f32_to_bf16(v);
      else y.f()[i] = v;
    }
  }
  double do_sum_squares(const Tensor& x) override { return cpu::sum_squares(x.f(), x.numel()); }
  void do_dropout(const Tensor& x, const DropoutMask& m, Tensor& y, bool accumulate) override {
    cpu::dropout(x, m, y, accumulate);
  }

  // Decoupled weight decay (AdamW): p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p)  (cpu_optimizer.h)
  void do_adamw_step(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const AdamW& a) override {
    cpu::adamw(p.f(), g.f(), m.f(), v.f(), p.numel(), a);
  }
  void do_sgd_step(Tensor& p, const Tensor& g, float lr) override { cpu::sgd(p.f(), g.f(), p.numel(), lr); }

 protected:
  Tier tier_;

 private:
  static constexpr int64_t kLossTile = 256;
  // The loss's logits tile, grown to the most rows (at most kLossTile) and the widest vocabulary
  // tile seen (workspace tag).
  Buffer logits_buf_;
  Tensor logits_;
  Tensor& logits_tile(const Tensor& h, const Tensor& w) {
    const int64_t rows = std::clamp<int64_t>(h.dim(0), 1, kLossTile), Vt = std::max<int64_t>(w.dim(0), 1);
    if (logits_.empty() || logits_.dim(0) < rows || logits_.dim(1) < Vt) {
      const int64_t r = logits_.empty() ? rows : std::max(rows, logits_.dim(0));
      const int64_t v = logits_.empty() ? Vt : std::max(Vt, logits_.dim(1));
      logits_buf_.reset();  // the old one first: the peak is the larger buffer alone
      logits_buf_ = Buffer(tier_, Tag::Workspace, size_t(r * v) * 4);
      logits_ = Tensor(logits_buf_.data(), DType::F32, {r, v}, tier_);
    }
    return logits_;
  }
  // fp32 scratch for bf16 matmul operands (tag workspace), grown to the largest call seen
  Buffer widen_buf_;
  float* widen(int64_t elems) {
    if (widen_buf_.bytes() < size_t(elems) * 4) {
      widen_buf_.reset();  // the old one first: the peak is the larger buffer alone
      widen_buf_ = Buffer(tier_, Tag::Workspace, size_t(elems) * 4);
    }
    return widen_buf_.as<float>();
  }
};

}  // namespace oomb
