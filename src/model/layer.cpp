#include "model/layer.h"

#include <algorithm>
#include <cmath>

#include "model/lora.h"

namespace oomb {

namespace {
const Tensor* opt(const Tensor& t) { return t.empty() ? nullptr : &t; }
Tensor* opt(Tensor& t) { return t.empty() ? nullptr : &t; }
Tensor flat2(const Tensor& t) { return t.reshaped({t.dim(0), t.numel() / t.dim(0)}); }
Tensor heads2(const Tensor& t) { return t.reshaped({t.numel() / t.dim(-1), t.dim(-1)}); }  // (T*heads, D)
Tensor flat1(const Tensor& t) { return t.reshaped({t.numel()}); }

// The chunk's own K/V split into blocks of ctx.block tokens, after `before` (the last group of
// earlier pages). The list is reused from call to call, so steady-state steps do not allocate.
std::span<const KVBlock> with_own_blocks(const LayerCtx& ctx, LayerBuffers& plan, std::span<const KVBlock> before,
                                         bool with_grads) {
  static thread_local std::vector<KVBlock> blocks;
  blocks.assign(before.begin(), before.end());
  const int64_t T = plan.k.dim(0);
  for (int64_t t0 = 0; t0 < T; t0 += ctx.block) {
    const int64_t n = std::min(ctx.block, T - t0);
    KVBlock b;
    b.k = (plan.k16.empty() ? plan.k : plan.k16).rows(t0, n);
    b.v = (plan.v16.empty() ? plan.v : plan.v16).rows(t0, n);
    if (with_grads) {
      b.dk = plan.dk.rows(t0, n);
      b.dv = plan.dv.rows(t0, n);
    }
    b.idx0 = ctx.attn.q_idx0 + t0;
    b.doc = ctx.attn.q_doc ? ctx.attn.q_doc + t0 : nullptr;
    blocks.push_back(b);
  }
  return {blocks.data(), blocks.size()};
}

// Attention over the earlier pages, group by group, then the chunk's own K/V with the last group:
// fn(q0, n, blocks, args) once per group for query rows [q0, q0 + n), args.first / args.last
// marking the fold's ends. One group (all pages resident) is one call over every block.
// heads: per block of the groups, the kv head groups reading it (sparse; empty: all).
template <typename Fn>
void fold_groups(const LayerCtx& ctx, LayerBuffers& plan, bool with_grads, PrefixBlocks* prefix, int64_t q0,
                 int64_t rows, std::span<const uint64_t> heads, Fn fn) {
  const int64_t n = prefix ? prefix->groups() : 0;
  AttnArgs a = ctx.attn;
  a.q_idx0 += q0;
  if (a.q_doc) a.q_doc += q0;
  a.run_sum = plan.run_sum.rows(q0, rows);
  if (with_grads && !plan.q16.empty()) a.q16 = plan.q16.rows(q0, rows), a.dout16 = plan.do16.rows(q0, rows);
  static thread_local std::vector<KVBlock> masked;
  size_t seen = 0;  // blocks of earlier groups
  auto with_heads = [&](std::span<const KVBlock> blocks) {
    if (heads.empty()) return blocks;
    masked.assign(blocks.begin(), blocks.end());
    for (KVBlock& b : masked) b.heads = heads[seen++];
    return std::span<const KVBlock>(masked);
  };
  for (int64_t i = 0; i + 1 < n; ++i) {
    a.first = i == 0;
    a.last = false;
    fn(q0, rows, with_heads(prefix->acquire(i)), a);
    prefix->release(i);
  }
  a.first = n <= 1;
  a.last = true;
  fn(q0, rows, with_own_blocks(ctx, plan, n > 0 ? with_heads(prefix->acquire(n - 1)) : std::span<const KVBlock>{}, with_grads), a);
  if (n > 0) prefix->release(n - 1);
}

// The cache's layer holding head group j's pages of this layer (--sp-head-chunks K: K per layer).
int64_t cache_layer(const LayerCtx& ctx, int64_t j) { return ctx.layer * ctx.head_chunks + j; }

// x and y (one shape, f32) cast into bf16 copies x16, y16 side by side at the start of `scratch`
// (bf16), where both fit; else x16, y16 empty.
void bf16_pair(Backend& be, const Tensor& scratch, const Tensor& x, const Tensor& y, Tensor& x16, Tensor& y16) {
  x16 = y16 = Tensor();
  const int64_t n = x.numel();
  if (scratch.empty() || 2 * n > scratch.numel()) return;
  x16 = y16 = x;
  x16.dtype = y16.dtype = DType::BF16, x16.tier = y16.tier = scratch.tier;
  x16.data = scratch.data, y16.data = static_cast<uint16_t*>(scratch.data) + n;
  be.cast(x, x16);
  be.cast(y, y16);
}

// --precision bf16 (K/V hold bf16 values, whatever the pages' dtype): the chunk's own K and V cast
// into bf16 copies, plan.k16 and plan.v16, in the matmul scratch x16, which no matmul reads while
// attention runs; attention then reads every key as bf16, as it reads the pages (CUDA's tensor-core
// kernels take bf16 rows by cp.async, f32 rows by plain loads). The same values, so the same bits
// on every backend. Otherwise (or where they do not fit in x16) attention reads k and v.
void own_kv16(const LayerCtx& ctx, LayerBuffers& plan) {
  if (ctx.bf16 && ctx.kv_bf16) bf16_pair(ctx.be, plan.x16, plan.k, plan.v, plan.k16, plan.v16);
  else plan.k16 = plan.v16 = Tensor();
}

// --precision bf16, backward: q and dO (T, h, D), which hold bf16 values, cast into bf16 copies,
// plan.q16 and plan.do16, in the matmul scratch dy16, which no matmul reads while attention's
// backward runs (o_proj's backward is done, q's, k's and v's not begun); handed to attention beside
// q and dO (AttnArgs::q16, dout16), so that CUDA's tensor-core dK/dV kernel streams half the bytes
// per query tile and converts none. The same values, so the same bits on every backend. dy16's rows
// are wide enough (2 H D at least: LayerPlan).
void qdo16(const LayerCtx& ctx, LayerBuffers& plan, const Tensor& q, const Tensor& dout) {
  if (ctx.bf16) bf16_pair(ctx.be, plan.dy16, q, dout, plan.q16, plan.do16);
  else plan.q16 = plan.do16 = Tensor();
}

// Dense: every row over every earlier page (of head group j's layer). Sparse: each run of query
// rows over its chosen pages. The chunk's own K/V as own_kv16 gives them, for these calls only.
template <typename Fn>
void attend(const LayerCtx& ctx, LayerBuffers& plan, bool with_grads, std::span<const SparseRun> runs, int64_t j,
            Fn fn) {
  own_kv16(ctx, plan);
  if (!ctx.sparse) {
    PrefixBlocks* prefix = ctx.pages ? &ctx.pages->prefix(cache_layer(ctx, j), ctx.attn.q_idx0, with_grads) : nullptr;
    fold_groups(ctx, plan, with_grads, prefix, 0, plan.k.dim(0), {}, fn);
  } else {
    for (const SparseRun& r : runs) {
      PrefixBlocks* pb = r.pages.empty()
                             ? nullptr
                             : &ctx.sparse_cache->prefix_pages(ctx.layer, ctx.attn.q_idx0, with_grads, r.pages);
      fold_groups(ctx, plan, with_grads, pb, r.q0, r.q1 - r.q0, r.heads, fn);
    }
  }
  plan.k16 = plan.v16 = Tensor();  // x16 is the matmuls' again
}

// The runs of this chunk's sparse attention: chosen from q (forward sweep) or recalled.
std::span<const SparseRun> sparse_runs(const LayerCtx& ctx, const Tensor& q, bool choose) {
  if (!ctx.sparse) return {};
  const int64_t T = q.dim(0), begin = ctx.attn.q_idx0;
  if (!choose) return ctx.sparse->recall(ctx.layer, begin, T);
  const KVCacheOptions& o = ctx.sparse_cache->options();
  const int64_t np = o.kv.pages_for(begin);
  return ctx.sparse->choose(ctx.layer, begin, q, ctx.sparse_cache->page_meta().meta(ctx.layer, np),
                            o.first_page(ctx.layer, begin));
}

// --precision bf16: x (f32) rounded in place to bf16 values, where attention reads it as f32.
void to_bf16(const LayerCtx& ctx, Tensor& x) {
  if (ctx.bf16) ctx.be.round_bf16(x);
}
// The attention output kept in bf16 (LayerBuffers::kept_o16; none: o is kept where it is): into it
// from the plan's f32 o once attention wrote it, and back before o is read again (exact: the
// values are bf16).
void o_to_kept(const LayerCtx& ctx, LayerBuffers& plan) {
  if (!plan.kept_o16.empty()) ctx.be.cast(plan.acts.o, plan.kept_o16);
}
void o_from_kept(const LayerCtx& ctx, LayerBuffers& plan) {
  if (!plan.kept_o16.empty()) ctx.be.cast(plan.kept_o16, plan.acts.o);
}
// A matmul's operand x (T, n) f32: itself, or under --precision bf16 its bf16 copy, cast into
// `to` (plan.x16, plan.dy16 or plan.lora_u16). x itself stays fp32.
Tensor bf16_operand(const Tensor& x, const Tensor& to) {
  Tensor t(to.data, DType::BF16, {x.dim(0), x.dim(1)}, to.tier);
  OOMB_CHECK(x.ndim == 2 && t.numel() <= to.numel(), "layer: {} does not fit the bf16 matmul scratch {}",
             x.shape_str(), to.shape_str());
  return t;
}
Tensor for_matmul(const LayerCtx& ctx, const Tensor& x, const Tensor& to) {
  if (!ctx.bf16) return x;
  Tensor t = bf16_operand(x, to);
  ctx.be.cast(x, t);
  return t;
}

// The norm of a residual branch's output (ModelConfig::post_norm): its weight and its rstd's activation.
// OLMo 2's are its only norms (attn_norm, mlp_norm; rstd1, rstd2), Gemma 3's and GLM-4's their second
// pair (attn_post_norm, mlp_post_norm; rstd3, rstd4).
struct BranchNorm {
  Tensor LayerParams::* w;
  Tensor LayerActs::* rstd;
};
BranchNorm branch_norm(const ModelConfig& c, bool mlp) {
  if (!c.pre_norm()) return mlp ? BranchNorm{&LayerParams::mlp_norm, &LayerActs::rstd2}
                                : BranchNorm{&LayerParams::attn_norm, &LayerActs::rstd1};
  return mlp ? BranchNorm{&LayerParams::mlp_post_norm, &LayerActs::rstd4}
             : BranchNorm{&LayerParams::attn_post_norm, &LayerActs::rstd3};
}

// A residual branch's output (o_proj's, down's; (T, d) f32) made what its residual add takes, in out:
// Granite's times residual_multiplier (in place: the matmul wrote out itself);
// OLMo 2, Gemma 3, GLM-4 (post_norm): the branch's matmul wrote y (LayerActs::y1, y2), and out = norm(y)
// (its weight w, its rstd saved) is what the residual add takes.
void finish_branch(const LayerCtx& ctx, const Tensor& y, const Tensor& w, Tensor& rstd, Tensor& out) {
  if (ctx.cfg.post_norm()) ctx.be.rmsnorm_fwd(y, w, float(ctx.cfg.rms_norm_eps), out, rstd, ctx.cfg.norm_offset());
  else if (ctx.cfg.residual_multiplier != 1.0) ctx.be.scale(out, float(ctx.cfg.residual_multiplier));
}
// Its backward: the branch's output gradient from the residual stream's dh (T, d), as its matmul
// reads it: for_matmul(dh), or with Granite's multiplier m, m dh in f32 `scratch` (T, d) (bf16: m dh
// rounded once into dy16); OLMo 2, Gemma 3, GLM-4: dh through the branch's norm into `scratch` (dw += its
// weight's gradient), cast as for_matmul casts.
Tensor branch_grad(const LayerCtx& ctx, const Tensor& dh, Tensor& scratch, const Tensor& dy16, const Tensor& y,
                   const Tensor& w, const Tensor& rstd, Tensor& dw) {
  if (ctx.cfg.post_norm()) {
    ctx.be.rmsnorm_bwd(y, w, rstd, dh, scratch, false, dw, ctx.cfg.norm_offset());
    return for_matmul(ctx, scratch, dy16);
  }
  const double m = ctx.cfg.residual_multiplier;
  if (m == 1.0) return for_matmul(ctx, dh, dy16);
  Tensor t = ctx.bf16 ? bf16_operand(dh, dy16) : scratch;
  ctx.be.scale(dh, float(m), t);
  return t;
}

// q's or k's rows as their norm takes them: each head's (Qwen3, Gemma 3: (T heads, D)) or each token's
// whole projection (OLMo 2: (T, heads D)); and the norm's rstd for those rows, from its plan tensor.
Tensor qk_rows(const LayerCtx& ctx, const Tensor& t) { return ctx.cfg.qk_norm_full() ? flat2(t) : heads2(t); }
Tensor qk_rstd(const LayerCtx& ctx, const Tensor& r, const Tensor& t) { return flat1(r).rows(0, qk_rows(ctx, t).dim(0)); }

// OLMo 2 (no pre_norm): the attention's and the MLP's input is the residual stream itself, x (T, d) f32;
// the matmuls read it, or under --precision bf16 its copy `copy` (LayerActs::a, ::b), cast once in
// the forward. Elsewhere the branch norm's output, `copy` itself.
bool reads_stream(const LayerCtx& ctx) { return !ctx.cfg.pre_norm() && !ctx.bf16; }
const Tensor& branch_input(const LayerCtx& ctx, const Tensor& x, const Tensor& copy) {
  return reads_stream(ctx) ? x : copy;
}

// --lora-dropout while training: adapter t's mask in this layer (its rows the token side's tokens); the
// parts of a fused linear (Phi-3's q, k, v) share its one adapter's mask, as PEFT drops its input once.
DropoutMask lora_mask(const LayerCtx& ctx, int t) {
  return dropout_mask(dropout_module_key(ctx.dropout_key, ctx.layer, lora_module(ctx.cfg, t)), ctx.tok0,
                      ctx.lora_dropout);
}
// The adapter's input: x, or with --lora-dropout x dropped (PEFT's nn.Dropout before lora_A) into
// plan.lora_z, free until the adapter's output goes there; x's dtype.
Tensor lora_input(const LayerCtx& ctx, int t, const Tensor& x, LayerBuffers& plan) {
  if (ctx.lora_dropout <= 0) return x;
  Tensor xd(plan.lora_z.data, x.dtype, {x.dim(0), x.dim(1)}, plan.lora_z.tier);
  OOMB_CHECK(xd.bytes() <= plan.lora_z.bytes(), "layer: LoRA's dropped input {} does not fit its scratch {}",
             x.shape_str(), plan.lora_z.shape_str());
  ctx.be.dropout(x, lora_mask(ctx, t), xd, false);
  return xd;
}

// LoRA beside a frozen linear (nothing where the slot has no adapter): y (T, out) += s (x' A^T) B^T,
// x' = x or (--lora-dropout) x dropped. x: the base matmul's operand (T, in), f32 or under
// --precision bf16 its bf16 copy; then A and B are the adapters' bf16 copy and u is cast to bf16 for
// the second GEMM (PEFT under autocast: every adapter GEMM reads bf16 operands, accumulating in fp32;
// but x' is bf16(x16 s), the bf16 x scaled and rounded again, where PEFT's would be x s rounded once:
// the layer keeps no f32 x).
void lora_fwd(const LayerCtx& ctx, const LayerParams& p, int t, const Tensor& x, Tensor& y, LayerBuffers& plan) {
  const LoraPair& l = p.lora[t];
  if (l.a.empty()) return;
  Backend& be = ctx.be;
  Tensor u = plan.lora_u.rows(0, x.dim(0)), z(plan.lora_z.data, DType::F32, {y.dim(0), y.dim(1)}, y.tier);
  be.linear_fwd(lora_input(ctx, t, x, plan), l.a, nullptr, u);  // u = s x' A^T (T, r)
  be.scale(u, p.lora_scale);
  be.linear_fwd(for_matmul(ctx, u, plan.lora_u16), l.b, nullptr, z);  // z = u B^T (T, out)
  be.add(y, z);
}

// Its backward from dy (T, out) (f32, or bf16 as x): u = s x' A^T (recomputed, x' with the same
// mask); du = s dy B; dB += dy^T u; dA += du^T x'; dx += du A, or with dropout dx += mask (du A) /
// (1 - p) (du A into lora_z once x' there is read). (bf16: u, then du, cast into one (T, r) scratch.)
void lora_bwd(const LayerCtx& ctx, const LayerParams& p, LayerParams& g, int t, const Tensor& x, const Tensor& dy,
              Tensor* dx, LayerBuffers& plan) {
  const LoraPair& l = p.lora[t];
  if (l.a.empty()) return;
  Backend& be = ctx.be;
  Tensor u = plan.lora_u.rows(0, x.dim(0)), du = plan.lora_du.rows(0, x.dim(0));
  const Tensor xd = lora_input(ctx, t, x, plan);
  be.linear_fwd(xd, l.a, nullptr, u);
  be.scale(u, p.lora_scale);
  be.linear_bwd(for_matmul(ctx, u, plan.lora_u16), l.b, dy, &du, false, &g.lora[t].b, nullptr);
  be.scale(du, p.lora_scale);
  const Tensor du16 = for_matmul(ctx, du, plan.lora_u16);
  if (ctx.lora_dropout <= 0) return be.linear_bwd(x, l.a, du16, dx, true, &g.lora[t].a, nullptr);
  be.linear_bwd(xd, l.a, du16, nullptr, false, &g.lora[t].a, nullptr);
  if (!dx) return;
  Tensor dxd(plan.lora_z.data, DType::F32, {x.dim(0), x.dim(1)}, plan.lora_z.tier);
  be.linear_bwd(x, l.a, du16, &dxd, false, nullptr, nullptr);  // du A (x: its shape; no dA)
  be.dropout(dxd, lora_mask(ctx, t), *dx, true);
}

// --sp: the all-to-all between the token side (t, h, D) and the attention side (T, h/(P K), D) of
// head group j; with one rank both are the same tensor and nothing moves.
void to_heads(const LayerCtx& ctx, const Tensor& loc, Tensor& att, int64_t j) {
  if (loc.data == att.data) return;
  OOMB_CHECK(ctx.sp != nullptr, "layer: token and attention sides differ without --sp");
  ctx.sp->to_heads(loc, att, j, ctx.head_chunks);
}
void to_tokens(const LayerCtx& ctx, const Tensor& att, Tensor& loc, int64_t j) {
  if (loc.data == att.data) return;
  OOMB_CHECK(ctx.sp != nullptr, "layer: token and attention sides differ without --sp");
  ctx.sp->to_tokens(att, loc, j, ctx.head_chunks);
}

// The head groups' shapes agree: K groups of the attention side's kv heads make the model's.
void check_groups(const LayerCtx& ctx, const LayerBuffers& plan) {
  const int64_t K = ctx.head_chunks, P = ctx.sp ? ctx.sp->size() : 1;
  OOMB_CHECK(K >= 1 && plan.k.dim(1) * K * P == ctx.cfg.kv_heads, "layer: {} kv heads in {} head groups of {} ranks "
             "are not the model's {}", plan.k.dim(1), K, P, ctx.cfg.kv_heads);
  OOMB_CHECK(K == 1 || !ctx.sparse, "layer: head groups with sparse attention");
}

}  // namespace

Tensor& norm_grad(Tensor& g, const Tensor& w, LayerBuffers& b) {
  if (!g.empty()) return g;
  OOMB_CHECK(w.dim(0) <= b.discard.dim(0), "layer: a frozen norm of {} exceeds its gradient scratch of {}", w.dim(0),
             b.discard.dim(0));
  b.discard_as = b.discard.rows(0, w.dim(0));
  return b.discard_as;
}

// The widest norm weight (frozen norms' gradients go to scratch this wide): d, D, or OLMo's q norm's H D.
static int64_t norm_width(const ModelConfig& c) {
  return std::max({c.hidden, c.head_dim, c.qk_norm_full() ? c.heads * c.head_dim : int64_t(0)});
}

// The widest output a LoRA adapter writes: q, k, v, o, gate, up or down.
static int64_t lora_widest(const ModelConfig& c) {
  return std::max({c.heads * c.head_dim, c.kv_heads * c.head_dim, c.hidden, c.intermediate});
}
// The widest matmul operand row (--precision bf16's scratch): d, H D or I (G D <= H D).
static int64_t matmul_width(const ModelConfig& c) { return std::max({c.hidden, c.heads * c.head_dim, c.intermediate}); }
// dy16's row: a matmul's output gradient, or attention's bf16 copies of q and dO side by side (qdo16)
static int64_t dy16_width(const ModelConfig& c) { return std::max(matmul_width(c), 2 * c.heads * c.head_dim); }

LayerPlan::LayerPlan(const ModelConfig& c, int64_t T, Tier tier, int64_t lora_rank, bool bf16, int64_t sp,
                     int64_t head_chunks)
    : sp_(sp) {
  const int64_t d = c.hidden, H = c.heads, G = c.kv_heads, D = c.head_dim, I = c.intermediate, K = head_chunks;
  OOMB_CHECK(sp >= 1 && T % sp == 0 && H % sp == 0 && G % sp == 0, "layer plan: {} tokens, {} heads and {} kv heads "
             "are not divisible by --sp {}", T, H, G, sp);
  OOMB_CHECK(K >= 1 && G % (sp * K) == 0 && (K == 1 || sp > 1), "layer plan: {} kv heads on --sp {} ranks do not "
             "split into --sp-head-chunks {}", G, sp, K);
  // the token side's tokens, the attention side's heads (one head group's)
  const int64_t t = T / sp, Ha = H / (sp * K), Ga = G / (sp * K);
  arena_ = Arena(tier, Tag::Activations, size_t(bytes(c, T, lora_rank, bf16, sp, K)));
  auto f = [&](std::initializer_list<int64_t> s) { return arena_.take(DType::F32, s); };
  // what only matmuls read: bf16 under --precision bf16 (its op writes it rounded)
  auto m = [&](std::initializer_list<int64_t> s) { return arena_.take(bf16 ? DType::BF16 : DType::F32, s); };
  LayerBuffers& b = all_;
  LayerActs& A = b.acts;
  // (no pre_norm, in fp32: the matmuls read h_in and hmid themselves, and no gradient goes through db)
  const bool copies = c.pre_norm() || bf16;
  if (copies) A.a = m({t, d});
  A.rstd1 = f({t});
  A.q = f({T, Ha, D});
  A.o = f({T, Ha, D});
  A.lse = f({T, Ha});
  A.hmid = f({t, d});
  if (copies) A.b = m({t, d});
  A.rstd2 = f({t});
  A.gate = f({t, I});
  A.up = f({t, I});
  A.act = m({t, I});
  LayerGradScratch& g = b.g;
  g.dq = f({T, Ha, D});
  g.dattn = f({T, Ha, D});
  g.da = f({t, d});
  if (c.pre_norm()) g.db = f({t, d});
  g.dgate = m({t, I});
  g.dup = m({t, I});
  g.dact = f({t, I});
  if (c.qk_norm) {
    A.q_raw = f({t, H, D});
    A.k_raw = f({t, G, D});
    A.rstd_q = f({t, H});
    A.rstd_k = f({t, G});
    g.dq_raw = f({t, H, D});
    g.dk_raw = f({t, G, D});
  }
  if (c.post_norm()) {
    A.y1 = f({t, d});
    A.y2 = f({t, d});
  }
  if (c.post_norm() && c.pre_norm()) {
    A.rstd3 = f({t});
    A.rstd4 = f({t});
  }
  b.k = f({T, Ga, D});
  b.v = f({T, Ga, D});
  b.dk = f({T, Ga, D});
  b.dv = f({T, Ga, D});
  b.run_sum = f({T, Ha});
  if (sp > 1) {
    b.q_loc = b.dq_loc = f({t, H, D});
    b.o_loc = f({t, H, D});
    b.dattn_loc = f({t, H, D});
    b.k_loc = b.dk_loc = f({t, G, D});
    b.v_loc = b.dv_loc = f({t, G, D});
  } else {
    b.q_loc = A.q, b.o_loc = A.o, b.dattn_loc = g.dattn, b.k_loc = b.k, b.v_loc = b.v;
    b.dq_loc = g.dq, b.dk_loc = b.dk, b.dv_loc = b.dv;
  }
  if (lora_rank > 0) {
    b.lora_u = f({t, lora_rank});
    b.lora_du = f({t, lora_rank});
    b.lora_z = f({t, lora_widest(c)});
    b.discard = f({norm_width(c)});
  }
  if (bf16) {
    b.x16 = arena_.take(DType::BF16, {t, matmul_width(c)});
    b.dy16 = arena_.take(DType::BF16, {t, dy16_width(c)});
    if (lora_rank > 0) b.lora_u16 = arena_.take(DType::BF16, {t, lora_rank});
  }
}

LayerBuffers LayerBuffers::first(int64_t T, int64_t P) const {
  LayerBuffers r = *this;
  for (Tensor* t : {&r.acts.q, &r.acts.o, &r.acts.lse, &r.g.dq, &r.g.dattn, &r.k, &r.v, &r.dk, &r.dv, &r.run_sum})
    *t = t->rows(0, T);  // the attention side: every token
  for (Tensor* t : {&r.acts.a, &r.acts.rstd1, &r.acts.hmid, &r.acts.b, &r.acts.rstd2, &r.acts.gate, &r.acts.up,
                    &r.acts.act, &r.g.da, &r.g.db, &r.g.dgate, &r.g.dup, &r.g.dact, &r.acts.q_raw, &r.acts.k_raw,
                    &r.acts.rstd_q, &r.acts.rstd_k, &r.g.dq_raw, &r.g.dk_raw, &r.acts.y1, &r.acts.y2, &r.acts.rstd3, &r.acts.rstd4, &r.lora_u, &r.lora_du, &r.lora_z,
                    &r.x16, &r.dy16, &r.lora_u16, &r.q_loc, &r.o_loc, &r.dattn_loc, &r.k_loc, &r.v_loc, &r.dq_loc, &r.dk_loc, &r.dv_loc})
    *t = t->rows(0, T / P);  // the token side: this rank's tokens
  return r;
}

int64_t LayerPlan::bytes(const ModelConfig& c, int64_t T, int64_t lora_rank, bool bf16, int64_t sp,
                         int64_t head_chunks) {
  const int64_t d = c.hidden, H = c.heads, G = c.kv_heads, D = c.head_dim, I = c.intermediate;
  const int64_t t = T / sp, Ha = H / (sp * head_chunks), Ga = G / (sp * head_chunks);
  auto n = [](std::initializer_list<int64_t> s) { return int64_t(Arena::need(DType::F32, s)); };
  const DType op = bf16 ? DType::BF16 : DType::F32;  // a, b, act, dgate, dup: the matmuls' operands
  const int64_t copies = c.pre_norm() || bf16 ? 2 * int64_t(Arena::need(op, {t, d})) : 0;  // a, b
  const int64_t operands = copies + 3 * int64_t(Arena::need(op, {t, I}));
  const int64_t qk_norm = c.qk_norm ? 2 * n({t, H, D}) + 2 * n({t, G, D}) + n({t, H}) + n({t, G}) : 0;
  const int64_t lora =
      lora_rank > 0 ? 2 * n({t, lora_rank}) + n({t, lora_widest(c)}) + n({norm_width(c)}) : 0;
  const int64_t bf16_scratch = bf16 ? int64_t(Arena::need(DType::BF16, {t, matmul_width(c)})) +
                                           int64_t(Arena::need(DType::BF16, {t, dy16_width(c)})) +
                                           (lora_rank > 0 ? int64_t(Arena::need(DType::BF16, {t, lora_rank})) : 0)
                                     : 0;
  const int64_t exchange = sp > 1 ? 3 * n({t, H, D}) + 2 * n({t, G, D}) : 0;
  // y1 and y2, less db (OLMo 2), or with rstd3 and rstd4 (Gemma 3, GLM-4)
  const int64_t post_norm = !c.post_norm() ? 0 : c.pre_norm() ? 2 * n({t, d}) + 2 * n({t}) : n({t, d});
  return operands + 3 * n({t, d}) + 2 * n({t}) + 4 * n({T, Ha, D}) + 2 * n({T, Ha}) + 3 * n({t, I}) +
         4 * n({T, Ga, D}) + qk_norm + lora + bf16_scratch + exchange + post_norm;
}

static void layer_output(const LayerCtx& ctx, const LayerParams& p, const Tensor& h_in, Tensor& h_out,
                         LayerBuffers& plan);

void layer_forward(const LayerCtx& ctx, const LayerParams& p, const Tensor& h_in, Tensor& h_out, LayerBuffers& plan,
                   LayerPass pass) {
  Backend& be = ctx.be;
  LayerActs& A = plan.acts;
  check_groups(ctx, plan);
  const float eps = float(ctx.cfg.rms_norm_eps), off = ctx.cfg.norm_offset();
  if (pass == LayerPass::OutputOnly) {  // o from the kept attention output: the token side's, each head group's
    for (int64_t j = 0; j < ctx.head_chunks; ++j) {
      plan.keep_group(j);
      o_from_kept(ctx, plan);
      to_tokens(ctx, A.o, plan.o_loc, j);  // --sp: o (T, H/(P K), D) -> (t, H, D)
    }
    return layer_output(ctx, p, h_in, h_out, plan);
  }
  // (--precision bf16: each matmul reads bf16 operands, written so by the op before it or cast
  // below; LoRA's adapters read the same ones as their base linear)
  const Tensor& a = branch_input(ctx, h_in, A.a);  // (T, d), read by k, v and q
  if (ctx.cfg.pre_norm()) be.rmsnorm_fwd(h_in, p.attn_norm, eps, A.a, A.rstd1, off);
  else if (ctx.bf16) be.cast(h_in, A.a);  // (OLMo 2: a = h_in)
  const bool qk = !p.q_norm.empty();  // Qwen3, OLMo 2, Gemma 3: q, k = rmsnorm(proj(a)) before RoPE (qk_rows)
  Tensor k2 = flat2(qk ? A.k_raw : plan.k_loc), v2 = flat2(plan.v_loc);
  be.linear_fwd(a, p.wk, opt(p.bk), k2);
  lora_fwd(ctx, p, kK, a, k2, plan);
  be.linear_fwd(a, p.wv, opt(p.bv), v2);
  lora_fwd(ctx, p, kV, a, v2, plan);
  if (qk) {
    Tensor kn = qk_rows(ctx, plan.k_loc), rk = qk_rstd(ctx, A.rstd_k, A.k_raw);
    be.rmsnorm_fwd(qk_rows(ctx, A.k_raw), p.k_norm, eps, kn, rk, off);
  }
  const bool rope = ctx.cfg.rope_on(ctx.layer);  // (SmolLM3's NoPE layers: q and k as projected)
  if (rope) be.rope_fwd(plan.k_loc, ctx.pos, ctx.rope);
  if (ctx.kv_bf16) {  // the values bf16 pages will hold, for this chunk's own attention too
    be.round_bf16(plan.k_loc);
    be.round_bf16(plan.v_loc);
  }
  if (pass != LayerPass::KVOnly) {
    Tensor q2 = flat2(qk ? A.q_raw : plan.q_loc);
    be.linear_fwd(a, p.wq, opt(p.bq), q2);
    lora_fwd(ctx, p, kQ, a, q2, plan);
    if (qk) {
      Tensor qn = qk_rows(ctx, plan.q_loc), rq = qk_rstd(ctx, A.rstd_q, A.q_raw);
      be.rmsnorm_fwd(qk_rows(ctx, A.q_raw), p.q_norm, eps, qn, rq, off);
    }
    if (rope) be.rope_fwd(plan.q_loc, ctx.pos, ctx.rope);
    to_bf16(ctx, plan.q_loc);
  }
  // Attention, head group by head group (one group: all of this rank's heads). The recompute
  // before a backward with several groups exchanges no q, k, v: the backward exchanges each
  // group's again, as it reaches it.
  const bool exchange_qkv = pass != LayerPass::SavedAttention || ctx.head_chunks == 1;
  for (int64_t j = 0; j < ctx.head_chunks; ++j) {
    plan.keep_group(j);
    if (exchange_qkv) {
      to_heads(ctx, plan.k_loc, plan.k, j);  // --sp: k, v (t, G, D) -> (T, G/(P K), D)
      to_heads(ctx, plan.v_loc, plan.v, j);
    }
    if (pass != LayerPass::KVOnly) {
      if (exchange_qkv) to_heads(ctx, plan.q_loc, A.q, j);  // --sp: q (t, H, D) -> (T, H/(P K), D)
      if (pass != LayerPass::SavedAttention) {  // o (T, H, D), lse (T, H) over earlier pages + own K/V
        attend(ctx, plan, false, sparse_runs(ctx, A.q, ctx.sparse_choose), j,
               [&](int64_t q0, int64_t n, std::span<const KVBlock> blocks, const AttnArgs& a) {
                 Tensor o = A.o.rows(q0, n), lse = A.lse.rows(q0, n);
                 be.attention_fwd(A.q.rows(q0, n), blocks, a, o, lse);
               });
        to_bf16(ctx, A.o);  // attention's backward reads o too: the bf16 values, kept in f32
        o_to_kept(ctx, plan);
      } else {
        o_from_kept(ctx, plan);
      }
    }
    if (ctx.kv_write) ctx.kv_write->write(cache_layer(ctx, j), ctx.attn.q_idx0, plan.k, plan.v);
    if (pass != LayerPass::KVOnly) to_tokens(ctx, A.o, plan.o_loc, j);  // --sp: o (T, H/(P K), D) -> (t, H, D)
  }
  if (pass == LayerPass::KVOnly) return;
  layer_output(ctx, p, h_in, h_out, plan);
}

// The rest of a layer's forward from the token side's attention output o_loc: h_out = hmid +
// down(act(gate(b)) up(b)), hmid = h_in + o_proj(o), b = norm2(hmid) (act: silu, Gemma 3's gelu_tanh;
// Granite: each branch, down and o_proj, times residual_multiplier; OLMo 2: hmid = h_in + norm1(y1),
// y1 = o_proj(o), b = hmid, h_out = hmid + norm2(y2), y2 = down(...); Gemma 3, GLM-4: hmid = h_in + norm1'(y1),
// h_out = hmid + norm2'(y2), b = norm2(hmid)).
static void layer_output(const LayerCtx& ctx, const LayerParams& p, const Tensor& h_in, Tensor& h_out,
                         LayerBuffers& plan) {
  Backend& be = ctx.be;
  LayerActs& A = plan.acts;
  const float eps = float(ctx.cfg.rms_norm_eps);
  const bool post = ctx.cfg.post_norm();
  const BranchNorm n1 = branch_norm(ctx.cfg, false), n2 = branch_norm(ctx.cfg, true);
  const Tensor o = for_matmul(ctx, flat2(plan.o_loc), plan.x16);  // (T, H D)
  Tensor& y1 = post ? A.y1 : A.hmid;
  be.linear_fwd(o, p.wo, opt(p.bo), y1);
  lora_fwd(ctx, p, kO, o, y1, plan);
  finish_branch(ctx, y1, p.*n1.w, A.*n1.rstd, A.hmid);
  be.add(A.hmid, h_in);
  const Tensor& b = branch_input(ctx, A.hmid, A.b);  // (T, d), read by gate and up
  if (ctx.cfg.pre_norm()) be.rmsnorm_fwd(A.hmid, p.mlp_norm, eps, A.b, A.rstd2, ctx.cfg.norm_offset());
  else if (ctx.bf16) be.cast(A.hmid, A.b);
  be.linear_fwd(b, p.wgate, opt(p.bgate), A.gate);
  lora_fwd(ctx, p, kGate, b, A.gate, plan);
  be.linear_fwd(b, p.wup, opt(p.bup), A.up);
  lora_fwd(ctx, p, kUp, b, A.up, plan);
  const Tensor& act = A.act;  // (T, I)
  be.glu_fwd(A.gate, A.up, A.act, ctx.cfg.mlp_act());
  Tensor& y2 = post ? A.y2 : h_out;
  be.linear_fwd(act, p.wdown, opt(p.bdown), y2);
  lora_fwd(ctx, p, kDown, act, y2, plan);
  finish_branch(ctx, y2, p.*n2.w, A.*n2.rstd, h_out);
  be.add(h_out, A.hmid);
}

void layer_backward(const LayerCtx& ctx, const LayerParams& p, LayerParams& g, const Tensor& h_in, Tensor& dh,
                    LayerBuffers& plan) {
  Backend& be = ctx.be;
  LayerActs& A = plan.acts;
  LayerGradScratch& S = plan.g;
  // MLP: h_out = hmid + down(act(gate(b)) up(b)), b = norm2(hmid) (OLMo 2: h_out = hmid + norm2(y2),
  // y2 = down(act(gate(hmid)) up(hmid)); Gemma 3, GLM-4: h_out = hmid + norm2'(y2), b = norm2(hmid))
  // (frozen weights under LoRA have no gradient tensors: opt(g.w) is null, and lora_bwd adds the
  // adapters' part of each input gradient)
  // (--precision bf16: each matmul's input and output gradient bf16, as in the forward: the
  // forward's a, b and act as their ops wrote them, dgate and dup so written, the rest cast)
  // (Granite: each branch's output gradient times residual_multiplier, in da until q's backward)
  // (OLMo 2, Gemma 3: each branch's output gradient through its norm, into da; OLMo 2's branch input is
  // the residual stream, so its gradient adds to dh directly)
  const bool pre = ctx.cfg.pre_norm();
  const float off = ctx.cfg.norm_offset();
  const BranchNorm n1 = branch_norm(ctx.cfg, false), n2 = branch_norm(ctx.cfg, true);
  const Tensor& act = A.act;
  const Tensor dh_out =
      branch_grad(ctx, dh, S.da, plan.dy16, A.y2, p.*n2.w, A.*n2.rstd, norm_grad(g.*n2.w, p.*n2.w, plan));
  be.linear_bwd(act, p.wdown, dh_out, &S.dact, false, opt(g.wdown), opt(g.bdown));
  lora_bwd(ctx, p, g, kDown, act, dh_out, &S.dact, plan);
  const Tensor &dgate = S.dgate, &dup = S.dup, &b = branch_input(ctx, A.hmid, A.b);
  Tensor& db = pre ? S.db : dh;  // (OLMo 2: b = hmid, dh := dh + dL/db)
  be.glu_bwd(A.gate, A.up, S.dact, S.dgate, S.dup, ctx.cfg.mlp_act());
  be.linear_bwd(b, p.wgate, dgate, &db, !pre, opt(g.wgate), opt(g.bgate));
  lora_bwd(ctx, p, g, kGate, b, dgate, &db, plan);
  be.linear_bwd(b, p.wup, dup, &db, true, opt(g.wup), opt(g.bup));
  lora_bwd(ctx, p, g, kUp, b, dup, &db, plan);
  if (pre)  // dh := dL/dhmid
    be.rmsnorm_bwd(A.hmid, p.mlp_norm, A.rstd2, S.db, dh, true, norm_grad(g.mlp_norm, p.mlp_norm, plan), off);
  // Attention: hmid = h_in + o_proj(attn(rope(q(a)), rope(k(a)), v(a))), a = norm1(h_in) (OLMo 2: hmid =
  // h_in + norm1(y1), y1 = o_proj(...), a = h_in, q and k through their norms before RoPE)
  Tensor dattn2 = flat2(plan.dattn_loc);
  const Tensor o = for_matmul(ctx, flat2(plan.o_loc), plan.x16);
  const Tensor dhmid =
      branch_grad(ctx, dh, S.da, plan.dy16, A.y1, p.*n1.w, A.*n1.rstd, norm_grad(g.*n1.w, p.*n1.w, plan));
  be.linear_bwd(o, p.wo, dhmid, &dattn2, false, opt(g.wo), opt(g.bo));
  lora_bwd(ctx, p, g, kO, o, dhmid, &dattn2, plan);
  to_bf16(ctx, plan.dattn_loc);  // dO feeds attention's backward matmuls
  check_groups(ctx, plan);
  // head group by head group; with several, each group's q, k, v cross again (the recompute did
  // not keep them). dq, dk, dv come back into q's, k's, v's token-side memory, in the group's own
  // columns: the later groups' q, k, v are still there.
  for (int64_t j = 0; j < ctx.head_chunks; ++j) {
    plan.keep_group(j);
    if (ctx.head_chunks > 1) {  // (one group: the recompute left them, o included)
      o_from_kept(ctx, plan);
      to_heads(ctx, plan.q_loc, A.q, j);
      to_heads(ctx, plan.k_loc, plan.k, j);
      to_heads(ctx, plan.v_loc, plan.v, j);
    }
    to_heads(ctx, plan.dattn_loc, S.dattn, j);  // --sp: dO (t, H, D) -> (T, H/(P K), D)
    // dK/dV of the chunk's own tokens start from what later chunks accumulated in their pages
    if (ctx.cache) {
      ctx.cache->own_grads(cache_layer(ctx, j), ctx.attn.q_idx0, plan.dk, plan.dv);
    } else {
      be.zero(plan.dk);
      be.zero(plan.dv);
    }
    qdo16(ctx, plan, A.q, S.dattn);
    attend(ctx, plan, true, sparse_runs(ctx, A.q, false), j,
           [&](int64_t q0, int64_t n, std::span<const KVBlock> blocks, const AttnArgs& a) {
             Tensor dq = S.dq.rows(q0, n);
             be.attention_bwd(A.q.rows(q0, n), A.o.rows(q0, n), A.lse.rows(q0, n), S.dattn.rows(q0, n), blocks, a,
                              dq);
           });
    plan.q16 = plan.do16 = Tensor();  // dy16 is the matmuls' again
    to_tokens(ctx, S.dq, plan.dq_loc, j);  // --sp: dq, dk, dv (T, h/(P K), D) -> (t, h, D)
    to_tokens(ctx, plan.dk, plan.dk_loc, j);
    to_tokens(ctx, plan.dv, plan.dv_loc, j);
  }
  if (ctx.cfg.rope_on(ctx.layer)) {  // (not on SmolLM3's NoPE layers)
    be.rope_bwd(plan.dq_loc, ctx.pos, ctx.rope);
    be.rope_bwd(plan.dk_loc, ctx.pos, ctx.rope);
  }
  Tensor dq = plan.dq_loc, dk = plan.dk_loc;  // gradients of the projections' outputs
  if (!p.q_norm.empty()) {  // through the q/k norms (Qwen3's per head, OLMo 2's per token)
    Tensor dqr = qk_rows(ctx, S.dq_raw), dkr = qk_rows(ctx, S.dk_raw);
    be.rmsnorm_bwd(qk_rows(ctx, A.q_raw), p.q_norm, qk_rstd(ctx, A.rstd_q, A.q_raw), qk_rows(ctx, plan.dq_loc), dqr,
                   false, norm_grad(g.q_norm, p.q_norm, plan), off);
    be.rmsnorm_bwd(qk_rows(ctx, A.k_raw), p.k_norm, qk_rstd(ctx, A.rstd_k, A.k_raw), qk_rows(ctx, plan.dk_loc), dkr,
                   false, norm_grad(g.k_norm, p.k_norm, plan), off);
    dq = S.dq_raw, dk = S.dk_raw;
  }
  // q, k were rotated in place; the projections' backward needs only their input a (OLMo 2: h_in,
  // whose gradient dh takes theirs directly)
  const Tensor& a = branch_input(ctx, h_in, A.a);
  Tensor& da = pre ? S.da : dh;
  const Tensor dq16 = for_matmul(ctx, flat2(dq), plan.dy16);
  be.linear_bwd(a, p.wq, dq16, &da, !pre, opt(g.wq), opt(g.bq));
  lora_bwd(ctx, p, g, kQ, a, dq16, &da, plan);
  const Tensor dk16 = for_matmul(ctx, flat2(dk), plan.dy16);
  be.linear_bwd(a, p.wk, dk16, &da, true, opt(g.wk), opt(g.bk));
  lora_bwd(ctx, p, g, kK, a, dk16, &da, plan);
  const Tensor dv16 = for_matmul(ctx, flat2(plan.dv_loc), plan.dy16);
  be.linear_bwd(a, p.wv, dv16, &da, true, opt(g.wv), opt(g.bv));
  lora_bwd(ctx, p, g, kV, a, dv16, &da, plan);
  if (pre)  // dh := dL/dh_in
    be.rmsnorm_bwd(h_in, p.attn_norm, A.rstd1, S.da, dh, true, norm_grad(g.attn_norm, p.attn_norm, plan), off);
}

}  // namespace oomb
