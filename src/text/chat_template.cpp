#include "text/chat_template.h"

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "text/jinja/template.h"

namespace oomb {

namespace fs = std::filesystem;
using jinja::Value;

namespace {

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  OOMB_CHECK(f.good(), "{}: cannot open", p.string());
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Value read_json_object(const fs::path& p) {
  Value v;
  try {
    v = Value::parse(read_file(p));
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON: {}", p.string(), e.what());
  }
  OOMB_CHECK(v.is_object(), "{}: not a JSON object", p.string());
  return v;
}

// A special token as a tokenizer file has it: a string or an AddedToken ({"content": ...}); null if neither
Value token_text(const Value& v) {
  if (v.is_string()) return v;
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"];
  return nullptr;
}

// The tokenizer's special tokens, as transformers hands them to a chat template: bos, eos, unk, sep,
// pad, cls and mask tokens and additional_special_tokens, from tokenizer_config.json; a
// special_tokens_map.json beside a config without added_tokens_decoder (one of before transformers
// 4.34) overrides them, as transformers reads it there
Value special_tokens_in(const fs::path& dir) {
  Value out = Value::object();
  std::error_code ec;
  const auto take = [&](const Value& config) {
    for (const char* k : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
      const auto it = config.find(k);
      if (it != config.end() && !token_text(*it).is_null()) out[k] = token_text(*it);
    }
    const auto extra = config.find("additional_special_tokens");
    if (extra != config.end() && extra->is_array()) {
      Value list = Value::array();
      for (const Value& t : *extra)
        if (!token_text(t).is_null()) list.push_back(token_text(t));
      out["additional_special_tokens"] = list;
    }
  };
  const Value config = fs::exists(dir / "tokenizer_config.json", ec) ? read_json_object(dir / "tokenizer_config.json")
                                                                     : Value::object();
  take(config);
  if (!config.contains("added_tokens_decoder") && fs::exists(dir / "special_tokens_map.json", ec))
    take(read_json_object(dir / "special_tokens_map.json"));
  return out;
}

// Values nested past this are refused before any copy (which recurses) could overflow the stack.
void check_nesting(const Value& v, const std::string& where) {
  std::vector<std::pair<const Value*, int>> todo{{&v, 0}};
  while (!todo.empty()) {
    const auto [x, d] = todo.back();
    todo.pop_back();
    OOMB_CHECK(d <= 256, "{}: a value nested more than 256 deep", where);
    if (x->is_array() || x->is_object())
      for (const Value& y : *x) todo.emplace_back(&y, d + 1);
  }
}

fs::path dir_of(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec) ? p : p.parent_path().empty() ? fs::path(".") : p.parent_path();
}

}  // namespace

std::shared_ptr<const ChatTemplate> ChatTemplate::load(const fs::path& path, const fs::path& tokenizer) {
  std::error_code ec;
  OOMB_CHECK(fs::exists(path, ec), "chat template {}: no such file or directory", path.string());
  const std::string file = path.filename().string();
  const bool model_files = fs::is_directory(path, ec) || file == "tokenizer_config.json" || file == "tokenizer.json";
  const fs::path dir = dir_of(path);
  // the special tokens: the tokenizer's (a template file alone brings none)
  const Value special = model_files         ? special_tokens_in(dir)
                        : tokenizer.empty() ? Value::object()
                                            : special_tokens_in(dir_of(tokenizer));
  if (!model_files) return std::make_shared<ChatTemplate>(read_file(path), path.string(), special);
  std::shared_ptr<ChatTemplate> out;
  const fs::path config_path = file == "tokenizer_config.json" ? path : dir / "tokenizer_config.json";
  const Value config = fs::exists(config_path, ec) ? read_json_object(config_path) : Value::object();
  if (file != "tokenizer_config.json" && fs::exists(dir / "chat_template.jinja", ec)) {
    out = std::make_shared<ChatTemplate>(read_file(dir / "chat_template.jinja"), (dir / "chat_template.jinja").string(),
                                         special);
  } else {
    const auto it = config.find("chat_template");
    OOMB_CHECK(it != config.end() && !it->is_null(), "{}: no chat_template (nor chat_template.jinja beside it); give "
               "one with --chat-template FILE.jinja", fs::exists(config_path, ec) ? config_path.string() : dir.string());
    const std::string name = config_path.string() + " chat_template";
    if (it->is_string()) {
      out = std::make_shared<ChatTemplate>(it->get<std::string>(), name, special);
    } else {  // a list of {"name", "template"}: "default", and "tool_use" for records with tools
      OOMB_CHECK(it->is_array(), "{}: a string or a list of named templates, not {}", name, it->type_name());
      std::string dflt, tool_use;
      for (const Value& t : *it) {
        OOMB_CHECK(t.is_object() && t.contains("name") && t["name"].is_string() && t.contains("template") &&
                   t["template"].is_string(), "{}: each item needs a string \"name\" and \"template\"", name);
        if (t["name"] == "default") dflt = t["template"].get<std::string>();
        if (t["name"] == "tool_use") tool_use = t["template"].get<std::string>();
      }
      OOMB_CHECK(!dflt.empty(), "{}: no template named \"default\"", name);
      out = std::make_shared<ChatTemplate>(dflt, name + " default", special);
      if (!tool_use.empty()) out->tool_use_ = std::make_unique<jinja::Template>(tool_use, name + " tool_use");
    }
  }
  // newer transformers save the named ones beside it: additional_chat_templates/NAME.jinja
  const fs::path tool_use = dir / "additional_chat_templates" / "tool_use.jinja";
  if (!out->tool_use_ && file != "tokenizer_config.json" && fs::exists(tool_use, ec))
    out->tool_use_ = std::make_unique<jinja::Template>(read_file(tool_use), tool_use.string());
  return out;
}

