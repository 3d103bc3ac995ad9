// ShardLogImpl: one open shard incarnation (sluice::ShardLog).
//
// Shard state machine:
//
//      open_shard()           write/sync error
//   ----------------> OPEN ---------------------> FAILED
//    (recovery ok)     |  \                         |  every queued and later append
//                      |   \ close_shard()/         |  fails with storage_failure;
//                      |    \ shutdown()            |  nothing queued is acknowledged
//                      |     v                      |
//                      |   CLOSING (appends refused |
//                      |     with unavailable; the  |
//                      |     queue drains)          |
//                      |     |                      |
//                      v     v                      v
//                        CLOSED  <------------------+  (waiters called; data stays)
//
// Append path (any thread):  check_batch -> lock mu_ -> assign base offset, restamp,
// enqueue -> unlock -> (AckMode::none: callback inline) -> schedule on the FlushPool.
// Flush path (one flusher thread at a time per shard): take the whole queue -> pwritev
// (rolling segments when storage.segment_bytes is exceeded) -> fdatasync once per touched
// segment -> publish sizes + high watermark under seg_mu_ -> wake notify_when_beyond
// waiters -> complete AckMode::leader/quorum callbacks.
//
// Locks: mu_ (append queue, state, waiters) and seg_mu_ (segment list, published segment
// fields, log start, retention policy) are never held together, and no I/O happens under
// either except the segment creation on roll. Readers hold seg_mu_ only to pick the segment
// and position; pread runs unlocked on a shared_ptr<Segment>.
//
// Idempotent producers (producers.h): append() checks a batch with producer_id != 0
// against producers_ under mu_ (one map lookup): the next sequence is appended and recorded;
// one of the last 5 completes with the original offsets and duplicate = true, at once if
// the original's callback already ran (acked_end_), else from the flusher right after the
// original's callback (dup_waiters_), with the same outcome; anything else is
// sequence_gap. The flusher keeps a second table (written_producers_) of what it wrote, and
// when it seals a segment it writes that table as the producer snapshot at the boundary.
//
// notify_when_beyond waiters (under mu_) are keyed by a handle (1, 2, ...) for cancel_notify
// and indexed by offset: the flusher takes every waiter below the new high watermark in
// one ordered walk per group; cancel_notify erases one by handle and destroys its callback
// outside mu_; close() calls the rest.
//
// Replicated shards (spec.replication_factor > 1; docs/replication.md "The data path").
// An RF=1 shard is exactly as above: always leading, epoch 0, no leader-epochs file, its
// high watermark is its durable end, and AckMode::quorum is treated like leader. A
// replicated shard adds:
//   * roles: none (just opened: a restarted replica acts in no epoch until told),
//     leader, follower, fenced (a deposed leader). Client appends need `leader`; others
//     are refused with not_leader (none, follower) or fenced (fenced). become_leader,
//     become_follower and fence persist the epoch in the EpochHistory (epoch_history.h)
//     BEFORE the replica acts in it, and refuse an epoch below the current one (fenced).
//   * the high watermark is set by the replication manager (advance_high_watermark:
//     monotonic, capped at the durable end); readers (read, notify_when_beyond) see only
//     below it. It starts at the checkpoint written by the last close() (epoch_history.h),
//     capped at the recovered log end, else at the log start.
//   * AckMode::leader completes after the local fdatasync as before. AckMode::quorum moves,
//     after that sync, into quorum_waiters_ (offset order) and completes once the high
//     watermark reaches its batch's end while in_sync_count >= min_insync (set_in_sync);
//     expire_quorum_waiters fails those past their deadline (set_quorum_timeout, taken at
//     append); fence/become_follower fail them all with fenced. Duplicates of idempotent
//     retries complete once the high watermark passes their original, an ack=quorum one
//     only while in_sync_count >= min_insync too (a retry must not be told "quorum" for a
//     batch its original could not be); expire_quorum_waiters fails them at their deadline.
//   * the follower path (append_replica, truncate_to, restart_at) and role changes run on
//     the caller's thread, serialized by repl_mu_. While one writes it holds the flusher's
//     token (scheduled_ = true, after waiting for a running flush to drain), so the
//     segment writer fields keep exactly one writer and close() waits for it.
//   * the durable end (durable_end_) is the end of fdatasync'd data, published with the
//     segment sizes; notify_when_end_beyond waiters fire when it passes their offset.
//     read_raw serves whole stored batches up to it (the leader's unreplicated data
//     included), never crossing an epoch boundary.
// Locks: repl_mu_ is taken before mu_ or seg_mu_ or epoch_mu_ (each taken alone, never
// nested among themselves); the history file is written under repl_mu_ only.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "epoch_history.h"
#include "dir_sync.h"
#include "file_system.h"
#include "group.h"
#include "group_ops.h"
#include "options.h"
#include "producers.h"
#include "recovery.h"
#include "segment.h"
#include "sluice/host.h"
#include "sluice/storage.h"

