// Token files (raw u32, nanoGPT u16, llm.c shards, directories of shards), packing with
// per-epoch shuffling, text corpora (plain text, JSON lines, directories) with their errors,
// and parallel tokenization equal to encoding the whole text at once.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>

#include <fmt/format.h>

#include "core/error.h"
#include "data/open_data.h"
#include "data/tokenize_corpus.h"
#include "test_util.h"
#include "tokenizer_fixture.h"

using namespace oomb;
using namespace oomb::testing;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

void write_ids(const std::filesystem::path& p, const std::vector<uint32_t>& ids, int width, int32_t magic = 0,
               int32_t version = 0, int64_t count = -1) {
  std::string b;
  if (magic) {
    std::vector<int32_t> h(256, 0);
    h[0] = magic, h[1] = version, h[2] = int32_t(count >= 0 ? count : int64_t(ids.size()));
    b.append(reinterpret_cast<const char*>(h.data()), 1024);
  }
  for (uint32_t id : ids) b.append(reinterpret_cast<const char*>(&id), size_t(width));  // little-endian host
  write_bytes(p, b);
}

std::vector<uint32_t> iota_ids(int n, uint32_t start = 0) {
  std::vector<uint32_t> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[size_t(i)] = start + uint32_t(i) % 50;
  return v;
}

std::vector<uint32_t> all_of(TokenStore& s) {
  std::vector<uint32_t> v(static_cast<size_t>(s.size()));
  s.get(0, s.size(), v.data());
  return v;
}

std::unique_ptr<PackedTokens> packed(const std::filesystem::path& p, int64_t vocab, const std::string& format = "auto",
                                     PackingOptions po = {}) {
  DataOptions o;
  o.format = format;
  o.packing = po;
  return open_training_data(p, vocab, o);
}

}  // namespace

TEST(TokenFiles, U32WindowsWrapAndIdsAreChecked) {
  const auto dir = temp_dir();
  const auto ids = iota_ids(10, 3);
  write_ids(dir / "t.bin", ids, 4);
  auto f = packed(dir / "t.bin", 61);
  std::vector<int32_t> in(4), tg(4);
  f->window(2, 4, in.data(), tg.data());  // tokens [8, 12] wrap to 8, 9, 0, 1, 2
  EXPECT_EQ(in, (std::vector<int32_t>{int32_t(ids[8]), int32_t(ids[9]), int32_t(ids[0]), int32_t(ids[1])}));
  EXPECT_EQ(tg, (std::vector<int32_t>{int32_t(ids[9]), int32_t(ids[0]), int32_t(ids[1]), int32_t(ids[2])}));
  for (int64_t t0 : {0, 1, 2}) {  // any range of a window, as the chunked schedule reads it
    std::vector<int32_t> ri(2), rt(2);
    f->read(2, 4, t0, 2, ri.data(), rt.data());
    EXPECT_EQ(ri[0], in[size_t(t0)]);
    EXPECT_EQ(rt[1], tg[size_t(t0) + 1]);
  }
  // every id is checked when the file opens, not when a window reaches it
  EXPECT_EQ(error_of([&] { packed(dir / "t.bin", 5); }),
            "--data " + (dir / "t.bin").string() + ", token 2: token id 5 is beyond the model's vocabulary (5)");
  write_bytes(dir / "odd.bin", "abcdef");
  EXPECT_THAT(error_of([&] { packed(dir / "odd.bin", 61); }),
              HasSubstr("size 6 bytes is not a multiple of 4 (expected raw uint32 token ids; for nanoGPT's uint16 "
                        "files pass --data-format u16)"));
  write_bytes(dir / "empty.bin", "");
  EXPECT_THAT(error_of([&] { packed(dir / "empty.bin", 61); }), HasSubstr("empty.bin: holds no tokens (an empty file)"));
  write_ids(dir / "one.bin", {7}, 4);
  EXPECT_THAT(error_of([&] { packed(dir / "one.bin", 61); }), HasSubstr("training needs at least 2"));
  EXPECT_THAT(error_of([&] { packed(dir / "missing.bin", 61); }), HasSubstr("missing.bin: cannot open"));
}

