// The graphs oomb asks cuDNN for as fused attention (src/backend/sdpa_graph.h), evaluated on the CPU
// in float64 by tests/sdpa_graph_eval.h and compared with attention written plainly here: forward (o
// and the natural-log LSE stats) and backward (dq, dk, dv and softmax_sum), causal bottom-right and
// not, GQA and not, over oomb's token-major layouts read through the graphs' own strides. Also: the
// external tensors are exactly the documented uids, describe() names every node, bad shapes throw,
// the interpreter's own checks fire, and negative controls (a swapped causal comparison, a dropped
// scale, k's strides untransposed) show that the comparison does catch a wrong graph.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <ostream>
#include <set>
#include <string>

#include "backend/sdpa_graph.h"
#include "sdpa_graph_eval.h"
#include "test_util.h"

using namespace oomb;
using namespace oomb::testing;
namespace sd = oomb::sdpa;

namespace {

constexpr double kTol = 1e-12;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Case {
  const char* name;
  sd::Shape s;
  uint64_t seed;
};

// gtest prints a case (in ctest's test names too) by its name
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

sd::Shape shape(int64_t heads, int64_t kv_heads, int64_t q_len, int64_t kv_len, int64_t dim, bool causal,
                float scale = 0) {
  sd::Shape s;
  s.heads = heads, s.kv_heads = kv_heads, s.q_len = q_len, s.kv_len = kv_len, s.dim = dim, s.causal = causal;
  s.scale = scale != 0 ? scale : float(1.0 / std::sqrt(double(dim)));
  return s;
}

// o, do and dq in fp32 (the backend's choice): the same math, other tensor types
sd::Shape f32_out(sd::Shape s) {
  s.out = sd::DType::f32;
  return s;
}

const Case kCases[] = {
    {"H4_KV2_Q5_KV9_D8_causal", shape(4, 2, 5, 9, 8, true), 11},
    {"H3_KV3_Q7_KV7_D8_causal", shape(3, 3, 7, 7, 8, true), 12},
    {"H4_KV1_Q6_KV6_D8_full", shape(4, 1, 6, 6, 8, false), 13},
    {"H2_KV1_Q1_KV6_D4_causal", shape(2, 1, 1, 6, 4, true), 14},
    {"H2_KV2_Q3_KV48_D8_causal", shape(2, 2, 3, 48, 8, true, 0.3f), 15},
    {"H6_KV2_Q4_KV11_D16_causal", shape(6, 2, 4, 11, 16, true), 16},
    {"H2_KV1_Q7_KV3_D4_full", shape(2, 1, 7, 3, 4, false), 17},
    {"H1_KV1_Q1_KV1_D1_causal", shape(1, 1, 1, 1, 1, true), 18},
    {"H4_KV2_Q5_KV9_D8_causal_f32_out", f32_out(shape(4, 2, 5, 9, 8, true)), 19},
};

// max |got - want| / max |want|; infinite on a NaN or a size mismatch
double rel_err(const Vec& got, const Vec& want) {
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) || std::isnan(want[i])) return std::numeric_limits<double>::infinity();
    num = std::max(num, std::abs(got[i] - want[i]));
    den = std::max(den, std::abs(want[i]));
  }
  return num / std::max(den, 1e-300);
}

// ---- attention in float64, written plainly over oomb's layouts ----
// q, o, do, dq: (q_len, heads, dim); k, v, dk, dv: (kv_len, kv_heads, dim); stats: (q_len, heads)

bool visible(const sd::Shape& s, int64_t i, int64_t j) { return !s.causal || j <= i + s.kv_len - s.q_len; }

struct Fwd {
  Vec o, stats;
};

