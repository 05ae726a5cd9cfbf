// Conversations as training data (--messages-field, --chat-template): each JSON-lines record's
// messages rendered by the model's chat template, trained where the assistant writes and context
// only elsewhere; the template found where transformers finds it; bad input named.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/prompt_fields.h"
#include "core/error.h"
#include "data/loss_mask.h"
#include "data/open_data.h"
#include "metrics_plan.h"
#include "test_util.h"
#include "text/chat_template.h"
#include "tokenizer_fixture.h"

using namespace oomb;
using namespace oomb::testing;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

namespace {

constexpr int32_t kEos = 7;

// A template whose markup, users' and assistants' bytes are told apart by their bytes: users write
// letters, assistants digits; '#' opens a user's turn, '@' an assistant's, '%' a system's; ';'
// closes a user's or system's turn and '$' an assistant's. So what the assistant writes (its
// digits and its '$') is exactly the digits and the '$'; the EOS after a conversation only
// separates it (TRL adds none).
const char* const kTemplate =
    "{% for m in messages %}{{ '#' if m.role == 'user' else ('@' if m.role == 'assistant' else '%') }}"
    "{{ m.content }}{{ '$' if m.role == 'assistant' else ';' }}{% endfor %}{% if add_generation_prompt %}@{% endif %}";
// The same with generation marks (transformers' way of saying what the assistant writes)
const char* const kMarked =
    "{% for m in messages %}{% if m.role == 'assistant' %}@{% generation %}{{ m.content }}${% endgeneration %}"
    "{% else %}{{ '#' if m.role == 'user' else '%' }}{{ m.content }};{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}@{% endif %}";

bool trained_byte(int32_t id) { return (id >= '0' && id <= '9') || id == '$'; }

// Conversations of 1..4 exchanges, some with a system message, of letters and digits.
std::string conversations(int n) {
  std::string jl;
  for (int i = 0; i < n; ++i) {
    nlohmann::json msgs = nlohmann::json::array();
    if (i % 3 == 0) msgs.push_back({{"role", "system"}, {"content", std::string(size_t(1 + i % 4), 's')}});
    for (int t = 0; t <= i % 4; ++t) {
      msgs.push_back({{"role", "user"}, {"content", std::string(size_t(1 + (i + t) % 9), char('a' + (i + t) % 26))}});
      msgs.push_back({{"role", "assistant"}, {"content", std::string(size_t((i * 7 + t) % 6), char('0' + t))}});
    }
    jl += nlohmann::json({{"messages", msgs}, {"id", i}}).dump() + "\n";
  }
  return jl;
}

struct Dir {
  fs::path dir = temp_dir("_chat_data");
  std::string d = dir.string();
  Dir() {
    EXPECT_EQ(oomb_cmd(dir, fmt::format("init --preset tiny --vocab 300 --out {}/m", d)).code, 0);
    write_bytes(dir / "m/tokenizer.json", byte_tokenizer_json({}).dump());
    write_bytes(dir / "m/tokenizer_config.json", nlohmann::json({{"chat_template", kTemplate}}).dump());
    write_bytes(dir / "c.jsonl", conversations(30));
  }
  std::unique_ptr<PackedTokens> open(const std::string& chat_template = "") const {
    DataOptions o;
    o.tokenizer = dir / "m/tokenizer.json";
    o.corpus.messages_field = "messages";
    o.corpus.chat_template = ChatTemplate::load(chat_template.empty() ? dir / "m" : fs::path(chat_template));
    o.packing = {kEos, false, 0, false};
    return open_training_data(dir / "c.jsonl", 300, o);
  }
  std::string train(const std::string& flags) const {
    return fmt::format("train --model {0}/m --data {0}/c.jsonl --eos-id {1} --seq-len 64 --chunk-size 16 --page-size 8 "
                       "--lr 1e-2 --messages-field messages {2}", d, kEos, flags);
  }
};

}  // namespace