TEST(TokenFiles, NanoGptU16AndLlmcShards) {
  const auto dir = temp_dir();
  const auto ids = iota_ids(300, 1);
  write_ids(dir / "nano.bin", ids, 2);
  write_ids(dir / "gpt2.bin", ids, 2, kLlmcMagicGpt2, kLlmcVersionU16);
  auto big = ids;
  big[7] = 100000;  // needs 32 bits
  write_ids(dir / "llama3.bin", big, 4, kLlmcMagicLlama3, kLlmcVersionU32);
  FileTokens nano(dir / "nano.bin", TokenFormat::U16);
  EXPECT_EQ(all_of(nano), ids);
  EXPECT_EQ(sniff_token_format(dir / "gpt2.bin", TokenFormat::U32), TokenFormat::LlmC);
  EXPECT_EQ(sniff_token_format(dir / "nano.bin", TokenFormat::U16), TokenFormat::U16);
  FileTokens g(dir / "gpt2.bin", TokenFormat::LlmC), l(dir / "llama3.bin", TokenFormat::LlmC);
  EXPECT_EQ(g.width(), 2);
  EXPECT_EQ(all_of(g), ids);
  EXPECT_EQ(all_of(l), big);
  // found by their magic with --data-format auto; nanoGPT's needs u16
  std::vector<int32_t> in(5), tg(5);
  packed(dir / "gpt2.bin", 200000)->window(1, 5, in.data(), tg.data());
  EXPECT_EQ(in[0], int32_t(ids[5]));
  packed(dir / "nano.bin", 200000, "u16")->window(1, 5, in.data(), tg.data());
  EXPECT_EQ(in[0], int32_t(ids[5]));
  // bad headers
  write_ids(dir / "v9.bin", ids, 2, kLlmcMagicGpt2, 9);
  EXPECT_THAT(error_of([&] { FileTokens x(dir / "v9.bin", TokenFormat::LlmC); }),
              HasSubstr("llm.c header has magic 20240520 version 9; expected 20240520 v1 (uint16) or 20240801 v7 (uint32)"));
  write_ids(dir / "short.bin", ids, 2, kLlmcMagicGpt2, kLlmcVersionU16, 301);
  EXPECT_THAT(error_of([&] { FileTokens x(dir / "short.bin", TokenFormat::LlmC); }),
              HasSubstr("llm.c header says 301 tokens of 2 bytes, but the file has 600 bytes after the header"));
  write_bytes(dir / "tiny.bin", "abcd");
  EXPECT_THAT(error_of([&] { FileTokens x(dir / "tiny.bin", TokenFormat::LlmC); }),
              HasSubstr("4 bytes is too short for an llm.c shard's 1024-byte header"));
}

TEST(TokenFiles, DirectoryOfShardsInNameOrder) {
  const auto dir = temp_dir();
  std::filesystem::create_directories(dir / "shards");
  write_ids(dir / "shards/b_001.bin", iota_ids(70, 100), 2, kLlmcMagicGpt2, kLlmcVersionU16);
  write_ids(dir / "shards/a_000.bin", iota_ids(50, 0), 2, kLlmcMagicGpt2, kLlmcVersionU16);
  write_bytes(dir / "shards/.hidden", "ignored");
  auto p = packed(dir / "shards", 1000);
  std::vector<uint32_t> s(120);
  p->stream(0, 120, s.data());
  auto want = iota_ids(50, 0);
  for (uint32_t x : iota_ids(70, 100)) want.push_back(x);
  EXPECT_EQ(s, want);
  // the second shard has ids >= 120: found when the directory opens, with the shard and its index
  EXPECT_THAT(error_of([&] { packed(dir / "shards", 120); }),
              HasSubstr("b_001.bin, token 20: token id 120 is beyond the model's vocabulary (120)"));
  write_bytes(dir / "shards/notes.txt", "x");
  EXPECT_THAT(error_of([&] { packed(dir / "shards", 1000); }),
              HasSubstr("the directory mixes 2 token files (.bin) with 1 other files"));
}

