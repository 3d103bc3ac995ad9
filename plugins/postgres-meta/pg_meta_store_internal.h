// Shared by the PgMetaStore source files (pg_meta_*.cc) only: row readers, SQL helpers and
// the transaction runner every catalog call goes through (pg_meta_store.h, "Thread model").
#pragma once

#include <pqxx/pqxx>

#include <algorithm>
#include <cstring>
#include <optional>
#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "codec.h"
#include "pg_meta_store.h"
#include "schema.h"

namespace sluice::postgres_meta {
namespace detail {

inline constexpr int kMaxAttempts = 50;

using Clock = std::chrono::steady_clock;
using Fin = std::map<std::string, ChangeSeq, std::less<>>;

struct Unit {};

inline std::string pg_array(const std::vector<std::string>& v) {
  std::string out = "{";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + v[i];
  return out + "}";
}
inline std::string pg_array(const std::vector<NodeId>& v) {
  std::string out = "{";
  for (std::size_t i = 0; i < v.size(); ++i)
    out += (i ? "," : "") + std::to_string(v[i].value());
  return out + "}";
}
inline std::vector<std::string> split_csv(const std::string& s) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i < s.size()) {
    std::size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

inline std::int64_t i64(const pqxx::field& f) { return f.is_null() ? 0 : f.as<std::int64_t>(); }
inline std::uint64_t u64(const pqxx::field& f) { return static_cast<std::uint64_t>(i64(f)); }

constexpr const char* kStreamCols =
    "tenant, ns, name, incarnation, shards, retention_max_bytes, retention_max_age_ms, "
    "default_ack, created_seq, created_at_us, replication_factor, min_insync";

inline StreamInfo read_stream(const pqxx::row& r) {
  StreamInfo s;
  s.key = StreamKey{r[0].as<std::string>(), r[1].as<std::string>(), r[2].as<std::string>()};
  s.incarnation = Incarnation{u64(r[3])};
  s.spec.shards = static_cast<std::uint32_t>(i64(r[4]));
  s.spec.retention.max_bytes = i64(r[5]);
  s.spec.retention.max_age_ms = i64(r[6]);
  s.spec.default_ack = parse_ack_mode(r[7].as<std::string>()).value_or(AckMode::leader);
  s.created_seq = ChangeSeq{u64(r[8])};
  s.created_at_us = i64(r[9]);
  s.spec.replication_factor = static_cast<std::uint32_t>(i64(r[10]));
  s.spec.min_insync = static_cast<std::uint32_t>(i64(r[11]));
  return s;
}

constexpr const char* kAssignmentCols =
    "tenant, ns, name, shard, incarnation, generation, leader, array_to_string(replicas, ','), "
    "leader_epoch, in_sync, version, array_to_string(target_replicas, ',')";

inline Assignment read_assignment(const pqxx::row& r) {
  Assignment a;
  a.key = StreamKey{r[0].as<std::string>(), r[1].as<std::string>(), r[2].as<std::string>()};
  a.shard = ShardIndex{static_cast<std::uint32_t>(i64(r[3]))};
  a.incarnation = Incarnation{u64(r[4])};
  a.generation = Generation{u64(r[5])};
  a.leader = NodeId{static_cast<std::uint32_t>(i64(r[6]))};
  for (auto& x : split_csv(r[7].is_null() ? "" : r[7].as<std::string>()))
    a.replicas.push_back(NodeId{static_cast<std::uint32_t>(std::stoul(x))});
  a.leader_epoch = LeaderEpoch{u64(r[8])};
  a.in_sync = decode_in_sync(r[9].is_null() ? "" : r[9].as<std::string>());
  a.version = ShardVersion{u64(r[10])};
  for (auto& x : split_csv(r[11].is_null() ? "" : r[11].as<std::string>()))
    a.target_replicas.push_back(NodeId{static_cast<std::uint32_t>(std::stoul(x))});
  return a;
}

inline std::vector<Assignment> assignments_of(pqxx::transaction_base& tx, const StreamKey& k) {
  std::vector<Assignment> out;
  auto rs = tx.exec_params(std::string("SELECT ") + kAssignmentCols +
                               " FROM assignments WHERE tenant = $1 AND ns = $2 AND name = $3"
                               " ORDER BY shard",
                           k.tenant, k.ns, k.name);
  for (const auto& r : rs) out.push_back(read_assignment(r));
  return out;
}

inline bool exists(pqxx::transaction_base& tx, const std::string& sql, const std::string& a,
            const std::string* b = nullptr) {
  return b ? !tx.exec_params(sql, a, *b).empty() : !tx.exec_params(sql, a).empty();
}

// The first line of a server or libpq message, without the "ERROR:  " prefix.
inline std::string first_line(std::string m) {
  for (const char* p : {"ERROR:  ", "FATAL:  "})
    if (m.rfind(p, 0) == 0) m.erase(0, std::strlen(p));
  if (auto nl = m.find('\n'); nl != std::string::npos) m.resize(nl);
  return m;
}

inline bool is_connection_state(const std::string& st) {
  return st.rfind("08", 0) == 0 || st == "57P01" || st == "57P02" || st == "57P03";
}

// Errors after which nothing was committed and a later attempt may succeed (run() retries
// them until its deadline, then answers unavailable, transient).
inline bool is_transient_state(const std::string& st) {
  return st == "55P03" || st == "57014" || st == "25006" || st == "53100" || st == "53200" || st == "53300";
}

inline std::vector<BrokerInfo> serving_of(const std::vector<BrokerInfo>& all) {
  std::vector<BrokerInfo> out;
  for (auto& b : all)
    if (b.live) out.push_back(b);
  return out;
}
// pg_meta_caches.cc: every cache and every cache tombstone, in key order (the snapshot).
std::vector<CacheInfo> read_caches(pqxx::transaction_base& tx);
std::vector<Tombstone> read_cache_tombstones(pqxx::transaction_base& tx);
// pg_meta_counters.cc: every counter and every counter tombstone, in key order (the snapshot).
std::vector<CounterInfo> read_counters(pqxx::transaction_base& tx);
std::vector<Tombstone> read_counter_tombstones(pqxx::transaction_base& tx);

template <class T>
Result<T> from_unit(Result<Unit> r);
template <>
inline Result<void> from_unit<void>(Result<Unit> r) {
  if (!r.ok()) return r.error();
  return {};
}

}  // namespace detail

#define PG_META_TRY(expr)                              \
  do {                                                 \
    if (auto _v = (expr); !_v.ok()) return _v.error(); \
  } while (0)

// One catalog write in two round trips on a pooled connection (pg_meta_pool.cc): first()
// sends BEGIN, the level declaration, the counter lock and the write's reads as one
// multi-statement query (LOCK TABLE still runs before the transaction's snapshot: the
// snapshot is taken by the first statement that needs one); then() queues the write's
// statements, which the runner sends with COMMIT. The counter lock is therefore held for
// one client turn-around plus the write itself, not for a round trip per statement.
// Values are quoted literals (lit()) into statements prepared once per connection
// (PREPARE ... / EXECUTE, see prepare_statements).
class WriteBatch {
 public:
  WriteBatch(pqxx::transaction_base& tx, std::string head) : tx_(tx), head_(std::move(head)) {}
  pqxx::result first(const std::string& stmt) {
    std::string q = std::move(head_) + stmt;
    head_.clear();
    return tx_.exec(q);
  }
  void then(const std::string& stmt) {
    tail_ += stmt;
    tail_ += ";\n";
  }
  std::string lit(const std::string& s) { return tx_.quote(s); }
  pqxx::transaction_base& tx() { return tx_; }
  // The queued statements and COMMIT in one round trip. A connection lost here leaves the
  // outcome unknown: in_doubt_error (the runner answers timeout, outcome uncertain).
  void commit() {
    try {
      tx_.exec(head_ + tail_ + "COMMIT");
    } catch (const pqxx::broken_connection& e) {
      throw pqxx::in_doubt_error(e.what());
    } catch (const pqxx::statement_completion_unknown& e) {
      // 40003: the server cannot say whether COMMIT took effect. A transaction_rollback,
      // which the runner retries as "nothing committed": a retried create would answer
      // already_exists for its own row (review finding). libpqxx's own commit() maps it
      // to in_doubt_error; this one-round-trip commit must too.
      throw pqxx::in_doubt_error(e.what());
    } catch (const pqxx::sql_error& e) {
      if (detail::is_connection_state(e.sqlstate())) throw pqxx::in_doubt_error(e.what());
      throw;
    }
  }

