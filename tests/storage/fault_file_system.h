// A fault-injecting FileSystem for storage tests (LevelDB's FaultInjectionTestEnv idea).
//
// It wraps the POSIX file system (real files in the test's temporary directory) and
// tracks, per file, the length known to be durable: a datasync() makes the current length
// durable; truncate() can only shorten it. crash() then models power loss: every file is
// cut back to its durable length, optionally keeping a random prefix of the unsynced part
// (a partially persisted write) and/or appending random garbage (a torn sector), and every
// later operation fails with EIO until restart() (the "new process").
//
// Overwrites of durable bytes (a preallocated segment's zeros) are modelled too: a pwritev
// below the durable length saves the bytes it replaces, a datasync forgets them, and a
// crash puts them back, all of them, or (keep_unsynced_prefix) those from a random point
// of the overwritten span on, with the garbage written at that point. A truncate below the
// durable length is undone the same way until the next datasync.
//
// Other faults: fail_syncs() makes datasync return EIO; block_syncs() parks every datasync
// (but a spare segment's, next-segment.tmp, which syncs() does not count either) until
// unblock_syncs(), so a test can hold a group between write and sync;
// crash_after(n, ...) crashes just before the (n+1)-th mutating operation from now (open
// that creates, pwritev, datasync, truncate, remove, rename, mkdir, sync_dir), which fails,
// so a test can crash at every step of a protocol in turn.
//
// Directory entries: by default durable immediately (creation, rename, remove). With
// CrashOptions::lose_unsynced_entries a crash also undoes, newest first, every entry
// created, removed or renamed in a directory since that directory's last sync_dir (a
// removed file comes back with its synced bytes, a renamed one under its old name, and
// what a rename replaced comes back too). Thread-safe; one mutex serializes all operations.
#pragma once

#include <errno.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "file_system.h"

namespace sluice::fs_storage::testing {

struct CrashOptions {
  bool keep_unsynced_prefix = false;  // keep a random prefix of never-synced bytes
  bool append_garbage = false;        // then append 1..64 random bytes
  bool lose_unsynced_entries = false; // undo directory entries not yet fsynced (see above)
};

class FaultFileSystem;
// Unblocks syncs when a test leaves its scope, so a failed ASSERT does not leave a future's
// destructor waiting for ever on a sync it blocked. Declare it after those futures.
struct UnblockSyncsOnExit {
  FaultFileSystem& fs;
  ~UnblockSyncsOnExit();
};

class FaultFileSystem final : public FileSystem {
 public:
  // --- faults ---
  // After `skip` more, the next sync_dir of a directory whose path ends with `suffix` fails
  // with EIO (once).
  void fail_dir_sync(std::string suffix, int skip = 0) {
    std::lock_guard lk(mu_);
    fail_dir_sync_ = std::move(suffix);
    fail_dir_sync_skip_ = skip;
  }
  void fail_syncs(bool on) {
    std::lock_guard lk(mu_);
    fail_syncs_ = on;
  }
  // `only`: block only the syncs of files whose path contains it (e.g. "/log/": segments,
  // not the epoch history); empty: every sync.
  void block_syncs(std::string only = {}) {
    std::lock_guard lk(mu_);
    blocked_ = true;
    blocked_only_ = std::move(only);
  }
  void unblock_syncs() {
    std::lock_guard lk(mu_);
    blocked_ = false;
    cv_.notify_all();
  }
  int blocked_sync_waiters() {
    std::lock_guard lk(mu_);
    return waiting_;
  }
  std::uint64_t syncs() {
    std::lock_guard lk(mu_);
    return syncs_;
  }
  // Bytes read through pread so far (what a scan costs).
  std::uint64_t read_bytes() {
    std::lock_guard lk(mu_);
    return read_bytes_;
  }

