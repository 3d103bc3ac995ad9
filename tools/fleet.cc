// sluice cluster | feature | brokers | tombstones | members (docs/api.md, "Fleet" and
// "Metadata members"; docs/upgrades.md).
#include <boost/json.hpp>

#include <cstdio>
#include <string>

#include "command_line.h"
#include "commands.h"

namespace sluice::cli {
namespace {

const Usage kCluster{"cluster", "Usage: sluice cluster\n"};
const Usage kBrokers{"brokers", "Usage: sluice brokers\n"};
const Usage kTombstones{"tombstones", "Usage: sluice tombstones\n"};

const Usage kFeature{"feature", R"(Usage: sluice feature list
       sluice feature finalize NAME

Finalizing is one-way. The control plane refuses it (409, with the reason) while a
metadata member is below the feature's level or a serving broker lacks it; see
docs/upgrades.md before finalizing stream_incarnations.
)"};

const Usage kMembers{"members", R"(Usage: sluice members list
       sluice members remove ID

list shows every metadata member with its role, metadata level, held state, applied index
and state hash, and the group's level and level floor. remove takes a member out of the
Raft group (stop its process afterwards); the last voter cannot be removed. Members join
by starting with metadata.join; see docs/upgrades.md.
)"};

int simple_get(Client& c, const Usage& usage, const Words& words, const char* path) {
  Args(usage, words, {});
  print_json(c.call_ok("GET", path));
  return 0;
}

}  // namespace

int cmd_cluster(Client& c, const Words& words) { return simple_get(c, kCluster, words, "/v1/cluster"); }
int cmd_brokers(Client& c, const Words& words) { return simple_get(c, kBrokers, words, "/v1/brokers"); }
int cmd_tombstones(Client& c, const Words& words) { return simple_get(c, kTombstones, words, "/v1/tombstones"); }

int cmd_feature(Client& c, const Words& words) {
  const std::string op = subcommand(kFeature, words);
  if (op == "list") {
    Args(kFeature, rest(words), {});
    print_json(c.call_ok("GET", "/v1/features"));
  } else if (op == "finalize") {
    Args a(kFeature, rest(words), {.min_args = 1, .max_args = 1});
    // Idempotent by the API (docs/api.md, "Fleet"), so it may be re-sent.
    print_json(c.call_ok("POST", "/v1/features/" + encode_segment(a.pos()[0]) + "/finalize", "{}", "application/json",
                         Replay::safe));
  } else {
    usage_error(kFeature, "unknown operation '" + op + "'");
  }
  return 0;
}

int cmd_members(Client& c, const Words& words) {
  const std::string op = subcommand(kMembers, words);
  if (op == "list") {
    Args(kMembers, rest(words), {});
    print_json(c.call_ok("GET", "/v1/metadata/members"));
  } else if (op == "remove") {
    Args a(kMembers, rest(words), {.min_args = 1, .max_args = 1});
    c.call_ok("DELETE", "/v1/metadata/members/" + std::to_string(parse_u64(kMembers, "member id", a.pos()[0])));
    std::printf("member %s removed\n", a.pos()[0].c_str());
  } else {
    usage_error(kMembers, "unknown operation '" + op + "'");
  }
  return 0;
}

}  // namespace sluice::cli
