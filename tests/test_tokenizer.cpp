// The tokenizer on small tokenizer.json files written here: merges in both stored formats, merge
// order, long pieces, ignore_merges, added tokens, NFC, decoding, the SentencePiece style (byte
// fallback, Prepend / Replace, MergedWithPrevious, its decoder) and every rejected input.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "text/byte_level.h"
#include "text/normalizer.h"
#include "text/tokenizer.h"
#include "text/utf8.h"
#include "tokenizer_fixture.h"

using namespace oomb;
using namespace oomb::testing;
using nlohmann::json;
using ::testing::HasSubstr;

namespace {

json tokenizer_json(const std::vector<std::pair<std::string, std::string>>& merges, bool pair_format = true,
                    bool ignore_merges = false) {
  return byte_tokenizer_json(merges, pair_format, ignore_merges);
}

Tokenizer make(const json& j) { return parse_test_tokenizer(j); }
std::string error_of(const json& j) { return tokenizer_error(j); }



// The plain statement of BPE, over strings: merge the lowest-ranked adjacent pair (leftmost
// among equals) until none applies.
std::vector<std::string> reference_bpe(const std::string& raw, const std::vector<std::pair<std::string, std::string>>& merges) {
  std::vector<std::string> w;
  for (char c : raw) w.push_back(std::string(1, c));
  for (;;) {
    size_t best = merges.size(), at = 0;
    for (size_t i = 0; i + 1 < w.size(); ++i)
      for (size_t r = 0; r < best; ++r)
        if (merges[r].first == w[i] && merges[r].second == w[i + 1]) {
          best = r, at = i;
          break;
        }
    if (best == merges.size()) return w;
    w[at] += w[at + 1];
    w.erase(w.begin() + std::ptrdiff_t(at) + 1);
  }
}

}  // namespace

