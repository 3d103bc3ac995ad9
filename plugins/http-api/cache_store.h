// The cache data plane (docs/api.md "Caches"), on top of Node's stream calls.
//
// A cache incarnation's entries are a keyed log: the hidden backing stream
// backing_stream_name(cache, incarnation) (cache_codec.h), one record per write, sharded by
// key hash. Durability, recovery, replication and failover are the stream's. Each broker
// keeps, per backing shard, an in-memory index key -> {revision, expiry, value}, built on
// first use by reading the shard from its start and caught up to the high watermark
// before every operation (Node::fetch reads from the shard's leader, wherever it is).
//
// Writes are a compare-and-set on the shard's log: the writes waiting on one shard are
// decided against the index and appended together as one batch (group commit) of the one
// idempotent producer kProducerId, with sequence = the number of batches the index has
// seen. The leader appends it only if no other write took that sequence (storage.h
// "Idempotent producers"); when another broker's write did, the leader answers that
// write's offset (a duplicate) and the nonce in the stored record tells the writer it
// lost, so it catches up, re-checks if_revision and retries. So writes are linearizable
// per shard across brokers without a lock outside the leader.
//
// Resolving a cache (its catalog entry and backing stream) is remembered per cache and
// forgotten on every cache change the catalog's change feed reports (a watch), so a key
// request costs no catalog read; the backing stream is still checked in the broker's
// applied catalog on every request. Without a working watch every request reads the
// catalog.
//
// Counters (docs/api.md "Counters", counter_codec.h) use a second CacheStore of flavor
// counters(): the same keyed log, index and group commit, on backing streams named
// counter_backing_stream_name and resolved through the counter catalog; their adds are
// read-modify-writes (update) whose value is the key's counter state.
//
// Threading: every public call blocks (catalog, fetch, publish round trips); run them on
// the store's own pool (submit). Per shard one mutex guards the index and the queue of
// writes; it is not held while a batch is appended.
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

#include "cache_codec.h"
#include "sluice/node.h"

namespace sluice::http_api {

struct CacheConfig {
  std::size_t max_value_bytes = 1u << 20;  // cache.max_value_bytes
  std::size_t max_key_bytes = 512;         // cache.max_key_bytes
  std::uint32_t shards = 4;                // cache.shards (the backing stream's)
  unsigned threads = 16;                   // cache.threads
  std::uint32_t replication_factor = 1;    // stream.default_replication_factor
  // cache.clock_skew_ms: added to this broker's clock where the cache layer reads it (a
  // test's skewed broker; the leader's stamp in storage is not moved).
  std::int64_t clock_skew_ms = 0;
  // Background compaction of backing shards this broker leads (docs/architecture.md "Cache
  // compaction"): once a shard's retained bytes pass max(compact_min_bytes, compact_ratio x
  // the index's live key and value bytes).
  std::uint64_t compact_min_bytes = 64u << 20;  // cache.compact_min_bytes
  std::uint32_t compact_ratio = 2;              // cache.compact_ratio
  // cache.compact_sweep_ms: how often the leader looks for backing shards due (it reads the
  // catalog's snapshot: a controller call on a raft-meta broker).
  std::int64_t compact_sweep_ms = 30000;
  // How long a write or a read that meets a transient failure is tried again (fixed; a
  // unit test shortens it).
  std::chrono::milliseconds transient_retry{10000};
};

// What a store keeps: caches, or counters (whose catalog entries it reads as a CacheInfo
// without expiry).
struct CacheFlavor {
  std::string what;  // "cache" / "counter", in messages
  std::function<Result<CacheInfo>(Node&, const StreamKey&)> lookup;
  std::string (*backing_name)(std::string_view name, Incarnation, ChangeSeq);
  static CacheFlavor caches();
  static CacheFlavor counters();
};
// A counter as the store sees it: a cache whose entries never expire.
CacheInfo counter_as_cache(const CounterInfo& c);

class CacheStore {
 public:
  static constexpr std::uint64_t kProducerId = 1;

