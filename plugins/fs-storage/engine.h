// FsStorageEngine: the fs-storage implementation of sluice::StorageEngine.
//
// Threads owned by one engine:
//   * FlushPool: storage.flush_threads flushers (default 2) doing all writes and syncs.
//   * retention: one thread, every storage.retention_interval_ms (off if <= 0), calls
//     apply_retention on every open shard; tests call run_retention_once() instead.
//
// Close/open: a closing shard stays in closing_ until close() has drained it; open_shard of
// it waits for that (recovery never runs under a live flusher), shutdown too.
//
// Ownership: the engine owns the map of open shards (shared_ptr; callers may hold theirs
// longer, after close they answer unavailable). `host` must outlive the engine; `fs` is
// shared with every shard.
//
// Concurrency (docs/architecture.md "Storage engine concurrency"): opens and deletes of
// DIFFERENT names run in parallel; operations on the same name are serialized. An open
// registers its shard in opening_ (under mu_) and runs directory creation and recovery
// outside mu_; a second open of the same shard waits for it. A delete registers its Doomed
// in deleting_ after waiting for any other delete of the same name, then waits for the
// opens it covers to finish; opens it covers are refused while it runs.
//
// Delete protocol (delete_incarnations and remove_replica, storage.h), one per name at a time:
//   0. close the open shards of the doomed incarnations, without their clean state (and wait for any close_shard of
//      them still draining); open_shard of them is refused (unavailable) while it runs
//   1. <dir>/.delete-pending/<id>.marker: the relative dirs, written .tmp + fdatasync +
//      rename + directory fsync                      failpoint storage.delete.after_marker
//   2. rename each dir to <dir>/.deleted/<id>/<its position in the marker> (a single dir:
//      to .deleted/<id>), fsync the source parents and the destination parent             failpoint storage.delete.after_move
//   3. remove the marker; fsync .delete-pending/ only for remove_replica (a whole-incarnation
//      marker that comes back is harmless, docs/architecture.md "Durability")
//                                                    failpoint storage.delete.after_unmark
//   4. remove .deleted/<id>/ (garbage, not synced; a failure here is only logged)
//   and, under mu_, the name's directory if it is now empty (not synced)
// At construction, before any shard can open, every marker is finished (its listed dirs
// that still exist are moved, then the marker is removed) and .deleted/ is emptied.
//
// Errors: the constructor throws std::invalid_argument for bad configuration and
// std::runtime_error when an interrupted delete cannot be finished (both startup
// boundaries: serving then could resurrect deleted data). Everything else returns Result.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>
#include <map>
#include <optional>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "background_verify.h"
#include "file_system.h"
#include "flush_pool.h"
#include "replica_manager.h"
#include "options.h"
#include "shard_log.h"
#include "sync_tracking.h"
#include "sluice/host.h"
#include "sluice/storage.h"

namespace sluice::fs_storage {

class FsStorageEngine final : public StorageEngine {
 public:
  // Reads Options::from_host(host).
  FsStorageEngine(PluginHost& host, std::shared_ptr<FileSystem> fs);
  FsStorageEngine(PluginHost& host, std::shared_ptr<FileSystem> fs, Options opts);
  ~FsStorageEngine() override;  // shutdown()

  Result<std::shared_ptr<ShardLog>> open_shard(const ShardRef& ref, const StreamSpec& spec) override;
  // Replicated shards: leads, follows or fences the shard as the catalog says, through the
  // replication manager (started at the first replicated assignment; it needs the host's
  // peer transport). A single replica needs nothing.
  Result<void> assign(const ShardRef& ref, const ReplicaAssignment& assignment) override;
  void close_shard(const ShardRef& ref) override;
  // The open shard itself (null if it is not open), for the replication manager to drive
  // (ShardLogImpl's replication calls; docs/replication.md).
  std::shared_ptr<ShardLogImpl> replica(const ShardRef& ref);
  void shutdown() override;
  Result<std::uint32_t> delete_incarnations(const StreamKey& stream, Incarnation up_to) override;
  // One shard's copy (storage.h), by the same protocol; stops its replication first.
  Result<bool> remove_replica(const ShardRef& ref) override;
  Result<std::vector<ShardRef>> list_on_disk() override;

