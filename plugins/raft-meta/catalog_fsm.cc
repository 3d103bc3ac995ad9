// CatalogFsm: the database, the change log, and apply (the error policy and the dispatch
// to one function per command). See catalog_fsm.h for where the rest lives.
#include "catalog_fsm.h"

#include <sqlite3.h>

#include <algorithm>
#include <stdexcept>

#include "catalog_fsm_db.h"
#include "sluice/catalog_json.h"
#include "sluice/features.h"
#include "sluice/names.h"

namespace sluice::raft_meta {

using namespace catalog_db;

namespace {

// Tables added by schema version 2 (also the upgrade of a version-1 image).
constexpr const char* kSchemaV2Tables =
    "CREATE TABLE features(name TEXT PRIMARY KEY, finalized_seq INTEGER NOT NULL);"
    "CREATE TABLE brokers(id INTEGER PRIMARY KEY, address TEXT NOT NULL,"
    "  directory_id TEXT NOT NULL, version TEXT NOT NULL, features TEXT NOT NULL,"
    "  registered_seq INTEGER NOT NULL);"
    "CREATE TABLE assignments(tenant TEXT NOT NULL, ns TEXT NOT NULL, name TEXT NOT NULL,"
    "  shard INTEGER NOT NULL, incarnation INTEGER NOT NULL, generation INTEGER NOT NULL,"
    "  leader INTEGER NOT NULL, replicas TEXT NOT NULL, PRIMARY KEY(tenant, ns, name, shard));";

// Tables added by schema version 3: metadata members and caches.
constexpr const char* kSchemaV3Tables =
    "CREATE TABLE members(id INTEGER PRIMARY KEY, raft_address TEXT NOT NULL,"
    "  rpc_address TEXT NOT NULL, level INTEGER NOT NULL, joined_seq INTEGER NOT NULL);"
    "CREATE TABLE caches(tenant TEXT NOT NULL, ns TEXT NOT NULL, name TEXT NOT NULL,"
    "  incarnation INTEGER NOT NULL, default_ttl_ms INTEGER NOT NULL,"
    "  created_seq INTEGER NOT NULL, created_at_us INTEGER NOT NULL,"
    "  PRIMARY KEY(tenant, ns, name));"
    "CREATE TABLE cache_tombstones(tenant TEXT NOT NULL, ns TEXT NOT NULL, name TEXT NOT NULL,"
    "  deleted_up_to INTEGER NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY(tenant, ns, name));";

// Columns added by schema version 4 (level 16, replicated shards). Defaults are what every
// row written before meant: replication factor 1, no leader epoch, no in-sync set, version 0,
// no peer address. in_sync is the JSON array of {"broker","directory_id"} ('' when empty).
constexpr const char* kSchemaV4Columns =
    "ALTER TABLE streams ADD COLUMN replication_factor INTEGER NOT NULL DEFAULT 1;"
    "ALTER TABLE streams ADD COLUMN min_insync INTEGER NOT NULL DEFAULT 1;"
    "ALTER TABLE assignments ADD COLUMN leader_epoch INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE assignments ADD COLUMN in_sync TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE assignments ADD COLUMN version INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE brokers ADD COLUMN peer_address TEXT NOT NULL DEFAULT '';";

// Column added by schema version 5 (level 17, reassignment): a running reassignment's
// target replica list ('' when none, what every row written before meant).
constexpr const char* kSchemaV5Columns =
    "ALTER TABLE assignments ADD COLUMN target_replicas TEXT NOT NULL DEFAULT '';";

// Tables added by schema version 6 (level 18): counters and their tombstones.
constexpr const char* kSchemaV6Tables =
    "CREATE TABLE counters(tenant TEXT NOT NULL, ns TEXT NOT NULL, name TEXT NOT NULL,"
    "  incarnation INTEGER NOT NULL, created_seq INTEGER NOT NULL,"
    "  created_at_us INTEGER NOT NULL, PRIMARY KEY(tenant, ns, name));"
    "CREATE TABLE counter_tombstones(tenant TEXT NOT NULL, ns TEXT NOT NULL, name TEXT NOT NULL,"
    "  deleted_up_to INTEGER NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY(tenant, ns, name));";

}  // namespace

CatalogFsm::CatalogFsm(std::size_t change_retention, MetadataLevel capability)
    : db_(open_memory_db()),
      change_retention_(change_retention ? change_retention : 1),
      capability_(capability) {
  try {
    create_schema();
  } catch (...) {
    close_db(db_);
    throw;
  }
}

CatalogFsm::~CatalogFsm() { close_db(db_); }

void CatalogFsm::reset() {
  bump_generation();
  held_.reset();
  seq_ahead_ = false;
  sqlite3* fresh = open_memory_db();
  std::swap(db_, fresh);
  close_db(fresh);
  create_schema();
}

void CatalogFsm::create_schema() {
  exec(db_,
       "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
       "CREATE TABLE tenants(name TEXT PRIMARY KEY, created_seq INTEGER NOT NULL);"
       "CREATE TABLE namespaces(tenant TEXT NOT NULL, name TEXT NOT NULL,"
       "  created_seq INTEGER NOT NULL, PRIMARY KEY(tenant, name));"
       "CREATE TABLE streams(tenant TEXT NOT NULL, ns TEXT NOT NULL, name TEXT NOT NULL,"
       "  incarnation INTEGER NOT NULL, shards INTEGER NOT NULL,"
       "  retention_max_bytes INTEGER NOT NULL, retention_max_age_ms INTEGER NOT NULL,"
       "  default_ack TEXT NOT NULL, created_seq INTEGER NOT NULL,"
       "  created_at_us INTEGER NOT NULL, PRIMARY KEY(tenant, ns, name));"
       "CREATE TABLE changes(seq INTEGER PRIMARY KEY, kind TEXT NOT NULL, payload TEXT NOT NULL);"
       "CREATE TABLE tombstones(tenant TEXT NOT NULL, ns TEXT NOT NULL, name TEXT NOT NULL,"
       "  deleted_up_to INTEGER NOT NULL, seq INTEGER NOT NULL DEFAULT 0,"
       "  PRIMARY KEY(tenant, ns, name));");
  exec(db_, kSchemaV2Tables);
  exec(db_, kSchemaV3Tables);
  exec(db_, kSchemaV4Columns);
  exec(db_, kSchemaV5Columns);
  exec(db_, kSchemaV6Tables);
  meta_set("schema_version", std::to_string(kCatalogSchemaVersion));
  meta_set("cluster_id", "");
  meta_set("applied_index", "0");
  // The group's level and floor are replicated state and start at the baseline, whatever
  // build creates the database (a build's own level must never leak into the catalog).
  // Raising them is the business of entries (level 14: the first flagged entry).
  meta_set("level", std::to_string(kLowestMetadataLevel.value()));
  meta_set("level_floor", std::to_string(kLowestMetadataLevel.value()));
  meta_set("changes_pruned_up_to", "0");
  meta_set("changes_count", "0");
}

void CatalogFsm::upgrade_schema_1_to_2() {
  exec(db_, "ALTER TABLE tombstones ADD COLUMN seq INTEGER NOT NULL DEFAULT 0;");
  exec(db_, kSchemaV2Tables);
  meta_set("schema_version", "2");
}

void CatalogFsm::upgrade_schema_2_to_3() {
  exec(db_, kSchemaV3Tables);
  Stmt n(db_, "SELECT COUNT(*) FROM changes");
  meta_set("changes_count", std::to_string(n.step() ? n.i64(0) : 0));
  meta_set("schema_version", "3");
}

void CatalogFsm::upgrade_schema_3_to_4() {
  exec(db_, kSchemaV4Columns);
  meta_set("schema_version", "4");
}

void CatalogFsm::upgrade_schema_4_to_5() {
  exec(db_, kSchemaV5Columns);
  meta_set("schema_version", "5");
}

void CatalogFsm::upgrade_schema_5_to_6() {
  exec(db_, kSchemaV6Tables);
  meta_set("schema_version", "6");
}

std::string CatalogFsm::meta_get(const char* key) const {
  Stmt s(db_, "SELECT value FROM meta WHERE key = ?");
  s.bind(1, std::string_view(key));
  return s.step() ? s.text(0) : std::string();
}

void CatalogFsm::meta_set(const char* key, const std::string& value) {
  Stmt s(db_, "INSERT INTO meta(key, value) VALUES(?, ?) "
              "ON CONFLICT(key) DO UPDATE SET value = excluded.value");
  s.bind(1, std::string_view(key)).bind(2, value);
  s.step();
}

void CatalogFsm::record_change(const ChangeEvent& e) {
  {
    Stmt s(db_, "INSERT INTO changes(seq, kind, payload) VALUES(?, ?, ?)");
    s.bind(1, static_cast<std::int64_t>(e.seq.value())).bind(2, to_string(e.kind))
        .bind(3, encode_change_payload(e));
    s.step();
  }
  // Keep the newest change_retention_ rows; remember the highest pruned seq so that a
  // watcher behind it is told to resync. The row count is kept in meta.changes_count, so
  // pruning reads only the rows it removes (an OFFSET from the newest row walked the whole
  // retained log on every apply: 2-3x slower applies once 10,000 changes were held).
  std::int64_t count = std::stoll("0" + meta_get("changes_count")) + 1;
  const auto keep = static_cast<std::int64_t>(change_retention_);
  if (count > keep) {
    Stmt cut(db_, "SELECT seq FROM changes ORDER BY seq LIMIT 1 OFFSET ?");
    cut.bind(1, count - keep - 1);
    if (cut.step()) {
      std::int64_t cutoff = cut.i64(0);
      Stmt del(db_, "DELETE FROM changes WHERE seq <= ?");
      del.bind(1, cutoff);
      del.step();
      count -= sqlite3_changes(db_);
      meta_set("changes_pruned_up_to", std::to_string(cutoff));
    }
  }
  meta_set("changes_count", std::to_string(count));
}

// Why this member cannot decide `e` (an entry above the level it runs at), or nothing.
// This is the only place the member's own level is read: it decides whether to apply at
// all, never what an entry means.
std::optional<CatalogFsm::Held> CatalogFsm::hold_reason(const DecodedEntry& e) const {
  auto held = [&](std::string why, MetadataLevel required) {
    return Held{0, why + "; this member runs at level " + std::to_string(capability_.value()), required};
  };
  if (e.newer)
    return Held{0, "the entry is a command of a newer build", MetadataLevel{capability_.value() + 1}};
  if (e.batch) {
    if (capability_ < kBatchedEntriesLevel)
      return held("the entry is a batch (metadata level " +
                      std::to_string(kBatchedEntriesLevel.value()) + ")",
                  kBatchedEntriesLevel);
    for (auto& i : e.inner)
      if (auto h = hold_reason(i)) {
        h->reason = "a command in the batch: " + h->reason;
        return h;
      }
    return std::nullopt;
  }
  if (!e.command) return std::nullopt;  // malformed: rejected alike by every build
  const Command& c = *e.command;
  const bool flagged = c.incarnations == IncarnationRule::flagged && (c.is_create() || c.is_delete());
  if (flagged && capability_ < kFlaggedEntriesLevel)
    return held("the entry uses the per-entry incarnations flag (metadata level " +
                    std::to_string(kFlaggedEntriesLevel.value()) + ")",
                kFlaggedEntriesLevel);
  if (needs_replicated_shards(c) && capability_ < kReplicatedShardsLevel)
    return held("the entry needs replicated shards (metadata level " +
                    std::to_string(kReplicatedShardsLevel.value()) + ")",
                kReplicatedShardsLevel);
  if (c.type == CommandType::reassign_shard && capability_ < kShardReassignmentLevel)
    return held("the entry changes a shard's replica list (metadata level " +
                    std::to_string(kShardReassignmentLevel.value()) + ")",
                kShardReassignmentLevel);
  if (is_counter_entry(c) && capability_ < kCountersLevel)
    return held("the entry is a counter create or delete (metadata level " +
                    std::to_string(kCountersLevel.value()) + ")",
                kCountersLevel);
  return std::nullopt;
}

ApplyResult CatalogFsm::apply(std::uint64_t index, std::string_view entry) {
  ApplyResult r;
  r.seq = ChangeSeq{index};
  if (held_) {
    // The entry is committed (the healthy members apply it): whether it took effect is
    // not this member's to say. Uncertain, never "it did not happen" (review finding).
    r.error = Error(Errc::unavailable, "member held at index " + std::to_string(held_->index) + ": " +
                                           held_->reason, Outcome::uncertain);
    return r;
  }
  const DecodedEntry e = decode_entry(entry);
  // An entry above the level this member runs at holds the member instead of being decided
  // here (a batch holds if any of its commands would).
  if (auto h = hold_reason(e)) {
    bump_generation();
    held_ = Held{index, h->reason + "; upgrade this member", h->required};
    r.error = Error(Errc::unavailable, "member held at index " + std::to_string(index) + ": " + held_->reason,
                    Outcome::uncertain);
    return r;
  }
  if (touches_fleet(e)) bump_generation();  // before the change: see generation()
  try {
    run(db_, "SAVEPOINT apply");
    // Each command gets its own change sequence: the entry's index, unless a batch before
    // it used more sequences than indexes (docs/metadata-levels.md "Batch entries").
    std::uint64_t seq = next_seq(index);
    if (!e.batch) {
      r = apply_one(seq, e, false);  // the entry's own savepoint is the command's
    } else if (members_below(kBatchedEntriesLevel) > 0) {
      // Refused as a whole: nothing applied (its proposer proposes each command alone).
      r = refuse(seq, Errc::conflict,
                 "a batch entry while a member is below level " +
                     std::to_string(kBatchedEntriesLevel.value()) +
                     " (the proposer's view of the group was stale)");
    } else {
      // The first batch applied raises the floor to 19, before its commands (a member below
      // 19 can no longer join, inside the batch or after it).
      if (level_floor() < kBatchedEntriesLevel)
        meta_set("level_floor", std::to_string(kBatchedEntriesLevel.value()));
      r = ApplyResult{};
      r.inner.reserve(e.inner.size());
      for (std::size_t i = 0; i < e.inner.size(); ++i) {
        const std::uint64_t s = seq + i;
        const DecodedEntry& c = e.inner[i];
        if (c.command && !is_batchable(c.command->type))
          r.inner.push_back(refuse(s, Errc::invalid_argument,
                                   std::string(to_string(c.command->type)) + " cannot be in a batch"));
        else
          r.inner.push_back(apply_one(s, c, true));
      }
      seq += e.inner.size() - 1;
    }
    meta_set("applied_index", std::to_string(index));
    // applied_seq is written only once sequences ran ahead of indexes (a group that never
    // batched has the same catalog, and state hash, as a level-18 build).
    if (seq != index || seq_ahead_) {
      meta_set("applied_seq", std::to_string(seq));
      seq_ahead_ = true;
    }
    run(db_, "RELEASE apply");
    r.seq = ChangeSeq{seq};
  } catch (const std::exception& ex) {
    return hold_after_failure(index, ex.what());
  } catch (...) {
    return hold_after_failure(index, "unknown exception");
  }
  return r;
}

bool CatalogFsm::touches_fleet(const DecodedEntry& e) {
  if (e.batch) {
    for (const auto& i : e.inner)
      if (touches_fleet(i)) return true;
    return false;
  }
  if (!e.command) return true;  // malformed or newer: rejected or held, but err on the safe side
  // The batchable commands are exactly those that read and write names and shards alone;
  // every other one (init, members, brokers, features) changes what a proposer reads.
  return !is_batchable(e.command->type);
}

std::uint64_t CatalogFsm::next_seq(std::uint64_t index) const {
  if (!seq_ahead_) return index;
  return std::max<std::uint64_t>(index, std::stoull("0" + meta_get("applied_seq")) + 1);
}

// One command (a lone entry, or one of a batch) at change sequence `seq`, in its own
// savepoint (`nested`: "one" inside the entry's "apply"; a lone entry's command uses
// "apply" itself): a refusal changes nothing (but the floor, below).
ApplyResult CatalogFsm::apply_one(std::uint64_t seq, const DecodedEntry& e, bool nested) {
  if (nested) run(db_, "SAVEPOINT one");
  ApplyResult r;
  const Command* cmd = e.command ? &*e.command : nullptr;
  const bool flagged = cmd && cmd->incarnations == IncarnationRule::flagged &&
                       (cmd->is_create() || cmd->is_delete());
  // A flagged entry raises the floor unless a recorded member is below its level (then
  // it is refused below, and the member that is below holds).
  const bool raise_floor = flagged && members_below(kFlaggedEntriesLevel) == 0;
  if (!cmd) {
    r.error = e.error ? *e.error : Error(Errc::malformed_body, "bad command");
  } else {
    r = apply_command(seq, *cmd);
  }
  if (!r.ok()) run(db_, nested ? "ROLLBACK TO one" : "ROLLBACK TO apply");
  if (raise_floor && level_floor() < kFlaggedEntriesLevel)
    meta_set("level_floor", std::to_string(kFlaggedEntriesLevel.value()));
  // The first level-16 entry applied raises the floor to 16 (it was refused, and changed
  // nothing, while a recorded member was below 16).
  if (r.ok() && cmd && needs_replicated_shards(*cmd) && level_floor() < kReplicatedShardsLevel)
    meta_set("level_floor", std::to_string(kReplicatedShardsLevel.value()));
  // Likewise the first reassignment raises it to 17.
  if (r.ok() && cmd && cmd->type == CommandType::reassign_shard && level_floor() < kShardReassignmentLevel)
    meta_set("level_floor", std::to_string(kShardReassignmentLevel.value()));
  // And the first counter entry applied raises it to 18.
  if (r.ok() && cmd && is_counter_entry(*cmd) && level_floor() < kCountersLevel)
    meta_set("level_floor", std::to_string(kCountersLevel.value()));
  if (nested) run(db_, "RELEASE one");
  r.seq = ChangeSeq{seq};
  return r;
}

// The error policy (docs/metadata-raft-design.md "Error policy"): a failure that is not a
// decision of the entry (SQLite failed, out of memory, a state the code thinks impossible)
// may be this member's alone. Advancing applied_index past it would make this member
// silently differ from the others, so it holds here: nothing of the entry stays, applied()
// stays before it, and every later entry is refused until the member is restarted (which
// replays from its snapshot and log, and holds again at the same index if the failure is
// deterministic).
ApplyResult CatalogFsm::hold_after_failure(std::uint64_t index, const std::string& what) {
  bump_generation();
  try {
    exec(db_, "ROLLBACK TO apply");
    exec(db_, "RELEASE apply");
  } catch (...) {
    // No savepoint open (the failure came before it), or SQLite itself is failing: the
    // member is held either way, and restart rebuilds the state from snapshot and log.
  }
  held_ = Held{index, "applying the entry failed (" + what + "); restart this member", capability_};
  try {
    seq_ahead_ = !meta_get("applied_seq").empty();  // as the rollback left it
  } catch (...) {
  }
  ApplyResult r;
  r.seq = ChangeSeq{index};
  r.error = Error(Errc::unavailable, "member held at index " + std::to_string(index) + ": " + held_->reason,
                  Outcome::uncertain);
  return r;
}

// Checks what every command shares (the cluster exists; names are valid; a flagged entry
// is not refused), then hands the command to its function (catalog_fsm_<concern>.cc).
ApplyResult CatalogFsm::apply_command(std::uint64_t index, const Command& c) {
  std::string cluster = meta_get("cluster_id");
  if (c.type == CommandType::init_cluster) return apply_init_cluster(index, c, cluster);
  if (cluster.empty())
    return refuse(index, Errc::unavailable,
                  "the catalog has no cluster id yet (init_cluster must come first)");
  ApplyResult r = apply_to_cluster(index, c);
  r.cluster_id = cluster;
  return r;
}

ApplyResult CatalogFsm::apply_init_cluster(std::uint64_t index, const Command& c,
                                           const std::string& cluster) {
  if (!cluster.empty()) {
    ApplyResult r = refuse(index, Errc::already_exists, "cluster already initialized as " + cluster);
    r.cluster_id = cluster;
    return r;
  }
  if (c.cluster_id.empty() || c.cluster_id.size() > 128)
    return refuse(index, Errc::invalid_argument, "cluster id must be 1..128 bytes");
  for (auto& f : c.finalize_features)
    if (!valid_feature_name(f))
      return refuse(index, Errc::invalid_argument, "bad feature name '" + f + "' in init_cluster");
  meta_set("cluster_id", c.cluster_id);
  // The features the bootstrapping proposer knows (minus those held back) are finalized
  // by the first entry. Recorded as written: apply does not filter them by what this
  // build knows.
  for (auto& f : c.finalize_features) {
    Stmt s(db_, "INSERT OR IGNORE INTO features(name, finalized_seq) VALUES(?, ?)");
    s.bind(1, f).bind(2, static_cast<std::int64_t>(index));
    s.step();
  }
  ApplyResult r;
  r.seq = ChangeSeq{index};
  r.cluster_id = c.cluster_id;
  return r;
}

ApplyResult CatalogFsm::apply_to_cluster(std::uint64_t index, const Command& c) {
  switch (c.type) {  // fleet and member ops: no names to validate
    case CommandType::register_broker: return apply_register_broker(index, c);
    case CommandType::unregister_broker: return apply_unregister_broker(index, c);
    case CommandType::finalize_feature: return apply_finalize_feature(index, c);
    case CommandType::join_member: return apply_join_member(index, c);
    case CommandType::leave_member: return apply_leave_member(index, c);
    default: break;
  }

  if (flagged_refused(c))
    return refuse(index, Errc::conflict, "a flagged entry while a member is below level " +
                                             std::to_string(kFlaggedEntriesLevel.value()) +
                                             " (the proposer's view of the group was stale)");

  if (auto v = validate_name(NameKind::tenant, c.tenant); !v.ok())
    return refuse(index, v.error().code, v.error().message);
  if (c.type != CommandType::create_tenant && c.type != CommandType::delete_tenant) {
    if (auto v = validate_name(NameKind::ns, c.ns); !v.ok())
      return refuse(index, v.error().code, v.error().message);
  }
  if (needs_replicated_shards(c)) {
    if (members_below(kReplicatedShardsLevel) > 0)
      return refuse(index, Errc::conflict,
                    "a replicated-shards entry while a member is below level " +
                        std::to_string(kReplicatedShardsLevel.value()) +
                        " (the proposer's view of the group was stale)");
    if (!is_finalized(kReplicatedShards))
      return refuse(index, Errc::conflict,
                    c.type == CommandType::update_shard
                        ? std::string("update_shard needs the fleet feature replicated_shards, "
                                      "which is not finalized")
                        : "replication_factor " + std::to_string(c.spec.replication_factor) +
                              " needs the fleet feature replicated_shards, which is not finalized");
  }
  if (c.type == CommandType::reassign_shard) {
    if (members_below(kShardReassignmentLevel) > 0)
      return refuse(index, Errc::conflict,
                    "a reassignment entry while a member is below level " +
                        std::to_string(kShardReassignmentLevel.value()) +
                        " (the proposer's view of the group was stale)");
    if (!is_finalized(kShardReassignment))
      return refuse(index, Errc::conflict,
                    "reassignment needs the fleet feature shard_reassignment, which is not "
                    "finalized");
  }
  if (is_counter_entry(c)) {
    if (members_below(kCountersLevel) > 0)
      return refuse(index, Errc::conflict,
                    "a counter entry while a member is below level " +
                        std::to_string(kCountersLevel.value()) +
                        " (the proposer's view of the group was stale)");
    if (!is_finalized(kCounters))
      return refuse(index, Errc::conflict,
                    "counters need the fleet feature counters, which is not finalized");
    if (auto v = validate_name(NameKind::counter, c.name); !v.ok())
      return refuse(index, v.error().code, v.error().message);
  }
  if (c.type == CommandType::create_stream || c.type == CommandType::delete_stream ||
      c.type == CommandType::update_shard || c.type == CommandType::reassign_shard) {
    if (auto v = validate_name(NameKind::stream, c.name); !v.ok())
      return refuse(index, v.error().code, v.error().message);
  }
  if (c.type == CommandType::create_cache || c.type == CommandType::delete_cache) {
    if (auto v = validate_name(NameKind::cache, c.name); !v.ok())
      return refuse(index, v.error().code, v.error().message);
  }

  switch (c.type) {
    case CommandType::create_tenant: return apply_create_tenant(index, c);
    case CommandType::delete_tenant: return apply_delete_tenant(index, c);
    case CommandType::create_namespace: return apply_create_namespace(index, c);
    case CommandType::delete_namespace: return apply_delete_namespace(index, c);
    case CommandType::create_stream: return apply_create_stream(index, c);
    case CommandType::delete_stream: return apply_delete_stream(index, c);
    case CommandType::create_cache: return apply_create_cache(index, c);
    case CommandType::delete_cache: return apply_delete_cache(index, c);
    case CommandType::create_counter: return apply_create_counter(index, c);
    case CommandType::delete_counter: return apply_delete_counter(index, c);
    case CommandType::update_shard:
    case CommandType::reassign_shard: return apply_update_shard(index, c);
    case CommandType::init_cluster:
    case CommandType::register_broker:
    case CommandType::unregister_broker:
    case CommandType::finalize_feature:
    case CommandType::join_member:
    case CommandType::leave_member:
      break;  // handled above
  }
  return refuse(index, Errc::internal, "unhandled command");
}

bool CatalogFsm::is_counter_entry(const Command& c) {
  return c.type == CommandType::create_counter || c.type == CommandType::delete_counter;
}

bool CatalogFsm::needs_replicated_shards(const Command& c) {
  return c.type == CommandType::update_shard || c.type == CommandType::reassign_shard ||
         (c.type == CommandType::create_stream && c.spec.replication_factor > 1);
}

bool CatalogFsm::flagged_refused(const Command& c) const {
  return c.incarnations == IncarnationRule::flagged && (c.is_create() || c.is_delete()) &&
         members_below(kFlaggedEntriesLevel) > 0;
}

Tombstone CatalogFsm::raise_tombstone(TombstoneTable table, const StreamKey& key,
                                      Incarnation up_to, std::uint64_t index) {
  Tombstone t{key, up_to, ChangeSeq{index}};
  std::optional<Tombstone> old;
  const char* sql = nullptr;
  switch (table) {
    case TombstoneTable::streams:
      old = tombstone(key);
      sql = "INSERT INTO tombstones(tenant, ns, name, deleted_up_to, seq)"
            " VALUES(?, ?, ?, ?, ?) ON CONFLICT(tenant, ns, name) DO UPDATE SET"
            " deleted_up_to = excluded.deleted_up_to, seq = excluded.seq";
      break;
    case TombstoneTable::caches:
      old = cache_tombstone(key);
      sql = "INSERT INTO cache_tombstones(tenant, ns, name, deleted_up_to, seq)"
            " VALUES(?, ?, ?, ?, ?) ON CONFLICT(tenant, ns, name) DO UPDATE SET"
            " deleted_up_to = excluded.deleted_up_to, seq = excluded.seq";
      break;
    case TombstoneTable::counters:
      old = counter_tombstone(key);
      sql = "INSERT INTO counter_tombstones(tenant, ns, name, deleted_up_to, seq)"
            " VALUES(?, ?, ?, ?, ?) ON CONFLICT(tenant, ns, name) DO UPDATE SET"
            " deleted_up_to = excluded.deleted_up_to, seq = excluded.seq";
      break;
  }
  if (old && old->deleted_up_to > up_to) t.deleted_up_to = old->deleted_up_to;  // only ever raised
  Stmt s(db_, sql);
  s.bind(1, key.tenant).bind(2, key.ns).bind(3, key.name)
      .bind(4, static_cast<std::int64_t>(t.deleted_up_to.value()))
      .bind(5, static_cast<std::int64_t>(index));
  s.step();
  return t;
}

void CatalogFsm::update_group_level() {
  auto g = recorded_group_level();
  meta_set("level", std::to_string(g ? g->value() : kLowestMetadataLevel.value()));
}

}  // namespace sluice::raft_meta
