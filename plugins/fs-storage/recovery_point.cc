#include "recovery_point.h"

#include <sys/uio.h>

#include "sluice/record_batch.h"

namespace sluice::fs_storage {

namespace {
constexpr std::uint32_t kMagic = 0x534c5250;  // "SLRP"
constexpr std::uint32_t kVersion = 1;
constexpr std::size_t kSize = 48;
}  // namespace

std::string encode_recovery_point(const RecoveryPoint& rp) {
  std::string out(kSize, '\0');
  char* p = out.data();
  wire::put_u32(p, kMagic);
  wire::put_u32(p + 4, kVersion);
  wire::put_u64(p + 8, rp.segment_base);
  wire::put_u64(p + 16, rp.position);
  wire::put_u64(p + 24, rp.next_offset);
  wire::put_u64(p + 32, static_cast<std::uint64_t>(rp.max_ts));
  wire::put_u32(p + 40, static_cast<std::uint32_t>((rp.reserved_end + 4095) / 4096));
  wire::put_u32(p + 44, crc32c(p, 44));
  return out;
}

std::optional<RecoveryPoint> decode_recovery_point(std::string_view b) {
  if (b.size() != kSize) return std::nullopt;
  const char* p = b.data();
  if (wire::get_u32(p) != kMagic || wire::get_u32(p + 4) != kVersion) return std::nullopt;
  if (crc32c(p, 44) != wire::get_u32(p + 44)) return std::nullopt;
  RecoveryPoint rp;
  rp.segment_base = wire::get_u64(p + 8);
  rp.position = wire::get_u64(p + 16);
  rp.next_offset = wire::get_u64(p + 24);
  rp.max_ts = static_cast<std::int64_t>(wire::get_u64(p + 32));
  rp.reserved_end = std::uint64_t{wire::get_u32(p + 40)} * 4096;
  if (rp.next_offset < rp.segment_base) return std::nullopt;
  if (rp.reserved_end != 0 && rp.reserved_end < rp.position) return std::nullopt;
  return rp;
}

Result<void> write_recovery_point(FileSystem& fs, const std::string& log_dir, const RecoveryPoint& rp,
                                  bool durable) {
  const std::string path = log_dir + "/" + std::string(kRecoveryPointName);
  const std::string bytes = encode_recovery_point(rp);
  {
    auto f = fs.open(path + ".tmp", OpenMode::create_truncate);
    if (!f) return f.error();
    if (auto r = (*f)->pwrite(bytes.data(), bytes.size(), 0); !r) return r;
    if (auto r = (*f)->datasync(); !r) return r;
  }
  if (auto r = fs.rename(path + ".tmp", path); !r || !durable) return r;
  return fs.sync_dir(log_dir);
}

std::optional<RecoveryPoint> read_recovery_point(FileSystem& fs, const std::string& log_dir) {
  const std::string path = log_dir + "/" + std::string(kRecoveryPointName);
  auto ex = fs.exists(path);
  if (!ex || !*ex) return std::nullopt;
  auto f = fs.open(path, OpenMode::read_write);
  if (!f) return std::nullopt;
  auto bytes = read_whole_file(**f);
  if (!bytes) return std::nullopt;
  return decode_recovery_point(*bytes);
}

Result<void> remove_recovery_point(FileSystem& fs, const std::string& log_dir) {
  const std::string path = log_dir + "/" + std::string(kRecoveryPointName);
  auto ex = fs.exists(path);
  if (!ex) return ex.error();
  if (!*ex) return {};
  if (auto r = fs.remove(path); !r) return r;
  return fs.sync_dir(log_dir);
}

Result<bool> take_clean_marker(FileSystem& fs, const std::string& root) {
  const std::string path = root + "/" + std::string(kCleanShutdownName);
  auto ex = fs.exists(path);
  if (!ex) return ex.error();
  if (!*ex) return false;
  if (auto r = fs.remove(path); !r) return r.error();
  if (auto r = fs.sync_dir(root); !r) return r.error();
  return true;
}

Result<void> write_clean_marker(FileSystem& fs, const std::string& root) {
  const std::string path = root + "/" + std::string(kCleanShutdownName);
  {
    auto f = fs.open(path, OpenMode::create_truncate);
    if (!f) return f.error();
    if (auto r = (*f)->datasync(); !r) return r;
  }
  return fs.sync_dir(root);
}

Result<void> write_corrupt_marker(FileSystem& fs, const std::string& root, const CorruptMarker& m) {
  const std::string path = root + "/" + std::string(kCorruptMarkerName);
  const std::string message = m.log_dir + "\n" + m.message;
  {
    auto f = fs.open(path + ".tmp", OpenMode::create_truncate);
    if (!f) return f.error();
    struct iovec iov{const_cast<char*>(message.data()), message.size()};
    if (auto r = (*f)->pwritev(&iov, 1, 0); !r) return r;
    if (auto r = (*f)->datasync(); !r) return r;
  }
  if (auto r = fs.rename(path + ".tmp", path); !r) return r;
  return fs.sync_dir(root);
}

Result<std::optional<CorruptMarker>> read_corrupt_marker(FileSystem& fs, const std::string& root) {
  const std::string path = root + "/" + std::string(kCorruptMarkerName);
  auto ex = fs.exists(path);
  if (!ex) return ex.error();
  if (!*ex) return std::optional<CorruptMarker>();
  auto f = fs.open(path, OpenMode::read_write);
  if (!f) return f.error();
  auto bytes = read_whole_file(**f);
  if (!bytes) return bytes.error();
  CorruptMarker m;
  const auto nl = bytes->find('\n');
  if (nl == std::string::npos) {
    m.message = *bytes;  // no log named: only a repair start that checks every log clears it
  } else {
    m.log_dir = bytes->substr(0, nl);
    m.message = bytes->substr(nl + 1);
  }
  return std::optional<CorruptMarker>(std::move(m));
}

Result<void> remove_corrupt_marker(FileSystem& fs, const std::string& root) {
  const std::string path = root + "/" + std::string(kCorruptMarkerName);
  if (auto r = fs.remove(path); !r) return r;
  return fs.sync_dir(root);
}

}  // namespace sluice::fs_storage
