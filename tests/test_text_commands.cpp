// oomb eval and oomb generate on text through a tokenizer (the model directory's tokenizer.json):
// eval on a text file scores exactly as on the token file `oomb tokenize` makes of it; generate
// from a text prompt continues exactly as from the prompt's ids, and prints the text. oomb
// tokenize's files, and training on text with document masks and shuffling.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "data/token_store.h"
#include "test_util.h"
#include "text/tokenizer.h"
#include "tokenizer_fixture.h"

using namespace oomb;
using namespace oomb::testing;
using ::testing::HasSubstr;

namespace {

// A tiny model of vocabulary 300 with a byte-level tokenizer (bytes, then "ab") in its directory.
std::filesystem::path model_with_tokenizer(const std::filesystem::path& dir) {
  EXPECT_EQ(oomb_cmd(dir, fmt::format("init --preset tiny --vocab 300 --out {}/m", dir.string())).code, 0);
  write_bytes(dir / "m/tokenizer.json", byte_tokenizer_json({{"a", "b"}}).dump());
  return dir / "m";
}

TEST(TextCommands, EvalOnTextScoresAsItsTokenFile) {
  const auto dir = temp_dir();
  const std::string d = dir.string();
  model_with_tokenizer(dir);
  std::string text;
  for (int i = 0; i < 30; ++i) text += fmt::format("line {} says ab and {}\n", i, std::string(size_t(i % 7), 'z'));
  write_bytes(dir / "held.txt", text);
  const CmdResult tk = oomb_cmd(dir, fmt::format("tokenize --tokenizer {0}/m --input {0}/held.txt --output {0}/held.bin "
                                                 "--eos 10", d));
  ASSERT_EQ(tk.code, 0) << tk.out;
  const auto score = [&](const std::string& data) {
    const CmdResult r = oomb_cmd(dir, fmt::format("eval --model {0}/m --data {1} --eos-id 10 --seq-len 64 --buckets 4 "
                                                  "--out {0}/e.json", d, data));
    EXPECT_EQ(r.code, 0) << r.out;
    return nlohmann::json::parse(read_text(dir / "e.json"));
  };
  const nlohmann::json on_text = score(d + "/held.txt --data-format text"), on_tokens = score(d + "/held.bin");
  EXPECT_GE(on_text["windows"].get<int64_t>(), 5);
  for (const char* k : {"windows", "loss", "accuracy", "loss_by_position"}) {
    ASSERT_TRUE(on_text.contains(k)) << k;
    EXPECT_EQ(on_text[k], on_tokens[k]) << k;
  }
}

TEST(TextCommands, GenerateFromATextPromptAsFromItsIds) {
  const auto dir = temp_dir();
  const std::string d = dir.string();
  model_with_tokenizer(dir);
  const std::string prompt = "ab says the line";
  const CmdResult text = oomb_cmd(dir, fmt::format("generate --model {}/m --prompt '{}' --max-new-tokens 6 "
                                                   "--no-stop-at-eos", d, prompt));
  ASSERT_EQ(text.code, 0) << text.out;
  EXPECT_THAT(text.out, ::testing::StartsWith(prompt)) << "the prompt's text first";
  const size_t at = text.out.find("generated ids: ");
  ASSERT_NE(at, std::string::npos) << text.out;
  const std::string ids = text.out.substr(at + 15, text.out.find('\n', at) - at - 15);
  const Tokenizer tok = Tokenizer::load(dir / "m/tokenizer.json");
  std::string prompt_ids;
  for (int32_t id : tok.encode(prompt)) prompt_ids += (prompt_ids.empty() ? "" : ",") + std::to_string(id);
  EXPECT_THAT(prompt_ids, HasSubstr(std::to_string(tok.token_id("ab")))) << "the merge took part";
  // the same prompt as ids, with no tokenizer to find: the ids alone on stdout, the same ones
  std::filesystem::remove(dir / "m/tokenizer.json");
  const CmdResult by_ids = oomb_cmd(dir, fmt::format("generate --model {}/m --prompt-ids {} --max-new-tokens 6 "
                                                     "--no-stop-at-eos", d, prompt_ids));
  ASSERT_EQ(by_ids.code, 0) << by_ids.out;
  EXPECT_EQ(by_ids.out, ids + "\n");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), ' '), 5) << ids;
  // the model's 300 ids run past the tokenizer's 257: such an id shows as <|id N|>, and a note says why
  int64_t past = 0;
  std::istringstream in(ids);
  for (int32_t id; in >> id;)
    if (!tok.has_id(id)) {
      EXPECT_THAT(text.out, HasSubstr(fmt::format("<|id {}|>", id)));
      ++past;
    }
  if (past > 0) {
    EXPECT_THAT(text.out, HasSubstr("past the tokenizer's"));
  }
  std::cout << fmt::format("generated {}, {} of them past the tokenizer\n", ids, past);
}

