#include "cli/config_file.h"

#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "core/error.h"

namespace oomb::cli {

namespace {
std::string g_file;                  // the --config file expand_config read
std::vector<std::string> g_flags;    // the flags it gave ("--out")
}  // namespace

std::string config_gave(const std::string& flag) {
  for (const std::string& f : g_flags)
    if (f == flag) return g_file;
  return "";
}

void add_config_flag(CLI::App* sub) {
  sub->add_option("--config", "TOML file of flags (keys: the flags without dashes, e.g. seq-len = 4096); flags "
                  "on the command line win")->configurable(false);
}

// A top-level key's value as written (CLI11's reader keeps neither quotes nor lines): its line and
// the text after "key =", for the checks CLI11 does not make. Lines after a section header are
// passed over (sections are refused by name below).
struct RawValue {
  int line = 0;
  std::string text;
};
static std::map<std::string, std::vector<RawValue>> raw_values(const std::string& file) {
  std::map<std::string, std::vector<RawValue>> out;
  std::ifstream in(file, std::ios::binary);
  std::string line;
  bool in_section = false;
  for (int n = 1; std::getline(in, line); ++n) {
    const size_t a = line.find_first_not_of(" \t");
    if (a == std::string::npos || line[a] == '#') continue;
    if (line[a] == '[') {
      in_section = true;
      continue;
    }
    size_t b = a;
    while (b < line.size() && (std::isalnum(static_cast<unsigned char>(line[b])) || line[b] == '-' || line[b] == '_')) ++b;
    const size_t eq = line.find_first_not_of(" \t", b);
    if (in_section || b == a || eq == std::string::npos || line[eq] != '=') continue;
    const size_t v = line.find_first_not_of(" \t", eq + 1);
    out[line.substr(a, b - a)].push_back({n, v == std::string::npos ? "" : line.substr(v)});
  }
  return out;
}

// Whether a value written as raw, starting with a quote, closes it on its line before any '#'
// (CLI11's reader ends a value at the first '#', inside quotes too).
static bool quote_closes(const std::string& full) {
  const std::string raw = full.substr(0, full.find('#'));
  const char q = raw[0];
  for (size_t i = 1; i < raw.size(); ++i) {
    if (q == '"' && raw[i] == '\\') ++i;
    else if (raw[i] == q) return true;
  }
  return false;
}

// The checks CLI11's reader leaves: a quote that does not close (read as text, quote and all), a key
// given twice, a list for a one-value flag, and a value of another type than the flag's (a flag
// takes true or false, a number is not written as a quoted string).
static void check_raw(const std::string& f, const std::string& name, const std::vector<RawValue>& raw,
                      const CLI::Option& opt) {
  if (raw.empty()) return;
  const std::string where = fmt::format("--config {}: line {}: key '{}'", f, raw[0].line, name);
  OOMB_CHECK(raw.size() == 1, "{}: given again on line {}; give it once", where, raw[1].line);
  const std::string& v = raw[0].text;
  if (v.empty()) return;
  const bool quoted = v[0] == '"' || v[0] == '\'' || v[0] == '`';  // (CLI11 takes a backtick as a quote too)
  OOMB_CHECK(!quoted || v.rfind(std::string(3, v[0]), 0) != 0, "{}: a multi-line string ({}) is not read; write "
             "the value on one line", where, std::string(3, v[0]));
  OOMB_CHECK(!quoted || quote_closes(v), "{}: its quote ({}) does not close on the line before any '#' (the reader "
             "ends a value at '#', inside quotes too)", where, v.substr(0, 1));
  const std::string type = opt.get_type_name().substr(0, opt.get_type_name().find(':'));
  const bool flag = opt.get_expected_min() == 0,
             number = type == "INT" || type == "UINT" || type == "FLOAT" || type == "NUMBER";
  OOMB_CHECK(v[0] != '[' || opt.get_items_expected_max() > 1, "{}: takes one value, not a list{}", where,
             flag ? " (true or false)" : " (a comma-separated list is one string: \"a,b\")");
  std::string bare = quoted ? "" : v.substr(0, v.find('#'));  // (an unquoted value, its comment and spaces aside)
  while (!bare.empty() && (bare.back() == ' ' || bare.back() == '\t' || bare.back() == '\r')) bare.pop_back();
  OOMB_CHECK(!flag || bare == "true" || bare == "false", "{}: a flag takes true or false, not {}", where, v);
  OOMB_CHECK(!number || !quoted, "{}: takes a number, not the string {} (write it without quotes)", where, v);
}

ExpandedArgs expand_config(const CLI::App& app, const std::vector<std::string>& args) {
  ExpandedArgs out{args, ""};
  if (args.size() < 2 || args[1].empty() || args[1][0] == '-') return out;
  CLI::App_p sub;
  try {
    sub = app.get_subcommand_ptr(args[1]);
  } catch (const CLI::Error&) {
    return out;
  }
  if (sub == nullptr) return out;
  for (size_t i = 2; i < args.size(); ++i) {
    std::string file;
    if (args[i] == "--config" && i + 1 < args.size()) file = args[i + 1];
    else if (args[i].rfind("--config=", 0) == 0) file = args[i].substr(9);
    else continue;
    OOMB_CHECK(out.config.empty(), "--config: given twice ({} and {})", out.config, file);
    out.config = file;
  }
  if (out.config.empty()) return out;
  const std::string& f = out.config;
  std::error_code ec;
  OOMB_CHECK(!std::filesystem::is_directory(f, ec), "--config {}: is a directory, not a TOML file", f);
  OOMB_CHECK(std::filesystem::is_regular_file(f, ec), "--config {}: no such file", f);
  const CLI::App* train = nullptr;
  try {
    train = app.get_subcommand_ptr("train").get();
  } catch (const CLI::Error&) {
  }
  std::vector<CLI::ConfigItem> items;
  try {
    items = CLI::ConfigTOML().from_file(f);
  } catch (const CLI::Error& e) {
    fail("--config {}: {}", f, e.what());
  }
  const std::map<std::string, std::vector<RawValue>> raw = raw_values(f);
  std::vector<std::string> from_file;
  for (const CLI::ConfigItem& it : items) {
    if (it.name == "++" || it.name == "--") continue;  // a section's markers; its keys come next
    if (!it.parents.empty())
      fail("--config {}: sections are not read ('{}'): write the flags of oomb {} as top-level keys", f,
           it.fullname(), sub->get_name());
    const CLI::Option* opt = sub->get_option_no_throw("--" + it.name);
    if (opt == nullptr && sub->get_name() == "plan" && train != nullptr && train->get_option_no_throw("--" + it.name)) {
      out.ignored.push_back(it.name);  // (plan reads a train run's file: what the plan does not need)
      continue;
    }
    OOMB_CHECK(opt != nullptr && it.name != "config" && it.name != "help",
               "--config {}: unknown key '{}': not a flag of oomb {} (oomb {} --help lists them)", f, it.name,
               sub->get_name(), sub->get_name());
    if (const auto r = raw.find(it.name); r != raw.end()) check_raw(f, it.name, r->second, *opt);
    bool given = false;  // on the command line, which wins
    for (size_t i = 2; i < args.size() && !given; ++i)
      if (args[i].rfind("--", 0) == 0) given = opt->check_name(args[i].substr(0, args[i].find('=')));
    if (given) continue;
    OOMB_CHECK(!it.inputs.empty(), "--config {}: key '{}' has no value", f, it.name);
    for (const std::string& v : it.inputs) from_file.push_back("--" + it.name + "=" + v);
    g_flags.push_back("--" + it.name);
  }
  g_file = f;
  out.args.insert(out.args.begin() + 2, from_file.begin(), from_file.end());
  return out;
}

std::string resolved_config(const CLI::App& sub) {
  std::istringstream in(sub.config_to_str(false, false));
  std::string out = "# oomb " + sub.get_name() + ": the flags of this run (oomb " + sub.get_name() +
                    " --config FILE repeats it" +
                    (sub.get_name() == "train" ? ": continue it with --resume auto, or repeat it into another "
                                                 "--checkpoint-dir with outputs of its own"
                                               : "") +
                    ")\n";
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("config=", 0) == 0 || line.rfind("resume=", 0) == 0) continue;
    // CLI11 writes a value that reads as a number bare, surrounding spaces and all (" 5", from a
    // quoted string in the file), and TOML trims a bare value: quoted, it reads back as it was
    const size_t eq = line.find('=');
    const std::string v = eq == std::string::npos ? "" : line.substr(eq + 1);
    if (!v.empty() && (std::isspace(static_cast<unsigned char>(v.front())) ||
                       std::isspace(static_cast<unsigned char>(v.back()))) &&
        v.find_first_of("\"'\\[") == std::string::npos)
      line = line.substr(0, eq + 1) + '"' + v + '"';
    out += line + "\n";
  }
  return out;
}

}  // namespace oomb::cli
