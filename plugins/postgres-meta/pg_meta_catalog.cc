// PgMetaStore catalog calls: tenants, namespaces, stream deletes, reads and update_shard,
// snapshot and tombstones (stream creates: pg_meta_create.cc; caches: pg_meta_caches.cc).
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
#include "sluice/strings.h"
#include "sluice/features.h"
#include "sluice/names.h"
#include "sluice/uuid.h"

namespace sluice::postgres_meta {

using namespace detail;

// --- tenants and namespaces ----------------------------------------------------------------

Result<TenantInfo> PgMetaStore::create_tenant(const std::string& name) {
  PG_META_TRY(validate_name(NameKind::tenant, name));
  return run<TenantInfo>(Mode::write, [&](pqxx::transaction_base& tx) -> Result<TenantInfo> {
    if (exists(tx, "SELECT 1 FROM tenants WHERE name = $1", name))
      return Error(Errc::already_exists, "tenant " + name + " exists");
    auto seq = next_seq(tx);
    tx.exec_params("INSERT INTO tenants(name, created_seq) VALUES ($1, $2)", name,
                   static_cast<std::int64_t>(seq));
    record_change(tx, seq, ChangeEvent::Kind::tenant_created, names_payload(name, nullptr));
    return TenantInfo{name, ChangeSeq{seq}};
  });
}

Result<void> PgMetaStore::delete_tenant(const std::string& name) {
  PG_META_TRY(validate_name(NameKind::tenant, name));
  return from_unit<void>(run<Unit>(Mode::write, [&](pqxx::transaction_base& tx) -> Result<Unit> {
    if (!exists(tx, "SELECT 1 FROM tenants WHERE name = $1", name))
      return Error(Errc::not_found, "no tenant " + name);
    if (exists(tx, "SELECT 1 FROM namespaces WHERE tenant = $1 LIMIT 1", name))
      return Error(Errc::conflict, "tenant " + name + " still has namespaces");
    auto seq = next_seq(tx);
    tx.exec_params("DELETE FROM tenants WHERE name = $1", name);
    record_change(tx, seq, ChangeEvent::Kind::tenant_deleted, names_payload(name, nullptr));
    return Unit{};
  }));
}

Result<std::vector<TenantInfo>> PgMetaStore::list_tenants() {
  return run<std::vector<TenantInfo>>(Mode::read, [&](pqxx::transaction_base& tx)
                                                      -> Result<std::vector<TenantInfo>> {
    std::vector<TenantInfo> out;
    for (const auto& r : tx.exec("SELECT name, created_seq FROM tenants ORDER BY name"))
      out.push_back(TenantInfo{r[0].as<std::string>(), ChangeSeq{u64(r[1])}});
    return out;
  });
}

Result<NamespaceInfo> PgMetaStore::create_namespace(const std::string& tenant,
                                                    const std::string& name) {
  PG_META_TRY(validate_name(NameKind::tenant, tenant));
  PG_META_TRY(validate_name(NameKind::ns, name));
  return run<NamespaceInfo>(Mode::write, [&](pqxx::transaction_base& tx) -> Result<NamespaceInfo> {
    if (!exists(tx, "SELECT 1 FROM tenants WHERE name = $1", tenant))
      return Error(Errc::not_found, "no tenant " + tenant);
    if (exists(tx, "SELECT 1 FROM namespaces WHERE tenant = $1 AND name = $2", tenant, &name))
      return Error(Errc::already_exists, "namespace " + tenant + "/" + name + " exists");
    auto seq = next_seq(tx);
    tx.exec_params("INSERT INTO namespaces(tenant, name, created_seq) VALUES ($1, $2, $3)",
                   tenant, name, static_cast<std::int64_t>(seq));
    record_change(tx, seq, ChangeEvent::Kind::namespace_created, names_payload(tenant, &name));
    return NamespaceInfo{tenant, name, ChangeSeq{seq}};
  });
}

Result<void> PgMetaStore::delete_namespace(const std::string& tenant, const std::string& name) {
  PG_META_TRY(validate_name(NameKind::tenant, tenant));
  PG_META_TRY(validate_name(NameKind::ns, name));
  return from_unit<void>(run<Unit>(Mode::write, [&](pqxx::transaction_base& tx) -> Result<Unit> {
    if (!exists(tx, "SELECT 1 FROM namespaces WHERE tenant = $1 AND name = $2", tenant, &name))
      return Error(Errc::not_found, "no namespace " + tenant + "/" + name);
    if (exists(tx, "SELECT 1 FROM streams WHERE tenant = $1 AND ns = $2"
                   " UNION ALL SELECT 1 FROM caches WHERE tenant = $1 AND ns = $2"
                   " UNION ALL SELECT 1 FROM counters WHERE tenant = $1 AND ns = $2 LIMIT 1",
               tenant, &name))
      return Error(Errc::conflict,
                   "namespace " + tenant + "/" + name + " still has streams, caches or counters");
    auto seq = next_seq(tx);
    tx.exec_params("DELETE FROM namespaces WHERE tenant = $1 AND name = $2", tenant, name);
    record_change(tx, seq, ChangeEvent::Kind::namespace_deleted, names_payload(tenant, &name));
    return Unit{};
  }));
}

Result<std::vector<NamespaceInfo>> PgMetaStore::list_namespaces(const std::string& tenant) {
  PG_META_TRY(validate_name(NameKind::tenant, tenant));
  return run<std::vector<NamespaceInfo>>(Mode::read, [&](pqxx::transaction_base& tx)
                                                         -> Result<std::vector<NamespaceInfo>> {
    if (!exists(tx, "SELECT 1 FROM tenants WHERE name = $1", tenant))
      return Error(Errc::not_found, "no tenant " + tenant);
    std::vector<NamespaceInfo> out;
    for (const auto& r : tx.exec_params(
             "SELECT tenant, name, created_seq FROM namespaces WHERE tenant = $1 ORDER BY name",
             tenant))
      out.push_back(NamespaceInfo{r[0].as<std::string>(), r[1].as<std::string>(), ChangeSeq{u64(r[2])}});
    return out;
  });
}

// --- streams ---------------------------------------------------------------------------

// create_stream: pg_meta_create.cc.

Result<StreamInfo> PgMetaStore::delete_stream(const StreamKey& key) {
  PG_META_TRY(validate_stream_key(key));
  const FeatureSpec* feature = find_feature(kStreamIncarnations);
  const bool knows_incarnations = feature && cfg_.level >= feature->required_level;
  return run<StreamInfo>(Mode::write, [&](pqxx::transaction_base& tx) -> Result<StreamInfo> {
    auto r = tx.exec_params(std::string("SELECT ") + kStreamCols +
                                " FROM streams WHERE tenant = $1 AND ns = $2 AND name = $3",
                            key.tenant, key.ns, key.name);
    if (r.empty()) return Error(Errc::not_found, "no stream " + key.to_string());
    StreamInfo existing = read_stream(r[0]);
    std::vector<Assignment> removed = assignments_of(tx, key);
    const std::uint64_t seq = next_seq(tx);
    tx.exec_params("DELETE FROM streams WHERE tenant = $1 AND ns = $2 AND name = $3", key.tenant,
                   key.ns, key.name);
    tx.exec_params("DELETE FROM assignments WHERE tenant = $1 AND ns = $2 AND name = $3",
                   key.tenant, key.ns, key.name);
    std::optional<Tombstone> written;
    if (knows_incarnations) {
      // This writer knows incarnations and decides inside its own serializable
      // transaction, as a flagged raft-meta entry does at apply: after the finalize, even a
      // delete at incarnation 0 records "incarnation 0 deleted", so a broker that was down
      // through it still removes the legacy data (docs/metadata-levels.md). The database
      // refuses deletes by pre-incarnation instances once finalized (schema.cc, v3).
      const bool finalized = read_finalized(tx).count(kStreamIncarnations) > 0;
      if (auto up_to = decide_delete_tombstone(existing.incarnation, /*flagged=*/true, finalized)) {
        // One row per name; deleted_up_to only ever raised (also enforced by a trigger).
        auto t = tx.exec_params1(
            "INSERT INTO tombstones(tenant, ns, name, deleted_up_to, seq) VALUES ($1, $2, $3, $4, $5)"
            " ON CONFLICT (tenant, ns, name) DO UPDATE SET"
            " deleted_up_to = GREATEST(tombstones.deleted_up_to, excluded.deleted_up_to),"
            " seq = excluded.seq RETURNING deleted_up_to",
            key.tenant, key.ns, key.name, static_cast<std::int64_t>(up_to->value()),
            static_cast<std::int64_t>(seq));
        written = Tombstone{key, Incarnation{u64(t[0])}, ChangeSeq{seq}};
      }
    }
    record_change(tx, seq, ChangeEvent::Kind::stream_deleted,
                  stream_change_payload(existing, removed, written));
    return existing;
  });
}

// The compare-and-set of one shard's replica state: the row is locked (SELECT ... FOR
// UPDATE) inside the serializable write, decided by check_shard_update, and written with
// version + 1 and a shard_changed change in the same transaction.
Result<Assignment> PgMetaStore::update_shard(const ShardUpdate& u) {
  PG_META_TRY(validate_stream_key(u.key));
  if (cfg_.level < kReplicatedShardsLevel)
    return Error(Errc::conflict, "update_shard needs metadata level " +
                                     std::to_string(kReplicatedShardsLevel.value()) +
                                     "; this instance runs at level " +
                                     std::to_string(cfg_.level.value()));
  if (u.replicas && cfg_.level < kShardReassignmentLevel)
    return Error(Errc::conflict, "reassignment needs metadata level " +
                                     std::to_string(kShardReassignmentLevel.value()) +
                                     "; this instance runs at level " +
                                     std::to_string(cfg_.level.value()));
  const std::string what = u.key.to_string() + " shard " + std::to_string(u.shard.value());
  return run<Assignment>(Mode::write, [&](pqxx::transaction_base& tx) -> Result<Assignment> {
    const auto finalized = read_finalized(tx);
    if (!finalized.count(kReplicatedShards))
      return Error(Errc::conflict,
                   "update_shard needs the fleet feature replicated_shards, which is not finalized");
    if (u.replicas && !finalized.count(kShardReassignment))
      return Error(Errc::conflict,
                   "reassignment needs the fleet feature shard_reassignment, which is not "
                   "finalized (POST /v1/features/shard_reassignment/finalize)");
    auto sr = tx.exec_params(std::string("SELECT ") + kStreamCols +
                                 " FROM streams WHERE tenant = $1 AND ns = $2 AND name = $3",
                             u.key.tenant, u.key.ns, u.key.name);
    if (sr.empty()) return Error(Errc::not_found, "no stream " + u.key.to_string());
    const StreamInfo st = read_stream(sr[0]);
    auto ar = tx.exec_params(std::string("SELECT ") + kAssignmentCols +
                                 " FROM assignments WHERE tenant = $1 AND ns = $2 AND name = $3"
                                 " AND shard = $4 FOR UPDATE",
                             u.key.tenant, u.key.ns, u.key.name,
                             static_cast<std::int64_t>(u.shard.value()));
    if (ar.empty()) return Error(Errc::not_found, "no shard " + what);
    const Assignment cur = read_assignment(ar[0]);
    if (st.spec.replication_factor <= 1 && cur.incarnation == u.incarnation)
      return Error(Errc::invalid_argument,
                   what + ": the stream has replication factor 1, so the shard has no replica "
                          "state to change");
    PG_META_TRY(check_shard_update(cur, u));
    Assignment a = cur;
    a.leader = u.leader;
    a.leader_epoch = u.leader_epoch;
    a.in_sync = u.in_sync;
    a.version = ShardVersion{cur.version.value() + 1};
    if (u.replicas) {
      a.replicas = *u.replicas;
      a.target_replicas = u.target_replicas;
    }
    const std::uint64_t seq = next_seq(tx);
    auto done = tx.exec_params(
        "UPDATE assignments SET leader = $1, leader_epoch = $2, in_sync = $3, version = $4,"
        " replicas = $10::bigint[], target_replicas = $11::bigint[]"
        " WHERE tenant = $5 AND ns = $6 AND name = $7 AND shard = $8 AND version = $9",
        static_cast<std::int64_t>(a.leader.value()), static_cast<std::int64_t>(a.leader_epoch.value()),
        encode_in_sync(a.in_sync), static_cast<std::int64_t>(a.version.value()), u.key.tenant,
        u.key.ns, u.key.name, static_cast<std::int64_t>(u.shard.value()),
        static_cast<std::int64_t>(cur.version.value()), pg_array(a.replicas),
        pg_array(a.target_replicas));
    if (done.affected_rows() != 1)
      return Error(Errc::internal, what + ": the locked row changed under the compare-and-set");
    record_change(tx, seq, ChangeEvent::Kind::shard_changed, shard_payload(a));
    return a;
  });
}

Result<StreamInfo> PgMetaStore::get_stream(const StreamKey& key) {
  PG_META_TRY(validate_stream_key(key));
  return run<StreamInfo>(Mode::read, [&](pqxx::transaction_base& tx) -> Result<StreamInfo> {
    auto r = tx.exec_params(std::string("SELECT ") + kStreamCols +
                                " FROM streams WHERE tenant = $1 AND ns = $2 AND name = $3",
                            key.tenant, key.ns, key.name);
    if (r.empty()) return Error(Errc::not_found, "no stream " + key.to_string());
    return read_stream(r[0]);
  });
}

Result<std::vector<StreamInfo>> PgMetaStore::list_streams(const std::string& tenant,
                                                          const std::string& ns) {
  PG_META_TRY(validate_name(NameKind::tenant, tenant));
  PG_META_TRY(validate_name(NameKind::ns, ns));
  return run<std::vector<StreamInfo>>(Mode::read, [&](pqxx::transaction_base& tx)
                                                      -> Result<std::vector<StreamInfo>> {
    if (!exists(tx, "SELECT 1 FROM namespaces WHERE tenant = $1 AND name = $2", tenant, &ns))
      return Error(Errc::not_found, "no namespace " + tenant + "/" + ns);
    std::vector<StreamInfo> out;
    for (const auto& r : tx.exec_params(std::string("SELECT ") + kStreamCols +
                                            " FROM streams WHERE tenant = $1 AND ns = $2 ORDER BY name",
                                        tenant, ns))
      out.push_back(read_stream(r));
    return out;
  });
}

namespace {
std::vector<Tombstone> read_tombstones(pqxx::transaction_base& tx) {
  std::vector<Tombstone> out;
  for (const auto& r : tx.exec("SELECT tenant, ns, name, deleted_up_to, seq FROM tombstones"
                               " ORDER BY tenant, ns, name"))
    out.push_back(Tombstone{StreamKey{r[0].as<std::string>(), r[1].as<std::string>(),
                                      r[2].as<std::string>()},
                            Incarnation{u64(r[3])}, ChangeSeq{u64(r[4])}});
  return out;
}
}  // namespace

Result<CatalogSnapshot> PgMetaStore::snapshot() {
  // One REPEATABLE READ transaction: the rows and the seq they reflect are one state
  // (writers commit in seq order under the counter lock).
  return run<CatalogSnapshot>(Mode::read, [&](pqxx::transaction_base& tx) -> Result<CatalogSnapshot> {
    CatalogSnapshot s;
    s.seq = ChangeSeq{u64(tx.exec1("SELECT last_seq FROM counter")[0])};
    for (const auto& r : tx.exec("SELECT name, created_seq FROM tenants ORDER BY name"))
      s.tenants.push_back(TenantInfo{r[0].as<std::string>(), ChangeSeq{u64(r[1])}});
    for (const auto& r : tx.exec("SELECT tenant, name, created_seq FROM namespaces ORDER BY tenant, name"))
      s.namespaces.push_back(
          NamespaceInfo{r[0].as<std::string>(), r[1].as<std::string>(), ChangeSeq{u64(r[2])}});
    for (const auto& r : tx.exec(std::string("SELECT ") + kStreamCols +
                                 " FROM streams ORDER BY tenant, ns, name"))
      s.streams.push_back(read_stream(r));
    s.tombstones = read_tombstones(tx);
    for (const auto& r : tx.exec(std::string("SELECT ") + kAssignmentCols +
                                 " FROM assignments ORDER BY tenant, ns, name, shard"))
      s.assignments.push_back(read_assignment(r));
    for (const auto& r : tx.exec("SELECT name FROM features ORDER BY name"))
      s.finalized_features.push_back(r[0].as<std::string>());
    s.brokers = read_brokers(tx);
    s.caches = read_caches(tx);
    s.cache_tombstones = read_cache_tombstones(tx);
    s.counters = read_counters(tx);
    s.counter_tombstones = read_counter_tombstones(tx);
    return s;
  });
}

Result<std::vector<Tombstone>> PgMetaStore::list_tombstones() {
  return run<std::vector<Tombstone>>(Mode::read, [&](pqxx::transaction_base& tx)
                                                     -> Result<std::vector<Tombstone>> {
    return read_tombstones(tx);
  });
}

}  // namespace sluice::postgres_meta
