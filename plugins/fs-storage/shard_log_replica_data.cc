// ShardLogImpl: the replica data path (shard_log.h "Replicated shards"): read_raw on a
// leader, and append_replica, truncate_to and the producer-state rebuild on a follower.
#include <algorithm>

#include "layout.h"
#include "shard_log.h"
#include "sluice/record_batch.h"

namespace sluice::fs_storage {

namespace {
constexpr std::string_view kComponent = "fs-storage";

std::string epoch_str(LeaderEpoch e) { return std::to_string(e.value()); }
}  // namespace

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
                                          LeaderEpoch epoch, std::optional<LeaderEpoch> fetched_in) {
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
    if (fetched_in && *fetched_in != epoch_)
      return Error(Errc::conflict, "shard " + ref_.to_string() + ": a chunk fetched in epoch " +
                                       epoch_str(*fetched_in) + " arrived after this follower moved to epoch " +
                                       epoch_str(epoch_) + " (it may come from a deposed leader); fetching again");
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

  // Check every batch: header, CRC, incarnation, contiguity; no record is walked (the
  // leader walked them when it took the batch, and the CRC proves these are those bytes):
  // a follower copies whole batches with no per-record work (docs/replication.md).
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
    const BatchCheck c = check_batch_frame(chunk.data() + at, chunk.size() - at, &h);
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
    // Entries that start at the log end hold no data: an epoch this replica led without
    // writing anything (become_leader records its start first), or one a crash left behind
    // after truncate_to cut its data. The leader's log goes on there in an earlier epoch
    // (it kept what it wrote before): such entries are dropped, as Kafka's epoch cache drops
    // entries beyond the log end, else every chunk is refused for ever (review finding).
    bool dropped = false;
    while (!entries.empty() && entries.back().epoch > epoch && entries.back().start_offset.value() >= log_end) {
      entries.pop_back();
      dropped = true;
    }
    if (dropped && !entries.empty() && epoch == entries.back().epoch) {
      LeaderEpoch current;
      {
        std::lock_guard lk(mu_);
        current = epoch_;
      }
      if (auto r = save_history(current, entries); !r) return r;
    }
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
    cut_unpublished_tail();  // as after a leader's failed group (shard_log.cc)
    return Error(Errc::storage_failure, e.message, Outcome::uncertain);
  };

  if (!batches.empty() && opts_.preallocate_segments)
    if (auto r = maybe_roll_early(batches.front().base); !r) return fail(r.error());
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
        if (auto r = reserve_through(*seg, run_at + (b.pos - run_from)); !r) return fail(r.error());
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
    if (auto r = reserve_through(*seg, run_at + (chunk.size() - run_from)); !r) return fail(r.error());
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
  release_cache();
  return {};
}

// --- truncate_to -------------------------------------------------------------------------

Result<void> ShardLogImpl::truncate_to(Offset end_off, std::optional<LeaderEpoch> decided_in) {
  if (!replicated_)
    return Error(Errc::not_supported, "shard " + ref_.to_string() + " is not replicated");
  std::lock_guard rl(repl_mu_);
  {
    std::unique_lock lk(mu_);
    if (role_ == Role::leader)
      return Error(Errc::conflict, "shard " + ref_.to_string() +
                                       " leads in epoch " + epoch_str(epoch_) +
                                       "; a leader never truncates its log");
    if (decided_in && *decided_in != epoch_)
      return Error(Errc::conflict, "shard " + ref_.to_string() + ": a cut decided in epoch " +
                                       epoch_str(*decided_in) + " arrived after this follower moved to epoch " +
                                       epoch_str(epoch_) + "; asking the new leader again");
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
  // Refused below the high watermark (checked again under mu_ below); checked first too, so
  // that a refused cut leaves the recovery point and the cut floor (background
  // verification) alone.
  if (cut < hwm_.load(std::memory_order_acquire))
    return Error(Errc::conflict, "cannot truncate shard " + ref_.to_string() + " to offset " +
                                     std::to_string(cut) + ": below its high watermark " +
                                     std::to_string(hwm_.load(std::memory_order_acquire)));
  if (auto r = drop_recovery_point(cut); !r) return r;  // it may lie beyond the cut
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
    seg->preallocated = false;  // the file ends at the cut: writes append from here
    auto keep = std::find_if(seg->index.begin(), seg->index.end(),
                             [&](const IndexEntry& e) { return e.position >= pos; });
    seg->index.erase(keep, seg->index.end());
  }
  seg->write_pos = pos;
  forget_cache_queue();  // the cut segment is active again, and later ones are gone
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
  // On disk: the later segments go first, durably (their directory synced), and only then
  // is the cut segment shortened. In the other order a power cut after the cut's datasync
  // but before the directory's sync brought the removed segments back behind a shorter
  // one: a gap that recovery refuses as damage (until storage.repair), not a torn tail.
  for (auto it = doomed.rbegin(); it != doomed.rend(); ++it) {
    if (auto r = fs_->remove((*it)->log_path()); !r) return fail(r.error());
    (void)fs_->remove((*it)->index_path());
  }
  if (!doomed.empty())
    if (auto r = fs_->sync_dir(log_dir()); !r) return fail(r.error());
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
    // The data is already cut: a history that still names an epoch starting beyond the
    // cut would give the next chunks of that epoch the previous epoch (epoch_at), and the
    // replica would answer epoch-end questions wrongly. Failed until reopened, as for the
    // other steps (recovery drops entries beyond the log end).
    if (changed)
      if (auto r = save_history(current, std::move(entries)); !r) return fail(r.error());
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