namespace sluice::fs_storage {

class FlushPool;

// How a shard is replicated (open_shard fills it from the StreamSpec).
struct ReplicaSetup {
  bool replicated = false;      // replication_factor > 1
  std::uint32_t min_insync = 1;
  EpochHistory history;         // loaded before recovery; replicated shards only
  Offset hwm_checkpoint;        // the high watermark it closed with (capped at the log end)
  bool copy_lost = false;       // <dir>/lost-copy exists (copy_marks.cc)
};

// read_raw's answer: whole stored batches, byte for byte as on disk.
struct RawChunk {
  std::string bytes;        // `headroom` bytes for the caller, then the concatenated batches
                            // (none when `from` is the durable end)
  Offset next_offset;       // offset after the last batch (== from if empty)
  LeaderEpoch last_epoch;   // the epoch every batch in `bytes` was written in; for an empty
                            // chunk, the epoch of the batch ending at next_offset (0: none)
};

class ShardLogImpl final : public ShardLog, public std::enable_shared_from_this<ShardLogImpl> {
 public:
  // Takes ownership of the recovered segments. `pool` must outlive every append that is
  // accepted (the engine closes shards before stopping the pool).
  ShardLogImpl(ShardRef ref, RetentionPolicy retention, std::string dir, const Options& opts,
               std::shared_ptr<FileSystem> fs, PluginHost& host, FlushPool& pool,
               RecoveredLog recovered, ReplicaSetup replica = {});
  ~ShardLogImpl() override;

  const ShardRef& ref() const override { return ref_; }
  void append(std::string batch, AckMode ack, AppendCallback cb) override;
  void append_may_block(std::string batch, AckMode ack, AppendCallback cb) override;
  Result<FetchResult> read(Offset from, std::uint32_t max_records, std::size_t max_bytes) override;
  std::uint64_t notify_when_beyond(Offset offset, std::function<void()> cb) override;
  void cancel_notify(std::uint64_t handle) override;
  ShardStats stats() override;
  // Where stats() gets the leader's view of every replica (the replication manager's).
  void set_progress_source(std::function<std::vector<ReplicaProgress>()> source) {
    std::lock_guard lk(progress_mu_);
    progress_ = std::move(source);
  }

  Result<GroupDelivery> group_fetch(const std::string& group, std::uint32_t max_records,
                                    const GroupOptions& opts) override;
  Result<void> group_ack(const std::string& group, const std::vector<Offset>& offsets) override;
  Result<void> group_nack(const std::string& group, const std::vector<Offset>& offsets) override;
  Result<GroupPosition> group_position(const std::string& group) override;
  Result<std::vector<std::string>> list_groups() override;
  Result<FetchResult> dead_letters(const std::string& group, Offset from,
                                   std::uint32_t max_records, std::size_t max_bytes) override;
  Result<std::uint64_t> replay_dead_letters(const std::string& group, Offset from,
                                            Offset to) override;