  CacheStore(Node& node, CacheConfig cfg, CacheFlavor flavor = CacheFlavor::caches());
  ~CacheStore();
  CacheStore(const CacheStore&) = delete;
  CacheStore& operator=(const CacheStore&) = delete;

  const CacheConfig& config() const { return cfg_; }
  // Shards with an index on this broker (sluice_cache_indexed_shards).
  std::size_t indexed_shards() const {
    std::lock_guard lk(mu_);
    return shards_.size();
  }
  // Writes in progress on this broker: queued for, or in, their shard's group commit
  // (sluice_cache_pending_writes).
  std::size_t pending_writes() const { return pending_.load(std::memory_order_relaxed); }
  // Leftover backing streams of deleted caches this broker removed (sluice_cache_leftovers_deleted_total).
  std::uint64_t leftovers_deleted() const { return swept_.load(std::memory_order_relaxed); }
  // Compactions finished (restated and trimmed) and the bytes they trimmed, since start
  // (sluice_cache_compactions_total, sluice_cache_compacted_bytes_total).
  std::uint64_t compactions() const { return compactions_.load(std::memory_order_relaxed); }
  std::uint64_t compacted_bytes() const { return compacted_bytes_.load(std::memory_order_relaxed); }
  // Runs `fn` on the cache pool. After stop() it is dropped.
  void submit(std::function<void()> fn);
  void stop();

  struct Write {
    enum class Status { ok, mismatch, absent };
    Status status = Status::ok;
    std::uint64_t revision = 0;      // ok: the write's; mismatch: the current (0: absent)
    std::int64_t expires_at_ms = -1;
    // The cache's incarnation the write was decided in (revisions mean something only
    // within one: a cache deleted and created again starts over).
    Incarnation incarnation{0};
  };
  // not_found: unknown cache, or no live entry. `incarnation`, if given, gets the cache's
  // incarnation the entry was read from.
  Result<CacheEntry> get(const StreamKey& cache, std::string_view key, Incarnation* incarnation = nullptr);
  // As get, but a key without a live entry is nullopt (not_found: unknown cache only).
  Result<std::optional<CacheEntry>> find(const StreamKey& cache, std::string_view key,
                                         Incarnation* incarnation = nullptr);
  // A read-modify-write: `decide` gets the key's live entry (null when absent) and returns
  // an answer (nothing is written) or nullopt after setting `value` to the value to write
  // (without expiry). It may be called again (another broker's write came first); the last
  // call decided what was written.
  using Decide = std::function<std::optional<Write>(const CacheEntry*, std::optional<std::string>& value)>;
  // `if_incarnation`: as for put (a counter add pinned to the counter it was meant for).
  Result<Write> update(const StreamKey& cache, std::string_view key, std::optional<AckMode> ack,
                       const Decide& decide, std::optional<Incarnation> if_incarnation = std::nullopt);
  // `ttl_ms` absent: the cache's default_ttl_ms. `if_revision` 0: only if absent.
  // `if_incarnation`: conflict, nothing written, unless the cache is that incarnation (a
  // revision read from a deleted cache must not match the recreated cache's).
  Result<Write> put(const StreamKey& cache, std::string_view key, std::string_view value,
                    std::optional<std::int64_t> ttl_ms, std::optional<std::uint64_t> if_revision,
                    std::optional<AckMode> ack, std::optional<Incarnation> if_incarnation = std::nullopt);
  // absent: no live entry (nothing written).
  Result<Write> erase(const StreamKey& cache, std::string_view key, std::optional<std::uint64_t> if_revision,
                      std::optional<AckMode> ack, std::optional<Incarnation> if_incarnation = std::nullopt);
  struct Listed {
    std::vector<std::pair<std::string, CacheEntry>> keys;  // values left empty
    std::optional<std::string> next;  // pass as `after` for the next page
  };
  Result<Listed> list(const StreamKey& cache, std::string_view prefix, std::string_view after, std::size_t limit);

