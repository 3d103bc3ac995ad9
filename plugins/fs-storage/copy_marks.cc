// The marks of shard copies in <storage.dir>/.replicas (docs/replication.md "A lost shard
// copy"): what an open learns from them, and the lost-copy file it writes.
#include "engine.h"

#include "dir_sync.h"
#include "layout.h"

namespace sluice::fs_storage {

namespace {
constexpr std::string_view kComponent = "fs-storage";

// Syncs the entry of `dir` in its parent and of every directory above it up to and
// including `root` (whoever created them, and whether or not that was synced).
Result<void> sync_entries_up_to(FileSystem& fs, const std::string& dir, const std::string& root) {
  DirSyncList chain;
  for (std::string p = dir; p.size() >= root.size(); p = parent_dir(p)) {
    chain.add(parent_dir(p));
    if (p == root || p == "/" || p == ".") break;
  }
  return chain.sync(fs);
}

// An empty file made durable: created, synced, and its directory entry synced.
Result<void> write_empty_durably(FileSystem& fs, const std::string& path) {
  auto f = fs.open(path, OpenMode::create_truncate);
  if (!f) return f.error();
  if (auto r = (*f)->datasync(); !r) return r;
  return sync_parent_dir(fs, path);
}

// A replicated copy's registration on this disk (docs/replication.md "A lost shard copy").
// Returns whether the copy at `dir` is a lost one: its mark says this storage.dir created it,
// and its log is gone (`had_log` false) or an earlier open found it gone (lost-copy). A copy
// without a mark is new, or an older build's (adopted as it is). A new copy's mark is
// written, with every directory leading to it synced, before the caller creates the copy's
// directories; so a crash in between leaves a mark without a copy: read as lost, which
// costs that copy a catch-up and nothing else. An adopted copy's mark is not synced (the
// first start after an upgrade marks every copy): lost to a power cut, it is written again
// at the next open.
Result<bool> check_replica_mark(FileSystem& fs, const std::string& root, const ShardRef& ref,
                                const std::string& dir, bool had_log) {
  auto mark = replica_mark(root, ref);
  if (!mark) return mark.error();
  auto marked = fs.exists(*mark);
  if (!marked) return marked.error();
  if (*marked) {
    if (!had_log) return true;
    return fs.exists(dir + "/" + std::string(kLostCopyFile));
  }
  // The directories above a mark are synced as they are created (once per name, so a new
  // copy's mark rests on durable entries whoever made them); an adopted copy's mark itself
  // is not.
  if (auto r = make_dirs(fs, parent_dir(*mark)); !r) return r.error();
  if (had_log) {
    auto f = fs.open(*mark, OpenMode::create_truncate);
    if (!f) return f.error();
    return false;
  }
  if (auto r = write_empty_durably(fs, *mark); !r) return r.error();
  return false;
}
}  // namespace

Result<FsStorageEngine::CopyMarks> FsStorageEngine::check_copy_marks(const ShardRef& ref, const StreamSpec& spec,
                                                                    const std::string& dir, bool had_log) {
  CopyMarks out;
  if (spec.replication_factor <= 1) {
    // A single replica's mark is written at its first flush (ShardLogImpl::sync_deferred_dirs),
    // once its directories are durable: so a mark without a log is a copy that held
    // acknowledged records and lost them, which nothing else holds. Refused, rather than
    // opened empty at offset 0 again, unless storage.repair accepts the loss.
    auto mark = replica_mark(opts_.dir, ref);
    if (!mark) return mark.error();
    auto marked = fs_->exists(*mark);
    if (!marked) return marked.error();
    if (*marked && !had_log) {
      const std::string what = "shard " + ref.to_string() + ": this storage.dir held its only copy, and its log "
                               "is gone (deleted, or lost with its directory): the records acknowledged in it "
                               "are lost";
      if (!opts_.repair) {
        host_.log(LogLevel::error, kComponent,
                  what + ". Refusing to open it empty, which would hand out its offsets again. To accept "
                         "the loss: storage.repair=true (the whole node), or remove " + *mark +
                         " (this shard alone); docs/operations.md \"Recovery and corruption\"");
        return Error(Errc::corrupt_data, what + "; storage.repair=true, or removing " + *mark + ", opens it empty");
      }
      host_.log(LogLevel::warn, kComponent, what + "; storage.repair: opening it empty, from offset 0");
      // The loss is accepted: the mark goes, durably, and comes back at the first flush, once
      // the new directories are durable (otherwise a power cut before that would bring back
      // "a mark, no log" for a shard that acknowledged nothing since).
      Result<void> r = fs_->remove(*mark);
      if (r) r = sync_parent_dir(*fs_, *mark);
      if (!r) {
        host_.log(LogLevel::error, kComponent, "cannot open shard " + ref.to_string() + ": " + r.error().message);
        return r.error();
      }
      *marked = false;
    }
    if (!*marked) out.single_mark = *mark;
  }
  if (spec.replication_factor > 1) {
    auto lost = check_replica_mark(*fs_, opts_.dir, ref, dir, had_log);
    if (!lost) {
      host_.log(LogLevel::error, kComponent,
                "cannot open shard " + ref.to_string() + ": its mark in " + std::string(kReplicasDir) + ": " +
                    lost.error().message);
      return lost.error();
    }
    out.copy_lost = *lost;
  }
  // A lost copy says so durably before its log directory exists: a restart that finds a
  // log (empty, or refilled by fetches) must still know it is not the copy the catalog
  // counted, and a crash before this leaves no log, which reads as lost again.
  if (out.copy_lost && !had_log) {
    host_.log(LogLevel::error, kComponent,
              "shard " + ref.to_string() + ": this storage.dir held a copy of it and its log is gone "
              "(deleted or lost with its directory); it starts empty as a lost copy, which never leads "
              "and takes itself out of the in-sync set until it has caught up (docs/replication.md "
              "\"A lost shard copy\")");
    Result<void> r = fs_storage::make_dirs(*fs_, dir);
    if (r) r = sync_entries_up_to(*fs_, dir, opts_.dir);
    if (r) r = write_empty_durably(*fs_, dir + "/" + std::string(kLostCopyFile));
    if (!r) {
      host_.log(LogLevel::error, kComponent, "cannot open shard " + ref.to_string() + ": " + r.error().message);
      return r.error();
    }
  }
  return out;
}

// Its directories are durable: the flush that acknowledged its records synced their entries
// first (an older build synced them at creation), and recovery syncs them with an unsynced
// tail it keeps (not with storage.fsync=never, where the caller marks nothing). So, as at a first flush, a mark without a log can only mean the log was
// lost. Neither the mark nor the directories above it are synced: the first start after an
// upgrade marks every such shard, and must not cost an fsync per name; a mark lost to a
// power cut is written again at the next open. Best effort, as at a first flush: without
// the mark a later loss of this log goes unnoticed, as before marks.
void FsStorageEngine::adopt_single_mark(const ShardRef& ref, const std::string& mark) {
  DirSyncList unsynced;  // not synced, on purpose (above)
  Result<void> r = fs_storage::make_dirs(*fs_, parent_dir(mark), &unsynced);
  if (r) {
    auto f = fs_->open(mark, OpenMode::create_truncate);
    if (!f) r = f.error();
  }
  if (!r) host_.log(LogLevel::warn, kComponent, "shard " + ref.to_string() + ": cannot write " + mark + ": " + r.error().message);
}

// A copy whose directory was already gone when the delete ran (lost by hand, say) left its
// mark: finish_marker removes the marks of the directories it moved only. So the delete
// removes every mark `doomed` covers that is still there, and the name's mark directory
// once empty (under mu_, not while an open of the name writes a mark in it). Not synced, as
// finish_marker's removals: a mark that comes back names a deleted incarnation, which is
// never opened here again, or (remove_replica) costs that copy a catch-up.
void FsStorageEngine::remove_orphan_marks(const Doomed& doomed) {
  const StreamKey& k = doomed.stream;
  const std::string dir = opts_.dir + "/" + std::string(kReplicasDir) + "/" + k.tenant + "/" + k.ns + "/" + k.name;
  auto there = fs_->is_directory(dir);
  if (!there || !*there) return;
  auto names = fs_->list(dir);
  if (!names) return;
  for (const auto& n : *names) {
    auto parsed = parse_shard_dir_name(n);
    if (!parsed || !doomed.covers_dir(parsed->first, parsed->second)) continue;
    if (auto r = fs_->remove(dir + "/" + n); !r)
      host_.log(LogLevel::warn, kComponent, "cannot remove " + dir + "/" + n + ": " + r.error().message);
    else
      host_.log(LogLevel::info, kComponent, "removed the mark " + dir + "/" + n + " of a deleted copy whose directory was already gone");
  }
  std::lock_guard lk(mu_);
  if (opening_stream(k)) return;
  if (auto left = fs_->list(dir); left && left->empty()) (void)fs_->remove_dir(dir);
}

Result<bool> FsStorageEngine::lost_below_high_watermark(const ShardRef& ref, const std::string& dir,
                                                        Offset hwm_checkpoint, Offset log_end) {
  // A log that ends below the high watermark it closed with lost records it held as
  // committed (its log files deleted or emptied, a repair's cut): nothing else may take
  // those back, so it is a lost copy as well (docs/replication.md "A lost shard copy").
  if (hwm_checkpoint.value() <= log_end.value()) return false;
  host_.log(LogLevel::error, kComponent,
            "shard " + ref.to_string() + ": its log ends at " + std::to_string(log_end.value()) +
                ", below the high watermark " + std::to_string(hwm_checkpoint.value()) +
                " it closed with: a lost copy, which never leads and takes itself out of the in-sync set "
                "until it has caught up");
  if (auto r = write_empty_durably(*fs_, dir + "/" + std::string(kLostCopyFile)); !r) {
    host_.log(LogLevel::error, kComponent, "cannot open shard " + ref.to_string() + ": " + r.error().message);
    return r.error();
  }
  return true;
}

}  // namespace sluice::fs_storage
