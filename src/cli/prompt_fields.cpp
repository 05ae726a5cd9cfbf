#include "cli/prompt_fields.h"

#include "core/error.h"

namespace oomb::cli {

void add_prompt_fields(CLI::App* c, PromptFields& f) {
  c->add_option("--prompt-field", f.prompt, "JSON-lines data: records of a prompt and a completion (with "
                "--completion-field); the field holding the prompt, which is context only: the loss is over the "
                "completion and the EOS after it");
  c->add_option("--completion-field", f.completion, "JSON-lines data: with --prompt-field, the field holding the "
                "completion (the text trained on)");
}

void apply_prompt_fields(const PromptFields& f, CorpusOptions& co) {
  OOMB_CHECK(f.prompt.empty() == f.completion.empty(), "--{} '{}' needs --{} too (records of a prompt and a completion)",
             f.prompt.empty() ? "completion-field" : "prompt-field", f.prompt.empty() ? f.completion : f.prompt,
             f.prompt.empty() ? "prompt-field" : "completion-field");
  OOMB_CHECK(f.prompt.empty() || f.prompt != f.completion, "--prompt-field and --completion-field: both name '{}'",
             f.prompt);
  co.prompt_field = f.prompt, co.completion_field = f.completion;
}

}  // namespace oomb::cli
