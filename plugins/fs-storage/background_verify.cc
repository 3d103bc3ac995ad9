#include "background_verify.h"

#include <pthread.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "recovery.h"
#include "sluice/record_batch.h"

namespace sluice::fs_storage {

namespace {
constexpr std::string_view kComponent = "fs-storage";
constexpr std::uint64_t kChunk = 1 << 20;  // one pread; a larger batch is read whole
constexpr auto kProgressEvery = std::chrono::seconds(30);

std::string mib(std::uint64_t bytes) {
  char b[32];
  if (bytes < (1 << 20))
    std::snprintf(b, sizeof b, "%.1f KiB", static_cast<double>(bytes) / 1024);
  else
    std::snprintf(b, sizeof b, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return b;
}
}  // namespace

BackgroundVerifier::BackgroundVerifier(PluginHost& host, std::uint64_t bytes_per_sec,
                                       OnCorrupt on_corrupt)
    : host_(host), rate_(bytes_per_sec), on_corrupt_(std::move(on_corrupt)) {}

BackgroundVerifier::~BackgroundVerifier() { stop(); }

void BackgroundVerifier::add(VerifyJob job) {
  std::uint64_t bytes = 0;
  for (const auto& r : job.ranges) bytes += r.end;
  if (bytes == 0) return;
  std::lock_guard lk(mu_);
  if (stopping_ || found_) return;
  queued_bytes_ += bytes;
  queue_.push_back(std::move(job));
  if (!worker_.joinable())
    worker_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "verify");
      run();
    });
  cv_.notify_all();
}

void BackgroundVerifier::stop() {
  std::deque<VerifyJob> dropped;  // their segments' files close here, not at destruction
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
    dropped.swap(queue_);
    queued_bytes_ = 0;
    cv_.notify_all();
  }
  if (worker_.joinable()) worker_.join();
}

std::uint64_t BackgroundVerifier::bytes_checked() const {
  std::lock_guard lk(mu_);
  return checked_bytes_;
}

std::uint64_t BackgroundVerifier::bytes_queued() const {
  std::lock_guard lk(mu_);
  return queued_bytes_;
}

bool BackgroundVerifier::wait_idle(std::chrono::milliseconds timeout) {
  std::unique_lock lk(mu_);
  return cv_.wait_for(lk, timeout, [&] { return (queue_.empty() && !busy_) || stopping_; });
}

bool BackgroundVerifier::pace(std::uint64_t read, std::uint64_t fresh) {
  paced_bytes_ += read;
  std::unique_lock lk(mu_);
  checked_bytes_ += fresh;
  queued_bytes_ -= std::min(queued_bytes_, fresh);
  if (rate_ == 0) return !stopping_;
  const auto due = paced_from_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                     std::chrono::duration<double>(double(paced_bytes_) / double(rate_)));
  cv_.wait_until(lk, due, [&] { return stopping_; });
  return !stopping_;
}

void BackgroundVerifier::run() {
  const auto started = std::chrono::steady_clock::now();
  auto last_progress = started;
  auto wave_started = started;  // the first job after an idle spell
  paced_from_ = started;
  std::size_t jobs = 0;
  for (;;) {
    VerifyJob job;
    {
      std::unique_lock lk(mu_);
      if (queue_.empty()) {
        cv_.wait(lk, [&] { return stopping_ || !queue_.empty(); });
        // A later batch of work (a shard opened after the first ones) is paced afresh.
        paced_from_ = std::chrono::steady_clock::now();
        paced_bytes_ = 0;
      }
      if (stopping_) break;
      if (jobs == 0) wave_started = std::chrono::steady_clock::now();
      if (jobs == 0)
        host_.log(LogLevel::info, kComponent,
                  "background verification: CRC-checking what the start did not read (" +
                      mib(queued_bytes_) + " queued so far, more as shards open" +
                      (rate_ ? "; at most " + mib(rate_) + "/s)" : std::string(")")));
      job = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    ++jobs;
    std::optional<std::string> bad;
    for (const auto& r : job.ranges) {
      const std::shared_ptr<Segment> seg = r.segment.lock();  // held while it is read, no longer
      if (!seg || !job.stands(seg->base())) {  // closed, cut below it, or deleted: nothing to check
        std::lock_guard lk(mu_);
        queued_bytes_ -= std::min(queued_bytes_, r.end);
        continue;
      }
      bad = check_range(job, *seg, r);
      if (bad) break;
      if (std::chrono::steady_clock::now() - last_progress >= kProgressEvery) {
        last_progress = std::chrono::steady_clock::now();
        std::lock_guard lk(mu_);
        host_.log(LogLevel::info, kComponent,
                  "background verification: " + mib(checked_bytes_) + " checked, " +
                      mib(queued_bytes_) + " to go");
      }
    }
    if (bad) {
      {
        std::lock_guard lk(mu_);
        found_ = true;  // add() takes no more work
        queue_.clear();
        queued_bytes_ = 0;
      }
      on_corrupt_(job.log_dir, *bad);  // before busy_ falls: wait_idle() returns after the report
    }
    std::unique_lock lk(mu_);
    if (!bad && queue_.empty()) {  // logged before wait_idle() can return
      const auto secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - wave_started).count();
      char t[32];
      std::snprintf(t, sizeof t, "%.1f s", secs);
      host_.log(LogLevel::info, kComponent,
                "background verification done: " + mib(checked_bytes_) + " of " +
                    std::to_string(jobs) + " log(s) checked in " + t + ", no corrupt batch");
      jobs = 0;
    }
    busy_ = false;
    cv_.notify_all();
    if (bad) {
      cv_.wait(lk, [&] { return stopping_; });
      break;
    }
  }
}

