// The flusher threads of one engine: a fixed pool (storage.flush_threads, default 2) that
// serves every shard. A shard with queued appends is scheduled once; a flusher takes the
// whole queue (one group), writes it with one pwritev, fdatasyncs once, publishes the high
// watermark and completes the callbacks; the shard re-schedules itself if more arrived.
//
// Why a shared pool and not a thread per shard: the machine has 2 cores, and the cost of an
// fdatasync is device time, not CPU. A few threads serving all shards turn "many shards
// appending" into back-to-back group commits without a thread per shard. A shard is never
// flushed by two threads at once (ShardLogImpl::scheduled_), so its writes stay ordered;
// more threads let several shards' fdatasyncs overlap. That pays even on one virtual disk:
// an fdatasync of a growing file is several serial device round trips (data, allocation,
// inode, cache flush), so one thread leaves the device idle between them (docs/benchmarks.md
// "Two flushers": +25-45% at 8 connections over one thread).
//
// The pool also runs the engine's one spare-segment thread (started on first use): it
// zero-fills the next segment of a shard whose active segment is half full
// (ShardLogImpl::prepare_spare; docs/architecture.md "Preallocated segments"). One thread,
// so the zero-fill takes at most one stream of the disk's writes away from the flushers.
//
// Thread-safety: schedule() and prepare_spare() from any thread. stop() once, from the
// engine; flushers finish the shards already queued before they exit, the spare thread
// gives up the spare it is writing and drops the rest. A schedule() after stop() flushes
// inline; a prepare_spare() after stop() is dropped.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace sluice::fs_storage {

class ShardLogImpl;

class FlushPool {
 public:
  explicit FlushPool(unsigned threads);
  ~FlushPool();
  FlushPool(const FlushPool&) = delete;
  FlushPool& operator=(const FlushPool&) = delete;

  void schedule(std::shared_ptr<ShardLogImpl> shard);
  // Queues `shard` for a spare segment (ShardLogImpl::prepare_spare); a shard that is gone
  // by its turn is skipped.
  void prepare_spare(std::weak_ptr<ShardLogImpl> shard);
  void stop();

 private:
  void run();
  void run_spares();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<ShardLogImpl>> ready_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
  std::condition_variable spare_cv_;
  std::deque<std::weak_ptr<ShardLogImpl>> spares_;
  std::atomic<bool> spare_stop_{false};  // the spare being written is abandoned
  std::thread spare_thread_;
};

}  // namespace sluice::fs_storage
