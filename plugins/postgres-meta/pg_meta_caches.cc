// PgMetaStore caches: catalog entries decided like streams under `cache_incarnations`
// (docs/metadata-levels.md; README.md "How each rule is enforced"). Each create and delete
// is one serializable write (pg_meta_store_internal.h, run<>): the rules are the
// features.h functions, decided in C++ inside the write, and the database's triggers
// (schema.cc, migration 6) re-check every insert and refuse what a writer below level 14
// would write once the feature is finalized.
//
// A writer at level 14 or above decides as a flagged raft-meta entry does at apply:
//   create  propose_incarnation(finalized, database clock µs), then
//           decide_create_incarnation(proposed, flagged, finalized, cache tombstone);
//   delete  decide_delete_tombstone(deleted, flagged, finalized), the tombstone upserted
//           with GREATEST (one row per name, kept forever).
// A writer below 14 writes as a build that never heard of cache incarnations: a plain
// insert at 0 with no tombstone read, a delete with no tombstone. Once cache_incarnations
// is finalized the database refuses both (SL005, SL007), so such a writer can never store a
// cache the upgraded instances would decide differently.
#include "pg_meta_store.h"
#include "pg_meta_store_internal.h"

#include <pqxx/pqxx>

#include <optional>
#include <string>
#include <vector>

#include "codec.h"
#include "sluice/features.h"
#include "sluice/names.h"

