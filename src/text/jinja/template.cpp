#include "text/jinja/template.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <map>

#include "core/error.h"
#include "text/jinja/builtins.h"
#include "text/jinja/lexer.h"
#include "text/jinja/parser.h"
#include "text/jinja/value.h"
#include "text/utf8.h"

namespace oomb::jinja {

namespace {

enum class Flow { Normal, Break, Continue };

class Renderer {
 public:
  Renderer(const std::string& name, const Value& variables, const RenderLimits& limits)
      : name_(name), limits_(limits) {
    OOMB_CHECK(variables.is_object(), "chat template {}: its variables must be an object", name);
    given_ = &variables;
    scopes_.push_back(Value::object());
  }

  Rendered run(const Body& body) {
    Rendered r;
    out_ = &r.text;
    spans_ = &r.generation;
    exec(body);
    return r;
  }

 private:
  const std::string& name_;
  std::vector<Value> scopes_;  // [0]: the variables given and top-level sets; back(): innermost
  size_t frame_ = 1;           // a macro's call sees scopes_[frame_..] and scopes_[0]
  const Value* given_ = nullptr;  // the variables given, seen below scopes_[0] (read in place, never copied)
  std::map<std::string, const Stmt*> macros_;
  std::string* out_ = nullptr;
  std::vector<std::pair<size_t, size_t>>* spans_ = nullptr;
  int line_ = 0;
  int depth_ = 0;
  RenderLimits limits_;
  int64_t steps_ = 0;

  int nested_ = 0;  // evaluations and statements in progress, one inside another (macros' too)
  // What keeps the renderer's recursion within the stack, however macros, statements and expressions
  // nest together (each is capped alone, not their product)
  struct Nested {
    Renderer& r;
    explicit Nested(Renderer& renderer) : r(renderer) {
      if (++r.nested_ > 1500) r.error("expressions, statements and macro calls nested more than 1500 deep");
    }
    ~Nested() { --r.nested_; }
  };

  void step() {
    if (++steps_ > limits_.steps) error(fmt::format("more than {} steps (a loop without end?)", limits_.steps));
  }
  // A value's size in units (a node, or 8 bytes of a string), counted up to `cap`; nesting past
  // 512 is an error (as printing or comparing it would be)
  size_t units(const Value& v, size_t cap, int depth = 0) {
    if (depth > 512) error("a value nested more than 512 deep");
    size_t n = 1 + (v.is_string() ? v.get_ref<const std::string&>().size() / 8 : 0);
    if (v.is_array() || v.is_object())
      for (const auto& x : v) {
        if (n > cap) break;
        n += units(x, cap - n, depth + 1);
      }
    return n;
  }
  // A value made by the template: its size within the limit, and charged to the steps (building it
  // took about that much work)
  Value bounded(Value v) {
    const size_t n = units(v, limits_.value_units);
    if (n > limits_.value_units) error(fmt::format("a value of more than {} units (nodes, or 8 bytes of text)",
                                                  limits_.value_units));
    steps_ += int64_t(n / 16);
    return v;
  }

  [[noreturn]] void error(const std::string& what) const { fail("chat template {} line {}: {}", name_, line_, what); }

  // ---- scopes ----
  const Value* find(const std::string& n) const {
    for (size_t i = scopes_.size(); i-- > frame_;) {
      const auto it = scopes_[i].find(n);
      if (it != scopes_[i].end()) return &*it;
    }
    const auto it = scopes_[0].find(n);
    if (it != scopes_[0].end()) return &*it;
    const auto g = given_->find(n);
    return g != given_->end() ? &*g : nullptr;
  }
  Value* find_mutable(const std::string& n) {
    for (size_t i = scopes_.size(); i-- > frame_;) {
      const auto it = scopes_[i].find(n);
      if (it != scopes_[i].end()) return &*it;
    }
    const auto it = scopes_[0].find(n);
    return it != scopes_[0].end() ? &*it : nullptr;
  }
  Value& innermost() { return scopes_.size() > frame_ ? scopes_.back() : scopes_[0]; }

