#include "cli/config_file.h"

#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

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
  OOMB_CHECK(std::filesystem::is_regular_file(f, ec), "--config {}: no such file", f);
  std::vector<CLI::ConfigItem> items;
  try {
    items = CLI::ConfigTOML().from_file(f);
  } catch (const CLI::Error& e) {
    fail("--config {}: {}", f, e.what());
  }
  std::vector<std::string> from_file;
  for (const CLI::ConfigItem& it : items) {
    if (it.name == "++" || it.name == "--") continue;  // a section's markers; its keys come next
    if (!it.parents.empty())
      fail("--config {}: sections are not read ('{}'): write the flags of oomb {} as top-level keys", f,
           it.fullname(), sub->get_name());
    const CLI::Option* opt = sub->get_option_no_throw("--" + it.name);
    OOMB_CHECK(opt != nullptr && it.name != "config" && it.name != "help",
               "--config {}: unknown key '{}': not a flag of oomb {} (oomb {} --help lists them)", f, it.name,
               sub->get_name(), sub->get_name());
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
