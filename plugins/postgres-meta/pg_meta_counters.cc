// PgMetaStore counters (level 18, fleet feature `counters`; docs/metadata-levels.md,
// README.md "How each rule is enforced"). Each create and delete is one serializable write
// (pg_meta_store_internal.h, run<>), decided as raft-meta's apply does
// (plugins/raft-meta/catalog_fsm_counters.cc): a create needs this instance at 18 and
// `counters` finalized, and gets next_incarnation(database clock µs, tombstone); a delete
// always raises the name's tombstone to the deleted incarnation. The database's triggers
// (schema.cc, migration 7) re-check every write: SL009 refuses a create by a writer below
// 18 or before the finalize, SL010 an incarnation not above the tombstone, SL011 a delete
// by a writer below 18, SL012 a tombstone delete.
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

constexpr const char* kCounterCols = "tenant, ns, name, incarnation, created_seq";

CounterInfo read_counter(const pqxx::row& r) {
  CounterInfo c;
  c.key = StreamKey{r[0].as<std::string>(), r[1].as<std::string>(), r[2].as<std::string>()};
  c.incarnation = Incarnation{u64(r[3])};
  c.created_seq = ChangeSeq{u64(r[4])};
  return c;
}

Result<void> validate_counter_key(const StreamKey& key) {
  PG_META_TRY(validate_name(NameKind::tenant, key.tenant));
  PG_META_TRY(validate_name(NameKind::ns, key.ns));
  PG_META_TRY(validate_name(NameKind::counter, key.name));
  return {};
}

std::optional<CounterInfo> find_counter(pqxx::transaction_base& tx, const StreamKey& key) {
  auto r = tx.exec_params(std::string("SELECT ") + kCounterCols +
                              " FROM counters WHERE tenant = $1 AND ns = $2 AND name = $3",
                          key.tenant, key.ns, key.name);
  if (r.empty()) return std::nullopt;
  return read_counter(r[0]);
}

// The proposer-side rule (raft-meta's check_counters): this instance must run at 18.
Result<void> check_level(MetadataLevel level) {
  if (level < kCountersLevel)
    return Error(Errc::conflict, "counters need metadata level " +
                                     std::to_string(kCountersLevel.value()) +
                                     "; this instance runs at level " + std::to_string(level.value()));
  return {};
}

}  // namespace

std::vector<CounterInfo> detail::read_counters(pqxx::transaction_base& tx) {
  std::vector<CounterInfo> out;
  for (const auto& r :
       tx.exec(std::string("SELECT ") + kCounterCols + " FROM counters ORDER BY tenant, ns, name"))
    out.push_back(read_counter(r));
  return out;
}

std::vector<Tombstone> detail::read_counter_tombstones(pqxx::transaction_base& tx) {
  std::vector<Tombstone> out;
  for (const auto& r : tx.exec("SELECT tenant, ns, name, deleted_up_to, seq FROM counter_tombstones"
                               " ORDER BY tenant, ns, name"))
    out.push_back(Tombstone{StreamKey{r[0].as<std::string>(), r[1].as<std::string>(),
                                      r[2].as<std::string>()},
                            Incarnation{u64(r[3])}, ChangeSeq{u64(r[4])}});
  return out;
}

