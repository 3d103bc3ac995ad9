#include "producers.h"

#include "sluice/record_batch.h"

namespace sluice::fs_storage {

namespace {
constexpr std::uint32_t kSnapMagic = 0x53504c53;  // "SLPS"
constexpr std::uint32_t kSnapVersion = 1;
constexpr std::size_t kSnapHeader = 20;
}  // namespace

ProducerTable::Check ProducerTable::check(std::uint64_t id, std::uint64_t seq) const {
  auto it = map_.find(id);
  if (it == map_.end()) return seq == 0 ? Check{Verdict::append, {}, 0} : Check{Verdict::gap, {}, 0};
  const State& s = it->second;
  if (seq == s.next_seq) return {Verdict::append, {}, s.next_seq};
  if (seq < s.next_seq && s.next_seq - seq <= s.n) {
    const Batch& b = s.recent[seq % kRecentBatches];
    if (b.seq == seq) return {Verdict::duplicate, b, s.next_seq};
  }
  return {Verdict::gap, {}, s.next_seq};
}

void ProducerTable::record(std::uint64_t id, std::uint64_t seq, std::uint64_t base,
                           std::uint32_t count) {
  State& s = map_[id];
  if (seq != s.next_seq) s.n = 0;
  s.recent[seq % kRecentBatches] = Batch{seq, base, count};
  if (s.n < kRecentBatches) ++s.n;
  s.next_seq = seq + 1;
}

std::string ProducerTable::encode_snapshot(std::uint64_t end_offset) const {
  std::string out(kSnapHeader, '\0');
  wire::put_u32(out.data(), kSnapMagic);
  wire::put_u32(out.data() + 4, kSnapVersion);
  wire::put_u64(out.data() + 8, end_offset);
  wire::put_u32(out.data() + 16, static_cast<std::uint32_t>(map_.size()));
  char buf[20];
  for (const auto& [id, s] : map_) {
    wire::put_u64(buf, id);
    wire::put_u64(buf + 8, s.next_seq);
    out.append(buf, 16);
    out.push_back(static_cast<char>(s.n));
    for (std::uint64_t seq = s.next_seq - s.n; seq < s.next_seq; ++seq) {
      const Batch& b = s.recent[seq % kRecentBatches];
      wire::put_u64(buf, b.seq);
      wire::put_u64(buf + 8, b.base);
      wire::put_u32(buf + 16, b.count);
      out.append(buf, 20);
    }
  }
  char crc[4];
  wire::put_u32(crc, crc32c(out.data(), out.size()));
  out.append(crc, 4);
  return out;
}

Result<ProducerTable> ProducerTable::decode_snapshot(std::string_view b, std::uint64_t* end) {
  auto bad = [](const char* why) { return Error(Errc::corrupt_data, why); };
  if (b.size() < kSnapHeader + 4) return bad("producer snapshot too short");
  const char* p = b.data();
  if (wire::get_u32(p) != kSnapMagic) return bad("bad producer snapshot magic");
  if (wire::get_u32(p + 4) != kSnapVersion) return bad("bad producer snapshot version");
  if (crc32c(p, b.size() - 4) != wire::get_u32(p + b.size() - 4))
    return bad("bad producer snapshot crc");
  *end = wire::get_u64(p + 8);
  const std::uint32_t count = wire::get_u32(p + 16);
  std::size_t pos = kSnapHeader;
  const std::size_t limit = b.size() - 4;
  ProducerTable t;
  for (std::uint32_t i = 0; i < count; ++i) {
    if (pos + 17 > limit) return bad("producer snapshot truncated");
    const std::uint64_t id = wire::get_u64(p + pos);
    const std::uint64_t next = wire::get_u64(p + pos + 8);
    const std::uint32_t n = static_cast<unsigned char>(p[pos + 16]);
    pos += 17;
    if (n > kRecentBatches || n > next || pos + n * 20 > limit) return bad("producer snapshot malformed");
    State& s = t.map_[id];
    s.next_seq = next;
    s.n = n;
    for (std::uint32_t j = 0; j < n; ++j, pos += 20) {
      Batch bt{wire::get_u64(p + pos), wire::get_u64(p + pos + 8), wire::get_u32(p + pos + 16)};
      if (bt.seq != next - n + j) return bad("producer snapshot malformed");
      s.recent[bt.seq % kRecentBatches] = bt;
    }
  }
  if (pos != limit) return bad("producer snapshot has trailing bytes");
  return t;
}

Result<void> write_producer_snapshot(FileSystem& fs, const std::string& path,
                                     const ProducerTable& t, std::uint64_t end_offset) {
  const std::string tmp = path + ".tmp";
  const std::string bytes = t.encode_snapshot(end_offset);
  auto f = fs.open(tmp, OpenMode::create_truncate);
  if (!f) return f.error();
  if (auto r = (*f)->pwrite(bytes.data(), bytes.size(), 0); !r) return r;
  if (auto r = (*f)->datasync(); !r) return r;
  f.value().reset();
  return fs.rename(tmp, path);
}

}  // namespace sluice::fs_storage
