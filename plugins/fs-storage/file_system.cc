#include "file_system.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

namespace sluice::fs_storage {

Error io_error(std::string_view op, const std::string& path, int err) {
  return Error(Errc::storage_failure,
               std::string(op) + " " + path + ": " + ::strerror(err));
}

namespace {

class PosixFile final : public File {
 public:
  PosixFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~PosixFile() override { ::close(fd_); }

  const std::string& path() const override { return path_; }

  Result<std::size_t> pread(char* buf, std::size_t n, std::uint64_t offset) override {
    std::size_t done = 0;
    while (done < n) {
      ssize_t r = ::pread(fd_, buf + done, n - done, static_cast<off_t>(offset + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        return io_error("pread", path_, errno);
      }
      if (r == 0) break;
      done += static_cast<std::size_t>(r);
    }
    return done;
  }

  void drop_cache(std::uint64_t offset, std::uint64_t len) override {
    (void)::posix_fadvise(fd_, static_cast<off_t>(offset), static_cast<off_t>(len), POSIX_FADV_DONTNEED);
  }

  // RWF_NOWAIT reads only what the page cache holds (a short count, or EAGAIN for none):
  // that prefix was cached before us. The rest is read as usual and then dropped; the
  // kernel drops only whole pages inside the range, so a page shared with the cached prefix
  // stays. A kernel or file system without RWF_NOWAIT for buffered reads (EOPNOTSUPP,
  // EINVAL) gets a plain pread, and the cache is left alone.
  Result<std::size_t> pread_once(char* buf, std::size_t n, std::uint64_t offset) override {
    std::size_t cached = 0;
    while (cached < n) {
      struct iovec v{buf + cached, n - cached};
      ssize_t r = ::preadv2(fd_, &v, 1, static_cast<off_t>(offset + cached), RWF_NOWAIT);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && errno != EAGAIN) {
        if (errno == EOPNOTSUPP || errno == EINVAL) return pread(buf, n, offset);
        return io_error("preadv2", path_, errno);
      }
      if (r <= 0) break;  // EAGAIN: not cached from here; 0: end of file
      cached += static_cast<std::size_t>(r);
    }
    if (cached == n) return n;
    auto rest = pread(buf + cached, n - cached, offset + cached);
    if (!rest) return rest.error();
    if (*rest > 0) drop_cache(offset + cached, *rest);
    return cached + *rest;
  }

  Result<void> pwritev(const struct iovec* iov, int count, std::uint64_t offset) override {
    // Copy so short writes can advance through the vector without touching the caller's.
    std::vector<struct iovec> v(iov, iov + count);
    std::size_t i = 0;
    while (i < v.size()) {
      if (v[i].iov_len == 0) { ++i; continue; }
      int n = static_cast<int>(std::min<std::size_t>(v.size() - i, IOV_MAX));
      ssize_t r = ::pwritev(fd_, v.data() + i, n, static_cast<off_t>(offset));
      if (r < 0) {
        if (errno == EINTR) continue;
        return io_error("pwritev", path_, errno);
      }
      offset += static_cast<std::uint64_t>(r);
      std::size_t left = static_cast<std::size_t>(r);
      while (left > 0 && i < v.size()) {
        if (left >= v[i].iov_len) {
          left -= v[i].iov_len;
          ++i;
        } else {
          v[i].iov_base = static_cast<char*>(v[i].iov_base) + left;
          v[i].iov_len -= left;
          left = 0;
        }
      }
    }
    return {};
  }

  Result<void> datasync() override {
    if (::fdatasync(fd_) != 0) return io_error("fdatasync", path_, errno);
    return {};
  }

  Result<void> truncate(std::uint64_t length) override {
    if (::ftruncate(fd_, static_cast<off_t>(length)) != 0)
      return io_error("ftruncate", path_, errno);
    return {};
  }

  Result<std::uint64_t> size() override {
    struct stat st;
    if (::fstat(fd_, &st) != 0) return io_error("fstat", path_, errno);
    return static_cast<std::uint64_t>(st.st_size);
  }

 private:
  int fd_;
  std::string path_;
};

}  // namespace

Result<std::unique_ptr<File>> PosixFileSystem::open(const std::string& path, OpenMode mode) {
  int flags = O_RDWR | O_CLOEXEC;
  if (mode == OpenMode::create_new) flags |= O_CREAT | O_EXCL;
  if (mode == OpenMode::create_truncate) flags |= O_CREAT | O_TRUNC;
  int fd;
  do {
    fd = ::open(path.c_str(), flags, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return io_error("open", path, errno);
  return std::unique_ptr<File>(std::make_unique<PosixFile>(fd, path));
}

Result<bool> PosixFileSystem::exists(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) return true;
  if (errno == ENOENT) return false;
  return io_error("stat", path, errno);
}

Result<bool> PosixFileSystem::mkdir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) == 0) return true;
  if (errno == EEXIST) return false;
  return io_error("mkdir", path, errno);
}

Result<void> PosixFileSystem::sync_dir(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return io_error("open dir", path, errno);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return io_error("fsync dir", path, err);
  return {};
}

Result<std::vector<std::string>> PosixFileSystem::list(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return io_error("opendir", dir, errno);
  std::vector<std::string> out;
  errno = 0;
  while (struct dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") out.push_back(std::move(name));
  }
  int err = errno;
  ::closedir(d);
  if (err != 0) return io_error("readdir", dir, err);
  return out;
}

Result<void> PosixFileSystem::remove(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return io_error("unlink", path, errno);
  return {};
}

Result<void> PosixFileSystem::remove_dir(const std::string& path) {
  if (::rmdir(path.c_str()) != 0 && errno != ENOENT) return io_error("rmdir", path, errno);
  return {};
}

Result<bool> PosixFileSystem::is_directory(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) return S_ISDIR(st.st_mode);
  if (errno == ENOENT) return false;
  return io_error("lstat", path, errno);
}

Result<void> remove_tree(FileSystem& fs, const std::string& path) {
  auto dir = fs.is_directory(path);
  if (!dir) return dir.error();
  if (!*dir) return fs.remove(path);
  auto names = fs.list(path);
  if (!names) return names.error();
  for (const auto& n : *names)
    if (auto r = remove_tree(fs, path + "/" + n); !r) return r;
  return fs.remove_dir(path);
}

Result<void> PosixFileSystem::rename(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) return io_error("rename", from + " -> " + to, errno);
  return {};
}

Result<std::uint64_t> PosixFileSystem::file_size(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return io_error("stat", path, errno);
  return static_cast<std::uint64_t>(st.st_size);
}

}  // namespace sluice::fs_storage
