#include "engine.h"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <stdexcept>

#include "layout.h"
#include "recovery.h"
#include "shard_replica_log.h"
#include "sluice/failpoint.h"
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

std::string parent_of(const std::string& p) { return p.substr(0, p.find_last_of('/')); }

}  // namespace

FsStorageEngine::FsStorageEngine(PluginHost& host, std::shared_ptr<FileSystem> fs)
    : FsStorageEngine(host, std::move(fs), Options::from_host(host)) {}

FsStorageEngine::FsStorageEngine(PluginHost& host, std::shared_ptr<FileSystem> fs, Options opts)
    : host_(host), fs_(std::move(fs)), opts_(std::move(opts)), pool_(opts_.flush_threads) {
  if (opts_.fsync == FsyncPolicy::never)
    host_.log(LogLevel::warn, kComponent,
              "storage.fsync=never: acknowledgements do NOT imply durability (benchmarks only)");
  recover_deletes();  // before any shard can open
  if (opts_.retention_interval_ms > 0)
    retention_thread_ = std::thread([this] { retention_loop(); });
}

FsStorageEngine::~FsStorageEngine() { shutdown(); }

Result<std::string> FsStorageEngine::shard_directory(const ShardRef& ref) const {
  return shard_dir(opts_.dir, ref);
}

// Creates every missing component of `path`; each new directory's parent is fsynced so
// the entry survives a crash.
Result<void> FsStorageEngine::make_dirs(const std::string& path) {
  std::size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    const std::string prefix = path.substr(0, pos);
    if (prefix.empty()) continue;
    auto created = fs_->mkdir(prefix);
    if (!created) return created.error();
    if (*created) {
      const auto slash = prefix.find_last_of('/');
      const std::string parent = slash == 0 ? "/" : prefix.substr(0, slash);
      if (slash != std::string::npos)
        if (auto r = fs_->sync_dir(parent); !r) return r;
    }
  }
  return {};
}

Result<std::shared_ptr<ShardLog>> FsStorageEngine::open_shard(const ShardRef& ref,
                                                              const StreamSpec& spec) {
  auto dir = shard_dir(opts_.dir, ref);
  if (!dir) return dir.error();
  // A replicated shard's peers may fetch as soon as they learn of it: answer them from the
  // start (assign() reports a node without a peer transport).
  if (spec.replication_factor > 1) (void)ensure_manager();
  std::unique_lock lk(mu_);
  if (closing_.count(ref)) {  // a close of this shard is draining: wait for it to finish
    ++open_waiters_;
    closed_cv_.wait(lk, [&] { return !closing_.count(ref); });
    --open_waiters_;
  }
  if (shut_down_) return Error(Errc::unavailable, "storage engine is shut down");
  for (const auto& [key, up_to] : deleting_)
    if (key == ref.stream && ref.incarnation <= up_to)
      return Error(Errc::unavailable, "shard " + ref.to_string() + " is being deleted");
  if (auto it = shards_.find(ref); it != shards_.end()) {
    it->second->set_retention(spec.retention);
    return std::shared_ptr<ShardLog>(it->second);
  }
  const std::string ldir = log_dir(*dir);
  if (auto r = make_dirs(ldir); !r) return r.error();
  ReplicaSetup replica;
  if (spec.replication_factor > 1) {
    // Before anything else: the epochs this replica has acted in (persistent fencing).
    auto history = EpochHistory::load(*fs_, *dir);
    if (!history) {
      host_.log(LogLevel::error, kComponent,
                "cannot open shard " + ref.to_string() + ": " + history.error().message);
      return history.error();
    }
    replica.replicated = true;
    replica.min_insync = spec.min_insync;
    replica.history = std::move(history).value();
    replica.hwm_checkpoint = read_hwm_checkpoint(*fs_, *dir).value_or(Offset(0));
  }
  auto recovered = recover_log(*fs_, host_, opts_, ldir, ref.incarnation);
  if (!recovered) {
    host_.log(LogLevel::error, kComponent,
              "cannot open shard " + ref.to_string() + ": " + recovered.error().message);
    return recovered.error();
  }
  // Recovery may have cut a torn tail below an entry that was written before its data.
  if (replica.replicated) replica.history.forget_beyond(Offset(recovered->next_offset));
  auto shard = std::make_shared<ShardLogImpl>(ref, spec.retention, *dir, opts_, fs_, host_, pool_,
                                              std::move(recovered).value(), std::move(replica));
  if (group_clock_) shard->set_group_clock(group_clock_);
  if (group_step_hook_) shard->set_group_step_hook(group_step_hook_);
  if (shard->replicated()) {
    auto ops = open_group_log(ref, *dir, spec.min_insync);
    if (!ops) {
      shard->close();
      return ops.error();
    }
    shard->attach_group_ops(std::move(ops).value());
  }
  shards_.emplace(ref, shard);
  return std::shared_ptr<ShardLog>(shard);
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
  auto recovered = recover_log(*fs_, host_, opts_, gdir + "/log", ref.incarnation);
  if (!recovered) return fail(recovered.error());
  replica.history.forget_beyond(Offset(recovered->next_offset));
  auto log = std::make_shared<ShardLogImpl>(ref, RetentionPolicy{}, gdir, opts_, fs_, host_, pool_,
                                            std::move(recovered).value(), std::move(replica));
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
  return (*m)->assign(std::make_shared<ShardReplicaLog>(ops->log()), a, LogKind::groups);
}

