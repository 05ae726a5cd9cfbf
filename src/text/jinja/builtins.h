// The functions a chat template calls: Jinja's filters and tests, Python's string, list and dict
// methods, the global functions Hugging Face provides (raise_exception, strftime_now) and Jinja's
// (namespace, range, dict), and Python's arithmetic. Errors say what was called and with what;
// the renderer adds the template and the line.
#pragma once
#include <ctime>
#include <map>
#include <string>
#include <vector>

#include "text/jinja/ast.h"

namespace oomb::jinja {

struct Args {
  std::vector<Value> positional;
  std::map<std::string, Value> keyword;
};

std::vector<std::string> characters(const std::string& s);  // a UTF-8 string's code points, one string each
// What a for loop or the list filter walks: a list's items, a dict's keys, a string's characters;
// undefined: nothing
Value as_list(const Value& v);
Value apply_filter(const std::string& name, const Value& v, const Args& a);
bool apply_test(const std::string& name, const Value& v, const Args& a);
Value call_method(const Value& obj, const std::string& name, const Args& a);
Value call_global(const std::string& name, const Args& a, std::time_t now);
Value arithmetic(const std::string& op, const Value& l, const Value& r);  // + - * / // % **
// Jinja's attribute getter (map, selectattr, join): "a.b.0" goes into dicts by key and lists by
// index; an integer is an index; a part not there is undefined
Value attribute_path(const Value& x, const Value& path);

}  // namespace oomb::jinja
