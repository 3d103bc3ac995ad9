// The replication manager of one fs-storage engine (docs/replication.md "The data path").
//
// For every open shard incarnation with more than one replica it plays the role the
// catalog's assignment gives this broker:
//   * leader: answers followers' fetches with whole stored batches (long poll when nothing
//     is new), tracks each follower's durable end, raises the high watermark to the lowest
//     durable end in the in-sync set, and shrinks or grows that set through the catalog's
//     compare-and-set (never below min_insync);
//   * follower: truncates a divergent suffix found through the leader-epoch history (never
//     below its high watermark), then fetches, writes and fsyncs chunks, and reports its
//     durable end with the next fetch; when its whole log lies below the leader's log start
//     (the leader answers such a fetch with its log start and no chunk), it drops the log
//     and starts over there (restart_at: the one cut below the high watermark;
//     docs/replication.md "Below the leader's log start");
//   * neither (no leader, or another epoch than its own): serves nothing.
//
// It drives the log through the ReplicaLog seam, so the protocol is tested against a model
// log and the real one alike. Threads: a few workers (disk work: catch-up fetch answers,
// replica appends, quorum deadlines), one catalog thread (calls that wait on the metadata
// store: the periodic lag and in-sync check, new-epoch requests) and one timer thread
// (long-poll deadlines, retry backoff, queuing the checks). Transport handlers and callbacks hand work to the workers, except on the
// steady-state path, where every hand-off is a thread wake-up (a context switch costs ~10 us
// in this VM, more than the work): a follower's fetch at the tail is parked or answered on
// the transport's thread, and a parked fetch is answered from the log's end notification
// (docs/replication.md "Fewer wake-ups on the data path").
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

#include "sluice/error.h"
#include "sluice/host.h"
#include "sluice/metadata.h"
#include "sluice/storage.h"
#include "sluice/transport.h"
#include "sluice/types.h"
#include "epoch_history.h"
#include "replication_wire.h"