Fwd direct_forward(const sd::Shape& s, const Vec& q, const Vec& k, const Vec& v) {
  const int64_t H = s.heads, KH = s.kv_heads, Q = s.q_len, KV = s.kv_len, D = s.dim, r = H / KH;
  const double scale = s.scale;
  Fwd f{Vec(size_t(Q * H * D)), Vec(size_t(H * Q))};
  for (int64_t h = 0; h < H; ++h) {
    const int64_t g = h / r;
    for (int64_t i = 0; i < Q; ++i) {
      Vec sc(static_cast<size_t>(KV));
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < KV; ++j) {
        if (!visible(s, i, j)) continue;
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += q[size_t((i * H + h) * D + d)] * k[size_t((j * KH + g) * D + d)];
        sc[size_t(j)] = scale * dot;
        m = std::max(m, sc[size_t(j)]);
      }
      double sum = 0;
      for (int64_t j = 0; j < KV; ++j)
        if (visible(s, i, j)) sum += std::exp(sc[size_t(j)] - m);
      const double lse = m + std::log(sum);
      f.stats[size_t(i * H + h)] = lse;
      for (int64_t d = 0; d < D; ++d) {
        double acc = 0;
        for (int64_t j = 0; j < KV; ++j)
          if (visible(s, i, j)) acc += std::exp(sc[size_t(j)] - lse) * v[size_t((j * KH + g) * D + d)];
        f.o[size_t((i * H + h) * D + d)] = acc;
      }
    }
  }
  return f;
}

struct Bwd {
  Vec dq, dk, dv, softmax_sum;
};

Bwd direct_backward(const sd::Shape& s, const Vec& q, const Vec& k, const Vec& v, const Vec& o, const Vec& dout,
                    const Vec& stats) {
  const int64_t H = s.heads, KH = s.kv_heads, Q = s.q_len, KV = s.kv_len, D = s.dim, r = H / KH;
  const double scale = s.scale;
  Bwd b{Vec(q.size()), Vec(k.size()), Vec(v.size()), Vec(size_t(H * Q))};
  auto qi = [&](int64_t i, int64_t h, int64_t d) { return size_t((i * H + h) * D + d); };
  auto ki = [&](int64_t j, int64_t g, int64_t d) { return size_t((j * KH + g) * D + d); };
  for (int64_t h = 0; h < H; ++h) {
    const int64_t g = h / r;
    for (int64_t i = 0; i < Q; ++i) {
      double rowsum = 0;  // rowsum(do * o)
      for (int64_t d = 0; d < D; ++d) rowsum += dout[qi(i, h, d)] * o[qi(i, h, d)];
      b.softmax_sum[size_t(i * H + h)] = rowsum;
      for (int64_t j = 0; j < KV; ++j) {
        if (!visible(s, i, j)) continue;
        double dot = 0, dp = 0;
        for (int64_t d = 0; d < D; ++d) {
          dot += q[qi(i, h, d)] * k[ki(j, g, d)];
          dp += dout[qi(i, h, d)] * v[ki(j, g, d)];  // dp = do v^T
        }
        const double p = std::exp(scale * dot - stats[size_t(i * H + h)]);
        const double ds = p * (dp - rowsum);
        for (int64_t d = 0; d < D; ++d) {
          b.dv[ki(j, g, d)] += p * dout[qi(i, h, d)];        // dv = p^T do
          b.dq[qi(i, h, d)] += scale * ds * k[ki(j, g, d)];  // dq = scale ds k
          b.dk[ki(j, g, d)] += scale * ds * q[qi(i, h, d)];  // dk = scale ds^T q
        }
      }
    }
  }
  return b;
}

// ---- running the graphs ----

struct Inputs {
  Vec q, k, v, dout;
};

Inputs random_inputs(const sd::Shape& s, uint64_t seed) {
  const size_t nq = size_t(s.q_len * s.heads * s.dim), nk = size_t(s.kv_len * s.kv_heads * s.dim);
  return {randd(nq, seed * 4 + 0), randd(nk, seed * 4 + 1), randd(nk, seed * 4 + 2), randd(nq, seed * 4 + 3)};
}

// The graph's forward outputs (o, stats); throws SdpaEvalError
Fwd graph_forward(const sd::Graph& g, const sd::Shape& s, const Inputs& x) {
  SdpaBuffers in{{sd::Q, x.q}, {sd::K, x.k}, {sd::V, x.v}};
  SdpaBuffers out{{sd::O, Vec(x.q.size(), kNaN)}, {sd::Stats, Vec(size_t(s.heads * s.q_len), kNaN)}};
  eval_sdpa_graph(g, in, out);
  return {out[sd::O], out[sd::Stats]};
}

