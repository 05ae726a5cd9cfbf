// --prompt-field and --completion-field, --messages-field and --chat-template, shared by oomb train,
// eval and tokenize: JSON-lines text as prompt-completion records (TRL's format), each a document
// whose prompt is context only (the loss is over the completion and the EOS after it), or as
// conversations rendered by the model's chat template, whose assistant messages are trained.
#pragma once
#include <CLI/CLI.hpp>
#include <filesystem>
#include <string>

#include "data/text_corpus.h"

namespace oomb::cli {

struct PromptFields {
  std::string prompt, completion, messages, chat_template;
};

void add_prompt_fields(CLI::App* c, PromptFields& f);
// Into the corpus options (both prompt fields, or neither; or the messages field; the check names
// the flag at fault). The chat template: --chat-template, else the one beside `tokenizer` (loaded when
// text is read).
void apply_prompt_fields(const PromptFields& f, CorpusOptions& co, const std::filesystem::path& tokenizer);

}  // namespace oomb::cli
