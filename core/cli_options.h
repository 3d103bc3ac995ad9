// sluiced's command line: global options, then optionally `admin SUBCOMMAND ...`
// (docs/operations.md, docs/configuration.md).
//
// Parsed with Boost.Program_options, without abbreviations: an unknown option, a stray
// argument or a missing value is never ignored or guessed. It is refused with one line
// on stderr naming it, then the usage line, and exit status 2.
//
// Startup boundary only: parse_command_line may print and exit the process.
#pragma once

#include <string>
#include <vector>

namespace sluice::core {

// What the command line asks sluiced to do.
struct CommandLine {
  std::string config_file;             // --config FILE ("" = none)
  std::vector<std::string> overrides;  // --set KEY=VALUE, in the order given
  bool print_config = false;           // --print-config
  // Empty to run the node. Otherwise "admin", the subcommand and its arguments, checked
  // and normalized: {"admin", "list-data"}, {"admin", "rebuild-metadata"} or
  // {"admin", "delete-data", TENANT/NS/STREAM, "--up-to", N} (N is checked by the command).
  std::vector<std::string> admin;
  // Non-empty for `probe-peer HOST:PORT [--cluster-id ID]`: {address, cluster id or ""}.
  std::vector<std::string> probe;
};

// Parses argv. Answers --help, --version and --help-config itself on stdout and exits 0;
// refuses a usage error as described above (exit 2). Global options may appear anywhere,
// also after `admin SUBCOMMAND`.
CommandLine parse_command_line(int argc, char** argv);

}  // namespace sluice::core
