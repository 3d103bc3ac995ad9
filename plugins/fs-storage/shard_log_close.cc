// ShardLogImpl: close, and the recovery point written while open and at close
// (recovery_point.h; docs/architecture.md "Restart").
#include <chrono>

#include "recovery_point.h"
#include "shard_log.h"

namespace sluice::fs_storage {

namespace {
constexpr std::string_view kComponent = "fs-storage";
constexpr auto kRecoveryPointPeriod = std::chrono::seconds(1);
}  // namespace

// Flusher thread, after a successful group: the published fields are what was synced.
void ShardLogImpl::maybe_write_recovery_point() {
  if (opts_.verify_on_start != VerifyOnStart::checkpoint || opts_.fsync != FsyncPolicy::always) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - rp_written_ < kRecoveryPointPeriod) return;
  RecoveryPoint rp;
  {
    std::lock_guard lk(seg_mu_);
    if (segments_.empty()) return;
    const auto& seg = *segments_.back();
    rp = RecoveryPoint{seg.base(), seg.readable_size, seg.next_offset, seg.max_ts,
                       seg.reserved_end == Segment::kUnreserved ? 0 : seg.reserved_end};
  }
  if (rp.next_offset == rp_end_) return;
  rp_written_ = now;
  if (auto r = write_recovery_point(*fs_, log_dir(), rp); !r) {
    host_.log(LogLevel::warn, kComponent,
              "shard " + ref_.to_string() + ": no recovery point: " + r.error().message);
    return;
  }
  rp_end_ = rp.next_offset;
}

void ShardLogImpl::lower_cut_floor(std::uint64_t offset) {
  std::uint64_t cur = cut_floor_.load();
  while (offset < cur && !cut_floor_.compare_exchange_weak(cur, offset)) {
  }
}

Result<void> ShardLogImpl::drop_recovery_point(std::uint64_t cut_from) {
  lower_cut_floor(cut_from);  // before the cut it announces (background_verify.h)
  if (auto r = remove_recovery_point(*fs_, log_dir()); !r) return r;
  rp_end_ = ~0ull;
  {
    std::lock_guard lk(seg_mu_);
    for (auto& seg : segments_) seg->reserved_end = 0;  // went with the point
  }
  return {};
}

// Why: after a crash, recovery must check that a preallocated segment holds only zeros from
// its last batch on, or a zeroed run inside acknowledged data could hide the batches after
// it; without a bound that is the whole spare, up to storage.segment_bytes per quiet shard
// (docs/benchmarks.md "What a spare costs a restart after a crash"). The point is made
// durable, directory included, before any byte lands beyond it, and it moves ahead in
// steps of segment_bytes / 16 (4 MiB by default): one small write and two syncs per step.
Result<void> ShardLogImpl::reserve_through(Segment& seg, std::uint64_t end) {
  if (!seg.preallocated || end <= seg.reserved_end) return {};
  if (opts_.verify_on_start != VerifyOnStart::checkpoint || opts_.fsync != FsyncPolicy::always) {
    // No points kept: a start reads the segment whole. A point left by an earlier run that
    // kept them would claim a reserved end this writer is about to pass; it goes first.
    if (auto r = remove_recovery_point(*fs_, log_dir()); !r) return r;
    rp_end_ = ~0ull;
    seg.reserved_end = Segment::kUnreserved;
    return {};
  }
  const std::uint64_t step = std::max<std::uint64_t>(opts_.segment_bytes / 16, 4096);
  RecoveryPoint rp;
  {
    std::lock_guard lk(seg_mu_);
    rp = RecoveryPoint{seg.base(), seg.readable_size, seg.next_offset, seg.max_ts};
  }
  rp.reserved_end = (end + step + 4095) / 4096 * 4096;
  if (auto r = write_recovery_point(*fs_, log_dir(), rp, /*durable=*/true); !r) {
    host_.log(LogLevel::warn, kComponent,
              "shard " + ref_.to_string() + ": could not reserve " + seg.log_path() +
                  " in its recovery point (" + r.error().message +
                  "); a start after a crash reads the segment whole");
    if (auto d = remove_recovery_point(*fs_, log_dir()); !d) return d;
    rp_end_ = ~0ull;
    seg.reserved_end = Segment::kUnreserved;
    return {};
  }
  seg.reserved_end = rp.reserved_end;
  rp_end_ = rp.next_offset;
  rp_written_ = std::chrono::steady_clock::now();
  return {};
}

