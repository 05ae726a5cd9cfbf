// The syntax tree of oomb's Jinja subset: expressions and statements as the parser builds them and
// the renderer walks them. Values are JSON (ordered: a mapping keeps its keys' order, as Python's
// dicts do); Jinja's undefined is nlohmann's `discarded`.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace oomb::jinja {

using Value = nlohmann::ordered_json;
inline Value undefined() { return Value(Value::value_t::discarded); }
inline bool is_undefined(const Value& v) { return v.is_discarded(); }

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Arguments {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
};

struct Expr {
  enum Kind {
    Literal,   // value
    Name,      // name
    Attr,      // a.name
    Item,      // a[b]
    Slice,     // a[b:c:d], b c d possibly null
    Call,      // a(args)
    Filter,    // a | name(args)
    Test,      // a is [not] name(args)
    Unary,     // op a: "not", "-", "+"
    Binary,    // a op b
    Compare,   // a ops[0] items[0] ops[1] items[1] ...: Python's chain, each operand evaluated once
    Cond,      // b if a else c (c possibly null)
    List,      // [items]
    Tuple,     // (items)
    Dict,      // {items[0]: items[1], ...}
  } kind;
  int line;
  Value value;
  std::string name;  // Name, Attr, Filter, Test; Unary and Binary: the operator
  bool negated = false;  // Test: `is not`
  int depth = 1;         // of the tree below it (the parser caps it)
  bool calls = false;    // its tree holds a call (a macro's runs statements, which may change variables)
  std::vector<std::string> ops;  // Compare
  ExprPtr a, b, c, d;
  std::vector<ExprPtr> items;
  Arguments args;
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum Kind {
    Text,        // text
    Output,      // {{ expr }}
    If,          // conds[i] -> bodies[i]; a trailing body without a condition is the else
    For,         // for targets in expr [if cond]: bodies[0], else bodies[1]
    Set,         // set targets = expr, or set targets[0].attr = expr
    SetBlock,    // set targets[0] %}bodies[0]{% endset
    Macro,       // macro name(params) bodies[0]
    Generation,  // generation bodies[0] endgeneration (the span is recorded)
    Break,
    Continue,
  } kind;
  int line;
  std::string text;  // Text; Set with an attribute: the attribute; Macro: the name; For: "neighbours" when
                     // its body reads loop.previtem or loop.nextitem
  ExprPtr expr, cond;
  std::vector<ExprPtr> conds;
  std::vector<Body> bodies;
  std::vector<std::string> targets;
  std::vector<std::pair<std::string, ExprPtr>> params;  // Macro: name and default (or null)
};

}  // namespace oomb::jinja
