#include "text/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include <utf8proc.h>

#include "core/error.h"

namespace oomb::jinja {

bool py_isspace(int32_t cp) {
  return cp == ' ' || (cp >= '\t' && cp <= '\r') || (cp >= 0x1c && cp <= 0x1f) || cp == 0x85 || cp == 0xa0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f ||
         cp == 0x205f || cp == 0x3000;
}

size_t space_at(std::string_view s, size_t i) {
  if (i >= s.size()) return 0;
  utf8proc_int32_t cp;
  const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i), utf8proc_ssize_t(s.size() - i), &cp);
  return n > 0 && py_isspace(cp) ? size_t(n) : 0;
}

size_t space_before(std::string_view s, size_t end) {
  for (size_t n = 1; n <= 3 && n <= end; ++n)  // (Python's spaces take at most 3 bytes)
    if ((uint8_t(s[end - n]) & 0xC0) != 0x80) return space_at(s, end - n) == n ? n : 0;
  return 0;
}

bool truthy(const Value& v) {
  switch (v.type()) {
    case Value::value_t::boolean: return v.get<bool>();
    case Value::value_t::number_integer:
    case Value::value_t::number_unsigned: return v.get<int64_t>() != 0;
    case Value::value_t::number_float: return v.get<double>() != 0;
    case Value::value_t::string: return !v.get_ref<const std::string&>().empty();
    case Value::value_t::array:
    case Value::value_t::object: return !v.empty();
    default: return false;  // None, undefined
  }
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);  // shortest: -d.ddde+XX
  std::string s(buf, r.ptr);
  const size_t e = s.find('e');
  const int exp = std::stoi(s.substr(e + 1));
  std::string sign, digits;
  for (size_t i = 0; i < e; ++i) {
    if (s[i] == '-') sign = "-";
    else if (s[i] != '.') digits += s[i];
  }
  if (exp >= -5 + 1 && exp < 16) {  // Python's repr: fixed notation for 1e-4 <= |d| < 1e16
    std::string out;
    if (exp < 0) {
      out = "0." + std::string(size_t(-exp - 1), '0') + digits;
    } else if (size_t(exp) + 1 >= digits.size()) {
      out = digits + std::string(size_t(exp) + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, size_t(exp) + 1) + "." + digits.substr(size_t(exp) + 1);
    }
    return sign + out;
  }
  std::string mant = digits.substr(0, 1);
  if (digits.size() > 1) mant += "." + digits.substr(1);
  return fmt::format("{}{}e{}{:02d}", sign, mant, exp < 0 ? '-' : '+', std::abs(exp));
}

// Python's str.isprintable of a code point: not in Cc, Cf, Cs, Co, Cn, Zl, Zp, nor Zs other than ' '
static bool printable(int32_t cp) {
  switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP: return false;
    case UTF8PROC_CATEGORY_ZS: return cp == ' ';
    default: return true;
  }
}

// Python's repr of a string: its quotes, and escapes for backslashes, quotes and what is not printable
static std::string quote(const std::string& s) {
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  auto p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  for (size_t i = 0; i < s.size();) {
    utf8proc_int32_t cp;
    auto n = utf8proc_iterate(p + i, utf8proc_ssize_t(s.size() - i), &cp);
    if (n <= 0) cp = uint8_t(s[i]), n = 1;  // (not UTF-8: the byte)
    if (cp == '\\') out += "\\\\";
    else if (cp == q) out += std::string("\\") + q;
    else if (cp == '\n') out += "\\n";
    else if (cp == '\r') out += "\\r";
    else if (cp == '\t') out += "\\t";
    else if (printable(cp)) out.append(s, i, size_t(n));
    else if (cp < 0x100) out += fmt::format("\\x{:02x}", cp);
    else if (cp < 0x10000) out += fmt::format("\\u{:04x}", cp);
    else out += fmt::format("\\U{:08x}", cp);
    i += size_t(n);
  }
  return out + q;
}

static std::string py_str(const Value& v, int depth);
static std::string integer_text(const Value& v);

static std::string py_repr(const Value& v, int depth) {
  if (v.is_string()) return quote(v.get_ref<const std::string&>());
  if (is_undefined(v)) return "Undefined";  // (Jinja's Undefined inside a list)
  return py_str(v, depth);
}