  // The backing stream of a cache just created (also created on first write if this was
  // missed), and its removal when the cache is deleted.
  Result<StreamInfo> ensure_backing(const CacheInfo& ci);
  Result<void> delete_backing(const CacheInfo& ci);

 private:
  // One write waiting in a shard's queue.
  struct Pending {
    std::string_view key;
    CacheRecord rec;
    std::int64_t ttl_ms = -1;  // <= 0: no expiry
    AckMode ack = AckMode::leader;
    const Decide* check = nullptr;
    std::optional<std::string> computed;  // the value a read-modify-write decided
    int rounds = 0;  // batches it was in that lost their sequence
    std::chrono::steady_clock::time_point transient_deadline;  // retry transient errors until
    bool done = false;
    std::optional<Result<Write>> answer;
  };
  struct Shard {
    std::mutex mu;
    std::condition_variable cv;     // a Pending is done, or the writer left
    std::deque<Pending*> queue;     // writes not yet decided
    bool writing = false;           // a thread is writing the queue
    bool init = false;
    Incarnation incarnation{0};
    ChangeSeq created_seq{0};
    std::uint64_t end = 0;       // next offset to index
    std::uint64_t next_seq = 0;  // kProducerId's next sequence
    std::uint64_t last_own_batch = UINT64_MAX;  // base offset of the newest kProducerId batch indexed
    CacheIndex index;
    std::uint64_t watch_offset = UINT64_MAX;  // write_once: the nonce found at this offset
    std::uint64_t watch_nonce = 0;
    std::int64_t watch_stamp = -1;  // ... and the leader's timestamp there
    // A rebuild after a trim skipped watch_offset before it was indexed: whose batch is
    // there can no longer be read (compaction restates values, not nonces).
    bool watch_lost = false;
    // Compaction (cache_compact.cc): one at a time per shard, checked at most once a second.
    bool compacting = false;
    std::chrono::steady_clock::time_point compact_check{};
    std::uint64_t compact_floor = 0;  // retained bytes right after the last compaction
  };
  struct Resolved {
    CacheInfo cache;
    StreamInfo backing;
  };
  // One try of get and list; get and list retry a transient failure for a while.
  Result<std::optional<CacheEntry>> get_once(const StreamKey& cache, std::string_view key, Incarnation* incarnation);
  Result<Listed> list_once(const StreamKey& cache, std::string_view prefix, std::string_view after,
                           std::size_t limit);
  // not_found for an unknown cache; with `create`, a missing backing stream is created.
  Result<std::optional<Resolved>> resolve(const StreamKey& cache, bool create);
  Result<std::optional<Resolved>> resolve_uncached(const StreamKey& cache, bool create);
  std::shared_ptr<Shard> shard(const StreamKey& backing, ShardIndex s);
  ShardIndex shard_of(std::string_view key, const StreamInfo& backing) const;
  Result<void> catch_up(Shard& sh, const StreamInfo& backing, ShardIndex s);
  Result<void> wait_visible(Shard& sh, std::unique_lock<std::mutex>& lk, const StreamInfo& backing, ShardIndex s,
                            std::uint64_t offset);
  // Reads and writes are decided only against everything the shard's leader holds: asks it
  // for its log end and waits until its high watermark has passed that, then catches up (a
  // new leader's high watermark can lag acknowledged writes of the old epoch; docs/api.md
  // "Compare-and-set", "Reads").
  Result<void> catch_up_to_log_end(Shard& sh, std::unique_lock<std::mutex>& lk, const StreamInfo& si, ShardIndex s);
  void write_batch(Shard& sh, std::unique_lock<std::mutex>& lk, const StreamInfo& si, ShardIndex s);
  // The write loop of put, erase and update. `check` decides against the live entry (null
  // when absent): nullopt to write (the value it set, if it set one), else the answer.
  Result<Write> write(const StreamKey& cache, std::string_view key, CacheRecord rec, std::optional<std::int64_t> ttl_ms,
                      std::optional<AckMode> ack, const Decide& check,
                      std::optional<Incarnation> if_incarnation = std::nullopt);
  void run();
  // --- compaction (cache_compact.cc; docs/architecture.md "Cache compaction") ---
  // After a write: schedules a compaction of shard `s` on the pool if it is due (sh.mu held).
  void maybe_compact(const std::shared_ptr<Shard>& sh, const StreamInfo& si, ShardIndex s);
  // roll -> restate every live key in chunks -> trim below the first restate batch.
  Result<void> compact(Shard& sh, const StreamInfo& si, ShardIndex s);
  // One restate batch of the keys after `after` (holding the shard's writer token): true
  // when it wrote one (`after` moves on, `first` gets its offset if unset), false when no
  // key is left.
  Result<bool> restate_chunk(Shard& sh, std::unique_lock<std::mutex>& lk, const StreamInfo& si, ShardIndex s,
                             std::string& after, std::optional<std::uint64_t>& first);
  bool compaction_finalized();  // the fleet feature cache_compaction (remembered once true)
  // Every kSweepEvery: finds the backing shards of this flavor that this broker leads (the
  // catalog's assignments) and checks each (catching up an index first if the shard is big
  // enough): client writes reach a shard's leader as forwarded publishes, not through its
  // CacheStore, so maybe_compact after a local write alone would never see them.
  void sweep_loop();
  void sweep_once();
  // Starts the catalog watch if it is not running (memo_mu_ not held).
  void ensure_watch();
  void forget_all();  // a cache changed: drop every remembered resolution
  // Deletes a deleted cache's backing stream if the applied catalog still has it (the
  // broker that handled the delete may have died before it did). `seen` says the caller
  // saw it in a catalog snapshot, which this broker's applied catalog may not have reached.
  void sweep_backing(const StreamKey& backing, bool seen = false);
  // Once, when the catalog is ready: deletes every backing stream of this flavor whose cache
  // (counter) the catalog no longer has, as of one snapshot. Catches what the change feed
  // cannot: a delete this broker did not see (it was the only broker, or it was down).
  // False if the catalog could not be read yet (try again).
  bool sweep_leftovers();
  void drop_indexes(const StreamKey& backing);  // its shards' indexes (values included)