Result<CounterInfo> PgMetaStore::create_counter(const StreamKey& key) {
  PG_META_TRY(validate_counter_key(key));
  PG_META_TRY(check_level(cfg_.level));
  return run<CounterInfo>(Mode::write, [&](pqxx::transaction_base& tx) -> Result<CounterInfo> {
    if (!read_finalized(tx).count(kCounters))
      return Error(Errc::conflict,
                   "counters need the fleet feature counters, which is not finalized "
                   "(POST /v1/features/counters/finalize)");
    if (!exists(tx, "SELECT 1 FROM namespaces WHERE tenant = $1 AND name = $2", key.tenant, &key.ns))
      return Error(Errc::not_found, "no namespace " + key.tenant + "/" + key.ns);
    if (find_counter(tx, key))
      return Error(Errc::already_exists, "counter " + key.to_string() + " exists");
    // The control plane clock is the database's (one clock for every instance).
    const std::int64_t clock_us =
        i64(tx.exec1("SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint")[0]);
    std::optional<Incarnation> tomb;
    auto t = tx.exec_params("SELECT deleted_up_to FROM counter_tombstones"
                            " WHERE tenant = $1 AND ns = $2 AND name = $3",
                            key.tenant, key.ns, key.name);
    if (!t.empty()) tomb = Incarnation{u64(t[0][0])};
    CounterInfo info;
    info.key = key;
    info.incarnation = next_incarnation(propose_incarnation(true, clock_us), tomb);
    const std::uint64_t seq = next_seq(tx);
    info.created_seq = ChangeSeq{seq};
    tx.exec_params("INSERT INTO counters(tenant, ns, name, incarnation, created_seq, created_at_us)"
                   " VALUES ($1, $2, $3, $4, $5, $6)",
                   key.tenant, key.ns, key.name, static_cast<std::int64_t>(info.incarnation.value()),
                   static_cast<std::int64_t>(seq), clock_us);
    record_change(tx, seq, ChangeEvent::Kind::counter_created, counter_change_payload(info, std::nullopt));
    return info;
  });
}

Result<CounterInfo> PgMetaStore::delete_counter(const StreamKey& key) {
  PG_META_TRY(validate_counter_key(key));
  PG_META_TRY(check_level(cfg_.level));
  return run<CounterInfo>(Mode::write, [&](pqxx::transaction_base& tx) -> Result<CounterInfo> {
    auto existing = find_counter(tx, key);
    if (!existing) return Error(Errc::not_found, "no counter " + key.to_string());
    const std::uint64_t seq = next_seq(tx);
    tx.exec_params("DELETE FROM counters WHERE tenant = $1 AND ns = $2 AND name = $3", key.tenant,
                   key.ns, key.name);
    // One row per name; deleted_up_to only ever raised (also enforced by a trigger).
    auto t = tx.exec_params1(
        "INSERT INTO counter_tombstones(tenant, ns, name, deleted_up_to, seq)"
        " VALUES ($1, $2, $3, $4, $5) ON CONFLICT (tenant, ns, name) DO UPDATE SET"
        " deleted_up_to = GREATEST(counter_tombstones.deleted_up_to, excluded.deleted_up_to),"
        " seq = excluded.seq RETURNING deleted_up_to",
        key.tenant, key.ns, key.name, static_cast<std::int64_t>(existing->incarnation.value()),
        static_cast<std::int64_t>(seq));
    Tombstone written{key, Incarnation{u64(t[0])}, ChangeSeq{seq}};
    record_change(tx, seq, ChangeEvent::Kind::counter_deleted, counter_change_payload(*existing, written));
    return *existing;
  });
}

Result<CounterInfo> PgMetaStore::get_counter(const StreamKey& key) {
  PG_META_TRY(validate_counter_key(key));
  return run<CounterInfo>(Mode::read, [&](pqxx::transaction_base& tx) -> Result<CounterInfo> {
    auto c = find_counter(tx, key);
    if (!c) return Error(Errc::not_found, "no counter " + key.to_string());
    return *c;
  });
}

Result<std::vector<CounterInfo>> PgMetaStore::list_counters(const std::string& tenant,
                                                            const std::string& ns) {
  PG_META_TRY(validate_name(NameKind::tenant, tenant));
  PG_META_TRY(validate_name(NameKind::ns, ns));
  return run<std::vector<CounterInfo>>(Mode::read, [&](pqxx::transaction_base& tx)
                                                       -> Result<std::vector<CounterInfo>> {
    if (!exists(tx, "SELECT 1 FROM namespaces WHERE tenant = $1 AND name = $2", tenant, &ns))
      return Error(Errc::not_found, "no namespace " + tenant + "/" + ns);
    std::vector<CounterInfo> out;
    for (const auto& r : tx.exec_params(std::string("SELECT ") + kCounterCols +
                                            " FROM counters WHERE tenant = $1 AND ns = $2 ORDER BY name",
                                        tenant, ns))
      out.push_back(read_counter(r));
    return out;
  });
}

}  // namespace sluice::postgres_meta
