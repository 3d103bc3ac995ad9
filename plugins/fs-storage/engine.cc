#include "engine.h"

#include <pthread.h>
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <stdexcept>

#include "dir_sync.h"
#include "layout.h"
#include "log_restart.h"
#include "recovery.h"
#include "recovery_point.h"
#include "shard_replica_log.h"
#include "sluice/failpoint.h"
#include "sluice/features.h"
#include "sluice/names.h"
#include "sluice/record_batch.h"

namespace sluice::fs_storage {

namespace {
constexpr std::string_view kComponent = "fs-storage";

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

FsStorageEngine::FsStorageEngine(PluginHost& host, std::shared_ptr<FileSystem> fs)
    : FsStorageEngine(host, std::move(fs), Options::from_host(host)) {}

FsStorageEngine::FsStorageEngine(PluginHost& host, std::shared_ptr<FileSystem> fs, Options opts)
    : host_(host),
      fs_(std::make_shared<SyncTrackingFileSystem>(std::move(fs))),
      opts_(std::move(opts)),
      pool_(opts_.flush_threads) {
  if (opts_.fsync == FsyncPolicy::never)
    host_.log(LogLevel::warn, kComponent,
              "storage.fsync=never: acknowledgements do NOT imply durability (benchmarks only)");
  // A corrupt batch found by an earlier run's background verification stops every start
  // until an operator repairs (docs/architecture.md "Restart: background verification").
  if (auto corrupt = read_corrupt_marker(*fs_, opts_.dir); !corrupt) {
    throw std::runtime_error("cannot read " + opts_.dir + "/" + std::string(kCorruptMarkerName) + ": " +
                             corrupt.error().message);
  } else if (*corrupt && !opts_.repair) {
    // "corrupt_data: ": sluiced exits 3 (needs an operator; docs/plugin-sdk.md).
    throw std::runtime_error(
        "corrupt_data: refusing to start: an earlier run found a " + (*corrupt)->message + " (" + opts_.dir + "/" +
        std::string(kCorruptMarkerName) +
        "); start once with storage.repair=true to cut that log at the corrupt batch (records "
        "from it on are lost from this replica), or replace the file");
  } else if (*corrupt) {
    // Removed once that log was recovered under repair (open_unlocked), or now if it is gone
    // (the stream was deleted): a repair start that never gets there leaves it in place.
    auto there = (*corrupt)->log_dir.empty() ? Result<bool>(false) : fs_->is_directory((*corrupt)->log_dir);
    host_.log(LogLevel::warn, kComponent,
              "storage.repair: every log is checked in full; the earlier finding was: " + (*corrupt)->message);
    if (there && !*there) {
      if (auto r = remove_corrupt_marker(*fs_, opts_.dir); !r)
        throw std::runtime_error("cannot remove " + opts_.dir + "/" + std::string(kCorruptMarkerName) +
                                 ": " + r.error().message);
    } else {
      repair_pending_log_ = (*corrupt)->log_dir;
    }
  }
  // Before anything is written (docs/architecture.md "Restart"): the marker of the last clean
  // shutdown is taken durably, so a crash from here on never finds a stale one.
  auto clean = take_clean_marker(*fs_, opts_.dir);
  if (!clean)
    throw std::runtime_error("cannot remove the clean-shutdown marker in " + opts_.dir + ": " +
                             clean.error().message);
  took_clean_marker_ = *clean;
  clean_start_ = *clean && opts_.verify_on_start == VerifyOnStart::checkpoint;
  if (clean_start_)
    host_.log(LogLevel::info, kComponent,
              "clean shutdown: shards open from their recovery points without reading segments");
  recover_deletes();  // before any shard can open
  if (opts_.verify_in_background && opts_.verify_on_start != VerifyOnStart::all)
    verifier_ = std::make_unique<BackgroundVerifier>(
        host_, opts_.verify_bytes_per_sec,
        [this](const std::string& log_dir, const std::string& message) { on_corrupt(log_dir, message); });
  if (opts_.retention_interval_ms > 0)
    retention_thread_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "retention");
      retention_loop();
    });
}

FsStorageEngine::~FsStorageEngine() { shutdown(); }