  // Drops unsynced bytes of every tracked file; returns how many files lost bytes.
  int crash(std::uint64_t seed, CrashOptions opt) {
    std::lock_guard lk(mu_);
    return crash_locked(seed, opt);
  }
  // Crashes (as crash(seed, opt)) right before the (ops + 1)-th mutating operation.
  void crash_after(int ops, std::uint64_t seed, CrashOptions opt) {
    std::lock_guard lk(mu_);
    crash_countdown_ = ops;
    crash_seed_ = seed;
    crash_opts_ = opt;
  }
  bool crashed() {
    std::lock_guard lk(mu_);
    return crashed_;
  }
  void restart() {
    std::lock_guard lk(mu_);
    crashed_ = false;
    blocked_ = false;
    fail_syncs_ = false;
    crash_countdown_.reset();
    synced_.clear();  // files found by the new process count as durable
    undo_.clear();
    entry_ops_.clear();
    cv_.notify_all();
  }
  // SIGKILL: the process dies (its further operations fail, EIO) but the page cache stays.
  // Nothing is undone, and what was unsynced stays unsynced: a later crash() (a power cut)
  // still takes it back, unless the next process syncs it. Then restart_after_kill().
  void kill() {
    std::lock_guard lk(mu_);
    crashed_ = true;
    blocked_ = false;
    cv_.notify_all();
  }
  void restart_after_kill() {
    std::lock_guard lk(mu_);
    crashed_ = false;
    fail_syncs_ = false;
    crash_countdown_.reset();
    cv_.notify_all();
  }

  // Every File::drop_cache advice given so far (the page-cache window), in order. The
  // advice reaches the real file too; it changes no byte.
  struct CacheDrop {
    std::string path;
    std::uint64_t offset, len;  // len 0: to the end of the file
  };
  std::vector<CacheDrop> cache_drops() {
    std::lock_guard lk(mu_);
    return cache_drops_;
  }

  // --- FileSystem ---
  Result<std::unique_ptr<File>> open(const std::string& path, OpenMode mode) override {
    std::lock_guard lk(mu_);
    if (mode != OpenMode::read_write) tick();
    if (crashed_) return io_error("open", path, EIO);
    const bool existed = std::filesystem::exists(path);
    auto f = real_.open(path, mode);
    if (!f) return f.error();
    if (mode != OpenMode::read_write) {
      synced_[path] = 0;
      undo_.erase(path);
      if (!existed) entry_ops_.push_back({EntryOp::created, parent(path), path, {}, {}});
    } else if (!synced_.count(path)) {
      auto sz = (*f)->size();
      synced_[path] = sz ? *sz : 0;
    }
    return std::unique_ptr<File>(std::make_unique<FaultFile>(*this, std::move(f).value()));
  }
  Result<bool> exists(const std::string& p) override { return guard("exists", p, [&] { return real_.exists(p); }); }
  Result<bool> mkdir(const std::string& p) override {
    return mutate("mkdir", p, [&]() -> Result<bool> {
      auto r = real_.mkdir(p);
      if (r && *r) entry_ops_.push_back({EntryOp::created, parent(p), p, {}, {}});
      return r;
    });
  }
  Result<void> sync_dir(const std::string& p) override {
    return mutate("sync_dir", p, [&]() -> Result<void> {
      if (!fail_dir_sync_.empty() && p.ends_with(fail_dir_sync_) && fail_dir_sync_skip_-- == 0) {
        fail_dir_sync_.clear();
        return io_error("fsync", p, EIO);
      }
      auto r = real_.sync_dir(p);
      if (r) std::erase_if(entry_ops_, [&](const EntryOp& e) { return e.dir == p; });
      return r;
    });
  }
  Result<std::vector<std::string>> list(const std::string& p) override { return guard("list", p, [&] { return real_.list(p); }); }
  Result<std::uint64_t> file_size(const std::string& p) override { return guard("stat", p, [&] { return real_.file_size(p); }); }
  Result<void> remove(const std::string& p) override {
    return mutate("remove", p, [&] {
      if (std::filesystem::is_regular_file(p))
        entry_ops_.push_back({EntryOp::removed, parent(p), p, {}, durable_bytes(p)});
      synced_.erase(p);
      undo_.erase(p);
      return real_.remove(p);
    });
  }
  Result<void> remove_dir(const std::string& p) override {
    return mutate("rmdir", p, [&] {
      if (std::filesystem::is_directory(p))
        entry_ops_.push_back({EntryOp::removed_dir, parent(p), p, {}, {}});
      return real_.remove_dir(p);
    });
  }
  Result<bool> is_directory(const std::string& p) override {
    return guard("lstat", p, [&] { return real_.is_directory(p); });
  }
  Result<void> rename(const std::string& from, const std::string& to) override {
    return mutate("rename", from, [&]() -> Result<void> {
      std::optional<std::string> replaced;
      if (std::filesystem::is_regular_file(to)) replaced = durable_bytes(to);
      auto r = real_.rename(from, to);
      if (r) {
        entry_ops_.push_back({EntryOp::renamed, parent(to), to, from, std::move(replaced)});
        auto it = synced_.find(from);
        if (it != synced_.end()) {
          const std::uint64_t s = it->second;
          synced_.erase(it);
          synced_[to] = s;
        }
        if (auto u = undo_.find(from); u != undo_.end()) {
          auto saved = std::move(u->second);
          undo_.erase(u);
          undo_[to] = std::move(saved);
        }
        // A directory rename moves every tracked file below it.
        const std::string prefix = from + "/";
        for (auto j = synced_.lower_bound(prefix); j != synced_.end() && j->first.compare(0, prefix.size(), prefix) == 0;) {
          synced_[to + "/" + j->first.substr(prefix.size())] = j->second;
          j = synced_.erase(j);
        }
        for (auto j = undo_.lower_bound(prefix); j != undo_.end() && j->first.compare(0, prefix.size(), prefix) == 0;) {
          undo_[to + "/" + j->first.substr(prefix.size())] = std::move(j->second);
          j = undo_.erase(j);
        }
      }
      return r;
    });
  }

