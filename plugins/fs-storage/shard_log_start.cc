// ShardLogImpl (shard_log.h): where the log starts. Retention deletes whole sealed segments
// from the oldest, and the log start becomes the first remaining segment's base. On a
// replicated shard the log start never passes the high watermark (Kafka's rule): what
// retention removes was committed, so a follower whose whole log lies below a leader's
// log start may drop it and start over there (restart_at; docs/replication.md "Below the
// leader's log start").
#include "layout.h"
#include "log_restart.h"
#include "shard_log.h"
#include "flush_pool.h"

namespace sluice::fs_storage {

namespace {
constexpr std::string_view kComponent = "fs-storage";
}  // namespace

void ShardLogImpl::set_retention(RetentionPolicy r) {
  std::lock_guard lk(seg_mu_);
  retention_ = r;
}

std::size_t ShardLogImpl::droppable_below(std::uint64_t before) {
  const std::uint64_t snap_end = snapshot_end_.load(std::memory_order_acquire);
  const std::uint64_t hwm = hwm_.load(std::memory_order_acquire);
  std::size_t drop = 0;
  while (drop + 1 < segments_.size()) {  // never the active segment
    const std::uint64_t next_base = segments_[drop + 1]->base();
    if (next_base > before) break;
    // Never beyond the producer snapshot: producer state must outlive the data.
    if (next_base > snap_end) break;
    // Never beyond the high watermark: only committed records go.
    if (replicated_ && next_base > hwm) break;
    ++drop;
  }
  return drop;
}

std::uint64_t ShardLogImpl::drop_front_segments(const std::function<std::size_t()>& how_many,
                                                std::string_view why) {
  std::vector<std::shared_ptr<Segment>> doomed;
  std::uint64_t new_start = 0;
  {
    std::lock_guard lk(seg_mu_);
    const std::size_t drop = segments_.empty() ? 0 : how_many();
    if (drop == 0) return segments_.empty() ? 0 : segments_.front()->base();
    doomed.assign(segments_.begin(), segments_.begin() + static_cast<std::ptrdiff_t>(drop));
    segments_.erase(segments_.begin(), segments_.begin() + static_cast<std::ptrdiff_t>(drop));
    new_start = segments_.front()->base();
  }
  // Oldest first: if a removal fails, the remaining files still form a contiguous log
  // (a restart would show the undeleted segments again, never a gap).
  std::size_t removed = 0;
  for (auto& s : doomed) {
    if (auto r = fs_->remove(s->log_path()); !r) {
      host_.log(LogLevel::warn, kComponent, std::string(why) + ": " + r.error().message);
      break;
    }
    (void)fs_->remove(s->index_path());
    ++removed;
  }
  if (auto r = fs_->sync_dir(log_dir()); !r)
    host_.log(LogLevel::warn, kComponent, std::string(why) + ": " + r.error().message);
  host_.log(LogLevel::info, kComponent,
            std::string(why) + ": shard " + ref_.to_string() + " deleted " + std::to_string(removed) +
                " segment(s); log start is now " + std::to_string(new_start));
  return new_start;
}

void ShardLogImpl::apply_retention(std::int64_t now_ms) {
  (void)drop_front_segments(
      [&]() -> std::size_t {
        if (segments_.size() < 2) return 0;
        std::uint64_t total = 0;
        for (auto& s : segments_) total += s->readable_size;
        const std::size_t limit = droppable_below(UINT64_MAX);
        std::size_t drop = 0;
        while (drop < limit) {
          const auto& s = segments_[drop];
          const bool by_size = retention_.max_bytes >= 0 &&
                               total > static_cast<std::uint64_t>(retention_.max_bytes);
          const bool by_age =
              retention_.max_age_ms >= 0 && s->max_ts < now_ms - retention_.max_age_ms;
          if (!by_size && !by_age) break;
          total -= s->readable_size;
          ++drop;
        }
        return drop;
      },
      "retention");
}

Result<Offset> ShardLogImpl::trim_before(Offset before) {
  {
    std::lock_guard lk(mu_);
    if (!failure_.empty())
      return Error(Errc::storage_failure, "shard " + ref_.to_string() + " failed: " + failure_);
    if (state_ != State::open)
      return Error(Errc::unavailable, "shard " + ref_.to_string() + " is closed");
  }
  return Offset(drop_front_segments([&] { return droppable_below(before.value()); }, "trim"));
}

Result<Offset> ShardLogImpl::roll_segment() {
  std::lock_guard rl(repl_mu_);  // no role change or follower write meanwhile
  {
    std::unique_lock lk(mu_);
    if (replicated_ && role_ != Role::leader)
      return Error(Errc::not_leader, "shard " + ref_.to_string() + " does not lead; only its leader rolls");
    if (auto r = acquire_writer(lk); !r) return r.error();
  }
  // Holding the flusher's token: no flush runs; appends arriving now queue up and are
  // flushed (into the new segment) when the token is released.
  Result<Offset> out = Offset(0);
  std::shared_ptr<Segment> active;
  {
    std::lock_guard lk(seg_mu_);
    active = segments_.back();
  }
  if (active->write_pos == 0) {
    out = Offset(active->base());
  } else if (auto r = roll(active->pending_next_offset); !r) {
    {
      std::lock_guard lk(mu_);
      if (failure_.empty()) failure_ = r.error().message;
    }
    host_.log(LogLevel::error, kComponent,
              "shard " + ref_.to_string() + " failed to roll its segment, refusing appends until reopened: " +
                  r.error().message);
    out = Error(Errc::storage_failure, r.error().message);
  } else {
    out = Offset(active->pending_next_offset);
  }
  bool schedule = false;
  {
    std::lock_guard lk(mu_);
    scheduled_ = schedule = !queue_.empty();
    drained_cv_.notify_all();
  }
  if (schedule) pool_.schedule(shared_from_this());
  return out;
}

Result<void> ShardLogImpl::restart_at(Offset start_off, std::optional<LeaderEpoch> decided_in) {
  if (!replicated_)
    return Error(Errc::not_supported, "shard " + ref_.to_string() + " is not replicated");
  std::lock_guard rl(repl_mu_);
  {
    std::unique_lock lk(mu_);
    if (role_ == Role::leader)
      return Error(Errc::conflict, "shard " + ref_.to_string() + " leads in epoch " +
                                       std::to_string(epoch_.value()) +
                                       "; a leader never starts its log over");
    if (decided_in && *decided_in != epoch_)
      return Error(Errc::conflict, "shard " + ref_.to_string() + ": a restart decided in epoch " +
                                       std::to_string(decided_in->value()) +
                                       " arrived after this follower moved to epoch " +
                                       std::to_string(epoch_.value()) + "; fetching again");
    if (auto r = acquire_writer(lk); !r) return r;
  }
  struct Release {
    ShardLogImpl* s;
    ~Release() { s->release_writer(); }
  } release{this};
  const std::uint64_t start = start_off.value();
  const std::uint64_t end = durable_end_.load(std::memory_order_acquire);
  const std::uint64_t old_start = log_start().value();
  if (start < end)
    return Error(Errc::conflict, "cannot start the log of shard " + ref_.to_string() +
                                     " over at offset " + std::to_string(start) +
                                     ": it ends at " + std::to_string(end) +
                                     ", beyond that offset");
  if (start == end && old_start == start) return {};  // already empty, starting there

  const std::string dir = log_dir();
  if (auto r = drop_recovery_point(0); !r) return r;  // it names segments that go
  // The commit point (log_restart.h): until the marker is durable the old log stands.
  if (auto r = write_restart_marker(*fs_, dir, start_off); !r) {
    Error e = r.error();
    e.message = "shard " + ref_.to_string() + ": cannot start its log over at offset " +
                std::to_string(start) + ": " + e.message;
    return e;
  }
  auto fail = [&](const Error& e) -> Result<void> {
    {
      std::lock_guard lk(mu_);
      if (failure_.empty()) failure_ = e.message;
    }
    host_.log(LogLevel::error, kComponent,
              "shard " + ref_.to_string() + " failed while starting its log over at offset " +
                  std::to_string(start) + ", refusing writes until reopened (which finishes "
                  "it): " + e.message);
    return Error(Errc::storage_failure, e.message);
  };
  if (auto r = drop_below(*fs_, dir, start_off); !r) return fail(r.error());
  const std::string path = dir + "/" + segment_file_name(start);
  auto f = fs_->open(path, OpenMode::read_write);
  if (!f) return fail(f.error());
  // An empty segment left at `start` (a cut at a segment boundary) may hold unsynced bytes.
  if (auto r = (*f)->truncate(0); !r) return fail(r.error());
  if (auto r = (*f)->datasync(); !r) return fail(r.error());
  auto seg = std::make_shared<Segment>(start, path, dir + "/" + index_file_name(start),
                                       std::move(f).value());
  seg->pending_next_offset = start;

  // In memory: the old segments go (readers finish on their open files); the log, its
  // durable end and its high watermark all start at `start`.
  {
    std::lock_guard lk(seg_mu_);
    segments_.clear();
    segments_.push_back(std::move(seg));
    durable_end_.store(start, std::memory_order_release);
    written_end_.store(start, std::memory_order_release);
    hwm_.store(start, std::memory_order_release);
  }
  forget_cache_queue();  // the old segments are gone
  written_producers_ = ProducerTable();
  snapshot_end_.store(start, std::memory_order_release);
  {
    std::lock_guard lk(mu_);
    next_offset_ = start;
    acked_end_ = start;
    producers_ = ProducerTable();
  }
  // The history claims no epoch for offsets the log no longer holds.
  if (!epoch_entries().empty()) {
    LeaderEpoch current;
    {
      std::lock_guard lk(epoch_mu_);
      current = history_.current();
    }
    if (auto r = save_history(current, {}); !r) return fail(r.error());
  }
  if (auto r = remove_restart_marker(*fs_, dir); !r) return fail(r.error());
  host_.log(LogLevel::info, kComponent,
            "shard " + ref_.to_string() + ": started its log over at offset " +
                std::to_string(start) + ", dropping what it held, [" +
                std::to_string(old_start) + ", " + std::to_string(end) + ")");
  wake_waiters();
  wake_end_waiters();
  return {};
}

}  // namespace sluice::fs_storage
