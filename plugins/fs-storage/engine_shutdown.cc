// The engine's shutdown, and the clean-shutdown marker it leaves behind
// (docs/architecture.md "Restart: recovery point and clean-shutdown marker").
#include <set>

#include "engine.h"
#include "group_ops.h"
#include "layout.h"
#include "recovery_point.h"

namespace sluice::fs_storage {

namespace {
constexpr std::string_view kComponent = "fs-storage";
}  // namespace

void FsStorageEngine::shutdown() {
  // Replication first: no fetch is answered or appended once shards start closing.
  if (verifier_) verifier_->stop();
  {
    std::lock_guard lk(manager_mu_);
    if (manager_) manager_->stop();
  }
  {
    std::lock_guard lk(retention_mu_);
    stop_retention_ = true;
    retention_cv_.notify_all();
  }
  if (retention_thread_.joinable()) retention_thread_.join();
  std::vector<std::shared_ptr<ShardLogImpl>> shards;
  bool clean = true;  // every shard closes here, and each writes its clean state
  {
    std::lock_guard lk(mu_);
    if (shut_down_) clean = false;  // a second call: the first one decided
    if (!closing_.empty() || !opening_.empty()) clean = false;
    shut_down_ = true;
    for (auto& [ref, shard] : shards_) {
      closing_.emplace(ref, shard);
      shards.push_back(std::move(shard));
    }
    shards_.clear();
  }
  finish_close(shards);
  {
    // A close_shard or delete running on another thread may still be draining into the pool.
    std::unique_lock lk(mu_);
    closed_cv_.wait(lk, [&] { return closing_.empty() && opening_.empty(); });
  }
  delete_cv_.notify_all();
  pool_.stop();
  for (const auto& sh : shards) clean = clean && sh->closed_clean();
  // A sync that failed in this run may have left pages in the page cache, clean but never
  // written, which only an unclean start reads from disk (docs/architecture.md "A failed
  // sync"); a shard closed earlier in the run is not among `shards`.
  if (clean && fs_->failed_under(opts_.dir)) {
    host_.log(LogLevel::warn, kComponent, "no clean-shutdown marker: a sync failed in this run");
    clean = false;
  }
  if (clean && !took_clean_marker_) clean = drop_cache_of_unopened();
  if (clean) {
    // Only now: every segment (and with checkpoint, .idx, producer snapshot and recovery
    // point) is synced. In every verify mode: a start after a clean stop syncs no tail.
    auto root = fs_->is_directory(opts_.dir);
    if (root && *root)
      if (auto r = write_clean_marker(*fs_, opts_.dir); !r)
        host_.log(LogLevel::warn, kComponent, "no clean-shutdown marker: " + r.error().message);
  }
}

// A run that started without a marker writes one that vouches for every log on disk, also
// for those it never opened (a name deleted before the stream_incarnations finalize keeps
// its data; a copy whose removal failed): an earlier run's failed sync may have left their
// pages in the page cache, clean but never written. An unclean start drops the cache of a
// log's tail before reading it; for these logs that happens here, for every segment (only
// clean pages go: a killed run's dirty ones stay, and the next open syncs a kept tail
// whatever the marker says). False if a log could not be reached: then no marker.
bool FsStorageEngine::drop_cache_of_unopened() {
  auto on_disk = list_on_disk();
  if (!on_disk) return false;
  std::set<ShardRef> opened;
  {
    std::lock_guard lk(mu_);
    opened = opened_this_run_;
  }
  for (const auto& ref : *on_disk) {
    if (opened.count(ref)) continue;
    auto dir = shard_dir(opts_.dir, ref);
    if (!dir) return false;
    for (const std::string& ld : {log_dir(*dir), *dir + "/" + std::string(kGroupLogDir) + "/log"}) {
      auto there = fs_->is_directory(ld);
      if (!there) return false;
      if (!*there) continue;
      auto names = fs_->list(ld);
      if (!names) return false;
      for (const auto& n : *names) {
        if (!n.ends_with(".log")) continue;
        auto f = fs_->open(ld + "/" + n, OpenMode::read_write);
        if (!f) return false;
        (*f)->drop_cache(0, 0);
      }
    }
  }
  return true;
}

}  // namespace sluice::fs_storage
