// The SQLite plumbing shared by the CatalogFsm files (catalog_fsm*.cc): a prepared
// statement, row readers, the change a command records. Internal to raft-meta.
//
// Errors: Stmt, exec and open_memory_db throw std::runtime_error; CatalogFsm::apply turns
// that into a held member (docs/metadata-raft-design.md "Error policy").
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "catalog_fsm.h"
#include "sluice/metadata.h"

namespace sluice::raft_meta::catalog_db {

// Prepared statements are kept per database: open_memory_db registers the database,
// close_db finalizes its statements and closes it (use it instead of sqlite3_close). A Stmt
// borrows the statement for its SQL text and gives it back reset, so a statement is parsed
// once per database, not on every apply (sqlite3Parser and the prepare path were a visible
// share of an apply's CPU: docs/benchmarks.md "sluice-raft-bench"). Nested Stmts of the
// same text each get their own. Thread-safety: the registry is locked; a database's
// statements are used by its owner only (CatalogFsm: one caller at a time).
// borrow_statement throws std::runtime_error when the SQL does not prepare.
sqlite3_stmt* borrow_statement(sqlite3* db, const char* sql);
void return_statement(sqlite3_stmt* s);
void close_db(sqlite3* db);

// A prepared statement, borrowed for the Stmt's lifetime.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : s_(borrow_statement(db, sql)) {}
  ~Stmt() { return_statement(s_); }
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

// One statement, parsed on every call (schema, upgrades, the failure path).
void exec(sqlite3* db, const char* sql);
// One statement without parameters or rows (SAVEPOINT, RELEASE, ROLLBACK TO), prepared once
// per database like a Stmt: an apply opens and releases two savepoints per command, and
// parsing them each time was an eighth of an apply's CPU (docs/benchmarks.md
// "sluice-raft-bench").
inline void run(sqlite3* db, const char* sql) {
  Stmt s(db, sql);
  s.step();
}
sqlite3* open_memory_db();

// "1,2,3" lists in TEXT columns (brokers.features, assignments.replicas).
std::string join_ids(const std::vector<NodeId>& ids);
std::vector<NodeId> split_ids(std::string_view s);
std::string join_strings(const std::vector<std::string>& v);
std::vector<std::string> split_strings(std::string_view s);
// assignments.in_sync: the JSON array of {"broker","directory_id"}; '' when empty.
std::string encode_in_sync(const std::vector<InSyncReplica>& v);
std::vector<InSyncReplica> decode_in_sync(std::string_view s);  // throws on a malformed value

// Column lists and the readers of one row selected with them.
inline constexpr const char* kStreamColumns =
    "tenant, ns, name, incarnation, shards, retention_max_bytes, retention_max_age_ms, "
    "default_ack, created_seq, created_at_us, replication_factor, min_insync";
inline constexpr const char* kBrokerColumns =
    "id, address, directory_id, version, features, registered_seq, peer_address";
inline constexpr const char* kAssignmentColumns =
    "tenant, ns, name, shard, incarnation, generation, leader, replicas, leader_epoch, in_sync, "
    "version, target_replicas";
inline constexpr const char* kCacheColumns = "tenant, ns, name, incarnation, default_ttl_ms, created_seq";
StreamInfo read_stream(const Stmt& s);
BrokerInfo read_broker(const Stmt& s);
Assignment read_assignment(const Stmt& s);
Tombstone read_tombstone(const Stmt& s);  // tenant, ns, name, deleted_up_to, seq
CacheInfo read_cache(const Stmt& s);
inline constexpr const char* kCounterColumns = "tenant, ns, name, incarnation, created_seq";
CounterInfo read_counter(const Stmt& s);

// The change a catalog command records (stored with sluice/catalog_json.h's payload
// encoding by CatalogFsm::record_change).
ChangeEvent change(std::uint64_t index, ChangeEvent::Kind kind);
ChangeEvent names_change(std::uint64_t index, ChangeEvent::Kind kind, const std::string& tenant,
                         const std::string& ns = {});
ChangeEvent stream_change(std::uint64_t index, ChangeEvent::Kind kind, const StreamInfo& s,
                          const std::vector<Assignment>& as, const std::optional<Tombstone>& t);
ChangeEvent cache_change(std::uint64_t index, ChangeEvent::Kind kind, const CacheInfo& c,
                         const std::optional<Tombstone>& t);
ChangeEvent counter_change(std::uint64_t index, ChangeEvent::Kind kind, const CounterInfo& c,
                           const std::optional<Tombstone>& t);
ChangeEvent broker_change(std::uint64_t index, ChangeEvent::Kind kind, const BrokerInfo& b);
ChangeEvent feature_change(std::uint64_t index, const std::string& name);
ChangeEvent shard_change(std::uint64_t index, const Assignment& a);

// A command the rules refuse: a definite error, decided alike on every member.
inline ApplyResult refuse(std::uint64_t index, Errc code, std::string msg) {
  ApplyResult r;
  r.seq = ChangeSeq{index};
  r.error = Error(code, std::move(msg));
  return r;
}

Error internal_error(const std::exception& e);

}  // namespace sluice::raft_meta::catalog_db
