// Where SentencePiece-style text may be cut after a newline and its parts encoded apart (each after the
// first as text that continues): where "\n" is <0x0A> or its own token and no merge takes it (Llama 2's
// file, and Mistral's and Phi-3's written as it), with the legacy Prepend normalizer or Metaspace; and each
// thing that forbids it, shown to change the ids where it applies (but a Split given as a regex, which is
// refused unread).
#include <gtest/gtest.h>

#include "text/tokenizer.h"
#include "tokenizer_fixture.h"

using namespace oomb;
using namespace oomb::testing;
using nlohmann::json;
using Ids = std::vector<int32_t>;

namespace {

const std::string kText = "ab b\na ab\n\n\nb  a\nab\n\u00e9a\nxb<s>a\nb";

// tokenizer_fixture's Llama-2-style file with the byte token of "\n" (10): no merge takes it
json with_newline_byte() {
  json j = sentencepiece_tokenizer_json();
  j["model"]["vocab"]["<0x0A>"] = 10;
  return j;
}

Ids whole(const json& j, const std::string& s = kText) { return parse_test_tokenizer(j).encode(s); }
Ids parts(const json& j, const std::string& s = kText) { return encode_cut_at_newlines(parse_test_tokenizer(j), s); }
bool safe(const json& j) { return parse_test_tokenizer(j).cut_after_newline_is_safe(); }

}  // namespace

TEST(SentencePieceCuts, ANewlineNoMergeTakesIsABoundary) {
  const json legacy = with_newline_byte();
  ASSERT_TRUE(safe(legacy));
  EXPECT_EQ(parts(legacy), whole(legacy));
  // (the parts must say they continue: else the Prepend starts each)
  const Tokenizer t = parse_test_tokenizer(legacy);
  Ids apart = t.encode("ab b\n");
  for (int32_t id : t.encode("a ab")) apart.push_back(id);
  EXPECT_NE(apart, t.encode("ab b\na ab"));
  for (const std::string scheme : {"first", "always", "never"}) {
    const json meta = metaspace_form(legacy, scheme);
    ASSERT_TRUE(safe(meta)) << scheme;
    EXPECT_EQ(parts(meta), whole(meta)) << scheme;
    const json split = metaspace_form(legacy, scheme, true);
    ASSERT_TRUE(safe(split)) << scheme;
    EXPECT_EQ(parts(split), whole(split)) << scheme;
  }
  json own = sentencepiece_tokenizer_json();  // "\n" its own token, no merge taking it
  own["model"]["vocab"]["\n"] = 10;
  ASSERT_TRUE(safe(own));
  EXPECT_EQ(parts(own), whole(own));
  json gemma = with_newline_byte();  // Gemma's split on " "
  gemma["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "MergedWithPrevious"}};
  ASSERT_TRUE(safe(gemma));
  EXPECT_EQ(parts(gemma), whole(gemma));
}

TEST(SentencePieceCuts, AMergeTakingTheNewlineForbidsThem) {
  json j = with_newline_byte();
  j["model"]["vocab"]["<0x0A>a"] = 11;
  j["model"]["merges"].push_back(json::array({"<0x0A>", "a"}));
  EXPECT_FALSE(safe(j));
  EXPECT_EQ(whole(j, "b\na"), (Ids{2, 4, 11}));  // "<0x0A>a": a merge the parts could not make
  EXPECT_NE(parts(j, "b\na"), whole(j, "b\na"));
  json own = sentencepiece_tokenizer_json();
  own["model"]["vocab"]["\n"] = 10, own["model"]["vocab"]["\na"] = 11;
  own["model"]["merges"].push_back(json::array({"\n", "a"}));
  EXPECT_FALSE(safe(own));
  EXPECT_NE(parts(own, "b\na"), whole(own, "b\na"));
}

TEST(SentencePieceCuts, ANewlineTokenWithAPrependBeforeEverySectionForbidsThem) {
  json j = with_newline_byte();  // (its Prepend starts every section: each line after a "\n\n" token too)
  j["model"]["vocab"]["<nn>"] = 11;
  j["added_tokens"].push_back({{"id", 11}, {"content", "\n\n"}, {"special", false}});
  EXPECT_FALSE(safe(j));
  EXPECT_NE(parts(j, "a\n\nb"), whole(j, "a\n\nb"));
  j["normalizer"] = nullptr;  // Gemma's: no Prepend
  EXPECT_TRUE(safe(j));
  EXPECT_EQ(parts(j, "a\n\nb a\nb"), whole(j, "a\n\nb a\nb"));
}

TEST(SentencePieceCuts, AnUnkNewlineOrIgnoreMergesForbidsThem) {
  const json fused = sentencepiece_tokenizer_json();  // "\n" an unk: fused with the unk after it
  EXPECT_FALSE(safe(fused));
  EXPECT_EQ(whole(fused, "x\nx"), (Ids{2, 0}));  // one unk for "x\nx"
  EXPECT_EQ(parts(fused, "x\nx"), (Ids{2, 0, 0}));
  json whole_pieces = with_newline_byte();  // a part may be a token where the whole is not
  whole_pieces["model"]["ignore_merges"] = true;
  whole_pieces["model"]["vocab"]["ba"] = 11;
  EXPECT_FALSE(safe(whole_pieces));
  EXPECT_EQ(whole(whole_pieces, "a\nba"), (Ids{5, 10, 4, 3}));
  EXPECT_EQ(parts(whole_pieces, "a\nba"), (Ids{5, 10, 11}));
}

TEST(SentencePieceCuts, ASplitOtherThanOnASpaceForbidsThem) {
  // Metaspace "always" starts every piece: a Split on a tab puts a piece at a cut where a Replace makes the
  // part start with one, a piece the whole text does not have there
  json j = metaspace_form(with_newline_byte(), "always");
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers", json::array({{{"type", "Split"}, {"pattern", {{"String", "\t"}}}},
                                                       j["pre_tokenizer"]})}};
  j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", "x"}}}, {"content", "\t"}};
  EXPECT_FALSE(safe(j));
  EXPECT_NE(parts(j, "b\nx"), whole(j, "b\nx"));
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"String", " "}};  // a space: Metaspace starts none with "▁"
  j["normalizer"]["content"] = " ";
  EXPECT_TRUE(safe(j));
  EXPECT_EQ(parts(j, "b\nx a\nb"), whole(j, "b\nx a\nb"));
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", " "}};
  EXPECT_FALSE(safe(j));  // (a regex is not read for what it may match)
}

TEST(SentencePieceCuts, ANewlineInANormalizationForbidsThem) {
  json replace = with_newline_byte();  // a Replace whose pattern holds the newline reaches across a cut
  replace["normalizer"]["normalizers"].push_back(
      {{"type", "Replace"}, {"pattern", {{"String", "\nb"}}}, {"content", "a"}});
  EXPECT_FALSE(safe(replace));
  EXPECT_NE(parts(replace, "a\nb"), whole(replace, "a\nb"));
  json added = with_newline_byte();  // a normalized added token whose normalized form holds one ("\nb")
  added["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", "x"}}}, {"content", "\n"}};
  added["model"]["vocab"]["xb"] = 11;
  added["added_tokens"].push_back({{"id", 11}, {"content", "xb"}, {"normalized", true}, {"special", false}});
  EXPECT_FALSE(safe(added));
  EXPECT_NE(parts(added, "a\nb"), whole(added, "a\nb"));
}
