// http-api configuration (documented in README.md).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tls.h"

namespace sluice {
class PluginHost;
}

namespace sluice::http_api {

struct HttpConfig {
  std::string address = "127.0.0.1";
  std::uint16_t port = 8080;           // 0 = ephemeral (see ApiServer::port())
  unsigned threads = 2;                // io_context threads
  unsigned admin_threads = 16;         // thread pool for blocking catalog calls
  std::size_t max_body_bytes = 8u << 20;
  std::chrono::milliseconds max_wait{30000};       // long-poll cap
  std::chrono::milliseconds idle_timeout{60000};   // keep-alive idle timeout
  // From a request's first byte to its last (header and body): a client that trickles a
  // request (slow-loris) is cut off after this long.
  std::chrono::milliseconds request_timeout{30000};
  std::size_t max_header_bytes = 16 * 1024;
  // Open connections per listener. At the limit a new connection evicts one without a
  // request in progress (idle first, then reading, then not yet heard from; oldest first:
  // README "Limits"); if every connection is busy with a request, the new one is answered
  // 503 and closed.
  std::size_t max_connections = 1024;
  // Long polls (fetches with wait_ms) parked on one shard at a time; more get 503.
  std::size_t max_waiters_per_shard = 1000;
  // A publish with no other request in flight may be written and synced on the I/O thread
  // that read it (docs/architecture.md "Inline appends").
  bool inline_appends = true;
  // quota.publish_bytes_per_s: request-body bytes per second each tenant may publish through
  // this broker (0: no quota).
  std::uint64_t publish_bytes_per_s = 0;
  std::size_t fetch_max_bytes = 1u << 20;          // max_bytes passed to Node::fetch
  std::size_t max_records = 100000;                // broker.max_records_per_publish
  // stream.default_replication_factor: what a create body without "replication_factor"
  // asks for (1..kMaxReplicationFactor). Its min_insync default follows it.
  std::uint32_t default_replication_factor = 1;
  // WebSocket subscriptions (docs/api.md "Subscribe").
  std::chrono::milliseconds ws_idle_timeout{60000};   // nothing received (not even a pong)
  std::chrono::milliseconds ws_stall_timeout{30000};  // no credit / a write pending this long
  std::size_t ws_send_buffer_bytes = 1u << 20;        // frames queued per subscription
  // Browser origins (scheme://host[:port]) whose pages may open a WebSocket here besides
  // the broker's own; "*": any (auth.h origin_allowed).
  std::vector<std::string> ws_allowed_origins;
  // Caches (docs/api.md "Caches"): limits and the backing stream's shape.
  std::size_t cache_max_value_bytes = 1u << 20;  // cache.max_value_bytes
  std::size_t cache_max_key_bytes = 512;         // cache.max_key_bytes
  std::uint32_t cache_shards = 4;                // cache.shards
  unsigned cache_threads = 16;                   // cache.threads
  std::int64_t cache_clock_skew_ms = 0;          // cache.clock_skew_ms (tests)
  std::uint64_t cache_compact_min_bytes = 64u << 20;  // cache.compact_min_bytes
  std::uint32_t cache_compact_ratio = 2;               // cache.compact_ratio
  std::int64_t cache_compact_sweep_ms = 30000;         // cache.compact_sweep_ms
  // tls.*: with a certificate the listener speaks HTTPS only (docs/security.md "TLS").
  TlsFiles tls;

  // auth.* (docs/security.md): bearer tokens from auth.tokens_file when enabled. Disabled,
  // a non-loopback address is refused unless auth.allow_insecure.
  bool auth_enabled = false;
  std::string tokens_file;
  bool allow_insecure = false;
  bool metrics_open = false;  // GET /metrics without a token

  // Reads the http.* keys. Throws std::invalid_argument on a bad value (only called from
  // create(), a configuration boundary).
  static HttpConfig from_host(const PluginHost& host);
};

}  // namespace sluice::http_api
