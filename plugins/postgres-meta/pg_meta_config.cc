// PgMetaConfig::from_host (pg_meta_store.h; the keys are documented in README.md).
#include "pg_meta_store.h"
#include "pg_meta_store_internal.h"

#include <pqxx/pqxx>

#include <algorithm>
#include <cstring>
#include <optional>
#include <set>
#include <stdexcept>

#include "codec.h"
#include "schema.h"
#include "sluice/catalog_rules.h"
#include "sluice/features.h"
#include "sluice/names.h"
#include "sluice/uuid.h"

namespace sluice::postgres_meta {

using namespace detail;

namespace {

std::int64_t checked(const PluginHost& host, std::string_view key, std::int64_t def,
                     std::int64_t min, std::int64_t max) {
  std::int64_t v = host.config_int(key, def);
  if (v < min || v > max)
    throw std::invalid_argument(std::string(key) + " must be between " + std::to_string(min) +
                                " and " + std::to_string(max) + ", got " + std::to_string(v));
  return v;
}

bool valid_schema_name(std::string_view s) {
  if (s.empty() || s.size() > 40) return false;
  if (!((s[0] >= 'a' && s[0] <= 'z') || s[0] == '_')) return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}

}  // namespace

// --- configuration -----------------------------------------------------------------------

PgMetaConfig PgMetaConfig::from_host(const PluginHost& host) {
  PgMetaConfig c;
  c.url = host.config_string("metadata.postgres.url", "");
  if (c.url.empty())
    throw std::invalid_argument(
        "metadata.postgres.url is required with metadata.backend = postgres (a libpq "
        "connection string or URI, e.g. postgresql://sluice@db.example:5432/sluice)");
  c.schema = host.config_string("metadata.postgres.schema", "sluice");
  if (!valid_schema_name(c.schema))
    throw std::invalid_argument("metadata.postgres.schema must be 1..40 of [a-z0-9_] starting "
                                "with a letter or '_', got '" + c.schema + "'");
  c.level = MetadataLevel{static_cast<std::uint32_t>(
      checked(host, "metadata.level", kPostgresMetaLevel.value(), kLowestMetadataLevel.value(),
              kPostgresMetaLevel.value()))};
  // postgres-meta's levels: 8 (baseline), 10 (stream incarnations), 14 (cache
  // incarnations), 16 (replicated shards), 17 (reassignment), 18 (counters).
  if (c.level.value() != 8 && c.level.value() != 10 && c.level.value() != 14 &&
      c.level.value() != 16 && c.level.value() != 17 && c.level.value() != 18)
    throw std::invalid_argument(
        "metadata.level must be 8, 10, 14, 16, 17 or 18 with postgres-meta, got " +
        std::to_string(c.level.value()));
  {
    auto held = parse_feature_list(host.config_string("metadata.bootstrap_hold_back", ""));
    if (!held) throw std::invalid_argument("metadata.bootstrap_hold_back: " + held.error().message);
    c.bootstrap_hold_back = std::move(*held);
  }
  c.timeout = std::chrono::milliseconds(checked(host, "metadata.timeout_ms", 10000, 1, 0x7fffffff));
  c.start_timeout =
      std::chrono::milliseconds(checked(host, "metadata.start_timeout_ms", 30000, 1, 0x7fffffff));
  c.session_timeout =
      std::chrono::milliseconds(checked(host, "broker.session_timeout_ms", 10000, 1, 0x7fffffff));
  c.change_retention = checked(host, "metadata.postgres.change_retention", 100000, 1, 1LL << 40);
  c.poll_interval = std::chrono::milliseconds(
      checked(host, "metadata.postgres.poll_interval_ms", 1000, 10, 600000));
  c.pool_size = static_cast<int>(checked(host, "metadata.postgres.pool_size", 8, 1, 64));
  return c;
}

}  // namespace sluice::postgres_meta