// A padded vocabulary's ids (past the tokenizer's, as Qwen2.5's 151,936 against 151,665) print as
// <|id N|> between the text of the ids around them.
TEST(TextCommands, IdsPastTheTokenizerPrintAsPlaceholders) {
  const auto dir = temp_dir();
  const std::filesystem::path m = model_with_tokenizer(dir);
  const Tokenizer tok = Tokenizer::load(m / "tokenizer.json");
  ASSERT_FALSE(tok.has_id(299));
  ASSERT_TRUE(tok.has_id(tok.token_id("ab")));
  const std::string ab = std::to_string(tok.token_id("ab"));
  std::filesystem::rename(m / "tokenizer.json", dir / "tok.json");  // no tokenizer beside the model
  const CmdResult r = oomb_cmd(dir, fmt::format("generate --model {} --tokenizer {} --prompt-ids {},299,{},120 "
                                                "--max-new-tokens 1", m.string(), (dir / "tok.json").string(), ab,
                                                ab));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, ::testing::StartsWith("ab<|id 299|>abx"));
  EXPECT_THAT(r.out, HasSubstr("1 id(s) past the tokenizer's"));
}

std::vector<uint32_t> read_u32(const std::filesystem::path& p) {
  const std::string b = read_text(p);
  std::vector<uint32_t> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}

// The stable interface: for one plain text file, OUT.bin is exactly the little-endian uint32 ids
// of encoding its whole content, nothing added; PATH may be the tokenizer.json or its directory.
TEST(TextCommands, TokenizeWritesExactlyTheIdsOfTheWholeFile) {
  const auto real = npm_tokenizer_json("qwen3");
  if (real.empty()) OOMB_MISSING_REFERENCE(npm_missing_reason("qwen3"));
  const auto dir = temp_dir();
  std::string text;
  std::ifstream golden(source_dir() / "tests/fixtures/tokenizer_golden.jsonl");
  std::string line;
  for (int i = 0; i < 400 && std::getline(golden, line); ++i) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("text")) text += j["text"].get<std::string>() + "\n";
  }
  write_bytes(dir / "in.txt", text);
  const Tokenizer tok = Tokenizer::load(real);
  const auto ids = tok.encode(text);
  CmdResult r = oomb_cmd(dir, fmt::format("tokenize --tokenizer {} --input {}/in.txt --output {}/out.bin", real.string(),
                                          dir.string(), dir.string()));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr(fmt::format("{} tokens (u32)", ids.size())));
  EXPECT_EQ(read_u32(dir / "out.bin"), std::vector<uint32_t>(ids.begin(), ids.end()));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("cannot be cut")));
  r = oomb_cmd(dir, fmt::format("tokenize --tokenizer {} --input {}/in.txt --output {}/out2.bin --threads 1",
                                real.parent_path().string(), dir.string(), dir.string()));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(read_text(dir / "out2.bin"), read_text(dir / "out.bin"));
  // a tokenizer whose text is not cut says why its threads do not help one long document
  write_bytes(dir / "sp.json", sentencepiece_tokenizer_json().dump());  // ("\n" an unk: see test_tokenizer_cuts)
  write_bytes(dir / "ab.txt", "ab\nb a\n");
  r = oomb_cmd(dir, fmt::format("tokenize --tokenizer {0}/sp.json --input {0}/ab.txt --output {0}/ab.bin", dir.string()));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("(one per document: this tokenizer's text cannot be cut exactly)"));
}