  // ---- statements ----
  Flow exec(const Body& body) {
    for (const auto& s : body) {
      const Flow f = exec(*s);
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

  Flow exec(const Stmt& s) {
    line_ = s.line;
    const Nested nested(*this);
    step();
    if (out_->size() > limits_.bytes) error(fmt::format("an output of more than {} bytes", limits_.bytes));
    switch (s.kind) {
      case Stmt::Text: *out_ += s.text; return Flow::Normal;
      case Stmt::Output: {
        Value t;
        *out_ += py_str(ref(*s.expr, t));
        return Flow::Normal;
      }
      case Stmt::If:
        for (size_t i = 0; i < s.bodies.size(); ++i)
          if (Value t; i >= s.conds.size() || truthy(ref(*s.conds[i], t))) return exec(s.bodies[i]);
        return Flow::Normal;
      case Stmt::For: return exec_for(s);
      case Stmt::Set: {
        Value v = bounded(eval(*s.expr));
        if (!s.text.empty()) {
          Value* ns = find_mutable(s.targets[0]);
          if (!ns || !ns->is_object()) error(fmt::format("set {}.{}: '{}' is not a namespace", s.targets[0], s.text,
                                                          s.targets[0]));
          (*ns)[s.text] = std::move(v);
        } else {
          assign(s.targets, std::move(v), innermost());
        }
        return Flow::Normal;
      }
      case Stmt::SetBlock: {
        std::string captured;
        std::string* saved = out_;
        auto* saved_spans = spans_;
        out_ = &captured, spans_ = nullptr;
        exec(s.bodies[0]);
        out_ = saved, spans_ = saved_spans;
        innermost()[s.targets[0]] = captured;
        return Flow::Normal;
      }
      case Stmt::Macro: macros_[s.text] = &s; return Flow::Normal;
      case Stmt::Generation: {  // (a call block in Python's Jinja: its sets are its own)
        const size_t begin = out_->size();
        scopes_.push_back(Value::object());
        const Flow f = exec(s.bodies[0]);
        scopes_.pop_back();
        if (spans_) spans_->emplace_back(begin, out_->size());
        return f;
      }
      case Stmt::Break: return Flow::Break;
      case Stmt::Continue: return Flow::Continue;
    }
    return Flow::Normal;
  }

  void assign(const std::vector<std::string>& targets, Value v, Value& scope) {
    if (targets.size() == 1) {
      scope[targets[0]] = std::move(v);
      return;
    }
    const Value items = iterate(v);
    if (items.size() != targets.size())
      error(fmt::format("cannot unpack {} values into {} names", items.size(), targets.size()));
    for (size_t i = 0; i < targets.size(); ++i) scope[targets[i]] = items[i];
  }

  Value iterate(const Value& v) {
    return guarded([&] { return as_list(v); });
  }

  Flow exec_for(const Stmt& s) {
    Value t;
    const Value all = iterate(ref(*s.expr, t));
    Value items = Value::array();
    if (s.cond) {
      for (const Value& x : all) {
        scopes_.push_back(Value::object());
        assign(s.targets, x, scopes_.back());
        Value tc;
        const bool keep = truthy(ref(*s.cond, tc));
        scopes_.pop_back();
        if (keep) items.push_back(x);
      }
    } else {
      items = all;
    }
    const int64_t n = int64_t(items.size());
    for (int64_t i = 0; i < n; ++i) {
      scopes_.push_back(Value::object());
      Value& scope = scopes_.back();
      Value loop = {{"index", i + 1},        {"index0", i},       {"revindex", n - i}, {"revindex0", n - i - 1},
                    {"first", i == 0},       {"last", i == n - 1}, {"length", n}};
      if (s.text == "neighbours") {  // (copied only where the body reads loop.previtem or loop.nextitem)
        loop["previtem"] = i > 0 ? items[size_t(i - 1)] : undefined();
        loop["nextitem"] = i + 1 < n ? items[size_t(i + 1)] : undefined();
      }
      scope["loop"] = std::move(loop);
      step();
      assign(s.targets, items[size_t(i)], scope);
      const Flow f = exec(s.bodies[0]);
      scopes_.pop_back();
      if (f == Flow::Break) break;
    }
    if (n == 0 && s.bodies.size() > 1) return exec(s.bodies[1]);
    return Flow::Normal;
  }

  // ---- expressions ----
  // The value of e, without a copy where it is held in a scope (a variable, or an attribute or item
  // of one, however deep: a conversation's messages are read often); otherwise evaluated into tmp.
  // Each part of e is evaluated once.
  const Value& ref(const Expr& e, Value& tmp) {
    if (e.kind == Expr::Name) {
      if (const Value* v = find(e.name)) return *v;
      tmp = undefined();
      return tmp;
    }
    if (e.kind != Expr::Attr && e.kind != Expr::Item) {
      tmp = eval(e);
      return tmp;
    }
    const Nested nested(*this);
    Value t0, t1;
    const Value& obj = ref_before(*e.a, t0, e.kind == Expr::Item && e.b->calls);
    const Value& key = e.kind == Expr::Attr ? (t1 = e.name) : ref(*e.b, t1);
    line_ = e.line;
    if (&obj != &t0) {  // held: point into it
      if (obj.is_object() && key.is_string()) {
        const auto it = obj.find(key.get_ref<const std::string&>());
        if (it != obj.end()) return *it;
      } else if (obj.is_array() && key.is_number_integer()) {
        int64_t i = key.get<int64_t>();
        if (i < 0) i += int64_t(obj.size());
        if (i >= 0 && i < int64_t(obj.size())) return obj[size_t(i)];
      }
    }
    if (key.is_string()) tmp = attribute(obj, key.get<std::string>(), *e.a);
    else if (is_undefined(obj)) error(fmt::format("{} is undefined", describe(*e.a)));
    else tmp = item(obj, key);
    return tmp;
  }
  // ref(), unless what is evaluated while the reference is in use may call a macro, whose statements
  // may change the variable it points into ({% set ns.x %}): then a copy in tmp
  const Value& ref_before(const Expr& e, Value& tmp, bool then_calls) {
    if (!then_calls) return ref(e, tmp);
    tmp = eval(e);
    return tmp;
  }
  static bool calls(const Arguments& a) {
    for (const auto& x : a.positional)
      if (x->calls) return true;
    for (const auto& kx : a.keyword)
      if (kx.second->calls) return true;
    return false;
  }

  Value eval(const Expr& e) {
    line_ = e.line;
    const Nested nested(*this);
    step();
    Value t0, t1;
    switch (e.kind) {
      case Expr::Literal: return e.value;
      case Expr::Name: {
        const Value* v = find(e.name);
        return v ? *v : undefined();
      }
      case Expr::Attr:
      case Expr::Item: {
        const Value& v = ref(e, t0);
        return &v == &t0 ? std::move(t0) : v;
      }
      case Expr::Slice: {
        const Value& obj = ref_before(*e.a, t0, (e.b && e.b->calls) || (e.c && e.c->calls) || (e.d && e.d->calls));
        const Value a = e.b ? eval(*e.b) : Value(), b = e.c ? eval(*e.c) : Value(), c = e.d ? eval(*e.d) : Value();
        line_ = e.line;
        return slice(obj, a, b, c);
      }
      case Expr::Compare: {  // Python's chain: a < b < c is a < b and b < c, b read once
        Value buf[2];
        const Value* left = &ref_before(*e.a, buf[0], e.calls);
        for (size_t i = 0; i < e.items.size(); ++i) {  // (left is in the other buffer, or held)
          const Value* right = &ref_before(*e.items[i], buf[(i + 1) % 2], e.calls);
          line_ = e.line;
          if (!compare(e.ops[i], *left, *right)) return false;
          left = right;
        }
        return true;
      }
      case Expr::Call: return call(e);
      case Expr::Filter: return filter(e);
      case Expr::Test: {
        const bool r = test(e);
        return e.negated ? !r : r;
      }
      case Expr::Unary: {
        const Value& v = ref(*e.a, t0);
        if (e.name == "not") return !truthy(v);
        if (!v.is_number() && !v.is_boolean()) error(fmt::format("unary '{}' on {}", e.name, type_name(v)));
        if (e.name == "+") return v;
        if (v.is_number_float()) return -v.get<double>();
        const int64_t i = v.is_boolean() ? int64_t(v.get<bool>()) : v.get<int64_t>();
        if (i == INT64_MIN) error("unary '-': integer overflow");
        return -i;
      }
      case Expr::Binary: return binary(e);
      case Expr::Cond:
        if (truthy(eval(*e.a))) return eval(*e.b);
        return e.c ? eval(*e.c) : undefined();
      case Expr::List:
      case Expr::Tuple: {
        Value out = Value::array();
        for (const auto& x : e.items) out.push_back(eval(*x));
        return bounded(std::move(out));
      }
      case Expr::Dict: {
        Value out = Value::object();
        for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
          const Value k = eval(*e.items[i]);
          if (!k.is_string()) error(fmt::format("a dict's keys must be strings here, not {}", type_name(k)));
          out[k.get<std::string>()] = eval(*e.items[i + 1]);
        }
        return bounded(std::move(out));
      }
    }
    return undefined();
  }

  std::string describe(const Expr& e) const {
    switch (e.kind) {
      case Expr::Name: return "'" + e.name + "'";
      case Expr::Attr: return describe(*e.a) + "." + e.name;
      case Expr::Item: return describe(*e.a) + "[...]";
      default: return "the value";
    }
  }

  Value attribute(const Value& obj, const std::string& key, const Expr& of) {
    if (is_undefined(obj)) error(fmt::format("{} is undefined (reading '{}' of it)", describe(of), key));
    if (obj.is_object()) {
      const auto it = obj.find(key);
      return it != obj.end() ? *it : undefined();
    }
    return undefined();
  }

  Value item(const Value& obj, const Value& key) {
    if (!key.is_number_integer() && !key.is_boolean()) return undefined();
    int64_t i = key.is_boolean() ? int64_t(key.get<bool>()) : key.get<int64_t>();
    if (obj.is_array()) {
      const int64_t n = int64_t(obj.size());
      if (i < 0) i += n;
      return i >= 0 && i < n ? obj[size_t(i)] : undefined();
    }
    if (obj.is_string()) {
      const auto cs = characters(obj.get_ref<const std::string&>());
      const int64_t n = int64_t(cs.size());
      if (i < 0) i += n;
      return i >= 0 && i < n ? Value(cs[size_t(i)]) : undefined();
    }
    return undefined();
  }

  Value slice(const Value& obj, const Value& a, const Value& b, const Value& c) {
    for (const Value* v : {&a, &b, &c})
      if (!v->is_null() && !v->is_number_integer()) error("slice indices must be integers or none");
    const int64_t step = c.is_null() ? 1 : c.get<int64_t>();
    if (step == 0) error("slice step cannot be zero");
    const bool str = obj.is_string();
    if (!str && !obj.is_array()) error(fmt::format("cannot slice {}", type_name(obj)));
    const std::vector<std::string> chars = str ? characters(obj.get_ref<const std::string&>()) : std::vector<std::string>();
    const int64_t n = int64_t(str ? chars.size() : obj.size());
    auto clamp = [&](const Value& v, int64_t dflt) {  // Python's slice bounds
      if (v.is_null()) return dflt;
      int64_t i = v.get<int64_t>();
      if (i < 0) i += n;
      if (step > 0) return std::clamp<int64_t>(i, 0, n);
      return std::clamp<int64_t>(i, -1, n - 1);
    };
    const int64_t from = clamp(a, step > 0 ? 0 : n - 1), to = clamp(b, step > 0 ? n : -1);
    Value out = str ? Value("") : Value::array();
    for (int64_t i = from; step > 0 ? i < to : i > to; i += step) {
      if (str) out.get_ref<std::string&>() += chars[size_t(i)];
      else out.push_back(obj[size_t(i)]);
    }
    return out;
  }

  Value binary(const Expr& e) {
    const std::string& op = e.name;
    if (op == "and" || op == "or") {
      Value t;
      const Value& l = ref(*e.a, t);
      return truthy(l) == (op == "and") ? eval(*e.b) : l;
    }
    Value tl, tr;
    const Value& l = ref_before(*e.a, tl, e.b->calls);
    const Value& r = ref(*e.b, tr);
    line_ = e.line;
    if (op == "~") return bounded(Value(py_str(l) + py_str(r)));
    return bounded(guarded([&] { return arithmetic(op, l, r); }));
  }

  bool compare(const std::string& op, const Value& l, const Value& r) {
    if (op == "==") return py_equal(l, r);
    if (op == "!=") return !py_equal(l, r);
    if (op == "in") return contains(r, l);
    if (op == "not in") return !contains(r, l);
    const int c = guarded([&] { return py_compare(l, r, op.c_str()); });
    return op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0;
  }

  template <typename F>
  auto guarded(F f) -> decltype(f()) {
    try {
      return f();
    } catch (const Error& x) {
      if (std::string_view(x.what()).starts_with("chat template")) throw;
      error(x.what());
    } catch (const nlohmann::json::exception& x) {  // (a value of a type no check foresaw)
      error(x.what());
    }
  }

  bool contains(const Value& hay, const Value& needle) {
    if (hay.is_string()) {
      if (!needle.is_string()) error(fmt::format("'in <string>' needs a string on the left, not {}", type_name(needle)));
      return hay.get_ref<const std::string&>().find(needle.get_ref<const std::string&>()) != std::string::npos;
    }
    if (hay.is_array()) return std::any_of(hay.begin(), hay.end(), [&](const Value& x) { return py_equal(x, needle); });
    if (hay.is_object()) return needle.is_string() && hay.contains(needle.get<std::string>());
    if (is_undefined(hay)) return false;
    error(fmt::format("'in' needs a string, list or dict on the right, not {}", type_name(hay)));
  }

  // ---- calls: macros, global functions, methods ----
  Value call(const Expr& e) {
    const Expr& f = *e.a;
    if (f.kind == Expr::Name) {
      const auto m = macros_.find(f.name);
      if (m != macros_.end() && !find(f.name)) return call_macro(*m->second, e.args);
      const Args a = arguments(e.args);
      line_ = e.line;
      return bounded(guarded([&] { return call_global(f.name, a, std::time(nullptr)); }));
    }
    if (f.kind == Expr::Attr) {
      Value t;
      const Value& obj = ref_before(*f.a, t, calls(e.args));
      const Args a = arguments(e.args);
      line_ = e.line;
      return bounded(guarded([&] { return call_method(obj, f.name, a); }));
    }
    error("only macros, global functions and methods can be called");
  }

  Args arguments(const Arguments& args) {
    Args a;
    for (const auto& x : args.positional) a.positional.push_back(eval(*x));
    for (const auto& [k, x] : args.keyword) a.keyword[k] = eval(*x);
    return a;
  }

  Value call_macro(const Stmt& m, const Arguments& args) {
    if (++depth_ > 256) error(fmt::format("macro {}: calls nested more than 256 deep", m.text));
    const Args a = arguments(args);
    Value scope = Value::object();
    if (a.positional.size() > m.params.size())
      error(fmt::format("macro {} takes {} arguments, given {}", m.text, m.params.size(), a.positional.size()));
    for (size_t i = 0; i < m.params.size(); ++i) {
      const auto& [p, def] = m.params[i];
      const auto k = a.keyword.find(p);
      if (i < a.positional.size()) scope[p] = a.positional[i];
      else if (k != a.keyword.end()) scope[p] = k->second;
      else scope[p] = def ? eval(*def) : undefined();
    }
    for (const auto& kv : a.keyword)
      if (std::none_of(m.params.begin(), m.params.end(), [&](const auto& p) { return p.first == kv.first; }))
        error(fmt::format("macro {} has no argument '{}'", m.text, kv.first));
    const size_t saved_frame = frame_;
    std::string* saved_out = out_;
    auto* saved_spans = spans_;
    std::string text;
    frame_ = scopes_.size();
    scopes_.push_back(std::move(scope));
    out_ = &text, spans_ = nullptr;
    exec(m.bodies[0]);
    scopes_.pop_back();
    frame_ = saved_frame, out_ = saved_out, spans_ = saved_spans;
    --depth_;
    return text;
  }

  // ---- filters and tests ----
  Value filter(const Expr& e) {
    Value t;
    const Value& v = ref_before(*e.a, t, calls(e.args));
    const Args a = arguments(e.args);
    line_ = e.line;
    if (e.name == "map" || e.name == "select" || e.name == "reject") return bounded(higher_order(e.name, v, a));
    return bounded(guarded([&] { return apply_filter(e.name, v, a); }));
  }

  bool test(const Expr& e) {
    const Expr& x = *e.a;
    Value t;
    if (e.name == "defined" || e.name == "undefined") {  // (a global function or a macro is defined too)
      const bool defined = !is_undefined(ref(x, t)) || (x.kind == Expr::Name && callable(x.name));
      return e.name == "defined" ? defined : !defined;
    }
    const Value& v = ref_before(x, t, calls(e.args));
    const Args a = arguments(e.args);
    line_ = e.line;
    if (e.name == "callable") return x.kind == Expr::Name && is_undefined(v) && callable(x.name);
    return guarded([&] { return apply_test(e.name, v, a); });
  }

  bool callable(const std::string& name) const {
    static const char* const globals[] = {"raise_exception", "strftime_now", "namespace", "range", "dict"};
    return macros_.count(name) > 0 || std::any_of(std::begin(globals), std::end(globals), [&](const char* g) { return name == g; });
  }

  // map(attribute=...) or map('filter', args...); select/reject('test', args...)
  Value higher_order(const std::string& name, const Value& v, const Args& a) {
    Value out = Value::array();
    if (!truthy(v)) return out;  // (Jinja's: none, undefined or empty give nothing)
    const Value items = iterate(v);
    if (name == "map") {
      const auto attr = a.keyword.find("attribute");
      if (attr != a.keyword.end()) {
        const auto dflt = a.keyword.find("default");
        for (const Value& x : items) {
          Value r = guarded([&] { return attribute_path(x, attr->second); });
          out.push_back(is_undefined(r) && dflt != a.keyword.end() ? dflt->second : r);
        }
        return out;
      }
      if (a.positional.empty() || !a.positional[0].is_string()) error("map needs a filter's name or attribute=");
      Args rest{std::vector<Value>(a.positional.begin() + 1, a.positional.end()), a.keyword};
      for (const Value& x : items) out.push_back(guarded([&] { return apply_filter(a.positional[0].get<std::string>(), x, rest); }));
      return out;
    }
    const bool keep_if = name == "select";
    if (!a.positional.empty() && !a.positional[0].is_string())
      error(fmt::format("{}: the test's name must be a string, not {}", name, type_name(a.positional[0])));
    Args rest;
    if (!a.positional.empty()) rest.positional.assign(a.positional.begin() + 1, a.positional.end());
    for (const Value& x : items) {
      const bool pass = a.positional.empty() ? truthy(x)
                                             : guarded([&] { return apply_test(a.positional[0].get<std::string>(), x, rest); });
      if (pass == keep_if) out.push_back(x);
    }
    return out;
  }
};

}  // namespace

static bool holds_generation(const Body& body) {
  for (const auto& s : body) {
    if (s->kind == Stmt::Generation) return true;
    for (const Body& b : s->bodies)
      if (holds_generation(b)) return true;
  }
  return false;
}

static std::string_view checked_utf8(std::string_view source, const std::string& name) {
  const size_t bad = utf8_first_invalid(source);
  OOMB_CHECK(bad == source.size(), "chat template {}: not valid UTF-8 at byte {}", name, bad);
  return source;
}

Template::Template(std::string_view source, std::string name)
    : name_(std::move(name)), body_(std::make_unique<Body>(parse(lex(checked_utf8(source, name_), name_), name_))) {
  has_generation_ = holds_generation(*body_);
}
Template::~Template() = default;
Template::Template(Template&&) noexcept = default;

Rendered Template::render(const Value& variables, const RenderLimits& limits) const {
  try {
    return Renderer(name_, variables, limits).run(*body_);
  } catch (const nlohmann::json::exception& e) {  // (a value of a type no check foresaw)
    fail("chat template {}: {}", name_, e.what());
  }
}

}  // namespace oomb::jinja
