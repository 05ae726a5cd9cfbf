// The Metaspace pre-tokenizer and decoder of the SentencePiece-style tokenizers (Mistral v0.3's form, and
// every Llama-style tokenizer.json transformers 5 writes), on tokenizer_fixture's small vocabulary: each
// prepend scheme against the legacy Prepend normalizer, a text that continues earlier text, split, the
// decoder's first token, and the refusals. The expected ids follow Hugging Face tokenizers' metaspace.rs
// (its "Hey   friend!" splits into "▁Hey", "▁", "▁", "▁friend!"); the golden test checks the real
// Llama 2 vocabulary in this form against transformers.js.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "text/tokenizer.h"
#include "tokenizer_fixture.h"

using namespace oomb;
using namespace oomb::testing;
using nlohmann::json;
using ::testing::HasSubstr;
using Ids = std::vector<int32_t>;

namespace {

// vocabulary: <unk> 0, <s> 1 (added), ▁ 2, a 3, b 4, ▁a 5, ab 6, <0xC3> 7, <0xA9> 8, ▁ab 9
Tokenizer metaspace(const std::string& scheme, bool split = false) {
  return parse_test_tokenizer(metaspace_form(sentencepiece_tokenizer_json(), scheme, split));
}

EncodeOptions continuing() {
  EncodeOptions o;
  o.continues = true;
  return o;
}

// With a merge a+▁ ranked first, so that a piece running across a "▁" encodes otherwise than two pieces.
json with_a_space_merge(json j) {
  j["model"]["vocab"]["a\u2581"] = 10;
  j["model"]["merges"].insert(j["model"]["merges"].begin(), json::array({"a", "\u2581"}));
  return j;
}

}  // namespace

TEST(Metaspace, FirstPrependsOnlyAtTheTextsStart) {
  const Tokenizer first = metaspace("first"), legacy = parse_test_tokenizer(sentencepiece_tokenizer_json());
  EXPECT_TRUE(first.sentencepiece());
  EXPECT_EQ(first.encode("ab"), (Ids{9}));
  EXPECT_EQ(first.encode("a b"), (Ids{5, 2, 4}));       // "▁a▁b"
  EXPECT_EQ(first.encode("<s>ab"), (Ids{1, 6}));        // the text after a token is not at the start: "ab"
  EXPECT_EQ(legacy.encode("<s>ab"), (Ids{1, 9}));       // (the legacy Prepend starts every section)
  EXPECT_EQ(first.encode(" ab"), (Ids{9}));             // a leading space is the "▁": none added
  EXPECT_EQ(legacy.encode(" ab"), (Ids{2, 9}));         // ("▁▁ab" there)
  EXPECT_EQ(first.encode("ab<s>ab"), (Ids{9, 1, 6}));
  EXPECT_EQ(first.encode(""), (Ids{}));
  EXPECT_EQ(first.encode("ab", continuing()), (Ids{6}));                // continuing text: no "▁"
  EXPECT_EQ(first.encode(" ab<s>ab", continuing()), (Ids{9, 1, 6}));
}

TEST(Metaspace, AlwaysPrependsEverySectionAndNeverNone) {
  const Tokenizer always = metaspace("always"), never = metaspace("never");
  EXPECT_EQ(always.encode("<s>ab"), (Ids{1, 9}));
  EXPECT_EQ(always.encode("ab<s>ab"), (Ids{9, 1, 9}));
  EXPECT_EQ(always.encode(" ab<s>ab", continuing()), (Ids{9, 1, 9}));   // the section after <s> takes it still
  EXPECT_EQ(always.encode("ab", continuing()), (Ids{6}));
  EXPECT_EQ(never.encode("ab"), (Ids{6}));
  EXPECT_EQ(never.encode("a b"), (Ids{3, 2, 4}));  // "a▁b"
  // the older add_prefix_space: false beside never; alone, it contradicts the default "always" (as tokenizers
  // 0.19 on refuse it)
  json j = metaspace_form(sentencepiece_tokenizer_json(), "never");
  j["pre_tokenizer"]["add_prefix_space"] = false;
  EXPECT_EQ(parse_test_tokenizer(j).encode("ab"), (Ids{6}));
  j["pre_tokenizer"].erase("prepend_scheme");
  EXPECT_THAT(tokenizer_error(j), HasSubstr("add_prefix_space is false but prepend_scheme is \"always\""));
}

TEST(Metaspace, SplitStartsAPieceAtEveryReplacement) {
  json j = with_a_space_merge(metaspace_form(sentencepiece_tokenizer_json(), "always", true));
  const Tokenizer split = parse_test_tokenizer(j);
  j["pre_tokenizer"]["split"] = false;
  const Tokenizer whole = parse_test_tokenizer(j);
  EXPECT_EQ(split.encode("a a"), (Ids{5, 5}));                      // "▁a", "▁a"
  EXPECT_EQ(whole.encode("a a"), (Ids{2, 10, 3}));                  // "▁a▁a": a+▁ first
  EXPECT_EQ(split.encode("a   b"), (Ids{5, 2, 2, 2, 4}));  // "▁a", "▁", "▁", "▁b" (as metaspace.rs splits "Hey   friend!")
  EXPECT_EQ(whole.encode("a   b"), (Ids{2, 10, 2, 2, 4}));
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "never"}};  // split: true
  EXPECT_EQ(parse_test_tokenizer(j).encode("ab a"), (Ids{6, 5}));  // "ab", "▁a": the text before the first "▁" too
}