TEST(TextCommands, TokenizeFormatsDocumentsAndErrors) {
  const auto dir = temp_dir();
  const std::string d = dir.string();
  write_bytes(dir / "tok.json", byte_tokenizer_json({{"o", "n"}, {"t", "w"}}).dump());
  write_bytes(dir / "docs.jsonl", "{\"text\": \"one\"}\n{\"text\": \"two\", \"id\": 2}\n");
  CmdResult r = oomb_cmd(dir, fmt::format("tokenize --tokenizer {0}/tok.json --input {0}/docs.jsonl --output {0}/d.bin", d));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("holds several documents, and nothing next to --tokenizer"));
  EXPECT_FALSE(std::filesystem::exists(dir / "d.bin"));
  for (const char* fmt_ : {"u32", "u16", "llmc"}) {
    r = oomb_cmd(dir, fmt::format("tokenize --tokenizer {0}/tok.json --input {0}/docs.jsonl --output {0}/d.{1} --eos 10 "
                                  "--format {1}", d, fmt_));
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_THAT(r.out, HasSubstr("2 documents"));
    FileTokens f(dir / (std::string("d.") + fmt_), token_format_parse(fmt_));
    std::vector<uint32_t> got(static_cast<size_t>(f.size()));
    f.get(0, f.size(), got.data());
    const Tokenizer tok = Tokenizer::load(dir / "tok.json");
    EXPECT_EQ(got, (std::vector<uint32_t>{uint32_t(tok.token_id("on")), 'e', 10, uint32_t(tok.token_id("tw")), 'o', 10}));
  }
  // a vocabulary past 16 bits makes llm.c's Llama 3 layout (magic 20240801, uint32 ids)
  auto wide = byte_tokenizer_json({});
  wide["added_tokens"] = nlohmann::json::array({{{"id", 70000}, {"content", "<|big|>"}, {"special", true}}});
  write_bytes(dir / "wide.json", wide.dump());
  write_bytes(dir / "w.txt", "a<|big|>");
  r = oomb_cmd(dir, fmt::format("tokenize --tokenizer {0}/wide.json --input {0}/w.txt --output {0}/w.llmc --format llmc", d));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("2 tokens (llmc uint32)"));
  FileTokens w(dir / "w.llmc", TokenFormat::LlmC);
  EXPECT_EQ(w.width(), 4);
  std::vector<uint32_t> wids(2);
  w.get(0, 2, wids.data());
  EXPECT_EQ(wids, (std::vector<uint32_t>{'a', 70000}));
  EXPECT_EQ(read_text(dir / "w.llmc").substr(0, 4), std::string("\xA1\xD9\x34\x01", 4));  // 20240801 = 0x0134D9A1
  write_bytes(dir / "bad.txt", "fine\nnot \xC3\x28 fine\n");
  r = oomb_cmd(dir, fmt::format("tokenize --tokenizer {0}/tok.json --input {0}/bad.txt --output {0}/b.bin", d));
  EXPECT_THAT(r.out, HasSubstr(d + "/bad.txt: invalid UTF-8 at line 2, column 5"));
  EXPECT_FALSE(std::filesystem::exists(dir / "b.bin")) << "nothing is written on error";
  r = oomb_cmd(dir, fmt::format("tokenize --tokenizer {0}/tok.json --input {0}/bad.txt --output {0}/b.bin "
                                "--utf8-errors replace", d));
  EXPECT_EQ(r.code, 0) << r.out;
  write_bytes(dir / "empty.txt", "");
  r = oomb_cmd(dir, fmt::format("tokenize --tokenizer {0}/tok.json --input {0}/empty.txt --output {0}/e.bin", d));
  EXPECT_THAT(r.out, HasSubstr(d + "/empty.txt: empty file"));
  auto wp = byte_tokenizer_json({});
  wp["model"]["type"] = "WordPiece";
  write_bytes(dir / "wp.json", wp.dump());
  r = oomb_cmd(dir, fmt::format("tokenize --tokenizer {0}/wp.json --input {0}/docs.jsonl --output {0}/w.bin", d));
  EXPECT_THAT(r.out, HasSubstr(d + "/wp.json: unsupported model type \"WordPiece\""));
  r = oomb_cmd(dir, fmt::format("tokenize --tokenizer {0}/missing --input {0}/docs.jsonl --output {0}/w.bin", d));
  EXPECT_THAT(r.out, HasSubstr("--tokenizer " + d + "/missing: cannot open"));
  r = oomb_cmd(dir, fmt::format("tokenize --tokenizer {0}/tok.json --input {0}/docs.jsonl --output {0}/w.bin --eos "
                                "nosuchtoken", d));
  EXPECT_THAT(r.out, HasSubstr("--eos nosuchtoken: neither an id nor a token"));
}