// The stream is every conversation rendered, then EOS; a target is ignored exactly where the byte it
// predicts is not the assistant's; with the template's generation marks the mask is the same.
TEST(ChatData, WhatTheAssistantWritesIsTrained) {
  Dir c;
  auto data = c.open();
  ASSERT_NE(data->mask(), nullptr);
  const int64_t L = data->stream_size();
  std::vector<uint32_t> stream(static_cast<size_t>(L));
  data->stream(0, L, stream.data());
  int64_t trained = 0, eos = 0;
  for (const uint32_t id : stream) trained += trained_byte(int32_t(id)), eos += id == uint32_t(kEos);
  EXPECT_EQ(eos, 30);
  EXPECT_EQ(data->mask()->trained(), trained);
  EXPECT_GT(trained, 100);
  EXPECT_GT(L - trained, 300);
  std::vector<int32_t> ids(size_t(L - 1)), tg(size_t(L - 1));
  data->window(0, L - 1, ids.data(), tg.data());
  for (int64_t i = 0; i + 1 < L; ++i) {
    const int32_t next = int32_t(stream[size_t(i + 1)]);
    EXPECT_EQ(tg[size_t(i)], trained_byte(next) ? next : -1) << "position " << i;
  }
  write_bytes(c.dir / "marked.jinja", kMarked);
  auto marked = c.open((c.dir / "marked.jinja").string());
  EXPECT_EQ(marked->mask()->fingerprint(), data->mask()->fingerprint());
  EXPECT_EQ(marked->stream_size(), L);
  // a tokenizer file of another name: the template is its directory's, not the file
  fs::copy_file(c.dir / "m/tokenizer.json", c.dir / "m/my-tokenizer.json");
  DataOptions o;
  o.tokenizer = c.dir / "m/my-tokenizer.json";
  cli::PromptFields f;
  f.messages = "messages";
  cli::apply_prompt_fields(f, o.corpus, o.tokenizer);
  o.packing = {kEos, false, 0, false};
  EXPECT_EQ(open_training_data(c.dir / "c.jsonl", 300, o)->mask()->fingerprint(), data->mask()->fingerprint());
}

// Qwen2.5's kind of template (ChatML): the assistant's content and its <|im_end|>\n are trained;
// the generation prompt before them, the system and user turns are not.
TEST(ChatData, ChatMlTurnsAreSplitWhereTheAssistantWrites) {
  auto t = ChatTemplate::load(source_dir() / "tests/fixtures/chat/qwen2.5.jinja");
  const jinja::Value msgs = jinja::Value::parse(R"([{"role": "user", "content": "2+2?"}, {"role": "assistant",
      "content": "4"}, {"role": "user", "content": "und 3·3?"}, {"role": "assistant", "content": "\nNeun.\n"}])");
  const std::vector<ChatBlock> b = t->render(msgs, nullptr, "r.jsonl:1");
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(b[0].text, "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
                       "<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_FALSE(b[0].trained);
  EXPECT_EQ(b[1].text, "4<|im_end|>\n");
  EXPECT_TRUE(b[1].trained);
  EXPECT_EQ(b[2].text, "<|im_start|>user\nund 3·3?<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(b[3].text, "\nNeun.\n<|im_end|>\n");
  EXPECT_TRUE(b[3].trained);
  // generation marks: exactly their output ("...<|im_end|>", its newline outside)
  auto g = ChatTemplate::load(source_dir() / "tests/fixtures/chat/generation.jinja");
  const std::vector<ChatBlock> m = g->render(msgs, nullptr, "r.jsonl:1");
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[1].text, "4<|im_end|>");
  EXPECT_EQ(m[3].text, "Neun.<|im_end|>");
  EXPECT_EQ(m[4].text, "\n");
  EXPECT_FALSE(m[4].trained);
}

