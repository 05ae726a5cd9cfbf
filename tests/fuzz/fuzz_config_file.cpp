// fuzz-sources: cli/config_file.cpp
// Feeds bytes as a --config TOML file to expand_config for a small subcommand (an int, a float, a
// string with a choice, a flag, a list): only oomb::Error may come out. Where it expands, every
// added argument is a flag of the subcommand; where those arguments also parse, the resolved
// config (a checkpoint's config.toml) read back through --config gives the same resolved config.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "cli/config_file.h"
#include "core/error.h"
#include "fuzz_check.h"

namespace {
struct Flags {
  int64_t seq_len = 0;
  double lr = 0;
  std::string device = "cpu";
  bool shuffle = false;
  std::vector<int64_t> lengths;
};

std::unique_ptr<CLI::App> make_app(Flags& f) {
  auto app = std::make_unique<CLI::App>("fuzz");
  CLI::App* sub = app->add_subcommand("train");
  sub->add_option("--seq-len", f.seq_len);
  sub->add_option("--lr", f.lr);
  sub->add_option("--device", f.device)->check(CLI::IsMember({"cpu", "sim", "cuda"}));
  sub->add_flag("--shuffle", f.shuffle);
  sub->add_option("--lengths", f.lengths)->delimiter(',');
  oomb::cli::add_config_flag(sub);
  return app;
}

// expand_config then parse; "" when either refuses (a named error, or the flag's own parse error)
std::string resolved(const std::string& file, bool* expanded) {
  Flags f;
  auto app = make_app(f);
  oomb::cli::ExpandedArgs e;
  try {
    e = oomb::cli::expand_config(*app, {"oomb", "train", "--config", file});
  } catch (const oomb::Error&) {
    *expanded = false;
    return "";
  }
  *expanded = true;
  for (size_t i = 2; i < e.args.size(); ++i) {
    if (e.args[i] == "--config") {
      ++i;
      continue;
    }
    const std::string name = e.args[i].substr(0, e.args[i].find('='));
    check(app->get_subcommand("train")->get_option_no_throw(name) != nullptr, "an expanded argument is a flag");
  }
  std::vector<std::string> rev(e.args.rbegin(), e.args.rend() - 1);  // CLI11 parses a reversed vector
  try {
    app->parse(rev);
  } catch (const CLI::Error&) {
    return "";
  }
  return oomb::cli::resolved_config(*app->get_subcommand("train"));
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = [] {
    char t[] = "/tmp/fuzz_config_file.XXXXXX";
    return std::string(mkdtemp(t));
  }();
  const std::string file = dir + "/run.toml", back = dir + "/config.toml";
  std::ofstream(file, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data), std::streamsize(size));
  bool expanded = false;
  const std::string r = resolved(file, &expanded);
  if (r.empty()) return 0;
  std::ofstream(back, std::ios::binary | std::ios::trunc) << r;
  bool again = false;
  check(resolved(back, &again) == r && again, "the resolved config reads back to itself");
  return 0;
}
