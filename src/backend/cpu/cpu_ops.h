// The CPU reference ops (fp32, OpenBLAS GEMM, OpenMP loops). CpuBackend forwards to these.
#pragma once
#include <initializer_list>
#include <span>

#include "backend/backend.h"

namespace oomb::cpu {

// The matmuls take f32 or bf16 operands (Backend::linear_fwd); bf16 ones are widened exactly into
// `widen`, fp32 scratch of matmul_widen_elems, and the same sgemm runs on the same values.
void linear_fwd(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y, float* widen);
void linear_bwd(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, bool dx_accumulate, Tensor* dw,
                Tensor* db, float* widen);
// Elements of fp32 scratch the widened operands take: the bf16 ones among these, whole.
int64_t widen_elems(std::initializer_list<const Tensor*> operands);
// Elements the loss widens with bf16 h and w: w, and one tile of h's rows.
int64_t lm_head_widen_elems(const Tensor& h, const Tensor& w, int64_t tile);
void embedding_fwd(const Tensor& ids, const Tensor& table, Tensor& out);
void embedding_bwd(const Tensor& ids, const Tensor& dout, Tensor& dtable, int64_t skip = -1);
void rmsnorm_fwd(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd, float w_offset = 0.0f);
void rmsnorm_bwd(const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy, Tensor& dx,
                 bool dx_accumulate, Tensor& dw, float w_offset = 0.0f);
void rope(Tensor& x, const Tensor& pos, const RopeTable& rope, bool inverse);
void glu_fwd(const Tensor& gate, const Tensor& up, Tensor& out, Act act = Act::Silu);
void glu_bwd(const Tensor& gate, const Tensor& up, const Tensor& dout, Tensor& dgate, Tensor& dup,
             Act act = Act::Silu);
void dropout(const Tensor& x, const DropoutMask& m, Tensor& y, bool accumulate);
void attention_fwd(const Tensor& q, std::span<const KVBlock> blocks, const AttnArgs& a, Tensor& o, Tensor& lse);
void attention_bwd(const Tensor& q, const Tensor& o, const Tensor& lse, const Tensor& dout,
                   std::span<const KVBlock> blocks, const AttnArgs& a, Tensor& dq);
void page_key_means(const Tensor& k, int64_t t0, int64_t page_size, Tensor& means);
void page_scores(const Tensor& q, int64_t tile, const Tensor& means, Tensor& scores);
void page_key_minmax(const Tensor& k, int64_t t0, int64_t page_size, Tensor& minmax);
void page_quest_scores(const Tensor& q, int64_t tile, const Tensor& minmax, Tensor& scores);
void page_topk(const Tensor& scores, int64_t first, Tensor& chosen);
// The loss over vocabulary tiles (Backend::lm_head_xent_stats, _loss, _grad). logits: a (tile, >= Vt)
// f32 workspace the caller owns; widen: fp32 scratch of lm_head_widen_elems (bf16 h and w).
void lm_head_xent_stats(const Tensor& h, const Tensor& w, int64_t v0, const Tensor& targets, Tensor& stats,
                        Tensor& logits, float* widen);
void lm_head_xent_loss(const Tensor& stats, const Tensor& targets, Tensor& sums);
void lm_head_xent_grad(const Tensor& h, const Tensor& w, int64_t v0, const Tensor& targets, const Tensor& stats,
                       float scale, Tensor* dh, bool dh_accumulate, Tensor* dw, Tensor& logits, float* widen);

// Loops with less work than this (in elements touched) run on one thread: a parallel region costs
// more than it saves there, and far more when other processes share the cores.
constexpr int64_t kParallelMin = 1 << 15;

// The ops' inputs are checked once, for every backend, before they get here (op_checks.cpp).
// t as fp32: itself, or (bf16) widened exactly into scratch, which advances past it.
const float* widened(const Tensor& t, float*& scratch);

}  // namespace oomb::cpu
