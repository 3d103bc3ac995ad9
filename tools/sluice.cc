// sluice: the command-line client, over the REST API (docs/api.md).
//
// `sluice [--url URL] COMMAND [ARGS]`. Every command answers --help. Usage errors (an
// unknown command, option or argument) exit 2 with the usage lines (command_line.h);
// errors from the server are printed as "sluice: <status> <code>: <detail>" and exit 1;
// a network error exits 1, after one retry for idempotent calls only (client.h).
#include <boost/program_options.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "client.h"
#include "commands.h"

namespace po = boost::program_options;
using namespace sluice::cli;

namespace {

constexpr const char* kMainHelp = R"(Usage: sluice [--url URL] [--token TOKEN] [--cacert FILE] [--cert FILE --key FILE] COMMAND [ARGS]

Talks to a Sluice node over HTTP or HTTPS. URL defaults to $SLUICE_URL, else
http://127.0.0.1:8080. For an https:// URL the node's certificate is verified against
--cacert (PEM; default: the system's CAs) and must name the URL's host; --cert and --key
(PEM) present a client certificate to a node that requires one (tls.client_ca_file).
TOKEN defaults to $SLUICE_TOKEN: every request then carries "Authorization: Bearer TOKEN",
which a node with auth.enabled requires (docs/security.md). Prefer $SLUICE_TOKEN: a command
line is visible to other users of the machine. A stream is named TENANT/NAMESPACE/STREAM.

Commands:
  cluster                         show the cluster id, backend, node and roles
  tenant create|list|delete       manage tenants
  namespace create|list|delete    manage namespaces
  stream create|list|get|delete   manage streams
  shards STREAM                   show a stream's shards (leader, replicas, in-sync set, ...)
  shards move-leader STREAM N B   make broker B lead shard N (an in-sync replica)
  shards elect STREAM N --unclean --broker B [--yes]   repair a shard without an eligible leader
  stream reassign STREAM --shard K --replicas B1,B2,..  move a shard's copies to other brokers
  broker drain B                  move every shard copy off broker B
  publish STREAM                  publish lines from standard input, one record per line
  consume STREAM                  print records to standard output
  group consume|ack|positions     consumer groups: at-least-once delivery with acks
  dead-letters list|replay        a group's dead letters
  feature list|finalize NAME      fleet features (finalizing is one-way)
  brokers                         registered brokers and their features
  tombstones                      deleted names and the incarnations they cover
  members list|remove ID          metadata members (raft-meta): role, level, held, state
  token hash --roles R [TOKEN|-]  print a tokens-file line for TOKEN (or a new random one)
  cache create|drop|get|put|delete|list   caches and their keys (values with a TTL)
  counter create|show|list|delete|add|get counters and their keys (level 18)

Run `sluice COMMAND --help` for a command's options. An unknown option or argument is
refused (exit 2); options are never abbreviated.
)";

constexpr const char* kMainUsageLine =
    "Usage: sluice [--url URL] [--token TOKEN] [--cacert FILE] [--cert FILE --key FILE] COMMAND [ARGS]\n";

[[noreturn]] void main_usage_error(const std::string& msg) {
  std::fprintf(stderr, "sluice: %s\n%s", msg.c_str(), kMainUsageLine);
  std::exit(2);
}

using Command = int (*)(Client&, const Words&);

const std::map<std::string, Command>& commands() {
  static const std::map<std::string, Command> table{
      {"cluster", cmd_cluster},       {"tenant", cmd_tenant},         {"namespace", cmd_namespace},
      {"ns", cmd_namespace},          {"stream", cmd_stream},         {"shards", cmd_shards},
      {"shard", cmd_shards},  // `sluice shard elect ...` as issue 11 spells it
      {"publish", cmd_publish},       {"consume", cmd_consume},       {"group", cmd_group},
      {"dead-letters", cmd_dead_letters}, {"feature", cmd_feature},   {"brokers", cmd_brokers},
      {"broker", cmd_broker},         {"cache", cmd_cache},           {"counter", cmd_counter},
      {"tombstones", cmd_tombstones}, {"members", cmd_members},
  };
  return table;
}

}  // namespace

namespace sluice::cli {
void print_json(const boost::json::value& v) { std::cout << boost::json::serialize(v) << "\n"; }
}  // namespace sluice::cli

int main(int argc, char** argv) {
  // The global options end at the first word that is not an option: the command.
  int cmd_at = 1;
  while (cmd_at < argc && argv[cmd_at][0] == '-') {
    const std::string o = argv[cmd_at];
    cmd_at += o == "--url" || o == "--token" || o == "--cacert" || o == "--cert" || o == "--key" ? 2 : 1;
  }
  std::string url = std::getenv("SLUICE_URL") ? std::getenv("SLUICE_URL") : "http://127.0.0.1:8080";
  std::string token = std::getenv("SLUICE_TOKEN") ? std::getenv("SLUICE_TOKEN") : "";
  TlsOptions tls;
  po::options_description global;
  global.add_options()("help,h", "")("url", po::value<std::string>(&url), "")(
      "token", po::value<std::string>(&token), "")("cacert", po::value<std::string>(&tls.cacert), "")(
      "cert", po::value<std::string>(&tls.cert), "")("key", po::value<std::string>(&tls.key), "");
  po::variables_map vm;
  try {
    const std::vector<std::string> words(argv + 1, argv + std::min(cmd_at, argc));
    constexpr int style = po::command_line_style::default_style & ~po::command_line_style::allow_guessing;
    po::store(po::command_line_parser(words).options(global).style(style).run(), vm);
    po::notify(vm);
  } catch (const po::unknown_option& e) {
    main_usage_error("unknown option '" + e.get_option_name() + "'");
  } catch (const po::error& e) {
    main_usage_error(e.what());
  }
  if (vm.count("help")) {
    std::fputs(kMainHelp, stdout);
    return 0;
  }
  if (cmd_at >= argc) {
    std::fputs(kMainHelp, stderr);
    return 2;
  }
  const std::string cmd = argv[cmd_at];
  const Words words(argv + cmd_at + 1, argv + argc);
  if (cmd == "token") return cmd_token(words);  // offline: talks to no node
  auto it = commands().find(cmd);
  if (it == commands().end()) main_usage_error("unknown command '" + cmd + "'");
  set_tls_options(std::move(tls));
  Client c(url, token);
  try {
    return it->second(c, words);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice: unexpected answer from the server: %s\n", e.what());
    return 1;
  }
}
