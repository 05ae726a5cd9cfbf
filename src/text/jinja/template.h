// A Jinja template as Hugging Face renders chat templates: Python's Jinja in an immutable sandbox
// with trim_blocks and lstrip_blocks, loop controls, the tojson filter as json.dumps(ensure_ascii=False),
// raise_exception, strftime_now and the {% generation %} block that marks what the assistant writes.
// oomb's subset covers the language chat templates use: if, for (with loop, else and a filter), set
// (names, namespace attributes, blocks), macros, raw, Python's literals and operators, the string,
// list and dict methods templates call, and Jinja's common filters and tests. A tag, filter, test or
// method outside it is an error naming the template, its line and what is missing. Known
// differences from Python: a tuple is a list (printed as [1, 2], not (1, 2)); case maps one code
// point to one, but ß; a dict's keys are strings; a macro sees the template's variables and its own,
// not those of a loop it is defined in, and a namespace handed to it is a copy; `set d.x` works on
// any dict; `| safe` marks nothing.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/jinja/ast.h"

namespace oomb::jinja {

// What one rendering may take: statements run (loop bodies included, and the building of large
// values), bytes of output, and the size of a value the template makes (nodes, or 8 bytes of text);
// past any it is an error, not a hang or an exhausted memory.
struct RenderLimits {
  int64_t steps = 100'000'000;
  size_t bytes = size_t(1) << 32;
  size_t value_units = size_t(1) << 24;
};

struct Rendered {
  std::string text;
  std::vector<std::pair<size_t, size_t>> generation;  // [begin, end) of each {% generation %} block's output
};

class Template {
 public:
  // Parses `source`; errors name `name` (a file, or a file and field) and the line.
  Template(std::string_view source, std::string name);
  ~Template();
  Template(Template&&) noexcept;
  // `variables`: an object of the template's variables (messages, add_generation_prompt, bos_token, ...).
  Rendered render(const Value& variables, const RenderLimits& limits = {}) const;
  const std::string& name() const { return name_; }
  bool has_generation() const { return has_generation_; }  // holds a {% generation %} block

 private:
  std::string name_;
  std::unique_ptr<Body> body_;
  bool has_generation_ = false;
};

}  // namespace oomb::jinja