// Where the template comes from: chat_template.jinja beside the tokenizer before tokenizer_config.json's
// (as transformers), --chat-template before both; a list of named templates takes "tool_use" for
// records with tools; the special tokens reach the template.
TEST(ChatData, TheTemplateIsFoundAsTransformersFindsIt) {
  Dir c;
  const jinja::Value msgs = jinja::Value::parse(R"([{"role": "user", "content": "x"}])");
  EXPECT_EQ(ChatTemplate::load(c.dir / "m")->render(msgs, nullptr, "r")[0].text, "#x;");
  write_bytes(c.dir / "m/chat_template.jinja", "{{ bos_token }}[{{ messages[0].content }}]");
  EXPECT_EQ(ChatTemplate::load(c.dir / "m/tokenizer.json")->render(msgs, nullptr, "r")[0].text, "[x]");
  write_bytes(c.dir / "m/tokenizer_config.json",
              nlohmann::json({{"bos_token", {{"content", "<s>"}, {"lstrip", false}}},
                              {"chat_template", {{{"name", "default"}, {"template", "{{ bos_token }}D"}},
                                                {{"name", "tool_use"}, {"template", "T{{ tools | length }}"}}}}})
                  .dump());
  EXPECT_EQ(ChatTemplate::load(c.dir / "m")->render(msgs, nullptr, "r")[0].text, "<s>[x]");  // (the .jinja first)
  fs::remove(c.dir / "m/chat_template.jinja");
  EXPECT_EQ(ChatTemplate::load(c.dir / "m")->render(msgs, nullptr, "r")[0].text, "<s>D");
  EXPECT_EQ(ChatTemplate::load(c.dir / "m")->render(msgs, jinja::Value::parse("[1, 2]"), "r")[0].text, "T2");
  EXPECT_EQ(ChatTemplate::load(c.dir / "m/tokenizer_config.json")->render(msgs, nullptr, "r")[0].text, "<s>D");
  // a template file of any name is Jinja, with the tokenizer's special tokens; tools and documents are
  // None when the record has none (as transformers passes them)
  write_bytes(c.dir / "t.j2", "{{ bos_token }}{{ tools is none }}{{ documents is none }}");
  EXPECT_EQ(ChatTemplate::load(c.dir / "t.j2", c.dir / "m/tokenizer.json")->render(msgs, nullptr, "r")[0].text,
            "<s>TrueTrue");
  EXPECT_EQ(ChatTemplate::load(c.dir / "t.j2")->render(msgs, nullptr, "r")[0].text, "TrueTrue");  // (no tokenizer)
  // special_tokens_map.json beside a config of before added_tokens_decoder overrides it (as transformers
  // reads it), and is not read beside one with it
  write_bytes(c.dir / "m/special_tokens_map.json", R"({"bos_token": "<x>", "eos_token": {"content": "</s>"}})");
  write_bytes(c.dir / "t.j2", "{{ bos_token }}{{ eos_token }}");
  EXPECT_EQ(ChatTemplate::load(c.dir / "t.j2", c.dir / "m")->render(msgs, nullptr, "r")[0].text, "<x></s>");
  write_bytes(c.dir / "m/tokenizer_config.json",
              nlohmann::json({{"bos_token", "<s>"}, {"added_tokens_decoder", nlohmann::json::object()},
                              {"chat_template", {{{"name", "default"}, {"template", "{{ bos_token }}D"}},
                                                {{"name", "tool_use"}, {"template", "T{{ tools | length }}"}}}}})
                  .dump());
  EXPECT_EQ(ChatTemplate::load(c.dir / "t.j2", c.dir / "m")->render(msgs, nullptr, "r")[0].text, "<s>");
  // nesting that a copy could not take is refused
  jinja::Value deep = "x";
  for (int i = 0; i < 300; ++i) deep = jinja::Value::array({deep});
  EXPECT_THAT(error_of([&] { ChatTemplate::load(c.dir / "t.j2")->render(jinja::Value::array({{{"role", "user"},
                                                                                           {"content", deep}}}),
                                                                          nullptr, "r.jsonl:3"); }),
              HasSubstr("r.jsonl:3: a value nested more than 256 deep"));
  // newer transformers: additional_chat_templates/tool_use.jinja beside chat_template.jinja
  write_bytes(c.dir / "m/chat_template.jinja", "plain");
  fs::create_directories(c.dir / "m/additional_chat_templates");
  write_bytes(c.dir / "m/additional_chat_templates/tool_use.jinja", "tools: {{ tools | length }}");
  EXPECT_EQ(ChatTemplate::load(c.dir / "m")->render(msgs, nullptr, "r")[0].text, "plain");
  EXPECT_EQ(ChatTemplate::load(c.dir / "m")->render(msgs, jinja::Value::parse("[1]"), "r")[0].text, "tools: 1");
  EXPECT_EQ(ChatTemplate::load(c.dir / "m")->prompt(msgs, jinja::Value::parse("[1, 2]"), "r"), "tools: 2");
}