  // append() and append_may_block(): may_flush_here lets this thread flush the group it
  // starts.
  void append_to(std::string batch, AckMode ack, AppendCallback cb, bool may_flush_here);
  // A flusher thread (FlushPool), or the caller of append_may_block for the group it
  // starts: whoever set scheduled_.
  void flush();
  // Preallocated segments (storage.preallocate_segments; docs/architecture.md "Preallocated
  // segments"). The pool's spare thread: writes <log>/next-segment.tmp as
  // storage.segment_bytes of zeros and syncs it, for the next roll to rename into place.
  // Gives up, removing the file, once the log closes or `stop` is set.
  void prepare_spare(const std::atomic<bool>& stop);
  // A spare is written and synced, waiting for the next roll (tests).
  bool spare_ready();
  // Drains pending appends, then closes. Idempotent. Not from a callback.
  void close();
  // The entries of a new single-replica shard's directories and first segment that are not
  // synced yet (engine.cc open_unlocked): synced by the first flush before it acknowledges
  // and by a consumer group's first open; never at close, where nothing depends on them
  // (docs/architecture.md "Deferred directory syncs of a new shard"). Set before the shard
  // is shared.
  // `mark`: a single replica's mark in <storage.dir>/.replicas (copy_marks.cc), created once
  // these directories are durable (not synced itself: lost, it is written at a later open's
  // first flush).
  void defer_dir_syncs(DirSyncList dirs, std::string mark = {});
  // Syncs them now if any are left (any thread; one flag load when none are).
  Result<void> sync_deferred_dirs();
  // The next close() skips the clean state (the shard's directory is about to be deleted:
  // its index, producer snapshot and recovery point would be garbage).
  void discard_on_close() { discard_on_close_.store(true); }
  // close() wrote the clean state (the engine's clean-shutdown marker needs every shard's).
  bool closed_clean() const { return closed_clean_.load(); }
  // The lowest offset whose bytes may have been rewritten since the log opened: lowered
  // before every cut (truncate_to: the cut; restart_at: 0) and to 0 at close; ~0 while
  // nothing was cut. A background verification finding in a batch at or above it is moot
  // (background_verify.h); one below it stands.
  std::uint64_t cut_floor() const { return cut_floor_.load(); }
  // Deletes whole sealed segments, oldest first, per the retention policy. Any thread.
  void apply_retention(std::int64_t now_ms);
  void set_retention(RetentionPolicy r);
  // ShardLog::roll_segment / trim_before (docs/architecture.md "Cache compaction"). roll
  // takes the flusher's token (like the follower path), so the segment writer keeps one
  // writer; appends queued meanwhile are flushed into the new segment. trim shares
  // retention's deletion and bounds (high watermark, producer snapshot, active segment).
  Result<Offset> roll_segment() override;
  Result<Offset> trim_before(Offset before) override;
  const std::string& directory() const { return dir_; }
  // Clock of group deadlines (tests inject one); set before any group call.
  void set_group_clock(GroupClock c) { group_clock_ = std::move(c); }
  // Test seam of consumer-group crash points (group.h); set before any group call.
  void set_group_step_hook(GroupStepHook h) { group_step_hook_ = std::move(h); }
  // Where a log this shard opens later (a group's dead letters) hands what its recovery did
  // not CRC-check: the engine's background verification (FsStorageEngine::verify_later).
  // Set by the engine before any group call; unset, nothing is verified later.
  using VerifyLater = std::function<void(const std::string& what, const std::string& log_dir,
                                         const std::shared_ptr<ShardLogImpl>& log,
                                         std::vector<UnverifiedRange> ranges)>;
  void set_verify_later(VerifyLater v) { verify_later_ = std::move(v); }
  const VerifyLater& verify_later() const { return verify_later_; }
  // Opens an existing consumer group now (groups open lazily, on their first call): a
  // repair start opens the one whose dead-letter log its .corrupt marker names.
  Result<void> open_group(const std::string& name) {
    auto g = group(name, false);
    if (!g) return g.error();
    return {};
  }
  // Replicated shards: the consumer groups' replicated op log (group_ops.h), attached by
  // the engine right after open, before any group call. close() closes it.
  void attach_group_ops(std::unique_ptr<GroupOps> ops) { group_ops_ = std::move(ops); }
  GroupOps* group_ops() { return group_ops_.get(); }
  // Applies one committed op of the group log to the group it names (created if new);
  // with_group_ops calls it for every op it catches up on. Public for tests.
  Result<void> apply_group_op(const GroupOp& op);
  // Waits until no flush is queued or running: the flusher's effects after a sync (such as
  // registering quorum waiters) are done, and a deposed leader's batches are on disk.
  void wait_flushed() {
    std::unique_lock lk(mu_);
    drained_cv_.wait(lk, [&] { return !scheduled_; });
  }
  // notify_when_beyond waiters registered and neither fired nor cancelled (tests).
  std::size_t waiter_count() {
    std::lock_guard lk(mu_);
    return waiters_.size();
  }