TEST(Metaspace, TheDecoderDropsTheReplacementInTheFirstTokenOnly) {
  json j = metaspace_form(sentencepiece_tokenizer_json(), "first");
  j["model"]["vocab"]["\u2581\u2581"] = 10;
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders", json::array({{{"type", "ByteFallback"}},
                                            {{"type", "Metaspace"}, {"replacement", "\u2581"},
                                             {"prepend_scheme", "first"}, {"split", false}}})}};
  const Tokenizer t = parse_test_tokenizer(j);
  EXPECT_EQ(t.decode(Ids{5, 2, 4}), "a b");
  EXPECT_EQ(t.decode(Ids{2, 5}), " a");       // the first token "▁" is nothing
  EXPECT_EQ(t.decode(Ids{10, 3}), "a");       // every "▁" of the first token goes (a Strip would keep one)
  EXPECT_EQ(t.decode(Ids{1, 9}), "<s> ab");   // <s> is the first token
  EXPECT_EQ(t.decode(Ids{1, 9}, true), "ab");  // skipped, it is not
  EXPECT_EQ(t.decode(Ids{7, 8, 5}), "\u00e9 a");  // é's bytes are the first token
  for (const std::string s : {"a b", "ab ab", "\u00e9 a", "b\u00e9"}) EXPECT_EQ(t.decode(t.encode(s)), s) << s;
  std::swap(j["decoder"]["decoders"][0], j["decoder"]["decoders"][1]);  // Metaspace, ByteFallback
  j["decoder"]["decoders"].push_back({{"type", "Fuse"}});
  EXPECT_EQ(parse_test_tokenizer(j).decode(Ids{7, 8, 5, 2}), "\u00e9 a ");
  j["decoder"]["decoders"][0]["prepend_scheme"] = "never";
  EXPECT_EQ(parse_test_tokenizer(j).decode(Ids{5, 4}), " ab");
}

TEST(Metaspace, AMetaspaceAfterByteFallbackSeesTheBytesText) {
  // "▁" by its bytes (E2 96 81): after ByteFallback the run is a token the Metaspace decoder sees; before, not
  json j = metaspace_form(sentencepiece_tokenizer_json(), "first");
  j["model"]["vocab"]["<0xE2>"] = 10, j["model"]["vocab"]["<0x96>"] = 11, j["model"]["vocab"]["<0x81>"] = 12;
  const json meta = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}};
  j["decoder"] = {{"type", "Sequence"}, {"decoders", json::array({{{"type", "ByteFallback"}}, meta})}};
  const Tokenizer after = parse_test_tokenizer(j);
  EXPECT_EQ(after.decode(Ids{10, 11, 12, 4}), "b");  // the first token: dropped
  EXPECT_EQ(after.decode(Ids{3, 10, 11, 12}), "a ");
  j["decoder"]["decoders"] = json::array({meta, {{"type", "ByteFallback"}}});
  const Tokenizer before = parse_test_tokenizer(j);
  EXPECT_EQ(before.decode(Ids{10, 11, 12, 4}), "\u2581b");
  EXPECT_EQ(before.decode(Ids{3, 10, 11, 12}), "a\u2581");
}

TEST(Metaspace, DecodingTextThatContinuesTreatsNoTokenAsFirst) {
  const Tokenizer legacy = parse_test_tokenizer(sentencepiece_tokenizer_json());  // (its Strip)
  json j = metaspace_form(sentencepiece_tokenizer_json(), "first");
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders", json::array({{{"type", "ByteFallback"}},
                                            {{"type", "Metaspace"}, {"replacement", "\u2581"}}})}};
  const Tokenizer meta = parse_test_tokenizer(j);
  for (const Tokenizer* t : {&legacy, &meta}) {
    EXPECT_EQ(t->decode(Ids{5, 5}), "a a");
    EXPECT_EQ(t->decode(Ids{5, 5}, false, true), " a a");
    EXPECT_EQ(t->decode(Ids{5}) + t->decode(Ids{5}, false, true), t->decode(Ids{5, 5}));
  }
}

