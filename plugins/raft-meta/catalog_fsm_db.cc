#include "catalog_fsm_db.h"

#include <boost/json.hpp>

#include <functional>
#include <mutex>
#include <string_view>
#include <unordered_map>

#include "sluice/catalog_json.h"

namespace sluice::raft_meta::catalog_db {

void exec(sqlite3* db, const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = std::string("sqlite exec failed: ") + (err ? err : "?") + " in " + sql;
    sqlite3_free(err);
    throw std::runtime_error(msg);
  }
}

namespace {
// The idle prepared statements of each open database, by SQL text.
// Looked up by string_view (a transparent hash), so borrowing and returning a statement
// allocates nothing.
struct SqlHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
struct StatementCache {
  std::unordered_map<std::string, std::vector<sqlite3_stmt*>, SqlHash, std::equal_to<>> idle;
};
std::mutex g_caches_mu;
std::unordered_map<sqlite3*, StatementCache> g_caches;  // guarded by g_caches_mu
}  // namespace

sqlite3* open_memory_db() {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
      SQLITE_OK) {
    sqlite3_close(db);
    throw std::runtime_error("cannot open in-memory sqlite database");
  }
  std::lock_guard lk(g_caches_mu);
  g_caches[db];
  return db;
}

sqlite3_stmt* borrow_statement(sqlite3* db, const char* sql) {
  {
    std::lock_guard lk(g_caches_mu);
    if (auto c = g_caches.find(db); c != g_caches.end())
      if (auto it = c->second.idle.find(std::string_view(sql));
          it != c->second.idle.end() && !it->second.empty()) {
        sqlite3_stmt* s = it->second.back();
        it->second.pop_back();
        return s;
      }
  }
  sqlite3_stmt* s = nullptr;
  if (sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &s, nullptr) != SQLITE_OK) {
    sqlite3_finalize(s);
    throw std::runtime_error(std::string("sqlite prepare failed: ") + sqlite3_errmsg(db) + " in " + sql);
  }
  return s;
}

void return_statement(sqlite3_stmt* s) {
  if (!s) return;
  sqlite3_reset(s);
  sqlite3_clear_bindings(s);
  {
    std::lock_guard lk(g_caches_mu);
    if (auto c = g_caches.find(sqlite3_db_handle(s)); c != g_caches.end()) {
      const std::string_view sql = sqlite3_sql(s);
      auto it = c->second.idle.find(sql);  // no key string built once the text is known
      if (it == c->second.idle.end()) it = c->second.idle.emplace(std::string(sql), std::vector<sqlite3_stmt*>{}).first;
      it->second.push_back(s);
      return;
    }
  }
  sqlite3_finalize(s);
}

void close_db(sqlite3* db) {
  if (!db) return;
  StatementCache cache;
  {
    std::lock_guard lk(g_caches_mu);
    if (auto c = g_caches.find(db); c != g_caches.end()) {
      cache = std::move(c->second);
      g_caches.erase(c);
    }
  }
  for (auto& [sql, v] : cache.idle)
    for (auto* s : v) sqlite3_finalize(s);
  sqlite3_close(db);
}

// The change a catalog op records (stored with sluice/catalog_json.h's payload encoding).
ChangeEvent change(std::uint64_t index, ChangeEvent::Kind kind) {
  ChangeEvent e{};
  e.kind = kind;
  e.seq = ChangeSeq{index};
  return e;
}
ChangeEvent names_change(std::uint64_t index, ChangeEvent::Kind kind, const std::string& tenant,
                         const std::string& ns) {
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
ChangeEvent counter_change(std::uint64_t index, ChangeEvent::Kind kind, const CounterInfo& c,
                           const std::optional<Tombstone>& t) {
  ChangeEvent e = names_change(index, kind, c.key.tenant, c.key.ns);
  e.counter = c;
  e.counter_tombstone = t;
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

ChangeEvent shard_change(std::uint64_t index, const Assignment& a) {
  ChangeEvent e = names_change(index, ChangeEvent::Kind::shard_changed, a.key.tenant, a.key.ns);
  e.stream.key = a.key;
  e.stream.incarnation = a.incarnation;
  e.assignments = {a};
  return e;
}

std::string encode_in_sync(const std::vector<InSyncReplica>& v) {
  if (v.empty()) return {};
  return boost::json::serialize(boost::json::value_from(v));
}

std::vector<InSyncReplica> decode_in_sync(std::string_view s) {
  if (s.empty()) return {};
  return boost::json::value_to<std::vector<InSyncReplica>>(boost::json::parse(s));
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
  info.spec.replication_factor = static_cast<std::uint32_t>(s.i64(10));
  info.spec.min_insync = static_cast<std::uint32_t>(s.i64(11));
  return info;
}

BrokerInfo read_broker(const Stmt& s) {
  BrokerInfo b;
  b.id = NodeId{static_cast<std::uint32_t>(s.i64(0))};
  b.address = s.text(1);
  b.directory_id = s.text(2);
  b.version = s.text(3);
  b.features = split_strings(s.text(4));
  b.registered_seq = ChangeSeq{static_cast<std::uint64_t>(s.i64(5))};
  b.peer_address = s.text(6);
  return b;
}

Assignment read_assignment(const Stmt& s) {
  Assignment a;
  a.key = StreamKey{s.text(0), s.text(1), s.text(2)};
  a.shard = ShardIndex{static_cast<std::uint32_t>(s.i64(3))};
  a.incarnation = Incarnation{static_cast<std::uint64_t>(s.i64(4))};
  a.generation = Generation{static_cast<std::uint64_t>(s.i64(5))};
  a.leader = NodeId{static_cast<std::uint32_t>(s.i64(6))};
  a.replicas = split_ids(s.text(7));
  a.leader_epoch = LeaderEpoch{static_cast<std::uint64_t>(s.i64(8))};
  a.in_sync = decode_in_sync(s.text(9));
  a.version = ShardVersion{static_cast<std::uint64_t>(s.i64(10))};
  a.target_replicas = split_ids(s.text(11));
  return a;
}

Tombstone read_tombstone(const Stmt& s) {
  Tombstone t;
  t.key = StreamKey{s.text(0), s.text(1), s.text(2)};
  t.deleted_up_to = Incarnation{static_cast<std::uint64_t>(s.i64(3))};
  t.seq = ChangeSeq{static_cast<std::uint64_t>(s.i64(4))};
  return t;
}

CacheInfo read_cache(const Stmt& s) {
  CacheInfo c;
  c.key = StreamKey{s.text(0), s.text(1), s.text(2)};
  c.incarnation = Incarnation{static_cast<std::uint64_t>(s.i64(3))};
  c.spec.default_ttl_ms = s.i64(4);
  c.created_seq = ChangeSeq{static_cast<std::uint64_t>(s.i64(5))};
  return c;
}

CounterInfo read_counter(const Stmt& s) {
  CounterInfo c;
  c.key = StreamKey{s.text(0), s.text(1), s.text(2)};
  c.incarnation = Incarnation{static_cast<std::uint64_t>(s.i64(3))};
  c.created_seq = ChangeSeq{static_cast<std::uint64_t>(s.i64(4))};
  return c;
}

Error internal_error(const std::exception& e) {
  return Error(Errc::internal, std::string("catalog: ") + e.what());
}

}  // namespace sluice::raft_meta::catalog_db
