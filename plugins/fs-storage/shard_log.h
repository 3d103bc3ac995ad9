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
// AckMode::quorum is treated like leader here (replication is not this component's job).
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "file_system.h"
#include "group.h"
#include "options.h"
#include "producers.h"
#include "recovery.h"
#include "segment.h"
#include "sluice/host.h"
#include "sluice/storage.h"

namespace sluice::fs_storage {

class FlushPool;

class ShardLogImpl final : public ShardLog, public std::enable_shared_from_this<ShardLogImpl> {
 public:
  // Takes ownership of the recovered segments. `pool` must outlive every append that is
  // accepted (the engine closes shards before stopping the pool).
  ShardLogImpl(ShardRef ref, RetentionPolicy retention, std::string dir, const Options& opts,
               std::shared_ptr<FileSystem> fs, PluginHost& host, FlushPool& pool,
               RecoveredLog recovered);
  ~ShardLogImpl() override;

  const ShardRef& ref() const override { return ref_; }
  void append(std::string batch, AckMode ack, AppendCallback cb) override;
  Result<FetchResult> read(Offset from, std::uint32_t max_records, std::size_t max_bytes) override;
  std::uint64_t notify_when_beyond(Offset offset, std::function<void()> cb) override;
  void cancel_notify(std::uint64_t handle) override;
  ShardStats stats() override;

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

  // Flusher thread only (FlushPool).
  void flush();
  // Drains pending appends, then closes. Idempotent. Not from a callback.
  void close();
  // Deletes whole sealed segments, oldest first, per the retention policy. Any thread.
  void apply_retention(std::int64_t now_ms);
  void set_retention(RetentionPolicy r);
  const std::string& directory() const { return dir_; }
  // Clock of group deadlines (tests inject one); set before any group call.
  void set_group_clock(GroupClock c) { group_clock_ = std::move(c); }
  // Test seam of consumer-group crash points (group.h); set before any group call.
  void set_group_step_hook(GroupStepHook h) { group_step_hook_ = std::move(h); }
  // notify_when_beyond waiters registered and neither fired nor cancelled (tests).
  std::size_t waiter_count() {
    std::lock_guard lk(mu_);
    return waiters_.size();
  }
 private:
  enum class State { open, failed, closing, closed };

  struct Pending {
    std::string batch;
    std::uint64_t base;
    std::uint32_t count;
    std::int64_t max_ts;
    AckMode ack;
    AppendCallback cb;  // empty for AckMode::none (already answered)
    std::uint64_t producer_id = 0;
    std::uint64_t producer_seq = 0;
  };
  // A duplicate waiting for its original's callback.
  struct DupWaiter {
    std::uint64_t end;  // original base + count
    AppendResult result;
    AppendCallback cb;
  };

  Result<void> write_group();  // flusher: writes + syncs flushing_, publishing as it goes
  Result<void> write_run(Segment& seg, std::uint64_t at);
  Result<void> sync_and_publish(Segment& seg);
  Result<void> roll(std::uint64_t new_base);
  void fail_all(const Error& e);
  void complete_dups(std::uint64_t acked_end);
  void fail_dups(const Error& e, std::uint64_t inflight_begin, std::uint64_t inflight_end);
  void wake_waiters();
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
  bool scheduled_ = false;  // queued on the pool or being flushed
  std::vector<Pending> queue_;
  // notify_when_beyond waiters by handle (cancel_notify), and by offset for the flusher's
  // wake-up (one ordered walk per flushed group, never per record).
  struct Waiter {
    std::uint64_t offset;
    std::function<void()> cb;
  };
  std::map<std::uint64_t, Waiter> waiters_;                    // handle -> waiter
  std::multimap<std::uint64_t, std::uint64_t> waiters_by_offset_;  // offset -> handle
  std::uint64_t last_waiter_handle_ = 0;
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
  RetentionPolicy retention_;

  // --- consumer groups (groups_mu_; each group has its own mutex for its work) ---
  std::mutex groups_mu_;
  bool groups_closed_ = false;
  std::map<std::string, std::shared_ptr<ConsumerGroup>> groups_;
  GroupClock group_clock_;
  GroupStepHook group_step_hook_;

  std::atomic<std::uint64_t> hwm_;
  std::atomic<std::uint64_t> snapshot_end_;  // retention keeps every segment at/after it
  std::atomic<std::uint64_t> appended_records_{0};
  std::atomic<std::uint64_t> syncs_{0};
};

}  // namespace sluice::fs_storage