Bwd graph_backward(const sd::Graph& g, const sd::Shape& s, const Inputs& x, const Fwd& f) {
  SdpaBuffers in{{sd::Q, x.q}, {sd::K, x.k}, {sd::V, x.v}, {sd::O, f.o}, {sd::dO, x.dout}, {sd::Stats, f.stats}};
  SdpaBuffers out{{sd::dQ, Vec(x.q.size(), kNaN)},
                  {sd::dK, Vec(x.k.size(), kNaN)},
                  {sd::dV, Vec(x.v.size(), kNaN)},
                  {sd::SoftmaxSum, Vec(size_t(s.heads * s.q_len), kNaN)}};
  eval_sdpa_graph(g, in, out);
  return {out[sd::dQ], out[sd::dK], out[sd::dV], out[sd::SoftmaxSum]};
}

struct FwdErr {
  double o, stats;
  double max() const { return std::max(o, stats); }
};
struct BwdErr {
  double dq, dk, dv, softmax_sum;
  double max() const { return std::max({dq, dk, dv, softmax_sum}); }
};

FwdErr forward_error(const sd::Graph& g, const Case& c) {
  const Inputs x = random_inputs(c.s, c.seed);
  const Fwd got = graph_forward(g, c.s, x), want = direct_forward(c.s, x.q, x.k, x.v);
  return {rel_err(got.o, want.o), rel_err(got.stats, want.stats)};
}

BwdErr backward_error(const sd::Graph& g, const Case& c) {
  const Inputs x = random_inputs(c.s, c.seed);
  const Fwd f = direct_forward(c.s, x.q, x.k, x.v);
  const Bwd got = graph_backward(g, c.s, x, f), want = direct_backward(c.s, x.q, x.k, x.v, f.o, x.dout, f.stats);
  return {rel_err(got.dq, want.dq), rel_err(got.dk, want.dk), rel_err(got.dv, want.dv),
          rel_err(got.softmax_sum, want.softmax_sum)};
}

// ---- forward and backward against the direct attention ----

class SdpaGraphMath : public ::testing::TestWithParam<Case> {};

TEST_P(SdpaGraphMath, ForwardMatchesDirectAttention) {
  const Case& c = GetParam();
  const sd::Graph g = sd::forward(c.s);
  try {
    const FwdErr e = forward_error(g, c);
    fmt::print("[ sdpa fwd ] {:<28} o {:.2e}  stats {:.2e}\n", c.name, e.o, e.stats);
    EXPECT_LE(e.o, kTol) << "o\n" << sd::describe(g);
    EXPECT_LE(e.stats, kTol) << "stats\n" << sd::describe(g);
  } catch (const SdpaEvalError& err) {
    FAIL() << err.what() << "\n" << sd::describe(g);
  }
}