  // --- replication (replicated shards; see the header comment) -------------------------
  // On an RF=1 shard: leader_epoch() is 0, high_watermark() == durable_end(), the role
  // calls, append_replica and truncate_to answer not_supported, and advance_high_watermark,
  // set_in_sync, set_quorum_timeout and expire_quorum_waiters change nothing.
  bool replicated() const { return replicated_; }
  // This disk created a copy of the shard and lost its log (docs/replication.md "A lost
  // shard copy"): the copy never leads, and leaves any in-sync set that counts it, until it
  // holds what its leader held when it began to fetch; then forget_copy_lost() removes
  // <dir>/lost-copy, durably, and it is an ordinary follower.
  bool copy_lost() const override { return copy_lost_.load(std::memory_order_acquire); }
  Result<void> forget_copy_lost();
  // End of fdatasync'd data (every batch below it survives a crash).
  Offset durable_end() const { return Offset(durable_end_.load(std::memory_order_acquire)); }
  // End of written data, synced or not (docs/replication.md "Shipping before the leader's
  // sync"): a leader serves read_raw up to it. Never below durable_end().
  Offset written_end() const { return Offset(written_end_.load(std::memory_order_acquire)); }
  // The first retained offset (0 once closed).
  Offset log_start();
  // The epoch of the last batch held (from the history; 0 with an empty log or RF=1).
  LeaderEpoch last_data_epoch();
  Offset high_watermark() const { return Offset(hwm_.load(std::memory_order_acquire)); }
  // Raises the high watermark to min(hwm, durable_end()) if that is higher; wakes readers
  // beyond it and completes quorum appends whose batch ends at or below it (if the in-sync
  // set is large enough). Never lowers it. `hwm` also becomes the target that each later
  // sync of this replica raises the high watermark toward (replacing the previous target:
  // a member that joined the in-sync set lowers it), so a leader whose followers synced
  // first needs no further word from them once its own sync is done.
  void advance_high_watermark(Offset hwm);
  // advance_high_watermark(high_watermark()), with no raise in between.
  void hold_high_watermark();
  // The catalog's in-sync set size (this replica included) and min_insync. Starts at
  // (1, spec.min_insync). Completes quorum waiters that were held back only by it.
  void set_in_sync(std::size_t in_sync_count, std::uint32_t min_insync);
  // Deadline of quorum appends accepted from now on (default 30 s).
  void set_quorum_timeout(std::chrono::milliseconds timeout);
  // Fails every quorum append whose deadline is <= now: not_enough_replicas if the in-sync
  // set is below min_insync, else timeout (both Outcome::uncertain: the batch is in this
  // log and may still reach the followers). The manager calls it periodically.
  void expire_quorum_waiters(std::chrono::steady_clock::time_point now);

  // Persists `e` (and the entry e -> log end) and leads in it. Refuses e below the current
  // epoch, or equal to it unless this replica leads in it now (a repeat): a replica that
  // led `e` before it was reopened needs a new epoch (led_before_reopen; fenced).
  Result<void> become_leader(LeaderEpoch e);
  // This replica has not acted since it was opened, and it led in `e` before (so `e` is
  // its current epoch): become_leader(e) refuses, and the catalog must raise the epoch.
  bool led_before_reopen(LeaderEpoch e);
  // Persists `e` and follows `leader` in it. Refuses e below the current epoch, or equal to
  // it while leading in it (fenced). Pending quorum appends of an earlier leadership fail
  // with fenced.
  Result<void> become_follower(LeaderEpoch e, NodeId leader);
  // This replica learned that epoch `newer` exists (it was deposed): it stops accepting
  // client appends (fenced) and fails every pending quorum append with fenced, naming both
  // epochs, then persists `newer`. Refuses newer below the current epoch (fenced);
  // newer == current stops a leader of that epoch the same way (nothing to persist) and is
  // a no-op on any other role.
  Result<void> fence(LeaderEpoch newer);
  LeaderEpoch leader_epoch();
  // The leader this replica follows (0 unless a follower).
  NodeId leader();
  // Leads (and is not switching roles): client appends are accepted.
  bool leading();

