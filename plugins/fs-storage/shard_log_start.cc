// ShardLogImpl (shard_log.h): where the log starts. Retention deletes whole sealed segments
// from the oldest, and the log start becomes the first remaining segment's base. On a
// replicated shard the log start never passes the high watermark (Kafka's rule): whatever
// retention removes was committed.
#include "shard_log.h"

namespace sluice::fs_storage {

namespace {
constexpr std::string_view kComponent = "fs-storage";
}  // namespace

void ShardLogImpl::set_retention(RetentionPolicy r) {
  std::lock_guard lk(seg_mu_);
  retention_ = r;
}

void ShardLogImpl::apply_retention(std::int64_t now_ms) {
  std::vector<std::shared_ptr<Segment>> doomed;
  std::uint64_t new_start = 0;
  {
    std::lock_guard lk(seg_mu_);
    if (segments_.size() < 2) return;
    std::uint64_t total = 0;
    for (auto& s : segments_) total += s->readable_size;
    std::size_t drop = 0;
    const std::uint64_t snap_end = snapshot_end_.load(std::memory_order_acquire);
    const std::uint64_t hwm = hwm_.load(std::memory_order_acquire);
    while (drop + 1 < segments_.size()) {  // never the active segment
      const auto& s = segments_[drop];
      // Never beyond the producer snapshot: producer state must outlive the data.
      if (segments_[drop + 1]->base() > snap_end) break;
      // Never beyond the high watermark: only committed records expire.
      if (replicated_ && segments_[drop + 1]->base() > hwm) break;
      const bool by_size = retention_.max_bytes >= 0 &&
                           total > static_cast<std::uint64_t>(retention_.max_bytes);
      const bool by_age =
          retention_.max_age_ms >= 0 && s->max_ts < now_ms - retention_.max_age_ms;
      if (!by_size && !by_age) break;
      total -= s->readable_size;
      ++drop;
    }
    if (drop == 0) return;
    doomed.assign(segments_.begin(), segments_.begin() + static_cast<std::ptrdiff_t>(drop));
    segments_.erase(segments_.begin(), segments_.begin() + static_cast<std::ptrdiff_t>(drop));
    new_start = segments_.front()->base();
  }
  // Oldest first: if a removal fails, the remaining files still form a contiguous log
  // (a restart would show the undeleted segments again, never a gap).
  std::size_t removed = 0;
  for (auto& s : doomed) {
    if (auto r = fs_->remove(s->log_path()); !r) {
      host_.log(LogLevel::warn, kComponent, "retention: " + r.error().message);
      break;
    }
    (void)fs_->remove(s->index_path());
    ++removed;
  }
  (void)fs_->sync_dir(log_dir());
  host_.log(LogLevel::info, kComponent,
            "retention: shard " + ref_.to_string() + " deleted " + std::to_string(removed) +
                " segment(s); log start is now " + std::to_string(new_start));
}

}  // namespace sluice::fs_storage
