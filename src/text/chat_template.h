// A model's chat template, as transformers finds it (chat_template.jinja beside the tokenizer, else
// tokenizer_config.json's chat_template: a string, or a list of named templates, the tool_use one also
// in additional_chat_templates/), and a conversation
// rendered by it into blocks of text: what the assistant's messages write, which is trained, and
// the rest (system, user and tool messages, the template's own markup), which is context only.
//
// What the assistant writes: the output of the template's {% generation %} blocks where it has
// them (as transformers' return_assistant_tokens_mask); otherwise, for assistant message i, the
// text between the conversation before it rendered with add_generation_prompt (where the model
// starts to write) and the conversation up to it (where its turn has ended). Both must be
// prefixes of the whole conversation's rendering; a template that renders earlier turns
// differently once later ones follow (Qwen3's drops their reasoning) cannot be read this way, and
// such a conversation is an error that names it and asks for a template with generation marks.
#pragma once
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "text/jinja/ast.h"

namespace oomb {

namespace jinja {
class Template;
}

struct ChatBlock {
  std::string text;
  bool trained;  // written by the assistant
};

class ChatTemplate {
 public:
  // `path`: a model directory, its tokenizer.json or tokenizer_config.json, or a file of Jinja
  // source (any other file); the special tokens from the model's files, or for a template file from
  // the directory of `tokenizer`. Errors name the file and the field.
  static std::shared_ptr<const ChatTemplate> load(const std::filesystem::path& path,
                                                  const std::filesystem::path& tokenizer = {});
  ChatTemplate(std::string source, std::string name, jinja::Value special_tokens);
  ~ChatTemplate();

  // `messages`: a list of {"role", "content", ...}; `tools`: null or the record's list; `where` names the
  // record in errors. Blocks alternate between trained and not; none is empty.
  std::vector<ChatBlock> render(const jinja::Value& messages, const jinja::Value& tools, const std::string& where) const;
  const std::string& name() const { return name_; }
  // The conversation rendered with the generation prompt: where the model writes its reply.
  std::string prompt(const jinja::Value& messages, const jinja::Value& tools, const std::string& where) const;

 private:
  std::string name_;
  std::unique_ptr<jinja::Template> default_, tool_use_;
  jinja::Value special_;  // bos_token, eos_token, unk_token, pad_token as tokenizer_config.json names them

  std::string text(const jinja::Template& t, jinja::Value messages, const jinja::Value& tools,
                   bool add_generation_prompt, std::vector<std::pair<size_t, size_t>>* spans = nullptr) const;
};

}  // namespace oomb
