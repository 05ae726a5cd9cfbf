// The lexer of oomb's Jinja subset (the language of Hugging Face chat templates): the template's
// text and its tags, cut into tokens, with Hugging Face's whitespace settings (trim_blocks,
// lstrip_blocks, `-` and `+` on a tag, the one trailing newline dropped) applied to the text, so
// that the parser sees the text exactly as it is output.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace oomb::jinja {

enum class Tok { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };

struct Token {
  Tok kind;
  std::string text;  // Text: the text; Name, Op: as written; String: the value, escapes resolved
  int line;
  int64_t i = 0;  // Int
  double f = 0;   // Float
};

// Errors name `name` and the line.
std::vector<Token> lex(std::string_view source, const std::string& name);

}  // namespace oomb::jinja
