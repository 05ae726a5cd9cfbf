#include "text/jinja/builtins.h"

#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "core/error.h"
#include "text/jinja/value.h"

namespace oomb::jinja {

namespace {

const std::string& str_arg(const Args& a, size_t i, const char* what) {
  if (i >= a.positional.size() || !a.positional[i].is_string()) fail("{} needs a string argument", what);
  return a.positional[i].get_ref<const std::string&>();
}

// positional i, else keyword `key`, else nullptr
const Value* arg(const Args& a, size_t i, const char* key) {
  if (i < a.positional.size()) return &a.positional[i];
  const auto it = a.keyword.find(key);
  return it != a.keyword.end() ? &it->second : nullptr;
}

std::vector<int32_t> decode(const std::string& s) {
  std::vector<int32_t> cps;
  auto p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  utf8proc_ssize_t left = utf8proc_ssize_t(s.size());
  while (left > 0) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t n = utf8proc_iterate(p, left, &cp);
    if (n <= 0) cp = uint8_t(*p), n = 1;  // not UTF-8: the byte as it is
    cps.push_back(cp);
    p += n, left -= n;
  }
  return cps;
}

std::string encode(const std::vector<int32_t>& cps) {
  std::string out;
  for (const int32_t cp : cps) {
    utf8proc_uint8_t buf[4];
    const auto n = utf8proc_encode_char(cp, buf);
    out.append(reinterpret_cast<const char*>(buf), size_t(n));
  }
  return out;
}

bool is_space(int32_t cp) { return py_isspace(cp); }

// str.strip / lstrip / rstrip: `chars` (or whitespace when absent or None)
std::string strip(const std::string& s, const Value* chars, bool left, bool right) {
  const auto cps = decode(s);
  std::vector<int32_t> set;
  const bool ws = !chars || chars->is_null() || is_undefined(*chars);
  if (!ws) {
    if (!chars->is_string()) fail("strip: chars must be a string, not {}", type_name(*chars));
    set = decode(chars->get<std::string>());
  }
  auto drop = [&](int32_t cp) { return ws ? is_space(cp) : std::find(set.begin(), set.end(), cp) != set.end(); };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && drop(cps[b])) ++b;
  if (right)
    while (e > b && drop(cps[e - 1])) --e;
  return encode(std::vector<int32_t>(cps.begin() + std::ptrdiff_t(b), cps.begin() + std::ptrdiff_t(e)));
}

enum class Case { Lower, Upper, Title };

// c in a case, as Python maps it: one code point to one (utf8proc's), but ß upper is SS, title Ss
void put_case(std::vector<int32_t>& out, int32_t c, Case to) {
  if (c == 0xDF && to != Case::Lower) {
    out.push_back('S'), out.push_back(to == Case::Upper ? 'S' : 's');
    return;
  }
  out.push_back(to == Case::Lower ? utf8proc_tolower(c) : to == Case::Upper ? utf8proc_toupper(c) : utf8proc_totitle(c));
}

bool cased(int32_t c) { return utf8proc_toupper(c) != c || utf8proc_tolower(c) != c || utf8proc_totitle(c) != c; }

// 0 lower, 1 upper, 2 capitalize (the first title case, the rest lower), 3 str.title (each run of
// cased characters: its first title case, the rest lower)
std::string map_case(const std::string& s, int how) {
  const auto cps = decode(s);
  std::vector<int32_t> out;
  bool prev_cased = false;
  for (size_t i = 0; i < cps.size(); ++i) {
    const int32_t c = cps[i];
    Case to = how == 1 ? Case::Upper : Case::Lower;
    if (how == 2 && i == 0) to = Case::Title;
    if (how == 3 && !prev_cased) to = Case::Title;
    put_case(out, c, to);
    prev_cased = cased(c);
  }
  return encode(out);
}

