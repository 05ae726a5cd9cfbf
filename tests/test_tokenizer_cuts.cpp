// Where SentencePiece-style text may be cut after a newline and its parts encoded apart (each after the
// first as text that continues): where "\n" is <0x0A> or its own token and no merge takes it (Llama 2's
// file, and Mistral's and Phi-3's written as it), with the legacy Prepend normalizer or Metaspace; and each
// thing that forbids it, shown to change the ids where it applies.
#include <gtest/gtest.h>

#include "text/tokenizer.h"
#include "tokenizer_fixture.h"

using namespace oomb;
using namespace oomb::testing;
using nlohmann::json;
using Ids = std::vector<int32_t>;

namespace {

const std::string kText = "ab b\na ab\n\n\nb  a\nab\n";

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
}

TEST(SentencePieceCuts, AMergeAcrossTheNewlineForbidsThem) {
  json j = with_newline_byte();
  j["model"]["vocab"]["<0x0A>a"] = 11;
  j["model"]["merges"].push_back(json::array({"<0x0A>", "a"}));
  EXPECT_FALSE(safe(j));
  EXPECT_EQ(whole(j, "b\na"), (Ids{2, 4, 11}));  // "<0x0A>a": a merge the parts could not make
  json own = sentencepiece_tokenizer_json();
  own["model"]["vocab"]["\n"] = 10, own["model"]["vocab"]["b\n"] = 11;
  own["model"]["merges"].push_back(json::array({"b", "\n"}));
  EXPECT_FALSE(safe(own));
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

TEST(SentencePieceCuts, AnUnkNewlineAnUnsafeSplitOrReplaceForbidsThem) {
  EXPECT_FALSE(safe(sentencepiece_tokenizer_json()));  // "\n" an unk: fused with the unk after it
  const json fused = sentencepiece_tokenizer_json();
  EXPECT_EQ(whole(fused, "x\nx"), (Ids{2, 0}));           // one unk for "x\nx"
  json split = with_newline_byte();
  split["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "MergedWithPrevious"}};
  EXPECT_TRUE(safe(split));  // Gemma's split: its delimiter is never the first character after a cut
  split["pre_tokenizer"]["pattern"]["String"] = "a";
  EXPECT_FALSE(safe(split));  // "a" can be: "b\n" + "a..." would merge it with the piece before
  split["pre_tokenizer"]["pattern"] = {{"Regex", " "}};
  EXPECT_FALSE(safe(split));  // (a regex is not read for what it may match)
  json replace = with_newline_byte();
  replace["normalizer"]["normalizers"].push_back({{"type", "Replace"}, {"pattern", {{"String", "\n"}}}, {"content", " "}});
  EXPECT_FALSE(safe(replace));
}