// oomb tokenize writes the mask beside the ids and train on it gives the text's losses; train and
// eval count the assistant's bytes as the targets; the banner says what is context only.
TEST(ChatData, TokenizeTrainAndEvalReadConversations) {
  Dir c;
  CmdResult r = oomb_cmd(c.dir, fmt::format("tokenize --tokenizer {0}/m --input {0}/c.jsonl --output {0}/c.bin "
                                            "--eos {1} --messages-field messages", c.d, kEos));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("context only, not trained: the loss mask -> " + c.d + "/c.bin.mask"));
  auto text = c.open();
  DataOptions o;
  o.packing = {kEos, false, 0, false};
  auto ids = open_training_data(c.dir / "c.bin", 300, o);
  ASSERT_NE(ids->mask(), nullptr);
  EXPECT_EQ(ids->mask()->fingerprint(), text->mask()->fingerprint());
  std::vector<uint32_t> stream(size_t(text->stream_size()));
  text->stream(0, text->stream_size(), stream.data());
  auto trained_in = [&](int64_t w, int64_t N) {  // targets of window w: stream positions w N + 1 .. w N + N
    int64_t n = 0;
    for (int64_t p = w * N + 1; p <= w * N + N; ++p) n += trained_byte(int32_t(stream[size_t(p % int64_t(stream.size()))]));
    return n;
  };
  std::vector<nlohmann::json> runs[2];
  for (int i = 0; i < 2; ++i) {
    const std::string m = fmt::format("{}/run{}.jsonl", c.d, i);
    r = oomb_cmd(c.dir, i == 0 ? c.train("--steps 2 --grad-accum 2 --metrics " + m)
                               : fmt::format("train --model {0}/m --data {0}/c.bin --eos-id {1} --seq-len 64 "
                                             "--chunk-size 16 --page-size 8 --lr 1e-2 --steps 2 --grad-accum 2 "
                                             "--metrics {2}", c.d, kEos, m));
    ASSERT_EQ(r.code, 0) << r.out;
    if (i == 0) EXPECT_THAT(r.out, HasSubstr("context only, not trained"));
    runs[i] = metrics_lines(m);
  }
  for (int64_t k = 0; k < 2; ++k) {
    EXPECT_EQ(runs[0][size_t(k)]["targets"], trained_in(2 * k, 64) + trained_in(2 * k + 1, 64)) << "step " << k;
    EXPECT_EQ(runs[1][size_t(k)]["loss"], runs[0][size_t(k)]["loss"]) << "step " << k;
  }
  r = oomb_cmd(c.dir, fmt::format("eval --model {0}/m --data {0}/c.jsonl --eos-id {1} --seq-len 64 --chunk-size 16 "
                                  "--windows 3 --json --messages-field messages", c.d, kEos));
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  EXPECT_EQ(j["targets"], trained_in(0, 64) + trained_in(1, 64) + trained_in(2, 64));
}

// Bad input is named: the flags' combinations, a record without the field, messages that are not a
// list or lack a role, the template's own error, a template that cannot say what the assistant
// writes, no template at all.
TEST(ChatData, BadInputIsNamed) {
  Dir c;
  CmdResult r = oomb_cmd(c.dir, c.train("--steps 1 --prompt-field q --completion-field a"));
  EXPECT_THAT(r.out, HasSubstr("--messages-field and --prompt-field: records are conversations or prompt-completion "
                               "pairs, not both"));
  r = oomb_cmd(c.dir, fmt::format("train --model {0}/m --data {0}/c.jsonl --steps 1 --chat-template {0}/x.jinja", c.d));
  EXPECT_THAT(r.out, HasSubstr("--chat-template " + c.d + "/x.jinja needs --messages-field"));
  r = oomb_cmd(c.dir, c.train("--steps 1 --chat-template " + c.d + "/none.jinja"));
  EXPECT_THAT(r.out, HasSubstr("chat template " + c.d + "/none.jinja: no such file or directory"));
  r = oomb_cmd(c.dir, fmt::format("train --model {0}/m --data {0}/c.jsonl --eos-id 7 --steps 1 --messages-field chat",
                                  c.d));
  EXPECT_THAT(r.out, HasSubstr(c.d + "/c.jsonl:1: the record has no \"chat\" field (choose the field with "
                               "--messages-field)"));
  write_bytes(c.dir / "bad.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}\n"
                                   "{\"messages\": {\"role\": \"user\"}}\n");
  r = oomb_cmd(c.dir, fmt::format("tokenize --tokenizer {0}/m --input {0}/bad.jsonl --output {0}/b.bin --eos 7 "
                                  "--messages-field messages", c.d));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr(c.d + "/bad.jsonl:2: the messages must be a list, not object"));
  EXPECT_FALSE(fs::exists(c.dir / "b.bin"));
  write_bytes(c.dir / "bad.jsonl", "{\"messages\": [{\"content\": \"a\"}]}\n");
  r = oomb_cmd(c.dir, fmt::format("tokenize --tokenizer {0}/m --input {0}/bad.jsonl --output {0}/b.bin --eos 7 "
                                  "--messages-field messages", c.d));
  EXPECT_THAT(r.out, HasSubstr(c.d + "/bad.jsonl:1: message 0 needs a string \"role\""));
  write_bytes(c.dir / "raise.jinja", "{% if messages[0].role != 'system' %}\n{{ raise_exception('a system first') }}"
                                     "{% endif %}");
  r = oomb_cmd(c.dir, c.train("--steps 1 --chat-template " + c.d + "/raise.jinja"));
  EXPECT_THAT(r.out, HasSubstr(c.d + "/c.jsonl:2: chat template " + c.d + "/raise.jinja line 2: the template raised an "
                               "error: a system first"));
  // a template that renders an earlier turn otherwise once a later one follows (as Qwen3's drops the
  // reasoning of turns before the last question)
  write_bytes(c.dir / "moody.jinja", "{% for m in messages %}{% if m.role == 'assistant' and loop.last %}<think>"
                                     "{% endif %}{{ m.content }}|{% endfor %}");
  r = oomb_cmd(c.dir, c.train("--steps 1 --chat-template " + c.d + "/moody.jinja"));
  EXPECT_THAT(r.out, HasSubstr(c.d + "/c.jsonl:2: the template renders the conversation before message 1 (an "
                               "assistant's) otherwise than as the start of the whole"));
  EXPECT_THAT(r.out, HasSubstr("{% generation %} marks"));
  fs::remove(c.dir / "m/tokenizer_config.json");
  r = oomb_cmd(c.dir, c.train("--steps 1"));
  EXPECT_THAT(r.out, HasSubstr("no chat_template (nor chat_template.jinja beside it); give one with --chat-template"));
  r = oomb_cmd(c.dir, "train --steps 1 --messages-field messages");
  EXPECT_THAT(r.out, HasSubstr("--messages-field, --chat-template and --packing need --model and --data"));
}