Value split(const std::string& s, const Value* sep, const Value* maxsplit) {
  int64_t max = maxsplit && maxsplit->is_number_integer() ? maxsplit->get<int64_t>() : -1;
  Value out = Value::array();
  if (!sep || sep->is_null()) {  // runs of whitespace, none at either end
    const auto cps = decode(s);
    size_t i = 0;
    while (i < cps.size()) {
      while (i < cps.size() && is_space(cps[i])) ++i;
      if (i == cps.size()) break;
      if (max >= 0 && int64_t(out.size()) == max) {  // (the rest as it is, its trailing spaces too)
        out.push_back(encode({cps.begin() + std::ptrdiff_t(i), cps.end()}));
        break;
      }
      const size_t b = i;
      while (i < cps.size() && !is_space(cps[i])) ++i;
      out.push_back(encode({cps.begin() + std::ptrdiff_t(b), cps.begin() + std::ptrdiff_t(i)}));
    }
    return out;
  }
  if (!sep->is_string()) fail("split: the separator must be a string, not {}", type_name(*sep));
  const std::string& d = sep->get_ref<const std::string&>();
  if (d.empty()) fail("split: empty separator");
  size_t b = 0;
  for (size_t p; (max < 0 || int64_t(out.size()) < max) && (p = s.find(d, b)) != std::string::npos; b = p + d.size())
    out.push_back(s.substr(b, p - b));
  out.push_back(s.substr(b));
  return out;
}

std::string replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  if (from.empty()) {  // Python: `to` between every character and at both ends
    const auto cs = characters(s);
    int64_t n = 0;
    for (const auto& c : cs) {
      if (count < 0 || n < count) out += to, ++n;
      out += c;
    }
    if (count < 0 || n < count) out += to;
    return out;
  }
  size_t b = 0;
  int64_t n = 0;
  for (size_t p; (count < 0 || n < count) && (p = s.find(from, b)) != std::string::npos; b = p + from.size(), ++n)
    out += s.substr(b, p - b) + to;
  return out + s.substr(b);
}

int64_t length(const Value& v) {
  if (v.is_string()) return int64_t(decode(v.get_ref<const std::string&>()).size());
  if (v.is_array() || v.is_object()) return int64_t(v.size());
  if (is_undefined(v)) return 0;
  fail("length: {} has no length", type_name(v));
}

}  // namespace

Value as_list(const Value& v) {
  if (v.is_array()) return v;
  Value out = Value::array();
  if (v.is_object()) {
    for (const auto& [k, x] : v.items()) out.push_back(k);
  } else if (v.is_string()) {
    for (const auto& c : characters(v.get_ref<const std::string&>())) out.push_back(c);
  } else if (!is_undefined(v)) {
    fail("'{}' is not iterable", type_name(v));
  }
  return out;
}

namespace {

bool starts_or_ends(const std::string& s, const Value& what, bool start) {
  auto one = [&](const Value& p) {
    if (!p.is_string()) fail("{}: needs a string or a tuple of strings, not {}", start ? "startswith" : "endswith",
                             type_name(p));
    const std::string& t = p.get_ref<const std::string&>();
    return start ? s.starts_with(t) : s.ends_with(t);
  };
  if (what.is_array()) return std::any_of(what.begin(), what.end(), one);
  return one(what);
}

double num(const Value& v) { return v.is_boolean() ? double(v.get<bool>()) : v.get<double>(); }
bool is_int(const Value& v) { return v.is_number_integer() || v.is_boolean(); }
int64_t int_of(const Value& v) {
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX))
    fail("{}: an integer beyond 64 bits (Python's are unbounded; this subset's hold 64)", v.get<uint64_t>());
  return v.is_boolean() ? int64_t(v.get<bool>()) : v.get<int64_t>();
}

// Jinja's title filter (not str.title): words begin after runs of '-', '(', '{', '[', '<' and
// whitespace; each word's first character upper case, the rest lower
std::string jinja_title(const std::string& s) {
  const auto cps = decode(s);
  std::vector<int32_t> out;
  bool word_start = true;
  for (const int32_t c : cps) {
    const bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || is_space(c);
    if (sep) out.push_back(c);
    else put_case(out, c, word_start ? Case::Upper : Case::Lower);  // (Jinja: item[0].upper())
    word_start = sep;
  }
  return encode(out);
}