  // KIP-279: the end of the largest epoch <= e in the history (the start offset of the
  // next higher entry, or durable_end() for the latest). An epoch below every entry
  // answers (e, first entry's start); an empty history (0, durable_end()).
  Result<EpochEnd> end_offset_for(LeaderEpoch e);
  std::vector<EpochEntry> epoch_entries();

  // Whole stored batches from `from` (which must be a batch boundary: invalid_argument
  // otherwise; offset_out_of_range below the log start or beyond the written end) up to
  // about max_bytes (at least one batch if any), up to the written end (synced or not; not
  // the high watermark), within one segment and one epoch. One pread in the common case; no
  // per-record work. CRCs are not checked here (append_replica checks them). The batches
  // are read behind `headroom` bytes of unspecified content that the caller fills in (the
  // fetch answer's header), so the answer goes out without another copy.
  Result<RawChunk> read_raw(Offset from, std::size_t max_bytes, std::size_t headroom = 0);
  // Follower only (else conflict). Checks every batch (check_batch: header + CRC;
  // incarnation -> stale_route; contiguous offsets from expected_base, which must equal
  // the log end -> conflict naming both); `epoch` is the epoch all its batches were
  // written in (RawChunk::last_epoch) and must not be below the epoch of the log's last
  // entry (conflict: truncate first) nor above the current epoch (conflict). A new epoch
  // is recorded in the history (durable) before the data is written. The chunk is written
  // with one pwrite per segment it touches (rolling like appends), fdatasynced, then the
  // durable end advances. Producer state is updated from the headers. Returns when durable.
  // `fetched_in`: the follower epoch the chunk was fetched in; a chunk fetched in another
  // epoch than the current one is refused (conflict): it may come from a deposed leader
  // and land after the new epoch's truncation. The manager always passes it.
  Result<void> append_replica(std::string_view chunk, Offset expected_base, LeaderEpoch epoch,
                              std::optional<LeaderEpoch> fetched_in = std::nullopt);
  // Removes everything at and after `end` (the log then ends at the base of the batch
  // holding `end`), across segments, fsynced; the epoch history drops entries starting at
  // or after the new end; producer state is rebuilt. Refused on a leader (conflict), below
  // the high watermark (conflict naming both), below the log start (offset_out_of_range).
  // An `end` at or beyond the log end changes nothing. `decided_in`: the follower epoch
  // the cut was decided in; refused (conflict) in another epoch, where a late decision
  // could cut records the new leader already counted. The manager always passes it.
  Result<void> truncate_to(Offset end, std::optional<LeaderEpoch> decided_in = std::nullopt);
  // Drops the whole log and continues with an empty one that starts at `start` (a leader's
  // log start above everything this replica holds; docs/replication.md "Below the leader's
  // log start"): every segment, index and the producer snapshot go, producer state and the
  // epoch history's entries are cleared, and the durable end, the high watermark and the
  // log start all become `start` (below the old high watermark too: that is the one
  // exception to truncate_to's rule). Crash-safe through a marker file (log_restart.h):
  // after a crash the log is either the old one or the new empty one. Refused on a leader
  // (conflict), and when the log holds anything at or above `start` (conflict naming
  // both). An empty log that already starts at `start` changes nothing. A failure after
  // the commit point fails the shard (storage_failure); reopening finishes the restart.
  // `decided_in` as for truncate_to.
  Result<void> restart_at(Offset start, std::optional<LeaderEpoch> decided_in = std::nullopt);
  // Calls `cb` once the WRITTEN end (synced or not) exceeds `offset`, or the shard closes
  // (inline, returning 0, if already true). Otherwise returns a handle for
  // cancel_end_notify (same contract as notify_when_beyond / cancel_notify).
  std::uint64_t notify_when_end_beyond(Offset offset, std::function<void()> cb);
  void cancel_end_notify(std::uint64_t handle);

 private:
  std::mutex progress_mu_;
  std::function<std::vector<ReplicaProgress>()> progress_;
  enum class State { open, failed, closing, closed };
  enum class Role { none, leader, follower, fenced };