  // Test seam: called at each delete step (after the failpoint of the same name); returning
  // true stops the delete right there, as a crash would (the call returns internal), so a
  // test can construct a new engine on the state that is left.
  void set_delete_step_hook(std::function<bool(std::string_view step)> hook) {
    delete_step_hook_ = std::move(hook);
  }

  // Applies retention to every open shard now, on the calling thread.
  void run_retention_once();
  // Same, with an explicit clock (ms since epoch) for tests of age retention.
  void run_retention_once(std::int64_t now_ms);

  // How many open_shard calls are waiting for a close of the same shard to finish (tests).
  std::size_t open_waiters() {
    std::lock_guard lk(mu_);
    return open_waiters_;
  }

  const Options& options() const { return opts_; }
  // Background verification, or null (tests).
  BackgroundVerifier* verifier() { return verifier_.get(); }
  // Whether this engine started after a clean shutdown (it took the marker; tests).
  bool clean_start() const { return clean_start_; }
  // Clock of consumer-group deadlines for shards opened from now on (tests).
  void set_group_clock(GroupClock c) { group_clock_ = std::move(c); }
  // Crash-point seam of consumer groups (group.h) for shards opened from now on (tests).
  void set_group_step_hook(GroupStepHook h) { group_step_hook_ = std::move(h); }
  // The directory of a shard incarnation (invalid_name if a name fails validation).
  Result<std::string> shard_directory(const ShardRef& ref) const;

 private:
  Result<void> make_dirs(const std::string& path);  // dir_sync.h, each parent synced at once
  // open_shard's work outside mu_ (the shard is in opening_).
  Result<std::shared_ptr<ShardLogImpl>> open_unlocked(const ShardRef& ref, const StreamSpec& spec,
                                                      const std::string& dir);
  // What the copy's mark in .replicas says at an open (copy_marks.cc; docs/replication.md
  // "A lost shard copy"): a replicated copy that this disk lost (lost-copy then written,
  // durably), or a single replica's mark to write at its first flush. A single replica
  // whose mark outlived its log is refused (corrupt_data) unless storage.repair.
  struct CopyMarks {
    bool copy_lost = false;
    std::string single_mark;
  };
  Result<CopyMarks> check_copy_marks(const ShardRef& ref, const StreamSpec& spec, const std::string& dir,
                                     bool had_log);
  // Marks a single replica whose log holds records and has no mark yet (not synced).
  void adopt_single_mark(const ShardRef& ref, const std::string& mark);
  // A replicated log that recovered to an end below the high watermark it closed with is a
  // lost copy too: says so (lost-copy, durably) and answers true.
  Result<bool> lost_below_high_watermark(const ShardRef& ref, const std::string& dir, Offset hwm_checkpoint,
                                         Offset log_end);
  Result<std::unique_ptr<GroupOps>> open_group_log(const ShardRef& ref,
                                                   const std::string& shard_dir,
                                                   std::uint32_t min_insync);
  void retention_loop();
  // Closes shards already moved from shards_ into closing_ (outside mu_), then removes them
  // from closing_ and wakes open_shard calls waiting for them.
  void finish_close(const std::vector<std::shared_ptr<ShardLogImpl>>& shards);
  // Finishes interrupted deletes and empties .deleted/ (constructor; throws on failure).
  void recover_deletes();
  // sync_unmark: fsync .delete-pending/ after removing the marker (engine_delete.cc).
  Result<void> finish_marker(const std::string& marker_path, const std::string& id,
                             const std::vector<std::string>& rel_dirs, bool sync_unmark);
  bool stop_at(std::string_view step);
  // Background verification (background_verify.h): queues what recovery of `log` skipped;
  // a confirmed corrupt batch is recorded (.corrupt) and stops the node.
  // A log recovered under storage.repair that the .corrupt marker names clears the marker.
  // Under storage.repair: the consumer group whose dead-letter log the .corrupt marker
  // names, if that log lies in `shard_dir`.
  std::optional<std::string> repair_pending_group(const std::string& shard_dir);
  void verify_later(const std::string& what, const std::string& log_dir,
                    const std::shared_ptr<ShardLogImpl>& log, std::vector<UnverifiedRange> ranges);
  void on_corrupt(const std::string& log_dir, const std::string& message);
  std::string unique_id();