// text (whitespace around it aside) read whole by read(s, &used) (std::stoll, std::stod); nothing where it is not
template <typename T, typename Read>
std::optional<T> read_whole(const std::string& text, Read read) {
  const std::string s = strip(text, nullptr, true, true);
  try {
    size_t used = 0;
    const T v = read(s, &used);
    if (used == s.size()) return v;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

std::string escape_html(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace

Value attribute_path(const Value& x, const Value& path) {
  if (is_int(path)) {  // an item's index
    if (!x.is_array()) return undefined();
    int64_t i = int_of(path);
    if (i < 0) i += int64_t(x.size());
    return i >= 0 && i < int64_t(x.size()) ? x[size_t(i)] : undefined();
  }
  if (!path.is_string()) fail("an attribute must be a string or an integer, not {}", type_name(path));
  const Value* at = &x;
  const std::string& p = path.get_ref<const std::string&>();
  for (size_t b = 0;;) {
    const size_t e = std::min(p.find('.', b), p.size());
    const std::string part = p.substr(b, e - b);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (at->is_object() && at->contains(part)) {
      at = &(*at)[part];
    } else if (digits && at->is_array() && part.size() < 10 && std::stoul(part) < at->size()) {
      at = &(*at)[std::stoul(part)];
    } else if (e == p.size()) {
      return undefined();
    } else {  // (Jinja reads on into the undefined, which fails)
      fail("attribute '{}': {} has no '{}'", p, type_name(*at), part);
    }
    if (e == p.size()) return *at;
    b = e + 1;
  }
}

std::vector<std::string> characters(const std::string& s) {
  std::vector<std::string> out;
  for (const int32_t cp : decode(s)) out.push_back(encode({cp}));
  return out;
}

Value apply_filter(const std::string& name, const Value& v, const Args& a) {
  if (name == "length" || name == "count") return length(v);
  if (name == "safe") return v;
  if (name == "string") return py_str(v);
  if (name == "list") return as_list(v);
  if (name == "tojson") {  // Hugging Face's: tojson(ensure_ascii=False, indent=None, separators=None, sort_keys=False)
    for (const auto& kv : a.keyword)
      if (kv.first != "ensure_ascii" && kv.first != "indent" && kv.first != "separators" && kv.first != "sort_keys")
        fail("tojson has no argument '{}'", kv.first);
    if (a.positional.size() > 4) fail("tojson takes at most 4 arguments");
    JsonStyle st;
    if (const Value* e = arg(a, 0, "ensure_ascii")) st.ensure_ascii = truthy(*e);
    if (const Value* in = arg(a, 1, "indent"); in && !in->is_null()) {
      if (in->is_string()) st.indent = in->get<std::string>();
      else if (is_int(*in) && int_of(*in) <= 1024) st.indent = std::string(size_t(std::max<int64_t>(int_of(*in), 0)), ' ');
      else fail("tojson: indent is an integer up to 1024, a string or none");
      st.item_sep = ",";
    }
    if (const Value* sep = arg(a, 2, "separators"); sep && !sep->is_null()) {
      if (!sep->is_array() || sep->size() != 2 || !(*sep)[0].is_string() || !(*sep)[1].is_string())
        fail("tojson: separators are two strings");
      st.item_sep = (*sep)[0].get<std::string>(), st.key_sep = (*sep)[1].get<std::string>();
    }
    if (const Value* sk = arg(a, 3, "sort_keys")) st.sort_keys = truthy(*sk);
    return py_json(v, st);
  }
  if (name == "dictsort") {  // (value, case_sensitive=False, by='key', reverse=False): its (key, value) pairs
    if (!v.is_object()) fail("dictsort: {} is not a dict", type_name(v));
    const Value* cs = arg(a, 0, "case_sensitive");
    const Value* by = arg(a, 1, "by");
    const Value* rev = arg(a, 2, "reverse");
    const bool sensitive = cs && truthy(*cs), by_value = by && by->is_string() && by->get<std::string>() == "value";
    if (by && !(by->is_string() && (by->get<std::string>() == "key" || by->get<std::string>() == "value")))
      fail("dictsort: by is 'key' or 'value'");
    Value out = apply_filter("items", v, {});
    std::vector<Value> pairs(out.begin(), out.end());
    std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& x, const Value& y) {
      Value kx = x[by_value ? 1 : 0], ky = y[by_value ? 1 : 0];
      if (!sensitive && kx.is_string()) kx = map_case(kx.get<std::string>(), 0);
      if (!sensitive && ky.is_string()) ky = map_case(ky.get<std::string>(), 0);
      return py_compare(kx, ky, "dictsort") < 0;
    });
    if (rev && truthy(*rev)) std::reverse(pairs.begin(), pairs.end());
    return Value(pairs);
  }
  if (name == "default" || name == "d") {
    const Value* dflt = arg(a, 0, "default_value");
    const Value* boolean = arg(a, 1, "boolean");
    const bool use = is_undefined(v) || (boolean && truthy(*boolean) && !truthy(v));
    return use ? (dflt ? *dflt : Value("")) : v;
  }
  if (name == "first" || name == "last") {
    const Value l = as_list(v);
    if (l.empty()) return undefined();
    return name == "first" ? l.front() : l.back();
  }
  if (name == "reverse") {
    if (v.is_string()) {
      auto cs = characters(v.get<std::string>());
      std::reverse(cs.begin(), cs.end());
      std::string out;
      for (const auto& c : cs) out += c;
      return out;
    }
    Value l = as_list(v);
    std::reverse(l.begin(), l.end());
    return l;
  }
  if (name == "join") {
    const Value* sep = arg(a, 0, "d");
    const Value* attr = arg(a, 1, "attribute");
    if (attr && !attr->is_string() && !is_int(*attr)) fail("join: attribute must be a string, not {}", type_name(*attr));
    std::string out;
    bool first = true;
    for (const Value& x : as_list(v)) {
      out += (first ? "" : (sep ? py_str(*sep) : "")) + py_str(attr ? attribute_path(x, *attr) : x), first = false;
    }
    return out;
  }
  if (name == "items") {
    if (is_undefined(v)) return Value::array();
    if (!v.is_object()) fail("items: {} is not a dict", type_name(v));
    Value out = Value::array();
    for (const auto& [k, x] : v.items()) out.push_back(Value::array({k, x}));
    return out;
  }
  if (name == "selectattr" || name == "rejectattr") {
    if (a.positional.empty()) fail("{} needs an attribute", name);
    const Value& attr = a.positional[0];
    Args rest;
    if (a.positional.size() > 2) rest.positional.assign(a.positional.begin() + 2, a.positional.end());
    Value out = Value::array();
    if (!truthy(v)) return out;  // (Jinja's: none, undefined or empty give nothing)
    for (const Value& x : as_list(v)) {
      const Value y = attribute_path(x, attr);
      const bool pass = a.positional.size() > 1 ? apply_test(str_arg(a, 1, name.c_str()), y, rest) : truthy(y);
      if (pass == (name == "selectattr")) out.push_back(x);
    }
    return out;
  }
  if (name == "abs") {
    if (is_int(v)) {
      if (int_of(v) == INT64_MIN) fail("abs: integer overflow");
      return std::abs(int_of(v));
    }
    if (v.is_number()) return std::abs(v.get<double>());
    fail("abs: {} is not a number", type_name(v));
  }
  if (name == "int") {
    const Value* dflt = arg(a, 0, "default");
    if (is_int(v)) return int_of(v);
    if (v.is_number_float()) {
      const double d = std::trunc(v.get<double>());
      if (!(d >= -9.2e18 && d <= 9.2e18)) fail("int: {} is beyond 64 bits", float_repr(v.get<double>()));
      return int64_t(d);
    }
    if (v.is_string()) {
      if (const auto i = read_whole<int64_t>(v.get<std::string>(), [](auto& s, size_t* n) { return std::stoll(s, n); }))
        return *i;
      // (Jinja's int: then int(float(value)))
      const auto d = read_whole<double>(v.get<std::string>(), [](auto& s, size_t* n) { return std::stod(s, n); });
      if (d && std::trunc(*d) >= -9.2e18 && std::trunc(*d) <= 9.2e18) return int64_t(std::trunc(*d));
    }
    return dflt ? *dflt : Value(0);
  }
  if (name == "float") {
    const Value* dflt = arg(a, 0, "default");
    if (v.is_number() || v.is_boolean()) return num(v);
    if (v.is_string())
      if (const auto d = read_whole<double>(v.get<std::string>(), [](auto& s, size_t* n) { return std::stod(s, n); }))
        return *d;
    return dflt ? *dflt : Value(0.0);
  }
  if (name == "round") {
    const Value* p = arg(a, 0, "precision");
    const Value* method = arg(a, 1, "method");
    const double scale = std::pow(10.0, p && is_int(*p) ? double(int_of(*p)) : 0.0);
    if (method && !method->is_string()) fail("round: method must be a string, not {}", type_name(*method));
    if (!v.is_number() && !v.is_boolean()) fail("round: {} is not a number", type_name(v));
    if (p && !is_int(*p)) fail("round: precision must be an integer");
    const std::string m = method ? method->get<std::string>() : "common";
    const int64_t digits = p ? int_of(*p) : 0;
    if (m == "common") {  // Python's round(): the nearest multiple of 10^-digits, ties to even; an int stays one
      if (is_int(v)) return int_of(v);
      if (!std::isfinite(num(v)) || digits > 300 || digits < -300) return num(v);
      char buf[400];
      if (digits >= 0) {  // (printf rounds the exact binary value, ties to even, as Python does)
        std::snprintf(buf, sizeof buf, "%.*f", int(digits), num(v));
        return std::strtod(buf, nullptr);
      }
      return std::nearbyint(num(v) / std::pow(10.0, double(-digits))) * std::pow(10.0, double(-digits));
    }
    if (m != "ceil" && m != "floor") fail("round: method must be common, ceil or floor");
    const double x = num(v) * scale;
    return (m == "ceil" ? std::ceil(x) : std::floor(x)) / scale;
  }
  if (name == "escape" || name == "e") return escape_html(py_str(v));
  if (name == "indent") {
    const Value* width = arg(a, 0, "width");
    const Value* first = arg(a, 1, "first");
    const Value* blank = arg(a, 2, "blank");
    if (width && !width->is_string() && !(is_int(*width) && int_of(*width) >= 0 && int_of(*width) <= 1024))
      fail("indent: the width is a string or an integer in 0..1024");
    const std::string pad = width && width->is_string() ? width->get<std::string>()
                                                        : std::string(size_t(width ? int_of(*width) : 4), ' ');
    const std::string s = py_str(v);
    std::string out;
    size_t b = 0;
    bool line0 = true;
    while (true) {
      const size_t e = s.find('\n', b);
      const std::string line = s.substr(b, e == std::string::npos ? std::string::npos : e - b);
      const bool pad_it = line0 ? (first && truthy(*first)) : (!line.empty() || (blank && truthy(*blank)));
      out += (pad_it ? pad : "") + line;
      if (e == std::string::npos) break;
      out += '\n', b = e + 1, line0 = false;
    }
    return out;
  }
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    if (name == "trim") return strip(s, arg(a, 0, "chars"), true, true);
    if (name == "upper") return map_case(s, 1);
    if (name == "lower") return map_case(s, 0);
    if (name == "capitalize") return map_case(s, 2);
    if (name == "title") return jinja_title(s);
    if (name == "replace") {
      const Value* count = arg(a, 2, "count");
      if (count && !is_int(*count)) fail("replace: count must be an integer");
      return replace(s, str_arg(a, 0, "replace"), str_arg(a, 1, "replace"), count ? int_of(*count) : -1);
    }
  } else if (name == "trim" || name == "upper" || name == "lower" || name == "capitalize" || name == "title" ||
             name == "replace") {
    return apply_filter(name, py_str(v), a);
  }
  fail("no filter named '{}' (oomb's Jinja subset)", name);
}