  struct Pending {
    std::string batch;
    std::uint64_t base;
    std::uint32_t count;
    std::int64_t max_ts;
    AckMode ack;
    AppendCallback cb;  // empty for AckMode::none (already answered)
    std::uint64_t producer_id = 0;
    std::uint64_t producer_seq = 0;
    std::chrono::steady_clock::time_point deadline{};  // quorum appends of replicated shards
  };
  // An ack=quorum append that is durable here, waiting for the high watermark.
  struct QuorumWaiter {
    std::uint64_t end;
    AppendResult result;
    std::chrono::steady_clock::time_point deadline;
    AppendCallback cb;
  };
  // notify_when_beyond / notify_when_end_beyond waiters: by handle (cancel), and by offset
  // (one ordered walk per wake-up, never per record). Guarded by mu_.
  struct Waiter {
    std::uint64_t offset;
    std::function<void()> cb;
  };
  struct WaiterSet {
    std::map<std::uint64_t, Waiter> by_handle;
    std::multimap<std::uint64_t, std::uint64_t> by_offset;
    std::size_t size() const { return by_handle.size(); }
    void add(std::uint64_t handle, std::uint64_t offset, std::function<void()> cb);
    // Moves out the callbacks of waiters with offset < end.
    void take_below(std::uint64_t end, std::vector<std::function<void()>>& out);
    // The callback of `handle` (empty if it is not registered).
    std::function<void()> cancel(std::uint64_t handle);
    void take_all(std::vector<std::function<void()>>& out);  // in registration order
  };
  // A duplicate waiting for its original's callback.
  struct DupWaiter {
    std::uint64_t end;  // original base + count
    AppendResult result;
    AppendCallback cb;
    // Replicated shards: an ack=quorum retry also needs in_sync_count_ >= min_insync_, as
    // its original's quorum waiter does; and every retry gives up at its deadline, as a
    // quorum append does (expire_quorum_waiters), instead of waiting without end.
    bool quorum = false;
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  };
  // Under mu_: a duplicate waiting for `end` may be answered now.
  bool dup_ready(const DupWaiter& d) const {
    return d.end <= acked_end_ && (!d.quorum || in_sync_count_ >= min_insync_);
  }