TEST(Metaspace, CutAfterANewlineTokenTheLaterPartsContinuing) {
  const std::string text = "ab b\na ab\n\n\nb a\nab";
  for (const std::string scheme : {"never", "first"}) {
    json j = metaspace_form(sentencepiece_tokenizer_json(), scheme);
    j["added_tokens"].push_back({{"id", 10}, {"content", "\n"}, {"special", false}});
    const Tokenizer t = parse_test_tokenizer(j);
    ASSERT_TRUE(t.cut_after_newline_is_safe()) << scheme;
    size_t cuts = 0;
    EXPECT_EQ(encode_cut_at_newlines(t, text, &cuts), t.encode(text)) << scheme;
    EXPECT_EQ(cuts, 3u);
  }
  // "always" starts every line after a "\n" token with "▁" in the whole text, but not a part that continues
  json j = metaspace_form(sentencepiece_tokenizer_json(), "always");
  j["added_tokens"].push_back({{"id", 10}, {"content", "\n"}, {"special", false}});
  const Tokenizer t = parse_test_tokenizer(j);
  EXPECT_FALSE(t.cut_after_newline_is_safe());
  EXPECT_NE(encode_cut_at_newlines(t, text), t.encode(text));
}

TEST(Metaspace, RefusalsNameTheField) {
  auto with = [](auto edit) {
    json j = metaspace_form(sentencepiece_tokenizer_json(), "first");
    edit(j);
    return tokenizer_error(j);
  };
  EXPECT_THAT(with([](json& j) { j["pre_tokenizer"].erase("replacement"); }),
              HasSubstr("test/tokenizer.json: pre_tokenizer Metaspace needs \"replacement\""));
  EXPECT_THAT(with([](json& j) { j["pre_tokenizer"]["replacement"] = "ab"; }),
              HasSubstr("pre_tokenizer Metaspace.replacement must be one character, got \"ab\""));
  EXPECT_THAT(with([](json& j) { j["pre_tokenizer"]["replacement"] = 1; }),
              HasSubstr("pre_tokenizer Metaspace.replacement must be a string, got 1"));
  EXPECT_THAT(with([](json& j) { j["pre_tokenizer"]["prepend_scheme"] = "sometimes"; }),
              HasSubstr("pre_tokenizer Metaspace.prepend_scheme \"sometimes\" is not always, first or never"));
  EXPECT_THAT(with([](json& j) { j["pre_tokenizer"]["add_prefix_space"] = false; }),
              HasSubstr("pre_tokenizer Metaspace.add_prefix_space is false but prepend_scheme is \"first\""));
  EXPECT_THAT(with([](json& j) { j["pre_tokenizer"]["prepend_scheme"] = nullptr; }),
              HasSubstr("pre_tokenizer Metaspace.prepend_scheme must be a string, got null"));
  // (a normalizer that prepends or replaces moves the text's start, which "first" is about)
  EXPECT_THAT(with([](json& j) { j["normalizer"] = sentencepiece_tokenizer_json()["normalizer"]; }),
              HasSubstr("a Metaspace pre_tokenizer with prepend_scheme \"first\" after a normalizer other than NFC"));
  EXPECT_EQ(with([](json& j) { j["normalizer"] = {{"type", "NFC"}}; }), "(no error)");
  EXPECT_THAT(with([](json& j) { j["pre_tokenizer"]["split"] = "yes"; }),
              HasSubstr("pre_tokenizer Metaspace.split must be true or false, got \"yes\""));
  EXPECT_THAT(with([](json& j) {
                j["pre_tokenizer"] = {{"type", "Sequence"},
                                      {"pretokenizers", json::array({j["pre_tokenizer"], {{"type", "ByteLevel"}}})}};
              }),
              HasSubstr("a ByteLevel pre_tokenizer after a Metaspace one is not supported"));
  EXPECT_THAT(with([](json& j) {
                j["pre_tokenizer"] = {{"type", "Sequence"},
                                      {"pretokenizers", json::array({j["pre_tokenizer"], j["pre_tokenizer"]})}};
              }),
              HasSubstr("a Metaspace pre_tokenizer after a ByteLevel or Metaspace one is not supported"));
  const json meta_decoder = {{"type", "Metaspace"}, {"replacement", "\u2581"}};
  EXPECT_THAT(with([&](json& j) { j["decoder"]["decoders"][0] = meta_decoder; }),  // Metaspace, BF, Fuse, Strip
              HasSubstr("the decoders [\"Metaspace\",\"ByteFallback\",\"Fuse\",\"Strip\"] of a byte_fallback "
                        "tokenizer are not supported"));
  EXPECT_THAT(with([&](json& j) { j["decoder"]["decoders"].push_back(meta_decoder); }),
              HasSubstr("a decoder Metaspace with a Replace or another Metaspace"));
  EXPECT_THAT(with([&](json& j) {
                j["decoder"] = {{"type", "Sequence"},
                                {"decoders", json::array({{{"type", "ByteFallback"}}, {{"type", "Fuse"}}, meta_decoder})}};
              }),
              HasSubstr("the decoders [\"ByteFallback\",\"Fuse\",\"Metaspace\"] of a byte_fallback tokenizer are not "
                        "supported"));
  EXPECT_THAT(with([&](json& j) { j["decoder"] = {{"type", "Metaspace"}, {"replacement", ""}}; }),
              HasSubstr("decoder Metaspace.replacement must be one character, got \"\""));
}
