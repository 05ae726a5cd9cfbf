#include "text/regex_split.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cstdint>


#include "core/error.h"

namespace oomb {

const char* const kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Oniguruma's \s in UTF-8 mode: Unicode White_Space (tab..CR, space, NEL, NBSP, U+1680,
// U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000).
static constexpr const char* kSpaceItems =
    R"(\t\n\x0B\f\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

std::string rewrite_for_pcre2(std::string_view p, std::string_view where) {
  std::string out;
  bool in_class = false;
  size_t class_start = 0;  // index just past '[' or '[^' of the open class
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\') {
      OOMB_CHECK(i + 1 < p.size(), "{}: the pattern ends with a lone backslash", where);
      const char e = p[i + 1];
      OOMB_CHECK(e != 'Q', "{}: \\Q...\\E quoting is not supported in split patterns", where);
      if (e == 's') {
        out += in_class ? std::string(kSpaceItems) : "[" + std::string(kSpaceItems) + "]";
      } else if (e == 'S') {
        OOMB_CHECK(!in_class, "{}: \\S inside a character class is not supported in split patterns", where);
        out += "[^" + std::string(kSpaceItems) + "]";
      } else {
        out += c;
        out += e;
      }
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      class_start = i + 1;
      if (class_start < p.size() && p[class_start] == ']') out += p[++i];  // a leading ']' is literal
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {  // [:alpha:] inside a class
      const size_t end = p.find(":]", i + 2);
      OOMB_CHECK(end != std::string_view::npos, "{}: unterminated [: in a character class", where);
      out.append(p.substr(i, end + 2 - i));
      i = end + 1;
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  OOMB_CHECK(!in_class, "{}: unterminated character class", where);
  return out;
}

struct RegexSplit::Impl {
  pcre2_code* code = nullptr;
  ~Impl() { pcre2_code_free(code); }
};

RegexSplit::RegexSplit(std::string_view pattern, std::string_view where)
    : impl_(std::make_unique<Impl>()), source_(pattern) {
  const std::string rx = rewrite_for_pcre2(pattern, where);
  int err = 0;
  PCRE2_SIZE at = 0;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rx.data()), rx.size(), PCRE2_UTF | PCRE2_UCP, &err, &at,
                              nullptr);
  if (!impl_->code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    fail("{}: cannot compile the split pattern {}: {} (at offset {})", where, std::string(pattern),
         reinterpret_cast<const char*>(msg), at);
  }
  // Without the JIT (an unusual platform) PCRE2's interpreter gives the same matches, slower.
  pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE);
}

RegexSplit::~RegexSplit() = default;
RegexSplit::RegexSplit(RegexSplit&&) noexcept = default;
RegexSplit& RegexSplit::operator=(RegexSplit&&) noexcept = default;

namespace {
// Per thread (a compiled pattern is shared, these are not): match data, and a match context.
// PCRE2's default limit of ten million backtracking steps is reached by a run of ten million
// spaces (\s*[\r\n]+ tries every length before \s+(?!\S) matches), work that stays linear in
// the run; so each match may take ten million steps plus 100 per byte left in the text, which
// still stops a pattern that backtracks exponentially. The JIT stack grows to 256 MB.
struct MatchState {
  pcre2_match_data* md = pcre2_match_data_create(16, nullptr);
  pcre2_match_context* mc = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(1 << 16, 256 << 20, nullptr);
  MatchState() {
    pcre2_set_depth_limit(mc, UINT32_MAX);
    pcre2_jit_stack_assign(mc, nullptr, stack);
  }
  ~MatchState() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(mc);
    pcre2_match_data_free(md);
  }
};
}  // namespace

void RegexSplit::split(std::string_view s, std::vector<Piece>& out) const {
  thread_local MatchState tl;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  size_t pos = 0, prev = 0;
  while (pos <= s.size()) {
    pcre2_set_match_limit(tl.mc, uint32_t(std::min<uint64_t>(UINT32_MAX, 10'000'000 + 100 * uint64_t(s.size() - pos))));
    const int rc = pcre2_match(impl_->code, subject, s.size(), pos, PCRE2_NO_UTF_CHECK, tl.md, tl.mc);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      fail("split pattern {}: matching failed at byte {}: {}", source_, pos, reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(tl.md);
    const size_t b = ov[0], e = ov[1];
    if (b > prev) out.push_back({prev, b, false});
    if (e > b) out.push_back({b, e, true});
    prev = e;
    if (e > b) {
      pos = e;
    } else {  // an empty match: step over one code point
      pos = e + 1;
      while (pos < s.size() && (static_cast<unsigned char>(s[pos]) & 0xC0) == 0x80) ++pos;
    }
  }
  if (prev < s.size()) out.push_back({prev, s.size(), false});
}

}  // namespace oomb