// close_log, after the queue drained (no flusher, no replica writer): everything written is
// synced, then described at the log end, so the next start after a clean shutdown reads
// nothing. Any failure leaves the active .idx absent (the next start scans instead).
bool ShardLogImpl::write_clean_state() {
  // A shard about to be deleted: its clean state would be garbage. A new shard's deferred
  // directory syncs are NOT done here: if nothing was acknowledged they guard nothing (an
  // empty create may vanish), and an acknowledgement or a consumer group already did them
  // (docs/architecture.md "Deferred directory syncs of a new shard"). The broker closes a
  // name's shards before deleting it, so syncing here cost a delete 4 fsyncs.
  if (discard_on_close_.load()) return false;
  if (opts_.verify_on_start != VerifyOnStart::checkpoint) {
    // No state to write in these modes; clean means every written byte was published (and
    // so synced): the next start need not sync a tail (recovery.h kept_unsynced_tail).
    std::lock_guard lk(seg_mu_);
    return !segments_.empty() && segments_.back()->write_pos == segments_.back()->readable_size;
  }
  std::shared_ptr<Segment> seg;
  RecoveryPoint rp;
  IndexFileContents c;
  {
    std::lock_guard lk(seg_mu_);
    if (segments_.empty()) return false;
    seg = segments_.back();
    if (seg->write_pos != seg->readable_size) return false;  // written, never published
    // A shard that never held a batch: a start reads its one empty segment in no time, so
    // there is nothing to describe. Writing the state anyway cost a create + delete pair
    // five syncs per shard, since the broker closes a stream's shards before it deletes
    // them (docs/benchmarks.md "Create + delete pairs").
    if (segments_.size() == 1 && seg->base() == 0 && seg->readable_size == 0) return true;
    rp = RecoveryPoint{seg->base(), seg->readable_size, seg->next_offset, seg->max_ts};
    c = IndexFileContents{seg->base(), seg->readable_size, seg->next_offset, seg->max_ts, seg->index};
  }
  const std::string dir = log_dir();
  auto fail = [&](const Error& e) {
    (void)fs_->remove(seg->index_path());
    host_.log(LogLevel::warn, kComponent,
              "shard " + ref_.to_string() + ": no clean-shutdown state: " + e.message);
    return false;
  };
  // A preallocated segment is cut back to its batches: the .idx describes the whole file.
  if (auto sz = seg->file().size(); !sz) {
    return fail(sz.error());
  } else if (*sz > c.log_size) {
    if (auto r = seg->file().truncate(c.log_size); !r) return fail(r.error());
  }
  if (auto r = seg->file().datasync(); !r) return fail(r.error());
  if (auto r = write_index_file(*fs_, seg->index_path(), c); !r) return fail(r.error());
  if (auto r = write_producer_snapshot(*fs_, dir + "/" + std::string(kProducerSnapshotName),
                                       written_producers_, rp.next_offset);
      !r)
    return fail(r.error());
  snapshot_end_.store(rp.next_offset, std::memory_order_release);
  if (auto r = write_recovery_point(*fs_, dir, rp); !r) return fail(r.error());
  if (auto r = fs_->sync_dir(dir); !r) return fail(r.error());
  return true;
}

void ShardLogImpl::close() {
  // Order matters: a group call may be waiting for a quorum (its group log op, or a replay's
  // append to this log) while holding the group ops' mutex and its group's, or groups_mu_
  // while a group opens. Once the replication manager has let go of the shard nothing
  // expires those waits, so both logs close first, failing them at once; only then the
  // group ops' checkpoint and the groups, which wait for those calls to end. (The
  // checkpoint was taken before the data log closed: a replay waiting on this log's quorum
  // held the mutex, and the close waited for ever; review finding.)
  groups_closing_.store(true);  // new group calls answer unavailable from here on
  if (group_ops_) group_ops_->close_log();
  close_log();
  if (group_ops_) group_ops_->checkpoint();
  std::map<std::string, std::shared_ptr<ConsumerGroup>> groups;
  {
    std::lock_guard lk(groups_mu_);
    groups_closed_ = true;
    groups.swap(groups_);
  }
  for (auto& [n, g] : groups) g->close();  // waits for a group call in progress
}

void ShardLogImpl::close_log() {
  std::vector<std::function<void()>> waiters;
  std::vector<QuorumWaiter> quorum;
  std::vector<DupWaiter> dups;
  {
    std::unique_lock lk(mu_);
    if (state_ == State::closed) return;
    lower_cut_floor(0);  // a closed log's findings are moot
    state_ = State::closing;
    drained_cv_.wait(lk, [&] { return !scheduled_; });
    state_ = State::closed;
    waiters_.take_all(waiters);
    end_waiters_.take_all(waiters);
    take_replica_waiters(quorum, dups);
  }
  if (replicated_) {  // a hint for the next open; losing it only costs visibility
    if (auto r = write_hwm_checkpoint(*fs_, dir_, high_watermark()); !r)
      host_.log(LogLevel::warn, kComponent,
                "shard " + ref_.to_string() + ": no high-watermark checkpoint: " +
                    r.error().message);
  }
  for (auto& cb : waiters) cb();  // in registration order
  // Replicated shards only: durable here, not known to be replicated.
  const std::string why = "shard " + ref_.to_string() + " closed before the high watermark reached the batch";
  for (auto& q : quorum) q.cb(Error(Errc::unavailable, why, Outcome::uncertain));
  for (auto& d : dups) d.cb(Error(Errc::unavailable, why, Outcome::uncertain));
  bool failed;
  {
    std::lock_guard lk(mu_);
    failed = !failure_.empty();
  }
  drop_spare();
  if (!failed) closed_clean_.store(write_clean_state());
  forget_cache_queue();  // sealed segments' files close with the log's
  std::vector<std::shared_ptr<Segment>> segs;
  {
    std::lock_guard lk(seg_mu_);
    segs.swap(segments_);  // files close once in-flight readers drop their references
  }
}

}  // namespace sluice::fs_storage
