// The file-system seam of fs-storage (modelled on LevelDB's Env): every file operation the
// engine performs goes through FileSystem/File, so tests can substitute a fault-injecting
// implementation that drops unsynced bytes, tears writes, or fails fdatasync with EIO.
//
// Errors: every operation returns a Result; I/O errors are Errc::storage_failure with a
// message naming the path and strerror. Nothing here throws.
//
// Thread-safety: a FileSystem may be used from any thread. A File may be used from several
// threads for pread; writes to one File are issued by one thread at a time (the shard's
// flusher), which is what the engine guarantees.
//
// Ownership: open() hands the caller a File it owns; the descriptor closes when the File is
// destroyed. A File stays usable after its path is removed (POSIX unlink semantics), which
// retention relies on while a reader still holds a segment.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sluice/error.h"

namespace sluice::fs_storage {

class File {
 public:
  virtual ~File() = default;
  virtual const std::string& path() const = 0;
  // Reads up to n bytes at `offset`; returns the number read (short only at end of file).
  virtual Result<std::size_t> pread(char* buf, std::size_t n, std::uint64_t offset) = 0;
  // Writes all iovecs contiguously at `offset` (retries short writes, splits at IOV_MAX).
  virtual Result<void> pwritev(const struct iovec* iov, int count, std::uint64_t offset) = 0;
  virtual Result<void> datasync() = 0;  // fdatasync(2)
  // Advice that [offset, offset + len) need not stay in the page cache (len 0: to the end
  // of the file): posix_fadvise(POSIX_FADV_DONTNEED). Only clean (synced) pages are dropped;
  // a later read finds the bytes on disk. A hint: it cannot fail, and a file system without
  // a page cache ignores it (docs/architecture.md "Page-cache window").
  virtual void drop_cache(std::uint64_t offset, std::uint64_t len) { (void)offset, (void)len; }
  // As pread, for a scan that reads a log once (background verification), leaving the page
  // cache as it found it: what was cached stays cached, and the whole pages this read brought
  // in from disk are dropped again (docs/architecture.md "Restart: background
  // verification"). By default a plain pread.
  virtual Result<std::size_t> pread_once(char* buf, std::size_t n, std::uint64_t offset) {
    return pread(buf, n, offset);
  }
  virtual Result<void> truncate(std::uint64_t length) = 0;
  virtual Result<std::uint64_t> size() = 0;

  Result<void> pwrite(const char* buf, std::size_t n, std::uint64_t offset) {
    struct iovec v{const_cast<char*>(buf), n};
    return pwritev(&v, 1, offset);
  }
};

enum class OpenMode {
  read_write,       // existing file only
  create_new,       // O_CREAT | O_EXCL: fails if the file exists
  create_truncate,  // O_CREAT | O_TRUNC
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;
  virtual Result<std::unique_ptr<File>> open(const std::string& path, OpenMode mode) = 0;
  virtual Result<bool> exists(const std::string& path) = 0;
  // Creates one directory; ok if it already exists (returns false then, true if created).
  virtual Result<bool> mkdir(const std::string& path) = 0;
  virtual Result<void> sync_dir(const std::string& path) = 0;  // fsync of a directory
  // Entry names (not paths) of a directory, without "." and "..", unsorted.
  virtual Result<std::vector<std::string>> list(const std::string& dir) = 0;
  virtual Result<void> remove(const std::string& path) = 0;  // ok if absent
  virtual Result<void> remove_dir(const std::string& path) = 0;  // rmdir(2) of an empty dir; ok if absent
  virtual Result<bool> is_directory(const std::string& path) = 0;  // false if absent
  virtual Result<void> rename(const std::string& from, const std::string& to) = 0;
  virtual Result<std::uint64_t> file_size(const std::string& path) = 0;
};

// The real thing: POSIX calls, O_CLOEXEC everywhere.
class PosixFileSystem final : public FileSystem {
 public:
  Result<std::unique_ptr<File>> open(const std::string& path, OpenMode mode) override;
  Result<bool> exists(const std::string& path) override;
  Result<bool> mkdir(const std::string& path) override;
  Result<void> sync_dir(const std::string& path) override;
  Result<std::vector<std::string>> list(const std::string& dir) override;
  Result<void> remove(const std::string& path) override;
  Result<void> remove_dir(const std::string& path) override;
  Result<bool> is_directory(const std::string& path) override;
  Result<void> rename(const std::string& from, const std::string& to) override;
  Result<std::uint64_t> file_size(const std::string& path) override;
};

// Removes `path` and everything below it (files and directories; no symlink following).
// Ok if absent. Not atomic: used only for garbage (.deleted/ entries).
Result<void> remove_tree(FileSystem& fs, const std::string& path);

// Error helper: Errc::storage_failure "<op> <path>: <strerror(err)>".
Error io_error(std::string_view op, const std::string& path, int err);

}  // namespace sluice::fs_storage