 private:
  // A directory entry changed since its directory's last sync_dir.
  struct EntryOp {
    enum Kind { created, removed, removed_dir, renamed } kind;
    std::string dir;   // whose sync_dir makes it durable
    std::string path;  // the entry (renamed: its new name)
    std::string from;  // renamed: the old name
    std::optional<std::string> bytes;  // removed: its synced bytes; renamed: what it replaced
  };

  static std::string parent(const std::string& p) {
    const auto slash = p.find_last_of('/');
    return slash == std::string::npos ? "." : p.substr(0, slash);
  }
  // The bytes of `p` a power cut would keep (mu_ held).
  std::string durable_bytes(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    std::string b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (auto it = synced_.find(p); it != synced_.end() && it->second < b.size())
      b.resize(it->second);
    return b;
  }
  static void write_file(const std::string& p, const std::string& bytes) {
    std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
  }
  // One mutating operation (mu_ held): crashes first if crash_after says so.
  void tick() {
    if (!crash_countdown_ || crashed_) return;
    if (*crash_countdown_ == 0) {
      crash_countdown_.reset();
      crash_locked(crash_seed_, crash_opts_);
      return;
    }
    --*crash_countdown_;
  }
  template <class F>
  auto mutate(const char* op, const std::string& p, F f) -> decltype(f()) {
    std::lock_guard lk(mu_);
    tick();
    if (crashed_) return io_error(op, p, EIO);
    return f();
  }

