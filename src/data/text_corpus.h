// Documents of text: a plain text file (one document), a JSON-lines file (one document per line,
// from a named string field, or a prompt field and a completion field: TRL's prompt-completion
// records, the prompt arriving as a block that is not trained, or a field of chat messages rendered
// by the model's chat template, the assistant's writing trained), or a directory of such files (recursively, in path order; hidden
// files skipped). Text reaches the caller in blocks: a whole document, or, for a large plain
// text file, consecutive parts of it cut at is_cut_point (after '\n', before a character that is
// not White_Space), only when the caller says such cuts are exact (as they are for the Qwen2, Llama 3,
// Gemma 3 and Llama 2 tokenizers). A file without such points arrives whole.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <istream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "text/chat_template.h"
#include "text/utf8.h"

namespace oomb {

enum class TextFormat { Auto, Text, Jsonl };
TextFormat text_format_parse(const std::string& s);  // "auto" | "text" | "jsonl"

struct CorpusOptions {
  TextFormat format = TextFormat::Auto;  // auto: .jsonl / .ndjson / .json (any case) are JSON lines, else text
  std::string text_field = "text";
  // JSON lines as prompt-completion records (both named, or neither): each document is the prompt's
  // block (trained: false) followed by the completion's; text_field is not read
  std::string prompt_field, completion_field;
  // JSON lines as conversations (TRL's conversational records): the list of messages in this field
  // (and the record's "tools"), rendered by chat_template into blocks, trained where the assistant
  // writes (text/chat_template.h); text_field is not read
  std::string messages_field;
  std::shared_ptr<const ChatTemplate> chat_template;  // when null, loaded from chat_template_path when text is read
  std::filesystem::path chat_template_path, tokenizer_path;  // (ChatTemplate::load's arguments)
  Utf8Errors utf8 = Utf8Errors::Strict;
  bool allow_cuts = false;           // large documents may arrive in parts (see above)
  int64_t block_bytes = 64 << 20;    // read size for large text files
  // some tokens are context only (prompts, or what is not an assistant's): the data carries a loss mask
  bool masked() const { return !prompt_field.empty() || !messages_field.empty(); }
};

// Whether text read from input (a file, or a directory as TextCorpus reads it) includes JSON lines,
// under a data format flag's value ("auto", "jsonl"; anything else: no).
bool reads_json_lines(const std::filesystem::path& input, const std::string& format);
// --text-field given where none of the inputs is read as JSON lines (it would be ignored): refused,
// naming them.
void check_text_field_read(const std::vector<std::string>& inputs, const std::string& format,
                           const std::string& field);

struct TextBlock {
  std::string_view text;  // valid UTF-8
  bool ends_document;     // the last block of its document
  const std::string* where;  // file (and line) for messages
  bool trained = true;  // false: a prompt, whose tokens are not predicted in the loss
  bool eos_trained = true;  // the EOS after the document (ends_document) is predicted in the loss
};

class TextCorpus {
 public:
  TextCorpus(const std::filesystem::path& input, const CorpusOptions& o);
  int64_t total_bytes() const { return total_bytes_; }
  // One plain text file: a single document (the `oomb tokenize` contract adds nothing to it).
  bool single_document() const { return files_.size() == 1 && !jsonl_[0]; }
  // Visits every block in order. Errors name the file (and line for JSON lines).
  void for_each(const std::function<void(const TextBlock&)>& fn) const;
  const std::vector<std::filesystem::path>& files() const { return files_; }

 private:
  CorpusOptions o_;
  std::vector<std::filesystem::path> files_;
  std::vector<bool> jsonl_;
  int64_t total_bytes_ = 0;
};

// The readers behind TextCorpus, over any stream; `name` names it in errors.
void read_text_stream(std::istream& in, const std::string& name, const CorpusOptions& o,
                      const std::function<void(const TextBlock&)>& fn);
void read_jsonl_stream(std::istream& in, const std::string& name, const CorpusOptions& o,
                       const std::function<void(const TextBlock&)>& fn);

// Offset of the last cut point of s in [from, until), or 0 if none.
size_t last_cut_point(std::string_view s, size_t from, size_t until);

}  // namespace oomb