TEST(Packing, ShuffledEpochsArePermutationsOfTheDocuments) {
  const auto dir = temp_dir();
  const uint32_t eos = 9;
  // documents of various lengths, each ended by EOS except the last
  std::vector<uint32_t> ids;
  std::vector<std::vector<uint32_t>> docs;
  for (int d = 0; d < 40; ++d) {
    std::vector<uint32_t> doc;
    for (int i = 0; i < 1 + (d * 7) % 13; ++i) doc.push_back(10 + uint32_t(d));
    if (d < 39) doc.push_back(eos);
    docs.push_back(doc);
    ids.insert(ids.end(), doc.begin(), doc.end());
  }
  write_ids(dir / "t.bin", ids, 4);
  auto p = packed(dir / "t.bin", 100, "auto", {int32_t(eos), true, 5});
  EXPECT_EQ(p->documents(), 40);
  const int64_t L = p->stream_size();
  EXPECT_EQ(L, int64_t(ids.size()) + 1);  // the last document gets its EOS
  auto split = [&](const std::vector<uint32_t>& s) {
    std::multiset<std::vector<uint32_t>> out;
    std::vector<uint32_t> cur;
    for (uint32_t x : s) {
      cur.push_back(x);
      if (x == eos) out.insert(cur), cur.clear();
    }
    EXPECT_TRUE(cur.empty());
    return out;
  };
  std::multiset<std::vector<uint32_t>> want;
  for (auto d : docs) {
    if (d.back() != eos) d.push_back(eos);
    want.insert(d);
  }
  std::vector<uint32_t> e0(static_cast<size_t>(L)), e1(e0), again(e0), two(static_cast<size_t>(2 * L));
  p->stream(0, L, e0.data());
  p->stream(L, L, e1.data());
  EXPECT_EQ(split(e0), want);
  EXPECT_EQ(split(e1), want);
  EXPECT_NE(e0, e1) << "each epoch has its own order";
  p->stream(0, 2 * L, two.data());  // one read across the epoch boundary
  EXPECT_TRUE(std::equal(e0.begin(), e0.end(), two.begin()) && std::equal(e1.begin(), e1.end(), two.begin() + L));
  auto q = packed(dir / "t.bin", 100, "auto", {int32_t(eos), true, 5});
  q->stream(0, L, again.data());
  EXPECT_EQ(again, e0) << "the same seed gives the same order";
  auto r = packed(dir / "t.bin", 100, "auto", {int32_t(eos), true, 6});
  r->stream(0, L, again.data());
  EXPECT_NE(again, e0);
  EXPECT_THAT(error_of([&] { packed(dir / "t.bin", 100, "auto", {-1, true, 5}); }),
              HasSubstr("--shuffle needs the EOS id"));
}

// Data whose loss mask trains no token (prompts only, or chats without an assistant's turn) is refused
// when it opens, before a step; one trained token is enough.
TEST(Packing, DataThatTrainsNoTokenIsRefused) {
  const auto dir = temp_dir();
  write_ids(dir / "t.bin", iota_ids(10, 3), 4);
  for (const int64_t trained : {0, 1}) {
    LossMaskBuilder b;
    b.append(10 - trained, false);
    b.append(trained, true);
    auto open = [&] {
      return PackedTokens(std::make_unique<FileTokens>(dir / "t.bin", TokenFormat::U32), 61, {},
                          std::make_unique<LossMask>(b));
    };
    if (trained) {
      EXPECT_NO_THROW(open());
    } else {
      EXPECT_THAT(error_of(open), HasSubstr("t.bin (10 tokens, u32): none of its 10 tokens is trained (every one is "
                                            "a prompt's, or not an assistant's): there is nothing to learn"));
    }
  }
}

