#include "text/utf8.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace oomb {

// Table 3-7 of the Unicode Standard: the second byte's range depends on the first byte.
int utf8_seq_len(std::string_view s, size_t i) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  const unsigned c = p[i];
  if (c < 0x80) return 1;
  int len = 0;
  unsigned lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) len = 2;
  else if (c >= 0xE0 && c <= 0xEF) len = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
  else if (c >= 0xF0 && c <= 0xF4) len = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
  else return 0;
  if (i + 1 >= n || p[i + 1] < lo || p[i + 1] > hi) return 0;
  for (int k = 2; k < len; ++k)
    if (i + size_t(k) >= n || (p[i + size_t(k)] & 0xC0) != 0x80) return 0;
  return len;
}

size_t utf8_first_invalid(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0;
  while (i < s.size()) {
    if (p[i] < 0x80) {  // ASCII runs, 8 bytes at a time
      while (i + 8 <= s.size()) {
        uint64_t w;
        std::memcpy(&w, p + i, 8);
        if (w & 0x8080808080808080ull) break;
        i += 8;
      }
      while (i < s.size() && p[i] < 0x80) ++i;
      continue;
    }
    const int len = utf8_seq_len(s, i);
    if (len == 0) return i;
    i += size_t(len);
  }
  return s.size();
}

// A maximal subpart is the longest prefix of a well-formed sequence (Unicode 3.9, U+FFFD
// substitution of maximal subparts): a lead byte followed by the continuation bytes that still
// could have completed it. It is replaced by one U+FFFD; a byte that can start nothing, by one.
std::string utf8_replace_invalid(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const int len = utf8_seq_len(s, i);
    if (len > 0) {
      out.append(s.data() + i, size_t(len));
      i += size_t(len);
      continue;
    }
    const unsigned c = p[i];
    size_t k = 1;
    unsigned lo = 0x80, hi = 0xBF;
    int need = 0;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c >= 0xE0 && c <= 0xEF) need = 2, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) need = 3, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    if (need > 0 && i + 1 < s.size() && p[i + 1] >= lo && p[i + 1] <= hi) {
      k = 2;
      while (int(k) <= need && i + k < s.size() && (p[i + k] & 0xC0) == 0x80) ++k;
    }
    out += "\xEF\xBF\xBD";
    i += k;
  }
  return out;
}

TextPos text_pos(std::string_view s, size_t offset) {
  offset = std::min(offset, s.size());
  TextPos pos;
  size_t line_start = 0;
  for (size_t i = 0; i < offset; ++i)
    if (s[i] == '\n') ++pos.line, line_start = i + 1;
  pos.column = int64_t(offset - line_start) + 1;
  return pos;
}

Utf8Errors utf8_errors_parse(std::string_view s) {
  if (s == "strict") return Utf8Errors::Strict;
  if (s == "replace") return Utf8Errors::Replace;
  fail("--utf8-errors: '{}' is not one of strict, replace", s);
}

void utf8_check(std::string_view s, std::string_view where, int64_t line0, int64_t offset0) {
  const size_t bad = utf8_first_invalid(s);
  if (bad == s.size()) return;
  const TextPos pos = text_pos(s, bad);
  fail("{}: invalid UTF-8 at line {}, column {} (byte {:#04x} at offset {}); fix the file or pass "
       "--utf8-errors replace to substitute U+FFFD",
       where, line0 + pos.line - 1, pos.column, static_cast<unsigned char>(s[bad]), offset0 + int64_t(bad));
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

}  // namespace oomb