void FsStorageEngine::close_shard(const ShardRef& ref) {
  if (auto* m = manager()) m->remove(ref);
  std::shared_ptr<ShardLogImpl> shard;
  {
    std::lock_guard lk(mu_);
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

void FsStorageEngine::shutdown() {
  // Replication first: no fetch is answered or appended once shards start closing.
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
  {
    std::lock_guard lk(mu_);
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
    closed_cv_.wait(lk, [&] { return closing_.empty(); });
  }
  pool_.stop();
}

// --- delete protocol -----------------------------------------------------------------

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
  std::lock_guard del_lk(delete_mu_);

  // 0. Refuse new opens, then close the open shards (their pending appends complete or
  //    fail inside close(); nothing is acknowledged after it returns).
  std::vector<std::shared_ptr<ShardLogImpl>> closing;
  {
    std::lock_guard lk(mu_);
    if (shut_down_) return Error(Errc::unavailable, "storage engine is shut down");
    deleting_.emplace_back(stream, up_to);
    for (auto it = shards_.begin(); it != shards_.end();) {
      if (it->first.stream == stream && it->first.incarnation <= up_to) {
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
      d.erase(std::find_if(d.begin(), d.end(), [&](const auto& p) { return p.first == k; }));
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
      return std::none_of(closing_.begin(), closing_.end(), [&](const auto& e) {
        return e.first.stream == stream && e.first.incarnation <= up_to;
      });
    });
  }

  const std::string rel_stream = stream.tenant + "/" + stream.ns + "/" + stream.name;
  const std::string stream_dir = opts_.dir + "/" + rel_stream;
  auto exists = fs_->is_directory(stream_dir);
  if (!exists) return exists.error();
  if (!*exists) return std::uint32_t{0};
  auto names = fs_->list(stream_dir);
  if (!names) return names.error();
  std::vector<std::string> rel_dirs;
  for (const auto& n : *names) {
    auto parsed = parse_shard_dir_name(n);
    if (parsed && parsed->second <= up_to) rel_dirs.push_back(rel_stream + "/" + n);
  }
  std::sort(rel_dirs.begin(), rel_dirs.end());
  if (rel_dirs.empty()) return std::uint32_t{0};

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
  if (stop_at("storage.delete.after_marker"))
    return Error(Errc::internal, "delete stopped after the marker (test hook)");

  // 2.-4.
  if (auto r = finish_marker(marker, id, rel_dirs); !r) return r.error();
  host_.log(LogLevel::info, kComponent,
            "deleted " + std::to_string(rel_dirs.size()) + " shard director" +
                (rel_dirs.size() == 1 ? "y" : "ies") + " of stream " + stream.to_string() +
                " up to incarnation " + std::to_string(up_to.value()));
  return static_cast<std::uint32_t>(rel_dirs.size());
}

// Steps 2-4 for one marker; shared by delete_incarnations and start-up recovery. Dirs that
// are already gone (moved before a crash) are skipped.
Result<void> FsStorageEngine::finish_marker(const std::string& marker, const std::string& id,
                                            const std::vector<std::string>& rel_dirs) {
  const std::string deleted_root = opts_.dir + "/" + std::string(kDeletedDir);
  const std::string dest_root = deleted_root + "/" + id;
  std::vector<std::string> parents;
  for (const auto& rel : rel_dirs) {
    const std::string src = opts_.dir + "/" + rel;
    auto is_dir = fs_->is_directory(src);
    if (!is_dir) return is_dir.error();
    if (!*is_dir) continue;
    const std::string dst = dest_root + "/" + rel;
    if (auto r = make_dirs(parent_of(dst)); !r) return r;
    if (auto r = fs_->rename(src, dst); !r) return r;
    for (const auto& p : {parent_of(src), parent_of(dst)})
      if (std::find(parents.begin(), parents.end(), p) == parents.end()) parents.push_back(p);
  }
  for (const auto& p : parents)
    if (auto r = fs_->sync_dir(p); !r) return r;
  if (stop_at("storage.delete.after_move"))
    return Error(Errc::internal, "delete stopped after the move (test hook)");

  if (auto r = fs_->remove(marker); !r) return r;
  if (auto r = fs_->sync_dir(parent_of(marker)); !r) return r;
  if (stop_at("storage.delete.after_unmark"))
    return Error(Errc::internal, "delete stopped after removing the marker (test hook)");

  if (auto r = remove_tree(*fs_, dest_root); !r) {
    host_.log(LogLevel::warn, kComponent,
              "could not remove deleted data under " + dest_root + " (garbage, removed at the "
              "next start): " + r.error().message);
  } else {
    (void)fs_->sync_dir(deleted_root);
  }
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
      auto r = finish_marker(path, id, *dirs);
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
