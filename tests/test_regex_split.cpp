// The split regexes against Oniguruma, the engine Hugging Face's tokenizers run them on (Debian's
// libonig 6.9.8, the version its Rust crate bundles), with the patterns exactly as the files state
// them. This covers what the JavaScript reference cannot: its \s differs at U+0085 and U+FEFF, it
// rewrites (?i:...) away, and its Unicode tables are newer.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"
#include "onig_reference.h"
#include "test_util.h"
#include "text/regex_split.h"
#include "text/utf8.h"

using namespace oomb;
using oomb::testing::OnigSplit;
using oomb::testing::source_dir;

namespace {

const char* kPatterns[] = {
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
    kGpt2Pattern};

using Spans = std::vector<std::pair<size_t, size_t>>;

Spans ours(const RegexSplit& r, std::string_view s) {
  std::vector<Piece> p;
  r.split(s, p);
  Spans out;
  for (const Piece& q : p) out.push_back({q.begin, q.end});
  return out;
}

std::vector<std::string> texts() {
  std::vector<std::string> t = {
      "a\xC2\x85\xC2\x85" "b",           // U+0085 NEL: White_Space, not JavaScript's \s
      " \xC2\x85x \xC2\x85\xC2\x85",
      "\xEF\xBB\xBFhello \xEF\xBB\xBF\xEF\xBB\xBF world",  // U+FEFF: JavaScript's \s, not White_Space
      "x\xE1\xA0\x8E\xE1\xA0\x8Ey",      // U+180E: PCRE2's \s, not Oniguruma's
      "it'\xC5\xBF it'S it'\xE2\x84\xAA",  // 's with U+017F (folds to s) and U+212A KELVIN SIGN
      "WE'LL we'Ll I'\xEF\xAC\x86",        // U+FB06 (st ligature)
      "\xF0\xB1\x8D\x90\xF0\xB1\x8D\x91 \xF0\x9E\x80\xB0",  // assigned after Unicode 14 (CJK Ext H, U+1E030)
      "   ", "\n\n\n", "a\r\n\r\nb", "", "1234567 89", "\t\t x \t"};
  std::mt19937 g(5);
  for (int k = 0; k < 3000; ++k) {
    std::string s;
    for (int i = int(g() % 40); i > 0; --i) {
      const uint32_t c = g() % 3 == 0 ? g() % 0x110000 : g() % 2 ? 0x20 + g() % 0x60 : g() % 0x3100;
      if (c < 0xD800 || c >= 0xE000) utf8_append(s, c);
    }
    t.push_back(s);
  }
  std::ifstream f(source_dir() / "tests/fixtures/tokenizer_golden.jsonl");
  std::string line;
  while (std::getline(f, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("text")) t.push_back(j["text"]);
  }
  return t;
}

}  // namespace

TEST(RegexSplit, SameSplitAsOniguruma) {
  const auto all = texts();
  ASSERT_GT(all.size(), 5000u);
  for (const char* pat : kPatterns) {
    const OnigSplit onig(pat);
    const RegexSplit r(pat, "test");
    int same = 0;
    for (const std::string& s : all) {
      if (ours(r, s) == onig.split(s)) ++same;
      else ADD_FAILURE() << "pattern " << pat << "\ntext " << ::testing::PrintToString(s);
    }
    std::cout << "identical splits: " << same << "/" << all.size() << std::endl;
  }
}

TEST(RegexSplit, RunsLongerThanPcre2sDefaultMatchLimit) {
  // ten million spaces exceed PCRE2's default match limit (each length of \s*[\r\n]+ is tried)
  for (const char* pat : kPatterns) {
    const RegexSplit r(pat, "test");
    const std::string s = "a" + std::string(11 << 20, ' ') + "b";
    const Spans got = ours(r, s);
    ASSERT_FALSE(got.empty());
    EXPECT_EQ(got.back().second, s.size());
    EXPECT_LE(got.size(), 4u) << pat;
  }
}

TEST(RegexSplit, ExponentialBacktrackingIsANamedErrorNotAHang) {
  const RegexSplit r("(a|aa)+$", "test");
  std::vector<Piece> p;
  try {
    r.split(std::string(60, 'a') + "b", p);
    FAIL() << "no error";
  } catch (const oomb::Error& e) {
    EXPECT_NE(std::string(e.what()).find("split pattern (a|aa)+$: matching failed at byte 0"), std::string::npos)
        << e.what();
  }
}

TEST(RegexSplit, WhiteSpaceIsRewrittenOutsideAndInsideClasses) {
  const std::string p = rewrite_for_pcre2(R"(\s+(?!\S)|[^\s\p{L}]|\\s|[\]\s])", "t");
  EXPECT_EQ(p.find("\\s"), p.find("\\\\s") + 1);  // only the escaped backslash's "s" is left
  EXPECT_NE(p.find("[^\\t\\n"), std::string::npos);
  EXPECT_THROW(rewrite_for_pcre2(R"([\S])", "t"), std::exception);
  EXPECT_THROW(rewrite_for_pcre2(R"(abc\)", "t"), std::exception);
}
