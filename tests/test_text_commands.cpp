// oomb eval and oomb generate on text through a tokenizer (the model directory's tokenizer.json):
// eval on a text file scores exactly as on the token file `oomb tokenize` makes of it; generate
// from a text prompt continues exactly as from the prompt's ids, and prints the text.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sstream>

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

}  // namespace