void FsStorageEngine::on_corrupt(const std::string& log_dir, const std::string& message) {
  host_.log(LogLevel::error, kComponent, "background verification: " + message);
  if (auto r = write_corrupt_marker(*fs_, opts_.dir, CorruptMarker{log_dir, message}); !r)
    host_.log(LogLevel::error, kComponent,
              "could not record the finding in " + opts_.dir + "/" + std::string(kCorruptMarkerName) +
                  ": " + r.error().message);
  host_.stop_node("storage: " + message +
                  "; every later start refuses until one runs with storage.repair=true "
                  "(docs/operations.md \"Recovery and corruption\")");
}

void FsStorageEngine::verify_later(const std::string& what, const std::string& log_dir,
                                   const std::shared_ptr<ShardLogImpl>& log,
                                   std::vector<UnverifiedRange> ranges) {
  // A repair start checked this log in full (verify_on_start=all): the finding is dealt with.
  {
    std::lock_guard lk(repair_mu_);
    if (!repair_pending_log_.empty() && log_dir == repair_pending_log_) {
      if (auto r = remove_corrupt_marker(*fs_, opts_.dir); !r) {
        host_.log(LogLevel::error, kComponent,
                  "cannot remove " + opts_.dir + "/" + std::string(kCorruptMarkerName) + ": " + r.error().message);
      } else {
        host_.log(LogLevel::info, kComponent,
                  "storage.repair: " + log_dir + " was checked in full; removed " + std::string(kCorruptMarkerName));
        repair_pending_log_.clear();
      }
    }
  }
  if (!verifier_ || ranges.empty()) return;
  VerifyJob job;
  job.what = what;
  job.log_dir = log_dir;
  job.incarnation = log->ref().incarnation;
  job.ranges = std::move(ranges);
  job.stands = [w = std::weak_ptr<ShardLogImpl>(log)](std::uint64_t offset) {
    auto l = w.lock();
    return l && offset < l->cut_floor() && offset >= l->log_start().value();
  };
  verifier_->add(std::move(job));
}

std::optional<std::string> FsStorageEngine::repair_pending_group(const std::string& shard_dir) {
  std::lock_guard lk(repair_mu_);
  const std::string head = shard_dir + "/groups/", tail = "/dead-letters/log";
  const std::string& p = repair_pending_log_;
  if (p.size() <= head.size() + tail.size() || !p.starts_with(head) || !p.ends_with(tail)) return std::nullopt;
  std::string name = p.substr(head.size(), p.size() - head.size() - tail.size());
  if (name.find('/') != std::string::npos) return std::nullopt;
  return name;
}

Result<std::string> FsStorageEngine::shard_directory(const ShardRef& ref) const {
  return shard_dir(opts_.dir, ref);
}

Result<void> FsStorageEngine::make_dirs(const std::string& path) {
  return fs_storage::make_dirs(*fs_, path);
}

bool FsStorageEngine::opening_stream(const StreamKey& k) const {
  return std::any_of(opening_.begin(), opening_.end(),
                     [&](const ShardRef& r) { return r.stream == k; });
}

namespace {
// A new single-replica log: its first segment, created without syncing <log dir> and
// without a producer snapshot (an empty log has no producers; recovery without a
// snapshot scans from offset 0, which for an empty log reads nothing). The caller defers
// the directory syncs to the first acknowledgement (docs/architecture.md "Deferred
// directory syncs of a new shard").
Result<RecoveredLog> fresh_log(FileSystem& fs, const std::string& ldir) {
  const std::string path = ldir + "/" + segment_file_name(0);
  auto f = fs.open(path, OpenMode::create_new);
  if (!f) return f.error();
  RecoveredLog out;
  out.segments.push_back(
      std::make_shared<Segment>(0, path, ldir + "/" + index_file_name(0), std::move(f).value()));
  out.next_offset = 0;
  out.snapshot_end = 0;
  return out;
}
}  // namespace