std::string py_repr(const Value& v) { return py_repr(v, 0); }
std::string py_str(const Value& v) { return py_str(v, 0); }

static constexpr int kMaxDepth = 512;  // lists and dicts nested deeper are refused, not a stack overflow

static std::string py_str(const Value& v, int depth) {
  if (depth > kMaxDepth) fail("a value nested more than {} deep", kMaxDepth);
  switch (v.type()) {
    case Value::value_t::discarded: return "";
    case Value::value_t::null: return "None";
    case Value::value_t::boolean: return v.get<bool>() ? "True" : "False";
    case Value::value_t::number_integer:
    case Value::value_t::number_unsigned: return integer_text(v);
    case Value::value_t::number_float: return float_repr(v.get<double>());
    case Value::value_t::string: return v.get<std::string>();
    case Value::value_t::array: {
      std::string out = "[";
      for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + py_repr(v[i], depth + 1);
      return out + "]";
    }
    case Value::value_t::object: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, x] : v.items())
        out += (first ? "" : ", ") + quote(k) + ": " + py_repr(x, depth + 1), first = false;
      return out + "}";
    }
    default: return "";
  }
}

const char* type_name(const Value& v) {
  switch (v.type()) {
    case Value::value_t::discarded: return "undefined";
    case Value::value_t::null: return "NoneType";
    case Value::value_t::boolean: return "bool";
    case Value::value_t::number_integer:
    case Value::value_t::number_unsigned: return "int";
    case Value::value_t::number_float: return "float";
    case Value::value_t::string: return "str";
    case Value::value_t::array: return "list";
    case Value::value_t::object: return "dict";
    default: return "?";
  }
}

static bool numeric(const Value& v) { return v.is_number() || v.is_boolean(); }

// a <=> b for two integers, each signed or unsigned (JSON's non-negative numbers are unsigned)
static int int_cmp(const Value& a, const Value& b) {
  const bool ua = a.is_number_unsigned(), ub = b.is_number_unsigned();
  if (ua && ub) return a.get<uint64_t>() < b.get<uint64_t>() ? -1 : a.get<uint64_t>() > b.get<uint64_t>();
  if (!ua && !ub) return a.get<int64_t>() < b.get<int64_t>() ? -1 : a.get<int64_t>() > b.get<int64_t>();
  if (ub) return -int_cmp(b, a);
  const int64_t y = b.get<int64_t>();
  if (y < 0) return 1;
  return a.get<uint64_t>() < uint64_t(y) ? -1 : a.get<uint64_t>() > uint64_t(y);
}
static double number(const Value& v) { return v.is_boolean() ? double(v.get<bool>()) : v.get<double>(); }

static bool py_equal(const Value& a, const Value& b, int depth);
bool py_equal(const Value& a, const Value& b) { return py_equal(a, b, 0); }

static bool py_equal(const Value& a, const Value& b, int depth) {
  if (depth > kMaxDepth) fail("==: values nested more than {} deep", kMaxDepth);
  if (is_undefined(a) || is_undefined(b)) return is_undefined(a) && is_undefined(b);
  if (numeric(a) && numeric(b)) {
    if (a.is_number_integer() && b.is_number_integer()) return int_cmp(a, b) == 0;
    return number(a) == number(b);
  }
  if (a.type() != b.type()) return false;
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (!py_equal(a[i], b[i], depth + 1)) return false;
    return true;
  }
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (const auto& [k, x] : a.items()) {
      const auto it = b.find(k);
      if (it == b.end() || !py_equal(x, *it, depth + 1)) return false;
    }
    return true;
  }
  return a == b;
}

static int py_compare(const Value& a, const Value& b, const char* op, int depth);
int py_compare(const Value& a, const Value& b, const char* op) { return py_compare(a, b, op, 0); }

