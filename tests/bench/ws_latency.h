// sluice-bench's WebSocket phase (issue 13: "WebSocket delivery latency (publish to
// receipt, p50/p99)"): one subscriber follows a one-shard stream over
// GET .../shards/0/subscribe (JSON frames) while one connection publishes one record at a
// time with the given ack; each record's value is its sequence number, and its latency is
// from just before its publish was sent to the arrival of the frame that holds it.
#pragma once

#include <cstdint>
#include <string>

namespace sluice_bench {

struct WsLatencyResult {
  std::uint64_t delivered = 0, published = 0, errors = 0;
  double p50 = 0, p99 = 0, max = 0;  // ms
  std::string first_error;
};

// `shard_path`: /v1/.../streams/{s}/shards/0; `publish_path`: /v1/.../streams/{s}/records?ack=...
WsLatencyResult run_ws_latency(int port, const std::string& shard_path, const std::string& publish_path,
                               int seconds);

}  // namespace sluice_bench
