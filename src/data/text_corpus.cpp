#include "data/text_corpus.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/visible_files.h"

namespace oomb {

namespace fs = std::filesystem;

TextFormat text_format_parse(const std::string& s) {
  if (s == "auto") return TextFormat::Auto;
  if (s == "text") return TextFormat::Text;
  if (s == "jsonl") return TextFormat::Jsonl;
  fail("--input-format: '{}' is not one of auto, text, jsonl", s);
}

// A JSON-lines record's error: nlohmann's "parse error at line 1, column N" is the record's column N
// (the line is the file's, named before it).
static std::string record_error(const nlohmann::json::exception& e) {
  const std::string m = e.what(), at = "parse error at line 1, ";
  const size_t p = m.find(at);
  return p == std::string::npos ? m : m.substr(p + at.size());
}

// A first record that does not read as one: a file holding one JSON document (an array of records,
// or an object over several lines) rather than JSON lines says so.
static std::string whole_document_hint(const std::string& line, int64_t docs) {
  const size_t at = line.find_first_not_of(" \t");
  if (docs > 0 || at == std::string::npos || (line[at] != '[' && line.find_first_not_of(" \t{", at) != std::string::npos))
    return "";
  return " (the file looks like one JSON document, not JSON lines, one record per line: convert it, e.g. jq -c "
         "'.[]' FILE > FILE.jsonl)";
}

static std::string lower_extension(const fs::path& p) {
  std::string e = p.extension().string();
  std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return e;
}
static bool is_jsonl_name(const fs::path& p) {
  const std::string e = lower_extension(p);
  return e == ".jsonl" || e == ".ndjson" || e == ".json";  // (datasets' to_json writes JSON lines as .json)
}
static bool is_text_name(const fs::path& p) {
  const std::string e = lower_extension(p);
  return e == ".txt" || e == ".text";
}

TextCorpus::TextCorpus(const fs::path& input, const CorpusOptions& o) : o_(o) {
  std::error_code ec;
  if (!o_.messages_field.empty() && !o_.chat_template) {
    OOMB_CHECK(!o_.chat_template_path.empty(), "--messages-field needs a chat template: give --chat-template, or a "
               "tokenizer whose directory holds one");
    o_.chat_template = ChatTemplate::load(o_.chat_template_path, o_.tokenizer_path);
  }
  OOMB_CHECK(fs::exists(input, ec), "{}: no such file or directory", input.string());
  if (fs::is_directory(input, ec)) {
    files_ = visible_files(input);
    OOMB_CHECK(!files_.empty(), "{}: the directory holds no files", input.string());
    if (o.format == TextFormat::Auto)  // (a README or a LICENSE beside the data is not data)
      for (const auto& f : files_) {
        const std::string e = lower_extension(f);
        OOMB_CHECK(is_text_name(f) || is_jsonl_name(f), "{}: {} is neither text (.txt) nor JSON lines (.jsonl, "
                   ".ndjson, .json){}; move it out of the directory, or name the format (train's --data-format, "
                   "tokenize's --input-format: text reads every file as text)", input.string(), f.string(),
                   e == ".gz" || e == ".zst" || e == ".xz" || e == ".bz2" || e == ".zip" ? " but compressed: decompress it" : "");
      }
  } else {
    OOMB_CHECK(fs::is_regular_file(input, ec), "{}: not a regular file or directory", input.string());
    files_.push_back(input);
  }
  for (const auto& f : files_) {
    const int64_t size = int64_t(fs::file_size(f, ec));
    OOMB_CHECK(!ec, "{}: cannot read its size: {}", f.string(), ec.message());
    OOMB_CHECK(size > 0, "{}: empty file (no text to tokenize)", f.string());
    total_bytes_ += size;
    jsonl_.push_back(o.format == TextFormat::Jsonl || (o.format == TextFormat::Auto && is_jsonl_name(f)));
    OOMB_CHECK(jsonl_.back() || !o.masked(), "{}: {} read JSON lines (a .jsonl, .ndjson or .json name, or the "
               "jsonl format flag: train's --data-format, tokenize's --input-format); this file would be read as "
               "plain text", f.string(),
               o.messages_field.empty() ? "--prompt-field and --completion-field" : "--messages-field");
  }
}

bool reads_json_lines(const fs::path& input, const std::string& format) {
  if (format == "jsonl") return true;
  if (format != "auto") return false;
  std::error_code ec;
  if (!fs::is_directory(input, ec)) return is_jsonl_name(input);
  const std::vector<fs::path> files = visible_files(input);
  return std::any_of(files.begin(), files.end(), is_jsonl_name);
}

void check_text_field_read(const std::vector<std::string>& inputs, const std::string& format,
                           const std::string& field) {
  for (const std::string& in : inputs)
    if (reads_json_lines(in, format)) return;
  fail("--text-field {}: none of the data ({}) is read as JSON lines (a .jsonl, .ndjson or .json name, or the jsonl "
       "format flag: train's --data-format, tokenize's --input-format), so the field would be ignored",
       field, fmt::join(inputs, ", "));
}

size_t last_cut_point(std::string_view s, size_t from, size_t until) {
  for (size_t i = std::min(until, s.size()); i-- > std::max<size_t>(from, 1);)
    if (s[i - 1] == '\n' && is_cut_point(s, i)) return i;
  return 0;
}

// Reads in blocks; emits everything up to the last cut point of what is buffered, keeps the rest.
// The kept rest has no cut point, so only newly read bytes are searched. Without cuts, or with
// none found, the buffer grows until the file ends.
void read_text_stream(std::istream& f, const std::string& where, const CorpusOptions& o,
                      const std::function<void(const TextBlock&)>& fn) {
  std::string buf, fixed;
  int64_t line0 = 1, offset0 = 0;
  for (;;) {
    const size_t had = buf.size();
    buf.resize(had + size_t(o.block_bytes));
    f.read(buf.data() + had, o.block_bytes);
    buf.resize(had + size_t(f.gcount()));
    const bool eof = f.eof();
    OOMB_CHECK(eof || f.good(), "{}: read error", where);
    if (eof && buf.empty()) return;  // an empty stream (files are checked for this before)
    // a cut point needs the whole character after it: the last 3 bytes wait for the next read
    const size_t cut = eof ? buf.size() : o.allow_cuts && buf.size() > 3 ? last_cut_point(buf, had > 3 ? had - 3 : 1, buf.size() - 3) : 0;
    if (cut == 0) continue;
    std::string_view block(buf.data(), cut);
    if (o.utf8 == Utf8Errors::Strict) {
      utf8_check(block, where, line0, offset0);
    } else if (utf8_first_invalid(block) != block.size()) {
      // a cut never splits a sequence (it follows '\n'), so blocks repair independently
      fixed = utf8_replace_invalid(block);
      block = fixed;
    }
    line0 += std::count(buf.data(), buf.data() + cut, '\n');
    offset0 += int64_t(cut);
    fn({block, eof, &where});
    if (eof) return;
    buf.erase(0, cut);
  }
}

// The string field `key` of a JSON-lines record; errors name the line and the flag that chooses it.
static const std::string& string_field(const nlohmann::json& j, const std::string& key, const char* flag,
                                       const std::string& where) {
  const auto it = j.find(key);
  OOMB_CHECK(it != j.end(), "{}: the record has no \"{}\" field (choose the field with {})", where, key, flag);
  OOMB_CHECK(it->is_string(), "{}: field \"{}\" is {}, not a string", where, key, it->type_name());
  return it->get_ref<const std::string&>();
}

void read_jsonl_stream(std::istream& f, const std::string& name, const CorpusOptions& o,
                       const std::function<void(const TextBlock&)>& fn) {
  std::string line, where;
  int64_t n = 0, docs = 0;
  while (std::getline(f, line)) {
    ++n;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;  // blank lines separate nothing
    where = fmt::format("{}:{}", name, n);
    if (o.utf8 == Utf8Errors::Strict) utf8_check(line, name, n);
    else line = utf8_replace_invalid(line);
    if (!o.messages_field.empty()) {  // (keys in their order: a template may print a record's tools)
      nlohmann::ordered_json j;
      try {
        j = nlohmann::ordered_json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        fail("{}: not valid JSON: {}{}", where, record_error(e), whole_document_hint(line, docs));
      }
      OOMB_CHECK(j.is_object(), "{}: a JSON-lines record must be an object, got {}{}", where, j.type_name(),
                 whole_document_hint(line, docs));
      ++docs;
      const auto m = j.find(o.messages_field);
      OOMB_CHECK(m != j.end(), "{}: the record has no \"{}\" field (choose the field with --messages-field)", where,
                 o.messages_field);
      const auto t = j.find("tools");
      const std::vector<ChatBlock> blocks =
          o.chat_template->render(*m, t == j.end() ? nlohmann::ordered_json() : *t, where);
      // (a conversation that renders to nothing is no document, as an empty text is none)
      // (the EOS after a conversation only separates it: TRL adds none, the template ends each turn)
      for (size_t b = 0; b < blocks.size(); ++b)
        fn({blocks[b].text, b + 1 == blocks.size(), &where, blocks[b].trained, false});
      continue;
    }
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for numbers like 1e999
      fail("{}: not valid JSON: {}{}", where, record_error(e), whole_document_hint(line, docs));
    }
    OOMB_CHECK(j.is_object(), "{}: a JSON-lines record must be an object, got {}{}", where, j.type_name(),
               whole_document_hint(line, docs));
    ++docs;
    if (!o.prompt_field.empty()) {
      const std::string& prompt = string_field(j, o.prompt_field, "--prompt-field", where);
      const std::string& completion = string_field(j, o.completion_field, "--completion-field", where);
      if (prompt.empty() && completion.empty()) continue;
      if (!prompt.empty()) fn({prompt, completion.empty(), &where, false});
      if (!completion.empty()) fn({completion, true, &where, true});
      continue;
    }
    const std::string& text = string_field(j, o.text_field, "--text-field", where);
    if (!text.empty()) fn({text, true, &where});
  }
  OOMB_CHECK(docs > 0, "{}: no JSON records (only blank lines)", name);
}

void TextCorpus::for_each(const std::function<void(const TextBlock&)>& fn) const {
  for (size_t i = 0; i < files_.size(); ++i) {
    std::ifstream f(files_[i], std::ios::binary);
    OOMB_CHECK(f.good(), "{}: cannot open", files_[i].string());
    if (jsonl_[i]) read_jsonl_stream(f, files_[i].string(), o_, fn);
    else read_text_stream(f, files_[i].string(), o_, fn);
  }
}

}  // namespace oomb