TEST(TextCorpus, FilesJsonLinesAndDirectories) {
  const auto dir = temp_dir();
  std::filesystem::create_directories(dir / "c/sub");
  write_bytes(dir / "c/b.txt", "second file\n");
  write_bytes(dir / "c/a.txt", "first file");
  write_bytes(dir / "c/sub/d.jsonl", "{\"text\": \"j1\"}\n\n{\"text\": \"\", \"n\": 2}\r\n{\"body\": 1, \"text\": \"j\\u00e9\"}\n");
  write_bytes(dir / "c/.skip.txt", "hidden");
  std::vector<std::pair<std::string, bool>> seen;
  TextCorpus(dir / "c", {}).for_each([&](const TextBlock& b) { seen.push_back({std::string(b.text), b.ends_document}); });
  using V = std::vector<std::pair<std::string, bool>>;
  EXPECT_EQ(seen, (V{{"first file", true}, {"second file\n", true}, {"j1", true}, {"j\xC3\xA9", true}}));
  EXPECT_FALSE(TextCorpus(dir / "c", {}).single_document());
  EXPECT_TRUE(TextCorpus(dir / "c/a.txt", {}).single_document());
  CorpusOptions field;
  field.text_field = "body";
  EXPECT_THAT(error_of([&] { TextCorpus(dir / "c/sub/d.jsonl", field).for_each([](const TextBlock&) {}); }),
              HasSubstr("d.jsonl:1: the record has no \"body\" field (choose the field with --text-field)"));
}

// A directory's files are read by their names: .txt / .text as text, .jsonl / .ndjson / .json as JSON
// lines, in any case; anything else (a README, a LICENSE, a compressed file) is refused, naming it,
// unless a format is named. A --text-field the user gave where no input is read as JSON lines is
// refused.
TEST(TextCorpus, DirectoriesTakeTextAndJsonLinesByName) {
  const auto dir = temp_dir();
  std::filesystem::create_directories(dir / "c");
  write_bytes(dir / "c/a.TXT", "plain");
  write_bytes(dir / "c/b.JSONL", "{\"text\": \"upper\"}\n");
  write_bytes(dir / "c/c.json", "{\"text\": \"datasets\"}\n{\"text\": \"to_json\"}\n");
  std::vector<std::string> seen;
  TextCorpus(dir / "c", {}).for_each([&](const TextBlock& b) { seen.emplace_back(b.text); });
  EXPECT_EQ(seen, (std::vector<std::string>{"plain", "upper", "datasets", "to_json"}));
  write_bytes(dir / "c/README.md", "notes");
  const std::string c = (dir / "c").string();
  EXPECT_EQ(error_of([&] { TextCorpus(dir / "c", {}); }),
            c + ": " + c + "/README.md is neither text (.txt) nor JSON lines (.jsonl, .ndjson, .json); move it out of "
            "the directory, or name the format (train's --data-format, tokenize's --input-format: text reads every "
            "file as text)");
  CorpusOptions text;
  text.format = TextFormat::Text;
  seen.clear();
  TextCorpus(dir / "c", text).for_each([&](const TextBlock& b) { seen.emplace_back(b.text); });
  EXPECT_EQ(seen, (std::vector<std::string>{"notes", "plain", "{\"text\": \"upper\"}\n",
                                            "{\"text\": \"datasets\"}\n{\"text\": \"to_json\"}\n"}));  // (markup too)
  std::filesystem::remove(dir / "c/README.md");
  write_bytes(dir / "c/more.txt.gz", "\x1f\x8b");
  EXPECT_THAT(error_of([&] { TextCorpus(dir / "c", {}); }), HasSubstr("more.txt.gz is neither text (.txt) nor JSON "
                                                                    "lines (.jsonl, .ndjson, .json) but compressed: "
                                                                    "decompress it"));
  // --text-field where no input reads JSON lines would be ignored: refused; one that does is enough
  const std::string a = c + "/a.TXT";
  EXPECT_EQ(error_of([&] { check_text_field_read({a}, "auto", "body"); }),
            "--text-field body: none of the data (" + a + ") is read as JSON lines (a .jsonl, .ndjson or .json name, "
            "or the jsonl format flag: train's --data-format, tokenize's --input-format), so the field would be ignored");
  EXPECT_NO_THROW(check_text_field_read({a, c + "/c.json"}, "auto", "body"));
  EXPECT_NO_THROW(check_text_field_read({c}, "auto", "body"));  // (a directory holding JSON lines)
  EXPECT_NO_THROW(check_text_field_read({a}, "jsonl", "body"));
  EXPECT_THROW(check_text_field_read({c + "/c.json"}, "text", "body"), Error);
}