bool apply_test(const std::string& name, const Value& v, const Args& a) {
  auto other = [&]() -> const Value& {
    if (a.positional.empty()) fail("the test '{}' needs an argument", name);
    return a.positional[0];
  };
  if (name == "defined") return !is_undefined(v);
  if (name == "undefined") return is_undefined(v);
  if (name == "none") return v.is_null();
  if (name == "boolean") return v.is_boolean();
  if (name == "true") return v.is_boolean() && v.get<bool>();
  if (name == "false") return v.is_boolean() && !v.get<bool>();
  if (name == "integer") return v.is_number_integer();
  if (name == "float") return v.is_number_float();
  if (name == "number") return v.is_number() || v.is_boolean();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_object();
  if (name == "sequence") return v.is_array() || v.is_string() || v.is_object();
  if (name == "iterable") return v.is_array() || v.is_string() || v.is_object();
  if (name == "callable") return false;
  if (name == "eq" || name == "equalto" || name == "==") return py_equal(v, other());
  if (name == "ne" || name == "!=") return !py_equal(v, other());
  if (name == "sameas") {
    const Value& o = other();
    return (v.is_null() && o.is_null()) || (v.is_boolean() && o.is_boolean() && v == o);
  }
  if (name == "lt" || name == "lessthan" || name == "<") return py_compare(v, other(), "<") < 0;
  if (name == "le" || name == "<=") return py_compare(v, other(), "<=") <= 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return py_compare(v, other(), ">") > 0;
  if (name == "ge" || name == ">=") return py_compare(v, other(), ">=") >= 0;
  if (name == "in") {
    const Value& o = other();
    if (o.is_string()) return v.is_string() && o.get<std::string>().find(v.get<std::string>()) != std::string::npos;
    if (o.is_array()) return std::any_of(o.begin(), o.end(), [&](const Value& x) { return py_equal(x, v); });
    if (o.is_object()) return v.is_string() && o.contains(v.get<std::string>());
    fail("the test 'in' needs a string, list or dict, not {}", type_name(o));
  }
  if (name == "odd" || name == "even") {
    if (!is_int(v)) fail("the test '{}' needs an integer, not {}", name, type_name(v));
    return (int_of(v) % 2 != 0) == (name == "odd");  // (INT64_MIN % 2 is defined)
  }
  if (name == "divisibleby") {
    const Value& o = other();
    if (!is_int(v) || !is_int(o) || int_of(o) == 0) fail("divisibleby needs integers, the divisor not 0");
    return int_of(o) == -1 || int_of(v) % int_of(o) == 0;
  }
  if (name == "lower" || name == "upper") {
    if (!v.is_string()) return false;
    const std::string& s = v.get_ref<const std::string&>();
    bool any_cased = false;  // (Python's islower / isupper: at least one cased character)
    for (const int32_t cp : decode(s)) any_cased = any_cased || cased(cp);
    return any_cased && map_case(s, name == "lower" ? 0 : 1) == s;
  }
  fail("no test named '{}' (oomb's Jinja subset)", name);
}