Result<std::shared_ptr<ShardLog>> FsStorageEngine::open_shard(const ShardRef& ref,
                                                              const StreamSpec& spec) {
  auto dir = shard_dir(opts_.dir, ref);
  if (!dir) return dir.error();
  // A replicated shard's peers may fetch as soon as they learn of it: answer them from the
  // start (assign() reports a node without a peer transport).
  if (spec.replication_factor > 1) (void)ensure_manager();
  std::unique_lock lk(mu_);
  // A close of this shard still draining, or another open of it in progress: wait.
  if (closing_.count(ref) || opening_.count(ref)) {
    ++open_waiters_;
    closed_cv_.wait(lk, [&] { return !closing_.count(ref) && !opening_.count(ref); });
    --open_waiters_;
  }
  if (shut_down_) return Error(Errc::unavailable, "storage engine is shut down");
  for (const auto& d : deleting_)
    if (d.covers(ref))
      return Error(Errc::unavailable, "shard " + ref.to_string() + " is being deleted");
  for (const auto& h : half_deleted_)
    if (h.doomed.covers(ref))
      return Error(Errc::storage_failure, "shard " + ref.to_string() +
                                              " is being deleted (a delete failed after its marker was written; "
                                              "the next start finishes it)");
  // A failed sync is never retried as if it had worked (sync_tracking.h).
  if (auto failed = fs_->failed_under(*dir))
    return Error(Errc::storage_failure,
                 "shard " + ref.to_string() + " cannot be opened again in this process: a sync of " + *failed +
                     " failed, and the kernel may keep its unwritten pages as if they were written (a later "
                     "sync would succeed without writing them). Check the disk, then restart sluiced: its "
                     "recovery reads the log's tail from disk");
  if (auto it = shards_.find(ref); it != shards_.end()) {
    it->second->set_retention(spec.retention);
    return std::shared_ptr<ShardLog>(it->second);
  }
  // Directory creation and recovery run outside mu_: opens and deletes of other names
  // proceed meanwhile; this shard's other opens, and deletes covering it, wait.
  opening_.insert(ref);
  lk.unlock();
  auto made = open_unlocked(ref, spec, *dir);
  lk.lock();
  if (made && shut_down_) {
    lk.unlock();
    (*made)->close();
    lk.lock();
    made = Error(Errc::unavailable, "storage engine is shut down");
  }
  opening_.erase(ref);
  if (made) shards_.emplace(ref, *made);
  if (made && !took_clean_marker_) opened_this_run_.insert(ref);
  closed_cv_.notify_all();
  if (!made) return made.error();
  return std::shared_ptr<ShardLog>(std::move(made).value());
}