TEST_P(SdpaGraphMath, BackwardMatchesDirectAttention) {
  const Case& c = GetParam();
  const sd::Graph g = sd::backward(c.s);
  try {
    const BwdErr e = backward_error(g, c);
    fmt::print("[ sdpa bwd ] {:<28} dq {:.2e}  dk {:.2e}  dv {:.2e}  softmax_sum {:.2e}\n", c.name, e.dq, e.dk, e.dv,
               e.softmax_sum);
    EXPECT_LE(e.dq, kTol) << "dq\n" << sd::describe(g);
    EXPECT_LE(e.dk, kTol) << "dk\n" << sd::describe(g);
    EXPECT_LE(e.dv, kTol) << "dv\n" << sd::describe(g);
    EXPECT_LE(e.softmax_sum, kTol) << "softmax_sum\n" << sd::describe(g);
  } catch (const SdpaEvalError& err) {
    FAIL() << err.what() << "\n" << sd::describe(g);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, SdpaGraphMath, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

// ---- the graphs' contract ----

std::set<int64_t> external_uids(const sd::Graph& g) {
  std::set<int64_t> u;
  for (const auto& t : g.tensors)
    if (!t.is_virtual && !t.by_value) u.insert(t.uid);
  return u;
}

TEST(SdpaGraph, ExternalTensorsAreTheDocumentedUids) {
  const std::set<int64_t> fwd{sd::Q, sd::K, sd::V, sd::O, sd::Stats};
  const std::set<int64_t> bwd{sd::Q, sd::K, sd::V, sd::O, sd::dO, sd::Stats, sd::dQ, sd::dK, sd::dV, sd::SoftmaxSum};
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    for (const auto& [g, want] : {std::pair{sd::forward(c.s), fwd}, std::pair{sd::backward(c.s), bwd}}) {
      EXPECT_EQ(external_uids(g), want) << sd::describe(g);
      for (const auto& t : g.tensors) {
        if (t.is_virtual || t.by_value) {
          EXPECT_GE(t.uid, sd::kFirstInternal) << "internal tensor '" << t.name << "'";
          continue;
        }
        const bool f32 = t.uid == sd::Stats || t.uid == sd::SoftmaxSum ||
                         (c.s.out == sd::DType::f32 && (t.uid == sd::O || t.uid == sd::dO || t.uid == sd::dQ));
        EXPECT_EQ(t.dtype, f32 ? sd::DType::f32 : sd::DType::bf16) << "external tensor '" << t.name << "'";
        EXPECT_EQ(&g.tensor(t.uid), &t) << "tensor(" << t.uid << ")";
      }
      std::string msg;
      try {
        g.tensor(99999);
      } catch (const std::exception& e) {
        msg = e.what();
      }
      EXPECT_NE(msg.find("99999"), std::string::npos) << "tensor(99999) should throw naming the uid; got: " << msg;
    }
  }
}

TEST(SdpaGraph, DescribeNamesEveryNode) {
  for (const Case& c : {kCases[0], kCases[2]}) {
    SCOPED_TRACE(c.name);
    for (const sd::Graph& g : {sd::forward(c.s), sd::backward(c.s)}) {
      const std::string d = sd::describe(g);
      ASSERT_FALSE(g.nodes.empty());
      std::set<std::string> names;
      for (const auto& n : g.nodes) {
        EXPECT_FALSE(n.name.empty()) << "a node has no name (op " << sd::name(n.op) << ")\n" << d;
        EXPECT_TRUE(names.insert(n.name).second) << "two nodes are named '" << n.name << "'\n" << d;
        EXPECT_NE(d.find(n.name), std::string::npos) << "describe() does not name node '" << n.name << "'\n" << d;
      }
      for (const auto& t : g.tensors) {
        EXPECT_FALSE(t.name.empty()) << "tensor uid " << t.uid << " has no name\n" << d;
        EXPECT_NE(d.find(t.name), std::string::npos) << "describe() does not name tensor '" << t.name << "'\n" << d;
      }
    }
  }
  std::set<std::string> ops;
  for (int op = int(sd::Op::matmul); op <= int(sd::Op::reshape); ++op) ops.insert(sd::name(sd::Op(op)));
  EXPECT_EQ(ops.size(), size_t(int(sd::Op::reshape) + 1)) << "name(Op) is not distinct for every op";
  for (auto t : {sd::DType::bf16, sd::DType::f32, sd::DType::i32, sd::DType::boolean})
    EXPECT_STRNE(sd::name(t), "") << int(t);
}

TEST(SdpaGraph, BadShapesThrow) {
  struct Bad {
    const char* why;
    sd::Shape s;
    std::vector<std::string> fields;  // the message names one of these
  };
  const Bad bad[] = {
      {"heads not a multiple of kv_heads", shape(4, 3, 5, 9, 8, true), {"heads"}},
      {"dim 0", shape(4, 2, 5, 9, 1, true), {"dim"}},  // dim set to 0 below
      {"dim -1", shape(4, 2, 5, 9, 1, true), {"dim"}},
      {"causal with q_len > kv_len", shape(2, 1, 6, 4, 8, true), {"q_len", "kv_len", "causal"}},
      {"heads 0", shape(0, 1, 5, 9, 8, false), {"heads"}},
      {"kv_heads 0", shape(4, 0, 5, 9, 8, false), {"kv_heads"}},
      {"q_len 0", shape(2, 1, 0, 9, 8, false), {"q_len"}},
      {"kv_len 0", shape(2, 1, 5, 0, 8, false), {"kv_len"}},
  };
  for (Bad b : bad) {
    if (std::string(b.why) == "dim 0") b.s.dim = 0;
    if (std::string(b.why) == "dim -1") b.s.dim = -1;
    for (int bwd = 0; bwd < 2; ++bwd) {
      SCOPED_TRACE(fmt::format("{} ({})", b.why, bwd ? "backward" : "forward"));
      std::string msg;
      bool thrown = false;
      try {
        bwd ? sd::backward(b.s) : sd::forward(b.s);
      } catch (const std::invalid_argument& e) {
        thrown = true;
        msg = e.what();
      }
      EXPECT_TRUE(thrown) << "no std::invalid_argument";
      bool named = false;
      for (const auto& f : b.fields) named = named || msg.find(f) != std::string::npos;
      if (thrown) {
        EXPECT_TRUE(named) << "the message does not name the field: " << msg;
      }
    }
  }
  // q_len > kv_len is fine without the causal mask
  EXPECT_NO_THROW(sd::forward(shape(2, 1, 6, 4, 8, false)));
  EXPECT_NO_THROW(sd::backward(shape(2, 1, 6, 4, 8, false)));
}

// ---- negative controls: a wrong graph must fail the comparison ----

TEST(SdpaGraphNegativeControl, CausalComparisonSwappedIsCaught) {
  const Case& c = kCases[0];  // H4 KV2 Q5 KV9, causal
  for (int bwd = 0; bwd < 2; ++bwd) {
    sd::Graph g = bwd ? sd::backward(c.s) : sd::forward(c.s);
    int swapped = 0;
    for (auto& n : g.nodes)
      if (n.op == sd::Op::cmp_ge) std::swap(n.x, n.b), ++swapped;
    ASSERT_GT(swapped, 0) << "no cmp_ge node in the causal " << (bwd ? "backward" : "forward") << "\n"
                          << sd::describe(g);
    try {
      const double e = bwd ? backward_error(g, c).max() : forward_error(g, c).max();
      fmt::print("[ control  ] {} with cmp_ge inputs swapped: error {:.2e} (must exceed 1e-3)\n",
                 bwd ? "backward" : "forward", e);
      EXPECT_GT(e, 1e-3);
    } catch (const SdpaEvalError& err) {
      FAIL() << "the mutated graph should evaluate (and differ), but: " << err.what();
    }
  }
}

TEST(SdpaGraphNegativeControl, ScaleRemovedIsCaught) {
  const Case& c = kCases[0];
  for (int bwd = 0; bwd < 2; ++bwd) {
    const sd::Graph g = bwd ? sd::backward(c.s) : sd::forward(c.s);
    auto is_scale = [&](int64_t uid) {
      const auto& t = g.tensor(uid);
      return t.by_value && t.value == double(c.s.scale);
    };
    int controls = 0;
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const auto& n = g.nodes[i];
      if (n.op != sd::Op::mul || !(is_scale(n.x) || is_scale(n.b))) continue;
      sd::Graph h = g;  // the same graph with this multiply by the scale turned into a copy
      h.nodes[i].op = sd::Op::identity;
      h.nodes[i].x = is_scale(n.x) ? n.b : n.x;
      h.nodes[i].b = 0;
      ++controls;
      try {
        const double e = bwd ? backward_error(h, c).max() : forward_error(h, c).max();
        fmt::print("[ control  ] {} without scale multiply '{}': error {:.2e} (must exceed 1e-3)\n",
                   bwd ? "backward" : "forward", n.name, e);
        EXPECT_GT(e, 1e-3) << n.name;
      } catch (const SdpaEvalError& err) {
        ADD_FAILURE() << "the mutated graph should evaluate (and differ), but: " << err.what();
      }
    }
    EXPECT_GT(controls, 0) << "no multiply by a by-value scale " << c.s.scale << " in the "
                           << (bwd ? "backward" : "forward") << "\n"
                           << sd::describe(g);
  }
}