 private:
  pqxx::transaction_base& tx_;
  std::string head_;
  std::string tail_;
};

template <class T, class F>
Result<T> PgMetaStore::run(Mode mode, F&& fn) {
  using namespace detail;
  constexpr bool kBatch = std::is_invocable_v<F&, WriteBatch&>;
  if (auto s = check_started(); !s.ok()) return s.error();
  const auto deadline = Clock::now() + cfg_.timeout;
  std::chrono::milliseconds backoff{5};
  std::string last;
  for (int attempt = 1;; ++attempt) {
    // One attempt on one pooled connection; the slot goes back to the pool before a sleep.
    {
      auto slot = acquire_slot(deadline);
      if (!slot) {
        last = std::to_string(attempt) + " attempts: all " + std::to_string(cfg_.pool_size) +
               " pooled connections stayed busy (metadata.postgres.pool_size)";
        break;
      }
      struct Release {
        PgMetaStore* s;
        std::size_t i;
        ~Release() { s->release_slot(i); }
      } release{this, *slot};
      std::unique_ptr<pqxx::connection>& conn = slots_[*slot].conn;
      // A batched write leaves a failed transaction block open on an error: roll it back
      // before the connection goes back to the pool (or drop the connection).
      auto rollback = [&] {
        if (!kBatch || !conn) return;
        try {
          pqxx::nontransaction r(*conn);
          r.exec0("ROLLBACK");
        } catch (const std::exception&) {
          conn.reset();
        }
      };
      auto c = slot_connection(*slot);
      if (!c.ok()) {
        // Another cluster's database behind the URL: nothing was sent; say so at once.
        if (c.error().code == Errc::cluster_id_mismatch) return c.error();
        last = c.error().message;
      } else {
        try {
          std::optional<Result<T>> out;
          if constexpr (kBatch) {
            {
              pqxx::nontransaction tx(*c.value());
              WriteBatch b(tx, batch_head(deadline));
              out.emplace(fn(b));
              if (out->ok()) b.commit();
            }
            if (!out->ok()) rollback();
            return std::move(*out);
          } else {
            if (mode == Mode::write) {
              pqxx::transaction<pqxx::serializable> tx(*c.value());
              // Upgraded instances declare their level (the triggers let their creates
              // through); LOCK TABLE is a utility statement, taken before the transaction's
              // snapshot, so writers are serial and each sees every earlier commit (seq
              // order == commit order). One round trip for both.
              tx.exec0(batch_lock_sql(deadline));
              out.emplace(fn(static_cast<pqxx::transaction_base&>(tx)));
              if (!out->ok()) return std::move(*out);  // aborted by the destructor
              tx.commit();
            } else if (mode == Mode::read) {
              pqxx::transaction<pqxx::repeatable_read, pqxx::read_only> tx(*c.value());
              out.emplace(fn(static_cast<pqxx::transaction_base&>(tx)));
              tx.commit();
            } else {
              pqxx::work tx(*c.value());
              out.emplace(fn(static_cast<pqxx::transaction_base&>(tx)));
              if (!out->ok()) return std::move(*out);
              tx.commit();
            }
            return std::move(*out);
          }
        } catch (const pqxx::in_doubt_error& e) {
          conn.reset();
          // A read changed nothing whatever its commit did: try again on a new connection,
          // rather than tell the caller a change "may have been applied" (review finding).
          if (mode != Mode::read)
            return Error(Errc::timeout,
                         "the database connection broke during commit; the change may or may not "
                         "have been applied (" + clean(e.what()) + ")",
                         Outcome::uncertain);
          last = "connection lost at the end of a read: " + clean(e.what());
        } catch (const pqxx::broken_connection& e) {
          conn.reset();
          last = "connection lost: " + clean(e.what());
        } catch (const pqxx::transaction_rollback& e) {
          // 40001 / 40P01: not sql_errors in libpqxx 6.4 (they derive from pqxx::failure),
          // so before this they reached the std::exception branch and answered internal.
          // Nothing was committed: retry.
          last = "serialization failure: " + clean(e.what());
          rollback();
        } catch (const pqxx::sql_error& e) {
          const std::string& st = e.sqlstate();
          if (st == "40001" || st == "40P01") {
            last = "serialization failure: " + clean(e.what());
            rollback();
          } else if (is_transient_state(st)) {
            // Nothing was committed, and trying again may work: a lock or statement timeout
            // (the deadline above, or another writer holding the counter lock), a cancel, a
            // read-only server (a standby behind a multi-host URL, a failover in progress),
            // or the server out of disk, memory or connections.
            last = "PostgreSQL error " + st + ": " + clean(e.what());
            rollback();
          } else if (is_connection_state(st) || st == "26000") {
            // 26000: a prepared statement is missing (a connection libpqxx reopened by
            // itself): start over on a fresh connection.
            conn.reset();
            last = "connection lost: " + clean(e.what());
          } else {
            rollback();
            return map_sql_error(st, e.what());
          }
        } catch (const std::exception& e) {
          conn.reset();
          return Error(Errc::internal, "postgres-meta: " + clean(e.what()));
        }
      }
    }
    if (attempt >= kMaxAttempts || Clock::now() + backoff >= deadline) {
      last = std::to_string(attempt) + " attempts: " + last;
      break;
    }
    if (!started_.load()) {
      last = std::to_string(attempt) + " attempts (postgres-meta is stopping): " + last;
      break;
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  }
  return Error(Errc::unavailable, "PostgreSQL (" + target_ + ") did not answer within " +
                                      std::to_string(cfg_.timeout.count()) + " ms after " + last);
}

}  // namespace sluice::postgres_meta