Result<std::shared_ptr<ShardLogImpl>> FsStorageEngine::open_unlocked(const ShardRef& ref,
                                                                     const StreamSpec& spec,
                                                                     const std::string& dir) {
  const std::string ldir = log_dir(dir);
  // A single replica acknowledges only what its own flusher synced, so the entries of the
  // directories created here can wait for that flush (docs/architecture.md "Deferred
  // directory syncs of a new shard"); a replicated shard syncs them now (its epoch history
  // and group log are written before any append).
  const bool defer = spec.replication_factor <= 1;
  DirSyncList deferred;
  auto had_log = fs_->is_directory(ldir);
  if (!had_log) return had_log.error();
  // Every directory from the data root down to log/, whoever created it: an ancestor may
  // have been created by another shard's open (a multi-shard stream, the first stream of a
  // namespace) or by an earlier open of this one, whose deferred syncs never ran (no
  // acknowledgement before a close or a process restart). Syncing the whole chain before
  // the first acknowledgement makes each entry on the path durable; a single replica does
  // it once per open of a shard that is appended to, a replicated one now (so a replicated
  // shard opened beside a never-appended single-replica one does not rest on that one's
  // unsynced entries).
  // The data root's own entry too (its parent): the root is created by the first open.
  for (std::string p = ldir; p.size() >= opts_.dir.size(); p = parent_dir(p)) {
    deferred.add(p);
    if (p == opts_.dir || p == "/" || p == ".") break;
  }
  deferred.add(parent_dir(opts_.dir));
  // The copy's mark in .replicas (copy_marks.cc): a lost copy, or a single replica whose
  // log is gone (refused unless storage.repair accepts the loss).
  auto marks = check_copy_marks(ref, spec, dir, *had_log);
  if (!marks) return marks.error();
  const bool copy_lost = marks->copy_lost;
  std::string single_mark = std::move(marks->single_mark);
  if (auto r = fs_storage::make_dirs(*fs_, ldir, &deferred); !r) return r.error();
  if (!defer) {
    if (auto r = deferred.sync(*fs_); !r) return r.error();
  }
  ReplicaSetup replica;
  replica.copy_lost = copy_lost;
  if (spec.replication_factor > 1) {
    // Before anything else: the epochs this replica has acted in (persistent fencing).
    auto history = EpochHistory::load(*fs_, dir);
    if (!history) {
      host_.log(LogLevel::error, kComponent,
                "cannot open shard " + ref.to_string() + ": " + history.error().message);
      return history.error();
    }
    replica.replicated = true;
    replica.min_insync = spec.min_insync;
    replica.history = std::move(history).value();
    replica.hwm_checkpoint = read_hwm_checkpoint(*fs_, dir).value_or(Offset(0));
  }
  Result<RecoveredLog> recovered = Error(Errc::internal, "not recovered");
  if (defer && !*had_log) {
    recovered = fresh_log(*fs_, ldir);
    deferred.add(ldir);  // the first segment's entry
  } else {
    recovered = recover_log(*fs_, host_, opts_, ldir, ref.incarnation, clean_start_);
  }
  if (!recovered) {
    host_.log(LogLevel::error, kComponent,
              "cannot open shard " + ref.to_string() + ": " + recovered.error().message);
    return recovered.error();
  }
  if (replica.replicated && !replica.copy_lost) {
    auto below = lost_below_high_watermark(ref, dir, replica.hwm_checkpoint, Offset(recovered->next_offset));
    if (!below) return below.error();
    replica.copy_lost = *below;
  }
  // Recovery may have cut a torn tail below an entry that was written before its data.
  if (replica.replicated) replica.history.forget_beyond(Offset(recovered->next_offset));
  if (recovered->restarted_at)
    if (auto r = finish_restart(*fs_, host_, "shard " + ref.to_string(), dir, ldir,
                                *recovered->restarted_at,
                                replica.replicated ? &replica.history : nullptr);
        !r) {
      host_.log(LogLevel::error, kComponent,
                "cannot open shard " + ref.to_string() + ": " + r.error().message);
      return r.error();
    }
  // The recovered tail was just synced; the directory entries leading to it may be as
  // unsynced as it was (a new shard killed before its first flush): synced now too.
  if (recovered->kept_unsynced_tail && !deferred.empty()) {
    if (auto r = deferred.sync(*fs_); !r) {
      host_.log(LogLevel::error, kComponent, "cannot open shard " + ref.to_string() + ": " + r.error().message);
      return r.error();
    }
    deferred = DirSyncList{};
  }
  // A single replica whose log holds records but has no mark (an older build's, or one not
  // appended to since this build first opened it) is marked now (copy_marks.cc).
  // Not with storage.fsync=never: nothing ever makes its directory entries durable.
  if (!single_mark.empty() && *had_log && recovered->next_offset > 0 && opts_.fsync != FsyncPolicy::never) {
    adopt_single_mark(ref, single_mark);
    single_mark.clear();
  }
  auto unverified = std::move(recovered->unverified);
  auto shard = std::make_shared<ShardLogImpl>(ref, spec.retention, dir, opts_, fs_, host_, pool_,
                                              std::move(recovered).value(), std::move(replica));
  verify_later("shard " + ref.to_string(), ldir, shard, std::move(unverified));
  if (!deferred.empty()) shard->defer_dir_syncs(std::move(deferred), std::move(single_mark));
  if (group_clock_) shard->set_group_clock(group_clock_);
  if (group_step_hook_) shard->set_group_step_hook(group_step_hook_);
  shard->set_verify_later([this](const std::string& what, const std::string& log_dir,
                                 const std::shared_ptr<ShardLogImpl>& log, std::vector<UnverifiedRange> ranges) {
    verify_later(what, log_dir, log, std::move(ranges));
  });
  if (shard->replicated()) {
    auto ops = open_group_log(ref, dir, spec.min_insync);
    if (!ops) {
      shard->close();
      return ops.error();
    }
    shard->attach_group_ops(std::move(ops).value());
  }
  // A repair start whose .corrupt marker names a dead-letter log of this shard opens that
  // group now: groups open lazily, and its recovery (a full check under repair) is what
  // clears the marker (verify_later).
  if (auto g = repair_pending_group(dir)) {
    if (auto r = shard->open_group(*g); !r)
      host_.log(LogLevel::error, kComponent,
                "storage.repair: cannot open group " + *g + " of shard " + ref.to_string() + ": " +
                    r.error().message);
  }
  return shard;
}