TEST(Tokenizer, MergesInBothStoredFormatsGiveTheSameIds) {
  const std::vector<std::pair<std::string, std::string>> merges = {{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"},
                                                                   {" ", "w"}, {"o", "r"}};
  const Tokenizer pairs = make(tokenizer_json(merges, true)), strings = make(tokenizer_json(merges, false));
  const auto ids = pairs.encode("hello world");
  EXPECT_EQ(ids, strings.encode("hello world"));
  // hello -> "hello" (id of the 4th merge result); " world" -> " w" "or" "l" "d"
  EXPECT_EQ(ids, (std::vector<int32_t>{pairs.token_id(bl("hello")), pairs.token_id(bl(" w")),
                                       pairs.token_id(bl("or")), 'l', 'd'}));
}

TEST(Tokenizer, LowestRankFirstAndLeftmostAmongEquals) {
  const Tokenizer t = make(tokenizer_json({{"a", "a"}, {"b", "a"}}));
  EXPECT_EQ(t.encode("aaa"), (std::vector<int32_t>{t.token_id("aa"), 'a'}));
  // "baa": rank 0 (a a) beats rank 1 (b a) though "ba" is further left
  EXPECT_EQ(t.encode("baa"), (std::vector<int32_t>{'b', t.token_id("aa")}));
}

TEST(Tokenizer, LongPiecesMatchThePlainAlgorithm) {
  // A small alphabet with many merges, pieces from 1 to 3000 letters (the heap path above 48 bytes).
  std::mt19937 g(7);
  std::vector<std::pair<std::string, std::string>> merges;
  std::vector<std::string> toks = {"a", "b", "c"};
  for (int i = 0; i < 60; ++i) {
    const std::string a = toks[g() % toks.size()], b = toks[g() % toks.size()];
    if (std::find(merges.begin(), merges.end(), std::pair{a, b}) != merges.end() || (a + b).size() > 12) continue;
    merges.push_back({a, b});
    toks.push_back(a + b);
  }
  const Tokenizer t = make(tokenizer_json(merges));
  for (int len : {1, 2, 7, 47, 48, 49, 50, 130, 700, 3000}) {
    std::string s;
    for (int i = 0; i < len; ++i) s += "abc"[g() % 3];
    std::vector<int32_t> want;
    for (const auto& tok : reference_bpe(s, merges)) want.push_back(t.token_id(tok));
    EXPECT_EQ(t.encode(s), want) << len;
  }
}

TEST(Tokenizer, IgnoreMergesTakesAWholeVocabularyEntry) {
  // "abc" is in the vocabulary, but the merges reach only "ab" + "c"
  json j = tokenizer_json({{"a", "b"}, {"b", "c"}});
  j["model"]["vocab"]["abc"] = 300;
  EXPECT_EQ(make(j).encode("abc"), (std::vector<int32_t>{make(j).token_id("ab"), 'c'}));
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(make(j).encode("abc"), (std::vector<int32_t>{300}));
  EXPECT_EQ(make(j).encode("abcd"), (std::vector<int32_t>{make(j).token_id("ab"), 'c', 'd'}));
}

TEST(Tokenizer, AddedTokensAreFoundFirstLongestAndLeftmost) {
  json j = tokenizer_json({});
  j["added_tokens"] = json::array({{{"id", 500}, {"content", "<|x|>"}, {"special", true}},
                                   {{"id", 501}, {"content", "<|x|><|y|>"}, {"special", true}},
                                   {{"id", 502}, {"content", "<think>"}, {"special", false}},
                                   {{"id", 503}, {"content", "[L]"}, {"lstrip", true}, {"special", true}},
                                   {{"id", 504}, {"content", "[R]"}, {"rstrip", true}, {"special", true}},
                                   {{"id", 505}, {"content", "ab"}, {"single_word", true}}});
  const Tokenizer t = make(j);
  EXPECT_EQ(t.id_limit(), 506);
  EXPECT_EQ(t.encode("a<|x|><|y|>b<|x|>"), (std::vector<int32_t>{'a', 501, 'b', 500}));
  EXPECT_EQ(t.encode("<|x|"), (std::vector<int32_t>{'<', '|', 'x', '|'}));
  // special tokens as plain text on request; non-special added tokens are still found
  EncodeOptions plain;
  plain.split_special = true;
  EXPECT_EQ(t.encode("<|x|><think>", plain), (std::vector<int32_t>{'<', '|', 'x', '|', '>', 502}));
  // lstrip eats the whitespace before, rstrip the whitespace after (Unicode White_Space)
  const int32_t sp = t.token_id(bl(" "));
  EXPECT_EQ(t.encode("a \t[L] b"), (std::vector<int32_t>{'a', 503, sp, 'b'}));
  EXPECT_EQ(t.encode("a [R] \xE3\x80\x80" "b"), (std::vector<int32_t>{'a', sp, 504, 'b'}));
  // single_word: only between non-word characters
  EXPECT_EQ(t.encode("ab cab ab_ ab"), (std::vector<int32_t>{505, sp, 'c', 'a', 'b', sp, 'a', 'b', '_', sp, 505}));
  EXPECT_EQ(t.decode(std::vector<int32_t>{'a', 501, 503, 'b'}), "a<|x|><|y|>[L]b");
  EXPECT_EQ(t.decode(std::vector<int32_t>{'a', 501, 502, 'b'}, /*skip_special=*/true), "a<think>b");
}

TEST(Tokenizer, AddedTokensFollowHuggingFaceOnConsumedSpansWordsAndNormalization) {
  json j = tokenizer_json({});
  j["normalizer"] = {{"type", "NFC"}};
  j["added_tokens"] = json::array({{{"id", 600}, {"content", "ab"}, {"single_word", true}},
                                   {{"id", 601}, {"content", "b"}},
                                   {{"id", 602}, {"content", "<s>x</s>"}, {"special", true}},
                                   {{"id", 603}, {"content", "x"}},
                                   {{"id", 604}, {"content", "<m>"}, {"single_word", true}},
                                   {{"id", 605}, {"content", "\xC3\xA9"}, {"normalized", true}},
                                   {{"id", 606}, {"content", "\xC4\x80z"}}});
  const Tokenizer t = make(j);
  // a dropped single_word match still consumes "ab": the "b" inside it is not matched
  EXPECT_EQ(t.encode("xab"), (std::vector<int32_t>{603, 'a', 'b'}));
  EXPECT_EQ(t.encode("b ab"), (std::vector<int32_t>{601, t.token_id(bl(" ")), 600}));
  // special tokens kept as text are consumed whole: the non-special "x" inside is not matched
  EncodeOptions plain;
  plain.split_special = true;
  EXPECT_EQ(t.encode("<s>x</s>", plain), (std::vector<int32_t>{'<', 's', '>', 'x', '<', '/', 's', '>'}));
  EXPECT_EQ(t.encode("<s>x</s>"), (std::vector<int32_t>{602}));
  // word characters are Unicode's \w: a combining mark is one, a superscript digit is not
  EXPECT_EQ(t.encode("e\xCC\x81<m>").back(), '>');
  EXPECT_EQ(t.encode("\xC2\xB2<m>").back(), 604);
  // normalized tokens are found in the normalized text: the decomposed form matches after NFC
  EXPECT_EQ(t.encode("e\xCC\x81"), (std::vector<int32_t>{605}));
  // added tokens decode through the byte-level alphabet, as Hugging Face's decoder does
  EXPECT_EQ(t.decode(std::vector<int32_t>{606}), std::string("\0z", 2));
}

TEST(Tokenizer, CutsAreExactForQwenAndLlamaPatternsOnlyNotGpt2s) {
  const Tokenizer qwen = make(tokenizer_json({{" ", "\n"}}));
  EXPECT_TRUE(qwen.cut_after_newline_is_safe());
  json g = tokenizer_json({{" ", "\n"}});
  g["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  const Tokenizer gpt2 = make(g);
  EXPECT_FALSE(gpt2.cut_after_newline_is_safe());
  // why: GPT-2's \s+(?!\S) looks past the newline, so the whole text and its parts differ
  auto cut = [](const Tokenizer& t, std::string_view s, size_t at) {
    auto a = t.encode(s.substr(0, at));
    for (int32_t x : t.encode(s.substr(at))) a.push_back(x);
    return a;
  };
  EXPECT_NE(gpt2.encode("a \nB"), cut(gpt2, "a \nB", 3));
  EXPECT_EQ(qwen.encode("a \nB"), cut(qwen, "a \nB", 3));
  // cut points: after '\n', before anything but White_Space (CJK, digits and marks too)
  EXPECT_TRUE(is_cut_point("a\n\xE4\xB8\xAD", 2));
  EXPECT_TRUE(is_cut_point("a\n7", 2));
  EXPECT_TRUE(is_cut_point("a\n\xCC\x81", 2));
  EXPECT_FALSE(is_cut_point("a\n \x62", 2));
  EXPECT_FALSE(is_cut_point("a\n\xE3\x80\x80", 2));  // U+3000
  EXPECT_FALSE(is_cut_point("a\n\n", 2));
  EXPECT_FALSE(is_cut_point("ab", 1));
}

TEST(Tokenizer, NfcNormalizerComposes) {
  json j = tokenizer_json({{"\xC3", "\xA9"}});
  const Tokenizer raw = make(j);
  j["normalizer"] = {{"type", "NFC"}};
  const Tokenizer n = make(j);
  const std::string composed = "caf\xC3\xA9", decomposed = "cafe\xCC\x81";
  EXPECT_EQ(n.encode(decomposed), n.encode(composed));
  EXPECT_NE(raw.encode(decomposed), raw.encode(composed));
  EXPECT_EQ(n.decode(n.encode(decomposed)), composed);
  EXPECT_EQ(raw.decode(raw.encode(decomposed)), decomposed);
}

TEST(Tokenizer, TextBelowU0300IsItsOwnNfc) {
  // the normalizer skips the library call for such text; this checks that shortcut is exact
  std::string all;
  for (uint32_t c = 1; c < 0x300; ++c) utf8_append(all, c);
  EXPECT_EQ(nfc(all), all);
  std::string out;
  Normalizer n = Normalizer::from_json(json{{"type", "NFC"}}, "t");
  EXPECT_EQ(n.apply(all, out).data(), all.data());  // returned as is
  EXPECT_EQ(n.apply("e\xCC\x81", out), "\xC3\xA9");
}

TEST(Tokenizer, SplitPiecesOfTheQwenPattern) {
  RegexSplit r(kQwenPattern, "t");
  auto pieces = [&](std::string_view s) {
    std::vector<Piece> p;
    r.split(s, p);
    std::vector<std::string> out;
    for (const Piece& q : p) out.emplace_back(s.substr(q.begin, q.end - q.begin));
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces("I'M here  \n\n  now"), (V{"I", "'M", " here", "  \n\n", " ", " now"}));
  EXPECT_EQ(pieces("x=1234;"), (V{"x", "=", "1", "2", "3", "4", ";"}));
  EXPECT_EQ(pieces("a\xC2\xA0\xC2\xA0" "b"), (V{"a", "\xC2\xA0", "\xC2\xA0" "b"}));  // NBSP is \s
  EXPECT_EQ(pieces(""), V{});
}

TEST(Tokenizer, DecodeJoinsBytesAndRepairsBrokenUtf8) {
  const Tokenizer t = make(tokenizer_json({}));
  EXPECT_EQ(t.decode(std::vector<int32_t>{0xE2, 0x82, 0xAC}), "\xE2\x82\xAC");
  EXPECT_EQ(t.decode(std::vector<int32_t>{'a', 0xE2, 0x82}), "a\xEF\xBF\xBD");
  try {
    t.decode(std::vector<int32_t>{'a', 9999});
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("token id 9999 (at 1) is not in the tokenizer test/tokenizer.json"));
  }
}

TEST(Tokenizer, EveryByteSequenceRoundTripsWithoutANormalizer) {
  const Tokenizer t = make(tokenizer_json({{"a", "b"}, {" ", "a"}, {"\xE4", "\xB8"}}));
  std::mt19937 g(3);
  for (int k = 0; k < 300; ++k) {
    std::string s;
    for (int i = int(g() % 40); i > 0; --i) {
      const uint32_t c = g() % 4 == 0 ? 0x20 + g() % 0x60 : g() % 0x110000;
      if (c >= 0xD800 && c < 0xE000) continue;
      utf8_append(s, c);
    }
    EXPECT_EQ(t.decode(t.encode(s)), s);
  }
}

// Hugging Face's Digits pre_tokenizer (StarCoder's and Granite's tokenizer.json: individual digits,
// then ByteLevel's GPT-2 split), as tokenizers' digits.rs splits: each character char::is_numeric
// takes (Unicode's N: Nd, Nl, No) a piece of its own, or (individual_digits false) each run of them
// one piece. Merges across the would-be cuts show where the pieces end: "Ġ1" and "12"; the last byte
// of U+0663 with the first of U+0664 (Arabic-Indic digits, Nd); a space with the first byte of "½"
// (U+00BD, No), of "Ⅻ" (U+216B, Nl) and of "€" (U+20AC, Sc: not numeric, so never cut); and with the
// first byte of digits Unicode added after PCRE2's tables (Kawi U+11F50, 15.0; Tolong Siki U+11DE9,
// 17.0; Kaktovik U+1D2D3, 15.0), which Rust's char::is_numeric in tokenizers takes as numeric.
TEST(Tokenizer, DigitsSplitNumbersAsHuggingFaceDoes) {
  auto tok = [](const json& digits) {
    json j = tokenizer_json({{" ", "1"}, {"1", "2"}, {"\xA3", "\xD9"}, {" ", "\xC2"}, {" ", "\xE2"}, {" ", "\xF0"}});
    json seq = json::array();
    if (!digits.is_null()) seq.push_back(digits);
    seq.push_back({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}});
    j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", seq}};
    return make(j);
  };
  const Tokenizer plain = tok(nullptr), runs = tok({{"type", "Digits"}, {"individual_digits", false}}),
                  each = tok({{"type", "Digits"}, {"individual_digits", true}});
  auto id = [&](const std::string& s) { return plain.token_id(bl(s)); };
  using V = std::vector<int32_t>;
  // "a 12": GPT-2's split alone gives "a", " 12" ("Ġ1" merges first); Digits cuts "a ", "12" or "1", "2"
  EXPECT_EQ(plain.encode("a 12"), (V{'a', id(" 1"), '2'}));
  EXPECT_EQ(runs.encode("a 12"), (V{'a', ' ', id("12")}));
  EXPECT_EQ(each.encode("a 12"), (V{'a', ' ', '1', '2'}));
  // U+0663 U+0664 (D9 A3 D9 A4): one run, or two pieces
  const std::string arabic = "\xD9\xA3\xD9\xA4";
  EXPECT_EQ(runs.encode(arabic), (V{0xD9, id("\xA3\xD9"), 0xA4}));
  EXPECT_EQ(each.encode(arabic), (V{0xD9, 0xA3, 0xD9, 0xA4}));
  // " ½", " Ⅻ": numeric, cut from their space; " €" is not
  for (const Tokenizer* t : {&runs, &each}) {
    EXPECT_EQ(t->encode(" \xC2\xBD"), (V{' ', 0xC2, 0xBD}));
    EXPECT_EQ(t->encode(" \xE2\x85\xAB"), (V{' ', 0xE2, 0x85, 0xAB}));
    EXPECT_EQ(t->encode(" \xE2\x82\xAC"), (V{id(" \xE2"), 0x82, 0xAC}));
  }
  EXPECT_EQ(plain.encode(" \xC2\xBD"), (V{id(" \xC2"), 0xBD}));  // (the control: GPT-2's " ?\p{N}+" keeps them)
  for (const std::string newer : {"\xF0\x91\xBD\x90", "\xF0\x91\xB7\xA9", "\xF0\x9D\x8B\x93"}) {
    const std::vector<uint8_t> b(newer.begin(), newer.end());
    EXPECT_EQ(each.encode(" " + newer), (V{' ', b[0], b[1], b[2], b[3]})) << "U+" << std::hex << int(b[3]);
    EXPECT_EQ(plain.encode(" " + newer), (V{id(" \xF0"), b[1], b[2], b[3]}));  // (PCRE2's \p{N} lacks them)
  }
  EXPECT_THAT(error_of({{"model", tokenizer_json({})["model"]},
                        {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", json::array({
                                                {{"type", "ByteLevel"}}, {{"type", "Digits"}, {"individual_digits", true}}})}}}}),
              HasSubstr("a Digits after the ByteLevel pre_tokenizer is not supported"));
  EXPECT_THAT(error_of({{"model", tokenizer_json({})["model"]},
                        {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", json::array({
                                                {{"type", "Digits"}, {"individual_digits", "yes"}}, {{"type", "ByteLevel"}}})}}}}),
              HasSubstr("pre_tokenizer Digits.individual_digits must be true or false"));
  EXPECT_THAT(error_of({{"model", tokenizer_json({})["model"]},
                        {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", json::array({
                                                {{"type", "Digits"}}, {{"type", "ByteLevel"}}})}}}}),
              HasSubstr("pre_tokenizer Digits needs \"individual_digits\""));
}

