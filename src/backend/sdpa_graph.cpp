// The forward and backward attention graphs, node for node as cuDNN's frontend lowers its SDPA node
// (cudnn-frontend's CompositeSDPANode and CompositeSDPABackwardNode, read to learn the pattern
// cuDNN's fused engines recognise; no dropout, bias or padding; causal bottom-right; deterministic).
#include "backend/sdpa_graph.h"

#include <limits>
#include <sstream>
#include <stdexcept>

namespace oomb::sdpa {

namespace {

using Dims = std::array<int64_t, 4>;

class Builder {
 public:
  explicit Builder(const Shape& s) : s_(s) {}

  int64_t external(int64_t uid, const char* name, DType t, Dims dim, Dims stride) {
    g_.tensors.push_back({uid, name, t, dim, stride, false, false, 0});
    return uid;
  }
  int64_t scalar(const char* name, DType t, double v) {
    g_.tensors.push_back({next_++, name, t, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true, v});  // bound from the host
    return g_.tensors.back().uid;
  }
  int64_t temp(const char* name, DType t, Dims dim, Dims stride) {
    g_.tensors.push_back({next_++, name, t, dim, stride, true, false, 0});
    return g_.tensors.back().uid;
  }
  // a virtual tensor shaped as x
  int64_t like(int64_t x, const char* name, DType t) {
    const Tensor& tx = g_.tensor(x);
    return temp(name, t, tx.dim, tx.stride);
  }
  void node(Op op, const char* name, int64_t x, int64_t b, int64_t t, int64_t y, DType compute = DType::f32,
            int64_t axis = -1) {
    g_.nodes.push_back({op, name, x, b, t, y, axis, compute});
  }
  int64_t pointwise(Op op, const char* name, int64_t x, int64_t b, DType out = DType::f32) {
    const int64_t y = like(x, name, out);
    node(op, name, x, b, 0, y);
    return y;
  }

  // scores with keys beyond each query's diagonal (bottom-right) replaced by -inf
  int64_t causal_mask(int64_t scores) {
    const int64_t row = like(scores, "row", DType::i32), col = like(scores, "col", DType::i32);
    node(Op::gen_index, "gen_row_index", scores, 0, 0, row, DType::f32, 2);
    node(Op::gen_index, "gen_col_index", scores, 0, 0, col, DType::f32, 3);
    const int64_t row_skv = like(scores, "row+skv", DType::i32), diag = like(scores, "row+skv-sq", DType::i32);
    node(Op::add, "row+skv", row, scalar("s_kv", DType::i32, double(s_.kv_len)), 0, row_skv, DType::i32, 3);
    node(Op::sub, "row+skv-sq", row_skv, scalar("s_q", DType::i32, double(s_.q_len)), 0, diag, DType::i32, 3);
    const int64_t keep = like(scores, "keep", DType::boolean);
    node(Op::cmp_ge, "row+skv-sq>=col", diag, col, 0, keep, DType::boolean);
    const int64_t y = like(scores, "masked", DType::f32);
    node(Op::binary_select, "binary_select", scores, scalar("-inf", DType::f32, -std::numeric_limits<double>::infinity()),
         keep, y);
    return y;
  }

  Graph take() { return std::move(g_); }

