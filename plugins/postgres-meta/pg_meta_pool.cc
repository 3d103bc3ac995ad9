// PgMetaStore's request pool (pg_meta_store.h, "Thread model"): metadata.postgres.pool_size
// connections, opened on demand, each used by one call at a time, so independent catalog
// calls run concurrently while writes still serialize on the counter lock (README.md "How
// each rule is enforced"). Each connection prepares the statements of a stream create once
// (SQL PREPARE, so a WriteBatch can EXECUTE them inside one multi-statement round trip).
#include "pg_meta_store.h"
#include "pg_meta_store_internal.h"

#include <poll.h>

#include <pqxx/pqxx>

#include <string>

#include "sluice/levels.h"
#include "sluice/types.h"

namespace sluice::postgres_meta {

using namespace detail;

namespace {

// Pool connections never LISTEN and have no query in flight while idle, so an idle socket
// with something to read means the server closed the session (pg_terminate_backend, a
// restart, idle_session_timeout): its FATAL notice or EOF is waiting.
bool dead_while_idle(const pqxx::connection& c) {
  if (!c.is_open()) return true;
  const int fd = c.sock();
  if (fd < 0) return true;
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) != 0;  // readable, hung up, or an error
}

// The statements of a batch of stream creates (pg_meta_create.cc), prepared once per
// connection. sl_create_read reads, after the counter lock, everything the creates decide
// on, as rows of one shape told apart by the first column:
//   's': last_seq, the database clock (µs), the finalized features (comma-separated);
//   'k': per key (1-based ordinal): its tombstone (or NULL), namespace exists (1) + name
//        taken (2);
//   'b': per broker: id, registered_seq, live (1/0, by the database clock), address,
//        directory_id, version, features, peer_address.
// jit is off on these sessions: the planner's default row estimates for the small catalog
// tables can put such statements above jit_above_cost, and compiling them cost 15-30 ms.
constexpr const char* kPrepare = R"SQL(
SET jit = off;
PREPARE sl_create_read(text[], text[], text[], bigint) AS
SELECT 's', last_seq, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint, NULL::bigint,
  (SELECT string_agg(name, ',') FROM features), NULL, NULL, NULL, NULL
FROM counter
UNION ALL
SELECT 'k', k.i, t.deleted_up_to,
  (EXISTS (SELECT 1 FROM namespaces n WHERE n.tenant = k.tenant AND n.name = k.ns))::int +
  2 * (EXISTS (SELECT 1 FROM streams s WHERE s.tenant = k.tenant AND s.ns = k.ns AND s.name = k.name))::int,
  NULL, NULL, NULL, NULL, NULL
FROM unnest($1, $2, $3) WITH ORDINALITY AS k(tenant, ns, name, i)
LEFT JOIN tombstones t ON t.tenant = k.tenant AND t.ns = k.ns AND t.name = k.name
UNION ALL
SELECT 'b', id, registered_seq, (last_heartbeat > clock_timestamp() - ($4 * interval '1 millisecond'))::int,
  address, directory_id, version, array_to_string(features, ','), peer_address
FROM brokers;
PREPARE sl_advance_seq(bigint) AS
UPDATE counter SET last_seq = last_seq + $1;
PREPARE sl_insert_stream(text, text, text, bigint, integer, bigint, bigint, text, bigint, bigint,
                         integer, integer) AS
INSERT INTO streams(tenant, ns, name, incarnation, shards, retention_max_bytes,
  retention_max_age_ms, default_ack, created_seq, created_at_us, replication_factor, min_insync)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12);
PREPARE sl_insert_assignment(text, text, text, integer, bigint, bigint, bigint, bigint[], bigint,
                             text, bigint) AS
INSERT INTO assignments(tenant, ns, name, shard, incarnation, generation, leader, replicas,
  leader_epoch, in_sync, version)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11);
PREPARE sl_insert_change(bigint, text, text) AS
INSERT INTO changes(seq, kind, payload) VALUES ($1, $2, $3);
PREPARE sl_prune_changes(bigint) AS
WITH d AS (DELETE FROM changes WHERE seq <= $1 RETURNING 1)
UPDATE counter SET pruned_up_to = GREATEST(pruned_up_to, $1) WHERE EXISTS (SELECT 1 FROM d);
)SQL";

}  // namespace

