#include "catalog_fsm.h"

#include <sqlite3.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <stdexcept>

#include "sluice/catalog_json.h"
#include "sluice/catalog_rules.h"
#include "sluice/features.h"
#include "sluice/names.h"

namespace sluice::raft_meta {

namespace {

// A prepared statement; finalized on destruction.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) {
    if (sqlite3_prepare_v2(db, sql, -1, &s_, nullptr) != SQLITE_OK) {
      std::string msg = std::string("sqlite prepare failed: ") + sqlite3_errmsg(db) + " in " + sql;
      throw std::runtime_error(msg);
    }
  }
  ~Stmt() { sqlite3_finalize(s_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  Stmt& bind(int i, std::string_view v) {
    sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& bind(int i, std::int64_t v) {
    sqlite3_bind_int64(s_, i, v);
    return *this;
  }
  // true: a row is available; false: done. Throws on error.
  bool step() {
    int rc = sqlite3_step(s_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    throw std::runtime_error(std::string("sqlite step failed: ") +
                             sqlite3_errmsg(sqlite3_db_handle(s_)));
  }
  std::int64_t i64(int c) const { return sqlite3_column_int64(s_, c); }
  std::string text(int c) const {
    auto* p = sqlite3_column_text(s_, c);
    return p ? std::string(reinterpret_cast<const char*>(p),
                           static_cast<std::size_t>(sqlite3_column_bytes(s_, c)))
             : std::string();
  }
  sqlite3_stmt* raw() const { return s_; }

 private:
  sqlite3_stmt* s_ = nullptr;
};

void exec(sqlite3* db, const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = std::string("sqlite exec failed: ") + (err ? err : "?") + " in " + sql;
    sqlite3_free(err);
    throw std::runtime_error(msg);
  }
}

sqlite3* open_memory_db() {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
      SQLITE_OK) {
    sqlite3_close(db);
    throw std::runtime_error("cannot open in-memory sqlite database");
  }
  return db;
}

// The change a catalog op records (stored with sluice/catalog_json.h's payload encoding).
ChangeEvent change(std::uint64_t index, ChangeEvent::Kind kind) {
  ChangeEvent e{};
  e.kind = kind;
  e.seq = ChangeSeq{index};
  return e;
}
ChangeEvent names_change(std::uint64_t index, ChangeEvent::Kind kind, const std::string& tenant,
                         const std::string& ns = {}) {
  ChangeEvent e = change(index, kind);
  e.tenant = tenant;
  e.ns = ns;
  return e;
}
ChangeEvent stream_change(std::uint64_t index, ChangeEvent::Kind kind, const StreamInfo& s,
                          const std::vector<Assignment>& as, const std::optional<Tombstone>& t) {
  ChangeEvent e = names_change(index, kind, s.key.tenant, s.key.ns);
  e.stream = s;
  e.assignments = as;
  e.tombstone = t;
  return e;
}
ChangeEvent cache_change(std::uint64_t index, ChangeEvent::Kind kind, const CacheInfo& c,
                         const std::optional<Tombstone>& t) {
  ChangeEvent e = names_change(index, kind, c.key.tenant, c.key.ns);
  e.cache = c;
  e.cache_tombstone = t;
  return e;
}
ChangeEvent broker_change(std::uint64_t index, ChangeEvent::Kind kind, const BrokerInfo& b) {
  ChangeEvent e = change(index, kind);
  e.broker = b;
  return e;
}
ChangeEvent feature_change(std::uint64_t index, const std::string& name) {
  ChangeEvent e = change(index, ChangeEvent::Kind::feature_finalized);
  e.feature = name;
  return e;
}

std::string join_ids(const std::vector<NodeId>& ids) {
  std::string out;
  for (auto id : ids) {
    if (!out.empty()) out += ",";
    out += std::to_string(id.value());
  }
  return out;
}

std::vector<NodeId> split_ids(std::string_view s) {
  std::vector<NodeId> out;
  std::size_t i = 0;
  while (i < s.size()) {
    std::size_t j = s.find(',', i);
    if (j == std::string_view::npos) j = s.size();
    std::uint64_t v = 0;
    for (std::size_t k = i; k < j; ++k)
      if (s[k] >= '0' && s[k] <= '9') v = v * 10 + static_cast<std::uint64_t>(s[k] - '0');
    if (j > i) out.push_back(NodeId{static_cast<std::uint32_t>(v)});
    i = j + 1;
  }
  return out;
}

std::string join_strings(const std::vector<std::string>& v) {
  std::string out;
  for (auto& x : v) {
    if (!out.empty()) out += ",";
    out += x;
  }
  return out;
}

std::vector<std::string> split_strings(std::string_view s) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i < s.size()) {
    std::size_t j = s.find(',', i);
    if (j == std::string_view::npos) j = s.size();
    if (j > i) out.emplace_back(s.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

constexpr const char* kStreamColumns =
    "tenant, ns, name, incarnation, shards, retention_max_bytes, retention_max_age_ms, "
    "default_ack, created_seq, created_at_us";

StreamInfo read_stream(const Stmt& s) {
  StreamInfo info;
  info.key = StreamKey{s.text(0), s.text(1), s.text(2)};
  info.incarnation = Incarnation{static_cast<std::uint64_t>(s.i64(3))};
  info.spec.shards = static_cast<std::uint32_t>(s.i64(4));
  info.spec.retention.max_bytes = s.i64(5);
  info.spec.retention.max_age_ms = s.i64(6);
  info.spec.default_ack = parse_ack_mode(s.text(7)).value_or(AckMode::leader);
  info.created_seq = ChangeSeq{static_cast<std::uint64_t>(s.i64(8))};
  info.created_at_us = s.i64(9);
  return info;
}

constexpr const char* kBrokerColumns =
    "id, address, directory_id, version, features, registered_seq";

BrokerInfo read_broker(const Stmt& s) {
  BrokerInfo b;
  b.id = NodeId{static_cast<std::uint32_t>(s.i64(0))};
  b.address = s.text(1);
  b.directory_id = s.text(2);
  b.version = s.text(3);
  b.features = split_strings(s.text(4));
  b.registered_seq = ChangeSeq{static_cast<std::uint64_t>(s.i64(5))};
  return b;
}

constexpr const char* kAssignmentColumns =
    "tenant, ns, name, shard, incarnation, generation, leader, replicas";

Assignment read_assignment(const Stmt& s) {
  Assignment a;
  a.key = StreamKey{s.text(0), s.text(1), s.text(2)};
  a.shard = ShardIndex{static_cast<std::uint32_t>(s.i64(3))};
  a.incarnation = Incarnation{static_cast<std::uint64_t>(s.i64(4))};
  a.generation = Generation{static_cast<std::uint64_t>(s.i64(5))};
  a.leader = NodeId{static_cast<std::uint32_t>(s.i64(6))};
  a.replicas = split_ids(s.text(7));
  return a;
}

Tombstone read_tombstone(const Stmt& s) {
  Tombstone t;
  t.key = StreamKey{s.text(0), s.text(1), s.text(2)};
  t.deleted_up_to = Incarnation{static_cast<std::uint64_t>(s.i64(3))};
  t.seq = ChangeSeq{static_cast<std::uint64_t>(s.i64(4))};
  return t;
}

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

constexpr const char* kCacheColumns = "tenant, ns, name, incarnation, default_ttl_ms, created_seq";

CacheInfo read_cache(const Stmt& s) {
  CacheInfo c;
  c.key = StreamKey{s.text(0), s.text(1), s.text(2)};
  c.incarnation = Incarnation{static_cast<std::uint64_t>(s.i64(3))};
  c.spec.default_ttl_ms = s.i64(4);
  c.created_seq = ChangeSeq{static_cast<std::uint64_t>(s.i64(5))};
  return c;
}

// The longest default TTL a cache accepts (10 years); -1 means "no expiry".
constexpr std::int64_t kMaxCacheTtlMs = 10LL * 365 * 24 * 3600 * 1000;

Error internal_error(const std::exception& e) {
  return Error(Errc::internal, std::string("catalog: ") + e.what());
}

}  // namespace

CatalogFsm::CatalogFsm(std::size_t change_retention, MetadataLevel capability)
    : db_(open_memory_db()),
      change_retention_(change_retention ? change_retention : 1),
      capability_(capability) {
  try {
    create_schema();
  } catch (...) {
    sqlite3_close(db_);
    throw;
  }
}

CatalogFsm::~CatalogFsm() { sqlite3_close(db_); }

void CatalogFsm::reset() {
  held_.reset();
  sqlite3* fresh = open_memory_db();
  std::swap(db_, fresh);
  sqlite3_close(fresh);
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

ApplyResult CatalogFsm::apply(std::uint64_t index, std::string_view entry) {
  ApplyResult r;
  r.seq = ChangeSeq{index};
  if (held_) {
    r.error = Error(Errc::unavailable, "member held at index " + std::to_string(held_->index) + ": " +
                                           held_->reason);
    return r;
  }
  auto cmd = decode_command(entry);
  const bool flagged = cmd.ok() && cmd->incarnations == IncarnationRule::flagged &&
                       (cmd->is_create() || cmd->is_delete());
  {
    // An entry above the level this member runs at holds the member instead of being
    // decided here. This is the only place the member's own level is read: it decides
    // whether to apply at all, never what an entry means.
    std::string why;
    MetadataLevel required{0};
    if (needs_newer_build(entry)) {
      why = "the entry is a command of a newer build";
      required = MetadataLevel{capability_.value() + 1};
    } else if (flagged && capability_ < kFlaggedEntriesLevel) {
      why = "the entry uses the per-entry incarnations flag (metadata level " +
            std::to_string(kFlaggedEntriesLevel.value()) + "); this member runs at level " +
            std::to_string(capability_.value());
      required = kFlaggedEntriesLevel;
    }
    if (!why.empty()) {
      held_ = Held{index, why + "; upgrade this member", required};
      r.error = Error(Errc::unavailable, "member held at index " + std::to_string(index) + ": " + held_->reason);
      return r;
    }
  }
  try {
    // A flagged entry raises the floor unless a recorded member is below its level (then
    // it is refused below, and the member that is below holds).
    const bool raise_floor = flagged && members_below(kFlaggedEntriesLevel) == 0;
    exec(db_, "SAVEPOINT apply");
    if (!cmd.ok()) {
      r.error = cmd.error();
    } else {
      r = apply_command(index, cmd.value());
    }
    if (!r.ok()) {
      // A rejected entry changes nothing but applied_index (and the floor, below).
      exec(db_, "ROLLBACK TO apply");
    }
    if (raise_floor && level_floor() < kFlaggedEntriesLevel)
      meta_set("level_floor", std::to_string(kFlaggedEntriesLevel.value()));
    meta_set("applied_index", std::to_string(index));
    exec(db_, "RELEASE apply");
  } catch (const std::exception& e) {
    return hold_after_failure(index, e.what());
  } catch (...) {
    return hold_after_failure(index, "unknown exception");
  }
  r.seq = ChangeSeq{index};
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
  try {
    exec(db_, "ROLLBACK TO apply");
    exec(db_, "RELEASE apply");
  } catch (...) {
    // No savepoint open (the failure came before it), or SQLite itself is failing: the
    // member is held either way, and restart rebuilds the state from snapshot and log.
  }
  held_ = Held{index, "applying the entry failed (" + what + "); restart this member", capability_};
  ApplyResult r;
  r.seq = ChangeSeq{index};
  r.error = Error(Errc::unavailable, "member held at index " + std::to_string(index) + ": " + held_->reason);
  return r;
}

ApplyResult CatalogFsm::apply_command(std::uint64_t index, const Command& c) {
  ApplyResult r;
  r.seq = ChangeSeq{index};
  const auto seq = static_cast<std::int64_t>(index);
  auto fail = [&](Errc code, std::string msg) {
    r.error = Error(code, std::move(msg));
    return r;
  };

  std::string cluster = meta_get("cluster_id");
  if (c.type == CommandType::init_cluster) {
    if (!cluster.empty()) {
      r.cluster_id = cluster;
      return fail(Errc::already_exists, "cluster already initialized as " + cluster);
    }
    if (c.cluster_id.empty() || c.cluster_id.size() > 128)
      return fail(Errc::invalid_argument, "cluster id must be 1..128 bytes");
    for (auto& f : c.finalize_features)
      if (!valid_feature_name(f))
        return fail(Errc::invalid_argument, "bad feature name '" + f + "' in init_cluster");
    meta_set("cluster_id", c.cluster_id);
    // The features the bootstrapping proposer knows (minus those held back) are finalized
    // by the first entry. Recorded as written: apply does not filter them by what this
    // build knows.
    for (auto& f : c.finalize_features) {
      Stmt s(db_, "INSERT OR IGNORE INTO features(name, finalized_seq) VALUES(?, ?)");
      s.bind(1, f).bind(2, seq);
      s.step();
    }
    r.cluster_id = c.cluster_id;
    return r;
  }
  if (cluster.empty())
    return fail(Errc::unavailable, "the catalog has no cluster id yet (init_cluster must come first)");
  r.cluster_id = cluster;

  // --- fleet ops ---------------------------------------------------------------------------
  switch (c.type) {
    case CommandType::register_broker: {
      const BrokerRegistration& b = c.broker;
      if (b.id.value() == 0) return fail(Errc::invalid_argument, "broker id must be > 0");
      std::vector<std::string> features = b.features;
      for (auto& f : features)
        if (!valid_feature_name(f))
          return fail(Errc::invalid_argument, "bad feature name '" + f + "'");
      std::sort(features.begin(), features.end());
      features.erase(std::unique(features.begin(), features.end()), features.end());
      std::set<std::string, std::less<>> finalized;
      for (auto& [name, at] : finalized_features()) finalized.insert(name);
      if (auto a = admit_broker(features, finalized); !a.ok())
        return fail(a.error().code, "broker " + std::to_string(b.id.value()) + ": " +
                                        a.error().message);
      BrokerInfo info;
      info.id = b.id;
      info.address = b.address;
      info.directory_id = b.directory_id;
      info.version = b.version;
      info.features = features;
      info.registered_seq = ChangeSeq{index};
      Stmt s(db_, "INSERT INTO brokers(id, address, directory_id, version, features, registered_seq)"
                  " VALUES(?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET"
                  " address = excluded.address, directory_id = excluded.directory_id,"
                  " version = excluded.version, features = excluded.features,"
                  " registered_seq = excluded.registered_seq");
      s.bind(1, static_cast<std::int64_t>(info.id.value())).bind(2, info.address)
          .bind(3, info.directory_id).bind(4, info.version).bind(5, join_strings(info.features))
          .bind(6, seq);
      s.step();
      record_change(broker_change(index, ChangeEvent::Kind::broker_registered, info));
      r.broker = info;
      return r;
    }
    case CommandType::unregister_broker: {
      auto existing = broker(c.broker.id);
      if (!existing)
        return fail(Errc::not_found, "no broker " + std::to_string(c.broker.id.value()));
      Stmt s(db_, "DELETE FROM brokers WHERE id = ?");
      s.bind(1, static_cast<std::int64_t>(c.broker.id.value()));
      s.step();
      record_change(broker_change(index, ChangeEvent::Kind::broker_unregistered, *existing));
      r.broker = *existing;
      return r;
    }
    case CommandType::finalize_feature: {
      // Apply records any well-formed name: whether a feature is "known" depends on the
      // applying build, and apply must not (felix: a level-8 member proposes a finalize of a
      // feature it does not know as an ordinary one). The proposer answers not_found for a
      // feature it does not know, before proposing.
      if (!valid_feature_name(c.feature))
        return fail(Errc::invalid_argument, "bad feature name '" + c.feature + "'");
      r.feature = c.feature;
      {
        Stmt q(db_, "SELECT finalized_seq FROM features WHERE name = ?");
        q.bind(1, c.feature);
        if (q.step()) {  // one-way and idempotent: unchanged, no change event
          r.finalized_seq = ChangeSeq{static_cast<std::uint64_t>(q.i64(0))};
          return r;
        }
      }
      Stmt s(db_, "INSERT INTO features(name, finalized_seq) VALUES(?, ?)");
      s.bind(1, c.feature).bind(2, seq);
      s.step();
      record_change(feature_change(index, c.feature));
      r.finalized_seq = ChangeSeq{index};
      return r;
    }
    case CommandType::join_member: {
      const JoinRequest& m = c.member;
      if (m.id.value() == 0) return fail(Errc::invalid_argument, "member id must be > 0");
      if (m.raft_address.empty() || m.raft_address.size() > 255 || m.rpc_address.size() > 255)
        return fail(Errc::invalid_argument, "member addresses must be 1..255 bytes");
      if (m.level < kLowestMetadataLevel)
        return fail(Errc::invalid_argument, "member level " + std::to_string(m.level.value()) +
                                                " is below the lowest level " +
                                                std::to_string(kLowestMetadataLevel.value()));
      if (m.level < level_floor())
        return fail(Errc::conflict, "member " + std::to_string(m.id.value()) + " runs at metadata level " +
                                        std::to_string(m.level.value()) + ", below the group's level floor " +
                                        std::to_string(level_floor().value()) +
                                        " (raised by the first flagged entry); upgrade it first");
      if (auto old = member(m.id); old && old->raft_address != m.raft_address)
        return fail(Errc::conflict, "node id " + std::to_string(m.id.value()) +
                                        " is already a member at " + old->raft_address);
      Stmt q(db_, "SELECT id FROM members WHERE raft_address = ? AND id != ?");
      q.bind(1, m.raft_address).bind(2, static_cast<std::int64_t>(m.id.value()));
      if (q.step())
        return fail(Errc::conflict, "raft address " + m.raft_address + " belongs to member " +
                                        std::to_string(q.i64(0)));
      Stmt s(db_, "INSERT INTO members(id, raft_address, rpc_address, level, joined_seq)"
                  " VALUES(?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET"
                  " rpc_address = excluded.rpc_address, level = excluded.level,"
                  " joined_seq = excluded.joined_seq");
      s.bind(1, static_cast<std::int64_t>(m.id.value())).bind(2, m.raft_address)
          .bind(3, m.rpc_address).bind(4, static_cast<std::int64_t>(m.level.value())).bind(5, seq);
      s.step();
      update_group_level();
      return r;
    }
    case CommandType::leave_member: {
      if (!member(c.member.id))
        return fail(Errc::not_found, "no member " + std::to_string(c.member.id.value()));
      if (list_members().size() <= 1)
        return fail(Errc::conflict, "member " + std::to_string(c.member.id.value()) +
                                        " is the last voter; a group cannot remove its last member");
      Stmt s(db_, "DELETE FROM members WHERE id = ?");
      s.bind(1, static_cast<std::int64_t>(c.member.id.value()));
      s.step();
      update_group_level();
      return r;
    }
    default:
      break;
  }

  if (flagged_refused(c))
    return fail(Errc::conflict, "a flagged entry while a member is below level " +
                                    std::to_string(kFlaggedEntriesLevel.value()) +
                                    " (the proposer's view of the group was stale)");

  // --- catalog ops -------------------------------------------------------------------------
  auto tenant_exists = [&](const std::string& t) {
    Stmt s(db_, "SELECT 1 FROM tenants WHERE name = ?");
    s.bind(1, t);
    return s.step();
  };
  auto ns_exists = [&](const std::string& t, const std::string& n) {
    Stmt s(db_, "SELECT 1 FROM namespaces WHERE tenant = ? AND name = ?");
    s.bind(1, t).bind(2, n);
    return s.step();
  };

  if (auto v = validate_name(NameKind::tenant, c.tenant); !v.ok())
    return fail(v.error().code, v.error().message);
  if (c.type != CommandType::create_tenant && c.type != CommandType::delete_tenant) {
    if (auto v = validate_name(NameKind::ns, c.ns); !v.ok())
      return fail(v.error().code, v.error().message);
  }
  const bool stream_op =
      c.type == CommandType::create_stream || c.type == CommandType::delete_stream;
  if (stream_op) {
    if (auto v = validate_name(NameKind::stream, c.name); !v.ok())
      return fail(v.error().code, v.error().message);
  }
  if (c.type == CommandType::create_cache || c.type == CommandType::delete_cache) {
    if (auto v = validate_name(NameKind::cache, c.name); !v.ok())
      return fail(v.error().code, v.error().message);
  }

  switch (c.type) {
    case CommandType::init_cluster:
    case CommandType::register_broker:
    case CommandType::unregister_broker:
    case CommandType::finalize_feature:
    case CommandType::join_member:
    case CommandType::leave_member:
      break;  // handled above
    case CommandType::create_cache: {
      if (c.cache_spec.default_ttl_ms != -1 &&
          (c.cache_spec.default_ttl_ms <= 0 || c.cache_spec.default_ttl_ms > kMaxCacheTtlMs))
        return fail(Errc::invalid_argument, "default_ttl_ms must be -1 (no expiry) or 1.." +
                                                std::to_string(kMaxCacheTtlMs));
      if (!ns_exists(c.tenant, c.ns))
        return fail(Errc::not_found, "no namespace " + c.tenant + "/" + c.ns);
      StreamKey key{c.tenant, c.ns, c.name};
      if (cache(key)) return fail(Errc::already_exists, "cache " + key.to_string() + " exists");
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
    case CommandType::delete_cache: {
      StreamKey key{c.tenant, c.ns, c.name};
      auto existing = cache(key);
      if (!existing) return fail(Errc::not_found, "no cache " + key.to_string());
      {
        Stmt s(db_, "DELETE FROM caches WHERE tenant = ? AND ns = ? AND name = ?");
        s.bind(1, c.tenant).bind(2, c.ns).bind(3, c.name);
        s.step();
      }
      std::optional<Tombstone> written;
      if (auto up_to = decide_delete_tombstone(existing->incarnation,
                                               c.incarnations == IncarnationRule::flagged,
                                               is_finalized(kCacheIncarnations))) {
        Tombstone t;
        t.key = key;
        t.deleted_up_to = *up_to;
        if (auto old = cache_tombstone(key); old && old->deleted_up_to > t.deleted_up_to)
          t.deleted_up_to = old->deleted_up_to;
        t.seq = ChangeSeq{index};
        Stmt s(db_, "INSERT INTO cache_tombstones(tenant, ns, name, deleted_up_to, seq)"
                    " VALUES(?, ?, ?, ?, ?) ON CONFLICT(tenant, ns, name) DO UPDATE SET"
                    " deleted_up_to = excluded.deleted_up_to, seq = excluded.seq");
        s.bind(1, c.tenant).bind(2, c.ns).bind(3, c.name)
            .bind(4, static_cast<std::int64_t>(t.deleted_up_to.value())).bind(5, seq);
        s.step();
        written = t;
      }
      record_change(cache_change(index, ChangeEvent::Kind::cache_deleted, *existing, written));
      r.cache = *existing;
      r.tombstone = written;
      return r;
    }
    case CommandType::create_tenant: {
      if (tenant_exists(c.tenant)) return fail(Errc::already_exists, "tenant " + c.tenant + " exists");
      Stmt s(db_, "INSERT INTO tenants(name, created_seq) VALUES(?, ?)");
      s.bind(1, c.tenant).bind(2, seq);
      s.step();
      record_change(names_change(index, ChangeEvent::Kind::tenant_created, c.tenant));
      r.tenant = TenantInfo{c.tenant, ChangeSeq{index}};
      return r;
    }
    case CommandType::delete_tenant: {
      if (!tenant_exists(c.tenant)) return fail(Errc::not_found, "no tenant " + c.tenant);
      Stmt has(db_, "SELECT 1 FROM namespaces WHERE tenant = ? LIMIT 1");
      has.bind(1, c.tenant);
      if (has.step())
        return fail(Errc::conflict, "tenant " + c.tenant + " still has namespaces");
      Stmt s(db_, "DELETE FROM tenants WHERE name = ?");
      s.bind(1, c.tenant);
      s.step();
      record_change(names_change(index, ChangeEvent::Kind::tenant_deleted, c.tenant));
      return r;
    }
    case CommandType::create_namespace: {
      if (!tenant_exists(c.tenant)) return fail(Errc::not_found, "no tenant " + c.tenant);
      if (ns_exists(c.tenant, c.ns))
        return fail(Errc::already_exists, "namespace " + c.tenant + "/" + c.ns + " exists");
      Stmt s(db_, "INSERT INTO namespaces(tenant, name, created_seq) VALUES(?, ?, ?)");
      s.bind(1, c.tenant).bind(2, c.ns).bind(3, seq);
      s.step();
      record_change(names_change(index, ChangeEvent::Kind::namespace_created, c.tenant, c.ns));
      r.ns = NamespaceInfo{c.tenant, c.ns, ChangeSeq{index}};
      return r;
    }
    case CommandType::delete_namespace: {
      if (!ns_exists(c.tenant, c.ns))
        return fail(Errc::not_found, "no namespace " + c.tenant + "/" + c.ns);
      Stmt has(db_, "SELECT 1 FROM streams WHERE tenant = ? AND ns = ? UNION ALL"
                    " SELECT 1 FROM caches WHERE tenant = ? AND ns = ? LIMIT 1");
      has.bind(1, c.tenant).bind(2, c.ns).bind(3, c.tenant).bind(4, c.ns);
      if (has.step())
        return fail(Errc::conflict, "namespace " + c.tenant + "/" + c.ns + " still has streams or caches");
      Stmt s(db_, "DELETE FROM namespaces WHERE tenant = ? AND name = ?");
      s.bind(1, c.tenant).bind(2, c.ns);
      s.step();
      record_change(names_change(index, ChangeEvent::Kind::namespace_deleted, c.tenant, c.ns));
      return r;
    }
    case CommandType::create_stream: {
      if (auto v = validate_stream_spec(c.spec); !v.ok())
        return fail(v.error().code, v.error().message);
      if (!c.placement.empty() && c.placement.size() != c.spec.shards)
        return fail(Errc::invalid_argument,
                    "placement names " + std::to_string(c.placement.size()) +
                        " shards, the spec has " + std::to_string(c.spec.shards));
      if (!ns_exists(c.tenant, c.ns))
        return fail(Errc::not_found, "no namespace " + c.tenant + "/" + c.ns);
      StreamKey key{c.tenant, c.ns, c.name};
      {
        Stmt s(db_, "SELECT 1 FROM streams WHERE tenant = ? AND ns = ? AND name = ?");
        s.bind(1, c.tenant).bind(2, c.ns).bind(3, c.name);
        if (s.step()) return fail(Errc::already_exists, "stream " + key.to_string() + " exists");
      }
      StreamInfo info;
      info.key = key;
      // The rule (features.h): decided only from the entry (proposed, flag) and replicated
      // state (finalized, the name's tombstone). An unflagged 0 proposal stores 0.
      std::optional<Incarnation> tomb;
      if (auto t = tombstone(key)) tomb = t->deleted_up_to;
      info.incarnation = decide_create_incarnation(
          c.proposed_incarnation, c.incarnations == IncarnationRule::flagged,
          is_finalized(kStreamIncarnations), tomb);
      info.spec = c.spec;
      info.created_seq = ChangeSeq{index};
      info.created_at_us = c.clock_us;
      Stmt s(db_, "INSERT INTO streams(tenant, ns, name, incarnation, shards, retention_max_bytes,"
                  " retention_max_age_ms, default_ack, created_seq, created_at_us)"
                  " VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
      s.bind(1, c.tenant).bind(2, c.ns).bind(3, c.name)
          .bind(4, static_cast<std::int64_t>(info.incarnation.value()))
          .bind(5, static_cast<std::int64_t>(info.spec.shards))
          .bind(6, info.spec.retention.max_bytes).bind(7, info.spec.retention.max_age_ms)
          .bind(8, to_string(info.spec.default_ack)).bind(9, seq).bind(10, info.created_at_us);
      s.step();
      // One assignment per shard, first generation = the create's index (never 0).
      std::vector<Assignment> as;
      for (std::uint32_t i = 0; i < info.spec.shards; ++i) {
        Assignment a;
        a.key = key;
        a.shard = ShardIndex{i};
        a.incarnation = info.incarnation;
        a.generation = first_generation(ChangeSeq{index});
        if (!c.placement.empty()) {
          a.leader = NodeId{c.placement[i].leader};
          for (auto rep : c.placement[i].replicas) a.replicas.push_back(NodeId{rep});
        }
        Stmt ins(db_, "INSERT INTO assignments(tenant, ns, name, shard, incarnation, generation,"
                      " leader, replicas) VALUES(?, ?, ?, ?, ?, ?, ?, ?)");
        ins.bind(1, c.tenant).bind(2, c.ns).bind(3, c.name)
            .bind(4, static_cast<std::int64_t>(i))
            .bind(5, static_cast<std::int64_t>(a.incarnation.value()))
            .bind(6, static_cast<std::int64_t>(a.generation.value()))
            .bind(7, static_cast<std::int64_t>(a.leader.value()))
            .bind(8, join_ids(a.replicas));
        ins.step();
        as.push_back(std::move(a));
      }
      record_change(stream_change(index, ChangeEvent::Kind::stream_created, info, as, std::nullopt));
      r.stream = info;
      r.assignments = std::move(as);
      return r;
    }
    case CommandType::delete_stream: {
      StreamKey key{c.tenant, c.ns, c.name};
      auto existing = get_stream(key);
      if (!existing.ok()) return fail(existing.error().code, existing.error().message);
      std::vector<Assignment> removed = assignments(key);
      {
        Stmt s(db_, "DELETE FROM streams WHERE tenant = ? AND ns = ? AND name = ?");
        s.bind(1, c.tenant).bind(2, c.ns).bind(3, c.name);
        s.step();
      }
      {
        Stmt s(db_, "DELETE FROM assignments WHERE tenant = ? AND ns = ? AND name = ?");
        s.bind(1, c.tenant).bind(2, c.ns).bind(3, c.name);
        s.step();
      }
      // An unflagged delete of a stream at 0 writes no tombstone (what level 8 stores); a
      // flagged one only once stream_incarnations is finalized (replicated state).
      std::optional<Tombstone> written;
      if (auto up_to = decide_delete_tombstone(existing->incarnation,
                                               c.incarnations == IncarnationRule::flagged,
                                               is_finalized(kStreamIncarnations))) {
        Tombstone t;
        t.key = key;
        t.deleted_up_to = *up_to;
        if (auto old = tombstone(key); old && old->deleted_up_to > t.deleted_up_to)
          t.deleted_up_to = old->deleted_up_to;  // only ever raised
        t.seq = ChangeSeq{index};
        Stmt s(db_, "INSERT INTO tombstones(tenant, ns, name, deleted_up_to, seq)"
                    " VALUES(?, ?, ?, ?, ?) ON CONFLICT(tenant, ns, name) DO UPDATE SET"
                    " deleted_up_to = excluded.deleted_up_to, seq = excluded.seq");
        s.bind(1, c.tenant).bind(2, c.ns).bind(3, c.name)
            .bind(4, static_cast<std::int64_t>(t.deleted_up_to.value())).bind(5, seq);
        s.step();
        written = t;
      }
      record_change(
          stream_change(index, ChangeEvent::Kind::stream_deleted, existing.value(), removed, written));
      r.stream = existing.value();
      r.assignments = std::move(removed);
      r.tombstone = written;
      return r;
    }
  }
  return fail(Errc::internal, "unhandled command");
}

std::string CatalogFsm::snapshot() const {
  if (held_) return {};
  sqlite3_int64 size = 0;
  unsigned char* p = sqlite3_serialize(db_, "main", &size, 0);
  if (!p) return {};
  std::string out(reinterpret_cast<const char*>(p), static_cast<std::size_t>(size));
  sqlite3_free(p);
  return out;
}

Result<void> CatalogFsm::restore(std::string_view image) {
  if (image.empty()) return Error(Errc::corrupt_data, "empty catalog snapshot");
  sqlite3* fresh = nullptr;
  try {
    fresh = open_memory_db();
  } catch (const std::exception& e) {
    return internal_error(e);
  }
  auto* buf = static_cast<unsigned char*>(sqlite3_malloc64(image.size()));
  if (!buf) {
    sqlite3_close(fresh);
    return Error(Errc::internal, "out of memory restoring the catalog snapshot");
  }
  std::memcpy(buf, image.data(), image.size());
  int rc = sqlite3_deserialize(fresh, "main", buf, static_cast<sqlite3_int64>(image.size()),
                               static_cast<sqlite3_int64>(image.size()),
                               SQLITE_DESERIALIZE_FREEONCLOSE | SQLITE_DESERIALIZE_RESIZEABLE);
  if (rc != SQLITE_OK) {  // sqlite frees buf on failure with FREEONCLOSE
    sqlite3_close(fresh);
    return Error(Errc::corrupt_data, "catalog snapshot is not a SQLite database");
  }
  sqlite3* old = db_;
  db_ = fresh;
  std::string version;
  try {
    version = meta_get("schema_version");
  } catch (const std::exception&) {
  }
  if (version == "1" || version == "2") {
    const std::string from = version;
    try {
      exec(db_, "SAVEPOINT upgrade");
      if (version == "1") upgrade_schema_1_to_2();
      upgrade_schema_2_to_3();
      exec(db_, "RELEASE upgrade");
      version = meta_get("schema_version");
    } catch (const std::exception&) {
      version = from + " (upgrade failed)";
    }
  }
  if (version != std::to_string(kCatalogSchemaVersion)) {
    db_ = old;
    sqlite3_close(fresh);
    return Error(Errc::corrupt_data,
                 "catalog snapshot has schema version '" + version + "', this build reads " +
                     std::to_string(kCatalogSchemaVersion));
  }
  sqlite3_close(old);
  held_.reset();
  // A snapshot of a group whose floor is above this member's level holds it: its state
  // may hold results of entries this member cannot decide.
  if (level_floor() > capability_)
    held_ = Held{applied().value(),
                 "the snapshot's level floor is " + std::to_string(level_floor().value()) +
                     ", this member runs at level " + std::to_string(capability_.value()) +
                     "; upgrade this member",
                 level_floor()};
  return {};
}

std::string CatalogFsm::cluster_id() const { return meta_get("cluster_id"); }

ChangeSeq CatalogFsm::applied() const {
  return ChangeSeq{std::stoull("0" + meta_get("applied_index"))};
}

MetadataLevel CatalogFsm::level() const {
  return MetadataLevel{static_cast<std::uint32_t>(std::stoul("0" + meta_get("level")))};
}

MetadataLevel CatalogFsm::level_floor() const {
  return MetadataLevel{static_cast<std::uint32_t>(std::stoul("0" + meta_get("level_floor")))};
}

Result<std::vector<TenantInfo>> CatalogFsm::list_tenants() const {
  try {
    std::vector<TenantInfo> out;
    Stmt s(db_, "SELECT name, created_seq FROM tenants ORDER BY name");
    while (s.step()) out.push_back(TenantInfo{s.text(0), ChangeSeq{static_cast<std::uint64_t>(s.i64(1))}});
    return out;
  } catch (const std::exception& e) {
    return internal_error(e);
  }
}

Result<std::vector<NamespaceInfo>> CatalogFsm::list_namespaces(const std::string& tenant) const {
  try {
    {
      Stmt t(db_, "SELECT 1 FROM tenants WHERE name = ?");
      t.bind(1, tenant);
      if (!t.step()) return Error(Errc::not_found, "no tenant " + tenant);
    }
    std::vector<NamespaceInfo> out;
    Stmt s(db_, "SELECT tenant, name, created_seq FROM namespaces WHERE tenant = ? ORDER BY name");
    s.bind(1, tenant);
    while (s.step())
      out.push_back(NamespaceInfo{s.text(0), s.text(1), ChangeSeq{static_cast<std::uint64_t>(s.i64(2))}});
    return out;
  } catch (const std::exception& e) {
    return internal_error(e);
  }
}

Result<StreamInfo> CatalogFsm::get_stream(const StreamKey& key) const {
  try {
    std::string sql = std::string("SELECT ") + kStreamColumns +
                      " FROM streams WHERE tenant = ? AND ns = ? AND name = ?";
    Stmt s(db_, sql.c_str());
    s.bind(1, key.tenant).bind(2, key.ns).bind(3, key.name);
    if (!s.step()) return Error(Errc::not_found, "no stream " + key.to_string());
    return read_stream(s);
  } catch (const std::exception& e) {
    return internal_error(e);
  }
}

Result<std::vector<StreamInfo>> CatalogFsm::list_streams(const std::string& tenant,
                                                         const std::string& ns) const {
  try {
    {
      Stmt t(db_, "SELECT 1 FROM namespaces WHERE tenant = ? AND name = ?");
      t.bind(1, tenant).bind(2, ns);
      if (!t.step()) return Error(Errc::not_found, "no namespace " + tenant + "/" + ns);
    }
    std::string sql = std::string("SELECT ") + kStreamColumns +
                      " FROM streams WHERE tenant = ? AND ns = ? ORDER BY name";
    Stmt s(db_, sql.c_str());
    s.bind(1, tenant).bind(2, ns);
    std::vector<StreamInfo> out;
    while (s.step()) out.push_back(read_stream(s));
    return out;
  } catch (const std::exception& e) {
    return internal_error(e);
  }
}

CatalogSnapshot CatalogFsm::catalog_snapshot() const {
  CatalogSnapshot snap;
  snap.seq = applied();
  if (auto t = list_tenants(); t.ok()) snap.tenants = std::move(t.value());
  {
    Stmt s(db_, "SELECT tenant, name, created_seq FROM namespaces ORDER BY tenant, name");
    while (s.step())
      snap.namespaces.push_back(
          NamespaceInfo{s.text(0), s.text(1), ChangeSeq{static_cast<std::uint64_t>(s.i64(2))}});
  }
  std::string sql = std::string("SELECT ") + kStreamColumns +
                    " FROM streams ORDER BY tenant, ns, name";
  {
    Stmt s(db_, sql.c_str());
    while (s.step()) snap.streams.push_back(read_stream(s));
  }
  snap.tombstones = list_tombstones();
  {
    std::string q = std::string("SELECT ") + kAssignmentColumns +
                    " FROM assignments ORDER BY tenant, ns, name, shard";
    Stmt s(db_, q.c_str());
    while (s.step()) snap.assignments.push_back(read_assignment(s));
  }
  for (auto& [name, at] : finalized_features()) snap.finalized_features.push_back(name);
  snap.brokers = list_brokers();
  {
    std::string q = std::string("SELECT ") + kCacheColumns + " FROM caches ORDER BY tenant, ns, name";
    Stmt s(db_, q.c_str());
    while (s.step()) snap.caches.push_back(read_cache(s));
  }
  snap.cache_tombstones = list_cache_tombstones();
  return snap;
}

std::vector<Tombstone> CatalogFsm::list_cache_tombstones() const {
  std::vector<Tombstone> out;
  Stmt s(db_, "SELECT tenant, ns, name, deleted_up_to, seq FROM cache_tombstones"
              " ORDER BY tenant, ns, name");
  while (s.step()) out.push_back(read_tombstone(s));
  return out;
}

std::optional<Tombstone> CatalogFsm::cache_tombstone(const StreamKey& key) const {
  Stmt s(db_, "SELECT tenant, ns, name, deleted_up_to, seq FROM cache_tombstones"
              " WHERE tenant = ? AND ns = ? AND name = ?");
  s.bind(1, key.tenant).bind(2, key.ns).bind(3, key.name);
  if (!s.step()) return std::nullopt;
  return read_tombstone(s);
}

std::optional<CacheInfo> CatalogFsm::cache(const StreamKey& key) const {
  std::string q = std::string("SELECT ") + kCacheColumns +
                  " FROM caches WHERE tenant = ? AND ns = ? AND name = ?";
  Stmt s(db_, q.c_str());
  s.bind(1, key.tenant).bind(2, key.ns).bind(3, key.name);
  if (!s.step()) return std::nullopt;
  return read_cache(s);
}

Result<std::vector<CacheInfo>> CatalogFsm::list_caches(const std::string& tenant,
                                                      const std::string& ns) const {
  try {
    {
      Stmt t(db_, "SELECT 1 FROM namespaces WHERE tenant = ? AND name = ?");
      t.bind(1, tenant).bind(2, ns);
      if (!t.step()) return Error(Errc::not_found, "no namespace " + tenant + "/" + ns);
    }
    std::string q = std::string("SELECT ") + kCacheColumns +
                    " FROM caches WHERE tenant = ? AND ns = ? ORDER BY name";
    Stmt s(db_, q.c_str());
    s.bind(1, tenant).bind(2, ns);
    std::vector<CacheInfo> out;
    while (s.step()) out.push_back(read_cache(s));
    return out;
  } catch (const std::exception& e) {
    return internal_error(e);
  }
}

std::vector<MemberInfo> CatalogFsm::list_members() const {
  std::vector<MemberInfo> out;
  Stmt s(db_, "SELECT id, raft_address, rpc_address, level, joined_seq FROM members ORDER BY id");
  while (s.step()) {
    MemberInfo m;
    m.id = NodeId{static_cast<std::uint32_t>(s.i64(0))};
    m.raft_address = s.text(1);
    m.rpc_address = s.text(2);
    m.level = MetadataLevel{static_cast<std::uint32_t>(s.i64(3))};
    m.joined_seq = ChangeSeq{static_cast<std::uint64_t>(s.i64(4))};
    out.push_back(std::move(m));
  }
  return out;
}

std::optional<MemberInfo> CatalogFsm::member(NodeId id) const {
  for (auto& m : list_members())
    if (m.id == id) return m;
  return std::nullopt;
}

std::optional<MetadataLevel> CatalogFsm::recorded_group_level() const {
  Stmt s(db_, "SELECT MIN(level) FROM members");
  if (!s.step() || sqlite3_column_type(s.raw(), 0) == SQLITE_NULL) return std::nullopt;
  return MetadataLevel{static_cast<std::uint32_t>(s.i64(0))};
}

std::size_t CatalogFsm::members_below(MetadataLevel level) const {
  Stmt s(db_, "SELECT COUNT(*) FROM members WHERE level < ?");
  s.bind(1, static_cast<std::int64_t>(level.value()));
  return s.step() ? static_cast<std::size_t>(s.i64(0)) : 0;
}

bool CatalogFsm::flagged_refused(const Command& c) const {
  return c.incarnations == IncarnationRule::flagged && (c.is_create() || c.is_delete()) &&
         members_below(kFlaggedEntriesLevel) > 0;
}

void CatalogFsm::update_group_level() {
  auto g = recorded_group_level();
  meta_set("level", std::to_string(g ? g->value() : kLowestMetadataLevel.value()));
}

std::vector<Tombstone> CatalogFsm::list_tombstones() const {
  std::vector<Tombstone> out;
  Stmt s(db_, "SELECT tenant, ns, name, deleted_up_to, seq FROM tombstones"
              " ORDER BY tenant, ns, name");
  while (s.step()) out.push_back(read_tombstone(s));
  return out;
}

std::optional<Tombstone> CatalogFsm::tombstone(const StreamKey& key) const {
  Stmt s(db_, "SELECT tenant, ns, name, deleted_up_to, seq FROM tombstones"
              " WHERE tenant = ? AND ns = ? AND name = ?");
  s.bind(1, key.tenant).bind(2, key.ns).bind(3, key.name);
  if (!s.step()) return std::nullopt;
  return read_tombstone(s);
}

std::vector<Assignment> CatalogFsm::assignments(const StreamKey& key) const {
  std::vector<Assignment> out;
  std::string q = std::string("SELECT ") + kAssignmentColumns +
                  " FROM assignments WHERE tenant = ? AND ns = ? AND name = ? ORDER BY shard";
  Stmt s(db_, q.c_str());
  s.bind(1, key.tenant).bind(2, key.ns).bind(3, key.name);
  while (s.step()) out.push_back(read_assignment(s));
  return out;
}

std::vector<BrokerInfo> CatalogFsm::list_brokers() const {
  std::vector<BrokerInfo> out;
  std::string q = std::string("SELECT ") + kBrokerColumns + " FROM brokers ORDER BY id";
  Stmt s(db_, q.c_str());
  while (s.step()) out.push_back(read_broker(s));
  return out;
}

std::optional<BrokerInfo> CatalogFsm::broker(NodeId id) const {
  std::string q = std::string("SELECT ") + kBrokerColumns + " FROM brokers WHERE id = ?";
  Stmt s(db_, q.c_str());
  s.bind(1, static_cast<std::int64_t>(id.value()));
  if (!s.step()) return std::nullopt;
  return read_broker(s);
}

std::map<std::string, ChangeSeq, std::less<>> CatalogFsm::finalized_features() const {
  std::map<std::string, ChangeSeq, std::less<>> out;
  Stmt s(db_, "SELECT name, finalized_seq FROM features ORDER BY name");
  while (s.step()) out.emplace(s.text(0), ChangeSeq{static_cast<std::uint64_t>(s.i64(1))});
  return out;
}

bool CatalogFsm::is_finalized(std::string_view feature) const {
  Stmt s(db_, "SELECT 1 FROM features WHERE name = ?");
  s.bind(1, feature);
  return s.step();
}

std::size_t CatalogFsm::tombstone_count() const {
  Stmt s(db_, "SELECT COUNT(*) FROM tombstones");
  return s.step() ? static_cast<std::size_t>(s.i64(0)) : 0;
}

std::size_t CatalogFsm::change_count() const {
  Stmt s(db_, "SELECT COUNT(*) FROM changes");
  return s.step() ? static_cast<std::size_t>(s.i64(0)) : 0;
}

ChangeBatch CatalogFsm::changes_after(ChangeSeq after, std::size_t limit) const {
  ChangeBatch b;
  std::uint64_t pruned = std::stoull("0" + meta_get("changes_pruned_up_to"));
  if (after.value() < pruned) {
    b.resync = true;
    return b;
  }
  Stmt s(db_, "SELECT seq, kind, payload FROM changes WHERE seq > ? ORDER BY seq LIMIT ?");
  s.bind(1, static_cast<std::int64_t>(after.value())).bind(2, static_cast<std::int64_t>(limit));
  while (s.step()) {
    auto e = decode_change_payload(ChangeSeq{static_cast<std::uint64_t>(s.i64(0))}, s.text(1), s.text(2));
    if (!e.ok()) {  // never guess: the watcher stops before a change it cannot read
      b.error = e.error();
      break;
    }
    b.events.push_back(std::move(e.value()));
  }
  return b;
}

std::uint64_t CatalogFsm::state_hash() const {
  std::uint64_t h = 14695981039346656037ull;
  auto mix = [&](const void* data, std::size_t n) {
    auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < n; ++i) {
      h ^= p[i];
      h *= 1099511628211ull;
    }
  };
  static const char* const kDumps[] = {
      "SELECT * FROM meta ORDER BY key",
      "SELECT * FROM tenants ORDER BY name",
      "SELECT * FROM namespaces ORDER BY tenant, name",
      "SELECT * FROM streams ORDER BY tenant, ns, name",
      "SELECT * FROM changes ORDER BY seq",
      "SELECT * FROM tombstones ORDER BY tenant, ns, name",
      "SELECT * FROM features ORDER BY name",
      "SELECT * FROM brokers ORDER BY id",
      "SELECT * FROM assignments ORDER BY tenant, ns, name, shard",
      "SELECT * FROM members ORDER BY id",
      "SELECT * FROM caches ORDER BY tenant, ns, name",
      "SELECT * FROM cache_tombstones ORDER BY tenant, ns, name",
  };
  for (const char* sql : kDumps) {
    mix(sql, std::strlen(sql));
    Stmt s(db_, sql);
    int cols = sqlite3_column_count(s.raw());
    while (s.step()) {
      for (int c = 0; c < cols; ++c) {
        int type = sqlite3_column_type(s.raw(), c);
        unsigned char tag = static_cast<unsigned char>(type);
        mix(&tag, 1);
        if (type == SQLITE_INTEGER) {
          std::int64_t v = s.i64(c);
          unsigned char le[8];
          for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(static_cast<std::uint64_t>(v) >> (8 * i));
          mix(le, 8);
        } else if (type != SQLITE_NULL) {
          std::string v = s.text(c);
          std::uint64_t n = v.size();
          unsigned char le[8];
          for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(n >> (8 * i));
          mix(le, 8);
          mix(v.data(), v.size());
        }
      }
    }
  }
  return h;
}

}  // namespace sluice::raft_meta
