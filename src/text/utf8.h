// UTF-8 checks and repair. Text enters oomb as bytes; the tokenizer needs valid UTF-8.
// Invalid input is either an error naming where it is, or (on request) repaired the way the
// WHATWG Encoding Standard's decoder does it (each maximal invalid subpart becomes U+FFFD),
// which is what JavaScript's TextDecoder and Python's bytes.decode(errors="replace") produce.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace oomb {

// Length of the valid UTF-8 sequence at s[i] (1..4), or 0 if the bytes there are not one.
// Overlong forms, surrogates and code points beyond U+10FFFF are invalid.
int utf8_seq_len(std::string_view s, size_t i);

// Offset of the first invalid byte, or s.size() when all of s is valid UTF-8.
size_t utf8_first_invalid(std::string_view s);

// s with every maximal invalid subpart replaced by U+FFFD (WHATWG "replacement" decoding).
std::string utf8_replace_invalid(std::string_view s);

// Where byte `offset` sits in s: 1-based line and column (column in bytes).
struct TextPos {
  int64_t line = 1, column = 1;
};
TextPos text_pos(std::string_view s, size_t offset);

// What to do with invalid UTF-8 in input text.
enum class Utf8Errors { Strict, Replace };
Utf8Errors utf8_errors_parse(std::string_view s);  // "strict" | "replace"

// Throws, naming `where` (a file, or a file and line) and the position, unless s is valid UTF-8.
// line0: the line number of s's first line within its file (for JSON lines, the record's line).
// offset0: the byte offset of s within its file.
void utf8_check(std::string_view s, std::string_view where, int64_t line0 = 1, int64_t offset0 = 0);

// Decodes the code point at s[i] of valid UTF-8; advances i.
inline uint32_t utf8_next(std::string_view s, size_t& i) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const unsigned c = p[i];
  if (c < 0x80) return ++i, c;
  if (c < 0xE0) return i += 2, ((c & 0x1Fu) << 6) | (p[i - 1] & 0x3Fu);
  if (c < 0xF0) return i += 3, ((c & 0x0Fu) << 12) | ((p[i - 2] & 0x3Fu) << 6) | (p[i - 1] & 0x3Fu);
  return i += 4, ((c & 0x07u) << 18) | ((p[i - 3] & 0x3Fu) << 12) | ((p[i - 2] & 0x3Fu) << 6) | (p[i - 1] & 0x3Fu);
}

// Unicode White_Space: the 25 code points of Oniguruma's \s (and of Rust's char::is_whitespace).
inline bool is_white_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Whether valid UTF-8 s may be cut before byte i for a tokenizer whose
// cut_after_newline_is_safe(): s[i - 1] is '\n' and s[i] starts a character that is not White_Space.
// Bytes that are not UTF-8 there count as a cut point (repaired, they become U+FFFD); a caller
// reading in pieces must not ask about a character that continues past what it holds.
inline bool is_cut_point(std::string_view s, size_t i) {
  if (i == 0 || i >= s.size() || s[i - 1] != '\n') return false;
  if (utf8_seq_len(s, i) == 0) return true;
  size_t j = i;
  return !is_white_space(utf8_next(s, j));
}

// Appends the UTF-8 encoding of code point cp (< 0x110000, not a surrogate).
void utf8_append(std::string& out, uint32_t cp);

}  // namespace oomb
