#include "fresh_paths.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "sluice/durable_fs.h"

namespace sluice::core {

namespace fs = std::filesystem;

void FreshPaths::note(const std::string& path) {
  if (path.empty()) return;
  std::error_code ec;
  fs::path p = fs::absolute(fs::path(path), ec).lexically_normal();
  if (ec) return;
  if (!p.has_filename() && p.has_parent_path()) p = p.parent_path();  // a trailing slash
  const std::string leaf = p.string();
  std::string outermost;
  for (; !p.empty(); p = p.parent_path()) {
    if (fs::symlink_status(p, ec).type() != fs::file_type::not_found) break;
    outermost = p.string();
    if (p == p.parent_path()) break;
  }
  if (outermost.empty()) return;
  for (const auto& f : fresh_)
    if (f.leaf == leaf) return;
  fresh_.push_back({leaf, outermost});
}

std::vector<std::string> FreshPaths::paths() const {
  std::vector<std::string> out;
  for (const auto& f : fresh_) out.push_back(f.leaf);
  return out;
}

Result<void> FreshPaths::undo() {
  Result<void> first;
  const auto keep_first = [&](Result<void> r) {
    if (!r && first) first = std::move(r);
  };
  for (auto it = fresh_.rbegin(); it != fresh_.rend(); ++it) {
    std::error_code ec;
    if (fs::symlink_status(it->leaf, ec).type() != fs::file_type::not_found) {
      fs::remove_all(it->leaf, ec);
      if (ec) {
        keep_first(Error(Errc::storage_failure, "cannot remove " + it->leaf + ": " + ec.message()));
        continue;
      }
      keep_first(fsync_directory(fs::path(it->leaf).parent_path().string()));
    }
    // The ancestors this start created, innermost first, only while empty: fs::remove of a
    // non-empty directory fails and leaves it (and everything above it) alone.
    if (it->outermost == it->leaf) continue;
    for (fs::path p = fs::path(it->leaf).parent_path(); !p.empty(); p = p.parent_path()) {
      if (!fs::remove(p, ec) || ec) break;
      keep_first(fsync_directory(p.parent_path().string()));
      if (p.string() == it->outermost || p == p.parent_path()) break;
    }
  }
  fresh_.clear();
  return first;
}

}  // namespace sluice::core
