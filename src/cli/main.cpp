// oomb: train LLMs on million-token contexts with little GPU memory.
#include <csignal>
#include <cstring>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <iostream>
#include <regex>

#include "cli/commands.h"
#include "cli/config_file.h"
#include "core/error.h"
#include "dist/mpi_comm.h"

// CLI11's words for a flag given twice ("--steps: At Most 1 required but received 2"), as ours.
static std::string given_once(const std::string& what) {
  static const std::regex twice("^(\\S+): At Most 1 required but received ([0-9]+)$");
  std::smatch m;
  if (!std::regex_match(what, m, twice)) return what;
  return fmt::format("{}: given {} times; give it once", m[1].str(),
                     m[2].str());
}

// An error under mpirun: every rank prints it with its rank, then the job ends (no rank is left
// waiting in a collective).
static int fail_run(const char* what) {
  if (oomb::mpi_active()) {
    // one write per line, so that the ranks' lines do not interleave
    std::cerr << ("oomb: error: rank " + std::to_string(oomb::mpi_rank()) + ": " + what + "\n") << std::flush;
    oomb::mpi_abort(1);
  }
  std::cerr << "oomb: error: " << what << std::endl;
  return 1;
}

int main(int argc, char** argv) {
  // past a file-size limit (ulimit -f) a write fails with EFBIG, which the writer reports naming the
  // file, instead of the process ending without a word
  ::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"oomb: chunk-recurrent long-context LLM training", "oomb"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("oomb ") + OOMB_VERSION);
  const std::vector<oomb::cli::Command> cmds = {oomb::cli::add_init(app), oomb::cli::add_train(app),
                                                  oomb::cli::add_plan(app), oomb::cli::add_tokenize(app),
                                                  oomb::cli::add_generate(app), oomb::cli::add_merge(app),
                                                  oomb::cli::add_eval(app)};
  if (argc > 1 && argv[1][0] != '-') {  // the first word names the command: say so when it names none
    std::string names;
    bool known = false;
    for (const auto& c : cmds) {
      known = known || c.sub->get_name() == argv[1];
      names += (names.empty() ? "" : ", ") + c.sub->get_name();
    }
    if (!known) {
      std::cerr << "oomb: error: '" << argv[1] << "' is not a command; the commands are " << names
                << " (oomb --help)" << std::endl;
      return 2;
    }
  }
  for (const auto& c : cmds) {
    oomb::cli::add_config_flag(c.sub);
    for (CLI::Option* o : c.sub->get_options())  // (a path, a name or a choice: never empty)
      if (o->get_type_name().rfind("TEXT", 0) == 0) o->check(oomb::cli::non_empty());
  }
  oomb::cli::ExpandedArgs ex;
  try {  // --config FILE: the file's flags join the arguments (cli/config_file.h)
    ex = oomb::cli::expand_config(app, std::vector<std::string>(argv, argv + argc));
  } catch (const oomb::Error& e) {
    const std::string cmd = argc > 1 && argv[1][0] != '-' ? std::string(" ") + argv[1] : "";
    std::cerr << "oomb: error: " << e.what() << " (oomb" << cmd << " --help)" << std::endl;
    return 2;
  }
  if (!ex.ignored.empty())
    std::cerr << "oomb: note: --config " << ex.config << ": train's flags that plan does not take, passed over: "
              << fmt::format("{}", fmt::join(ex.ignored, ", ")) << std::endl;
  std::vector<char*> args;
  for (std::string& s : ex.args) args.push_back(s.data());
  try {
    app.parse(int(args.size()), args.data());
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    // what CLI11 refuses while reading the command line (an unknown or repeated flag, a value its
    // check refuses, a required one missing): exit status 2, as for an unknown command or a bad
    // --config, whatever CLI11's own code for it
    std::string help = "oomb --help";
    for (const auto& c : cmds)
      if (c.sub->parsed()) help = "oomb " + c.sub->get_name() + " --help";
    std::cerr << "oomb: error: " << given_once(e.what()) << " (" << help << ")" << std::endl;
    if (!ex.config.empty()) std::cerr << "oomb: note: flags were also read from --config " << ex.config << std::endl;
    return 2;
  }
  try {
    for (const auto& c : cmds)
      if (c.sub->parsed()) return c.run();
  } catch (const oomb::Error& e) {
    return fail_run(e.what());
  } catch (const std::exception& e) {  // e.g. std::bad_alloc, std::filesystem::filesystem_error
    return fail_run(e.what());
  }
  return 0;
}