TEST(Tokenizer, RejectsWhatItDoesNotSupportNamingTheField) {
  auto with = [](auto edit) {
    json j = tokenizer_json({{"a", "b"}});
    edit(j);
    return error_of(j);
  };
  EXPECT_EQ(error_of(json::array()), "test/tokenizer.json: a tokenizer.json must hold a JSON object");
  EXPECT_THAT(error_of(json{{"x", 1}}), HasSubstr("no \"model\""));
  EXPECT_THAT(with([](json& j) { j["model"]["type"] = "WordPiece"; }),
              HasSubstr("test/tokenizer.json: unsupported model type \"WordPiece\""));
  EXPECT_THAT(with([](json& j) { j["model"]["type"] = "Unigram"; }), HasSubstr("unsupported model type \"Unigram\""));
  EXPECT_THAT(with([](json& j) { j["normalizer"] = {{"type", "NFKC"}}; }),
              HasSubstr("unsupported normalizer type \"NFKC\""));
  EXPECT_THAT(with([](json& j) { j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "_"}}; }),
              HasSubstr("has no ByteLevel step and the model no byte_fallback"));
  EXPECT_THAT(with([](json& j) { j["pre_tokenizer"] = nullptr; }), HasSubstr("has no ByteLevel step"));
  EXPECT_THAT(with([](json& j) { j["decoder"] = {{"type", "Metaspace"}}; }),
              HasSubstr("unsupported decoder type \"Metaspace\""));
  EXPECT_THAT(with([](json& j) { j["model"]["byte_fallback"] = true, j["model"]["unk_token"] = "a"; }),
              HasSubstr("a ByteLevel pre_tokenizer with model.byte_fallback"));
  EXPECT_THAT(with([](json& j) { j["model"]["continuing_subword_prefix"] = "##"; }),
              HasSubstr("model.continuing_subword_prefix = \"##\" is not supported"));
  EXPECT_THAT(with([](json& j) { j["model"]["vocab"].erase(bl("\n")); }),
              HasSubstr("model.vocab lacks the byte-level token of byte 0x0a"));
  EXPECT_THAT(with([](json& j) { j["model"]["merges"].push_back(json::array({"a", "zz"})); }),
              HasSubstr("model.merges[1] = [\"a\",\"zz\"]: token \"zz\" is not in model.vocab"));
  EXPECT_THAT(with([](json& j) { j["model"]["merges"].push_back("ab"); }),
              HasSubstr("model.merges[1] = \"ab\" is not two tokens separated by a space"));
  EXPECT_THAT(with([](json& j) { j["model"]["vocab"]["dup"] = 5; }), HasSubstr("model.vocab gives id 5 to two tokens"));
  EXPECT_THAT(with([](json& j) { j["model"]["vocab"]["neg"] = -1; }), HasSubstr("model.vocab[\"neg\"] = -1 is not a token id"));
  EXPECT_THAT(with([](json& j) { j["added_tokens"] = json::array({{{"id", 3}}}); }),
              HasSubstr("added_tokens[0] lacks \"content\""));
  EXPECT_THAT(with([](json& j) {
                j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
              }),
              HasSubstr("cannot compile the split pattern (unclosed"));
  EXPECT_THAT(with([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "MergedWithNext"; }),
              HasSubstr("Split behavior \"MergedWithNext\" is not supported"));
  EXPECT_THAT(with([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = 3; }),
              HasSubstr("test/tokenizer.json: pre_tokenizer Split.behavior must be a string, got 3"));
  EXPECT_THAT(with([](json& j) { j["pre_tokenizer"]["pretokenizers"][1]["use_regex"] = "yes"; }),
              HasSubstr("ByteLevel pre_tokenizer.use_regex must be true or false, got \"yes\""));
  EXPECT_THAT(with([](json& j) {
                auto& seq = j["pre_tokenizer"]["pretokenizers"];
                std::swap(seq[0], seq[1]);
              }),
              HasSubstr("a Split after the ByteLevel pre_tokenizer is not supported"));
  EXPECT_THAT(with([](json& j) { j["added_tokens"] = json::array({{{"id", 3}, {"content", "x"}, {"lstrip", 1}}}); }),
              HasSubstr("added_tokens[0].lstrip must be true or false"));
  try {
    Tokenizer::parse("{\"model\": 1e999}", "bad.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("bad.json: not valid JSON"));
  }
}

