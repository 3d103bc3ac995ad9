#include "segment.h"

#include <algorithm>

#include "sluice/record_batch.h"

namespace sluice::fs_storage {

namespace {
constexpr std::uint32_t kIndexMagic = 0x58494c53;  // "SLIX"
// Version 2: the timestamp field is the segment's running maximum. Version 1 stored the
// last batch's max_timestamp, which must not be trusted for age retention: a v1 file fails
// decode and is rebuilt from the log.
constexpr std::uint32_t kIndexVersion = 2;
constexpr std::size_t kIndexHeader = 44;
}  // namespace

std::uint64_t Segment::lookup(std::uint64_t offset) const {
  if (offset <= base_ || index.empty()) return 0;
  const std::uint64_t rel = offset - base_;
  auto it = std::upper_bound(index.begin(), index.end(), rel,
                             [](std::uint64_t r, const IndexEntry& e) { return r < e.relative_offset; });
  if (it == index.begin()) return 0;
  return std::prev(it)->position;
}

std::string encode_index_file(const IndexFileContents& c) {
  std::string out(kIndexHeader + c.entries.size() * 8 + 4, '\0');
  char* p = out.data();
  wire::put_u32(p, kIndexMagic);
  wire::put_u32(p + 4, kIndexVersion);
  wire::put_u64(p + 8, c.base_offset);
  wire::put_u64(p + 16, c.log_size);
  wire::put_u64(p + 24, c.next_offset);
  wire::put_u64(p + 32, static_cast<std::uint64_t>(c.max_ts));
  wire::put_u32(p + 40, static_cast<std::uint32_t>(c.entries.size()));
  char* e = p + kIndexHeader;
  for (const auto& ent : c.entries) {
    wire::put_u32(e, ent.relative_offset);
    wire::put_u32(e + 4, ent.position);
    e += 8;
  }
  wire::put_u32(e, crc32c(p, out.size() - 4));
  return out;
}

Result<IndexFileContents> decode_index_file(std::string_view b) {
  auto bad = [](const char* why) { return Error(Errc::corrupt_data, why); };
  if (b.size() < kIndexHeader + 4) return bad("index too short");
  const char* p = b.data();
  if (wire::get_u32(p) != kIndexMagic) return bad("bad index magic");
  if (wire::get_u32(p + 4) != kIndexVersion) return bad("bad index version");
  const std::uint32_t n = wire::get_u32(p + 40);
  if (b.size() != kIndexHeader + std::size_t{n} * 8 + 4) return bad("bad index length");
  if (crc32c(p, b.size() - 4) != wire::get_u32(p + b.size() - 4)) return bad("bad index crc");
  IndexFileContents c;
  c.base_offset = wire::get_u64(p + 8);
  c.log_size = wire::get_u64(p + 16);
  c.next_offset = wire::get_u64(p + 24);
  c.max_ts = static_cast<std::int64_t>(wire::get_u64(p + 32));
  c.entries.reserve(n);
  const char* e = p + kIndexHeader;
  for (std::uint32_t i = 0; i < n; ++i, e += 8)
    c.entries.push_back({wire::get_u32(e), wire::get_u32(e + 4)});
  return c;
}

Result<void> write_index_file(FileSystem& fs, const std::string& index_path,
                              const IndexFileContents& c) {
  const std::string tmp = index_path + ".tmp";
  const std::string bytes = encode_index_file(c);
  auto f = fs.open(tmp, OpenMode::create_truncate);
  if (!f) return f.error();
  if (auto r = (*f)->pwrite(bytes.data(), bytes.size(), 0); !r) return r;
  if (auto r = (*f)->datasync(); !r) return r;
  f.value().reset();
  return fs.rename(tmp, index_path);
}

Result<std::string> read_whole_file(File& f) {
  auto sz = f.size();
  if (!sz) return sz.error();
  std::string data(*sz, '\0');
  auto n = f.pread(data.data(), data.size(), 0);
  if (!n) return n.error();
  data.resize(*n);
  return data;
}

}  // namespace sluice::fs_storage