Value call_method(const Value& obj, const std::string& name, const Args& a) {
  if (obj.is_string()) {
    const std::string& s = obj.get_ref<const std::string&>();
    if (name == "startswith" || name == "endswith") {
      if (a.positional.empty()) fail("{} needs an argument", name);
      return starts_or_ends(s, a.positional[0], name == "startswith");
    }
    if (name == "strip") return strip(s, arg(a, 0, "chars"), true, true);
    if (name == "lstrip") return strip(s, arg(a, 0, "chars"), true, false);
    if (name == "rstrip") return strip(s, arg(a, 0, "chars"), false, true);
    if (name == "split") return split(s, arg(a, 0, "sep"), arg(a, 1, "maxsplit"));
    if (name == "upper") return map_case(s, 1);
    if (name == "lower") return map_case(s, 0);
    if (name == "title") return map_case(s, 3);
    if (name == "capitalize") return map_case(s, 2);
    if (name == "replace") {
      const Value* count = arg(a, 2, "count");
      return replace(s, str_arg(a, 0, "replace"), str_arg(a, 1, "replace"), count ? int_of(*count) : -1);
    }
    if (name == "find" || name == "count") {
      const std::string& t = str_arg(a, 0, name.c_str());
      if (name == "find") {
        const size_t p = s.find(t);
        return p == std::string::npos ? int64_t(-1) : int64_t(decode(s.substr(0, p)).size());
      }
      if (t.empty()) return int64_t(decode(s).size() + 1);
      int64_t n = 0;
      for (size_t p = s.find(t); p != std::string::npos; p = s.find(t, p + t.size())) ++n;
      return n;
    }
    if (name == "join") {
      if (a.positional.empty()) fail("join needs a list");
      std::string out;
      bool first = true;
      for (const Value& x : as_list(a.positional[0])) {
        if (!x.is_string()) fail("join: item is {}, not a string", type_name(x));
        out += (first ? "" : s) + x.get<std::string>(), first = false;
      }
      return out;
    }
  } else if (obj.is_object()) {
    if (name == "items") return apply_filter("items", obj, {});
    if (name == "keys") return as_list(obj);
    if (name == "values") {
      Value out = Value::array();
      for (const auto& [k, x] : obj.items()) out.push_back(x);
      return out;
    }
    if (name == "get") {
      const std::string& k = str_arg(a, 0, "get");
      const Value* dflt = arg(a, 1, "default");
      return obj.contains(k) ? obj[k] : (dflt ? *dflt : Value());
    }
  } else if (is_undefined(obj)) {
    fail("calling {}() of an undefined value", name);
  }
  if (obj.is_array() && (name == "append" || name == "extend" || name == "pop" || name == "insert" || name == "remove"))
    fail("{}() would change a list, which Hugging Face's sandbox refuses", name);
  fail("{} has no method {}() in oomb's Jinja subset", type_name(obj), name);
}

