// sluice-bench's options, shared by its modes (publish_bench.cc parses them), and the modes
// that take them.
#pragma once

#include <string>

namespace sluice_bench {

struct Options {
  std::string url;
  std::string sluiced;
  int connections = 8;
  int seconds = 10;
  int record_bytes = 1024;
  int batch_records = 64;
  int shards = 4;
  int chunk = 0;  // disk reference chunk; default = one request's payload
  std::string dir;
  std::string ack = "leader";
  bool idempotence = true;
  bool fetch = true;  // the publish + tail-fetch phase
  bool json = true;   // the keyless load again, as JSON publishes
  bool websocket = true;  // WebSocket delivery latency (issue 13)
  int brokers = 0;  // 0: the single-node run above; N >= 1: the issue-10 comparison
  int replication_factor = 1;
  int rounds = 5;                 // --rounds: the replicated run's alternating slices
  int failover_kills = 0;         // --failover: kills of the shard leader (issue 11)
  int session_timeout_ms = 3000;  // --session-timeout-ms, for --failover
};

// The default run: the disk reference, then one node's publish phases (publish_single.cc).
int run_publish(const Options& o);

// --brokers N: one broker against N brokers, their loads in alternating rounds
// (publish_replicated.cc).
int run_replicated(const Options& o);

// --failover: kill the leader of a replication-factor-3 shard N times (failover_bench.cc).
int run_failover(const Options& o);

}  // namespace sluice_bench
