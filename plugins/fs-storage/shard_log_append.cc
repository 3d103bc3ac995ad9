// The append path of a shard's log: checks, producer sequences, leader time, offsets,
// and the hand-off to a flusher (or, for append_may_block, the caller's own flush).
#include "shard_log.h"

#include <algorithm>
#include <chrono>

#include "flush_pool.h"
#include "sluice/record_batch.h"

namespace sluice::fs_storage {

namespace {
// Records published with timestamp -1 ask for the leader's clock (docs/architecture.md
// "Leader time"): the cache data plane computes a key's expiry from it. The leader stamps
// them here, once, before the batch is stored and replicated; followers keep its bytes.
// Only a batch whose first record asks is walked (an O(1) test of that record, not of the
// header's copy, for every other batch). Called under the shard's mutex with a clock that
// never goes back within the shard, so stamps only go up with offsets.
constexpr std::int64_t kStampAtLeader = -1;
bool asks_leader_time(const std::string& batch, const BatchHeader& h) {
  return h.record_count > 0 &&
         static_cast<std::int64_t>(wire::get_u64(batch.data() + kBatchHeaderSize + 12)) == kStampAtLeader;
}
void stamp_leader_time(std::string& batch, BatchHeader& h, std::int64_t now) {
  char* p = batch.data() + kBatchHeaderSize;
  std::int64_t first = 0, max = 0;
  for (std::uint32_t i = 0; i < h.record_count; ++i) {
    const std::uint32_t klen = wire::get_u32(p);
    std::int64_t ts = static_cast<std::int64_t>(wire::get_u64(p + 12));
    if (ts == kStampAtLeader) {
      ts = now;
      wire::put_u64(p + 12, static_cast<std::uint64_t>(ts));
    }
    if (i == 0) first = ts;
    max = i == 0 ? ts : std::max(max, ts);
    p += kRecordHeaderSize + (klen == kNoKey ? 0 : klen) + wire::get_u32(p + 4) + wire::get_u32(p + 8);
  }
  h.first_timestamp_ms = first;
  h.max_timestamp_ms = max;
  wire::put_u64(batch.data() + 32, static_cast<std::uint64_t>(first));
  wire::put_u64(batch.data() + 40, static_cast<std::uint64_t>(max));
  // restamp_batch (append_to) recomputes the CRC over the whole batch.
}
}  // namespace

void ShardLogImpl::append(std::string batch, AckMode ack, AppendCallback cb) {
  append_to(std::move(batch), ack, std::move(cb), false);
}

// docs/architecture.md "Inline appends": the caller's thread writes and syncs the group
// itself when nothing is queued or being flushed on this shard, which saves the two thread
// hand-offs (to a flusher and back) that a lone append otherwise costs. Only an unreplicated
// shard: a leader's flush also serves its followers' fetches and quorum waiters, whose
// notifications assume a flusher thread (t_notifier_holds_no_manager_lock).
void ShardLogImpl::append_may_block(std::string batch, AckMode ack, AppendCallback cb) {
  append_to(std::move(batch), ack, std::move(cb), !replicated_);
}

void ShardLogImpl::append_to(std::string batch, AckMode ack, AppendCallback cb, bool may_flush_here) {
  BatchHeader h;
  const BatchCheck check = check_batch(batch.data(), batch.size(), &h);
  if (check != BatchCheck::ok) {
    cb(Error(Errc::malformed_body, "invalid record batch: " + std::string(to_string(check))));
    return;
  }
  if (h.length != batch.size()) {
    cb(Error(Errc::invalid_argument, "record batch has " + std::to_string(batch.size() - h.length) +
                                         " trailing bytes"));
    return;
  }
  const bool stamp = asks_leader_time(batch, h);
  std::uint64_t base;
  bool schedule = false;
  {
    std::unique_lock lk(mu_);
    if (!failure_.empty()) {
      std::string why = failure_;
      lk.unlock();
      cb(Error(Errc::storage_failure, "shard " + ref_.to_string() + " failed: " + why));
      return;
    }
    if (state_ != State::open) {
      lk.unlock();
      cb(Error(Errc::unavailable, "shard " + ref_.to_string() + " is closed"));
      return;
    }
    if (role_ != Role::leader || switching_) {
      Error e = role_error();
      lk.unlock();
      cb(std::move(e));
      return;
    }
    if (h.producer_id != 0) {
      const auto c = producers_.check(h.producer_id, h.producer_seq);
      if (c.verdict == ProducerTable::Verdict::gap) {
        lk.unlock();
        cb(Error(Errc::sequence_gap,
                 "producer " + std::to_string(h.producer_id) + " sent sequence " +
                     std::to_string(h.producer_seq) + " to shard " + ref_.to_string() +
                     "; expected sequence " + std::to_string(c.expected) +
                     " (or a retry of one of the last " + std::to_string(kRecentBatches) + ")"));
        return;
      }
      if (c.verdict == ProducerTable::Verdict::duplicate) {
        const AppendResult orig{Offset(c.original.base), c.original.count, true};
        const std::uint64_t end = c.original.base + c.original.count;
        DupWaiter d{end, orig, std::move(cb)};
        if (replicated_) {
          d.quorum = ack == AckMode::quorum;
          d.deadline = std::chrono::steady_clock::now() + quorum_timeout_;
        }
        if (!dup_ready(d)) {  // original still in flight (or no quorum yet): answer right after it
          dup_waiters_.push_back(std::move(d));
          return;
        }
        cb = std::move(d.cb);
        lk.unlock();
        cb(orig);
        return;
      }
      producers_.record(h.producer_id, h.producer_seq, next_offset_, h.record_count);
    }
    if (stamp) {
      last_leader_stamp_ = std::max(last_leader_stamp_, std::chrono::duration_cast<std::chrono::milliseconds>(
                                                            std::chrono::system_clock::now().time_since_epoch())
                                                            .count());
      stamp_leader_time(batch, h, last_leader_stamp_);
    }
    base = next_offset_;
    next_offset_ += h.record_count;
    // Under the lock, so not a pass over the batch: check_batch above found its CRC valid,
    // and only a leader-time stamp changes more than the 16 bytes restamped here.
    if (stamp) restamp_batch(batch.data(), base, ref_.incarnation.value());
    else restamp_checked_batch(batch.data(), base, ref_.incarnation.value());
    queue_.push_back(Pending{std::move(batch), base, h.record_count, h.max_timestamp_ms, ack,
                             ack == AckMode::none ? AppendCallback() : std::move(cb),
                             h.producer_id, h.producer_seq});
    if (replicated_ && ack == AckMode::quorum)
      queue_.back().deadline = std::chrono::steady_clock::now() + quorum_timeout_;
    if (!scheduled_) scheduled_ = schedule = true;
    // Here only if this append alone makes up the group: one waiting behind others joins
    // theirs, and a caller never writes someone else's batches.
    // And never for ack=none, whose caller has its answer already.
    may_flush_here = may_flush_here && schedule && queue_.size() == 1 && ack != AckMode::none;
  }
  appended_records_.fetch_add(h.record_count, std::memory_order_relaxed);
  if (ack == AckMode::none) cb(AppendResult{Offset(base), h.record_count});
  if (!schedule) return;
  if (may_flush_here) {
    flush();  // as a flusher would: scheduled_ is ours until it clears it
  } else {
    pool_.schedule(shared_from_this());
  }
}

}  // namespace sluice::fs_storage
