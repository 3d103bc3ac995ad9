#include "cli_options.h"

#include <boost/program_options.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "config.h"
#include "sluice/levels.h"
#include "sluice/plugin.h"
#include "sluice/types.h"

namespace po = boost::program_options;

namespace sluice::core {
namespace {

constexpr const char* kUsageLine = "Usage: sluiced [--config FILE] [--set KEY=VALUE]... [options]";

constexpr const char* kUsage = R"(Usage: sluiced [--config FILE] [--set KEY=VALUE]... [options]

Runs a Sluice node. With no --config, runs the embedded default: one process with the
controller and broker roles, raft-meta with a single member, fs-storage under ./data and
the HTTP API on 127.0.0.1:8080.

Options:
  --config FILE      read configuration keys from FILE (key = value lines, # comments)
  --set KEY=VALUE    override one key (repeatable; wins over the file)
  --print-config     print the effective configuration and exit
  --help-config      list every configuration key with its default and meaning
  admin list-data    (offline) list the shard incarnation directories in data.dir
  admin delete-data TENANT/NS/STREAM --up-to N
                     (offline) an operator's delete: remove every incarnation <= N of the
                     stream from this node's disk, with the crash-safe delete protocol
  admin rebuild-metadata
                     (offline, raft-meta controllers) set this member's Raft log and
                     snapshots aside so that its next start, with metadata.join set,
                     rebuilds its catalog from the leader's snapshot and log
  probe-peer HOST:PORT [--cluster-id ID]
                     connect to a broker's peer transport (transport.address), exchange
                     hellos and ping it; prints the peer's node id and directory.id, or
                     the error (exit 1). The hello carries ID, else the cluster.id in
                     data.dir's meta.properties (read only; the node may be running)
  --version          print the version and exit
  -h, --help         show this help

An unknown option or argument is refused (exit 2); options are never abbreviated.

Exit status: 0 after a clean shutdown, 1 when the node cannot start or fails, 2 for a
usage or configuration error. See docs/configuration.md and docs/operations.md.
)";

// Long options exactly as spelled: no prefix guessing (`--conf` is not `--config`).
constexpr int kStyle = po::command_line_style::default_style & ~po::command_line_style::allow_guessing;

[[noreturn]] void usage_error(const std::string& msg, const char* usage_line = kUsageLine) {
  std::fprintf(stderr, "sluiced: %s\n%s\n", msg.c_str(), usage_line);
  std::exit(2);
}

// "unknown option '--name'" for an option word (without its "=value"), else
// "unexpected argument 'word'".
std::string refusal(const std::string& word) {
  if (!word.starts_with("-")) return "unexpected argument '" + word + "'";
  return "unknown option '" + word.substr(0, word.find('=')) + "'";
}

// The admin subcommand and what follows it (global options already removed).
std::vector<std::string> parse_admin(const std::vector<std::string>& rest) {
  static constexpr const char* kAdminUsage =
      "Usage: sluiced [options] admin list-data | delete-data TENANT/NS/STREAM --up-to N | rebuild-metadata";
  if (rest.size() < 2) usage_error("admin needs a subcommand", kAdminUsage);
  const std::string& sub = rest[1];
  const std::vector<std::string> args(rest.begin() + 2, rest.end());
  if (sub == "list-data" || sub == "rebuild-metadata") {
    const std::string line = "Usage: sluiced [options] admin " + sub;
    if (!args.empty()) usage_error("admin " + sub + ": " + refusal(args[0]), line.c_str());
    return {"admin", sub};
  }
  if (sub == "delete-data") {
    static constexpr const char* kLine = "Usage: sluiced [options] admin delete-data TENANT/NS/STREAM --up-to N";
    po::options_description opts;
    opts.add_options()("up-to", po::value<std::string>(), "")("stream", po::value<std::vector<std::string>>(), "");
    po::positional_options_description pos;
    pos.add("stream", -1);
    po::variables_map vm;
    try {
      po::store(po::command_line_parser(args).options(opts).positional(pos).style(kStyle).run(), vm);
    } catch (const po::error& e) {
      usage_error(std::string("admin delete-data: ") + e.what(), kLine);
    }
    const auto streams = vm.count("stream") ? vm["stream"].as<std::vector<std::string>>() : std::vector<std::string>{};
    if (streams.empty()) usage_error("admin delete-data needs TENANT/NS/STREAM", kLine);
    if (streams.size() > 1) usage_error("admin delete-data: unexpected argument '" + streams[1] + "'", kLine);
    if (!vm.count("up-to")) usage_error("admin delete-data needs --up-to N", kLine);
    return {"admin", sub, streams[0], "--up-to", vm["up-to"].as<std::string>()};
  }
  usage_error("admin: unknown subcommand '" + sub + "'", kAdminUsage);
}

}  // namespace

CommandLine parse_command_line(int argc, char** argv) {
  CommandLine out;
  po::options_description opts;
  opts.add_options()
      ("help,h", "")
      ("version", "")
      ("help-config", "")
      ("print-config", "")
      ("config", po::value<std::string>(&out.config_file), "")
      ("set", po::value<std::vector<std::string>>(&out.overrides), "")
      ("rest", po::value<std::vector<std::string>>(), "");
  po::positional_options_description pos;
  pos.add("rest", -1);
  std::vector<std::string> rest;  // the positionals and the options global parsing left alone, in order
  po::variables_map vm;
  try {
    // Unregistered options are kept here and judged below: after `admin`, they belong to
    // the subcommand (delete-data's --up-to).
    auto parsed = po::command_line_parser(argc, argv).options(opts).positional(pos).style(kStyle)
                      .allow_unregistered().run();
    rest = po::collect_unrecognized(parsed.options, po::include_positional);
    po::store(parsed, vm);
    po::notify(vm);
  } catch (const po::error& e) {
    usage_error(e.what());
  }
  if (vm.count("help")) {
    std::fputs(kUsage, stdout);
    std::exit(0);
  }
  if (vm.count("version")) {
    std::printf("sluiced %s (metadata level %u, plugin ABI %u)\n", SLUICE_VERSION, kBuildMetadataLevel.value(),
                kPluginAbiVersion);
    std::exit(0);
  }
  if (vm.count("help-config")) {
    for (const auto& k : config_keys())
      std::printf("%-32s default: %-20s %s\n", std::string(k.key).c_str(),
                  k.default_value.empty() ? "(none)" : std::string(k.default_value).c_str(),
                  std::string(k.doc).c_str());
    std::exit(0);
  }
  out.print_config = vm.count("print-config") > 0;
  if (rest.empty()) return out;
  if (rest[0] == "probe-peer") {
    static constexpr const char* kLine = "Usage: sluiced [options] probe-peer HOST:PORT [--cluster-id ID]";
    po::options_description popts;
    popts.add_options()("cluster-id", po::value<std::string>(), "")("address", po::value<std::vector<std::string>>(), "");
    po::positional_options_description ppos;
    ppos.add("address", -1);
    po::variables_map pvm;
    try {
      const std::vector<std::string> args(rest.begin() + 1, rest.end());
      po::store(po::command_line_parser(args).options(popts).positional(ppos).style(kStyle).run(), pvm);
    } catch (const po::error& e) {
      usage_error(std::string("probe-peer: ") + e.what(), kLine);
    }
    const auto addrs = pvm.count("address") ? pvm["address"].as<std::vector<std::string>>() : std::vector<std::string>{};
    if (addrs.empty()) usage_error("probe-peer needs HOST:PORT", kLine);
    if (addrs.size() > 1) usage_error("probe-peer: unexpected argument '" + addrs[1] + "'", kLine);
    out.probe = {addrs[0], pvm.count("cluster-id") ? pvm["cluster-id"].as<std::string>() : std::string()};
    return out;
  }
  if (rest[0] != "admin") usage_error(refusal(rest[0]));
  out.admin = parse_admin(rest);
  return out;
}

}  // namespace sluice::core
