#include "sync_tracking.h"

namespace sluice::fs_storage {

namespace {

class TrackedFile final : public File {
 public:
  TrackedFile(std::unique_ptr<File> real, SyncTrackingFileSystem& fs) : real_(std::move(real)), fs_(fs) {}
  const std::string& path() const override { return real_->path(); }
  Result<std::size_t> pread(char* buf, std::size_t n, std::uint64_t offset) override {
    return real_->pread(buf, n, offset);
  }
  Result<void> pwritev(const struct iovec* iov, int count, std::uint64_t offset) override {
    return real_->pwritev(iov, count, offset);
  }
  Result<void> datasync() override {
    auto r = real_->datasync();
    // A failed sync of a temporary file (a recovery point, a producer snapshot, an epoch
    // history on its way in) is never renamed into place: nothing reads it back.
    if (!r && !real_->path().ends_with(".tmp")) fs_.note_failure(real_->path());
    return r;
  }
  void drop_cache(std::uint64_t offset, std::uint64_t len) override { real_->drop_cache(offset, len); }
  Result<std::size_t> pread_once(char* buf, std::size_t n, std::uint64_t offset) override {
    return real_->pread_once(buf, n, offset);
  }
  Result<void> truncate(std::uint64_t length) override { return real_->truncate(length); }
  Result<std::uint64_t> size() override { return real_->size(); }

 private:
  const std::unique_ptr<File> real_;
  SyncTrackingFileSystem& fs_;
};

}  // namespace

std::optional<std::string> SyncTrackingFileSystem::failed_under(const std::string& dir) const {
  std::lock_guard lk(mu_);
  for (auto it = failed_.lower_bound(dir); it != failed_.end() && it->compare(0, dir.size(), dir) == 0; ++it)
    if (it->size() == dir.size() || (*it)[dir.size()] == '/') return *it;
  return std::nullopt;
}

void SyncTrackingFileSystem::note_failure(const std::string& path) {
  std::lock_guard lk(mu_);
  failed_.insert(path);
}

Result<std::unique_ptr<File>> SyncTrackingFileSystem::open(const std::string& path, OpenMode mode) {
  auto f = real_->open(path, mode);
  if (!f) return f.error();
  return std::unique_ptr<File>(std::make_unique<TrackedFile>(std::move(f).value(), *this));
}

Result<void> SyncTrackingFileSystem::sync_dir(const std::string& path) {
  auto r = real_->sync_dir(path);
  if (!r) note_failure(path);
  return r;
}

}  // namespace sluice::fs_storage
