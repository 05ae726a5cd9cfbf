#include "text/jinja/lexer.h"

#include <cctype>
#include <cstdlib>

#include "core/error.h"
#include "text/jinja/value.h"

namespace oomb::jinja {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// Python's str.rstrip() (Unicode whitespace)
void rstrip(std::string& s) {
  for (size_t n; (n = space_before(s, s.size())) > 0;) s.resize(s.size() - n);
}

// Jinja's lstrip_blocks: the spaces after the text's last newline go when nothing else follows it there
// (the text's start counts as a line's when the text before it ended one)
void lstrip_line(std::string& text, bool line_starting) {
  const size_t l = text.rfind('\n') + 1;  // npos + 1 == 0
  if (l == 0 && !line_starting) return;
  size_t i = l;
  for (size_t n; i < text.size() && (n = space_at(text, i)) > 0;) i += n;
  if (i == text.size()) text.resize(l);
}

// \r\n and \r become \n (Jinja's newline_sequence), and one trailing newline goes (keep_trailing_newline off)
std::string normalize_newlines(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\r') {
      out += '\n';
      if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
    } else {
      out += s[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6)), out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12)), out += char(0x80 | ((cp >> 6) & 0x3F)), out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18)), out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F)), out += char(0x80 | (cp & 0x3F));
  }
}

class Lexer {
 public:
  Lexer(std::string_view source, const std::string& name) : s_(normalize_newlines(source)), name_(name) {}

  std::vector<Token> run() {
    bool line_starting = true;  // the text so far ends a line (Jinja's lstrip_blocks looks at it)
    while (pos_ < s_.size()) {
      const size_t open = next_tag(pos_);
      std::string text = s_.substr(pos_, open - pos_);
      if (open == s_.size()) {
        emit_text(std::move(text));
        break;
      }
      const char kind = s_[open + 1];  // '{', '%' or '#'
      const char sign = open + 2 < s_.size() ? s_[open + 2] : '\0';
      if (sign == '-') {
        rstrip(text);
      } else if (sign != '+' && kind != '{') {  // lstrip_blocks: a block or comment tag alone on its line so far
        lstrip_line(text, line_starting);
      }
      emit_text(std::move(text));
      line_ = line_at(open);
      pos_ = open + 2 + (sign == '-' || sign == '+');
      if (kind == '#') {
        line_starting = comment();
      } else if (kind == '%' && raw()) {
        line_starting = last_consumed_newline_;
      } else {
        line_starting = tag(kind == '{');
      }
    }
    out_.push_back({Tok::Eof, "", line_at(s_.size())});
    return std::move(out_);
  }

 private:
  std::string s_;
  const std::string& name_;
  size_t pos_ = 0;
  int line_ = 1;
  size_t counted_ = 0;  // line_ counts the newlines before counted_
  int counted_line_ = 1;
  bool last_consumed_newline_ = false;
  std::vector<Token> out_;

  [[noreturn]] void error(const std::string& what) const { fail("chat template {} line {}: {}", name_, line_, what); }

  int line_at(size_t p) {
    for (; counted_ < p && counted_ < s_.size(); ++counted_) counted_line_ += s_[counted_] == '\n';
    return counted_line_;
  }

  size_t next_tag(size_t from) const {
    for (size_t i = from; i + 1 < s_.size(); ++i)
      if (s_[i] == '{' && (s_[i + 1] == '{' || s_[i + 1] == '%' || s_[i + 1] == '#')) return i;
    return s_.size();
  }

  void emit_text(std::string text) {
    if (!text.empty()) out_.push_back({Tok::Text, std::move(text), line_});
  }

  // After a tag's end: `-` strips the whitespace that follows, a block's or comment's plain end one
  // newline (trim_blocks). Returns whether what it consumed ends with a newline.
  bool after_end(char sign, bool block) {
    if (sign == '-') {
      const size_t from = pos_;
      for (size_t n; (n = space_at(s_, pos_)) > 0;) pos_ += n;
      return pos_ > from && s_[pos_ - 1] == '\n';
    }
    if (sign != '+' && block && pos_ < s_.size() && s_[pos_] == '\n') {
      ++pos_;
      return true;
    }
    return false;
  }

