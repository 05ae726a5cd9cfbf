// --config FILE for every subcommand: flags from a TOML file (read with CLI11's own TOML reader,
// CLI::ConfigTOML), one key per flag without its dashes ("seq-len = 4096", "shuffle = true",
// "lengths = [1024, 4096]"). A flag given on the command line wins over the file. (CLI11 2.1's
// set_config reads a file for the main app only, so the file's flags are put into the arguments
// here, before parsing: every check and message of the flag itself applies to them.) What CLI11's
// reader lets through is checked on the lines as written: a quote that does not close, a key given
// twice, a list for a one-value flag, a flag not given true or false, a number written as a quoted
// string. (Debian's TOML libraries were tried as the reader: fuzz_config_file reached undefined
// behaviour in toml++ 3.3.0 and a heap overflow in toml11 3.7.1.) A key that is no flag of the
// command, a section, or a file that does not read is an error naming the file and the key.
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace oomb::cli {

void add_config_flag(CLI::App* sub);

struct ExpandedArgs {
  std::vector<std::string> args;  // argv with the file's flags after the command's name
  std::string config;             // the file read, empty when none
  std::vector<std::string> ignored;  // plan: keys of a train run's file that are no flags of plan
};
// args = argv; args[1] names a subcommand of app (main.cpp has checked it). Records which flags
// the file gave (config_gave). `oomb plan --config` takes a train run's file (a checkpoint's
// config.toml): train's flags that plan has no use for are passed over (ExpandedArgs::ignored).
ExpandedArgs expand_config(const CLI::App& app, const std::vector<std::string>& args);
// The --config file that gave `flag` ("--out") its value in this process's expand_config, or ""
// (not given there, or given on the command line, which wins).
std::string config_gave(const std::string& flag);

// The flags a parsed subcommand was given (by the command line or a --config file), as TOML that
// --config reads back: what a checkpoint keeps as config.toml. --resume is left out: repeating the
// run starts afresh unless the repeat resumes itself.
std::string resolved_config(const CLI::App& sub);

}  // namespace oomb::cli