namespace sluice::fs_storage {

// EpochEnd (KIP-279's answer) is defined with the epoch history (epoch_history.h).

// read_raw's answer as the manager needs it.
struct ReplicaChunk {
  std::string bytes;   // `headroom` bytes for the caller, then whole stored batches, as on disk
  Offset next;         // the offset after the last batch
  LeaderEpoch epoch;   // the epoch every batch was written in (a chunk never spans two)
};

// What the manager needs of one replica's log. Every call may block on the disk; the
// manager calls them from its workers only.
class ReplicaLog {
 public:
  virtual ~ReplicaLog() = default;
  virtual const ShardRef& ref() const = 0;
  virtual Offset log_start() = 0;
  // End of what is synced on this disk (this replica's position for the high watermark).
  virtual Offset durable_end() = 0;
  // End of what is written here, synced or not (a leader ships up to it).
  virtual Offset written_end() = 0;
  virtual Offset high_watermark() = 0;
  // The highest epoch this replica has acted in (persisted).
  virtual LeaderEpoch leader_epoch() = 0;
  // The epoch of the last batch held (0 with an empty log).
  virtual LeaderEpoch last_data_epoch() = 0;
  // KIP-279: the largest epoch <= `epoch` in the history and where it ends here.
  virtual Result<EpochEnd> end_offset_for(LeaderEpoch epoch) = 0;
  virtual Result<void> become_leader(LeaderEpoch epoch) = 0;
  // It led `epoch` before it was reopened: it may not lead `epoch` again (a new one first).
  virtual bool led_before_reopen(LeaderEpoch epoch) = 0;
  // This disk held a copy of the shard once and lost it (docs/replication.md "A lost shard
  // copy"): it must not lead, and takes itself out of the in-sync set; once it holds what
  // its leader held when it began to fetch, forget_copy_lost() makes it an ordinary follower.
  virtual bool copy_lost() { return false; }
  virtual Result<void> forget_copy_lost() { return {}; }
  // A data log whose shard has a group op log, assigned right after it: a lost copy
  // forgets its loss only once that log has caught up too.
  virtual bool has_group_log() { return false; }
  virtual Result<void> become_follower(LeaderEpoch epoch, NodeId leader) = 0;
  // Deposed: a newer epoch exists. Pending and later quorum appends fail with fenced.
  virtual Result<void> fence(LeaderEpoch newer) = 0;
  virtual void set_in_sync(std::size_t members, std::uint32_t min_insync) = 0;
  virtual void advance_high_watermark(Offset hwm) = 0;
  // The target becomes the current high watermark, atomically with the log's own raises
  // (a member's position became unknown: nothing more is acknowledged until it is known).
  virtual void hold_high_watermark() = 0;
  virtual void expire_quorum_waiters(std::chrono::steady_clock::time_point now) = 0;
  // Whole batches from `from` (a batch boundary) up to the log end, at least one if any,
  // behind `headroom` bytes the caller fills in.
  virtual Result<ReplicaChunk> read_raw(Offset from, std::size_t max_bytes,
                                        std::size_t headroom = 0) = 0;
  // Appends a chunk read from the leader at `base` (== log end), written in `epoch`,
  // synced before it returns. `fetched_in`: the follower's epoch when it asked; refused
  // (conflict) if the follower has moved to another epoch since.
  virtual Result<void> append_replica(std::string_view chunk, Offset base, LeaderEpoch epoch,
                                      LeaderEpoch fetched_in) = 0;
  // `decided_in`: the follower's epoch when it decided the cut (its epoch-end question);
  // refused (conflict) if the follower has moved to another epoch since, as a late
  // decision may cut records the new epoch's leader already counted (review finding).
  virtual Result<void> truncate_to(Offset end, LeaderEpoch decided_in) = 0;
  // Drops the whole log (which ends at or below `start`) and continues with an empty one
  // starting at `start`, the leader's log start; crash-safe and durable when it returns.
  // The one cut allowed below the high watermark (docs/replication.md "Below the leader's
  // log start"). Refused on a leader, and when the log holds anything at or above `start`.
  // `decided_in` as for truncate_to.
  virtual Result<void> restart_at(Offset start, LeaderEpoch decided_in) = 0;
  // Deletes whole sealed segments entirely below `before` (ShardLog::trim_before's bounds);
  // returns the new log start. A follower calls it when the leader's log start moved up
  // (docs/architecture.md "Cache compaction"). Default: keeps everything.
  virtual Result<Offset> trim_before(Offset) { return log_start(); }
  // `cb` once the log end exceeds `offset` or the log closes (inline then, returning 0).
  // It runs on any thread (the real log's flusher), with no lock of the log held: it may
  // call back into the log. It must not block on anything a flush waits for.
  virtual std::uint64_t notify_when_end_beyond(Offset offset, std::function<void()> cb) = 0;
  virtual void cancel_end_notify(std::uint64_t handle) = 0;
};

struct ReplicaOptions {
  std::chrono::milliseconds max_lag{10000};         // replication.max_lag_ms
  std::uint32_t fetch_max_bytes = 4u << 20;         // replication.fetch_max_bytes
  std::chrono::milliseconds fetch_wait{500};        // replication.fetch_wait_ms
  std::chrono::milliseconds request_timeout{5000};  // a fetch times out after wait + this
  std::chrono::milliseconds retry_backoff{100};
  std::chrono::milliseconds quorum_timeout{30000};  // replication.quorum_timeout_ms
  unsigned workers = 2;                             // replication.workers
  // How often the leader checks lag and quorum deadlines; 0: only when told (tests).
  std::chrono::milliseconds check_interval{-1};     // -1: max_lag / 4, at most 1 s
  // Whether the fleet feature lost_copy_fetch is finalized (asked at each fetch of a lost
  // copy): its fetches then say that it is lost. Null: never (a leader of an older build
  // refuses the longer request).
  std::function<bool()> lost_copy_fetch;
};

// Set on the threads that never hold a lock of a ReplicaManager when a log's end
// notification runs on them (fs-storage's flusher threads, flush_pool.cc): a parked fetch
// is answered right there (ReplicaManager::try_finish_parked_here).
inline thread_local bool t_notifier_holds_no_manager_lock = false;

class ReplicaManager {
 public:
  using UpdateShard = std::function<Result<Assignment>(const ShardUpdate&)>;
  using Logger = std::function<void(LogLevel, std::string_view)>;

