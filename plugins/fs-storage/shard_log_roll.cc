// ShardLogImpl: rolling to a new segment, and the preallocated segments a roll can take
// (storage.preallocate_segments; docs/architecture.md "Preallocated segments").
//
// Why: an fdatasync of a file that grows must also write the new blocks' allocation and the
// inode's size; one into blocks that are already written and synced needs neither. So a busy
// shard's next segment is written ahead as zeros, by the pool's spare thread, and the roll
// renames it into place. The rules that keep this as durable as a growing file:
//   * the spare is synced before the rename, and the rename is synced (roll's sync_dir)
//     before anything is written into it, so after a power cut the segment either does not
//     exist or holds zeros wherever nothing acknowledged was written;
//   * only the last segment may be longer than its batches: roll cuts the old segment back
//     to its end and syncs that before the new one exists, and a clean close cuts the
//     active one. Recovery takes an all-zero rest of the last segment as unwritten space,
//     and anything else after its last whole batch as it always did (recovery.cc).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "flush_pool.h"
#include "layout.h"
#include "shard_log.h"

namespace sluice::fs_storage {

namespace {
constexpr std::string_view kComponent = "fs-storage";
constexpr std::size_t kZeroChunk = 1 << 20;
constexpr std::uint64_t kSyncEvery = 4ull << 20;  // so the zeros reach the disk in steps,
                                                  // not as one burst behind a flusher's sync
constexpr std::uint64_t kSmallGroup = 64 << 10;   // bytes per sync below which a spare pays
constexpr double kMinFillRate = 16.0 * (1 << 20);  // bytes/s
}  // namespace

Result<void> ShardLogImpl::roll(std::uint64_t new_base) {
  std::shared_ptr<Segment> old;
  {
    std::lock_guard lk(seg_mu_);
    old = segments_.back();
  }
  // Seal: the .idx is a cache; failing to write it costs a rebuild at the next start.
  IndexFileContents c{old->base(), old->write_pos, old->pending_next_offset, old->pending_max_ts,
                      {}};
  {
    std::lock_guard lk(seg_mu_);
    c.entries = old->index;
  }
  // A preallocated segment is cut back to its batches, durably, before the next segment
  // exists: only the last segment may hold unwritten space (below).
  if (auto sz = old->file().size(); !sz) {
    return sz.error();
  } else if (*sz > old->write_pos) {
    if (auto r = old->file().truncate(old->write_pos); !r) return r;
    if (auto r = old->file().datasync(); !r) return r;
  }
  if (auto r = write_index_file(*fs_, old->index_path(), c); !r) {
    (void)fs_->remove(old->index_path());
    host_.log(LogLevel::warn, kComponent, "could not write index cache: " + r.error().message);
  }
  const std::string dir = log_dir();
  // Producer state at the boundary (everything below new_base has been written and synced).
  // Like the .idx it can be rebuilt from the log, so a failure is only a warning; retention
  // then keeps the segments above the previous snapshot.
  bool snap_ok = true;
  if (auto r = write_producer_snapshot(*fs_, dir + "/" + std::string(kProducerSnapshotName),
                                       written_producers_, new_base);
      !r) {
    snap_ok = false;
    host_.log(LogLevel::warn, kComponent, "could not write producer snapshot: " + r.error().message);
  }
  const std::string path = dir + "/" + segment_file_name(new_base);
  std::unique_ptr<File> file;
  if (auto spare = take_spare()) {
    // Synced zeros (prepare_spare): the rename is made durable by the sync_dir below. A
    // rename would replace a segment already there, where create_new refuses: refuse too.
    if (auto there = fs_->exists(path); !there || *there)
      return there ? Error(Errc::storage_failure, "segment " + path + " already exists") : there.error();
    if (auto r = fs_->rename(*spare, path); !r) {
      host_.log(LogLevel::warn, kComponent, "could not use the spare segment: " + r.error().message);
    } else {
      auto f = fs_->open(path, OpenMode::read_write);
      if (!f) return f.error();
      file = std::move(f).value();
    }
  }
  const bool preallocated = file != nullptr;
  if (!file) {
    auto f = fs_->open(path, OpenMode::create_new);
    if (!f) return f.error();
    file = std::move(f).value();
  }
  // The new segment's directory entry (and the snapshot's rename) must be durable before
  // any ack depends on it.
  if (auto r = fs_->sync_dir(dir); !r) return r;
  if (snap_ok) snapshot_end_.store(new_base, std::memory_order_release);
  auto seg = std::make_shared<Segment>(new_base, path, dir + "/" + index_file_name(new_base),
                                       std::move(file));
  seg->pending_next_offset = new_base;
  seg->preallocated = preallocated;
  if (opts_.page_cache_window_bytes > 0) {
    cache_sealed_bytes_ += old->write_pos;
    cache_sealed_.push_back({old, old->write_pos});
  }
  std::lock_guard lk(seg_mu_);
  segments_.push_back(std::move(seg));
  return {};
}

namespace {
// A plain active segment moves into a spare once it holds this much (a busy shard), unless
// that is half a segment or more: then the spare waits for the normal roll.
std::uint64_t early_roll_bytes(const Options& o) {
  return std::max<std::uint64_t>(o.segment_bytes / 16, 1 << 20);
}
}  // namespace

void ShardLogImpl::maybe_want_spare(const Segment& seg) {
  if (!opts_.preallocate_segments) return;
  const std::uint64_t half = opts_.segment_bytes / 2;
  if (seg.write_pos < (seg.preallocated ? half : std::min(half, early_roll_bytes(opts_)))) return;
  // Only a shard of small groups gains: a sync into written blocks saves two device round
  // trips (about 100 us here), while the zeros cost one extra write of every byte. At the
  // disk's ~600 MB/s that breaks even near 64 KiB per sync (docs/architecture.md
  // "Preallocated segments").
  if (seg.write_pos < seg.writer_start_pos) return;  // cut below where the writer began
  const std::uint64_t bytes = seg.write_pos - seg.writer_start_pos;
  if (seg.writer_syncs == 0 || bytes / seg.writer_syncs > kSmallGroup) return;
  // Paced to be done when half of what is left of the active segment is written, at this
  // segment's rate so far: a quiet shard's zeros trickle out instead of a burst that its
  // own small syncs would queue behind.
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - seg.writer_start).count();
  const double rate = secs > 0 ? static_cast<double>(bytes) / secs : 0;
  const double left = static_cast<double>(std::max<std::uint64_t>(
      seg.write_pos < opts_.segment_bytes ? opts_.segment_bytes - seg.write_pos : 0, 1 << 20));
  const double fill = rate > 0 ? std::max(kMinFillRate, 2 * rate * static_cast<double>(opts_.segment_bytes) / left) : 0;
  {
    std::lock_guard lk(spare_mu_);
    if (spare_ != Spare::none || spare_closed_) return;
    spare_ = Spare::preparing;
    spare_rate_ = fill;
  }
  pool_.prepare_spare(weak_from_this());
}

