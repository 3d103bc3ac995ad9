#include "config.h"


#include <stdexcept>

#include "auth.h"
#include "sluice/host.h"
#include "sluice/types.h"

namespace sluice::http_api {

namespace {
std::int64_t ranged(const PluginHost& h, const char* key, std::int64_t def, std::int64_t lo,
                    std::int64_t hi) {
  const std::int64_t v = h.config_int(key, def);
  if (v < lo || v > hi)
    throw std::invalid_argument(std::string(key) + " = " + std::to_string(v) +
                                " is out of range [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + "]");
  return v;
}
}  // namespace

HttpConfig HttpConfig::from_host(const PluginHost& h) {
  HttpConfig c;
  c.address = h.config_string("http.address", c.address);
  c.port = static_cast<std::uint16_t>(ranged(h, "http.port", 8080, 0, 65535));
  c.threads = static_cast<unsigned>(ranged(h, "http.threads", 2, 1, 256));
  c.admin_threads = static_cast<unsigned>(ranged(h, "http.admin_threads", 16, 1, 64));
  c.max_body_bytes =
      static_cast<std::size_t>(ranged(h, "http.max_body_bytes", 8 << 20, 1, std::int64_t{1} << 32));
  c.max_wait = std::chrono::milliseconds(ranged(h, "http.max_wait_ms", 30000, 0, 3600000));
  c.idle_timeout =
      std::chrono::milliseconds(ranged(h, "http.idle_timeout_ms", 60000, 1, 86400000));
  c.request_timeout =
      std::chrono::milliseconds(ranged(h, "http.request_timeout_ms", 30000, 100, 3600000));
  c.max_header_bytes =
      static_cast<std::size_t>(ranged(h, "http.max_header_bytes", 16 * 1024, 1024, 1 << 20));
  c.max_connections =
      static_cast<std::size_t>(ranged(h, "http.max_connections", 1024, 1, 1'000'000));
  c.inline_appends = h.config_bool("http.inline_appends", true);
  c.max_waiters_per_shard =
      static_cast<std::size_t>(ranged(h, "http.max_waiters_per_shard", 1000, 1, 1'000'000));
  c.publish_bytes_per_s = static_cast<std::uint64_t>(
      ranged(h, "quota.publish_bytes_per_s", 0, 0, std::int64_t{1} << 40));
  c.fetch_max_bytes = static_cast<std::size_t>(
      ranged(h, "http.fetch_max_bytes", 1 << 20, 1024, std::int64_t{1} << 30));
  // The broker's limit, checked while parsing so that an oversized request costs nothing.
  c.max_records = static_cast<std::size_t>(
      ranged(h, "broker.max_records_per_publish", 100000, 1, 10'000'000));
  c.default_replication_factor = static_cast<std::uint32_t>(
      ranged(h, "stream.default_replication_factor", 1, 1, kMaxReplicationFactor));
  c.ws_idle_timeout =
      std::chrono::milliseconds(ranged(h, "http.ws_idle_timeout_ms", 60000, 1000, 86400000));
  c.ws_stall_timeout =
      std::chrono::milliseconds(ranged(h, "http.ws_stall_timeout_ms", 30000, 100, 3600000));
  c.ws_send_buffer_bytes = static_cast<std::size_t>(
      ranged(h, "http.ws_send_buffer_bytes", 1 << 20, 4096, std::int64_t{1} << 30));
  const std::string origins = h.config_string("http.ws_allowed_origins", "");
  for (std::string_view rest = origins; !rest.empty();) {
    const auto comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item.empty()) continue;
    const auto scheme = item.find("://");
    if (item != "*" && (scheme == std::string_view::npos || scheme == 0 || scheme + 3 == item.size() ||
                        item.find('/', scheme + 3) != std::string_view::npos))
      throw std::invalid_argument("http.ws_allowed_origins: \"" + std::string(item) +
                                  "\" is not an origin (scheme://host[:port], no path) or *");
    c.ws_allowed_origins.emplace_back(item);
  }
  c.auth_enabled = h.config_bool("auth.enabled", false);
  c.tokens_file = h.config_string("auth.tokens_file", "");
  c.allow_insecure = h.config_bool("auth.allow_insecure", false);
  c.metrics_open = h.config_bool("auth.metrics_open", false);
  if (c.auth_enabled && c.tokens_file.empty())
    throw std::invalid_argument("auth.enabled = true needs auth.tokens_file (docs/security.md)");
  if (!c.auth_enabled && !c.allow_insecure && !is_loopback(c.address))
    throw std::invalid_argument(
        "refusing to serve the HTTP API on " + c.address +
        " without authentication: anyone who reaches it could delete every tenant. Set auth.enabled = "
        "true with auth.tokens_file, or auth.allow_insecure = true to accept the risk (docs/security.md)");
  c.cache_max_value_bytes = static_cast<std::size_t>(
      ranged(h, "cache.max_value_bytes", 1 << 20, 1, 64 << 20));
  c.cache_max_key_bytes = static_cast<std::size_t>(ranged(h, "cache.max_key_bytes", 512, 1, 4096));
  c.cache_shards = static_cast<std::uint32_t>(ranged(h, "cache.shards", 4, 1, 1024));
  c.cache_threads = static_cast<unsigned>(ranged(h, "cache.threads", 16, 1, 256));
  c.cache_clock_skew_ms = ranged(h, "cache.clock_skew_ms", 0, -86400000, 86400000);
  c.cache_compact_min_bytes =
      static_cast<std::uint64_t>(ranged(h, "cache.compact_min_bytes", 64 << 20, 65536, std::int64_t{1} << 40));
  c.cache_compact_ratio = static_cast<std::uint32_t>(ranged(h, "cache.compact_ratio", 2, 1, 1000));
  c.cache_compact_sweep_ms = ranged(h, "cache.compact_sweep_ms", 30000, 100, 3600000);
  c.tls.cert_file = h.config_string("tls.cert_file", "");
  c.tls.key_file = h.config_string("tls.key_file", "");
  c.tls.client_ca_file = h.config_string("tls.client_ca_file", "");
  if (c.tls.cert_file.empty() != c.tls.key_file.empty())
    throw std::invalid_argument("tls.cert_file and tls.key_file must be set together (HTTPS needs both)");
  if (!c.tls.client_ca_file.empty() && c.tls.cert_file.empty())
    throw std::invalid_argument("tls.client_ca_file needs tls.cert_file and tls.key_file (client certificates "
                                "are verified only over HTTPS)");
  return c;
}


}  // namespace sluice::http_api
