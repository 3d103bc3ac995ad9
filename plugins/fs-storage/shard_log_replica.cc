// ShardLogImpl: the replication primitives (shard_log.h, "Replicated shards").
#include <algorithm>

#include "layout.h"
#include "shard_log.h"
#include "sluice/record_batch.h"

namespace sluice::fs_storage {

namespace {
constexpr std::string_view kComponent = "fs-storage";

std::string epoch_str(LeaderEpoch e) { return std::to_string(e.value()); }
}  // namespace

Error ShardLogImpl::fenced_error(LeaderEpoch deposed, LeaderEpoch newer) const {
  return Error(Errc::fenced, "shard " + ref_.to_string() + ": leader epoch " + epoch_str(deposed) +
                                 " was deposed by epoch " + epoch_str(newer) +
                                 "; the write was not acknowledged");
}

Error ShardLogImpl::role_error() const {
  const std::string s = "shard " + ref_.to_string();
  switch (role_) {
    case Role::fenced: return fenced_error(led_epoch_, epoch_);
    case Role::follower:
      return Error(Errc::not_leader, s + " is a follower in leader epoch " + epoch_str(epoch_) +
                                         "; its leader is broker " +
                                         std::to_string(leader_.value()));
    case Role::leader:
      return Error(Errc::not_leader, s + " is changing its leader epoch; retry");
    case Role::none: break;
  }
  return Error(Errc::not_leader, s + " has not been told its role since it opened (leader epoch " +
                                     epoch_str(epoch_) + "); its leader is unknown");
}

void ShardLogImpl::take_replica_waiters(std::vector<QuorumWaiter>& q, std::vector<DupWaiter>& d) {
  q.insert(q.end(), std::make_move_iterator(quorum_waiters_.begin()),
           std::make_move_iterator(quorum_waiters_.end()));
  quorum_waiters_.clear();
  if (replicated_) {  // RF=1 duplicates are completed by the flusher, never stranded
    d.insert(d.end(), std::make_move_iterator(dup_waiters_.begin()),
             std::make_move_iterator(dup_waiters_.end()));
    dup_waiters_.clear();
  }
}

// --- high watermark and quorum ------------------------------------------------------

void ShardLogImpl::advance_high_watermark(Offset hwm) {
  if (!replicated_) return;
  {
    std::lock_guard lk(mu_);
    hwm_target_ = hwm.value();
  }
  raise_high_watermark();
}

void ShardLogImpl::raise_high_watermark() {
  std::uint64_t now;
  {
    std::lock_guard lk(mu_);
    const std::uint64_t target =
        std::min(hwm_target_, durable_end_.load(std::memory_order_acquire));
    if (target <= hwm_.load(std::memory_order_relaxed)) return;
    hwm_.store(target, std::memory_order_release);
    now = target;
  }
  wake_waiters();
  complete_quorum();
  complete_dups(now);
}

void ShardLogImpl::complete_quorum() {
  std::vector<QuorumWaiter> ready;
  {
    std::lock_guard lk(mu_);
    if (in_sync_count_ < min_insync_) return;
    const std::uint64_t hwm = hwm_.load(std::memory_order_acquire);
    while (!quorum_waiters_.empty() && quorum_waiters_.front().end <= hwm) {
      ready.push_back(std::move(quorum_waiters_.front()));
      quorum_waiters_.pop_front();
    }
  }
  for (auto& w : ready) w.cb(w.result);
}

void ShardLogImpl::set_in_sync(std::size_t in_sync_count, std::uint32_t min_insync) {
  if (!replicated_) return;
  {
    std::lock_guard lk(mu_);
    in_sync_count_ = in_sync_count;
    min_insync_ = min_insync;
  }
  complete_quorum();
}

void ShardLogImpl::set_quorum_timeout(std::chrono::milliseconds timeout) {
  std::lock_guard lk(mu_);
  quorum_timeout_ = timeout;
}

void ShardLogImpl::expire_quorum_waiters(std::chrono::steady_clock::time_point now) {
  std::vector<QuorumWaiter> expired;
  std::size_t in_sync;
  std::uint32_t min_insync;
  std::uint64_t hwm;
  {
    std::lock_guard lk(mu_);
    // Deadlines are taken at append under mu_, in offset order: the front expires first.
    while (!quorum_waiters_.empty() && quorum_waiters_.front().deadline <= now) {
      expired.push_back(std::move(quorum_waiters_.front()));
      quorum_waiters_.pop_front();
    }
    in_sync = in_sync_count_;
    min_insync = min_insync_;
    hwm = hwm_.load(std::memory_order_acquire);
  }
  for (auto& w : expired) {
    const std::string at = "shard " + ref_.to_string() + ": the batch ending at offset " +
                           std::to_string(w.end) + " was not replicated in time (high watermark " +
                           std::to_string(hwm) + ")";
    if (in_sync < min_insync)
      w.cb(Error(Errc::not_enough_replicas,
                 at + "; the in-sync set has " + std::to_string(in_sync) +
                     " replica(s), min_insync is " + std::to_string(min_insync) +
                     "; the write was not acknowledged",
                 Outcome::uncertain));
    else
      w.cb(Error(Errc::timeout, at, Outcome::uncertain));
  }
}

// --- roles ---------------------------------------------------------------------------

Result<void> ShardLogImpl::save_history(LeaderEpoch current, std::vector<EpochEntry> entries,
                                        std::optional<LeaderEpoch> led) {
  EpochHistory next;
  {
    std::lock_guard lk(epoch_mu_);
    next = history_;
  }
  if (auto r = next.save(*fs_, dir_, current, led.value_or(next.led()), std::move(entries)); !r) {
    host_.log(LogLevel::error, kComponent,
              "shard " + ref_.to_string() + ": cannot persist its leader-epoch history: " +
                  r.error().message);
    return r;
  }
  std::lock_guard lk(epoch_mu_);
  history_ = std::move(next);
  return {};
}

bool ShardLogImpl::led_before_reopen(LeaderEpoch e) {
  std::lock_guard lk(mu_);
  return replicated_ && role_ == Role::none && e.value() != 0 && e == epoch_ && led_epoch_ == e;
}

Result<void> ShardLogImpl::become_leader(LeaderEpoch e) {
  if (!replicated_)
    return Error(Errc::not_supported, "shard " + ref_.to_string() + " is not replicated");
  std::lock_guard rl(repl_mu_);
  std::uint64_t start;
  {
    std::lock_guard lk(mu_);
    if (state_ != State::open)
      return Error(Errc::unavailable, "shard " + ref_.to_string() + " is closed");
    if (e == epoch_ && role_ == Role::leader) return {};
    // Never the current epoch again after a restart, not even one this replica led: it
    // may have shipped a tail it had not synced, which a power cut then took from its own
    // disk but not from its followers'; writing on in the same epoch would put other
    // records at those offsets, a divergence the epoch history cannot see
    // (docs/replication.md "Shipping before the leader's sync"). Epoch 0 is a new shard's.
    if (e < epoch_ || (e == epoch_ && e.value() != 0)) {
      if (role_ == Role::none && led_epoch_ == e)
        return Error(Errc::fenced, "shard " + ref_.to_string() + ": cannot lead in epoch " +
                                       epoch_str(e) + " again after a restart; a restarted "
                                       "leader needs a new epoch");
      return Error(Errc::fenced, "shard " + ref_.to_string() + ": cannot lead in epoch " +
                                     epoch_str(e) + ", this replica already acted in epoch " +
                                     epoch_str(epoch_) +
                                     (e == epoch_ ? " as a follower or deposed leader" : ""));
    }
    // Appends wait (not_leader) until the new epoch is durable; everything assigned so far
    // belongs to the previous epoch.
    switching_ = true;
    start = next_offset_;
  }
  std::vector<EpochEntry> entries = epoch_entries();
  if (entries.empty() || entries.back().epoch < e)
    entries.push_back(EpochEntry{e, Offset(start)});
  auto r = save_history(e, std::move(entries), e);
  std::lock_guard lk(mu_);
  switching_ = false;
  if (!r) return r;
  role_ = Role::leader;
  epoch_ = e;
  led_epoch_ = e;
  hwm_target_ = hwm_.load(std::memory_order_relaxed);  // nothing from an earlier role
  leader_ = NodeId(0);
  return {};
}

Result<void> ShardLogImpl::become_follower(LeaderEpoch e, NodeId leader) {
  if (!replicated_)
    return Error(Errc::not_supported, "shard " + ref_.to_string() + " is not replicated");
  std::lock_guard rl(repl_mu_);
  {
    std::lock_guard lk(mu_);
    if (state_ != State::open)
      return Error(Errc::unavailable, "shard " + ref_.to_string() + " is closed");
    if (e < epoch_ || (e == epoch_ && (role_ == Role::leader ||
                                       (role_ == Role::none && e.value() != 0 && led_epoch_ == e))))
      return Error(Errc::fenced, "shard " + ref_.to_string() + ": cannot follow in epoch " +
                                     epoch_str(e) + ", this replica already acted in epoch " +
                                     epoch_str(epoch_) + (e == epoch_ ? " as its leader" : ""));
    if (e == epoch_ && role_ == Role::follower) {
      leader_ = leader;
      return {};
    }
  }
  // A deposed leader stops acknowledging before anything else happens.
  std::vector<QuorumWaiter> quorum;
  std::vector<DupWaiter> dups;
  LeaderEpoch deposed;
  {
    std::lock_guard lk(mu_);
    if (role_ == Role::leader) {
      role_ = Role::fenced;
      deposed = led_epoch_;
      take_replica_waiters(quorum, dups);
    }
  }
  for (auto& q : quorum) q.cb(fenced_error(deposed, e));
  for (auto& d : dups) d.cb(fenced_error(deposed, e));
  bool write = false;
  {
    std::lock_guard lk(epoch_mu_);
    write = history_.current() != e;
  }
  if (write)
    if (auto r = save_history(e, epoch_entries()); !r) return r;
  std::lock_guard lk(mu_);
  role_ = Role::follower;
  epoch_ = e;
  leader_ = leader;
  return {};
}

Result<void> ShardLogImpl::fence(LeaderEpoch newer) {
  if (!replicated_)
    return Error(Errc::not_supported, "shard " + ref_.to_string() + " is not replicated");
  std::lock_guard rl(repl_mu_);
  std::vector<QuorumWaiter> quorum;
  std::vector<DupWaiter> dups;
  LeaderEpoch deposed;
  bool persist;
  {
    std::lock_guard lk(mu_);
    if (newer < epoch_)
      return Error(Errc::fenced, "shard " + ref_.to_string() + ": epoch " + epoch_str(newer) +
                                     " is below this replica's epoch " + epoch_str(epoch_));
    // The current epoch only stops its own leader (the catalog left the shard without
    // one); the epoch is already persisted then.
    if (newer == epoch_ && role_ != Role::leader) return {};
    persist = newer != epoch_;
    // In memory first: refusing is always safe, even if persisting fails below.
    deposed = role_ == Role::leader ? epoch_ : led_epoch_;
    role_ = Role::fenced;
    led_epoch_ = deposed;
    epoch_ = newer;
    leader_ = NodeId(0);
    take_replica_waiters(quorum, dups);
  }
  for (auto& q : quorum) q.cb(fenced_error(deposed, newer));
  for (auto& d : dups) d.cb(fenced_error(deposed, newer));
  if (!persist) return {};
  return save_history(newer, epoch_entries());
}

LeaderEpoch ShardLogImpl::leader_epoch() {
  std::lock_guard lk(mu_);
  return epoch_;
}

bool ShardLogImpl::leading() {
  std::lock_guard lk(mu_);
  return role_ == Role::leader && !switching_;
}

NodeId ShardLogImpl::leader() {
  std::lock_guard lk(mu_);
  return leader_;
}

Result<EpochEnd> ShardLogImpl::end_offset_for(LeaderEpoch e) {
  // What this replica holds, synced or not: a leader may have shipped its unsynced tail.
  const Offset end = written_end();
  std::lock_guard lk(epoch_mu_);
  return history_.end_offset_for(e, end);
}

Offset ShardLogImpl::log_start() {
  std::lock_guard lk(seg_mu_);
  return Offset(segments_.empty() ? 0 : segments_.front()->base());
}

LeaderEpoch ShardLogImpl::last_data_epoch() {
  const std::uint64_t end = durable_end_.load(std::memory_order_acquire);
  if (end == 0) return LeaderEpoch(0);
  std::lock_guard lk(epoch_mu_);
  return history_.epoch_at(Offset(end - 1));
}

std::vector<EpochEntry> ShardLogImpl::epoch_entries() {
  std::lock_guard lk(epoch_mu_);
  return history_.entries();
}

// --- the exclusive writer token --------------------------------------------------------

Result<void> ShardLogImpl::acquire_writer(std::unique_lock<std::mutex>& lk) {
  drained_cv_.wait(lk, [&] { return !scheduled_; });
  if (!failure_.empty())
    return Error(Errc::storage_failure, "shard " + ref_.to_string() + " failed: " + failure_);
  if (state_ != State::open)
    return Error(Errc::unavailable, "shard " + ref_.to_string() + " is closed");
  scheduled_ = true;  // no flush can start (nothing is queued: only a leader queues)
  return {};
}

void ShardLogImpl::release_writer() {
  std::lock_guard lk(mu_);
  scheduled_ = false;
  drained_cv_.notify_all();
}

// --- read_raw ----------------------------------------------------------------------------

Result<RawChunk> ShardLogImpl::read_raw(Offset from_off, std::size_t max_bytes,
                                       std::size_t headroom) {
  const std::uint64_t from = from_off.value();
  std::shared_ptr<Segment> seg;
  std::uint64_t size = 0, pos = 0, end;
  {
    std::lock_guard lk(seg_mu_);
    if (segments_.empty())
      return Error(Errc::unavailable, "shard " + ref_.to_string() + " is closed");
    end = written_end_.load(std::memory_order_acquire);
    const std::uint64_t log_start = segments_.front()->base();
    if (from < log_start)
      return Error(Errc::offset_out_of_range,
                   "offset " + std::to_string(from) + " is before the log start " +
                       std::to_string(log_start) + " of shard " + ref_.to_string());
    if (from > end)
      return Error(Errc::offset_out_of_range,
                   "offset " + std::to_string(from) + " is beyond the written end " +
                       std::to_string(end) + " of shard " + ref_.to_string());
    if (from < end) {
      auto it = std::upper_bound(segments_.begin(), segments_.end(), from,
                                 [](std::uint64_t o, const auto& s) { return o < s->base(); });
      seg = *std::prev(it);
      size = seg->written_size;
      pos = seg->lookup(from);
    }
  }
  RawChunk out;
  out.next_offset = from_off;
  std::optional<Offset> limit;
  {
    std::lock_guard lk(epoch_mu_);
    if (from == end) {
      out.last_epoch = from == 0 ? LeaderEpoch(0) : history_.epoch_at(Offset(from - 1));
      out.bytes.resize(headroom);
      return out;
    }
    out.last_epoch = history_.epoch_at(from_off);
    limit = history_.next_boundary_after(from_off);
  }
  auto corrupt = [&](std::uint64_t at, const char* why) {
    return Error(Errc::corrupt_data, "corrupt batch in " + seg->log_path() + " at byte " +
                                         std::to_string(at) + ": " + why);
  };
  // Find `from` from the nearest index entry (header reads within one index interval).
  for (;;) {
    if (pos + kBatchHeaderSize > size)
      return Error(Errc::invalid_argument, "offset " + std::to_string(from) +
                                               " is not a batch boundary of shard " +
                                               ref_.to_string());
    char hdr[kBatchHeaderSize];
    auto n = seg->file().pread(hdr, sizeof hdr, pos);
    if (!n) return n.error();
    const BatchHeader h = BatchHeader::decode(hdr);
    if (*n != sizeof hdr || h.magic != kBatchMagic || h.length < kBatchHeaderSize ||
        pos + h.length > size)
      return corrupt(pos, "bad header");
    if (h.base_offset == from) break;
    if (h.base_offset > from || h.next_offset() > from)
      return Error(Errc::invalid_argument,
                   "offset " + std::to_string(from) + " is not a batch boundary of shard " +
                       ref_.to_string() + " (the batch at " + std::to_string(h.base_offset) +
                       " holds " + std::to_string(h.record_count) + " records)");
    pos += h.length;
  }
  // One pread of up to max_bytes, behind `headroom` bytes the caller fills in (the fetch
  // answer's header); whole batches of it are the answer.
  std::uint64_t want = std::min<std::uint64_t>(std::max<std::size_t>(max_bytes, kBatchHeaderSize),
                                               size - pos);
  for (int attempt = 0; attempt < 2; ++attempt) {
    out.bytes.resize(headroom + want);
    char* const data = out.bytes.data() + headroom;
    auto n = seg->file().pread(data, want, pos);
    if (!n) return n.error();
    const std::uint64_t got = *n;  // short only if a truncation raced this read
    std::uint64_t at = 0, next = from;
    std::uint32_t first_len = 0;
    while (at + kBatchHeaderSize <= got) {
      const BatchHeader h = BatchHeader::decode(data + at);
      if (h.magic != kBatchMagic || h.length < kBatchHeaderSize || h.base_offset != next)
        return corrupt(pos + at, "bad header");
      if (limit && h.base_offset >= limit->value()) break;  // the next epoch starts here
      if (at == 0) first_len = h.length;
      if (at + h.length > got) break;
      at += h.length;
      next = h.next_offset();
    }
    if (at > 0) {
      out.bytes.resize(headroom + at);
      out.next_offset = Offset(next);
      return out;
    }
    // The first batch alone is larger than max_bytes: read exactly it.
    if (first_len == 0 || pos + first_len > size) return corrupt(pos, "bad header");
    want = first_len;
  }
  return corrupt(pos, "batch changed while read");
}

// --- append_replica ----------------------------------------------------------------------

Result<void> ShardLogImpl::append_replica(std::string_view chunk, Offset expected_base,
                                          LeaderEpoch epoch) {
  if (!replicated_)
    return Error(Errc::not_supported, "shard " + ref_.to_string() + " is not replicated");
  std::lock_guard rl(repl_mu_);
  {
    std::unique_lock lk(mu_);
    if (role_ != Role::follower)
      return Error(Errc::conflict, "shard " + ref_.to_string() +
                                       " is not a follower; it takes no replicated batches");
    if (epoch > epoch_)
      return Error(Errc::conflict, "shard " + ref_.to_string() + ": a chunk of leader epoch " +
                                       epoch_str(epoch) + " is above this follower's epoch " +
                                       epoch_str(epoch_));
    if (auto r = acquire_writer(lk); !r) return r;
  }
  struct Release {
    ShardLogImpl* s;
    ~Release() { s->release_writer(); }
  } release{this};

  std::uint64_t log_end;
  {
    std::lock_guard lk(mu_);
    log_end = next_offset_;
  }
  if (expected_base.value() != log_end)
    return Error(Errc::conflict, "shard " + ref_.to_string() + ": a replicated chunk at offset " +
                                     std::to_string(expected_base.value()) +
                                     " does not continue the log, which ends at " +
                                     std::to_string(log_end));
  if (chunk.empty()) return {};

  // Check every batch: header, CRC, incarnation, contiguity. Header-only after check_batch.
  struct Info {
    std::uint64_t pos, len, base, next;
    std::int64_t max_ts;
    std::uint64_t producer_id, producer_seq;
    std::uint32_t count;
  };
  std::vector<Info> batches;
  std::uint64_t next = log_end;
  for (std::uint64_t at = 0; at < chunk.size();) {
    BatchHeader h;
    const BatchCheck c = check_batch(chunk.data() + at, chunk.size() - at, &h);
    if (c != BatchCheck::ok)
      return Error(c == BatchCheck::truncated ? Errc::invalid_argument : Errc::corrupt_data,
                   "replicated chunk for shard " + ref_.to_string() + " at byte " +
                       std::to_string(at) + ": " + std::string(to_string(c)));
    if (h.incarnation != ref_.incarnation.value())
      return Error(Errc::stale_route, "replicated batch at offset " +
                                          std::to_string(h.base_offset) + " belongs to incarnation " +
                                          std::to_string(h.incarnation) + ", not to shard " +
                                          ref_.to_string());
    if (h.base_offset != next)
      return Error(Errc::conflict, "replicated batch at offset " + std::to_string(h.base_offset) +
                                       " for shard " + ref_.to_string() + " should be at offset " +
                                       std::to_string(next));
    batches.push_back(Info{at, h.length, h.base_offset, h.next_offset(), h.max_timestamp_ms,
                           h.producer_id, h.producer_seq, h.record_count});
    next = h.next_offset();
    at += h.length;
  }

  // A new epoch is durable in the history before any of its data.
  {
    std::vector<EpochEntry> entries = epoch_entries();
    if (!entries.empty() && epoch < entries.back().epoch)
      return Error(Errc::conflict, "shard " + ref_.to_string() + ": a chunk of leader epoch " +
                                       epoch_str(epoch) + " at offset " +
                                       std::to_string(log_end) +
                                       " follows data of the later epoch " +
                                       epoch_str(entries.back().epoch) + "; truncate first");
    if (entries.empty() || epoch > entries.back().epoch) {
      entries.push_back(EpochEntry{epoch, Offset(log_end)});
      LeaderEpoch current;
      {
        std::lock_guard lk(mu_);
        current = epoch_;
      }
      if (auto r = save_history(current, std::move(entries)); !r) return r;
    }
  }

  auto fail = [&](const Error& e) -> Result<void> {
    {
      std::lock_guard lk(mu_);
      if (failure_.empty()) failure_ = e.message;
    }
    host_.log(LogLevel::error, kComponent,
              "shard " + ref_.to_string() + " failed, refusing writes until reopened: " + e.message);
    return Error(Errc::storage_failure, e.message, Outcome::uncertain);
  };

  std::shared_ptr<Segment> seg;
  {
    std::lock_guard lk(seg_mu_);
    seg = segments_.back();
  }
  std::uint64_t run_from = 0;  // chunk position where the current run starts
  std::uint64_t run_at = seg->write_pos;
  bool dirty = false;
  for (const Info& b : batches) {
    if (seg->write_pos > 0 && seg->write_pos + b.len > opts_.segment_bytes) {
      if (dirty) {
        if (auto r = seg->file().pwrite(chunk.data() + run_from, b.pos - run_from, run_at); !r)
          return fail(r.error());
        if (auto r = sync_and_publish(*seg); !r) return fail(r.error());
      }
      if (auto r = roll(b.base); !r) return fail(r.error());
      {
        std::lock_guard lk(seg_mu_);
        seg = segments_.back();
      }
      run_from = b.pos;
      run_at = 0;
      dirty = false;
    }
    if (wants_index_entry(seg->write_pos, seg->last_index_pos, opts_.index_interval_bytes)) {
      seg->pending_index.push_back({static_cast<std::uint32_t>(b.base - seg->base()),
                                    static_cast<std::uint32_t>(seg->write_pos)});
      seg->last_index_pos = seg->write_pos;
    }
    if (b.producer_id != 0) written_producers_.record(b.producer_id, b.producer_seq, b.base, b.count);
    seg->write_pos += b.len;
    seg->pending_next_offset = b.next;
    seg->pending_max_ts = std::max(seg->pending_max_ts, b.max_ts);
    dirty = true;
  }
  if (dirty) {
    if (auto r = seg->file().pwrite(chunk.data() + run_from, chunk.size() - run_from, run_at); !r)
      return fail(r.error());
    if (auto r = sync_and_publish(*seg); !r) return fail(r.error());
  }
  {
    std::lock_guard lk(mu_);
    next_offset_ = next;
    for (const Info& b : batches)
      if (b.producer_id != 0) producers_.record(b.producer_id, b.producer_seq, b.base, b.count);
  }
  std::uint64_t records = 0;
  for (const Info& b : batches) records += b.count;
  appended_records_.fetch_add(records, std::memory_order_relaxed);
  wake_end_waiters();
  return {};
}

// --- truncate_to -------------------------------------------------------------------------

Result<void> ShardLogImpl::truncate_to(Offset end_off) {
  if (!replicated_)
    return Error(Errc::not_supported, "shard " + ref_.to_string() + " is not replicated");
  std::lock_guard rl(repl_mu_);
  {
    std::unique_lock lk(mu_);
    if (role_ == Role::leader)
      return Error(Errc::conflict, "shard " + ref_.to_string() +
                                       " leads in epoch " + epoch_str(epoch_) +
                                       "; a leader never truncates its log");
    if (auto r = acquire_writer(lk); !r) return r;
  }
  struct Release {
    ShardLogImpl* s;
    ~Release() { s->release_writer(); }
  } release{this};
  const std::uint64_t end = end_off.value();

  // Where the cut goes: the batch holding `end` (its base and byte position).
  std::shared_ptr<Segment> seg;
  std::size_t seg_index;
  std::uint64_t pos, size;
  {
    std::lock_guard lk(seg_mu_);
    const std::uint64_t log_start = segments_.front()->base();
    if (end >= durable_end_.load(std::memory_order_acquire)) return {};
    if (end < log_start)
      return Error(Errc::offset_out_of_range,
                   "cannot truncate shard " + ref_.to_string() + " to offset " +
                       std::to_string(end) + ", before its log start " + std::to_string(log_start));
    auto it = std::upper_bound(segments_.begin(), segments_.end(), end,
                               [](std::uint64_t o, const auto& s) { return o < s->base(); });
    seg_index = static_cast<std::size_t>(std::prev(it) - segments_.begin());
    seg = segments_[seg_index];
    pos = seg->lookup(end);
    size = seg->readable_size;
  }
  std::uint64_t cut = seg->base();
  while (pos < size) {
    char hdr[kBatchHeaderSize];
    auto n = seg->file().pread(hdr, sizeof hdr, pos);
    if (!n) return n.error();
    const BatchHeader h = BatchHeader::decode(hdr);
    if (*n != sizeof hdr || h.magic != kBatchMagic || h.length < kBatchHeaderSize)
      return Error(Errc::corrupt_data, "corrupt batch in " + seg->log_path() + " at byte " +
                                           std::to_string(pos) + ": bad header");
    cut = h.base_offset;
    if (h.next_offset() > end) break;
    pos += h.length;
    cut = h.next_offset();
  }
  if (auto r = drop_recovery_point(); !r) return r;  // it may lie beyond the cut
  {
    std::lock_guard lk(mu_);
    const std::uint64_t hwm = hwm_.load(std::memory_order_acquire);
    if (cut < hwm)
      return Error(Errc::conflict, "cannot truncate shard " + ref_.to_string() + " to offset " +
                                       std::to_string(cut) + ": below its high watermark " +
                                       std::to_string(hwm));
    // Lowered first, so the high watermark can never pass the cut while it happens.
    durable_end_.store(cut, std::memory_order_release);
    written_end_.store(cut, std::memory_order_release);
    next_offset_ = cut;
  }

  // In memory: later segments go, the holding one ends at the cut (it is active now).
  std::vector<std::shared_ptr<Segment>> doomed;
  bool had_index;
  {
    std::lock_guard lk(seg_mu_);
    doomed.assign(segments_.begin() + static_cast<std::ptrdiff_t>(seg_index) + 1, segments_.end());
    segments_.resize(seg_index + 1);
    had_index = !doomed.empty();
    seg->readable_size = pos;
    seg->written_size = pos;
    seg->next_offset = cut;
    auto keep = std::find_if(seg->index.begin(), seg->index.end(),
                             [&](const IndexEntry& e) { return e.position >= pos; });
    seg->index.erase(keep, seg->index.end());
  }
  seg->write_pos = pos;
  seg->pending_next_offset = cut;
  seg->pending_index.clear();
  seg->last_index_pos = 0;
  {
    std::lock_guard lk(seg_mu_);
    if (!seg->index.empty()) seg->last_index_pos = seg->index.back().position;
  }
  auto fail = [&](const Error& e) -> Result<void> {
    {
      std::lock_guard lk(mu_);
      if (failure_.empty()) failure_ = e.message;
    }
    host_.log(LogLevel::error, kComponent,
              "shard " + ref_.to_string() + " failed during truncation, refusing writes until "
              "reopened: " + e.message);
    return Error(Errc::storage_failure, e.message);
  };
  // On disk: newest segment first, so a crash leaves a contiguous prefix.
  for (auto it = doomed.rbegin(); it != doomed.rend(); ++it) {
    if (auto r = fs_->remove((*it)->log_path()); !r) return fail(r.error());
    (void)fs_->remove((*it)->index_path());
  }
  if (auto r = seg->file().truncate(pos); !r) return fail(r.error());
  if (auto r = seg->file().datasync(); !r) return fail(r.error());
  if (had_index) (void)fs_->remove(seg->index_path());  // an active segment has no cache
  if (auto r = fs_->sync_dir(log_dir()); !r) return fail(r.error());
  host_.log(LogLevel::info, kComponent,
            "shard " + ref_.to_string() + ": truncated its log to offset " + std::to_string(cut) +
                " (asked for " + std::to_string(end) + "), removing " +
                std::to_string(doomed.size()) + " whole segment(s)");

  if (auto r = rebuild_producers(cut); !r) return fail(r.error());
  {
    std::vector<EpochEntry> entries;
    LeaderEpoch current;
    bool changed;
    {
      std::lock_guard lk(epoch_mu_);
      entries = history_.truncated(Offset(cut));
      changed = entries.size() != history_.entries().size();
      current = history_.current();
    }
    if (changed)
      if (auto r = save_history(current, std::move(entries)); !r) return r;
  }
  return {};
}

// Producer state as of `end` (the log was just cut there): the snapshot on disk if it lies
// within [log start, end], plus every batch header after it; then a new snapshot at `end`.
Result<void> ShardLogImpl::rebuild_producers(std::uint64_t end) {
  const std::string path = log_dir() + "/" + std::string(kProducerSnapshotName);
  std::vector<std::shared_ptr<Segment>> segs;
  {
    std::lock_guard lk(seg_mu_);
    segs = segments_;
  }
  ProducerTable table;
  std::uint64_t from = segs.front()->base();
  if (auto f = fs_->open(path, OpenMode::read_write); f) {
    if (auto bytes = read_whole_file(**f); bytes) {
      std::uint64_t snap_end = 0;
      auto t = ProducerTable::decode_snapshot(*bytes, &snap_end);
      if (t && snap_end <= end && snap_end >= from) {
        table = std::move(t).value();
        from = snap_end;
      }
    }
  }
  for (auto& s : segs) {
    if (s->next_offset <= from && s != segs.back()) continue;
    std::uint64_t pos = 0;
    const std::uint64_t size = s->write_pos;
    while (pos + kBatchHeaderSize <= size) {
      char hdr[kBatchHeaderSize];
      auto n = s->file().pread(hdr, sizeof hdr, pos);
      if (!n) return n.error();
      const BatchHeader h = BatchHeader::decode(hdr);
      if (*n != sizeof hdr || h.magic != kBatchMagic || h.length < kBatchHeaderSize)
        return Error(Errc::corrupt_data, "corrupt batch in " + s->log_path() + " at byte " +
                                             std::to_string(pos) + ": bad header");
      if (h.base_offset >= end) break;
      if (h.producer_id != 0 && h.base_offset >= from)
        table.record(h.producer_id, h.producer_seq, h.base_offset, h.record_count);
      pos += h.length;
    }
  }
  if (auto r = write_producer_snapshot(*fs_, path, table, end); !r) return r;
  if (auto r = fs_->sync_dir(log_dir()); !r) return r;
  snapshot_end_.store(end, std::memory_order_release);
  written_producers_ = table;
  std::lock_guard lk(mu_);
  producers_ = std::move(table);
  return {};
}

}  // namespace sluice::fs_storage