  int crash_locked(std::uint64_t seed, CrashOptions opt) {
    crashed_ = true;
    std::mt19937_64 rng(seed);
    int touched = 0;
    for (auto& [path, synced] : synced_) {
      auto size = real_.file_size(path);
      if (!size || *size <= synced) continue;
      ++touched;
      std::uint64_t keep = 0;
      if (opt.keep_unsynced_prefix) keep = rng() % (*size - synced + 1);
      if (::truncate(path.c_str(), static_cast<off_t>(synced + keep)) != 0) std::abort();
      if (opt.append_garbage) {
        std::string junk(1 + rng() % 64, '\0');
        for (auto& c : junk) c = static_cast<char>(rng());
        auto f = real_.open(path, OpenMode::read_write);
        if (!f || !(*f)->pwrite(junk.data(), junk.size(), synced + keep)) std::abort();
      }
    }
    if (opt.lose_unsynced_entries) {
      namespace fsys = std::filesystem;
      for (auto e = entry_ops_.rbegin(); e != entry_ops_.rend(); ++e) {
        switch (e->kind) {
          case EntryOp::created: fsys::remove_all(e->path); break;
          case EntryOp::removed: write_file(e->path, *e->bytes); break;
          case EntryOp::removed_dir: fsys::create_directory(e->path); break;
          case EntryOp::renamed:
            if (fsys::exists(e->path)) fsys::rename(e->path, e->from);
            if (e->bytes) write_file(e->path, *e->bytes);
            break;
        }
        ++touched;
      }
    }
    for (auto& [path, saved] : undo_) {
      if (saved.empty()) continue;
      ++touched;
      std::uint64_t lo = ~0ull, hi = 0;
      for (const auto& u : saved)
        if (!u.whole) {
          lo = std::min(lo, u.offset);
          hi = std::max(hi, u.offset + u.bytes.size());
        }
      if (lo > hi) lo = hi = 0;  // truncates only
      // The overwrites persisted before `cut`, and not from it on; a truncate persisted or
      // did not, as a whole.
      const std::uint64_t cut = opt.keep_unsynced_prefix ? lo + rng() % (hi - lo + 1) : lo;
      const bool truncates_persisted = opt.keep_unsynced_prefix && rng() % 2 == 0;
      auto f = real_.open(path, OpenMode::read_write);
      if (!f) std::abort();
      for (auto u = saved.rbegin(); u != saved.rend(); ++u) {  // newest first: oldest wins
        const std::uint64_t end = u->offset + u->bytes.size();
        if (u->whole) {
          if (!truncates_persisted && !u->bytes.empty() &&
              !(*f)->pwrite(u->bytes.data(), u->bytes.size(), u->offset))
            std::abort();
          continue;
        }
        if (end <= cut) continue;
        const std::uint64_t from = std::max(cut, u->offset);
        if (!(*f)->pwrite(u->bytes.data() + (from - u->offset), end - from, from)) std::abort();
      }
      if (opt.append_garbage && cut < hi) {
        std::string junk(std::min<std::uint64_t>(1 + rng() % 64, hi - cut), '\0');
        for (auto& c : junk) c = static_cast<char>(rng());
        if (!(*f)->pwrite(junk.data(), junk.size(), cut)) std::abort();
      }
    }
    undo_.clear();
    entry_ops_.clear();
    return touched;
  }

