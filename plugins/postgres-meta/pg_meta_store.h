// MetadataStore in PostgreSQL (docs/architecture.md "Metadata in PostgreSQL"; README.md in this directory).
//
// Thread model
//   - callers (any thread): every catalog call runs one transaction on a connection it
//     takes from the request pool (metadata.postgres.pool_size connections, opened on
//     demand, pg_meta_pool.cc), so independent calls run concurrently. Writes are
//     SERIALIZABLE and lock the single `counter` row's table first, so catalog writes are
//     serial, the change sequence is gap-free and its order is commit order. Serialization
//     failures and lost connections are retried with backoff until metadata.timeout_ms; a
//     pooled connection found dead before use is replaced. Concurrent stream creates on one
//     instance are grouped into one write of two round trips (pg_meta_create.cc; WriteBatch,
//     statements prepared once per connection).
//   - feed thread (one per started store, its own connection): LISTENs for change
//     notifications, pages the `changes` table for every watch (WatchRegistry::deliver:
//     callbacks run here, one at a time, in ChangeSeq order, no lock held), holds the controller lease (a session
//     advisory lock) and tracks readiness. Reconnects with backoff.
//
// Lock order: life_mu_ -> pool_mu_; watch_mu_ is never held with pool_mu_; create_mu_ is
// never held with another lock. No lock is held while a pooled connection is in use (its
// slot belongs to the call that took it).
//
// Files: pg_meta_config.cc, pg_meta_bootstrap.cc (connect, migrate, start/stop),
// pg_meta_transaction.cc and pg_meta_store_internal.h (the transaction runner, WriteBatch and
// helpers),
// pg_meta_pool.cc (the request pool, prepared statements), pg_meta_catalog.cc,
// pg_meta_create.cc (stream creates), pg_meta_caches.cc, pg_meta_fleet.cc, pg_meta_feed.cc
// (feed thread, watches).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <pqxx/pqxx>

#include "sluice/host.h"
#include "sluice/metadata.h"
#include "sluice/watch_registry.h"


namespace sluice::postgres_meta {

class WriteBatch;  // pg_meta_store_internal.h

// The highest metadata level postgres-meta implements: reassignment (17), on top of
// replicated shards (16), cache incarnations (14) and stream incarnations (10). Level 14's
// per-entry flag is raft-meta's; here a writer at 14 or above decides a cache's
// incarnation inside its own transaction and the database refuses what a writer below 14
// would write once cache_incarnations is finalized (docs/metadata-levels.md). It runs at
// 8, 10, 14, 16, 17 or 18 (counters: pg_meta_counters.cc, migration 7).
inline constexpr MetadataLevel kPostgresMetaLevel{18};

struct PgMetaConfig {
  std::string url;                                  // metadata.postgres.url (required)
  std::string schema = "sluice";                    // metadata.postgres.schema
  MetadataLevel level = kPostgresMetaLevel;         // metadata.level (8, 10, 14, 16, 17 or 18)
  std::vector<std::string> bootstrap_hold_back;     // metadata.bootstrap_hold_back
  std::chrono::milliseconds timeout{10000};         // metadata.timeout_ms
  std::chrono::milliseconds start_timeout{30000};   // metadata.start_timeout_ms
  std::chrono::milliseconds session_timeout{10000}; // broker.session_timeout_ms
  std::int64_t change_retention = 100000;           // metadata.postgres.change_retention
  std::chrono::milliseconds poll_interval{1000};    // metadata.postgres.poll_interval_ms
  int pool_size = 8;                                // metadata.postgres.pool_size (1..64)

  // Throws std::invalid_argument on a missing or malformed value.
  static PgMetaConfig from_host(const PluginHost& host);
};

// The application_name of every connection of node `node` on `schema`: "sluiced node N
// <schema>", cut to the 63 bytes PostgreSQL keeps (pg_stat_activity shows it).
inline std::string application_name(NodeId node, const std::string& schema) {
  std::string n = "sluiced node " + std::to_string(node.value()) + " " + schema;
  if (n.size() > 63) n.resize(63);
  return n;
}

class PgMetaStore final : public MetadataStore {
 public:
  explicit PgMetaStore(PluginHost& host);  // may throw std::invalid_argument
  PgMetaStore(PluginHost& host, PgMetaConfig config);
  ~PgMetaStore() override;

