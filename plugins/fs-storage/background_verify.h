// Background verification: the CRC checks a fast start skipped (docs/architecture.md
// "Restart: background verification").
//
// A start with storage.verify_on_start = checkpoint (the broker's default) or tail trusts
// sealed segments through their .idx and reads at most the active segment's tail, so bit rot
// in synced data would otherwise be found only when a reader reaches it. Recovery reports
// what it did not CRC-check (RecoveredLog::unverified); the engine hands each log's ranges
// here, and one thread reads them at a bounded rate with the same checks as a full start
// (check_batch: magic, length, CRC, records; contiguous offsets; the shard's incarnation).
//
// A finding counts only if the bytes read are still the log's: `stands(offset)` is asked
// after the bad batch was read, with the offset the batch at that position must start at.
// It is false once the log was cut at or below that offset (ShardLogImpl::cut_floor, lowered
// before every cut and to 0 at close) or retention dropped its segment, so bytes a
// follower's truncation or a restart rewrote are never reported, while a cut above the
// batch does not hide it. The same question before each range and each 1 MiB read skips
// what was closed or deleted meanwhile (and lets its files go). A confirmed corrupt batch
// calls `on_corrupt` once with the log directory and the message a full start would have
// printed ("corrupt batch in <file> at byte <pos>: <reason>"); the engine records it
// durably and asks the host to stop the node. The verifier then stops checking.
//
// Threads: add() from any thread; one worker thread, started by the first add() that
// brings work, joined by stop() (and the destructor). on_corrupt runs on the worker.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "segment.h"
#include "sluice/host.h"
#include "sluice/types.h"

namespace sluice::fs_storage {

// Bytes [0, end) of `segment` were not CRC-checked when the log was recovered. Weak: a
// segment that retention deletes while its range waits (hours, on a large broker at the
// verifier's rate) must not stay open, its disk space held, until the verifier gets to it;
// the verifier holds it only while it reads it.
struct UnverifiedRange {
  std::weak_ptr<Segment> segment;
  std::uint64_t end = 0;
};

struct VerifyJob {
  std::string what;     // "shard t/n/s/0#3", for log lines
  std::string log_dir;  // the log's directory (the .corrupt marker names it)
  Incarnation incarnation{0};
  std::vector<UnverifiedRange> ranges;
  // Whether the batch that must start at `offset` is still the one recovery found: false
  // once the log closed, was cut at or below it, or no longer holds it (retention).
  std::function<bool(std::uint64_t offset)> stands;
};

class BackgroundVerifier {
 public:
  using OnCorrupt = std::function<void(const std::string& log_dir, const std::string& message)>;
  // bytes_per_sec: the read rate (0: unlimited).
  BackgroundVerifier(PluginHost& host, std::uint64_t bytes_per_sec, OnCorrupt on_corrupt);
  ~BackgroundVerifier();
  BackgroundVerifier(const BackgroundVerifier&) = delete;
  BackgroundVerifier& operator=(const BackgroundVerifier&) = delete;

  void add(VerifyJob job);  // no-op once stopped or when the job has no bytes
  void stop();

  std::uint64_t bytes_checked() const;
  std::uint64_t bytes_queued() const;  // added but not yet checked
  // Blocks until the queue is empty and no job is in progress, or `timeout` (tests).
  bool wait_idle(std::chrono::milliseconds timeout);

 private:
  void run();
  // The first confirmed corruption of one range, if any; nullopt when clean, moot, or stopped.
  std::optional<std::string> check_range(const VerifyJob& job, Segment& seg, const UnverifiedRange& r);
  // Accounts `read` bytes just read (`fresh` of them not counted before) and waits so that
  // the reads since the wave started keep to the rate; false if stopped.
  bool pace(std::uint64_t read, std::uint64_t fresh);

  PluginHost& host_;
  const std::uint64_t rate_;
  OnCorrupt on_corrupt_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<VerifyJob> queue_;
  bool busy_ = false;
  bool stopping_ = false;
  bool found_ = false;
  std::uint64_t queued_bytes_ = 0;
  std::uint64_t checked_bytes_ = 0;
  std::thread worker_;
  std::string buf_;  // worker only: the read window
  std::chrono::steady_clock::time_point paced_from_{};
  std::uint64_t paced_bytes_ = 0;  // worker only: bytes read since paced_from_
};

}  // namespace sluice::fs_storage