  PluginHost& host_;
  // Every file operation goes through it; it remembers failed syncs (sync_tracking.h).
  const std::shared_ptr<SyncTrackingFileSystem> fs_;
  const Options opts_;
  FlushPool pool_;

  std::mutex mu_;  // shards_, closing_, opening_, deleting_, shut_down_; never across I/O
                   // except remove_if_empty's rmdir
  std::map<ShardRef, std::shared_ptr<ShardLogImpl>> shards_;
  // Shards whose close() is still draining (close_shard, delete, shutdown): open_shard of
  // one waits on closed_cv_ until it is gone, so recovery never runs on a directory whose
  // flusher is still writing.
  std::map<ShardRef, std::shared_ptr<ShardLogImpl>> closing_;
  std::condition_variable closed_cv_;
  std::size_t open_waiters_ = 0;  // open_shard calls waiting for a close (tests)
  // Shards whose open_shard is creating directories or recovering (outside mu_); another
  // open of one, a delete covering one, and shutdown wait on closed_cv_ until it is done.
  std::set<ShardRef> opening_;
  bool opening_stream(const StreamKey& k) const;  // under mu_
  bool shut_down_ = false;
  // Deletes in progress: open_shard refuses the shards they cover.
  struct Doomed {
    StreamKey stream;
    Incarnation up_to;                 // every incarnation <= up_to ...
    std::optional<ShardIndex> shard;   // ... or only this shard of incarnation up_to
    bool covers(const ShardRef& r) const {
      if (r.stream != stream) return false;
      return shard ? (r.shard == *shard && r.incarnation == up_to) : r.incarnation <= up_to;
    }
    bool covers_dir(ShardIndex s, Incarnation i) const { return covers(ShardRef{stream, s, i}); }
  };
  // Steps 0-4 of the delete protocol for what `d` covers; answers the directories moved.
  Result<std::uint32_t> delete_doomed(const Doomed& d, const std::string& what);
  // The marks `d` covers that its delete did not move a directory for (copy_marks.cc).
  void remove_orphan_marks(const Doomed& d);
  std::vector<Doomed> deleting_;  // at most one per stream name (same-name deletes wait)
  // Deletes whose durable marker this process could not finish: their shards are not
  // opened again until the marker is finished, by the next delete of the name or the next
  // start.
  struct HalfDeleted {
    Doomed doomed;
    std::string marker, id;
    std::vector<std::string> rel_dirs;
  };
  std::vector<HalfDeleted> half_deleted_;
  std::condition_variable delete_cv_;  // a delete finished (deleting_ shrank)

  std::atomic<std::uint64_t> delete_seq_{0};
  std::function<bool(std::string_view)> delete_step_hook_;
  GroupClock group_clock_;
  GroupStepHook group_step_hook_;
  bool recovering_ = false;  // constructor only: finishing interrupted deletes
  // The constructor took a clean-shutdown marker (storage.verify_on_start=checkpoint):
  // recovery may trust each log's clean state (recovery_point.h).
  bool clean_start_ = false;
  // The constructor found a marker (in any verify mode). Without one, the marker shutdown
  // writes also vouches for the logs this run never opened: their page cache is dropped
  // first (drop_cache_of_unopened; opened_this_run_ is kept only then).
  bool took_clean_marker_ = false;
  std::set<ShardRef> opened_this_run_;  // under mu_
  bool drop_cache_of_unopened();

  // The replication manager, created by the first replicated assign(); stopped first at
  // shutdown. Guarded by manager_mu_ (never taken under mu_).
  std::mutex manager_mu_;
  std::unique_ptr<ReplicaManager> manager_;
  ReplicaManager* manager();  // null before the first replicated open or assign
  // Starts the manager if it is not running (needs the host's peer transport).
  Result<ReplicaManager*> ensure_manager();

  // Null unless storage.verify_in_background and a start mode that skips checks.
  std::unique_ptr<BackgroundVerifier> verifier_;
  // storage.repair: the log the .corrupt marker names, until its recovery (verify_later).
  // Written by the constructor; read and cleared by opens (in parallel). Guarded by repair_mu_.
  std::mutex repair_mu_;
  std::string repair_pending_log_;

  std::mutex retention_mu_;
  std::condition_variable retention_cv_;
  bool stop_retention_ = false;
  std::thread retention_thread_;
};

}  // namespace sluice::fs_storage