TEST(Tokenizer, SentencePieceStyleByteFallbackAndItsDecoder) {
  const Tokenizer t = make(sentencepiece_tokenizer_json());
  EXPECT_TRUE(t.sentencepiece());
  EXPECT_FALSE(t.cut_after_newline_is_safe());  // ("\n" has no token nor byte token: an unk, which may fuse)
  EXPECT_EQ(t.encode("ab"), (std::vector<int32_t>{9}));  // ▁ a b -> ▁a b -> ▁ab (rank order, not a+b first)
  EXPECT_EQ(t.encode("a \u00e9"), (std::vector<int32_t>{5, 2, 7, 8}));  // é by its bytes
  EXPECT_EQ(t.encode("xxb"), (std::vector<int32_t>{2, 0, 4}));          // x x: one fused unk
  EXPECT_EQ(t.encode("<s>ab"), (std::vector<int32_t>{1, 9}));           // "▁" before every stretch of text
  EXPECT_EQ(t.decode(t.encode("a \u00e9")), "a \u00e9");
  EXPECT_EQ(t.decode({{2, 7, 8, 4}}), "\u00e9b");           // (one space stripped)
  EXPECT_EQ(t.decode({{3, 7, 4}}), "a\xEF\xBF\xBD" "b");     // a lone byte: U+FFFD
  EXPECT_EQ(t.decode({{1, 9}}), "<s> ab");
  EXPECT_EQ(t.decode({{1, 9}}, true), "ab");
  EXPECT_EQ(t.token_id("\u2581ab"), 9);
  EXPECT_EQ(t.token_id("<0xC3>"), 7);
  // a normalized added token is found as the normalizer makes it ("▁<x>" here), as Hugging Face finds it
  json n = sentencepiece_tokenizer_json();
  n["model"]["vocab"]["<x>"] = 10;
  n["added_tokens"].push_back({{"id", 10}, {"content", "<x>"}, {"normalized", true}, {"special", false}});
  EXPECT_EQ(make(n).encode("a <x>"), (std::vector<int32_t>{5, 10}));  // "▁a▁<x>": ▁a, then ▁<x> whole
  EXPECT_EQ(make(n).encode("a<x>"), (std::vector<int32_t>{5, 0}));    // "▁a<x>": no "▁<x>" (<, x, > unk, fused)
  // a Prepend starts a text only where it does not continue earlier text of its document
  EncodeOptions cont;
  cont.continues = true;
  EXPECT_EQ(t.encode("ab", cont), (std::vector<int32_t>{6}));            // no "▁": a+b
  EXPECT_EQ(t.encode(" ab<s>ab", cont), (std::vector<int32_t>{9, 1, 9}));  // a section after a token: "▁" again
  // Gemma's form: no Prepend, a Split on " " with MergedWithPrevious (each space ends the piece before it)
  json g = sentencepiece_tokenizer_json();
  g["normalizer"] = nullptr;
  g["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "MergedWithPrevious"},
                        {"invert", false}};
  g["model"]["vocab"][" "] = 10, g["model"]["vocab"][" b"] = 11, g["model"]["vocab"]["a "] = 12;
  g["model"]["merges"].push_back(json::array({" ", "b"}));
  g["model"]["merges"].push_back(json::array({"a", " "}));
  EXPECT_EQ(make(g).encode("a b"), (std::vector<int32_t>{12, 4}));  // "a ", "b" (Isolated: a, " ", b; none: a, " b")
  // a delimiter after a delimiter, or first, stands alone (tokenizers' "The-final--countdown": The-, final-, -, ...)
  EXPECT_EQ(make(g).encode("a  b"), (std::vector<int32_t>{12, 10, 4}));
  EXPECT_EQ(make(g).encode(" a b"), (std::vector<int32_t>{10, 12, 4}));
  g["pre_tokenizer"]["behavior"] = "Isolated";
  EXPECT_EQ(make(g).encode("a b"), (std::vector<int32_t>{3, 10, 4}));
  // cut after a newline where "\n" is an added token (Gemma's) and nothing prepends or strips
  EXPECT_FALSE(make(g).cut_after_newline_is_safe());
  g["added_tokens"].push_back({{"id", 13}, {"content", "\n"}, {"special", false}});
  EXPECT_TRUE(make(g).cut_after_newline_is_safe());
  const std::string text = "ab b\na ab\n\n\nb a\nab";
  std::vector<int32_t> parts;
  EncodeState st;
  for (const std::string piece : {"ab b\n", "a ab\n\n\n", "b a\n", "ab"}) make(g).encode(piece, parts, st);
  EXPECT_EQ(parts, make(g).encode(text));
  json lstrip = g;
  lstrip["added_tokens"].push_back({{"id", 14}, {"content", "<x>"}, {"lstrip", true}});  // (takes a "\n" before it)
  EXPECT_FALSE(make(lstrip).cut_after_newline_is_safe());
  // a Prepend starts every section, so every line after a "\n" token in the whole text, but not a part that
  // continues its text
  json prepend = g;
  prepend["normalizer"] = {{"type", "Prepend"}, {"prepend", "\u2581"}};
  EXPECT_FALSE(make(prepend).cut_after_newline_is_safe());
  EXPECT_NE(encode_cut_at_newlines(make(prepend), text), make(prepend).encode(text));
}

