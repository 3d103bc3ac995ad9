#include "sluice/durable_fs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

namespace sluice {
namespace {
Error io_error(const std::string& what, const std::string& path, int err) {
  return Error(Errc::storage_failure, what + " " + path + ": " + std::strerror(err));
}
}  // namespace

Result<void> fsync_directory(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return io_error("cannot open directory", path, errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return io_error("cannot fsync directory", path, err);
  return {};
}

Result<bool> create_directories_durably(const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty()) return Error(Errc::invalid_argument, "empty directory path");
  fs::path target = fs::absolute(fs::path(path)).lexically_normal();
  if (target.has_filename() == false && target.has_parent_path()) target = target.parent_path();
  // The missing levels, outermost first.
  std::vector<fs::path> missing;
  for (fs::path p = target; !p.empty(); p = p.parent_path()) {
    struct stat st {};
    if (::stat(p.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode)) return Error(Errc::storage_failure, p.string() + " exists and is not a directory");
      break;
    }
    if (errno != ENOENT) return io_error("cannot stat", p.string(), errno);
    missing.push_back(p);
    if (p == p.parent_path()) break;
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    if (::mkdir(it->c_str(), 0755) != 0 && errno != EEXIST) return io_error("cannot create directory", it->string(), errno);
    // The new directory itself (its "." and ".." entries), then the name in its parent.
    if (auto r = fsync_directory(it->string()); !r) return r.error();
    if (auto r = fsync_directory(it->parent_path().string()); !r) return r.error();
  }
  return !missing.empty();
}

}  // namespace sluice