Value call_global(const std::string& name, const Args& a, std::time_t now) {
  if (name == "raise_exception") {
    fail("the template raised an error: {}", a.positional.empty() ? "" : py_str(a.positional[0]));
  }
  if (name == "namespace" || name == "dict") {
    Value out = Value::object();
    for (const auto& [k, x] : a.keyword) out[k] = x;
    return out;
  }
  if (name == "range") {
    std::vector<int64_t> n;
    for (const Value& x : a.positional) {
      if (!is_int(x)) fail("range needs integers, not {}", type_name(x));
      n.push_back(int_of(x));
    }
    if (n.empty() || n.size() > 3) fail("range takes 1 to 3 integers");
    const int64_t b = n.size() > 1 ? n[0] : 0, e = n.size() > 1 ? n[1] : n[0], step = n.size() > 2 ? n[2] : 1;
    if (step == 0) fail("range: step 0");
    Value out = Value::array();
    for (int64_t i = b; step > 0 ? i < e : i > e; i += step) {
      out.push_back(i);
      if (out.size() > 100000) fail("range: more than 100000 items");
    }
    return out;
  }
  if (name == "strftime_now") {
    const std::string& f = str_arg(a, 0, "strftime_now");
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[256];
    const size_t n = std::strftime(buf, sizeof buf, f.c_str(), &tm);
    return std::string(buf, n);
  }
  fail("'{}' is undefined, or not a function oomb's Jinja subset has", name);
}