TEST(Tokenizer, SentencePieceStyleRefusalsNameTheField) {
  auto with = [](auto edit) {
    json j = sentencepiece_tokenizer_json();
    edit(j);
    return error_of(j);
  };
  EXPECT_THAT(with([](json& j) { j["normalizer"]["normalizers"][1]["pattern"] = {{"Regex", " +"}}; }),
              HasSubstr("normalizer Replace's pattern must be {\"String\": ...}, got {\"Regex\":\" +\"}"));
  EXPECT_THAT(with([](json& j) { j["normalizer"]["normalizers"][0]["prepend"] = 1; }),
              HasSubstr("normalizer Prepend's prepend must be a string, got 1"));
  EXPECT_THAT(with([](json& j) { j["decoder"]["decoders"][3]["stop"] = 1; }),
              HasSubstr("decoder Strip must strip one ASCII character at the start only"));
  EXPECT_THAT(with([](json& j) { j["decoder"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}}; }),
              HasSubstr("the decoders [\"Metaspace\"] of a byte_fallback tokenizer are not supported"));
  EXPECT_THAT(with([](json& j) { j["decoder"] = nullptr; }), HasSubstr("a byte_fallback tokenizer without a decoder"));
  EXPECT_THAT(with([](json& j) { j["model"]["unk_token"] = "<nope>"; }),
              HasSubstr("model.unk_token \"<nope>\" is not in model.vocab"));
  EXPECT_THAT(with([](json& j) { j["model"].erase("unk_token"); }),
              HasSubstr("model.vocab lacks the byte token <0x00> and model.unk_token is null"));
  EXPECT_THAT(with([](json& j) { std::swap(j["decoder"]["decoders"][1], j["decoder"]["decoders"][3]); }),
              HasSubstr("the decoders [\"Replace\",\"Strip\",\"Fuse\",\"ByteFallback\"] of a byte_fallback tokenizer "
                        "are not supported"));
}

TEST(Tokenizer, LoadNamesTheMissingFile) {
  try {
    Tokenizer::load("/nonexistent/dir/tokenizer.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("--tokenizer /nonexistent/dir/tokenizer.json: cannot open"));
  }
}