  bool comment() {
    const size_t end = s_.find("#}", pos_);
    if (end == std::string::npos) error("a comment {# has no #}");
    const char sign = end > pos_ ? s_[end - 1] : '\0';
    pos_ = end + 2;
    return after_end(sign == '-' || sign == '+' ? sign : '\0', true);
  }

  // {% raw %}...{% endraw %}: the text between, as it is.
  bool raw() {
    size_t p = pos_;
    while (p < s_.size() && is_space(s_[p])) ++p;
    if (s_.compare(p, 3, "raw") != 0 || (p + 3 < s_.size() && (std::isalnum(uint8_t(s_[p + 3])) || s_[p + 3] == '_')))
      return false;
    p += 3;
    while (p < s_.size() && is_space(s_[p])) ++p;
    const char sign = s_[p] == '-' ? s_[p] : '\0';
    p += sign != '\0';
    if (s_.compare(p, 2, "%}") != 0) error("{% raw %} takes nothing more");
    pos_ = p + 2;
    // (Jinja: `-` strips what follows {% raw %}; no trim_blocks there)
    const bool line_starting = sign == '-' ? after_end(sign, true) : false;
    for (size_t q = pos_;; ++q) {
      q = s_.find("{%", q);
      if (q == std::string::npos) error("{% raw %} has no {% endraw %}");
      size_t r = q + 2;
      const char open_sign = s_[r] == '-' || s_[r] == '+' ? s_[r] : '\0';
      r += open_sign != '\0';
      while (r < s_.size() && is_space(s_[r])) ++r;
      if (s_.compare(r, 6, "endraw") != 0) continue;
      r += 6;
      while (r < s_.size() && is_space(s_[r])) ++r;
      const char end_sign = s_[r] == '-' || s_[r] == '+' ? s_[r] : '\0';
      r += end_sign != '\0';
      if (s_.compare(r, 2, "%}") != 0) continue;
      std::string text = s_.substr(pos_, q - pos_);
      if (open_sign == '-') rstrip(text);
      else if (open_sign != '+') lstrip_line(text, line_starting);
      emit_text(std::move(text));
      pos_ = r + 2;
      last_consumed_newline_ = after_end(end_sign, true);
      return true;
    }
  }

  // The tokens of a {{ }} or {% %} tag; returns whether its end consumed a newline.
  bool tag(bool variable) {
    out_.push_back({variable ? Tok::VarBegin : Tok::BlockBegin, "", line_});
    const char close = variable ? '}' : '%';
    std::vector<char> brackets;
    while (true) {
      for (size_t n; (n = space_at(s_, pos_)) > 0;) pos_ += n;
      line_ = line_at(pos_);
      if (pos_ >= s_.size()) error(variable ? "a {{ has no }}" : "a {% has no %}");
      if (brackets.empty()) {
        const char sign = s_[pos_] == '-' || s_[pos_] == '+' ? s_[pos_] : '\0';
        const size_t p = pos_ + (sign != '\0');
        if (p + 1 < s_.size() && s_[p] == close && s_[p + 1] == '}' && !(variable && sign == '+')) {
          pos_ = p + 2;
          out_.push_back({variable ? Tok::VarEnd : Tok::BlockEnd, "", line_});
          return after_end(sign, !variable);
        }
      }
      const char c = s_[pos_];
      if (std::isalpha(uint8_t(c)) || c == '_') {
        const size_t b = pos_;
        while (pos_ < s_.size() && (std::isalnum(uint8_t(s_[pos_])) || s_[pos_] == '_')) ++pos_;
        out_.push_back({Tok::Name, s_.substr(b, pos_ - b), line_});
      } else if (std::isdigit(uint8_t(c))) {
        number();
      } else if (c == '\'' || c == '"') {
        string(c);
      } else {
        static const char* const two[] = {"//", "**", "==", "!=", ">=", "<="};
        std::string op(1, c);
        for (const char* t : two)
          if (s_.compare(pos_, 2, t) == 0) op = t;
        if (op.size() == 1 && std::string_view("+-/*%~[](){}<>=.:|,;").find(c) == std::string_view::npos)
          error(fmt::format("unexpected character '{}'", c));
        if (op == "(" || op == "[" || op == "{") brackets.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
        if (op == ")" || op == "]" || op == "}") {
          if (brackets.empty()) error(fmt::format("unexpected '{}'", op));
          if (brackets.back() != c) error(fmt::format("unexpected '{}', expected '{}'", op, brackets.back()));
          brackets.pop_back();
        }
        pos_ += op.size();
        out_.push_back({Tok::Op, op, line_});
      }
    }
  }