ChatTemplate::ChatTemplate(std::string source, std::string name, Value special_tokens)
    : name_(std::move(name)),
      default_(std::make_unique<jinja::Template>(source, name_)),
      special_(std::move(special_tokens)) {}

ChatTemplate::~ChatTemplate() = default;

std::string ChatTemplate::text(const jinja::Template& t, Value messages, const Value& tools,
                               bool add_generation_prompt, std::vector<std::pair<size_t, size_t>>* spans) const {
  Value vars = special_;  // (as transformers: tools and documents always there, None when not given)
  vars["messages"] = std::move(messages);
  vars["add_generation_prompt"] = add_generation_prompt;
  vars["tools"] = tools;
  vars["documents"] = nullptr;
  jinja::Rendered r = t.render(vars);
  if (spans) *spans = std::move(r.generation);
  return std::move(r.text);
}

std::string ChatTemplate::prompt(const Value& messages, const Value& tools, const std::string& where) const {
  OOMB_CHECK(messages.is_array(), "{}: the messages must be a list, not {}", where, messages.type_name());
  check_nesting(messages, where), check_nesting(tools, where);
  OOMB_CHECK(tools.is_null() || tools.is_array(), "{}: \"tools\" must be a list, not {}", where, tools.type_name());
  try {
    return text(!tools.is_null() && tool_use_ ? *tool_use_ : *default_, messages, tools, true);
  } catch (const Error& e) {
    fail("{}: {}", where, e.what());
  }
}

std::vector<ChatBlock> ChatTemplate::render(const Value& messages, const Value& tools, const std::string& where) const {
  OOMB_CHECK(messages.is_array(), "{}: the messages must be a list, not {}", where, messages.type_name());
  check_nesting(messages, where), check_nesting(tools, where);
  for (size_t i = 0; i < messages.size(); ++i)
    OOMB_CHECK(messages[i].is_object() && messages[i].contains("role") && messages[i]["role"].is_string(),
               "{}: message {} needs a string \"role\"", where, i);
  OOMB_CHECK(tools.is_null() || tools.is_array(), "{}: \"tools\" must be a list, not {}", where, tools.type_name());
  const jinja::Template& t = !tools.is_null() && tool_use_ ? *tool_use_ : *default_;
  std::vector<std::pair<size_t, size_t>> spans;
  std::string full;
  try {
    full = text(t, messages, tools, false, &spans);
    if (!t.has_generation()) {
      for (size_t i = 0; i < messages.size(); ++i) {
        if (messages[i]["role"] != "assistant") continue;
        const std::string start = text(t, Value(messages.begin(), messages.begin() + std::ptrdiff_t(i)), tools, true);
        const std::string end = text(t, Value(messages.begin(), messages.begin() + std::ptrdiff_t(i + 1)), tools, false);
        OOMB_CHECK(full.starts_with(start) && full.starts_with(end) && start.size() <= end.size(),
                   "the template renders the conversation before message {} (an assistant's) otherwise than as the "
                   "start of the whole, so what that message writes cannot be told from the rest; give a template "
                   "with {{% generation %}} marks around what the assistant writes (--chat-template FILE.jinja)", i);
        if (end.size() > start.size()) spans.emplace_back(start.size(), end.size());
      }
    }
  } catch (const Error& e) {
    fail("{}: {}", where, e.what());
  }
  std::vector<ChatBlock> out;
  size_t at = 0;
  auto add = [&](size_t b, size_t e, bool trained) {
    if (e <= b) return;
    if (!out.empty() && out.back().trained == trained) out.back().text += full.substr(b, e - b);
    else out.push_back({full.substr(b, e - b), trained});
  };
  for (const auto& [b, e] : spans) {
    OOMB_CHECK(b >= at && e <= full.size(), "{}: {}'s generation blocks overlap", where, name_);
    add(at, b, false);
    add(b, e, true);
    at = e;
  }
  add(at, full.size(), false);
  return out;
}

}  // namespace oomb