TEST(TextCorpus, BadInputNamesFileAndLine) {
  const auto dir = temp_dir();
  auto err = [&](const std::string& name, const std::string& bytes, CorpusOptions o = {}) {
    write_bytes(dir / name, bytes);
    return error_of([&] { TextCorpus(dir / name, o).for_each([](const TextBlock&) {}); });
  };
  const std::string d = dir.string() + "/";
  EXPECT_EQ(err("bad.txt", "ok\nfine\nbroken \xC3( here\n"),
            d + "bad.txt: invalid UTF-8 at line 3, column 8 (byte 0xc3 at offset 15); fix the file or pass "
                "--utf8-errors replace to substitute U+FFFD");
  EXPECT_EQ(err("empty.txt", ""), d + "empty.txt: empty file (no text to tokenize)");
  EXPECT_THAT(err("broken.jsonl", "{\"text\": \"a\"}\n{\"text\": \"b\"\n"), HasSubstr(d + "broken.jsonl:2: not valid JSON: column 13: syntax error while parsing object - unexpected end of input"));
  EXPECT_THAT(err("huge.jsonl", "{\"text\": \"a\", \"n\": 1e999}\n"), HasSubstr(d + "huge.jsonl:1: not valid JSON"));
  const std::string whole = " (the file looks like one JSON document, not JSON lines, one record per line: convert "
                            "it, e.g. jq -c '.[]' FILE > FILE.jsonl)";
  EXPECT_EQ(err("arr.jsonl", "[1, 2]\n"), d + "arr.jsonl:1: a JSON-lines record must be an object, got array" + whole);
  EXPECT_THAT(err("pretty.json", "[\n  {\"text\": \"a\"}\n]\n"), HasSubstr(d + "pretty.json:1: not valid JSON"));
  EXPECT_THAT(err("pretty.json", "[\n  {\"text\": \"a\"}\n]\n"), HasSubstr(whole));
  EXPECT_THAT(err("object.json", "{\n  \"text\": \"a\"\n}\n"), HasSubstr(whole));
  EXPECT_THAT(err("later.jsonl", "{\"text\": \"a\"}\n[1]\n"), Not(HasSubstr("one JSON document")));
  EXPECT_EQ(err("num.jsonl", "{\"text\": 5}\n"), d + "num.jsonl:1: field \"text\" is number, not a string");
  EXPECT_EQ(err("blank.jsonl", "\n  \n"), d + "blank.jsonl: no JSON records (only blank lines)");
  EXPECT_THAT(err("bad.jsonl", "{\"text\": \"a\"}\n{\"text\": \"\xFF\"}\n"),
              HasSubstr(d + "bad.jsonl: invalid UTF-8 at line 2, column 11"));
  EXPECT_THAT(err("surrogate.jsonl", "{\"text\": \"\\ud800\"}\n"), HasSubstr("surrogate.jsonl:1: not valid JSON"));
  EXPECT_THAT(error_of([&] { TextCorpus(dir / "nope", {}); }), HasSubstr("nope: no such file or directory"));
  // repaired on request, as WHATWG decoding does
  CorpusOptions rep;
  rep.utf8 = Utf8Errors::Replace;
  write_bytes(dir / "fix.txt", "a\xFF" "b");
  std::string got;
  TextCorpus(dir / "fix.txt", rep).for_each([&](const TextBlock& b) { got += b.text; });
  EXPECT_EQ(got, "a\xEF\xBF\xBD" "b");
}

