// Python's view of a Jinja value, as Hugging Face renders chat templates with Python's Jinja:
// truth, str(), repr(), ==, <, and json.dumps(ensure_ascii=False) for the tojson filter.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "text/jinja/ast.h"

namespace oomb::jinja {

bool truthy(const Value& v);
std::string py_str(const Value& v);   // {{ v }}: None, True, 1.0, ['a', 1], {'k': 'v'}; undefined: ""
std::string py_repr(const Value& v);  // inside a list or dict: strings quoted
std::string float_repr(double d);     // Python's shortest repr: 1.0, 0.0001, 1e-05, 1e+16
bool py_equal(const Value& a, const Value& b);
// <0, 0, >0 as Python orders numbers, strings and lists; anything else is an error naming `op`
int py_compare(const Value& a, const Value& b, const char* op);
// json.dumps's arguments (Hugging Face's tojson filter passes them on): indent (none, or the text
// of one level), separators (", " and ": "; "," and ": " when indented), sort_keys, ensure_ascii
struct JsonStyle {
  std::optional<std::string> indent;
  std::string item_sep = ", ", key_sep = ": ";
  bool sort_keys = false, ensure_ascii = false;
};
std::string py_json(const Value& v, const JsonStyle& style = {});
const char* type_name(const Value& v);

// Python's str.isspace of a code point (ASCII whitespace, \x1c-\x1f, \x85, Unicode's spaces and separators)
bool py_isspace(int32_t cp);
// The bytes of the whitespace code point that starts at s[i] / ends at s[end]; 0 where there is none
size_t space_at(std::string_view s, size_t i);
size_t space_before(std::string_view s, size_t end);  // Python's: str, int, float, bool, NoneType, list, dict, undefined

}  // namespace oomb::jinja