  class FaultFile final : public File {
   public:
    FaultFile(FaultFileSystem& fs, std::unique_ptr<File> real) : fs_(fs), real_(std::move(real)) {}
    const std::string& path() const override { return real_->path(); }
    Result<std::size_t> pread(char* buf, std::size_t n, std::uint64_t off) override {
      std::lock_guard lk(fs_.mu_);
      if (fs_.crashed_) return io_error("pread", path(), EIO);
      auto r = real_->pread(buf, n, off);
      if (r) fs_.read_bytes_ += *r;
      return r;
    }
    Result<void> pwritev(const struct iovec* iov, int count, std::uint64_t off) override {
      std::lock_guard lk(fs_.mu_);
      fs_.tick();
      if (fs_.crashed_) return io_error("pwritev", path(), EIO);
      if (auto d = fs_.synced_.find(path()); d != fs_.synced_.end() && off < d->second) {
        std::size_t len = 0;
        for (int i = 0; i < count; ++i) len += iov[i].iov_len;
        const std::uint64_t end = std::min<std::uint64_t>(off + len, d->second);
        std::string old(end - off, '\0');
        auto n = real_->pread(old.data(), old.size(), off);
        if (!n) return n.error();
        old.resize(*n);
        fs_.undo_[path()].push_back(Undo{off, std::move(old)});
      }
      return real_->pwritev(iov, count, off);
    }
    void drop_cache(std::uint64_t offset, std::uint64_t len) override {
      std::lock_guard lk(fs_.mu_);
      fs_.cache_drops_.push_back({path(), offset, len});
      real_->drop_cache(offset, len);
    }
    Result<void> datasync() override {
      std::unique_lock lk(fs_.mu_);
      // A spare segment's zero-fill is background work no acknowledgement waits for:
      // block_syncs() and syncs() are about the shards' own syncs.
      const bool spare = path().ends_with("/next-segment.tmp");
      if (!spare && (fs_.blocked_only_.empty() || path().find(fs_.blocked_only_) != std::string::npos)) {
        ++fs_.waiting_;
        fs_.cv_.wait(lk, [&] { return !fs_.blocked_; });
        --fs_.waiting_;
      }
      fs_.tick();
      if (fs_.crashed_ || fs_.fail_syncs_) return io_error("fdatasync", path(), EIO);
      if (auto r = real_->datasync(); !r) return r;
      if (!spare) ++fs_.syncs_;
      auto sz = real_->size();
      if (sz) fs_.synced_[path()] = *sz;
      fs_.undo_.erase(path());
      return {};
    }
    Result<void> truncate(std::uint64_t len) override {
      std::lock_guard lk(fs_.mu_);
      fs_.tick();
      if (fs_.crashed_) return io_error("ftruncate", path(), EIO);
      // A cut of synced bytes is durable only at the next datasync (a new size is
      // metadata): until then a crash puts the cut bytes back, like an overwrite.
      auto it = fs_.synced_.find(path());
      if (it != fs_.synced_.end() && it->second > len) {
        std::string cut(it->second - len, '\0');
        auto n = real_->pread(cut.data(), cut.size(), len);
        if (!n) return n.error();
        cut.resize(*n);
        fs_.undo_[path()].push_back(Undo{len, std::move(cut), true});
      }
      return real_->truncate(len);
    }
    Result<std::uint64_t> size() override {
      std::lock_guard lk(fs_.mu_);
      if (fs_.crashed_) return io_error("fstat", path(), EIO);
      return real_->size();
    }

   private:
    FaultFileSystem& fs_;
    std::unique_ptr<File> real_;
  };

  template <class F>
  auto guard(const char* op, const std::string& p, F f) -> decltype(f()) {
    std::lock_guard lk(mu_);
    if (crashed_) return io_error(op, p, EIO);
    return f();
  }

  PosixFileSystem real_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::uint64_t> synced_;
  // Per file: (offset, bytes) that unsynced writes replaced below the durable length, oldest
  // first (see the header comment).
  struct Undo {
    std::uint64_t offset;
    std::string bytes;
    bool whole = false;  // a truncate: undone all or nothing
  };
  std::map<std::string, std::vector<Undo>> undo_;
  std::vector<CacheDrop> cache_drops_;
  bool crashed_ = false;
  bool fail_syncs_ = false;
  std::string fail_dir_sync_;
  int fail_dir_sync_skip_ = 0;
  bool blocked_ = false;
  std::string blocked_only_;
  int waiting_ = 0;
  std::uint64_t syncs_ = 0;
  std::uint64_t read_bytes_ = 0;
  std::vector<EntryOp> entry_ops_;  // oldest first
  std::optional<int> crash_countdown_;
  std::uint64_t crash_seed_ = 0;
  CrashOptions crash_opts_;
};

inline UnblockSyncsOnExit::~UnblockSyncsOnExit() { fs.unblock_syncs(); }

}  // namespace sluice::fs_storage::testing