// <shard dir>/group-log: the consumer groups' op log, a replicated log of its own with its
// own leader-epoch history and high-watermark checkpoint (group_ops.h).
Result<std::unique_ptr<GroupOps>> FsStorageEngine::open_group_log(const ShardRef& ref,
                                                                  const std::string& shard_dir,
                                                                  std::uint32_t min_insync) {
  const std::string gdir = shard_dir + "/" + std::string(kGroupLogDir);
  if (auto r = make_dirs(gdir + "/log"); !r) return r.error();
  auto fail = [&](const Error& e) {
    host_.log(LogLevel::error, kComponent,
              "cannot open the group log of shard " + ref.to_string() + ": " + e.message);
    return e;
  };
  ReplicaSetup replica;
  auto history = EpochHistory::load(*fs_, gdir);
  if (!history) return fail(history.error());
  replica.replicated = true;
  replica.min_insync = min_insync;
  replica.history = std::move(history).value();
  replica.hwm_checkpoint = read_hwm_checkpoint(*fs_, gdir).value_or(Offset(0));
  auto recovered = recover_log(*fs_, host_, opts_, gdir + "/log", ref.incarnation, clean_start_);
  if (!recovered) return fail(recovered.error());
  replica.history.forget_beyond(Offset(recovered->next_offset));
  if (recovered->restarted_at)
    if (auto r = finish_restart(*fs_, host_, "the group log of shard " + ref.to_string(), gdir,
                                gdir + "/log", *recovered->restarted_at, &replica.history);
        !r)
      return fail(r.error());
  // The recovered tail was just synced; its directory entries too (the shard's own chain
  // is synced by the data log's open).
  if (recovered->kept_unsynced_tail) {
    DirSyncList dirs;
    dirs.add(gdir + "/log");
    dirs.add(gdir);
    dirs.add(parent_dir(gdir));
    if (auto r = dirs.sync(*fs_); !r) return fail(r.error());
  }
  auto unverified = std::move(recovered->unverified);
  auto log = std::make_shared<ShardLogImpl>(ref, RetentionPolicy{}, gdir, opts_, fs_, host_, pool_,
                                            std::move(recovered).value(), std::move(replica));
  verify_later("the group log of shard " + ref.to_string(), gdir + "/log", log, std::move(unverified));
  return std::make_unique<GroupOps>(std::move(log), gdir, fs_, host_);
}

std::shared_ptr<ShardLogImpl> FsStorageEngine::replica(const ShardRef& ref) {
  std::lock_guard lk(mu_);
  auto it = shards_.find(ref);
  return it == shards_.end() ? nullptr : it->second;
}

ReplicaManager* FsStorageEngine::manager() {
  std::lock_guard lk(manager_mu_);
  return manager_.get();
}

Result<ReplicaManager*> FsStorageEngine::ensure_manager() {
  std::lock_guard lk(manager_mu_);
  if (manager_) return manager_.get();
  auto* transport = host_.peer_transport();
  if (!transport)
    return Error(Errc::not_supported, "replicated shards need a peer transport, and this node has none");
  ReplicaOptions ro;
  ro.max_lag = std::chrono::milliseconds(opts_.replication_max_lag_ms);
  ro.fetch_wait = std::chrono::milliseconds(opts_.replication_fetch_wait_ms);
  ro.fetch_max_bytes = static_cast<std::uint32_t>(opts_.replication_fetch_max_bytes);
  ro.quorum_timeout = std::chrono::milliseconds(opts_.replication_quorum_timeout_ms);
  ro.workers = opts_.replication_workers;
  ro.lost_copy_fetch = [this] { return host_.feature_finalized(kLostCopyFetch); };
  auto mgr = std::make_unique<ReplicaManager>(
      *transport, host_.node_id(), host_.directory_id(),
      [this](const ShardUpdate& u) { return host_.update_shard(u); },
      [this](LogLevel l, std::string_view msg) { host_.log(l, "replication", msg); }, ro);
  if (auto r = mgr->start(); !r) return r.error();
  manager_ = std::move(mgr);
  return manager_.get();
}

