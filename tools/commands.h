// The commands of `sluice`, one function each, grouped in files by concern:
//   streams.cc  tenant, namespace, stream, shards
//   records.cc  publish, consume
//   groups.cc   group, dead-letters
//   fleet.cc    cluster, feature, brokers, tombstones, members
//   reassign.cc stream reassign, broker drain
//   token.cc    token hash (no node involved)
//   caches.cc   cache create, drop, and its keys
// Each takes the words after its name, parses them (command_line.h) before it sends
// anything, and returns the exit status (0; usage errors exit 2, failures exit 1).
#pragma once

#include <boost/json.hpp>

#include <string>
#include <vector>

#include "client.h"

namespace sluice::cli {

using Words = std::vector<std::string>;

int cmd_tenant(Client& c, const Words& words);
int cmd_namespace(Client& c, const Words& words);
int cmd_stream(Client& c, const Words& words);
int cmd_shards(Client& c, const Words& words);
int cmd_publish(Client& c, const Words& words);
int cmd_consume(Client& c, const Words& words);
int cmd_group(Client& c, const Words& words);
int cmd_dead_letters(Client& c, const Words& words);
int cmd_cluster(Client& c, const Words& words);
int cmd_feature(Client& c, const Words& words);
int cmd_brokers(Client& c, const Words& words);
int cmd_tombstones(Client& c, const Words& words);
int cmd_members(Client& c, const Words& words);
int cmd_broker(Client& c, const Words& words);    // reassign.cc: broker drain
int reassign(Client& c, const Words& words);      // reassign.cc: stream reassign
int cmd_token(const Words& words);                // token.cc: token hash (offline)
int cmd_cache(Client& c, const Words& words);
int cmd_counter(Client& c, const Words& words);  // counters.cc

// One JSON value on one line of standard output.
void print_json(const boost::json::value& v);

}  // namespace sluice::cli
