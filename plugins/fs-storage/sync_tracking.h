// Remembers every path whose fdatasync or directory fsync failed in this engine's lifetime
// (docs/architecture.md "A failed sync"). Linux reports a writeback error once: the pages
// it could not write stay in the page cache, clean, and a later fdatasync of the same
// file succeeds without writing them. A shard whose sync failed and that was opened again
// in the same process would read those pages back, sync "successfully" and serve (and
// answer producer retries with) records a power cut takes back. So the engine refuses
// to open a shard below such a path until the process restarts; recovery then drops the
// cached tail and reads it from disk (recovery.cc).
//
// A decorator over the engine's FileSystem: every File it opens forwards to the real one.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "file_system.h"

namespace sluice::fs_storage {

class SyncTrackingFileSystem final : public FileSystem {
 public:
  explicit SyncTrackingFileSystem(std::shared_ptr<FileSystem> real) : real_(std::move(real)) {}

  // The first recorded path at or below `dir` (a shard directory), if any.
  std::optional<std::string> failed_under(const std::string& dir) const;
  void note_failure(const std::string& path);

  Result<std::unique_ptr<File>> open(const std::string& path, OpenMode mode) override;
  Result<bool> exists(const std::string& path) override { return real_->exists(path); }
  Result<bool> mkdir(const std::string& path) override { return real_->mkdir(path); }
  Result<void> sync_dir(const std::string& path) override;
  Result<std::vector<std::string>> list(const std::string& dir) override { return real_->list(dir); }
  Result<void> remove(const std::string& path) override { return real_->remove(path); }
  Result<void> remove_dir(const std::string& path) override { return real_->remove_dir(path); }
  Result<bool> is_directory(const std::string& path) override { return real_->is_directory(path); }
  Result<void> rename(const std::string& from, const std::string& to) override { return real_->rename(from, to); }
  Result<std::uint64_t> file_size(const std::string& path) override { return real_->file_size(path); }

 private:
  const std::shared_ptr<FileSystem> real_;
  mutable std::mutex mu_;
  std::set<std::string> failed_;
};

}  // namespace sluice::fs_storage