Result<void> FsStorageEngine::assign(const ShardRef& ref, const ReplicaAssignment& a) {
  auto shard = replica(ref);
  if (!shard) return Error(Errc::not_found, "shard " + ref.to_string() + " is not open here");
  if (!shard->replicated()) {
    if (a.replicas.size() <= 1) return {};
    return Error(Errc::invalid_argument, "shard " + ref.to_string() + " was opened with one replica, but the "
                                         "catalog names " + std::to_string(a.replicas.size()));
  }
  auto m = ensure_manager();
  if (!m) return m.error();
  shard->set_quorum_timeout(std::chrono::milliseconds(opts_.replication_quorum_timeout_ms));
  shard->set_progress_source([mgr = *m, ref] { return mgr->progress(ref); });
  if (auto r = (*m)->assign(std::make_shared<ShardReplicaLog>(shard), a); !r) return r;
  // The group log plays the same role under the same assignment.
  auto* ops = shard->group_ops();
  if (!ops) return {};
  ops->log()->set_quorum_timeout(std::chrono::milliseconds(opts_.replication_quorum_timeout_ms));
  return (*m)->assign(std::make_shared<ShardReplicaLog>(ops->log(), shard), a, LogKind::groups);
}

void FsStorageEngine::close_shard(const ShardRef& ref) {
  if (auto* m = manager()) m->remove(ref);
  std::shared_ptr<ShardLogImpl> shard;
  {
    std::unique_lock lk(mu_);
    // An open of this shard in progress: wait for it and close what it opened. Returning
    // at once would leave the shard open after a close the caller saw complete.
    closed_cv_.wait(lk, [&] { return !opening_.count(ref); });
    auto it = shards_.find(ref);
    if (it == shards_.end()) return;
    shard = std::move(it->second);
    shards_.erase(it);
    closing_.emplace(ref, shard);
  }
  finish_close({shard});
}

void FsStorageEngine::finish_close(const std::vector<std::shared_ptr<ShardLogImpl>>& shards) {
  for (auto& s : shards) s->close();  // drains: every callback completes
  std::lock_guard lk(mu_);
  for (auto& s : shards) {
    auto it = closing_.find(s->ref());
    if (it != closing_.end() && it->second == s) closing_.erase(it);
  }
  closed_cv_.notify_all();
}

// --- delete protocol -----------------------------------------------------------------

Result<std::vector<ShardRef>> FsStorageEngine::list_on_disk() {
  std::vector<ShardRef> out;
  auto subdirs = [&](const std::string& dir, NameKind kind) -> Result<std::vector<std::string>> {
    std::vector<std::string> v;
    auto names = fs_->list(dir);
    if (!names) return names.error();
    for (auto& n : *names) {
      if (!validate_name(kind, n)) continue;  // skips .deleted, .delete-pending, strays
      auto d = fs_->is_directory(dir + "/" + n);
      if (!d) return d.error();
      if (*d) v.push_back(std::move(n));
    }
    return v;
  };
  auto root = fs_->is_directory(opts_.dir);
  if (!root) return root.error();
  if (!*root) return out;
  auto tenants = subdirs(opts_.dir, NameKind::tenant);
  if (!tenants) return tenants.error();
  for (const auto& t : *tenants) {
    auto nss = subdirs(opts_.dir + "/" + t, NameKind::ns);
    if (!nss) return nss.error();
    for (const auto& n : *nss) {
      auto streams = subdirs(opts_.dir + "/" + t + "/" + n, NameKind::stream);
      if (!streams) return streams.error();
      for (const auto& s : *streams) {
        const std::string sdir = opts_.dir + "/" + t + "/" + n + "/" + s;
        auto shards = fs_->list(sdir);
        if (!shards) return shards.error();
        for (const auto& sh : *shards) {
          auto parsed = parse_shard_dir_name(sh);
          if (!parsed) continue;
          auto d = fs_->is_directory(sdir + "/" + sh);
          if (!d) return d.error();
          if (*d) out.push_back(ShardRef{StreamKey{t, n, s}, parsed->first, parsed->second});
        }
      }
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

void FsStorageEngine::run_retention_once() { run_retention_once(now_ms()); }

void FsStorageEngine::run_retention_once(std::int64_t now) {
  std::vector<std::shared_ptr<ShardLogImpl>> shards;
  {
    std::lock_guard lk(mu_);
    for (auto& [ref, s] : shards_) shards.push_back(s);
  }
  for (auto& s : shards) s->apply_retention(now);
}

void FsStorageEngine::retention_loop() {
  std::unique_lock lk(retention_mu_);
  for (;;) {
    retention_cv_.wait_for(lk, std::chrono::milliseconds(opts_.retention_interval_ms),
                           [&] { return stop_retention_; });
    if (stop_retention_) return;
    lk.unlock();
    run_retention_once();
    lk.lock();
  }
}

}  // namespace sluice::fs_storage
