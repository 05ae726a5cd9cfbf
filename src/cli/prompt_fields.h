// --prompt-field and --completion-field, shared by oomb train, eval and tokenize: JSON-lines text as
// prompt-completion records (TRL's format), each a document whose prompt is context only: the
// loss is over the completion and the EOS after it.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

#include "data/text_corpus.h"

namespace oomb::cli {

struct PromptFields {
  std::string prompt, completion;
};

void add_prompt_fields(CLI::App* c, PromptFields& f);
// Into the corpus options (both named, or neither; the check names the missing flag).
void apply_prompt_fields(const PromptFields& f, CorpusOptions& co);

}  // namespace oomb::cli
