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
  std::string outermost;
  for (; !p.empty(); p = p.parent_path()) {
    if (fs::symlink_status(p, ec).type() != fs::file_type::not_found) break;
    outermost = p.string();
    if (p == p.parent_path()) break;
  }
  if (outermost.empty()) return;
  if (std::find(fresh_.begin(), fresh_.end(), outermost) == fresh_.end()) fresh_.push_back(outermost);
}

Result<void> FreshPaths::undo() {
  Result<void> first;
  for (auto it = fresh_.rbegin(); it != fresh_.rend(); ++it) {
    std::error_code ec;
    if (fs::symlink_status(*it, ec).type() == fs::file_type::not_found) continue;
    fs::remove_all(*it, ec);
    Result<void> r;
    if (ec)
      r = Error(Errc::storage_failure, "cannot remove " + *it + ": " + ec.message());
    else
      r = fsync_directory(fs::path(*it).parent_path().string());
    if (!r && first) first = r;
  }
  fresh_.clear();
  return first;
}

}  // namespace sluice::core
