// The parser of oomb's Jinja subset: tokens (lexer.h) to statements (ast.h). What the subset lacks
// (template inheritance, includes, imports, filter and call blocks) is an error naming it and the
// line, never a silent difference.
#pragma once
#include <string>
#include <vector>

#include "text/jinja/ast.h"
#include "text/jinja/lexer.h"

namespace oomb::jinja {

Body parse(const std::vector<Token>& tokens, const std::string& name);

}  // namespace oomb::jinja