  StreamKey backing_key(const StreamKey& cache, Incarnation inc, ChangeSeq created) const {
    return {cache.tenant, cache.ns, flavor_.backing_name(cache.name, inc, created)};
  }

  Node& node_;
  const CacheConfig cfg_;
  const CacheFlavor flavor_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Shard>, std::less<>> shards_;
  std::uint64_t nonce_base_;
  std::uint64_t nonce_next_ = 0;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  std::atomic<bool> stopping_{false};
  std::atomic<std::size_t> pending_{0};
  std::atomic<std::uint64_t> swept_{0};
  std::vector<std::thread> threads_;
  std::atomic<std::uint64_t> compactions_{0};
  std::atomic<std::uint64_t> compacted_bytes_{0};
  std::atomic<bool> compaction_finalized_{false};
  std::mutex feature_mu_;
  std::chrono::steady_clock::time_point feature_check_{};
  std::thread sweeper_;
  std::condition_variable sweep_cv_;  // with mu_: stop() wakes the sweeper

  std::mutex memo_mu_;
  std::map<std::string, Resolved, std::less<>> memo_;  // "tenant/ns/cache"
  std::uint64_t memo_gen_ = 0;   // bumped by every forget_all
  bool watch_ok_ = false;        // the watch runs and has not asked for a resync
  std::unique_ptr<WatchHandle> watch_;
  std::chrono::steady_clock::time_point watch_retry_{};
};

}  // namespace sluice::http_api