bool ShardLogImpl::spare_ready() {
  std::lock_guard lk(spare_mu_);
  return spare_ == Spare::ready;
}

std::optional<std::string> ShardLogImpl::take_spare() {
  std::lock_guard lk(spare_mu_);
  if (spare_ == Spare::failed) spare_ = Spare::none;
  if (spare_ != Spare::ready) return std::nullopt;
  spare_ = Spare::none;
  spare_is_ready_.store(false);
  return spare_path();
}

Result<void> ShardLogImpl::maybe_roll_early(std::uint64_t next_base) {
  if (!spare_is_ready_.load(std::memory_order_relaxed)) return {};
  std::shared_ptr<Segment> seg;
  {
    std::lock_guard lk(seg_mu_);
    seg = segments_.back();
  }
  const std::uint64_t early = early_roll_bytes(opts_);
  if (seg->preallocated || early >= opts_.segment_bytes / 2 || seg->write_pos < early) return {};
  return roll(next_base);
}

void ShardLogImpl::drop_spare() {
  bool ready;
  {
    std::lock_guard lk(spare_mu_);
    spare_closed_ = true;
    spare_abort_.store(true);
    ready = spare_ == Spare::ready;
    if (ready) spare_ = Spare::none;
    spare_is_ready_.store(false);
  }
  // A spare being written is removed by its writer; one never taken goes now (a start
  // removes any *.tmp anyway).
  if (ready) (void)fs_->remove(spare_path());
}

void ShardLogImpl::prepare_spare(const std::atomic<bool>& stop) {
  const std::string path = spare_path();
  auto give_up = [&](const Error* e) {
    (void)fs_->remove(path);
    std::lock_guard lk(spare_mu_);
    spare_ = e ? Spare::failed : Spare::none;
    if (e)
      host_.log(LogLevel::warn, kComponent,
                "shard " + ref_.to_string() + ": no spare segment (the next roll makes a plain one): " +
                    e->message);
  };
  double rate;
  {
    std::lock_guard lk(spare_mu_);
    if (spare_closed_) {
      spare_ = Spare::none;
      return;
    }
    rate = spare_rate_;
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto f = fs_->open(path, OpenMode::create_truncate);
  if (!f) return give_up(&f.error());
  static const std::string zeros(kZeroChunk, '\0');
  std::uint64_t pos = 0;
  while (pos < opts_.segment_bytes) {
    if (stop.load() || spare_abort_.load()) return give_up(nullptr);
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(kZeroChunk, opts_.segment_bytes - pos));
    if (auto r = (*f)->pwrite(zeros.data(), n, pos); !r) return give_up(&r.error());
    pos += n;
    if (pos % kSyncEvery == 0 || pos == opts_.segment_bytes)
      if (auto r = (*f)->datasync(); !r) return give_up(&r.error());
    if (rate > 0 && pos < opts_.segment_bytes)  // at most 1 MiB / kMinFillRate (62 ms)
      std::this_thread::sleep_until(t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                             std::chrono::duration<double>(static_cast<double>(pos) / rate)));
  }
  std::lock_guard lk(spare_mu_);
  if (spare_closed_) {
    spare_ = Spare::none;
    (void)fs_->remove(path);
    return;
  }
  spare_ = Spare::ready;
  spare_is_ready_.store(true);
}

}  // namespace sluice::fs_storage
