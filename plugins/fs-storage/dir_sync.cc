#include "dir_sync.h"

#include <algorithm>

namespace sluice::fs_storage {

std::string parent_dir(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

Result<void> sync_parent_dir(FileSystem& fs, const std::string& path) {
  return fs.sync_dir(parent_dir(path));
}

void DirSyncList::add(const std::string& dir) {
  if (std::find(dirs_.begin(), dirs_.end(), dir) == dirs_.end()) dirs_.push_back(dir);
}

Result<void> DirSyncList::sync(FileSystem& fs) {
  // Deepest first: a longer path below a shorter one is synced before it.
  std::stable_sort(dirs_.begin(), dirs_.end(),
                   [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  while (!dirs_.empty()) {
    if (auto r = fs.sync_dir(dirs_.front()); !r) return r;
    dirs_.erase(dirs_.begin());
  }
  return {};
}

Result<void> make_dirs(FileSystem& fs, const std::string& path, DirSyncList* deferred) {
  std::size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    const std::string prefix = path.substr(0, pos);
    if (prefix.empty()) continue;
    auto created = fs.mkdir(prefix);
    if (!created) return created.error();
    if (!*created) continue;
    if (deferred) {
      deferred->add_parent_of(prefix);
    } else if (auto r = sync_parent_dir(fs, prefix); !r) {
      return r;
    }
  }
  return {};
}

}  // namespace sluice::fs_storage