TEST(TextCorpus, LargeFilesArriveInBlocksCutAtCutPoints) {
  const auto dir = temp_dir();
  std::string text;
  for (int i = 0; i < 3000; ++i)
    text += (i % 3 ? "line " : "\xE4\xB8\xAD\xE6\x96\x87 ") + std::to_string(i) + (i % 7 ? "\n" : "\n\n  ");
  write_bytes(dir / "big.txt", text);
  CorpusOptions o;
  o.allow_cuts = true;
  o.block_bytes = 1000;
  std::string joined;
  int blocks = 0;
  TextCorpus(dir / "big.txt", o).for_each([&](const TextBlock& b) {
    if (!joined.empty()) {
      EXPECT_EQ(joined.back(), '\n');
      EXPECT_TRUE(is_cut_point(joined + std::string(b.text.substr(0, 4)), joined.size()));
    }
    joined += b.text;
    ++blocks;
  });
  EXPECT_EQ(joined, text);
  EXPECT_GT(blocks, 20);
}

TEST(TextCorpus, ErrorsInLaterBlocksNameTheFileOffset) {
  const auto dir = temp_dir();
  std::string text;
  for (int i = 0; i < 100; ++i) text += "line " + std::to_string(i) + "\n";
  const size_t bad = text.size() + 3;
  text += "abc\xFF\n";
  write_bytes(dir / "t.txt", text);
  CorpusOptions o;
  o.allow_cuts = true;
  o.block_bytes = 64;
  EXPECT_THAT(error_of([&] { TextCorpus(dir / "t.txt", o).for_each([](const TextBlock&) {}); }),
              HasSubstr(fmt::format("invalid UTF-8 at line 101, column 4 (byte 0xff at offset {})", bad)));
}

TEST(Tokenize, ParallelUnitsEqualOneEncodeAndDocumentsEndWithEos) {
  const auto dir = temp_dir();
  const Tokenizer tok = Tokenizer::parse(byte_tokenizer_json({{"i", "n"}, {" ", "t"}, {"e", "\n"}}).dump(), "t.json");
  std::string text;
  for (int i = 0; i < 20000; ++i) text += (i % 3 ? "in the line " : "Line\n\n") + std::to_string(i) + "\n";
  write_bytes(dir / "a.txt", text);
  CorpusOptions co;
  co.allow_cuts = true;
  co.block_bytes = 4096;
  TokenizeOptions to;
  to.unit_bytes = 5000;
  to.batch_bytes = 50000;
  std::vector<int32_t> got;
  const TokenizeStats st = tokenize_corpus(TextCorpus(dir / "a.txt", co), tok, to,
                                           [&](std::span<const int32_t> s, bool) { got.insert(got.end(), s.begin(), s.end()); });
  EXPECT_EQ(got, tok.encode(text));
  EXPECT_EQ(st.documents, 1);
  EXPECT_EQ(st.bytes, int64_t(text.size()));
  // JSON lines: each document followed by EOS
  write_bytes(dir / "d.jsonl", "{\"text\": \"one\"}\n{\"text\": \"two words\"}\n");
  to.eos = 300;
  got.clear();
  tokenize_corpus(TextCorpus(dir / "d.jsonl", {}), tok, to,
                  [&](std::span<const int32_t> s, bool) { got.insert(got.end(), s.begin(), s.end()); });
  std::vector<int32_t> want = tok.encode("one");
  want.push_back(300);
  for (int32_t x : tok.encode("two words")) want.push_back(x);
  want.push_back(300);
  EXPECT_EQ(got, want);
}