 private:
  const Shape& s_;
  Graph g_;
  int64_t next_ = kFirstInternal;
};

void check(const Shape& s) {
  auto need = [](bool ok, const char* what) {
    if (!ok) throw std::invalid_argument(std::string("sdpa graph: ") + what);
  };
  need(s.heads >= 1 && s.kv_heads >= 1, "heads and kv_heads must be at least 1");
  need(s.heads % s.kv_heads == 0, "heads must be a multiple of kv_heads");
  need(s.q_len >= 1 && s.kv_len >= 1, "q_len and kv_len must be at least 1");
  need(s.dim >= 1, "dim must be at least 1");
  need(!s.causal || s.q_len <= s.kv_len, "causal attention needs q_len <= kv_len (bottom-right diagonal)");
  need(s.out == DType::bf16 || s.out == DType::f32, "out (the type of o, do, dq) must be bf16 or f32");
}

// oomb's token-major layouts, as cuDNN's (b, h, s, d)
Dims q_dim(const Shape& s) { return {1, s.heads, s.q_len, s.dim}; }
Dims q_stride(const Shape& s) { return {s.q_len * s.heads * s.dim, s.dim, s.heads * s.dim, 1}; }
Dims kv_dim(const Shape& s) { return {1, s.kv_heads, s.kv_len, s.dim}; }
Dims kv_stride(const Shape& s) { return {s.kv_len * s.kv_heads * s.dim, s.dim, s.kv_heads * s.dim, 1}; }
Dims kvt_dim(const Shape& s) { return {1, s.kv_heads, s.dim, s.kv_len}; }  // k^T over k's memory
Dims kvt_stride(const Shape& s) { return {s.kv_len * s.kv_heads * s.dim, s.dim, 1, s.kv_heads * s.dim}; }
Dims row_dim(const Shape& s) { return {1, s.heads, s.q_len, 1}; }  // stats, softmax_sum: (q_len, heads)
Dims row_stride(const Shape& s) { return {s.q_len * s.heads, 1, s.heads, 1}; }
Dims score_dim(const Shape& s) { return {1, s.heads, s.q_len, s.kv_len}; }
Dims score_stride(const Shape& s) { return {s.heads * s.q_len * s.kv_len, s.q_len * s.kv_len, s.kv_len, 1}; }
Dims score_t_dim(const Shape& s) { return {1, s.heads, s.kv_len, s.q_len}; }  // scores seen transposed
Dims score_t_stride(const Shape& s) { return {s.heads * s.q_len * s.kv_len, s.q_len * s.kv_len, 1, s.kv_len}; }

}  // namespace

const Tensor& Graph::tensor(int64_t uid) const {
  for (const Tensor& t : tensors)
    if (t.uid == uid) return t;
  throw std::out_of_range("sdpa graph: no tensor with uid " + std::to_string(uid));
}

Graph forward(const Shape& s) {
  check(s);
  Builder g(s);
  const int64_t q = g.external(Q, "q", DType::bf16, q_dim(s), q_stride(s));
  const int64_t kt = g.external(K, "k^T", DType::bf16, kvt_dim(s), kvt_stride(s));
  const int64_t v = g.external(V, "v", DType::bf16, kv_dim(s), kv_stride(s));
  const int64_t o = g.external(O, "o", s.out, q_dim(s), q_stride(s));
  const int64_t stats = g.external(Stats, "stats", DType::f32, row_dim(s), row_stride(s));

  // s = scale q k^T, masked
  const int64_t qk = g.temp("q k^T", DType::f32, score_dim(s), score_stride(s));
  g.node(Op::matmul, "bmm1", q, kt, 0, qk);
  int64_t scores = g.pointwise(Op::mul, "attn_scale", qk, g.scalar("scale", DType::f32, s.scale));
  if (s.causal) scores = g.causal_mask(scores);

  // softmax, with stats = max + log(sum exp(s - max))
  const int64_t max = g.temp("max", DType::f32, row_dim(s), row_stride(s));
  g.node(Op::reduce_max, "Max", scores, 0, 0, max);
  const int64_t shifted = g.pointwise(Op::sub, "sub", scores, max);
  const int64_t e = g.pointwise(Op::exp, "exp", shifted, 0);
  const int64_t sum = g.temp("sum", DType::f32, row_dim(s), row_stride(s));
  g.node(Op::reduce_add, "sum", e, 0, 0, sum);
  const int64_t log_sum = g.pointwise(Op::log, "log", sum, 0);
  g.node(Op::add, "add", max, log_sum, 0, stats);
  const int64_t p = g.pointwise(Op::div, "div", e, sum, DType::bf16);  // bmm2's A in the i/o type, as cuDNN requires

  // o = p v
  g.node(Op::matmul, "bmm2", p, v, 0, o);
  return g.take();
}

Graph backward(const Shape& s) {
  check(s);
  Builder g(s);
  const int64_t q = g.external(Q, "q", DType::bf16, q_dim(s), q_stride(s));
  const int64_t kt = g.external(K, "k^T", DType::bf16, kvt_dim(s), kvt_stride(s));
  const int64_t vt = g.external(V, "v^T", DType::bf16, kvt_dim(s), kvt_stride(s));
  const int64_t o = g.external(O, "o", s.out, q_dim(s), q_stride(s));
  const int64_t d_o = g.external(dO, "do", s.out, q_dim(s), q_stride(s));
  const int64_t stats = g.external(Stats, "stats", DType::f32, row_dim(s), row_stride(s));
  const int64_t dq = g.external(dQ, "dq", s.out, q_dim(s), q_stride(s));
  const int64_t dk = g.external(dK, "dk", DType::bf16, kv_dim(s), kv_stride(s));
  const int64_t dv = g.external(dV, "dv", DType::bf16, kv_dim(s), kv_stride(s));
  const int64_t softmax_sum = g.external(SoftmaxSum, "softmax_sum", DType::f32, row_dim(s), row_stride(s));
  const bool gqa = s.heads != s.kv_heads;

  // softmax_sum = rowsum(do * o)
  const int64_t do_o = g.temp("do*o", DType::f32, q_dim(s), {s.heads * s.q_len * s.dim, s.q_len * s.dim, s.heads * s.dim, 1});
  g.node(Op::mul, "mul_dO_O", d_o, o, 0, do_o);
  const int64_t row_sum = g.temp("rowsum(do*o)", DType::f32, row_dim(s), row_stride(s));
  g.node(Op::reduce_add, "reduce_dO_o", do_o, 0, 0, row_sum);
  g.node(Op::mul, "scale_dropout_inv", row_sum, g.scalar("one", DType::f32, 1.0), 0, softmax_sum);

  // p = exp(scale q k^T (masked) - stats)
  const int64_t qk = g.temp("q k^T", DType::f32, score_dim(s), score_stride(s));
  g.node(Op::matmul, "matmul_Q_KT", q, kt, 0, qk);
  const int64_t scale = g.scalar("scale", DType::f32, s.scale);
  int64_t scores = g.pointwise(Op::mul, "mul_s_attn_scale", qk, scale);
  scores = g.pointwise(Op::sub, "sub_s_m", scores, stats);
  if (s.causal) scores = g.causal_mask(scores);
  const int64_t p = g.pointwise(Op::exp, "exp_s", scores, 0);

  // y (kv_len, kv_heads, dim) = x^T b, summed over the heads sharing a kv head (GQA: per head, then
  // a reduction over each group, as cuDNN's frontend builds it)
  auto to_kv_heads = [&](const char* mm, const char* red, const char* per_head, int64_t xt, int64_t b, int64_t y) {
    if (!gqa) return g.node(Op::matmul, mm, xt, b, 0, y);
    const int64_t full = g.temp(per_head, DType::bf16, {1, s.heads, s.kv_len, s.dim},
                                {s.heads * s.kv_len * s.dim, s.kv_len * s.dim, s.dim, 1});
    g.node(Op::matmul, mm, xt, b, 0, full);
    g.node(Op::reduce_add, red, full, 0, 0, y);
  };

  // dv = p^T do
  const int64_t pt = g.temp("p^T", DType::bf16, score_t_dim(s), score_t_stride(s));
  g.node(Op::reshape, "reshape_p", p, 0, 0, pt);
  to_kv_heads("matmul_pT_dO", "red_dV_head", "dv per head", pt, d_o, dv);

  // ds = scale p (do v^T - softmax_sum)
  const int64_t dp = g.temp("do v^T", DType::f32, score_dim(s), score_stride(s));
  g.node(Op::matmul, "matmul_dO_VT", d_o, vt, 0, dp);
  const int64_t centred = g.pointwise(Op::sub, "sub_dP_softmax_sum", dp, softmax_sum);
  const int64_t dsp = g.pointwise(Op::mul, "mul_dP_exp_s", centred, p);
  const int64_t ds = g.pointwise(Op::mul, "mul_dS_attn_scale", dsp, scale);

  // dk = ds^T q
  const int64_t dst = g.temp("ds^T", DType::bf16, score_t_dim(s), score_t_stride(s));
  g.node(Op::reshape, "reshape_dS", ds, 0, 0, dst);
  to_kv_heads("matmul_dST_Q", "red_dK_head", "dk per head", dst, q, dk);

  // dq = ds k, straight into dq (cuDNN's dP-workspace path: no atomics, deterministic)
  const int64_t k = g.temp("k", DType::bf16, kv_dim(s), kv_stride(s));
  g.node(Op::reshape, "reshape_k", kt, 0, 0, k);
  g.node(Op::matmul, "matmul_dS_K", ds, k, 0, dq);
  return g.take();
}

Bindings forward_bindings(const void* q, const void* k, const void* v, void* o, float* stats) {
  return {{Q, q}, {K, k}, {V, v}, {O, o}, {Stats, stats}};
}

Bindings backward_bindings(const void* q, const void* k, const void* v, const void* o, const void* d_o,
                           const float* stats, void* dq, void* dk, void* dv, float* softmax_sum) {
  return {{Q, q},   {K, k},   {V, v},   {O, o},   {dO, d_o},
          {Stats, stats}, {dQ, dq}, {dK, dk}, {dV, dv}, {SoftmaxSum, softmax_sum}};
}

const char* name(Op op) {
  switch (op) {
    case Op::matmul: return "matmul";
    case Op::add: return "add";
    case Op::sub: return "sub";
    case Op::mul: return "mul";
    case Op::div: return "div";
    case Op::exp: return "exp";
    case Op::log: return "log";
    case Op::identity: return "identity";
    case Op::gen_index: return "gen_index";
    case Op::cmp_ge: return "cmp_ge";
    case Op::binary_select: return "binary_select";
    case Op::reduce_max: return "reduce_max";
    case Op::reduce_add: return "reduce_add";
    case Op::reshape: return "reshape";
  }
  return "?";
}

const char* name(DType t) {
  switch (t) {
    case DType::bf16: return "bf16";
    case DType::f32: return "f32";
    case DType::i32: return "i32";
    case DType::boolean: return "bool";
  }
  return "?";
}

std::string describe(const Graph& g) {
  std::ostringstream os;
  auto dims = [&](const std::array<int64_t, 4>& a) {
    return "(" + std::to_string(a[0]) + "," + std::to_string(a[1]) + "," + std::to_string(a[2]) + "," +
           std::to_string(a[3]) + ")";
  };
  for (const Tensor& t : g.tensors) {
    os << "tensor " << t.uid << " " << t.name << ": " << name(t.dtype) << " dim " << dims(t.dim) << " stride "
       << dims(t.stride) << (t.by_value ? " by value " + std::to_string(t.value) : t.is_virtual ? " virtual" : "")
       << "\n";
  }
  for (const Node& n : g.nodes) {
    os << "node " << n.name << ": " << name(n.op) << " x " << n.x;
    if (n.b) os << " b " << n.b;
    if (n.t) os << " t " << n.t;
    os << " -> " << n.y << " (compute " << name(n.compute);
    if (n.axis >= 0) os << ", axis " << n.axis;
    os << ")\n";
  }
  return os.str();
}

}  // namespace oomb::sdpa
