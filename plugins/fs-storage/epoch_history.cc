#include "epoch_history.h"

#include <algorithm>

#include "segment.h"
#include "sluice/record_batch.h"

namespace sluice::fs_storage {

namespace {
constexpr std::uint32_t kMagic = 0x48454c53;  // "SLEH"
constexpr std::uint32_t kVersion = 1;
constexpr std::size_t kHeader = 28;
}  // namespace

std::string EpochHistory::encode(LeaderEpoch current, LeaderEpoch led,
                                 const std::vector<EpochEntry>& entries) {
  std::string out(kHeader + entries.size() * 16 + 4, '\0');
  char* p = out.data();
  wire::put_u32(p, kMagic);
  wire::put_u32(p + 4, kVersion);
  wire::put_u64(p + 8, current.value());
  wire::put_u64(p + 16, led.value());
  wire::put_u32(p + 24, static_cast<std::uint32_t>(entries.size()));
  char* e = p + kHeader;
  for (const auto& en : entries) {
    wire::put_u64(e, en.epoch.value());
    wire::put_u64(e + 8, en.start_offset.value());
    e += 16;
  }
  wire::put_u32(e, crc32c(p, out.size() - 4));
  return out;
}

Result<EpochHistory> EpochHistory::decode(std::string_view b, const std::string& path) {
  auto bad = [&](const char* why) {
    return Error(Errc::corrupt_data, "leader-epoch history " + path + " is corrupt: " + why);
  };
  if (b.size() < kHeader + 4) return bad("too short");
  const char* p = b.data();
  if (wire::get_u32(p) != kMagic) return bad("bad magic");
  if (wire::get_u32(p + 4) != kVersion) return bad("unknown version");
  const std::uint32_t n = wire::get_u32(p + 24);
  if (b.size() != kHeader + std::size_t{n} * 16 + 4) return bad("bad length");
  if (crc32c(p, b.size() - 4) != wire::get_u32(p + b.size() - 4)) return bad("bad crc");
  EpochHistory h;
  h.current_ = LeaderEpoch(wire::get_u64(p + 8));
  h.led_ = LeaderEpoch(wire::get_u64(p + 16));
  if (h.led_ > h.current_) return bad("led epoch above the current epoch");
  const char* e = p + kHeader;
  for (std::uint32_t i = 0; i < n; ++i, e += 16) {
    EpochEntry en{LeaderEpoch(wire::get_u64(e)), Offset(wire::get_u64(e + 8))};
    if (!h.entries_.empty() && (en.epoch <= h.entries_.back().epoch ||
                                en.start_offset < h.entries_.back().start_offset))
      return bad("entries out of order");
    if (en.epoch > h.current_) return bad("an entry above the current epoch");
    h.entries_.push_back(en);
  }
  return h;
}

Result<EpochHistory> EpochHistory::load(FileSystem& fs, const std::string& shard_dir) {
  (void)fs.remove(shard_dir + "/" + std::string(kEpochHistoryName) + ".tmp");
  return read(fs, shard_dir);
}

Result<EpochHistory> EpochHistory::read(FileSystem& fs, const std::string& shard_dir) {
  const std::string path = shard_dir + "/" + std::string(kEpochHistoryName);
  auto ex = fs.exists(path);
  if (!ex) return ex.error();
  if (!*ex) return EpochHistory();
  auto f = fs.open(path, OpenMode::read_write);
  if (!f) return f.error();
  auto bytes = read_whole_file(**f);
  if (!bytes) return bytes.error();
  return decode(*bytes, path);
}

Result<void> EpochHistory::save(FileSystem& fs, const std::string& shard_dir, LeaderEpoch current,
                                LeaderEpoch led, std::vector<EpochEntry> entries) {
  const std::string path = shard_dir + "/" + std::string(kEpochHistoryName);
  const std::string tmp = path + ".tmp";
  const std::string bytes = encode(current, led, entries);
  {
    auto f = fs.open(tmp, OpenMode::create_truncate);
    if (!f) return f.error();
    if (auto r = (*f)->pwrite(bytes.data(), bytes.size(), 0); !r) return r;
    if (auto r = (*f)->datasync(); !r) return r;
  }
  if (auto r = fs.rename(tmp, path); !r) return r;
  if (auto r = fs.sync_dir(shard_dir); !r) return r;
  current_ = current;
  led_ = led;
  entries_ = std::move(entries);
  return {};
}

Result<void> write_hwm_checkpoint(FileSystem& fs, const std::string& shard_dir, Offset hwm) {
  const std::string path = shard_dir + "/" + std::string(kHighWatermarkName);
  char buf[12];
  wire::put_u64(buf, hwm.value());
  wire::put_u32(buf + 8, crc32c(buf, 8));
  {
    auto f = fs.open(path + ".tmp", OpenMode::create_truncate);
    if (!f) return f.error();
    if (auto r = (*f)->pwrite(buf, sizeof buf, 0); !r) return r;
    if (auto r = (*f)->datasync(); !r) return r;
  }
  return fs.rename(path + ".tmp", path);
}

std::optional<Offset> read_hwm_checkpoint(FileSystem& fs, const std::string& shard_dir) {
  const std::string path = shard_dir + "/" + std::string(kHighWatermarkName);
  (void)fs.remove(path + ".tmp");
  auto ex = fs.exists(path);
  if (!ex || !*ex) return std::nullopt;
  auto f = fs.open(path, OpenMode::read_write);
  if (!f) return std::nullopt;
  auto bytes = read_whole_file(**f);
  if (!bytes || bytes->size() != 12 || crc32c(bytes->data(), 8) != wire::get_u32(bytes->data() + 8))
    return std::nullopt;
  return Offset(wire::get_u64(bytes->data()));
}

LeaderEpoch EpochHistory::epoch_at(Offset offset) const {
  auto it = std::upper_bound(entries_.begin(), entries_.end(), offset,
                             [](Offset o, const EpochEntry& e) { return o < e.start_offset; });
  if (it == entries_.begin()) return LeaderEpoch(0);
  return std::prev(it)->epoch;
}

std::optional<Offset> EpochHistory::next_boundary_after(Offset offset) const {
  auto it = std::upper_bound(entries_.begin(), entries_.end(), offset,
                             [](Offset o, const EpochEntry& e) { return o < e.start_offset; });
  if (it == entries_.end()) return std::nullopt;
  return it->start_offset;
}

EpochEnd EpochHistory::end_offset_for(LeaderEpoch e, Offset log_end) const {
  if (entries_.empty()) return {LeaderEpoch(0), log_end};
  // The first entry with an epoch above e.
  auto higher = std::upper_bound(entries_.begin(), entries_.end(), e,
                                 [](LeaderEpoch x, const EpochEntry& en) { return x < en.epoch; });
  if (higher == entries_.end()) return {entries_.back().epoch, log_end};
  if (higher == entries_.begin()) return {e, higher->start_offset};
  return {std::prev(higher)->epoch, higher->start_offset};
}

std::vector<EpochEntry> EpochHistory::truncated(Offset end) const {
  std::vector<EpochEntry> out;
  for (const auto& en : entries_)
    if (en.start_offset < end) out.push_back(en);
  return out;
}

}  // namespace sluice::fs_storage
