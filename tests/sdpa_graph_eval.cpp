// The CPU interpreter of oomb::sdpa::Graph: see sdpa_graph_eval.h. It shares no code with
// src/backend/sdpa_graph.cpp (not even name(Op)), so it checks the graphs rather than echoing them.
#include "sdpa_graph_eval.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>

namespace oomb::testing {
namespace {

using sdpa::DType;
using sdpa::Graph;
using sdpa::Node;
using sdpa::Op;
using sdpa::Tensor;
using Dims = std::array<int64_t, 4>;
using Index = std::array<int64_t, 4>;

const char* op_name(Op op) { return sdpa::name(op); }

std::string str(const Dims& d) { return fmt::format("({}, {}, {}, {})", d[0], d[1], d[2], d[3]); }
int64_t numel(const Dims& d) { return d[0] * d[1] * d[2] * d[3]; }
std::string label(const Tensor& t) { return fmt::format("'{}' (uid {})", t.name, t.uid); }

[[noreturn]] void fail(const std::string& m) { throw SdpaEvalError(m); }

template <class F>
void for_each_index(const Dims& d, F&& f) {
  Index i{};
  for (i[0] = 0; i[0] < d[0]; ++i[0])
    for (i[1] = 0; i[1] < d[1]; ++i[1])
      for (i[2] = 0; i[2] < d[2]; ++i[2])
        for (i[3] = 0; i[3] < d[3]; ++i[3]) f(i);
}

// A tensor's value, dense in logical (b, h, s, d) order.
struct Arr {
  Dims dim{};
  std::vector<double> v;
  explicit Arr(const Dims& d) : dim(d), v(size_t(numel(d)), 0.0) {}
  size_t off(const Index& i) const { return size_t(((i[0] * dim[1] + i[1]) * dim[2] + i[2]) * dim[3] + i[3]); }
  double& at(const Index& i) { return v[off(i)]; }
  double at(const Index& i) const { return v[off(i)]; }
  double bcast(const Index& i) const {  // dims of size 1 broadcast
    Index j;
    for (int k = 0; k < 4; ++k) j[k] = dim[k] == 1 ? 0 : i[k];
    return at(j);
  }
};

// The buffer offsets of an external tensor's elements in logical order, after checking that every one
// lies inside the buffer and no two coincide.
std::vector<size_t> offsets(const Tensor& t, size_t buffer_size) {
  int64_t last = 0;
  for (int k = 0; k < 4; ++k) {
    if (t.stride[k] < 0) fail(fmt::format("external tensor {} has a negative stride: {}", label(t), str(t.stride)));
    last += (t.dim[k] - 1) * t.stride[k];
  }
  if (last < 0 || size_t(last) >= buffer_size)
    fail(fmt::format("external tensor {} with dims {} and strides {} addresses element {} of a buffer of {}", label(t),
                     str(t.dim), str(t.stride), last, buffer_size));
  std::vector<size_t> o;
  o.reserve(size_t(numel(t.dim)));
  for_each_index(t.dim, [&](const Index& i) {
    o.push_back(size_t(i[0] * t.stride[0] + i[1] * t.stride[1] + i[2] * t.stride[2] + i[3] * t.stride[3]));
  });
  auto sorted = o;
  std::sort(sorted.begin(), sorted.end());
  if (auto dup = std::adjacent_find(sorted.begin(), sorted.end()); dup != sorted.end())
    fail(fmt::format("external tensor {} with dims {} and strides {} puts two elements at offset {}", label(t),
                     str(t.dim), str(t.stride), *dup));
  return o;
}

}  // namespace

void eval_sdpa_graph(const Graph& g, const SdpaBuffers& in, SdpaBuffers& out) {
  std::map<int64_t, const Tensor*> ts;
  for (const Tensor& t : g.tensors) {
    if (t.uid <= 0) fail(fmt::format("tensor '{}' has uid {}", t.name, t.uid));
    if (auto [it, fresh] = ts.emplace(t.uid, &t); !fresh)
      fail(fmt::format("uid {} names two tensors: '{}' and '{}'", t.uid, it->second->name, t.name));
    for (int64_t d : t.dim)
      if (d < 1) fail(fmt::format("tensor {} has dims {}", label(t), str(t.dim)));
    if (t.by_value && t.is_virtual) fail(fmt::format("tensor {} is both by value and virtual", label(t)));
    if (t.by_value && numel(t.dim) != 1)
      fail(fmt::format("by-value tensor {} has dims {}, not all 1", label(t), str(t.dim)));
  }
  auto tensor = [&](int64_t uid, const std::string& who) -> const Tensor& {
    auto it = ts.find(uid);
    if (it == ts.end()) fail(fmt::format("{}: no tensor has uid {}", who, uid));
    return *it->second;
  };
  for (const SdpaBuffers* m : {&in, static_cast<const SdpaBuffers*>(&out)})
    for (const auto& [uid, buf] : *m) {
      const Tensor& t = tensor(uid, "a bound buffer");
      if (t.is_virtual || t.by_value)
        fail(fmt::format("a buffer is bound to {}, which is {}", label(t), t.by_value ? "by value" : "virtual"));
      if (m == &in && out.count(uid)) fail(fmt::format("{} is bound both as an input and as an output", label(t)));
    }

  std::map<int64_t, Arr> val;
  for (const Tensor& t : g.tensors) {
    if (t.by_value) {
      Arr a(t.dim);
      a.v[0] = t.value;
      val.emplace(t.uid, std::move(a));
    } else if (!t.is_virtual) {
      if (auto it = in.find(t.uid); it != in.end()) {
        const auto off = offsets(t, it->second.size());
        Arr a(t.dim);
        for (size_t i = 0; i < off.size(); ++i) a.v[i] = it->second[off[i]];
        val.emplace(t.uid, std::move(a));
      } else if (!out.count(t.uid)) {
        fail(fmt::format("external tensor {} is bound to no buffer", label(t)));
      }
    }
  }

  for (const Node& n : g.nodes) {
    const std::string where = fmt::format("node '{}' ({})", n.name, op_name(n.op));
    auto need = [&](bool ok, const std::string& what) {
      if (!ok) fail(fmt::format("{}: {}", where, what));
    };
    auto arg = [&](int64_t uid, const char* role) -> const Arr& {
      need(uid != 0, fmt::format("has no {}", role));
      const Tensor& t = tensor(uid, where + " " + role);
      auto it = val.find(uid);
      need(it != val.end(), fmt::format("reads {} {} before it is written or bound", role, label(t)));
      return it->second;
    };
    auto none = [&](int64_t uid, const char* role) {
      need(uid == 0, fmt::format("takes no {}, but has uid {}", role, uid));
    };
    auto broadcasts = [](const Dims& from, const Dims& to) {
      for (int k = 0; k < 4; ++k)
        if (from[k] != to[k] && from[k] != 1) return false;
      return true;
    };

    need(n.y != 0, "writes no y");
    const Tensor& yt = tensor(n.y, where + " y");
    need(!val.count(n.y), fmt::format("writes {}, which is already {}", label(yt),
                                      yt.by_value     ? "a by-value scalar"
                                      : in.count(n.y) ? "a bound input"
                                                      : "written by an earlier node"));
    Arr y(yt.dim);
    const Dims yd = yt.dim;
    switch (n.op) {
      case Op::matmul: {
        none(n.t, "t");
        const Arr& a = arg(n.x, "x");
        const Arr& b = arg(n.b, "b");
        const Dims &ad = a.dim, &bd = b.dim;
        const int64_t heads = std::max(ad[1], bd[1]);
        need(ad[3] == bd[2], fmt::format("inner dims differ: x {} @ b {}", str(ad), str(bd)));
        need(ad[0] == bd[0], fmt::format("batch dims differ: x {} @ b {}", str(ad), str(bd)));
        need(heads % ad[1] == 0 && heads % bd[1] == 0,
             fmt::format("head counts do not divide: x {} @ b {}", str(ad), str(bd)));
        const Dims want{ad[0], heads, ad[2], bd[3]};
        need(yd == want, fmt::format("y dims {}, but x {} @ b {} gives {}", str(yd), str(ad), str(bd), str(want)));
        const int64_t rx = heads / ad[1], rb = heads / bd[1];
        for_each_index(yd, [&](const Index& i) {
          double s = 0;
          for (int64_t l = 0; l < ad[3]; ++l) s += a.at({i[0], i[1] / rx, i[2], l}) * b.at({i[0], i[1] / rb, l, i[3]});
          y.at(i) = s;
        });
        break;
      }
      case Op::add:
      case Op::sub:
      case Op::mul:
      case Op::div:
      case Op::cmp_ge: {
        none(n.t, "t");
        const Arr& a = arg(n.x, "x");
        const Arr& b = arg(n.b, "b");
        need(yd == a.dim, fmt::format("y dims {} differ from x dims {}", str(yd), str(a.dim)));
        need(broadcasts(b.dim, a.dim), fmt::format("b dims {} do not broadcast to x dims {}", str(b.dim), str(a.dim)));
        if (n.op == Op::cmp_ge) need(yt.dtype == DType::boolean, fmt::format("y {} is not boolean", label(yt)));
        for_each_index(yd, [&](const Index& i) {
          const double p = a.at(i), q = b.bcast(i);
          double r = 0;
          switch (n.op) {
            case Op::add: r = p + q; break;
            case Op::sub: r = p - q; break;
            case Op::mul: r = p * q; break;
            case Op::div: r = p / q; break;
            default: r = p >= q ? 1.0 : 0.0; break;
          }
          y.at(i) = r;
        });
        break;
      }
      case Op::exp:
      case Op::log:
      case Op::identity: {
        none(n.b, "b");
        none(n.t, "t");
        const Arr& a = arg(n.x, "x");
        need(yd == a.dim, fmt::format("y dims {} differ from x dims {}", str(yd), str(a.dim)));
        for (size_t i = 0; i < a.v.size(); ++i)
          y.v[i] = n.op == Op::exp ? std::exp(a.v[i]) : n.op == Op::log ? std::log(a.v[i]) : a.v[i];
        break;
      }
      case Op::gen_index: {
        none(n.b, "b");
        none(n.t, "t");
        const Arr& a = arg(n.x, "x");
        need(yd == a.dim, fmt::format("y dims {} differ from x dims {}", str(yd), str(a.dim)));
        need(n.axis >= 0 && n.axis < 4, fmt::format("axis {} is not one of 0..3", n.axis));
        need(yt.dtype == DType::i32, fmt::format("y {} is not int32", label(yt)));
        for_each_index(yd, [&](const Index& i) { y.at(i) = double(i[size_t(n.axis)]); });
        break;
      }
      case Op::binary_select: {
        const Arr& a = arg(n.x, "x");
        const Arr& b = arg(n.b, "b");
        const Arr& t = arg(n.t, "t");
        need(yd == a.dim, fmt::format("y dims {} differ from x dims {}", str(yd), str(a.dim)));
        need(broadcasts(b.dim, a.dim), fmt::format("b dims {} do not broadcast to x dims {}", str(b.dim), str(a.dim)));
        need(broadcasts(t.dim, a.dim), fmt::format("t dims {} do not broadcast to x dims {}", str(t.dim), str(a.dim)));
        need(tensor(n.t, where).dtype == DType::boolean, fmt::format("t {} is not boolean", label(tensor(n.t, where))));
        for_each_index(yd, [&](const Index& i) { y.at(i) = t.bcast(i) != 0 ? a.at(i) : b.bcast(i); });
        break;
      }
      case Op::reduce_max:
      case Op::reduce_add: {
        none(n.b, "b");
        none(n.t, "t");
        const Arr& a = arg(n.x, "x");
        const Dims& ad = a.dim;
        Dims group{};  // x elements per y element along each dim
        for (int k = 0; k < 4; ++k) {
          if (yd[k] == ad[k]) {
            group[k] = 1;
          } else if (yd[k] == 1) {
            group[k] = ad[k];
          } else {
            need(k == 1 && yd[k] < ad[k] && ad[k] % yd[k] == 0,
                 fmt::format("y dims {} do not reduce x dims {} (dim {})", str(yd), str(ad), k));
            group[k] = ad[k] / yd[k];
          }
        }
        const bool is_max = n.op == Op::reduce_max;
        std::fill(y.v.begin(), y.v.end(), is_max ? -std::numeric_limits<double>::infinity() : 0.0);
        for_each_index(ad, [&](const Index& i) {
          Index j;
          for (int k = 0; k < 4; ++k) j[k] = i[k] / group[k];
          double& r = y.at(j);
          r = is_max ? std::max(r, a.at(i)) : r + a.at(i);
        });
        break;
      }
      case Op::reshape: {
        none(n.b, "b");
        none(n.t, "t");
        const Arr& a = arg(n.x, "x");
        const Dims want{a.dim[0], a.dim[1], a.dim[3], a.dim[2]};
        need(yd == want, fmt::format("y dims {} are not x dims {} with the last two swapped", str(yd), str(a.dim)));
        for_each_index(yd, [&](const Index& i) { y.at(i) = a.at({i[0], i[1], i[3], i[2]}); });
        break;
      }
      default: need(false, fmt::format("unknown op {}", int(n.op)));
    }
    val.emplace(n.y, std::move(y));
  }

  for (auto& [uid, buf] : out) {
    const Tensor& t = tensor(uid, "an output");
    auto it = val.find(uid);
    if (it == val.end()) fail(fmt::format("output {} is never written", label(t)));
    const auto off = offsets(t, buf.size());
    for (size_t i = 0; i < off.size(); ++i) buf[off[i]] = it->second.v[i];
  }
}

}  // namespace oomb::testing