TEST(SdpaGraphNegativeControl, KStridesUntransposedAreCaught) {
  const Case& c = kCases[0];
  for (int bwd = 0; bwd < 2; ++bwd) {
    sd::Graph g = bwd ? sd::backward(c.s) : sd::forward(c.s);
    int changed = 0;
    for (auto& t : g.tensors)
      if (t.uid == sd::K) std::swap(t.stride[2], t.stride[3]), ++changed;
    ASSERT_EQ(changed, 1);
    std::string outcome;
    try {
      const double e = bwd ? backward_error(g, c).max() : forward_error(g, c).max();
      outcome = fmt::format("error {:.2e}", e);
      EXPECT_GT(e, 1e-3);
    } catch (const SdpaEvalError& err) {
      outcome = std::string("rejected: ") + err.what();
    }
    fmt::print("[ control  ] {} with k's s and d strides swapped: {}\n", bwd ? "backward" : "forward", outcome);
  }
}

// ---- the interpreter itself, on graphs built by hand ----

sd::Tensor mk_tensor(int64_t uid, const char* name, std::array<int64_t, 4> dim, bool is_virtual = true,
                     std::array<int64_t, 4> stride = {}) {
  sd::Tensor t;
  t.uid = uid, t.name = name, t.dim = dim, t.is_virtual = is_virtual;
  t.stride = stride == std::array<int64_t, 4>{}
                 ? std::array<int64_t, 4>{dim[1] * dim[2] * dim[3], dim[2] * dim[3], dim[3], 1}
                 : stride;
  return t;
}

