// CatalogFsm: caches, decided like streams under `cache_incarnations`.
#include "catalog_fsm.h"

#include "catalog_fsm_db.h"

#include "sluice/features.h"

namespace sluice::raft_meta {

using namespace catalog_db;

namespace {
// The longest default TTL a cache accepts (10 years); -1 means "no expiry".
constexpr std::int64_t kMaxCacheTtlMs = 10LL * 365 * 24 * 3600 * 1000;
}  // namespace

ApplyResult CatalogFsm::apply_create_cache(std::uint64_t index, const Command& c) {
  ApplyResult r;
  r.seq = ChangeSeq{index};
  const auto seq = static_cast<std::int64_t>(index);
  if (c.cache_spec.default_ttl_ms != -1 &&
      (c.cache_spec.default_ttl_ms <= 0 || c.cache_spec.default_ttl_ms > kMaxCacheTtlMs))
    return refuse(index, Errc::invalid_argument, "default_ttl_ms must be -1 (no expiry) or 1.." +
                                                     std::to_string(kMaxCacheTtlMs));
  if (!namespace_exists(c.tenant, c.ns))
    return refuse(index, Errc::not_found, "no namespace " + c.tenant + "/" + c.ns);
  StreamKey key{c.tenant, c.ns, c.name};
  if (cache(key)) return refuse(index, Errc::already_exists, "cache " + key.to_string() + " exists");
  CacheInfo info;
  info.key = key;
  std::optional<Incarnation> tomb;
  if (auto t = cache_tombstone(key)) tomb = t->deleted_up_to;
  info.incarnation = decide_create_incarnation(
      c.proposed_incarnation, c.incarnations == IncarnationRule::flagged,
      is_finalized(kCacheIncarnations), tomb);
  info.spec = c.cache_spec;
  info.created_seq = ChangeSeq{index};
  Stmt s(db_, "INSERT INTO caches(tenant, ns, name, incarnation, default_ttl_ms, created_seq,"
              " created_at_us) VALUES(?, ?, ?, ?, ?, ?, ?)");
  s.bind(1, c.tenant).bind(2, c.ns).bind(3, c.name)
      .bind(4, static_cast<std::int64_t>(info.incarnation.value()))
      .bind(5, info.spec.default_ttl_ms).bind(6, seq).bind(7, c.clock_us);
  s.step();
  record_change(cache_change(index, ChangeEvent::Kind::cache_created, info, std::nullopt));
  r.cache = info;
  return r;
}

ApplyResult CatalogFsm::apply_delete_cache(std::uint64_t index, const Command& c) {
  ApplyResult r;
  r.seq = ChangeSeq{index};
  StreamKey key{c.tenant, c.ns, c.name};
  auto existing = cache(key);
  if (!existing) return refuse(index, Errc::not_found, "no cache " + key.to_string());
  {
    Stmt s(db_, "DELETE FROM caches WHERE tenant = ? AND ns = ? AND name = ?");
    s.bind(1, c.tenant).bind(2, c.ns).bind(3, c.name);
    s.step();
  }
  std::optional<Tombstone> written;
  if (auto up_to = decide_delete_tombstone(existing->incarnation,
                                           c.incarnations == IncarnationRule::flagged,
                                           is_finalized(kCacheIncarnations))) {
    written = raise_tombstone(TombstoneTable::caches, key, *up_to, index);
  }
  record_change(cache_change(index, ChangeEvent::Kind::cache_deleted, *existing, written));
  r.cache = *existing;
  r.tombstone = written;
  return r;
}

}  // namespace sluice::raft_meta