  ReplicaManager(PeerTransport& transport, NodeId self, std::string directory_id,
                 UpdateShard update_shard, Logger log, ReplicaOptions opts);
  ~ReplicaManager();
  ReplicaManager(const ReplicaManager&) = delete;
  ReplicaManager& operator=(const ReplicaManager&) = delete;

  // Registers the transport handlers and starts the threads.
  Result<void> start();
  // Stops fetching and answering; parked fetches are answered unavailable.
  void stop();

  // The catalog's word on one shard (after open and after every change). Returns once the
  // role is persisted (the epoch history) and started. A shard's group op log (`kind`
  // groups) is assigned beside its data log with the same assignment: it plays the same
  // role, but the in-sync set is the data log's (it never changes it; a change the data log
  // makes is passed on to it).
  Result<void> assign(std::shared_ptr<ReplicaLog> log, const ReplicaAssignment& assignment,
                      LogKind kind = LogKind::data);
  // The shard closes or is deleted here: stop every role for it (both logs).
  void remove(const ShardRef& ref);

  // The leader's view of each replica (empty when this broker does not lead the shard).
  std::vector<ReplicaProgress> progress(const ShardRef& ref);
  // Runs one lag and quorum-deadline check now, in-sync changes included (tests; the timer
  // queues it on the catalog thread otherwise).
  void check_now();
  // Fails quorum appends past their deadline on every led shard (the timer queues it on
  // the workers, so deadlines hold while the catalog thread waits on the metadata store).
  void expire_now();
  // Timers not yet due (tests: an answered parked fetch leaves none behind).
  std::size_t pending_timers();

  struct Counters {
    std::uint64_t fetches_served = 0;
    std::uint64_t bytes_served = 0;
    std::uint64_t chunks_appended = 0;
    std::uint64_t bytes_appended = 0;
    std::uint64_t truncations = 0;
    // Epoch-end rounds that found the leader lacking records below this replica's high
    // watermark: this replica holds them and does not follow that leader.
    std::uint64_t diverged_holds = 0;
    std::uint64_t log_restarts = 0;  // restart_at at a leader's log start
    std::uint64_t isr_shrinks = 0;
    std::uint64_t isr_expands = 0;
  };
  Counters counters();

 private:
  struct Shard;
  struct Parked;
  using Clock = std::chrono::steady_clock;

  std::shared_ptr<Shard> find(const StreamKey& key, ShardIndex shard,
                              LogKind kind = LogKind::data);
  void post(std::function<void()> fn);
  // A timer: its deadline and a unique id (cancel_timer takes it back).
  using TimerKey = std::pair<std::chrono::steady_clock::time_point, std::uint64_t>;
  TimerKey after(std::chrono::milliseconds delay, std::function<void()> fn);
  void cancel_timer(const TimerKey& key);
  void worker_loop();
  void timer_loop();
  void finish_parked(const std::shared_ptr<Parked>& p);
  bool try_finish_parked_here(const std::shared_ptr<Parked>& p);
  void drop_parked(Shard& s);

