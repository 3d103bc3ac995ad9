#include "shard_log.h"

#include <algorithm>
#include <chrono>

#include "dir_sync.h"
#include "flush_pool.h"
#include "layout.h"
#include "sluice/names.h"
#include "sluice/record_batch.h"

namespace sluice::fs_storage {

namespace {
constexpr std::string_view kComponent = "fs-storage";
constexpr std::size_t kMaxSegmentsPerRead = 8;
}  // namespace

ShardLogImpl::ShardLogImpl(ShardRef ref, RetentionPolicy retention, std::string dir,
                           const Options& opts, std::shared_ptr<FileSystem> fs, PluginHost& host,
                           FlushPool& pool, RecoveredLog recovered, ReplicaSetup replica)
    : ref_(std::move(ref)), dir_(std::move(dir)), opts_(opts), fs_(std::move(fs)), host_(host),
      pool_(pool), next_offset_(recovered.next_offset),
      role_(replica.replicated ? Role::none : Role::leader),
      epoch_(replica.history.current()), led_epoch_(replica.history.led()), min_insync_(replica.min_insync),
      producers_(recovered.producers),
      // A replicated shard reopens at its checkpoint (never above the durable end) or the
      // log start, until the replication manager tells it more.
      acked_end_(replica.replicated
                     ? std::clamp(replica.hwm_checkpoint.value(), recovered.segments.front()->base(),
                                  recovered.next_offset)
                     : recovered.next_offset),
      written_producers_(std::move(recovered.producers)),
      segments_(std::move(recovered.segments)), retention_(retention),
      replicated_(replica.replicated), copy_lost_(replica.copy_lost), history_(std::move(replica.history)),
      hwm_(acked_end_), durable_end_(recovered.next_offset), written_end_(recovered.next_offset),
      snapshot_end_(recovered.snapshot_end) {}

ShardLogImpl::~ShardLogImpl() = default;

Result<void> ShardLogImpl::forget_copy_lost() {
  if (!copy_lost_.load(std::memory_order_acquire)) return {};
  // Synced: a removal a power cut undid would make a caught-up copy lost again, and with its
  // leader's disk gone too, the one copy holding every record could not lead.
  const std::string path = dir_ + "/" + std::string(kLostCopyFile);
  if (auto r = fs_->remove(path); !r) return r;
  if (auto r = sync_parent_dir(*fs_, path); !r) return r;
  copy_lost_.store(false, std::memory_order_release);
  return {};
}

void ShardLogImpl::flush() {
  std::string failed_already;
  {
    std::lock_guard lk(mu_);
    flushing_.swap(queue_);
    failed_already = failure_;
  }
  Result<void> r;
  if (!failed_already.empty())
    r = Error(Errc::storage_failure, "shard " + ref_.to_string() + " failed: " + failed_already);
  else if (!flushing_.empty())
    r = write_group();

  if (!r) {
    std::vector<Pending> later;
    {
      std::lock_guard lk(mu_);
      if (failure_.empty()) failure_ = r.error().message;
      later.swap(queue_);
    }
    if (failed_already.empty()) {
      host_.log(LogLevel::error, kComponent,
                "shard " + ref_.to_string() + " failed, refusing appends until reopened: " +
                    r.error().message);
      cut_unpublished_tail();
    }
    if (failed_already.empty()) {
      fail_all(r.error());
    } else {  // queued behind an earlier failure: never written
      for (auto& p : flushing_)
        if (p.cb) p.cb(Error(Errc::storage_failure, r.error().message));
    }
    for (auto& p : later)
      if (p.cb) p.cb(Error(Errc::storage_failure, r.error().message));
    // Duplicates share their original's outcome: uncertain for the group that failed
    // mid-write, definite for everything queued behind it.
    if (failed_already.empty() && !flushing_.empty())
      fail_dups(r.error(), flushing_.front().base, flushing_.back().base + flushing_.back().count);
    else
      fail_dups(r.error(), 0, 0);
  } else {
    // High watermark already advanced (sync_and_publish); waiters first, then acks, then
    // duplicates of what was just acknowledged.
    wake_waiters();
    if (!replicated_) {
      wake_end_waiters();
      for (auto& p : flushing_)
        if (p.cb) p.cb(AppendResult{Offset(p.base), p.count});
      if (!flushing_.empty()) complete_dups(flushing_.back().base + flushing_.back().count);
    } else {
      // Quorum appends now wait for the high watermark (or fail at once on a replica that
      // no longer leads); leader appends are done. Duplicates wait for the high watermark.
      std::vector<std::pair<AppendCallback, Result<AppendResult>>> done;
      {
        std::lock_guard lk(mu_);
        for (auto& p : flushing_) {
          if (!p.cb) continue;
          const AppendResult res{Offset(p.base), p.count};
          if (p.ack != AckMode::quorum)
            done.emplace_back(std::move(p.cb), res);
          else if (role_ != Role::leader)
            done.emplace_back(std::move(p.cb), fenced_error(led_epoch_, epoch_, true));
          else
            quorum_waiters_.push_back(QuorumWaiter{p.base + p.count, res, p.deadline,
                                                   std::move(p.cb)});
        }
      }
      // After the quorum waiters are registered: a manager woken here may advance the
      // high watermark at once (complete_quorum below covers a race with that too).
      wake_end_waiters();
      for (auto& [cb, r] : done) cb(std::move(r));
      // Followers may have synced this data before this replica did: raise the high
      // watermark toward what the manager last computed from them, now that it is durable
      // here too (this also completes the quorum waiters it covers).
      raise_high_watermark();
      complete_quorum();
    }
  }
  flushing_.clear();
  if (r) {
    maybe_write_recovery_point();
    release_cache();  // after the acknowledgements: a drop can take milliseconds
  }

  bool again = false;
  {
    std::lock_guard lk(mu_);
    if (!queue_.empty()) again = true;
    else scheduled_ = false;
    drained_cv_.notify_all();
  }
  if (again) pool_.schedule(shared_from_this());
}

// After a failed write or sync: the group's bytes past the published end are cut from the
// active segment. Left there, a reopen in the same boot would find them whole in the page
// cache (Linux marks pages whose writeback failed clean, and a later fdatasync reports
// success) and build acknowledged appends on bytes the disk may not hold (review finding).
// The cut also drops those pages. If the cut fails, the file keeps them: the shard stays
// failed, and a reopen checks them as any unsynced tail.
void ShardLogImpl::cut_unpublished_tail() {
  std::shared_ptr<Segment> seg;
  std::uint64_t keep = 0;
  {
    std::lock_guard lk(seg_mu_);
    seg = segments_.back();
    keep = seg->readable_size;
    // What a leader shipped before its sync is no longer there: followers asking beyond
    // the durable end get "truncate first", not reads past the cut.
    seg->written_size = seg->readable_size;
    written_end_.store(durable_end_.load(std::memory_order_acquire), std::memory_order_release);
  }
  auto size = seg->file().size();
  if (!size || *size <= keep) return;
  if (auto r = seg->file().truncate(keep); !r) {
    host_.log(LogLevel::error, kComponent,
              "shard " + ref_.to_string() + ": could not cut the failed group's bytes from " + seg->log_path() +
                  ": " + r.error().message);
    return;
  }
  (void)seg->file().datasync();  // best effort: the disk already failed once
  host_.log(LogLevel::warn, kComponent,
            "shard " + ref_.to_string() + ": cut " + std::to_string(*size - keep) + " bytes the failed group wrote to " +
                seg->log_path() + " (never acknowledged)");
}

void ShardLogImpl::defer_dir_syncs(DirSyncList dirs, std::string mark) {
  std::lock_guard lk(deferred_mu_);
  deferred_dirs_ = std::move(dirs);
  deferred_mark_ = std::move(mark);
  dirs_pending_.store(!deferred_dirs_.empty(), std::memory_order_release);
}

Result<void> ShardLogImpl::sync_deferred_dirs() {
  if (!dirs_pending_.load(std::memory_order_acquire)) return {};
  std::lock_guard lk(deferred_mu_);
  if (deferred_dirs_.empty()) return {};
  if (auto r = deferred_dirs_.sync(*fs_); !r) return r;
  dirs_pending_.store(false, std::memory_order_release);
  if (!deferred_mark_.empty()) {
    // Best effort: without it a later loss of this copy goes unnoticed, as before marks.
    const std::string mark = std::exchange(deferred_mark_, std::string());
    Result<void> r = make_dirs(*fs_, parent_dir(mark));
    if (r) {
      auto f = fs_->open(mark, OpenMode::create_truncate);
      if (!f) r = f.error();
    }
    if (!r) host_.log(LogLevel::warn, kComponent, "shard " + ref_.to_string() + ": cannot write " + mark + ": " + r.error().message);
  }
  return {};
}

void ShardLogImpl::complete_dups(std::uint64_t acked_end) {
  std::vector<DupWaiter> ready;
  {
    std::lock_guard lk(mu_);
    // Never lowered here: set_in_sync passes the value it read, which a concurrent raise
    // of the high watermark may have passed since.
    acked_end_ = std::max(acked_end_, acked_end);
    if (dup_waiters_.empty()) return;
    auto it = std::partition(dup_waiters_.begin(), dup_waiters_.end(),
                             [&](const DupWaiter& d) { return !dup_ready(d); });
    ready.assign(std::make_move_iterator(it), std::make_move_iterator(dup_waiters_.end()));
    dup_waiters_.erase(it, dup_waiters_.end());
  }
  std::sort(ready.begin(), ready.end(),
            [](const DupWaiter& a, const DupWaiter& b) { return a.end < b.end; });
  for (auto& d : ready) d.cb(d.result);
}

void ShardLogImpl::fail_dups(const Error& e, std::uint64_t inflight_begin,
                             std::uint64_t inflight_end) {
  std::vector<DupWaiter> all;
  {
    std::lock_guard lk(mu_);
    all.swap(dup_waiters_);  // a failed shard never acknowledges anything again
  }
  for (auto& d : all) {
    const bool inflight = d.end > inflight_begin && d.end <= inflight_end;
    d.cb(Error(Errc::storage_failure, e.message, inflight ? Outcome::uncertain : Outcome::definite));
  }
}

void ShardLogImpl::fail_all(const Error& e) {
  for (auto& p : flushing_)
    if (p.cb)  // the bytes may have reached the disk before the error: outcome unknown
      p.cb(Error(Errc::storage_failure, e.message, Outcome::uncertain));
}

Result<void> ShardLogImpl::write_group() {
  std::shared_ptr<Segment> seg;
  {
    std::lock_guard lk(seg_mu_);
    seg = segments_.back();
  }
  if (!flushing_.empty() && !seg->preallocated && opts_.preallocate_segments) {
    if (auto r = maybe_roll_early(flushing_.front().base); !r) return r;
    std::lock_guard lk(seg_mu_);
    seg = segments_.back();
  }
  iov_.clear();
  std::uint64_t run_start = seg->write_pos;
  bool dirty = false;
  for (auto& p : flushing_) {
    const std::uint64_t len = p.batch.size();
    if (seg->write_pos > 0 && seg->write_pos + len > opts_.segment_bytes) {
      if (!iov_.empty())
        if (auto r = write_run(*seg, run_start); !r) return r;
      if (dirty)
        if (auto r = sync_and_publish(*seg); !r) return r;
      if (auto r = roll(p.base); !r) return r;
      {
        std::lock_guard lk(seg_mu_);
        seg = segments_.back();
      }
      run_start = 0;
      dirty = false;
    }
    if (wants_index_entry(seg->write_pos, seg->last_index_pos, opts_.index_interval_bytes)) {
      seg->pending_index.push_back({static_cast<std::uint32_t>(p.base - seg->base()),
                                    static_cast<std::uint32_t>(seg->write_pos)});
      seg->last_index_pos = seg->write_pos;
    }
    iov_.push_back({p.batch.data(), p.batch.size()});
    if (p.producer_id != 0) written_producers_.record(p.producer_id, p.producer_seq, p.base, p.count);
    seg->write_pos += len;
    seg->pending_next_offset = p.base + p.count;
    // Running max: one old-timestamped batch must not make the whole segment look old.
    seg->pending_max_ts = std::max(seg->pending_max_ts, p.max_ts);
    dirty = true;
  }
  if (!iov_.empty())
    if (auto r = write_run(*seg, run_start); !r) return r;
  if (dirty) return sync_and_publish(*seg);
  return {};
}

Result<void> ShardLogImpl::write_run(Segment& seg, std::uint64_t at) {
  if (seg.preallocated) {
    std::uint64_t end = at;
    for (const auto& v : iov_) end += v.iov_len;
    if (auto r = reserve_through(seg, end); !r) return r;
  }
  auto r = seg.file().pwritev(iov_.data(), static_cast<int>(iov_.size()), at);
  iov_.clear();
  if (!r || !replicated_) return r;
  // A leader ships what it has written to its followers while its own fdatasync runs, so
  // the two syncs overlap (docs/replication.md "Shipping before the leader's sync"). Only
  // the durable end counts toward the high watermark.
  {
    std::lock_guard lk(seg_mu_);
    seg.written_size = seg.write_pos;
    written_end_.store(seg.pending_next_offset, std::memory_order_release);
  }
  wake_end_waiters();
  return r;
}

Result<void> ShardLogImpl::sync_and_publish(Segment& seg) {
  if (opts_.fsync == FsyncPolicy::always) {
    if (auto r = seg.file().datasync(); !r) return r;
    syncs_.fetch_add(1, std::memory_order_relaxed);
    ++seg.writer_syncs;
  }
  // A new shard's directory entries before its first acknowledgement: an acknowledged
  // record must be findable after power loss (docs/architecture.md "Deferred directory
  // syncs of a new shard"). One atomic load per group once done. With storage.fsync =
  // never nothing is promised across a power cut, so the directories are not synced either.
  if (opts_.fsync != FsyncPolicy::never)
    if (auto r = sync_deferred_dirs(); !r) return r;
  {
    std::lock_guard lk(seg_mu_);
    seg.readable_size = seg.write_pos;
    seg.written_size = seg.write_pos;
    seg.next_offset = seg.pending_next_offset;
    seg.max_ts = seg.pending_max_ts;
    seg.index.insert(seg.index.end(), seg.pending_index.begin(), seg.pending_index.end());
    seg.pending_index.clear();
    durable_end_.store(seg.next_offset, std::memory_order_release);
    written_end_.store(seg.next_offset, std::memory_order_release);
    if (!replicated_) hwm_.store(seg.next_offset, std::memory_order_release);
  }
  maybe_want_spare(seg);
  return {};
}

namespace {
// The kernel drops only folios wholly inside the advised range, and a large folio (at most
// 2 MiB, aligned to its size) can straddle where the last drop ended: each drop starts at
// the 2 MiB boundary below it, which costs a lookup of pages already gone.
std::uint64_t cache_drop_start(const Segment& seg) {
  return seg.cache_dropped_to & ~((std::uint64_t{2} << 20) - 1);
}
}  // namespace

// Why: a shard's log is read at its tail (consumers, followers) far more than behind it, and
// on a VM whose host backs guest memory on first touch, writing into never-used page-cache
// pages costs several times the copy itself (docs/benchmarks.md "Keyed publishing: the
// page cache"). Dropping synced pages behind a window recycles pages the guest already has.
void ShardLogImpl::release_cache() {
  const std::uint64_t window = opts_.page_cache_window_bytes;
  if (window == 0) return;
  std::shared_ptr<Segment> seg;
  std::uint64_t log_start;
  {
    std::lock_guard lk(seg_mu_);
    seg = segments_.back();
    log_start = segments_.front()->base();
  }
  // Segments retention or a trim deleted: their pages went with the file.
  auto front = [&]() -> std::shared_ptr<Segment> {
    while (!cache_sealed_.empty()) {
      auto s = cache_sealed_.front().seg.lock();
      if (s && s->base() >= log_start) return s;
      cache_sealed_bytes_ -= cache_sealed_.front().bytes;
      cache_sealed_.pop_front();
    }
    return nullptr;
  };
  const std::uint64_t step = std::max<std::uint64_t>(window / 32, 64 << 10);
  // Drops [start of the last drop's 2 MiB block, to) of `s`, once that has grown by a step.
  auto drop_below = [&](Segment& s, std::uint64_t to) {
    to &= ~std::uint64_t{4095};
    if (to < s.cache_dropped_to + step) return;
    const std::uint64_t from = cache_drop_start(s);
    s.file().drop_cache(from, to - from);
    s.cache_dropped_to = to;
  };
  // Sealed segments, oldest first: whole once the bytes after them fill the window, else
  // what lies behind the window's start, and the newer ones are inside it.
  while (auto sp = front()) {
    Segment& s = *sp;
    const std::uint64_t newer = cache_sealed_bytes_ - s.write_pos + seg->write_pos;
    if (newer < window) {
      if (s.write_pos > window - newer) drop_below(s, s.write_pos - (window - newer));
      break;
    }
    s.file().drop_cache(cache_drop_start(s), 0);
    cache_sealed_bytes_ -= cache_sealed_.front().bytes;
    cache_sealed_.pop_front();
  }
  if (seg->write_pos > window) drop_below(*seg, seg->write_pos - window);
}

void ShardLogImpl::forget_cache_queue() {
  cache_sealed_.clear();
  cache_sealed_bytes_ = 0;
  std::lock_guard lk(seg_mu_);
  for (auto& seg : segments_) seg->cache_dropped_to = std::min(seg->cache_dropped_to, seg->write_pos & ~std::uint64_t{4095});
}

void ShardLogImpl::WaiterSet::add(std::uint64_t handle, std::uint64_t offset,
                                   std::function<void()> cb) {
  by_handle.emplace(handle, Waiter{offset, std::move(cb)});
  by_offset.emplace(offset, handle);
}

void ShardLogImpl::WaiterSet::take_below(std::uint64_t end,
                                         std::vector<std::function<void()>>& out) {
  // A waiter at offset o fires once the watched end exceeds o.
  const auto stop = by_offset.lower_bound(end);
  for (auto it = by_offset.begin(); it != stop; ++it) {
    auto w = by_handle.find(it->second);
    out.push_back(std::move(w->second.cb));
    by_handle.erase(w);
  }
  by_offset.erase(by_offset.begin(), stop);
}

std::function<void()> ShardLogImpl::WaiterSet::cancel(std::uint64_t handle) {
  auto w = by_handle.find(handle);
  if (w == by_handle.end()) return {};  // fired (or firing), cancelled, or never issued
  auto [lo, hi] = by_offset.equal_range(w->second.offset);
  for (auto it = lo; it != hi; ++it)
    if (it->second == handle) {
      by_offset.erase(it);
      break;
    }
  std::function<void()> cb = std::move(w->second.cb);
  by_handle.erase(w);
  return cb;
}

void ShardLogImpl::WaiterSet::take_all(std::vector<std::function<void()>>& out) {
  for (auto& [h, w] : by_handle) out.push_back(std::move(w.cb));
  by_handle.clear();
  by_offset.clear();
}

void ShardLogImpl::wake_waiters() {
  const std::uint64_t hwm = hwm_.load(std::memory_order_acquire);
  std::vector<std::function<void()>> ready;
  {
    std::lock_guard lk(mu_);
    waiters_.take_below(hwm, ready);
  }
  for (auto& cb : ready) cb();
}

void ShardLogImpl::wake_end_waiters() {
  const std::uint64_t end = written_end_.load(std::memory_order_acquire);
  std::vector<std::function<void()>> ready;
  {
    std::lock_guard lk(mu_);
    if (end_waiters_.size() == 0) return;
    end_waiters_.take_below(end, ready);
  }
  for (auto& cb : ready) cb();
}

namespace {
// Waiter handles are unique in the process, not per log: a caller cancels by stream name
// and shard, which after a delete and recreate (or a reopen) finds another ShardLogImpl;
// a per-log count would hand out the same numbers there, and a stale cancel would drop
// another subscriber's waiter (review finding).
std::atomic<std::uint64_t> g_waiter_handles{0};
std::uint64_t next_waiter_handle() { return g_waiter_handles.fetch_add(1, std::memory_order_relaxed) + 1; }
}  // namespace

std::uint64_t ShardLogImpl::notify_when_beyond(Offset offset, std::function<void()> cb) {
  {
    std::lock_guard lk(mu_);
    if (state_ != State::closed && hwm_.load(std::memory_order_acquire) <= offset.value()) {
      const std::uint64_t h = next_waiter_handle();
      waiters_.add(h, offset.value(), std::move(cb));
      return h;
    }
  }
  cb();
  return 0;
}

void ShardLogImpl::cancel_notify(std::uint64_t handle) {
  if (handle == 0) return;
  std::function<void()> dropped;  // destroyed after mu_ is released (it may own anything)
  {
    std::lock_guard lk(mu_);
    dropped = waiters_.cancel(handle);
  }
}

std::uint64_t ShardLogImpl::notify_when_end_beyond(Offset offset, std::function<void()> cb) {
  {
    std::lock_guard lk(mu_);
    if (state_ != State::closed &&
        written_end_.load(std::memory_order_acquire) <= offset.value()) {
      const std::uint64_t h = next_waiter_handle();
      end_waiters_.add(h, offset.value(), std::move(cb));
      return h;
    }
  }
  cb();
  return 0;
}

void ShardLogImpl::cancel_end_notify(std::uint64_t handle) {
  if (handle == 0) return;
  std::function<void()> dropped;
  {
    std::lock_guard lk(mu_);
    dropped = end_waiters_.cancel(handle);
  }
}

Result<FetchResult> ShardLogImpl::read(Offset from_off, std::uint32_t max_records,
                                       std::size_t max_bytes) {
  struct Snap {
    std::shared_ptr<Segment> seg;
    std::uint64_t size;
    std::uint64_t start;
  };
  std::vector<Snap> snaps;
  const std::uint64_t from = from_off.value();
  FetchResult res;
  std::uint64_t hwm;
  {
    std::lock_guard lk(seg_mu_);
    if (segments_.empty())
      return Error(Errc::unavailable, "shard " + ref_.to_string() + " is closed");
    hwm = hwm_.load(std::memory_order_acquire);
    const std::uint64_t log_start = segments_.front()->base();
    res.high_watermark = Offset(hwm);
    res.log_start = Offset(log_start);
    res.next_offset = from_off;
    if (from < log_start)
      return Error(Errc::offset_out_of_range,
                   "offset " + std::to_string(from) + " is before the log start " +
                       std::to_string(log_start) + " of shard " + ref_.to_string());
    if (from > hwm)
      return Error(Errc::invalid_argument, "offset " + std::to_string(from) +
                                               " is beyond the high watermark " +
                                               std::to_string(hwm));
    if (from == hwm) return res;
    auto it = std::upper_bound(segments_.begin(), segments_.end(), from,
                               [](std::uint64_t o, const auto& s) { return o < s->base(); });
    std::size_t i = static_cast<std::size_t>(std::prev(it) - segments_.begin());
    for (std::size_t j = i; j < segments_.size() && snaps.size() < kMaxSegmentsPerRead; ++j)
      snaps.push_back({segments_[j], segments_[j]->readable_size,
                       j == i ? segments_[j]->lookup(from) : 0});
  }

  if (max_records == 0) max_records = 1;
  std::uint64_t records = 0, bytes = 0;
  for (auto& s : snaps) {
    std::uint64_t pos = s.start;
    while (pos + kBatchHeaderSize <= s.size) {
      char hdr[kBatchHeaderSize];
      auto n = s.seg->file().pread(hdr, sizeof hdr, pos);
      if (!n) return n.error();
      const BatchHeader h = BatchHeader::decode(hdr);
      if (*n != sizeof hdr || h.magic != kBatchMagic || h.length < kBatchHeaderSize ||
          pos + h.length > s.size)
        return Error(Errc::corrupt_data, "corrupt batch in " + s.seg->log_path() + " at byte " +
                                             std::to_string(pos) + ": bad header");
      if (h.next_offset() <= from) {  // before the requested offset: skip unread
        pos += h.length;
        continue;
      }
      if (h.base_offset >= hwm) return res;
      if (!res.batches.empty() && bytes + h.length > max_bytes) return res;
      std::string b(h.length, '\0');
      auto m = s.seg->file().pread(b.data(), b.size(), pos);
      if (!m) return m.error();
      BatchHeader checked;
      const BatchCheck c = *m == b.size() ? check_batch(b.data(), b.size(), &checked)
                                          : BatchCheck::truncated;
      if (c != BatchCheck::ok)
        return Error(Errc::corrupt_data, "corrupt batch in " + s.seg->log_path() + " at byte " +
                                             std::to_string(pos) + ": " +
                                             std::string(to_string(c)));
      records += checked.next_offset() - std::max(from, checked.base_offset);
      bytes += b.size();
      res.next_offset = Offset(checked.next_offset());
      res.batches.push_back(std::move(b));
      pos += checked.length;
      if (records >= max_records || bytes >= max_bytes) return res;
    }
  }
  return res;
}

ShardStats ShardLogImpl::stats() {
  ShardStats st;
  std::shared_ptr<Segment> preallocated;  // the active segment, if its file runs ahead
  std::uint64_t written = 0;
  {
    std::lock_guard lk(seg_mu_);
    st.log_start = Offset(segments_.empty() ? 0 : segments_.front()->base());
    st.high_watermark = Offset(hwm_.load(std::memory_order_acquire));
    for (auto& s : segments_) st.size_bytes += s->readable_size;
    st.segments = segments_.size();
    if (!segments_.empty() && segments_.back()->preallocated) {
      preallocated = segments_.back();
      written = preallocated->written_size;
    }
  }
  // Zeros ahead of the writes, from the files themselves (fstat, outside the locks): the
  // active segment's unwritten end and a spare, ready or being written.
  if (preallocated)
    if (auto sz = preallocated->file().size(); sz && *sz > written) st.preallocated_bytes += *sz - written;
  bool spare;
  {
    std::lock_guard lk(spare_mu_);
    spare = spare_ != Spare::none;
  }
  if (spare)
    if (auto sz = fs_->file_size(spare_path()); sz) st.preallocated_bytes += *sz;
  {
    std::lock_guard lk(mu_);
    st.log_end = Offset(next_offset_);
    st.leader_epoch = epoch_;
    st.leading = role_ == Role::leader;
  }
  st.appended_records = appended_records_.load(std::memory_order_relaxed);
  st.syncs = syncs_.load(std::memory_order_relaxed);
  st.copy_lost = copy_lost_.load(std::memory_order_acquire);
  std::function<std::vector<ReplicaProgress>()> progress;
  {
    std::lock_guard lk(progress_mu_);
    progress = progress_;
  }
  if (progress && st.leading) st.replicas = progress();
  return st;
}

}  // namespace sluice::fs_storage
