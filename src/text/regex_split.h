// The Split pre-tokenizer of tokenizer.json: a regex whose matches and the gaps between them
// become pieces ("Isolated" behaviour). Hugging Face's tokenizers run these patterns on
// Oniguruma; oomb runs them on PCRE2 with its JIT (Debian's libpcre2, 5x faster here), after
// one rewrite that makes the two engines agree: `\s` and `\S` become explicit classes of the 25
// White_Space code points Oniguruma uses (PCRE2 also counts U+180E). `\p{L}`, `\p{N}` and case
// folding come from PCRE2's Unicode 14 tables, the version of Oniguruma 6.9.8 that Hugging Face's
// Rust tokenizers bundle (tests/test_regex_split.cpp checks the split against Debian's Oniguruma).
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace oomb {

struct Piece {
  size_t begin, end;  // byte offsets into the split text
  bool match;         // a match of the pattern (else a gap between matches)
};

class RegexSplit {
 public:
  // `pattern`: the regex as tokenizer.json states it; `where` names it in errors.
  RegexSplit(std::string_view pattern, std::string_view where);
  ~RegexSplit();
  RegexSplit(RegexSplit&&) noexcept;
  RegexSplit& operator=(RegexSplit&&) noexcept;
  // Appends the pieces of valid UTF-8 `s` (matches and non-empty gaps, in order, covering s).
  void split(std::string_view s, std::vector<Piece>& out) const;
  const std::string& source() const { return source_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string source_;
};

// The pattern PCRE2 compiles for a tokenizer.json pattern (exposed for tests).
std::string rewrite_for_pcre2(std::string_view pattern, std::string_view where);

// The GPT-2 pattern a ByteLevel pre-tokenizer with use_regex = true applies.
extern const char* const kGpt2Pattern;

}  // namespace oomb
