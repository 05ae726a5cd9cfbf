// oomb generate: continues a prompt with the model, greedy or sampled, decoding token by token over
// the KV cache (the prompt goes in chunks of at most --chunk-size tokens). The prompt: text, ids,
// or a conversation (--chat, --messages) rendered by the model's chat template with the generation
// prompt, whose reply alone is printed.
#include <algorithm>
#include <fmt/format.h>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <sstream>

#include "cli/commands.h"
#include "cli/load_model.h"
#include "cli/rope_flags.h"
#include "data/eos.h"
#include "hf/checkpoint.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "train/model.h"
#include "train/sampling.h"

namespace oomb::cli {

namespace {
struct GenerateArgs {
  std::string model, prompt, prompt_ids, device = "cpu", tokenizer, precision, lora;
  std::string chat, system, messages, chat_template;
  int64_t max_new = 32, chunk = 256;
  double temperature = 0, top_p = 1;
  uint64_t seed = 0;
  bool stop_at_eos = true;
  RopeFlags rope;
};

std::vector<int32_t> parse_ids(const std::string& s, int64_t vocab) {
  std::vector<int32_t> ids;
  std::istringstream in(s);
  for (std::string tok; std::getline(in, tok, ',');) {
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(tok, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    OOMB_CHECK(used == tok.size() && v >= 0 && v < vocab, "--prompt-ids: '{}' is not a token id below {}{}", tok, vocab,
               s.find(',') == std::string::npos && tok.find_first_of(" \t;") != std::string::npos
                   ? " (separate the ids by commas: 1,2,3)"
                   : "");
    ids.push_back(int32_t(v));
  }
  OOMB_CHECK(!ids.empty(), "--prompt-ids: no ids given");
  return ids;
}
// The text of ids, where an id the tokenizer does not have (a model's vocabulary padded past its
// tokenizer's, as Qwen2.5's is) shows as <|id N|> rather than ending the command; counted in unknown.
// The parts after the first continue it (a decoder's Strip or Metaspace treats the text's start apart).
std::string printable(const Tokenizer& tok, const std::vector<int32_t>& ids, int64_t& unknown) {
  std::string text;
  size_t from = 0;
  for (size_t i = 0; i <= ids.size(); ++i) {
    if (i < ids.size() && tok.has_id(ids[i])) continue;
    text += tok.decode(std::span(ids).subspan(from, i - from), false, from > 0);
    if (i < ids.size()) text += fmt::format("<|id {}|>", ids[i]), ++unknown;
    from = i + 1;
  }
  return text;
}
// --chat (after --system) or --messages FILE: the conversation to reply to, and its tools (a
// record's "tools", or null).
std::pair<jinja::Value, jinja::Value> conversation(const GenerateArgs& a) {
  if (!a.chat.empty()) {
    jinja::Value m = jinja::Value::array();
    if (!a.system.empty()) m.push_back({{"role", "system"}, {"content", a.system}});
    m.push_back({{"role", "user"}, {"content", a.chat}});
    return {m, nullptr};
  }
  std::ifstream f(a.messages);
  OOMB_CHECK(f.good(), "--messages {}: cannot open", a.messages);
  jinja::Value m;
  try {
    m = jinja::Value::parse(f);
  } catch (const nlohmann::json::exception& e) {
    fail("--messages {}: not valid JSON: {}", a.messages, e.what());
  }
  jinja::Value tools;
  if (m.is_object() && m.contains("messages")) {  // (a record of conversational data)
    if (m.contains("tools")) tools = m["tools"];
    m = jinja::Value(m["messages"]);
  }
  OOMB_CHECK(m.is_array() && !m.empty(), "--messages {}: a list of messages ({{\"role\", \"content\"}}), or an "
             "object whose \"messages\" is one", a.messages);
  return {m, tools};
}

}  // namespace

Command add_generate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* c = app.add_subcommand("generate", "Continue a prompt with a model (greedy, or temperature / top-p sampling)");
  c->add_option("--model", a->model, "Hugging Face model directory")->required()->check(model_dir());
  c->add_option("--prompt", a->prompt, "Prompt text (encoded with the model's tokenizer.json, or --tokenizer)");
  c->add_option("--prompt-ids", a->prompt_ids, "Prompt as comma-separated token ids (instead of --prompt)");
  c->add_option("--chat", a->chat, "A user's message to reply to, through the model's chat template with its "
                "generation prompt (only the reply is printed)");
  c->add_option("--system", a->system, "With --chat: a system message before it");
  c->add_option("--messages", a->messages, "A JSON file of the conversation to reply to (a list of {\"role\", "
                "\"content\"}, or a record whose \"messages\" is one), through the chat template as --chat");
  c->add_option("--chat-template", a->chat_template, "With --chat or --messages: the chat template, a .jinja file or "
                "a tokenizer_config.json (default: the tokenizer's directory's)");
  c->add_option("--tokenizer", a->tokenizer, "tokenizer.json, or a directory holding one (default: --model's)");
  c->add_option("--max-new-tokens", a->max_new, "Tokens to generate")->check(positive())->capture_default_str();
  c->add_option("--temperature", a->temperature, "0: greedy; above 0: sample from softmax(logits / T)")
      ->check(non_negative())->capture_default_str();
  c->add_option("--top-p", a->top_p, "Nucleus sampling: the smallest set of tokens holding this probability")
      ->check(CLI::Validator([](std::string& v) -> std::string {  // (0, 1]
        if (std::string why = positive()(v); !why.empty()) return why;
        return std::stod(v) <= 1.0 ? "" : "must be at most 1, got " + v;
      }, "NUMBER in (0, 1]"))->capture_default_str();
  c->add_option("--seed", a->seed, "Seed of the sampling")->check(count(true))->capture_default_str();
  c->add_option("--chunk-size", a->chunk, "Prompt tokens per forward pass")->check(positive())->capture_default_str();
  c->add_option("--device", a->device, "cpu, sim or cuda")->check(CLI::IsMember({"cpu", "sim", "cuda"}))->capture_default_str();
  add_precision_flag(c, a->precision, "the matmuls (LoRA's adapters too)");
  c->add_option("--lora", a->lora, "A PEFT LoRA adapter directory (oomb train's --out with LoRA, or a checkpoint of "
                "a LoRA run) on --model as its base; no merge needed");
  c->add_flag("--stop-at-eos,!--no-stop-at-eos", a->stop_at_eos, "Stop at the model's end of sequence (default on): "
              "any id config.json's or generation_config.json's eos_token_id names, or tokenizer_config.json's "
              "eos_token");
  add_rope_flags(c, a->rope);
  return {c, [a] {
            const bool chat = !a->chat.empty() || !a->messages.empty();
            OOMB_CHECK(int(!a->prompt.empty()) + int(!a->prompt_ids.empty()) + int(!a->chat.empty()) +
                           int(!a->messages.empty()) == 1,
                       "give exactly one of --prompt, --prompt-ids, --chat and --messages");
            OOMB_CHECK(a->system.empty() || !a->chat.empty(), "--system needs --chat (with --messages, put the system "
                       "message in the file)");
            OOMB_CHECK(a->chat_template.empty() || chat, "--chat-template needs --chat or --messages");
            bool rope_changed = false;
            const ModelConfig cfg = run_config(a->model, a->lora, a->rope, std::cerr, &rope_changed);  // (stdout: the text)
            std::optional<Tokenizer> tok;
            namespace fs = std::filesystem;
            const fs::path tp = a->tokenizer.empty() ? fs::path(a->model) / "tokenizer.json"
                                : fs::is_directory(a->tokenizer) ? fs::path(a->tokenizer) / "tokenizer.json"
                                                                  : fs::path(a->tokenizer);
            if (!a->prompt.empty() || chat || fs::exists(tp)) {
              OOMB_CHECK(fs::exists(tp), "{} needs a tokenizer: {} does not exist (give --tokenizer, or "
                         "--prompt-ids)", chat ? (a->chat.empty() ? "--messages" : "--chat") : "--prompt", tp.string());
              tok = Tokenizer::load(tp);
              OOMB_CHECK(tok->id_limit() <= cfg.vocab, "--tokenizer {}: its ids reach {}, beyond the model's "
                         "vocabulary ({}): the tokenizer of another model?", tok->source(), tok->id_limit() - 1,
                         cfg.vocab);
            }
            std::string text_in = a->prompt;
            if (chat) {
              const fs::path dir = tp.parent_path().empty() ? fs::path(".") : tp.parent_path();  // (the tokenizer's)
              const auto t = ChatTemplate::load(a->chat_template.empty() ? dir : fs::path(a->chat_template), tp);
              const auto [messages, tools] = conversation(*a);
              text_in = t->prompt(messages, tools, a->chat.empty() ? "--messages " + a->messages : "--chat");
            }
            const std::vector<int32_t> prompt =
                text_in.empty() ? parse_ids(a->prompt_ids, cfg.vocab) : tok->encode(text_in);
            OOMB_CHECK(!prompt.empty(), "{}: the text encodes to no tokens", chat ? "the conversation" : "--prompt");
            std::unique_ptr<Backend> be = make_backend(a->device);
            const int64_t total = int64_t(prompt.size()) + a->max_new;
            if (const std::string note = rope_reach_note(cfg, total); !note.empty() && !rope_changed)
              std::cerr << note << std::endl;
            ChunkPlan plan{std::min(a->chunk, total), 128};
            plan.precision = precision_dtype(a->precision, a->device);
            plan.kv_dtype = kv_page_dtype("auto", plan.precision);
            const std::unique_ptr<Model> loaded = load_model_and_adapter(a->model, a->lora, cfg, *be, plan);
            Model& model = *loaded;
            model.begin_decode(total);
            std::vector<float> logits(static_cast<size_t>(cfg.vocab));
            for (size_t i = 0; i < prompt.size(); i += size_t(a->chunk)) {
              const int64_t n = std::min<int64_t>(a->chunk, int64_t(prompt.size() - i));
              model.decode(prompt.data() + i, n, logits.data());
            }
            std::mt19937_64 rng(a->seed);
            const std::vector<int64_t> eos = stop_token_ids(a->model, eos_token_ids(cfg), cfg.vocab, tok ? &*tok : nullptr);
            std::vector<int32_t> out;
            for (int64_t k = 0; k < a->max_new; ++k) {
              const int32_t next = sample_next(logits.data(), cfg.vocab, {a->temperature, a->top_p}, rng);
              out.push_back(next);
              if (a->stop_at_eos && std::count(eos.begin(), eos.end(), next)) break;
              if (k + 1 < a->max_new) model.decode(&next, 1, logits.data());
            }
            model.end_decode();
            // text on stdout when there is a tokenizer (the ids on stderr); else the ids on stdout
            std::string ids;
            for (int32_t id : out) ids += (ids.empty() ? "" : " ") + std::to_string(id);
            if (tok) {
              int64_t unknown = 0;
              std::vector<int32_t> reply = out;
              if (chat && a->stop_at_eos && !reply.empty() && std::count(eos.begin(), eos.end(), reply.back()))
                reply.pop_back();
              const std::string text = printable(*tok, reply, unknown);
              if (chat) std::cout << text << std::endl;  // the reply alone
              else std::cout << (a->prompt.empty() ? printable(*tok, prompt, unknown) : a->prompt) << text << std::endl;
              std::cerr << "generated ids: " << ids << std::endl;
              if (unknown > 0)
                std::cerr << fmt::format("generate: {} id(s) past the tokenizer's ({} has {} ids; the model's vocabulary "
                                         "is {}) are shown as <|id N|>\n", unknown, tok->source(), tok->id_limit(),
                                         cfg.vocab);
            } else {
              std::cout << ids << std::endl;
            }
            return 0;
          }};
}

}  // namespace oomb::cli
