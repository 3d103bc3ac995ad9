// Directory-fsync helpers shared by fs-storage (docs/architecture.md "Durability"): a new
// file or directory, a rename or a removal is durable only once its parent directory is
// fsynced. Every place that creates directories or syncs a parent goes through these, so
// the rule (and its deferral for a new single-replica shard) lives in one place.
//
// Errors: Result, as FileSystem (Errc::storage_failure naming the path). Thread-safe as the
// FileSystem is; DirSyncList is not (one owner).
#pragma once

#include <string>
#include <vector>

#include "file_system.h"

namespace sluice::fs_storage {

// "/a/b/c" -> "/a/b"; "/a" -> "/"; "a" -> "." (a relative name's parent is the cwd).
std::string parent_dir(const std::string& path);

// fsync of the directory that holds `path`.
Result<void> sync_parent_dir(FileSystem& fs, const std::string& path);

// Directories still to be fsynced, each once; sync() takes them deepest first.
class DirSyncList {
 public:
  void add(const std::string& dir);
  void add_parent_of(const std::string& path) { add(parent_dir(path)); }
  bool empty() const { return dirs_.empty(); }
  const std::vector<std::string>& dirs() const { return dirs_; }
  // Syncs every directory (the deepest first, so a child's entries are durable before its
  // own entry is) and empties the list; on an error the list keeps what is left.
  Result<void> sync(FileSystem& fs);

 private:
  std::vector<std::string> dirs_;
};

// Creates every missing component of `path`. Each new directory's entry must reach its
// parent: with `deferred` null the parent is fsynced at once; otherwise the parent is added
// to *deferred and the caller syncs it before anything depends on the entry.
Result<void> make_dirs(FileSystem& fs, const std::string& path, DirSyncList* deferred = nullptr);

}  // namespace sluice::fs_storage