  Result<void> start() override;
  void stop() override;
  MetadataStatus status() override;
  bool is_controller() override { return lease_held_.load(); }

  Result<TenantInfo> create_tenant(const std::string& name) override;
  Result<void> delete_tenant(const std::string& name) override;
  Result<std::vector<TenantInfo>> list_tenants() override;
  Result<NamespaceInfo> create_namespace(const std::string& tenant, const std::string& name) override;
  Result<void> delete_namespace(const std::string& tenant, const std::string& name) override;
  Result<std::vector<NamespaceInfo>> list_namespaces(const std::string& tenant) override;
  Result<StreamInfo> create_stream(const StreamKey& key, const StreamSpec& spec) override;
  Result<StreamInfo> delete_stream(const StreamKey& key) override;
  Result<StreamInfo> get_stream(const StreamKey& key) override;
  Result<std::vector<StreamInfo>> list_streams(const std::string& tenant,
                                               const std::string& ns) override;
  Result<CatalogSnapshot> snapshot() override;

  Result<CounterInfo> create_counter(const StreamKey& key) override;  // pg_meta_counters.cc
  Result<CounterInfo> delete_counter(const StreamKey& key) override;
  Result<CounterInfo> get_counter(const StreamKey& key) override;
  Result<std::vector<CounterInfo>> list_counters(const std::string& tenant,
                                                 const std::string& ns) override;
  Result<CacheInfo> create_cache(const StreamKey& key, const CacheSpec& spec) override;
  Result<CacheInfo> delete_cache(const StreamKey& key) override;
  Result<CacheInfo> get_cache(const StreamKey& key) override;
  Result<std::vector<CacheInfo>> list_caches(const std::string& tenant,
                                             const std::string& ns) override;

  Result<BrokerInfo> register_broker(const BrokerRegistration& reg) override;
  Result<void> heartbeat_broker(NodeId id) override;
  Result<void> unregister_broker(NodeId id) override;
  Result<std::vector<BrokerInfo>> list_brokers() override;
  Result<std::vector<FeatureInfo>> list_features() override;
  Result<FeatureInfo> finalize_feature(const std::string& name) override;
  Result<std::vector<Tombstone>> list_tombstones() override;
  Result<Assignment> update_shard(const ShardUpdate& update) override;

  std::unique_ptr<WatchHandle> watch(ChangeSeq after,
                                     std::function<void(const ChangeEvent&)> on_change,
                                     std::function<void()> resync) override;

  // Whether this instance holds the controller lease (the feed connection's advisory lock).
  bool holds_lease() const { return lease_held_.load(); }
  // Stream creates waiting for the next batch (the one in flight excluded).
  std::size_t queued_creates() const;
  const PgMetaConfig& config() const { return cfg_; }

 private:
  enum class Mode { write, read, plain };
  // Runs fn(transaction_base&) in a transaction of `mode`, or fn(WriteBatch&) as one write
  // in two round trips (the mode is then ignored); retries as described above.
  template <class T, class F>
  Result<T> run(Mode mode, F&& fn);
  Result<std::unique_ptr<pqxx::connection>> connect_once();