Value arithmetic(const std::string& op, const Value& l, const Value& r) {
  if (op == "+") {
    if (l.is_string() && r.is_string()) return l.get<std::string>() + r.get<std::string>();
    if (l.is_array() && r.is_array()) {
      Value out = l;
      for (const auto& x : r) out.push_back(x);
      return out;
    }
  }
  if (op == "*" && ((l.is_string() || l.is_array()) && is_int(r))) {
    Value out = l.is_string() ? Value("") : Value::array();
    const size_t item = l.is_string() ? l.get_ref<const std::string&>().size() : l.size();
    if (int_of(r) > 0 && item > 0 && uint64_t(int_of(r)) > (uint64_t(1) << 26) / item)
      fail("'*': a result of more than 2^26 characters or items");
    for (int64_t i = 0; i < int_of(r); ++i) {
      if (l.is_string()) out.get_ref<std::string&>() += l.get<std::string>();
      else
        for (const auto& x : l) out.push_back(x);
    }
    return out;
  }
  const bool numbers = (l.is_number() || l.is_boolean()) && (r.is_number() || r.is_boolean());
  if (!numbers) fail("'{}' is not supported between {} and {}", op, type_name(l), type_name(r));
  if (is_int(l) && is_int(r) && op != "/") {
    const int64_t x = int_of(l), y = int_of(r);
    int64_t v = 0;
    const auto check = [&](bool overflow) {
      if (overflow) fail("'{}': integer overflow (Python's integers are unbounded; this subset's hold 64 bits)", op);
      return v;
    };
    if (op == "+") return check(__builtin_add_overflow(x, y, &v));
    if (op == "-") return check(__builtin_sub_overflow(x, y, &v));
    if (op == "*") return check(__builtin_mul_overflow(x, y, &v));
    if (op == "//" || op == "%") {
      if (y == 0) fail("integer division or modulo by zero");
      check(x == INT64_MIN && y == -1);
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) --q, m += y;  // Python floors
      return op == "//" ? q : m;
    }
    if (op == "**") {
      if (y < 0) return std::pow(double(x), double(y));
      int64_t p = 1;
      for (int64_t i = 0; i < y && p != 0 && !(p == 1 && x == 1); ++i) check(__builtin_mul_overflow(p, x, &p));
      return p;
    }
  }
  const double x = num(l), y = num(r);
  if (op == "+") return x + y;
  if (op == "-") return x - y;
  if (op == "*") return x * y;
  if (op == "**") return std::pow(x, y);
  if (y == 0) fail("float division by zero");
  if (op == "/") return x / y;
  // Python's float divmod: the remainder from fmod, taking the divisor's sign; the quotient from it
  double mod = std::fmod(x, y), div = (x - mod) / y;
  if (mod != 0) {
    if ((y < 0) != (mod < 0)) mod += y, div -= 1.0;
  } else {
    mod = std::copysign(0.0, y);
  }
  if (op == "%") return mod;
  if (op == "//") {
    if (div == 0) return std::copysign(0.0, x / y);
    double floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
    return floordiv;
  }
  fail("unknown operator '{}'", op);
}

}  // namespace oomb::jinja
