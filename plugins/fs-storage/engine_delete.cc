// The delete protocol of the fs-storage engine (engine.h "Delete protocol"): whole
// incarnations on the control plane's word (delete_incarnations), one shard's copy after a
// reassignment took it off this broker (remove_replica), and the start-up recovery of a
// delete a crash interrupted.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <stdexcept>

#include "dir_sync.h"
#include "engine.h"
#include "layout.h"
#include "sluice/failpoint.h"
#include "sluice/record_batch.h"
#include "sluice/names.h"

namespace sluice::fs_storage {

namespace {
constexpr std::string_view kComponent = "fs-storage";
constexpr std::string_view kMarkerMagic = "sluice-delete-marker 1";
constexpr std::string_view kMarkerExt = ".marker";

std::string hex32(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08" PRIx32, v);
  return buf;
}

// "sluice-delete-marker 1\n<rel dir>\n...crc <8 hex>\n"; the CRC covers every byte before
// the "crc" line.
std::string encode_marker(const std::vector<std::string>& rel_dirs) {
  std::string out(kMarkerMagic);
  out += '\n';
  for (const auto& d : rel_dirs) out += d + "\n";
  out += "crc " + hex32(crc32c(out.data(), out.size())) + "\n";
  return out;
}

// A relative dir named in a marker must be exactly <tenant>/<ns>/<stream>/<shard dir>
// with valid names: a corrupt or forged marker must never move anything else.
bool valid_rel_dir(const std::string& rel) {
  std::vector<std::string_view> parts;
  std::string_view rest = rel;
  while (true) {
    const auto slash = rest.find('/');
    parts.push_back(rest.substr(0, slash));
    if (slash == std::string_view::npos) break;
    rest = rest.substr(slash + 1);
  }
  return parts.size() == 4 && validate_name(NameKind::tenant, parts[0]) &&
         validate_name(NameKind::ns, parts[1]) && validate_name(NameKind::stream, parts[2]) &&
         parse_shard_dir_name(parts[3]).has_value();
}

Result<std::vector<std::string>> decode_marker(const std::string& path, std::string_view b) {
  auto bad = [&](const std::string& why) {
    return Error(Errc::corrupt_data, "delete marker " + path + " is corrupt: " + why);
  };
  const auto crc_pos = b.rfind("crc ");
  if (b.substr(0, kMarkerMagic.size() + 1) != std::string(kMarkerMagic) + "\n")
    return bad("bad header");
  if (crc_pos == std::string_view::npos || b.size() != crc_pos + 13 || b.back() != '\n')
    return bad("no checksum line");
  if (b.substr(crc_pos + 4, 8) != hex32(crc32c(b.data(), crc_pos))) return bad("checksum mismatch");
  std::vector<std::string> dirs;
  std::string_view body = b.substr(kMarkerMagic.size() + 1, crc_pos - kMarkerMagic.size() - 1);
  while (!body.empty()) {
    const auto nl = body.find('\n');
    std::string line(body.substr(0, nl));
    if (!valid_rel_dir(line)) return bad("invalid directory entry");
    dirs.push_back(std::move(line));
    body = nl == std::string_view::npos ? std::string_view() : body.substr(nl + 1);
  }
  return dirs;
}

}  // namespace

bool FsStorageEngine::stop_at(std::string_view step) {
  // Failpoints mark the steps of a live delete only: a restarted process that still has
  // SLUICE_FAILPOINTS set must be able to finish the delete at start-up.
  if (recovering_) return false;
  failpoint(step);
  return delete_step_hook_ && delete_step_hook_(step);
}

std::string FsStorageEngine::unique_id() {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  char buf[48];
  std::snprintf(buf, sizeof buf, "%016" PRIx64 "-%06" PRIx64, static_cast<std::uint64_t>(ns),
                ++delete_seq_);
  return buf;
}

Result<std::uint32_t> FsStorageEngine::delete_incarnations(const StreamKey& stream,
                                                           Incarnation up_to) {
  if (auto r = validate_stream_key(stream); !r) return r.error();
  // validate_stream_key checks the same rules; checked per component again before paths.
  if (auto r = validate_name(NameKind::tenant, stream.tenant); !r) return r.error();
  if (auto r = validate_name(NameKind::ns, stream.ns); !r) return r.error();
  if (auto r = validate_name(NameKind::stream, stream.name); !r) return r.error();
  return delete_doomed(Doomed{stream, up_to, std::nullopt},
                       "stream " + stream.to_string() + " up to incarnation " + std::to_string(up_to.value()));
}

Result<bool> FsStorageEngine::remove_replica(const ShardRef& ref) {
  if (auto r = validate_stream_key(ref.stream); !r) return r.error();
  if (auto r = validate_name(NameKind::tenant, ref.stream.tenant); !r) return r.error();
  if (auto r = validate_name(NameKind::ns, ref.stream.ns); !r) return r.error();
  if (auto r = validate_name(NameKind::stream, ref.stream.name); !r) return r.error();
  auto n = delete_doomed(Doomed{ref.stream, ref.incarnation, ref.shard},
                         "shard " + ref.to_string() + " (its replica list no longer names this broker)");
  if (!n) return n.error();
  return *n > 0;
}

Result<std::uint32_t> FsStorageEngine::delete_doomed(const Doomed& doomed, const std::string& what) {
  const StreamKey& stream = doomed.stream;

  // 0. Wait for a delete of the same name (deletes of other names proceed in parallel),
  //    refuse new opens, wait for the opens in progress that this covers, then close the
  //    open shards (their pending appends complete or fail inside close(); nothing is
  //    acknowledged after it returns).
  std::vector<std::shared_ptr<ShardLogImpl>> closing;
  {
    std::unique_lock lk(mu_);
    delete_cv_.wait(lk, [&] {
      return shut_down_ || std::none_of(deleting_.begin(), deleting_.end(),
                                        [&](const Doomed& p) { return p.stream == stream; });
    });
    if (shut_down_) return Error(Errc::unavailable, "storage engine is shut down");
    deleting_.push_back(doomed);
    closed_cv_.wait(lk, [&] {
      return std::none_of(opening_.begin(), opening_.end(),
                          [&](const ShardRef& r) { return doomed.covers(r); });
    });
    for (auto it = shards_.begin(); it != shards_.end();) {
      if (doomed.covers(it->first)) {
        it->second->discard_on_close();  // its directory goes next: no clean state
        closing_.emplace(it->first, it->second);
        closing.push_back(std::move(it->second));
        it = shards_.erase(it);
      } else {
        ++it;
      }
    }
  }
  struct Unmark {
    FsStorageEngine* e;
    const StreamKey& k;
    ~Unmark() {
      std::lock_guard lk(e->mu_);
      auto& d = e->deleting_;
      d.erase(std::find_if(d.begin(), d.end(), [&](const Doomed& p) { return p.stream == k; }));
      e->delete_cv_.notify_all();
    }
  } unmark{this, stream};
  if (auto* m = manager())
    for (const auto& s : closing) m->remove(s->ref());
  finish_close(closing);
  {
    // A close_shard of one of these shards may still be draining on another thread: its
    // flusher must be done before the directories move.
    std::unique_lock lk(mu_);
    closed_cv_.wait(lk, [&] {
      return std::none_of(closing_.begin(), closing_.end(),
                          [&](const auto& e) { return doomed.covers(e.first); });
    });
  }

  // An earlier delete of this name stopped after its marker: finished first, so its
  // shards may open again (and its marker cannot delete them later). Each stays in
  // half_deleted_, so its shards stay refused, until its marker is finished: an open of one
  // of them meanwhile (this delete may cover other shards) would recover the directory the
  // marker is moving away (DeleteTest.AnEarlierStoppedDeleteKeepsItsShardsClosedUntilFinished).
  {
    std::vector<HalfDeleted> earlier;
    {
      std::lock_guard lk(mu_);
      for (const auto& h : half_deleted_)
        if (h.doomed.stream == stream) earlier.push_back(h);
    }
    for (const auto& h : earlier) {
      if (auto r = finish_marker(h.marker, h.id, h.rel_dirs, h.doomed.shard.has_value()); !r) return r.error();
      {
        std::lock_guard lk(mu_);
        std::erase_if(half_deleted_, [&](const HalfDeleted& x) { return x.id == h.id; });
      }
      host_.log(LogLevel::info, kComponent, "finished the earlier stopped delete " + h.id);
    }
  }

  const std::string rel_stream = stream.tenant + "/" + stream.ns + "/" + stream.name;
  const std::string stream_dir = opts_.dir + "/" + rel_stream;
  auto exists = fs_->is_directory(stream_dir);
  if (!exists) return exists.error();
  if (!*exists) {
    remove_orphan_marks(doomed);
    return std::uint32_t{0};
  }
  auto names = fs_->list(stream_dir);
  if (!names) return names.error();
  std::vector<std::string> rel_dirs;
  for (const auto& n : *names) {
    auto parsed = parse_shard_dir_name(n);
    if (parsed && doomed.covers_dir(parsed->first, parsed->second))
      rel_dirs.push_back(rel_stream + "/" + n);
  }
  std::sort(rel_dirs.begin(), rel_dirs.end());
  // The name's directory goes too once it is empty, so deleted names leave nothing behind
  // for list_on_disk (and a start with many tombstones) to walk. Under mu_, and not while
  // an open of the name (another incarnation) is creating directories in it (opening_), so
  // an open never finds its parent gone. Not synced: an empty directory that comes back
  // after a crash is harmless.
  const auto remove_if_empty = [&] {
    std::lock_guard lk(mu_);
    if (opening_stream(stream)) return;
    if (auto left = fs_->list(stream_dir); left && left->empty()) (void)fs_->remove_dir(stream_dir);
  };
  if (rel_dirs.empty()) {
    remove_orphan_marks(doomed);
    remove_if_empty();
    return std::uint32_t{0};
  }

  // 1. The marker.
  const std::string id = unique_id();
  const std::string pending = opts_.dir + "/" + std::string(kDeletePendingDir);
  if (auto r = make_dirs(pending); !r) return r.error();
  const std::string marker = pending + "/" + id + std::string(kMarkerExt);
  {
    const std::string tmp = marker + ".tmp";
    const std::string bytes = encode_marker(rel_dirs);
    auto f = fs_->open(tmp, OpenMode::create_truncate);
    if (!f) return f.error();
    if (auto r = (*f)->pwrite(bytes.data(), bytes.size(), 0); !r) return r.error();
    if (auto r = (*f)->datasync(); !r) return r.error();
    f.value().reset();
    if (auto r = fs_->rename(tmp, marker); !r) return r.error();
    if (auto r = fs_->sync_dir(pending); !r) return r.error();
  }
  // 2.-4. The marker is durable: the next start finishes it whatever happens now. If this
  //    attempt stops, the shards it names stay refused in this process (half_deleted_):
  //    reopened and appended to, they would be deleted by that next start with records
  //    acknowledged in between (review finding).
  auto half_done = [&](Error e) {
    std::lock_guard lk(mu_);
    half_deleted_.push_back(HalfDeleted{doomed, marker, id, rel_dirs});
    host_.log(LogLevel::error, kComponent,
              "the delete of " + what + " stopped after its marker " + marker +
                  " was written; its shards stay closed until the next start finishes it: " + e.message);
    return e;
  };
  if (stop_at("storage.delete.after_marker"))
    return half_done(Error(Errc::internal, "delete stopped after the marker (test hook)"));
  if (auto r = finish_marker(marker, id, rel_dirs, doomed.shard.has_value()); !r) return half_done(r.error());
  remove_orphan_marks(doomed);
  remove_if_empty();
  host_.log(LogLevel::info, kComponent,
            "deleted " + std::to_string(rel_dirs.size()) + " shard director" +
                (rel_dirs.size() == 1 ? "y" : "ies") + " of " + what);
  return static_cast<std::uint32_t>(rel_dirs.size());
}

// Steps 2-4 for one marker; shared by delete_incarnations and start-up recovery. Dirs that
// are already gone (moved before a crash) are skipped.
Result<void> FsStorageEngine::finish_marker(const std::string& marker, const std::string& id,
                                            const std::vector<std::string>& rel_dirs,
                                            bool sync_unmark) {
  const std::string deleted_root = opts_.dir + "/" + std::string(kDeletedDir);
  const std::string dest_root = deleted_root + "/" + id;
  // Each directory goes to <.deleted>/<id>/<its position in the marker>: one level under
  // one new directory, so a delete syncs .deleted once rather than every level of a
  // <tenant>/<ns>/<stream> copy of the path (4 fsyncs of a 10-fsync delete; the data is
  // garbage once moved). Positions are stable, so recovery moves what is left to the same
  // places; an older build's <id>/<rel> tree is removed alike.
  // A marker naming ONE directory (a 1-shard stream, the common case) moves it to
  // <.deleted>/<id> itself: no new directory, so .deleted is synced once for the rename
  // instead of once for the mkdir and then <id> for the rename (one fsync fewer). Recovery
  // applies the same rule; an older build's <id> directory is then either empty (rename
  // replaces it) or the one directory was already moved (skipped).
  const bool single = rel_dirs.size() == 1;
  if (auto r = make_dirs(single ? deleted_root : dest_root); !r) return r;
  std::vector<std::string> parents;
  for (std::size_t i = 0; i < rel_dirs.size(); ++i) {
    const std::string src = opts_.dir + "/" + rel_dirs[i];
    auto is_dir = fs_->is_directory(src);
    if (!is_dir) return is_dir.error();
    if (!*is_dir) continue;
    const std::string dst = single ? dest_root : dest_root + "/" + std::to_string(i);
    // A build before the one-directory rule made <id>/<tenant>/<ns>/<stream> first, then
    // renamed into it; a crash in between left <id> holding empty directories, which a
    // rename cannot replace (ENOTEMPTY: the start would fail). The source is still here, so
    // nothing of it was moved there: that tree is garbage.
    if (single)
      if (auto there = fs_->is_directory(dst); there && *there)
        if (auto r = remove_tree(*fs_, dst); !r) return r;
    if (auto r = fs_->rename(src, dst); !r) return r;
    for (const auto& p : {parent_dir(src), parent_dir(dst)})
      if (std::find(parents.begin(), parents.end(), p) == parents.end()) parents.push_back(p);
  }
  for (const auto& p : parents)
    if (auto r = fs_->sync_dir(p); !r) return r;
  // The copies are gone for good: so are their marks (layout.h kReplicasDir), and a name's
  // mark directory once empty. Not synced: a mark that comes back after a crash reads its
  // copy as lost if the shard is ever opened here again (a reassignment back), which costs
  // that copy a catch-up.
  // (The empty directory goes under mu_ and not while an open of the name is writing a mark
  // in it, as delete_doomed's remove_if_empty.)
  for (const auto& rel : rel_dirs) {
    const std::string mark = opts_.dir + "/" + std::string(kReplicasDir) + "/" + rel;
    if (auto r = fs_->remove(mark); !r) {
      host_.log(LogLevel::warn, kComponent, "cannot remove " + mark + ": " + r.error().message);
      continue;
    }
    std::vector<std::string> parts;  // <tenant>/<ns>/<stream>/<shard dir>, as the marker holds
    for (std::size_t b = 0, e; b <= rel.size(); b = e + 1) {
      e = std::min(rel.find('/', b), rel.size());
      parts.push_back(rel.substr(b, e - b));
    }
    if (parts.size() != 4) continue;
    std::lock_guard lk(mu_);
    if (opening_stream(StreamKey{parts[0], parts[1], parts[2]})) continue;
    if (auto left = fs_->list(parent_dir(mark)); left && left->empty()) (void)fs_->remove_dir(parent_dir(mark));
  }
  if (stop_at("storage.delete.after_move"))
    return Error(Errc::internal, "delete stopped after the move (test hook)");

  if (auto r = fs_->remove(marker); !r) return r;
  // The removal is synced only when a marker that came back could harm: one naming a
  // single shard's copy (remove_replica), whose directory may be created again under the
  // same incarnation if the shard is reassigned here. A whole-incarnation delete names
  // incarnations the control plane has tombstoned (the broker's floors are durable before
  // it deletes), which are never created again, and every directory it names is already
  // moved durably (above): if it comes back, the next start finds nothing to move and just
  // removes it (docs/architecture.md "Durability", the removed syncs).
  if (sync_unmark)
    if (auto r = sync_parent_dir(*fs_, marker); !r) return r;
  if (stop_at("storage.delete.after_unmark"))
    return Error(Errc::internal, "delete stopped after removing the marker (test hook)");

  // Garbage from here on: not synced (a tree that comes back after a crash is removed at
  // the next start, recover_deletes).
  if (auto r = remove_tree(*fs_, dest_root); !r)
    host_.log(LogLevel::warn, kComponent,
              "could not remove deleted data under " + dest_root + " (garbage, removed at the "
              "next start): " + r.error().message);
  return {};
}

void FsStorageEngine::recover_deletes() {
  const std::string pending = opts_.dir + "/" + std::string(kDeletePendingDir);
  const std::string deleted_root = opts_.dir + "/" + std::string(kDeletedDir);
  auto fail = [&](const std::string& what, const Error& e) {
    const std::string msg = "cannot finish an interrupted delete (" + what + "): " + e.message;
    host_.log(LogLevel::error, kComponent, msg);
    throw std::runtime_error("fs-storage: " + msg);
  };
  auto has_pending = fs_->is_directory(pending);
  if (!has_pending) fail(pending, has_pending.error());
  if (*has_pending) {
    auto names = fs_->list(pending);
    if (!names) fail(pending, names.error());
    std::sort(names->begin(), names->end());
    for (const auto& n : *names) {
      const std::string path = pending + "/" + n;
      if (n.size() > 4 && n.substr(n.size() - 4) == ".tmp") {
        // Crash while writing a marker: nothing was moved yet, the delete never started.
        if (auto r = fs_->remove(path); !r) fail(path, r.error());
        continue;
      }
      if (n.size() <= kMarkerExt.size() || n.substr(n.size() - kMarkerExt.size()) != kMarkerExt) {
        host_.log(LogLevel::warn, kComponent, "ignoring unexpected file " + path);
        continue;
      }
      const std::string id = n.substr(0, n.size() - kMarkerExt.size());
      auto f = fs_->open(path, OpenMode::read_write);
      if (!f) fail(path, f.error());
      auto bytes = read_whole_file(**f);
      if (!bytes) fail(path, bytes.error());
      f.value().reset();
      auto dirs = decode_marker(path, *bytes);
      if (!dirs) fail(path, dirs.error());
      std::size_t present = 0;
      for (const auto& d : *dirs) {
        auto e = fs_->is_directory(opts_.dir + "/" + d);
        if (e && *e) ++present;
      }
      recovering_ = true;  // no failpoints, no test hook: recovery runs to the end
      auto r = finish_marker(path, id, *dirs, true);
      recovering_ = false;
      if (!r) fail(path, r.error());
      host_.log(LogLevel::info, kComponent,
                "finished interrupted delete " + id + ": moved " + std::to_string(present) +
                    " of " + std::to_string(dirs->size()) +
                    " directories (the rest were moved before the crash)");
    }
    (void)fs_->sync_dir(pending);
  }
  auto has_deleted = fs_->is_directory(deleted_root);
  if (!has_deleted) fail(deleted_root, has_deleted.error());
  if (*has_deleted) {
    auto names = fs_->list(deleted_root);
    if (!names) fail(deleted_root, names.error());
    for (const auto& n : *names) {
      if (auto r = remove_tree(*fs_, deleted_root + "/" + n); !r) {
        host_.log(LogLevel::warn, kComponent,
                  "could not remove deleted data " + deleted_root + "/" + n + ": " +
                      r.error().message);
        continue;
      }
      host_.log(LogLevel::info, kComponent, "removed deleted data " + deleted_root + "/" + n);
    }
    (void)fs_->sync_dir(deleted_root);
  }
}

}  // namespace sluice::fs_storage