// oomb generate --chat / --messages: the conversation through the template with its generation
// prompt, as if its bytes were given as --prompt-ids; only the reply is printed.
TEST(ChatData, GenerateRepliesToAConversation) {
  Dir c;
  const auto run = [&](const std::string& flags) {
    const CmdResult r = oomb_cmd(c.dir, fmt::format("generate --model {}/m --max-new-tokens 6 --no-stop-at-eos {}", c.d,
                                                    flags));
    EXPECT_EQ(r.code, 0) << r.out;
    const size_t ids = r.out.find("generated ids: ");
    EXPECT_NE(ids, std::string::npos) << r.out;
    return std::make_pair(r.out.substr(0, r.out.find('\n')), r.out.substr(ids, r.out.find('\n', ids) - ids));
  };
  const auto ids_of = [](const std::string& s) {
    std::string out;
    for (const char ch : s) out += (out.empty() ? "" : ",") + std::to_string(int(uint8_t(ch)));
    return out;
  };
  const auto plain = run("--prompt-ids " + ids_of("%be kind;#ab;@"));
  const auto chat = run("--chat ab --system 'be kind'");
  EXPECT_EQ(chat.second, plain.second);
  ASSERT_TRUE(plain.first.starts_with("%be kind;#ab;@"));
  EXPECT_EQ(chat.first, plain.first.substr(std::string("%be kind;#ab;@").size()));  // the reply alone
  write_bytes(c.dir / "conv.json", R"({"messages": [{"role": "system", "content": "be kind"},
                                                    {"role": "user", "content": "ab"}]})");
  EXPECT_EQ(run("--messages " + c.d + "/conv.json").second, plain.second);
  write_bytes(c.dir / "conv.json", R"({"messages": [{"role": "user", "content": "ab"}], "tools": [1, 2, 3]})");
  write_bytes(c.dir / "tools.jinja", "{{ tools | length }}{{ messages[0].content }}");
  EXPECT_EQ(run("--messages " + c.d + "/conv.json --chat-template " + c.d + "/tools.jinja").second,
            run("--prompt-ids " + ids_of("3ab")).second);  // (a record's tools reach the template)
  write_bytes(c.dir / "other.jinja", "<{{ messages[-1].content }}>");
  EXPECT_EQ(run("--chat ab --chat-template " + c.d + "/other.jinja").second, run("--prompt-ids " + ids_of("<ab>")).second);
  CmdResult r = oomb_cmd(c.dir, fmt::format("generate --model {}/m --chat ab --prompt-ids 1", c.d));
  EXPECT_THAT(r.out, HasSubstr("give exactly one of --prompt, --prompt-ids, --chat and --messages"));
  r = oomb_cmd(c.dir, fmt::format("generate --model {}/m --prompt-ids 1 --system x", c.d));
  EXPECT_THAT(r.out, HasSubstr("--system needs --chat"));
  write_bytes(c.dir / "conv.json", "[]");
  r = oomb_cmd(c.dir, fmt::format("generate --model {0}/m --messages {0}/conv.json", c.d));
  EXPECT_THAT(r.out, HasSubstr("--messages " + c.d + "/conv.json: a list of messages"));
}