sd::Node mk_node(sd::Op op, const char* name, int64_t x, int64_t b, int64_t y, int64_t t = 0) {
  sd::Node n;
  n.op = op, n.name = name, n.x = x, n.b = b, n.y = y, n.t = t;
  return n;
}

// x (1,4,2,3) @ w (1,2,3,2) -> y (1,4,2,2) (x head h with w head h/2); z (1,2,2,2) sums y heads in
// pairs; out = z with its last two dims swapped, (0, g, j, i) written through strides (8, 2, 1, 4).
sd::Graph small_graph() {
  sd::Graph g;
  g.tensors = {mk_tensor(1, "x", {1, 4, 2, 3}, false), mk_tensor(2, "w", {1, 2, 3, 2}, false),
               mk_tensor(100, "y", {1, 4, 2, 2}), mk_tensor(101, "z", {1, 2, 2, 2}),
               mk_tensor(3, "out", {1, 2, 2, 2}, false, {8, 2, 1, 4})};
  g.nodes = {mk_node(sd::Op::matmul, "mm", 1, 2, 100), mk_node(sd::Op::reduce_add, "sum_pairs", 100, 0, 101),
             mk_node(sd::Op::reshape, "transpose", 101, 0, 3)};
  return g;
}

TEST(SdpaGraphEval, EvaluatesAHandBuiltGraph) {
  const Vec x = randd(24, 1), w = randd(12, 2);
  SdpaBuffers in{{1, x}, {2, w}}, out{{3, Vec(8, kNaN)}};
  eval_sdpa_graph(small_graph(), in, out);
  for (int g = 0; g < 2; ++g)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j) {
        double z = 0;  // z[g][i][j] = sum over heads h = 2g, 2g+1 of (x[h] @ w[h/2])[i][j]
        for (int h = 2 * g; h < 2 * g + 2; ++h)
          for (int l = 0; l < 3; ++l) z += x[size_t((h * 2 + i) * 3 + l)] * w[size_t(((h / 2) * 3 + l) * 2 + j)];
        // out (b, h, s, d) = (0, g, j, i) lives at g*2 + j*1 + i*4
        EXPECT_NEAR(out[3][size_t(g * 2 + j + i * 4)], z, 1e-12) << g << i << j;
      }
}

TEST(SdpaGraphEval, EvaluatesMaskAndSoftmaxOps) {
  // s (1,1,2,3) external; mask = col <= row + 1; masked = mask ? s : -inf; m = rowmax; e = exp(masked - m)
  sd::Graph g;
  auto idx = [](int64_t uid, const char* name) {
    auto t = mk_tensor(uid, name, {1, 1, 2, 3});
    t.dtype = sd::DType::i32;
    return t;
  };
  auto scalar = [](int64_t uid, const char* name, double v) {
    auto t = mk_tensor(uid, name, {1, 1, 1, 1}, false);
    t.by_value = true, t.value = v;
    return t;
  };
  auto mask = mk_tensor(104, "mask", {1, 1, 2, 3});
  mask.dtype = sd::DType::boolean;
  g.tensors = {mk_tensor(1, "s", {1, 1, 2, 3}, false),
               idx(100, "row"),
               idx(101, "col"),
               scalar(102, "one", 1),
               idx(103, "row1"),
               mask,
               scalar(105, "neg_inf", -std::numeric_limits<double>::infinity()),
               mk_tensor(106, "masked", {1, 1, 2, 3}),
               mk_tensor(107, "m", {1, 1, 2, 1}),
               mk_tensor(108, "d", {1, 1, 2, 3}),
               mk_tensor(2, "e", {1, 1, 2, 3}, false)};
  auto gen = [](const char* name, int64_t y, int64_t axis) {
    auto n = mk_node(sd::Op::gen_index, name, 1, 0, y);
    n.axis = axis;
    return n;
  };
  g.nodes = {gen("gen_row", 100, 2),
             gen("gen_col", 101, 3),
             mk_node(sd::Op::add, "row_plus", 100, 102, 103),
             mk_node(sd::Op::cmp_ge, "ge", 103, 101, 104),
             mk_node(sd::Op::binary_select, "sel", 1, 105, 106, 104),
             mk_node(sd::Op::reduce_max, "max", 106, 0, 107),
             mk_node(sd::Op::sub, "sub", 106, 107, 108),
             mk_node(sd::Op::exp, "exp", 108, 0, 2)};
  const Vec s{0.5, -1.0, 2.0, 1.5, 0.25, -3.0};
  SdpaBuffers in{{1, s}}, out{{2, Vec(6, kNaN)}};
  eval_sdpa_graph(g, in, out);
  const Vec want{std::exp(0.5 - 0.5), std::exp(-1.0 - 0.5), 0.0,
                 std::exp(0.0),       std::exp(0.25 - 1.5), std::exp(-3.0 - 1.5)};
  for (size_t i = 0; i < 6; ++i) EXPECT_DOUBLE_EQ(out[2][i], want[i]) << i;
}

