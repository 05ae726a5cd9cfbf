#include "cli/prompt_fields.h"

#include "core/error.h"

namespace oomb::cli {

void add_prompt_fields(CLI::App* c, PromptFields& f) {
  c->add_option("--prompt-field", f.prompt, "JSON-lines data: records of a prompt and a completion (with "
                "--completion-field); the field holding the prompt, which is context only: the loss is over the "
                "completion and the EOS after it");
  c->add_option("--completion-field", f.completion, "JSON-lines data: with --prompt-field, the field holding the "
                "completion (the text trained on)");
  c->add_option("--messages-field", f.messages, "JSON-lines data: conversations (TRL's conversational records); the "
                "field holding each record's list of messages ({\"role\", \"content\"}; a record's \"tools\" go to the "
                "template too), rendered by the model's chat template: the loss is over what the assistant writes");
  c->add_option("--chat-template", f.chat_template, "with --messages-field: the chat template, a .jinja file or a "
                "tokenizer_config.json (default: the tokenizer's directory's chat_template.jinja or "
                "tokenizer_config.json)");
}

void apply_prompt_fields(const PromptFields& f, CorpusOptions& co, const std::filesystem::path& tokenizer) {
  OOMB_CHECK(f.prompt.empty() == f.completion.empty(), "--{} '{}' needs --{} too (records of a prompt and a completion)",
             f.prompt.empty() ? "completion-field" : "prompt-field", f.prompt.empty() ? f.completion : f.prompt,
             f.prompt.empty() ? "prompt-field" : "completion-field");
  OOMB_CHECK(f.prompt.empty() || f.prompt != f.completion, "--prompt-field and --completion-field: both name '{}'",
             f.prompt);
  OOMB_CHECK(f.messages.empty() || f.prompt.empty(), "--messages-field and --prompt-field: records are conversations "
             "or prompt-completion pairs, not both");
  OOMB_CHECK(f.chat_template.empty() || !f.messages.empty(), "--chat-template {} needs --messages-field (the field of "
             "each record's conversation)", f.chat_template);
  co.prompt_field = f.prompt, co.completion_field = f.completion;
  co.messages_field = f.messages;
  // (loaded when text is read: token files bring their masks and need none)
  // (by default the tokenizer's directory: a tokenizer file may have any name, and is no template)
  std::error_code ec;
  const std::filesystem::path tokenizer_dir =
      tokenizer.empty() || std::filesystem::is_directory(tokenizer, ec) ? tokenizer
      : tokenizer.parent_path().empty()                               ? std::filesystem::path(".")
                                                                       : tokenizer.parent_path();
  co.chat_template_path = f.chat_template.empty() ? tokenizer_dir : std::filesystem::path(f.chat_template);
  co.tokenizer_path = tokenizer;
}

}  // namespace oomb::cli
