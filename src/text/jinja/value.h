// Python's view of a Jinja value, as Hugging Face renders chat templates with Python's Jinja:
// truth, str(), repr(), ==, <, and json.dumps(ensure_ascii=False) for the tojson filter.
#pragma once
#include <string>

#include "text/jinja/ast.h"

namespace oomb::jinja {

bool truthy(const Value& v);
std::string py_str(const Value& v);   // {{ v }}: None, True, 1.0, ['a', 1], {'k': 'v'}; undefined: ""
std::string py_repr(const Value& v);  // inside a list or dict: strings quoted
std::string float_repr(double d);     // Python's shortest repr: 1.0, 0.0001, 1e-05, 1e+16
bool py_equal(const Value& a, const Value& b);
// <0, 0, >0 as Python orders numbers, strings and lists; anything else is an error naming `op`
int py_compare(const Value& a, const Value& b, const char* op);
// json.dumps(v, ensure_ascii=False, indent=indent (<0: none), sort_keys=sort_keys), with Python's
// default separators (", " and ": "; "," between items when indented)
std::string py_json(const Value& v, int indent = -1, bool sort_keys = false);
const char* type_name(const Value& v);  // Python's: str, int, float, bool, NoneType, list, dict, undefined

}  // namespace oomb::jinja