  // The request pool (pg_meta_pool.cc).
  struct Slot {
    std::unique_ptr<pqxx::connection> conn;  // null: (re)connect before use
    std::unique_ptr<pqxx::quiet_errorhandler> quiet;  // conn's notices are not printed
  };
  // A free slot's index, waiting while all are taken; nullopt once the deadline passes.
  std::optional<std::size_t> acquire_slot(std::chrono::steady_clock::time_point deadline);
  void release_slot(std::size_t i);
  // The slot's connection, opened (and its statements prepared) if missing; a connection
  // found dead (the server closed it while idle) is replaced first.
  Result<pqxx::connection*> slot_connection(std::size_t i);
  Result<void> prepare_statements(pqxx::connection& c);
  // The level declaration and the counter lock, after lock and statement timeouts that end
  // at `deadline` (a writer cut off while it holds the lock, or waits for it, does not hold
  // every other instance's writes for longer than its own call may take).
  std::string batch_lock_sql(std::chrono::steady_clock::time_point deadline) const;
  static std::string with_keepalives(const std::string& url, std::chrono::milliseconds timeout);
  // BEGIN SERIALIZABLE and batch_lock_sql(deadline)
  std::string batch_head(std::chrono::steady_clock::time_point deadline) const;
  // For a WriteBatch: the statement that records one change, and the NOTIFY and prune
  // that follow a write's last change.
  std::string change_sql(pqxx::transaction_base& tx, std::uint64_t seq, ChangeEvent::Kind kind,
                         const std::string& payload) const;
  std::string notify_and_prune_sql(pqxx::transaction_base& tx, std::uint64_t last_seq) const;
  void close_pool();  // waits for every slot to come back; life_mu_ held

  // Stream creates (pg_meta_create.cc): the creates waiting on one instance are grouped
  // into one write (one counter lock, two round trips, one commit, one NOTIFY); the caller
  // that finds no batch running runs the next one.
  struct PendingCreate;
  void create_batch(const std::vector<PendingCreate*>& batch);
  Result<std::string> migrate(pqxx::connection& c);
  Result<void> check_started();
  void log(LogLevel level, const std::string& msg);
  std::string clean(const std::string& msg) const;  // scrubbed, one line
  Error map_sql_error(const std::string& sqlstate, const std::string& what) const;

  // Inside a write transaction.
  std::uint64_t next_seq(pqxx::transaction_base& tx);
  void record_change(pqxx::transaction_base& tx, std::uint64_t seq, ChangeEvent::Kind kind,
                     const std::string& payload);
  // lock: FOR SHARE (a heartbeat's update of those rows waits for the commit).
  std::vector<BrokerInfo> read_brokers(pqxx::transaction_base& tx, bool lock = false);
  std::map<std::string, ChangeSeq, std::less<>> read_finalized(pqxx::transaction_base& tx);

  void feed_main();
  bool deliver_all(pqxx::connection& c);  // true: more pending
  void wake_feed();

  PluginHost& host_;
  PgMetaConfig cfg_;
  std::string target_;   // the connection target without the password
  std::string secret_;   // the password, for scrubbing messages
  std::string channel_;  // LISTEN channel

  std::mutex life_mu_;
  std::atomic<bool> started_{false};
  std::string cluster_id_;  // guarded by life_mu_ once started

  std::mutex pool_mu_;
  std::condition_variable pool_cv_;
  std::vector<Slot> slots_;         // sized at start(); a taken slot belongs to its caller
  std::vector<std::size_t> free_;   // indices of free slots, guarded by pool_mu_

  mutable std::mutex create_mu_;              // never held across a database call
  std::condition_variable create_cv_;
  std::deque<PendingCreate*> create_queue_;   // create_mu_
  bool create_running_ = false;               // create_mu_: a batch is in flight

  // Feed thread state.
  std::thread feed_;
  std::atomic<bool> feed_stop_{false};
  std::atomic<bool> feed_up_{false};
  std::atomic<bool> lease_held_{false};
  std::atomic<std::uint64_t> applied_{0};
  std::atomic<std::uint64_t> undecodable_at_{0};  // the first change the feed cannot decode (0: none)
  // Feed thread only: a digest of each change the feed delivered lately (kind and payload),
  // by seq. A watcher's cursor names the last change it was given; if the database holds
  // another change at that seq now (a restore rewound the sequence, then a new write took
  // the number again), the history the watcher followed is gone: it resyncs, rather than
  // skipping the new change as one it has seen.
  std::map<std::uint64_t, std::uint32_t> delivered_digest_;
  std::mutex err_mu_;
  std::string last_error_;  // guarded by err_mu_

  // Watches: the SDK fan-out (watch_registry.h), delivered by the feed thread. watch_mu_
  // and watch_cv_ wake the feed thread (a new watch, stop()).
  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  bool wake_ = false;  // watch_mu_
  WatchRegistry watches_{[this] { wake_feed(); }};
};

}  // namespace sluice::postgres_meta