  Result<void> write_group();  // flusher: writes + syncs flushing_, publishing as it goes
  Result<void> write_run(Segment& seg, std::uint64_t at);
  Result<void> sync_and_publish(Segment& seg);
  Result<void> roll(std::uint64_t new_base);
  // Writer (after a sync): asks the pool for a spare once the active segment is half full,
  // or, if it is a plain (growing) file, once it holds max(segment_bytes / 16, 1 MiB): a
  // busy shard then moves into a preallocated segment early (maybe_roll_early) instead of
  // growing the plain one to its end.
  void maybe_want_spare(const Segment& seg);
  // Writer (after a group's acknowledgements): drops from the page cache what lies more
  // than storage.page_cache_window_bytes behind the synced end, across the active segment
  // and the sealed ones still in the window, in steps of 1/32 of the window
  // (docs/architecture.md "Page-cache window").
  void release_cache();
  // Writer, when the log is cut back or restarted (truncate_to, restart_at) or closed: the
  // sealed segments queued for release_cache are forgotten (their files close), and the
  // active one's drop mark comes back to where its bytes now end. Advice only: forgetting
  // costs at most pages the kernel evicts later.
  void forget_cache_queue();
  // Writer, before a group (all earlier writes synced): rolls a plain active segment into
  // the spare once one is ready. `next_base` is the first offset of the group.
  Result<void> maybe_roll_early(std::uint64_t next_base);
  // Writer (roll): the ready spare's path, handed over; nullopt if none is ready.
  std::optional<std::string> take_spare();
  // close_log: no spare is kept or made from here on.
  void drop_spare();
  std::string spare_path() const { return log_dir() + "/next-segment.tmp"; }
  void fail_all(const Error& e);
  // Deletes the first how_many() segments (called with seg_mu_ held; `why` names the caller
  // in logs), files oldest first, then fsyncs the directory: retention's and trim_before's
  // common deletion. Returns the new log start.
  std::uint64_t drop_front_segments(const std::function<std::size_t()>& how_many, std::string_view why);
  // How many leading segments may go so that the log starts at or below `before`
  // (seg_mu_ held): never the active one, never beyond the producer snapshot or (replicated)
  // the high watermark.
  std::size_t droppable_below(std::uint64_t before);
  void complete_dups(std::uint64_t acked_end);
  void fail_dups(const Error& e, std::uint64_t inflight_begin, std::uint64_t inflight_end);
  void wake_waiters();
  void wake_end_waiters();
  // Replicated: the high watermark becomes min(hwm_target_, durable end) if that is higher.
  void raise_high_watermark();
  void complete_quorum();
  // Takes every quorum and duplicate waiter (mu_ held) for failing outside mu_.
  void take_replica_waiters(std::vector<QuorumWaiter>& q, std::vector<DupWaiter>& d);
  // `appended`: the write is already in the log (a pending quorum append or duplicate):
  // not acknowledged, yet a new leader may keep it, so its outcome is uncertain. Otherwise
  // it was refused before anything was written (definite).
  Error fenced_error(LeaderEpoch deposed, LeaderEpoch newer, bool appended) const;
  Error role_error() const;  // mu_ held: why a client append is refused
  // Becomes the exclusive writer (mu_ held via lk): waits for a flush to drain.
  Result<void> acquire_writer(std::unique_lock<std::mutex>& lk);
  // After a failed group: cuts the active segment back to its published end.
  void cut_unpublished_tail();
  void release_writer();
  Result<void> rebuild_producers(std::uint64_t end);
  // close() without the consumer groups: fails waiters, checkpoints, drops segments.
  void close_log();
  // Recovery point (recovery_point.h, docs/architecture.md "Restart"): the flusher writes one
  // about once a second after a sync (storage.verify_on_start=checkpoint, fsync=always);
  // close_log writes the clean state (write_clean_state: segment synced, active .idx,
  // producer snapshot and recovery point at the log end, directory fsynced).
  void maybe_write_recovery_point();
  bool write_clean_state();
  // Before a cut of the log (truncate_to, restart_at; the caller holds the flusher's token):
  // lowers cut_floor() to `cut_from` (the first offset that may change), removes the
  // recovery point durably, and the next sync writes a new one.
  Result<void> drop_recovery_point(std::uint64_t cut_from);
  // Before a write into a preallocated segment that ends beyond its reservation
  // (Segment::reserved_end; recovery_point.h "Reserved end"): makes a recovery point naming
  // a reservation past `end` durable, so a start after a crash checks only that much of the
  // segment's zeros. A failure removes the point instead (the next start reads it whole).
  Result<void> reserve_through(Segment& seg, std::uint64_t end);
  // Persists (current, entries) and `led` (default: unchanged), then adopts them.
  Result<void> save_history(LeaderEpoch current, std::vector<EpochEntry> entries,
                            std::optional<LeaderEpoch> led = std::nullopt);
  std::string log_dir() const { return dir_ + "/log"; }
  // The open group `name` (validated), opening it from disk first; create = false gives
  // not_found for a group that has no directory.
  Result<std::shared_ptr<ConsumerGroup>> group(const std::string& name, bool create);

  const ShardRef ref_;
  const std::string dir_;
  const Options opts_;
  const std::shared_ptr<FileSystem> fs_;
  PluginHost& host_;
  FlushPool& pool_;

  // --- guarded by mu_ ---
  std::mutex mu_;
  std::condition_variable drained_cv_;
  State state_ = State::open;
  std::string failure_;
  std::uint64_t next_offset_;
  std::int64_t last_leader_stamp_ = 0;  // the last leader time stamped (docs/architecture.md "Leader time")
  bool scheduled_ = false;  // queued on the pool or being flushed
  std::vector<Pending> queue_;
  WaiterSet waiters_;      // notify_when_beyond (high watermark)
  WaiterSet end_waiters_;  // notify_when_end_beyond (durable end)
  Role role_;
  bool switching_ = false;  // become_leader is persisting a new epoch: appends wait outside
  LeaderEpoch epoch_;      // == history_.current() once persisted (fence: raised first)
  LeaderEpoch led_epoch_;  // the last epoch this replica led in
  NodeId leader_;
  std::size_t in_sync_count_ = 1;
  std::uint32_t min_insync_;
  std::chrono::milliseconds quorum_timeout_{30000};
  std::deque<QuorumWaiter> quorum_waiters_;  // ascending end
  ProducerTable producers_;
  std::uint64_t acked_end_;  // every append below has had its callback (or was none)
  std::vector<DupWaiter> dup_waiters_;

