// oomb: train LLMs on million-token contexts with little GPU memory.
#include <cstring>
#include <iostream>

#include "cli/commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"oomb: chunk-recurrent long-context LLM training", "oomb"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("oomb ") + OOMB_VERSION);
  const std::vector<oomb::cli::Command> cmds = {oomb::cli::add_init(app), oomb::cli::add_train(app),
                                                  oomb::cli::add_plan(app), oomb::cli::add_tokenize(app),
                                                  oomb::cli::add_generate(app), oomb::cli::add_merge(app)};
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
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (const auto& c : cmds)
      if (c.sub->parsed()) return c.run();
  } catch (const oomb::Error& e) {
    std::cerr << "oomb: error: " << e.what() << std::endl;
    return 1;
  } catch (const std::exception& e) {  // e.g. std::bad_alloc, std::filesystem::filesystem_error
    std::cerr << "oomb: error: " << e.what() << std::endl;
    return 1;
  }
  return 0;
}