namespace sluice::postgres_meta {

using namespace detail;

namespace {

// The longest default TTL a cache accepts (10 years), as raft-meta's apply
// (plugins/raft-meta/catalog_fsm_caches.cc); -1 means "no expiry".
constexpr std::int64_t kMaxCacheTtlMs = 10LL * 365 * 24 * 3600 * 1000;

constexpr const char* kCacheCols = "tenant, ns, name, incarnation, default_ttl_ms, created_seq";

CacheInfo read_cache(const pqxx::row& r) {
  CacheInfo c;
  c.key = StreamKey{r[0].as<std::string>(), r[1].as<std::string>(), r[2].as<std::string>()};
  c.incarnation = Incarnation{u64(r[3])};
  c.spec.default_ttl_ms = i64(r[4]);
  c.created_seq = ChangeSeq{u64(r[5])};
  return c;
}

Result<void> validate_cache_key(const StreamKey& key) {
  PG_META_TRY(validate_name(NameKind::tenant, key.tenant));
  PG_META_TRY(validate_name(NameKind::ns, key.ns));
  PG_META_TRY(validate_name(NameKind::cache, key.name));
  return {};
}

std::optional<CacheInfo> find_cache(pqxx::transaction_base& tx, const StreamKey& key) {
  auto r = tx.exec_params(std::string("SELECT ") + kCacheCols +
                              " FROM caches WHERE tenant = $1 AND ns = $2 AND name = $3",
                          key.tenant, key.ns, key.name);
  if (r.empty()) return std::nullopt;
  return read_cache(r[0]);
}

// Whether this instance writes caches with the level-14 rules (else as an older build).
bool knows_cache_incarnations(MetadataLevel level) {
  const FeatureSpec* feature = find_feature(kCacheIncarnations);
  return feature && level >= feature->required_level;
}

}  // namespace

std::vector<CacheInfo> detail::read_caches(pqxx::transaction_base& tx) {
  std::vector<CacheInfo> out;
  for (const auto& r :
       tx.exec(std::string("SELECT ") + kCacheCols + " FROM caches ORDER BY tenant, ns, name"))
    out.push_back(read_cache(r));
  return out;
}

std::vector<Tombstone> detail::read_cache_tombstones(pqxx::transaction_base& tx) {
  std::vector<Tombstone> out;
  for (const auto& r : tx.exec("SELECT tenant, ns, name, deleted_up_to, seq FROM cache_tombstones"
                               " ORDER BY tenant, ns, name"))
    out.push_back(Tombstone{StreamKey{r[0].as<std::string>(), r[1].as<std::string>(),
                                      r[2].as<std::string>()},
                            Incarnation{u64(r[3])}, ChangeSeq{u64(r[4])}});
  return out;
}

Result<CacheInfo> PgMetaStore::create_cache(const StreamKey& key, const CacheSpec& spec) {
  PG_META_TRY(validate_cache_key(key));
  if (spec.default_ttl_ms != -1 && (spec.default_ttl_ms <= 0 || spec.default_ttl_ms > kMaxCacheTtlMs))
    return Error(Errc::invalid_argument, "default_ttl_ms must be -1 (no expiry) or 1.." +
                                             std::to_string(kMaxCacheTtlMs));
  const bool knows_incarnations = knows_cache_incarnations(cfg_.level);
  return run<CacheInfo>(Mode::write, [&](pqxx::transaction_base& tx) -> Result<CacheInfo> {
    if (!exists(tx, "SELECT 1 FROM namespaces WHERE tenant = $1 AND name = $2", key.tenant, &key.ns))
      return Error(Errc::not_found, "no namespace " + key.tenant + "/" + key.ns);
    if (find_cache(tx, key)) return Error(Errc::already_exists, "cache " + key.to_string() + " exists");
    // The control plane clock is the database's (one clock for every instance).
    const std::int64_t clock_us =
        i64(tx.exec1("SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint")[0]);
    CacheInfo info;
    info.key = key;
    info.spec = spec;
    if (knows_incarnations) {
      const bool finalized = read_finalized(tx).count(kCacheIncarnations) > 0;
      std::optional<Incarnation> tomb;
      auto t = tx.exec_params("SELECT deleted_up_to FROM cache_tombstones"
                              " WHERE tenant = $1 AND ns = $2 AND name = $3",
                              key.tenant, key.ns, key.name);
      if (!t.empty()) tomb = Incarnation{u64(t[0][0])};
      info.incarnation = decide_create_incarnation(propose_incarnation(finalized, clock_us),
                                                   /*flagged=*/true, finalized, tomb);
    }
    const std::uint64_t seq = next_seq(tx);
    info.created_seq = ChangeSeq{seq};
    tx.exec_params("INSERT INTO caches(tenant, ns, name, incarnation, default_ttl_ms, created_seq,"
                   " created_at_us) VALUES ($1, $2, $3, $4, $5, $6, $7)",
                   key.tenant, key.ns, key.name, static_cast<std::int64_t>(info.incarnation.value()),
                   spec.default_ttl_ms, static_cast<std::int64_t>(seq), clock_us);
    record_change(tx, seq, ChangeEvent::Kind::cache_created, cache_change_payload(info, std::nullopt));
    return info;
  });
}

Result<CacheInfo> PgMetaStore::delete_cache(const StreamKey& key) {
  PG_META_TRY(validate_cache_key(key));
  const bool knows_incarnations = knows_cache_incarnations(cfg_.level);
  return run<CacheInfo>(Mode::write, [&](pqxx::transaction_base& tx) -> Result<CacheInfo> {
    auto existing = find_cache(tx, key);
    if (!existing) return Error(Errc::not_found, "no cache " + key.to_string());
    const std::uint64_t seq = next_seq(tx);
    // A writer below 14 is refused here once the feature is finalized (SL007).
    tx.exec_params("DELETE FROM caches WHERE tenant = $1 AND ns = $2 AND name = $3", key.tenant,
                   key.ns, key.name);
    std::optional<Tombstone> written;
    if (knows_incarnations) {
      // After the finalize even a delete at incarnation 0 records "incarnation 0 deleted",
      // so a broker that was down through it still drops the legacy cache's data.
      const bool finalized = read_finalized(tx).count(kCacheIncarnations) > 0;
      if (auto up_to = decide_delete_tombstone(existing->incarnation, /*flagged=*/true, finalized)) {
        // One row per name; deleted_up_to only ever raised (also enforced by a trigger).
        auto t = tx.exec_params1(
            "INSERT INTO cache_tombstones(tenant, ns, name, deleted_up_to, seq)"
            " VALUES ($1, $2, $3, $4, $5) ON CONFLICT (tenant, ns, name) DO UPDATE SET"
            " deleted_up_to = GREATEST(cache_tombstones.deleted_up_to, excluded.deleted_up_to),"
            " seq = excluded.seq RETURNING deleted_up_to",
            key.tenant, key.ns, key.name, static_cast<std::int64_t>(up_to->value()),
            static_cast<std::int64_t>(seq));
        written = Tombstone{key, Incarnation{u64(t[0])}, ChangeSeq{seq}};
      }
    }
    record_change(tx, seq, ChangeEvent::Kind::cache_deleted, cache_change_payload(*existing, written));
    return *existing;
  });
}

Result<CacheInfo> PgMetaStore::get_cache(const StreamKey& key) {
  PG_META_TRY(validate_cache_key(key));
  return run<CacheInfo>(Mode::read, [&](pqxx::transaction_base& tx) -> Result<CacheInfo> {
    auto c = find_cache(tx, key);
    if (!c) return Error(Errc::not_found, "no cache " + key.to_string());
    return *c;
  });
}

Result<std::vector<CacheInfo>> PgMetaStore::list_caches(const std::string& tenant,
                                                        const std::string& ns) {
  PG_META_TRY(validate_name(NameKind::tenant, tenant));
  PG_META_TRY(validate_name(NameKind::ns, ns));
  return run<std::vector<CacheInfo>>(Mode::read, [&](pqxx::transaction_base& tx)
                                                     -> Result<std::vector<CacheInfo>> {
    if (!exists(tx, "SELECT 1 FROM namespaces WHERE tenant = $1 AND name = $2", tenant, &ns))
      return Error(Errc::not_found, "no namespace " + tenant + "/" + ns);
    std::vector<CacheInfo> out;
    for (const auto& r : tx.exec_params(std::string("SELECT ") + kCacheCols +
                                            " FROM caches WHERE tenant = $1 AND ns = $2 ORDER BY name",
                                        tenant, ns))
      out.push_back(read_cache(r));
    return out;
  });
}

}  // namespace sluice::postgres_meta