  // --- flusher only ---
  std::vector<Pending> flushing_;
  std::vector<struct iovec> iov_;
  ProducerTable written_producers_;  // state as of the end of what has been written

  // --- guarded by seg_mu_ ---
  std::mutex seg_mu_;
  std::vector<std::shared_ptr<Segment>> segments_;  // oldest first; back() is active
  // Writer: segments sealed by rolls, oldest first, until release_cache has dropped all of
  // their pages, and the sum of their sizes. Weak: one that retention deletes closes then,
  // not at this shard's next sync (a quiet shard may have none for days).
  struct CacheSealed {
    std::weak_ptr<Segment> seg;
    std::uint64_t bytes;  // its write_pos when sealed
  };
  std::deque<CacheSealed> cache_sealed_;
  std::uint64_t cache_sealed_bytes_ = 0;
  RetentionPolicy retention_;

  // --- consumer groups (groups_mu_; each group has its own mutex for its work) ---
  std::mutex groups_mu_;
  bool groups_closed_ = false;
  std::atomic<bool> groups_closing_{false};  // set first by close(), without groups_mu_
  std::map<std::string, std::shared_ptr<ConsumerGroup>> groups_;
  std::unique_ptr<GroupOps> group_ops_;  // replicated shards only
  // With group_ops_: serializes the call, applies the committed ops it has not applied
  // yet, runs `call`, and marks the log applied if the call succeeded (group_ops.h).
  template <typename T>
  Result<T> with_group_ops(const std::function<Result<T>()>& call);

  GroupClock group_clock_;
  GroupStepHook group_step_hook_;
  VerifyLater verify_later_;

  const bool replicated_;
  std::atomic<bool> copy_lost_;
  std::mutex repl_mu_;   // role changes, append_replica, truncate_to, restart_at; history writes
  std::mutex epoch_mu_;  // history_ (readers copy under it; written under repl_mu_ too)
  EpochHistory history_;

  std::atomic<std::uint64_t> hwm_;
  std::atomic<std::uint64_t> durable_end_;
  // End of written data (synced or not; published under seg_mu_ after each pwritev of a
  // replicated log, with the segment's written_size). == durable_end_ on a follower.
  std::atomic<std::uint64_t> written_end_;
  // The high watermark the replication manager computed from its followers; the log caps
  // it at the durable end, now and after each later sync (set_high_watermark_target).
  std::uint64_t hwm_target_ = 0;  // mu_
  std::atomic<std::uint64_t> snapshot_end_;  // retention keeps every segment at/after it
  std::atomic<std::uint64_t> appended_records_{0};
  std::atomic<std::uint64_t> syncs_{0};
  std::chrono::steady_clock::time_point rp_written_{};  // flusher: when the last point was written
  std::uint64_t rp_end_ = ~0ull;                         // flusher: its next_offset
  std::atomic<bool> closed_clean_{false};
  std::atomic<bool> discard_on_close_{false};
  std::atomic<std::uint64_t> cut_floor_{~0ull};  // cut_floor()
  void lower_cut_floor(std::uint64_t offset);
  // The spare segment: none -> preparing (queued on the pool, or being written) -> ready
  // (synced, waiting for a roll) -> none (taken). failed: the last attempt failed; the next
  // roll resets it, so a failing disk is retried once per segment, not once per sync.
  enum class Spare { none, preparing, ready, failed };
  std::mutex spare_mu_;
  Spare spare_ = Spare::none;  // spare_mu_
  bool spare_closed_ = false;  // spare_mu_
  double spare_rate_ = 0;      // spare_mu_: bytes/s the spare is written at (0: unpaced)
  std::atomic<bool> spare_abort_{false};  // set with spare_closed_: the writer stops early
  std::atomic<bool> spare_is_ready_{false};  // spare_ == ready (one load per group)
  std::mutex deferred_mu_;
  DirSyncList deferred_dirs_;                 // deferred_mu_
  std::string deferred_mark_;                 // deferred_mu_
  std::atomic<bool> dirs_pending_{false};     // deferred_dirs_ is not empty
};

}  // namespace sluice::fs_storage