TEST(TokenFiles, EmptyDataAndExplicitFormats) {
  const auto dir = temp_dir();
  write_bytes(dir / "empty.jsonl", "{\"text\": \"\"}\n{\"text\": \"\"}\n");
  write_bytes(dir / "tok.json", byte_tokenizer_json({}).dump());
  DataOptions o;
  o.tokenizer = dir / "tok.json";
  o.packing = {10, true, 1};
  EXPECT_THAT(error_of([&] { open_training_data(dir / "empty.jsonl", 300, o); }),
              HasSubstr("empty.jsonl: its text gives no tokens (every document is empty)"));
  EXPECT_THAT(error_of([&] { PackedTokens(std::make_unique<MemoryTokens>(std::vector<uint32_t>{}, "m"), 9, {}); }),
              HasSubstr("--data m (0 tokens): holds no tokens"));
  // nanoGPT data whose first two ids spell llm.c's magic is still read as u16 when named so
  std::vector<uint32_t> ids = {uint32_t(kLlmcMagicGpt2 & 0xFFFF), uint32_t(kLlmcMagicGpt2 >> 16), 5, 6};
  write_ids(dir / "nano.bin", ids, 2);
  std::vector<uint32_t> got(4);
  packed(dir / "nano.bin", 1 << 17, "u16")->stream(0, 4, got.data());
  EXPECT_EQ(got, ids);
  EXPECT_THAT(error_of([&] { packed(dir / "nano.bin", 1 << 17); }), HasSubstr("too short for an llm.c shard"));
}

TEST(Packing, DocumentMasksEndTheLastDocumentWhereTheStreamWraps) {
  const auto dir = temp_dir();
  write_ids(dir / "t.bin", {1, 2, 9, 3, 4}, 4);  // the last document has no EOS
  auto plain = packed(dir / "t.bin", 100);
  auto sep = packed(dir / "t.bin", 100, "auto", {9, false, 0, true});
  EXPECT_EQ(plain->stream_size(), 5);
  EXPECT_EQ(sep->stream_size(), 6);
  std::vector<uint32_t> a(8), b(8);
  plain->stream(0, 8, a.data());
  sep->stream(0, 8, b.data());
  EXPECT_EQ(a, (std::vector<uint32_t>{1, 2, 9, 3, 4, 1, 2, 9}));
  EXPECT_EQ(b, (std::vector<uint32_t>{1, 2, 9, 3, 4, 9, 1, 2}));
}

TEST(Tokenize, TextDataForTrainingNeedsATokenizerWithinTheVocabulary) {
  const auto dir = temp_dir();
  write_bytes(dir / "t.txt", "some text to train on");
  write_bytes(dir / "tok.json", byte_tokenizer_json({}).dump());
  EXPECT_THAT(error_of([&] { packed(dir / "t.txt", 1000); }), HasSubstr("is text; give --tokenizer"));
  DataOptions o;
  o.tokenizer = dir / "tok.json";
  EXPECT_THAT(error_of([&] { open_training_data(dir / "t.txt", 100, o); }),
              HasSubstr("its ids reach 255, beyond the model's vocabulary (100)"));
  auto p = open_training_data(dir / "t.txt", 256, o);
  EXPECT_EQ(p->stream_size(), 21);  // one byte token each: no merges
  EXPECT_EQ(Accountant::global().get(Tier::Host, Tag::Data).current >= 21 * 4, true);
}

// The open-time check finds the first id >= the vocabulary wherever it lies: either side of the
// scan's 65,536-id blocks, at the ends, in uint16 and uint32 files.
TEST(TokenFiles, FirstBadIdFoundAtOpenTimeAnywhere) {
  const auto dir = temp_dir();
  const int64_t n = 3 * 65536 + 7;
  for (int width : {2, 4})
    for (int64_t at : {int64_t(0), int64_t(65535), int64_t(65536), int64_t(2 * 65536 + 3), n - 1}) {
      SCOPED_TRACE(fmt::format("width {} at {}", width, at));
      std::vector<uint32_t> ids(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) ids[size_t(i)] = uint32_t(i % 97);
      ids[size_t(at)] = 300;
      if (at + 5 < n) ids[size_t(at + 5)] = 400;  // only the first is named
      write_ids(dir / "t.bin", ids, width);
      const std::string fmt_name = width == 2 ? "u16" : "u32";
      EXPECT_EQ(error_of([&] { packed(dir / "t.bin", 100, fmt_name); }),
                fmt::format("--data {}, token {}: token id 300 is beyond the model's vocabulary (100)",
                            (dir / "t.bin").string(), at));
      EXPECT_EQ(error_of([&] { packed(dir / "t.bin", 401, fmt_name); }), "(no error)");
    }
}