  // Leader side.
  void on_fetch(const PeerIdentity& from, std::string payload, PeerResponder respond);
  void on_epoch_end(const PeerIdentity& from, std::string payload, PeerResponder respond);
  Result<std::shared_ptr<Shard>> check_envelope(const PeerIdentity& from, const Incarnated& env,
                                                bool leader_only);
  void serve_fetch(const std::shared_ptr<Shard>& s, FetchRequest req, PeerResponder respond);
  void answer_fetch(const std::shared_ptr<Shard>& s, const FetchRequest& req,
                    PeerResponder& respond);
  bool fetch_at_tail(const Incarnated& env, Offset fetch_offset);
  // The encoded answer and the high watermark it tells; needs no lock of the manager.
  Result<std::pair<std::string, Offset>> read_fetch_answer(ReplicaLog& log, LeaderEpoch epoch,
                                                           const FetchRequest& req,
                                                           std::size_t& chunk_size);
  void count_fetch_served(std::size_t chunk_size);
  void record_progress(Shard& s, NodeId follower, const std::string& dir, Offset durable_end,
                       bool says_lost, Clock::time_point now);
  void update_high_watermark(Shard& s);
  void check_shard(const std::shared_ptr<Shard>& s, Clock::time_point now);
  void change_in_sync(const std::shared_ptr<Shard>& s, std::vector<InSyncReplica> in_sync,
                      const char* why);
  // The catalog names this replica leader in an epoch it led before it was reopened: ask
  // for the next epoch (same leader, same in-sync set); the new assignment arrives as usual.
  void request_new_epoch(const std::shared_ptr<Shard>& s, const ReplicaAssignment& ra);
  // One update_shard for this replica's own sake (catalog thread): `fill` changes the
  // assignment `ra` as it stands; retried through `again` unless refused. The catalog's
  // version once it applied it.
  std::optional<ShardVersion> ask_catalog(const std::shared_ptr<Shard>& s, const ReplicaAssignment& ra,
                   const std::function<void(ShardUpdate&)>& fill, const std::string& what,
                   void (ReplicaManager::*again)(const std::shared_ptr<Shard>&, const ReplicaAssignment&));
  // A lost copy the catalog still counts: this broker out of the in-sync set, and out of
  // the leadership (leader 0, the next epoch) if it has it (docs/replication.md "A lost
  // shard copy").
  void request_leave_in_sync(const std::shared_ptr<Shard>& s, const ReplicaAssignment& ra);
  // A lost copy's fetch answer: records how far it must catch up, and once both logs of
  // the shard have, forgets the loss (docs/replication.md "A lost shard copy").
  void lost_copy_fetched(const std::shared_ptr<Shard>& s, LeaderEpoch asked_in, Offset leader_end);
  // A data log's leader learned of a newer epoch: its group op log stops leading too.
  void fence_group_log(Shard& data, const std::shared_ptr<Shard>& group_log, LeaderEpoch newer);

  // Follower side.
  void follow(const std::shared_ptr<Shard>& s, std::uint64_t gen);
  void truncate_step(const std::shared_ptr<Shard>& s, std::uint64_t gen);
  void fetch_step(const std::shared_ptr<Shard>& s, std::uint64_t gen);
  void retry(const std::shared_ptr<Shard>& s, std::uint64_t gen, const Error& why);
  Incarnated envelope(const Shard& s) const;

  PeerTransport& transport_;
  NodeId self_;
  std::string directory_id_;
  UpdateShard update_shard_;
  Logger log_;
  ReplicaOptions opts_;

  std::mutex mu_;  // shards_, counters_
  using Key = std::tuple<StreamKey, ShardIndex, LogKind>;
  std::map<Key, std::shared_ptr<Shard>> shards_;
  Counters counters_;

  // The work queue and timers. Transport and log callbacks hold it, not the manager, so a
  // callback that fires after stop() only drops its work.
  struct Exec;
  std::shared_ptr<Exec> exec_;
  std::vector<std::thread> workers_;
  std::thread timer_;
  std::thread catalog_;  // runs Exec::catalog_queue
  void catalog_loop();
  void post_catalog(std::function<void()> fn, bool front = false);
  // The periodic check: one catalog-thread step per shard, so a new-epoch request waits
  // for at most one metadata call, not a whole pass.
  void queue_check_pass();
  bool started_ = false;
};

}  // namespace sluice::fs_storage