TEST(TextCommands, TrainOnTextWithDocumentMasksAndShuffling) {
  const auto dir = temp_dir();
  const std::string d = dir.string();
  ASSERT_EQ(oomb_cmd(dir, fmt::format("init --preset tiny --vocab 300 --out {}/m", d)).code, 0);
  write_bytes(dir / "m/tokenizer.json", byte_tokenizer_json({{"a", "b"}}).dump());  // found in --model
  std::string jl;
  for (int i = 0; i < 40; ++i) jl += fmt::format("{{\"body\": \"document {} says ab {}\"}}\n", i, std::string(size_t(i), 'x'));
  write_bytes(dir / "docs.jsonl", jl);
  CmdResult r = oomb_cmd(dir, fmt::format("train --model {0}/m --data {0}/docs.jsonl --text-field body --seq-len 64 "
                                          "--chunk-size 16 --page-size 8 --steps 2 --doc-mask", d));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("--doc-mask needs the EOS id"));
  r = oomb_cmd(dir, fmt::format("train --model {0}/m --data {0}/docs.jsonl --text-field body --seq-len 64 "
                                "--chunk-size 16 --page-size 8 --steps 2 --doc-mask --eos-id 10 --shuffle --seed 4", d));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("tokenized " + d + "/docs.jsonl (40 documents"));
  EXPECT_THAT(r.out, HasSubstr("40 documents shuffled per epoch (seed 4)"));
  EXPECT_THAT(r.out, HasSubstr("attention within documents ended by token 10"));
  EXPECT_THAT(r.out, HasSubstr("step     2/2"));
  r = oomb_cmd(dir, fmt::format("train --model {0}/m --data {0}/docs.jsonl --steps 1 --seq-len 8 --eos-id 10", d));
  EXPECT_THAT(r.out, HasSubstr(d + "/docs.jsonl:1: the record has no \"text\" field"));
  // the separator named by its token, as `oomb tokenize --eos` takes it, in train and eval (--eos or --eos-id)
  r = oomb_cmd(dir, fmt::format("tokenize --tokenizer {0}/m --input {0}/docs.jsonl --text-field body --output "
                                "{0}/docs.bin --eos ab", d));
  ASSERT_EQ(r.code, 0) << r.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex("each document ends with EOS ([0-9]+)"))) << r.out;
  const std::string ab = m[1];
  r = oomb_cmd(dir, fmt::format("train --model {0}/m --data {0}/docs.jsonl --text-field body --seq-len 64 "
                                "--chunk-size 16 --page-size 8 --steps 1 --doc-mask --eos ab", d));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, ::testing::ContainsRegex("attention within documents ended by token " + ab + "[^0-9]"));
  r = oomb_cmd(dir, fmt::format("eval --model {0}/m --data {0}/docs.jsonl --text-field body --seq-len 64 "
                                "--chunk-size 16 --buckets 4 --eos-id zz", d));
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.out, HasSubstr("--eos-id zz: neither an id nor a token of"));
  ASSERT_EQ(oomb_cmd(dir, fmt::format("init --preset tiny --vocab 300 --out {}/bare", d)).code, 0);  // no tokenizer
  r = oomb_cmd(dir, fmt::format("train --model {0}/bare --data {0}/docs.bin --seq-len 64 --steps 1 --eos ab", d));
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.out, HasSubstr("--eos-id ab: not an id; a token's id is found by the tokenizer, and there is none"));
}

}  // namespace