std::optional<std::string> BackgroundVerifier::check_range(const VerifyJob& job, Segment& seg,
                                                           const UnverifiedRange& r) {
  std::uint64_t wstart = 0, wlen = 0;  // buf_ holds file bytes [wstart, wstart + wlen)
  std::uint64_t counted = 0;           // bytes [0, counted) were counted as checked
  // What is left unread when this returns (given up: the log closed, was cut or trimmed,
  // or the verifier stops) is no longer "to go" in the progress lines.
  struct Uncount {
    BackgroundVerifier* v;
    const std::uint64_t& counted;
    std::uint64_t end;
    ~Uncount() {
      if (counted >= end) return;
      std::lock_guard lk(v->mu_);
      v->queued_bytes_ -= std::min(v->queued_bytes_, end - counted);
    }
  } uncount{this, counted, r.end};
  std::uint64_t expected = seg.base();  // the offset the batch at `pos` must start at
  // Reads [from, from + want) (capped at r.end) into the window; false on a read error or a
  // short read, with `why` set, or when the range no longer needs checking (`why` empty).
  std::string why;
  auto refill = [&](std::uint64_t from, std::uint64_t want) {
    if (!job.stands(expected)) return false;  // closed, cut or deleted meanwhile
    const std::uint64_t n = std::min(want, r.end - from);
    if (buf_.size() < n) buf_.resize(n);
    auto got = seg.file().pread_once(buf_.data(), n, from);  // leaves the page cache as it was
    if (!got) {
      why = "read error: " + got.error().message;
      return false;
    }
    wstart = from;
    wlen = *got;
    const std::uint64_t fresh = from + wlen > counted ? from + wlen - std::max(from, counted) : 0;
    counted = std::max(counted, from + wlen);
    if (!pace(wlen, fresh)) return false;
    if (*got < n) {
      why = "the file ends at byte " + std::to_string(from + *got) + ", before byte " +
            std::to_string(r.end) + " that recovery found";
      return false;
    }
    return true;
  };
  // A finding counts only if the bytes read are still the log's (asked after the read).
  auto finding = [&](std::uint64_t pos, const std::string& reason) -> std::optional<std::string> {
    if (!job.stands(expected)) {
      host_.log(LogLevel::debug, kComponent,
                "background verification: " + job.what + " was cut, closed or trimmed at or below offset " +
                    std::to_string(expected) + " while it was read; skipped");
      return std::nullopt;
    }
    return corrupt_batch_message(seg.log_path(), pos, reason);
  };

  std::uint64_t pos = 0;
  while (pos < r.end) {
    {
      std::lock_guard lk(mu_);
      if (stopping_) return std::nullopt;
    }
    const auto in_window = [&](std::uint64_t n) { return pos >= wstart && pos + n <= wstart + wlen; };
    const std::uint64_t header = std::min<std::uint64_t>(kBatchHeaderSize, r.end - pos);
    if (!in_window(header) && !refill(pos, kChunk)) {
      if (!why.empty()) return finding(pos, why);
      return std::nullopt;  // stopped
    }
    std::uint64_t need = header;
    if (header == kBatchHeaderSize) {
      const BatchHeader h = BatchHeader::decode(buf_.data() + (pos - wstart));
      if (h.magic == kBatchMagic && h.length >= kBatchHeaderSize && h.length <= r.end - pos)
        need = h.length;
    }
    if (!in_window(need) && !refill(pos, std::max<std::uint64_t>(need, kChunk))) {
      if (!why.empty()) return finding(pos, why);
      return std::nullopt;
    }
    const std::size_t avail = static_cast<std::size_t>(std::min(wstart + wlen, r.end) - pos);
    BatchHeader h;
    const BatchCheck c = check_batch(buf_.data() + (pos - wstart), avail, &h);
    if (c != BatchCheck::ok) return finding(pos, std::string(to_string(c)));
    if (h.base_offset != expected)
      return finding(pos, "offset discontinuity: expected base offset " + std::to_string(expected) +
                              ", found " + std::to_string(h.base_offset));
    if (h.incarnation != job.incarnation.value())
      return finding(pos, "batch incarnation " + std::to_string(h.incarnation) +
                              " != shard incarnation " + std::to_string(job.incarnation.value()));
    expected = h.next_offset();
    pos += h.length;
  }
  return std::nullopt;
}

}  // namespace sluice::fs_storage
