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
// AckMode::quorum is treated like leader here (replication is not this component's job).
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "file_system.h"
#include "options.h"
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
  void notify_when_beyond(Offset offset, std::function<void()> cb) override;
  ShardStats stats() override;

  // Flusher thread only (FlushPool).
  void flush();
  // Drains pending appends, then closes. Idempotent. Not from a callback.
  void close();
  // Deletes whole sealed segments, oldest first, per the retention policy. Any thread.
  void apply_retention(std::int64_t now_ms);
  void set_retention(RetentionPolicy r);
  const std::string& directory() const { return dir_; }

 private:
  enum class State { open, failed, closing, closed };

  struct Pending {
    std::string batch;
    std::uint64_t base;
    std::uint32_t count;
    std::int64_t max_ts;
    AckMode ack;
    AppendCallback cb;  // empty for AckMode::none (already answered)
  };

  Result<void> write_group();  // flusher: writes + syncs flushing_, publishing as it goes
  Result<void> write_run(Segment& seg, std::uint64_t at);
  Result<void> sync_and_publish(Segment& seg);
  Result<void> roll(std::uint64_t new_base);
  void fail_all(const Error& e);
  void wake_waiters();
  std::string log_dir() const { return dir_ + "/log"; }

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
  std::vector<std::pair<std::uint64_t, std::function<void()>>> waiters_;

  // --- flusher only ---
  std::vector<Pending> flushing_;
  std::vector<struct iovec> iov_;

  // --- guarded by seg_mu_ ---
  std::mutex seg_mu_;
  std::vector<std::shared_ptr<Segment>> segments_;  // oldest first; back() is active
  RetentionPolicy retention_;

  std::atomic<std::uint64_t> hwm_;
  std::atomic<std::uint64_t> appended_records_{0};
  std::atomic<std::uint64_t> syncs_{0};
};

}  // namespace sluice::fs_storage