Result<void> PgMetaStore::prepare_statements(pqxx::connection& c) {
  try {
    pqxx::nontransaction tx(c);
    tx.exec(kPrepare);
    return {};
  } catch (const std::exception& e) {
    return Error(Errc::unavailable, "cannot prepare the catalog statements on a new connection to "
                                    "PostgreSQL (" + target_ + "): " + clean(e.what()),
                 Outcome::transient);
  }
}

std::optional<std::size_t> PgMetaStore::acquire_slot(Clock::time_point deadline) {
  std::unique_lock lk(pool_mu_);
  if (!pool_cv_.wait_until(lk, deadline, [&] { return !free_.empty() || !started_.load(); }) ||
      free_.empty())
    return std::nullopt;
  // Most recently used first: its connection is the likeliest to be open and warm.
  std::size_t i = free_.back();
  free_.pop_back();
  return i;
}

void PgMetaStore::release_slot(std::size_t i) {
  {
    std::lock_guard lk(pool_mu_);
    free_.push_back(i);
  }
  // While stopping, close_pool() waits too: wake everyone.
  if (started_.load())
    pool_cv_.notify_one();
  else
    pool_cv_.notify_all();
}

Result<pqxx::connection*> PgMetaStore::slot_connection(std::size_t i) {
  auto& conn = slots_[i].conn;
  if (conn && dead_while_idle(*conn)) {
    log(LogLevel::info, "replacing a pooled connection the server closed");
    conn.reset();
  }
  if (!conn) {
    auto c = connect_once();
    if (!c.ok()) return c.error();
    if (auto p = prepare_statements(*c.value()); !p.ok()) return p.error();
    conn = std::move(c.value());
    // Notices here (e.g. "there is no transaction in progress" when a batched write's
    // ROLLBACK follows a failed COMMIT) are expected; keep them off stderr.
    slots_[i].quiet = std::make_unique<pqxx::quiet_errorhandler>(*conn);
  }
  return conn.get();
}

void PgMetaStore::close_pool() {
  std::unique_lock lk(pool_mu_);
  // started_ is false: calls in flight finish or give up at their next retry; calls
  // waiting for a slot give up now.
  pool_cv_.notify_all();
  pool_cv_.wait(lk, [&] { return free_.size() == slots_.size(); });
  slots_.clear();
  free_.clear();
}

std::string PgMetaStore::batch_lock_sql(std::chrono::steady_clock::time_point deadline) const {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  const std::string ms = std::to_string(std::max<std::int64_t>(1, left.count())) + "ms";
  std::string s = "SET LOCAL lock_timeout = '" + ms + "';\nSET LOCAL statement_timeout = '" + ms + "';\n";
  if (cfg_.level >= kStreamIncarnationsLevel)
    s += "SET LOCAL sluice.writer_level = '" + std::to_string(cfg_.level.value()) + "';\n";
  return s + "LOCK TABLE counter IN EXCLUSIVE MODE";
}

std::string PgMetaStore::batch_head(std::chrono::steady_clock::time_point deadline) const {
  return "BEGIN ISOLATION LEVEL SERIALIZABLE;\n" + batch_lock_sql(deadline) + ";\n";
}

std::string PgMetaStore::change_sql(pqxx::transaction_base& tx, std::uint64_t seq,
                                    ChangeEvent::Kind kind, const std::string& payload) const {
  return "EXECUTE sl_insert_change(" + std::to_string(seq) + ", " +
         tx.quote(std::string(to_string(kind))) + ", " + tx.quote(payload) + ")";
}

std::string PgMetaStore::notify_and_prune_sql(pqxx::transaction_base& tx,
                                              std::uint64_t last_seq) const {
  // The feed treats a notification as a wake-up and pages by seq: one per write suffices.
  std::string s = "SELECT pg_notify(" + tx.quote(channel_) + ", '" + std::to_string(last_seq) + "')";
  // Keep the newest change_retention changes; watchers behind the cut resync.
  const std::int64_t cutoff = static_cast<std::int64_t>(last_seq) - cfg_.change_retention;
  if (cutoff > 0) s += ";\nEXECUTE sl_prune_changes(" + std::to_string(cutoff) + ")";
  return s;
}

}  // namespace sluice::postgres_meta