// mutate(g) breaks small_graph(); evaluating it (buffers of out_size and x_size) must throw SdpaEvalError
// with `phrase` in the message
template <class F>
void expect_rejected(const char* phrase, F mutate, size_t out_size = 8, size_t x_size = 24) {
  sd::Graph g = small_graph();
  mutate(g);
  SdpaBuffers in{{1, randd(x_size, 1)}, {2, randd(12, 2)}}, out{{3, Vec(out_size, kNaN)}};
  try {
    eval_sdpa_graph(g, in, out);
    ADD_FAILURE() << "not rejected; expected an error with '" << phrase << "'";
  } catch (const SdpaEvalError& e) {
    EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << e.what();
  }
}

TEST(SdpaGraphEval, RejectsMalformedGraphs) {
  expect_rejected("before it is written", [](sd::Graph& g) { std::swap(g.nodes[0], g.nodes[1]); });
  expect_rejected("already", [](sd::Graph& g) { g.nodes.insert(g.nodes.begin() + 1, g.nodes[0]); });
  expect_rejected("already", [](sd::Graph& g) { g.nodes[0].y = 1; });  // writes an input
  expect_rejected("inner dims", [](sd::Graph& g) {
    g.tensors[1].dim = {1, 2, 2, 2};
    g.tensors[1].stride = {8, 4, 2, 1};
  });
  expect_rejected("y dims", [](sd::Graph& g) { g.tensors[2].dim = {1, 4, 2, 3}; });
  expect_rejected("head counts", [](sd::Graph& g) {
    g.tensors[0].dim = {1, 3, 2, 3};
    g.tensors[0].stride = {18, 6, 3, 1};
  });
  expect_rejected("not all 1", [](sd::Graph& g) { g.tensors[1].by_value = true, g.tensors[1].is_virtual = false; });
  const auto unchanged = [](sd::Graph&) {};
  expect_rejected("addresses element", unchanged, 7);      // out's buffer one short
  expect_rejected("addresses element", unchanged, 8, 23);  // x's buffer one short
  expect_rejected("two elements", [](sd::Graph& g) { g.tensors[4].stride = {0, 2, 1, 1}; });
  expect_rejected("never written", [](sd::Graph& g) { g.nodes.pop_back(); });
  expect_rejected("last two swapped", [](sd::Graph& g) { g.tensors[4].dim = {1, 2, 1, 4}; });
  expect_rejected("do not reduce", [](sd::Graph& g) { g.tensors[3].dim = {1, 3, 2, 2}; });
  expect_rejected("no tensor has uid", [](sd::Graph& g) { g.nodes[1].x = 555; });
  expect_rejected("takes no b", [](sd::Graph& g) { g.nodes[1].b = 1; });
  expect_rejected("do not broadcast", [](sd::Graph& g) {
    g.tensors[1].dim = {1, 1, 2, 2};  // w as a pointwise operand with 2 where x has 3
    g.tensors[1].stride = {4, 4, 2, 1};
    g.tensors[2].dim = {1, 4, 2, 3};
    g.nodes[0].op = sd::Op::add;
  });
}

}  // namespace