static int py_compare(const Value& a, const Value& b, const char* op, int depth) {
  if (depth > kMaxDepth) fail("'{}': values nested more than {} deep", op, kMaxDepth);
  if (numeric(a) && numeric(b)) {
    if (a.is_number_integer() && b.is_number_integer()) return int_cmp(a, b);
    const double x = number(a), y = number(b);
    return x < y ? -1 : x > y;
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.get_ref<const std::string&>().compare(b.get_ref<const std::string&>());
    return c < 0 ? -1 : c > 0;
  }
  if (a.is_array() && b.is_array()) {
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
      if (py_equal(a[i], b[i])) continue;
      return py_compare(a[i], b[i], op, depth + 1);
    }
    return a.size() < b.size() ? -1 : a.size() > b.size();
  }
  fail("'{}' is not supported between {} and {}", op, type_name(a), type_name(b));
}

static void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  auto p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  for (size_t i = 0; i < s.size();) {
    const char c = s[i];
    switch (c) {
      case '"': out += "\\\""; ++i; continue;
      case '\\': out += "\\\\"; ++i; continue;
      case '\n': out += "\\n"; ++i; continue;
      case '\r': out += "\\r"; ++i; continue;
      case '\t': out += "\\t"; ++i; continue;
      case '\b': out += "\\b"; ++i; continue;
      case '\f': out += "\\f"; ++i; continue;
      default: break;
    }
    if (uint8_t(c) < 0x20 || (ensure_ascii && uint8_t(c) == 0x7f)) {
      out += fmt::format("\\u{:04x}", uint8_t(c));
      ++i;
    } else if (uint8_t(c) < 0x80 || !ensure_ascii) {
      out += c;
      ++i;
    } else {  // ensure_ascii: \uXXXX, a surrogate pair past U+FFFF
      utf8proc_int32_t cp;
      const auto n = utf8proc_iterate(p + i, utf8proc_ssize_t(s.size() - i), &cp);
      if (n <= 0) fail("tojson: a string that is not UTF-8");
      if (cp >= 0x10000) {
        const int32_t u = cp - 0x10000;
        out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (u >> 10), 0xDC00 + (u & 0x3FF));
      } else {
        out += fmt::format("\\u{:04x}", cp);
      }
      i += size_t(n);
    }
  }
  out += '"';
}

static std::string integer_text(const Value& v) {
  return v.is_number_unsigned() ? std::to_string(v.get<uint64_t>()) : std::to_string(v.get<int64_t>());
}

static void json_dump(std::string& out, const Value& v, const JsonStyle& st, int depth) {
  const auto newline = [&](int d) {
    if (!st.indent) return;
    out += '\n';
    for (int i = 0; i < d; ++i) out += *st.indent;
  };
  if (depth > kMaxDepth) fail("tojson: a value nested more than {} deep", kMaxDepth);
  switch (v.type()) {
    case Value::value_t::discarded: fail("tojson: the value is undefined");
    case Value::value_t::null: out += "null"; break;
    case Value::value_t::boolean: out += v.get<bool>() ? "true" : "false"; break;
    case Value::value_t::number_float: {
      const double d = v.get<double>();
      out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity") : float_repr(d);
      break;
    }
    case Value::value_t::number_integer:
    case Value::value_t::number_unsigned: out += integer_text(v); break;
    case Value::value_t::string: json_string(out, v.get_ref<const std::string&>(), st.ensure_ascii); break;
    case Value::value_t::array:
      if (v.empty()) {
        out += "[]";
        break;
      }
      out += '[';
      for (size_t i = 0; i < v.size(); ++i) {
        if (i) out += st.item_sep;
        newline(depth + 1);
        json_dump(out, v[i], st, depth + 1);
      }
      newline(depth);
      out += ']';
      break;
    case Value::value_t::object: {
      if (v.empty()) {
        out += "{}";
        break;
      }
      std::vector<const std::string*> keys;
      for (const auto& [k, x] : v.items()) keys.push_back(&k);
      if (st.sort_keys) std::sort(keys.begin(), keys.end(), [](auto* a, auto* b) { return *a < *b; });
      out += '{';
      for (size_t i = 0; i < keys.size(); ++i) {
        if (i) out += st.item_sep;
        newline(depth + 1);
        json_string(out, *keys[i], st.ensure_ascii);
        out += st.key_sep;
        json_dump(out, v.at(*keys[i]), st, depth + 1);
      }
      newline(depth);
      out += '}';
      break;
    }
    default: break;
  }
}

std::string py_json(const Value& v, const JsonStyle& style) {
  std::string out;
  json_dump(out, v, style, 0);
  return out;
}

}  // namespace oomb::jinja