  void number() {
    const size_t b = pos_;
    auto digits = [&] {
      while (pos_ < s_.size() && (std::isdigit(uint8_t(s_[pos_])) || (s_[pos_] == '_' && pos_ > b))) ++pos_;
    };
    digits();
    bool is_float = false;
    if (pos_ + 1 < s_.size() && s_[pos_] == '.' && std::isdigit(uint8_t(s_[pos_ + 1]))) {
      is_float = true, ++pos_;
      digits();
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      size_t p = pos_ + 1;
      if (p < s_.size() && (s_[p] == '+' || s_[p] == '-')) ++p;
      if (p < s_.size() && std::isdigit(uint8_t(s_[p]))) {
        is_float = true, pos_ = p;
        digits();
      }
    }
    std::string t;
    for (size_t i = b; i < pos_; ++i)
      if (s_[i] != '_') t += s_[i];
    Token k{is_float ? Tok::Float : Tok::Int, t, line_};
    errno = 0;
    if (is_float) {
      k.f = std::strtod(t.c_str(), nullptr);
    } else {
      k.i = std::strtoll(t.c_str(), nullptr, 10);
      if (errno == ERANGE) error(fmt::format("the integer {} is too large", t));
    }
    out_.push_back(std::move(k));
  }

  uint32_t hex(size_t digits) {
    uint32_t v = 0;
    for (size_t i = 0; i < digits; ++i, ++pos_) {
      const char c = pos_ < s_.size() ? s_[pos_] : '\0';
      if (!std::isxdigit(uint8_t(c))) error("a string's \\x, \\u or \\U escape needs hex digits");
      v = v * 16 + uint32_t(std::isdigit(uint8_t(c)) ? c - '0' : (std::tolower(uint8_t(c)) - 'a' + 10));
    }
    return v;
  }

  void string(char quote) {
    const int start_line = line_;
    std::string v;
    ++pos_;
    while (true) {
      if (pos_ >= s_.size()) error("a string has no closing quote");
      const char c = s_[pos_++];
      if (c == quote) break;
      if (c != '\\') {
        v += c;
        continue;
      }
      if (pos_ >= s_.size()) error("a string has no closing quote");
      const char e = s_[pos_++];
      switch (e) {
        case 'n': v += '\n'; break;
        case 't': v += '\t'; break;
        case 'r': v += '\r'; break;
        case 'b': v += '\b'; break;
        case 'f': v += '\f'; break;
        case 'v': v += '\v'; break;
        case 'a': v += '\a'; break;
        case '0': v += '\0'; break;
        case '\\': v += '\\'; break;
        case '\'': v += '\''; break;
        case '"': v += '"'; break;
        case '\n': break;  // a line continued
        case 'x': append_utf8(v, hex(2)); break;
        case 'u': {
          const uint32_t cp = hex(4);
          if (cp >= 0xD800 && cp <= 0xDFFF) error("a \\u escape of a surrogate (not a character)");
          append_utf8(v, cp);
          break;
        }
        case 'U': {
          const uint32_t cp = hex(8);
          if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) error("a \\U escape that is not a character");
          append_utf8(v, cp);
          break;
        }
        default: v += '\\', v += e;  // Python keeps an unknown escape as written
      }
    }
    out_.push_back({Tok::String, std::move(v), start_line});
  }
};

}  // namespace

std::vector<Token> lex(std::string_view source, const std::string& name) { return Lexer(source, name).run(); }

}  // namespace oomb::jinja
