#include "sluice/record_batch.h"

#include <algorithm>
#include <array>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace sluice {

namespace {

// Software CRC-32C (Castagnoli), reflected polynomial 0x82f63b78, slicing by one byte.
constexpr std::array<std::uint32_t, 256> make_table() {
  std::array<std::uint32_t, 256> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr auto kTable = make_table();

std::uint32_t crc32c_sw(const unsigned char* p, std::size_t n, std::uint32_t crc) {
  for (std::size_t i = 0; i < n; ++i) crc = kTable[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) std::uint32_t crc32c_hw(const unsigned char* p, std::size_t n,
                                                          std::uint32_t crc) {
  std::uint64_t c = crc;
  while (n >= 8) {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
    p += 8;
    n -= 8;
  }
  std::uint32_t c32 = static_cast<std::uint32_t>(c);
  while (n--) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}
const bool kHaveHw = __builtin_cpu_supports("sse4.2");
#endif

}  // namespace

std::uint32_t crc32c(const void* data, std::size_t n, std::uint32_t seed) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint32_t crc = ~seed;
#if defined(__x86_64__)
  crc = kHaveHw ? crc32c_hw(p, n, crc) : crc32c_sw(p, n, crc);
#else
  crc = crc32c_sw(p, n, crc);
#endif
  return ~crc;
}

BatchHeader BatchHeader::decode(const char* p) {
  BatchHeader h;
  h.magic = wire::get_u32(p);
  h.length = wire::get_u32(p + 4);
  h.crc = wire::get_u32(p + 8);
  h.version = wire::get_u16(p + 12);
  h.flags = wire::get_u16(p + 14);
  h.base_offset = wire::get_u64(p + 16);
  h.incarnation = wire::get_u64(p + 24);
  h.first_timestamp_ms = static_cast<std::int64_t>(wire::get_u64(p + 32));
  h.max_timestamp_ms = static_cast<std::int64_t>(wire::get_u64(p + 40));
  h.record_count = wire::get_u32(p + 48);
  h.producer_id = wire::get_u64(p + 56);
  h.producer_seq = wire::get_u64(p + 64);
  return h;
}

void BatchHeader::encode(char* p) const {
  wire::put_u32(p, magic);
  wire::put_u32(p + 4, length);
  wire::put_u32(p + 8, crc);
  wire::put_u16(p + 12, version);
  wire::put_u16(p + 14, flags);
  wire::put_u64(p + 16, base_offset);
  wire::put_u64(p + 24, incarnation);
  wire::put_u64(p + 32, static_cast<std::uint64_t>(first_timestamp_ms));
  wire::put_u64(p + 40, static_cast<std::uint64_t>(max_timestamp_ms));
  wire::put_u32(p + 48, record_count);
  wire::put_u32(p + 52, 0);
  wire::put_u64(p + 56, producer_id);
  wire::put_u64(p + 64, producer_seq);
}

std::string_view to_string(BatchCheck c) {
  switch (c) {
    case BatchCheck::ok: return "ok";
    case BatchCheck::truncated: return "truncated batch";
    case BatchCheck::bad_magic: return "bad magic";
    case BatchCheck::bad_length: return "bad length";
    case BatchCheck::bad_crc: return "CRC mismatch";
    case BatchCheck::bad_records: return "malformed records";
  }
  return "?";
}

namespace {
// Walks the records region; true if it is exactly `count` well-formed records.
bool records_well_formed(const char* p, const char* end, std::uint32_t count) {
  for (std::uint32_t i = 0; i < count; ++i) {
    if (static_cast<std::size_t>(end - p) < kRecordHeaderSize) return false;
    const std::uint32_t klen = wire::get_u32(p);
    const std::uint32_t vlen = wire::get_u32(p + 4);
    const std::uint32_t hlen = wire::get_u32(p + 8);
    std::uint64_t need = kRecordHeaderSize + std::uint64_t(klen == kNoKey ? 0 : klen) + vlen + hlen;
    if (need > static_cast<std::uint64_t>(end - p)) return false;
    p += need;
  }
  return p == end;
}
}  // namespace

BatchCheck check_batch(const char* p, std::size_t n, BatchHeader* out) {
  if (n < kBatchHeaderSize) return BatchCheck::truncated;
  BatchHeader h = BatchHeader::decode(p);
  if (h.magic != kBatchMagic) return BatchCheck::bad_magic;
  if (h.length < kBatchHeaderSize || h.version != kBatchVersion) return BatchCheck::bad_length;
  if (h.length > n) return BatchCheck::truncated;
  if (crc32c(p + 12, h.length - 12) != h.crc) return BatchCheck::bad_crc;
  if (h.record_count == 0 || !records_well_formed(p + kBatchHeaderSize, p + h.length, h.record_count))
    return BatchCheck::bad_records;
  if (out) *out = h;
  return BatchCheck::ok;
}

void restamp_batch(char* p, std::uint64_t base_offset, std::uint64_t incarnation) {
  wire::put_u64(p + 16, base_offset);
  wire::put_u64(p + 24, incarnation);
  const std::uint32_t len = wire::get_u32(p + 4);
  wire::put_u32(p + 8, crc32c(p + 12, len - 12));
}

BatchBuilder::BatchBuilder() { buf_.resize(kBatchHeaderSize); }

void BatchBuilder::add(std::optional<std::string_view> key, std::string_view value,
                       std::string_view headers, std::int64_t timestamp_ms) {
  const std::size_t klen = key ? key->size() : 0;
  const std::size_t at = buf_.size();
  buf_.resize(at + kRecordHeaderSize + klen + value.size() + headers.size());
  char* p = buf_.data() + at;
  wire::put_u32(p, key ? static_cast<std::uint32_t>(klen) : kNoKey);
  wire::put_u32(p + 4, static_cast<std::uint32_t>(value.size()));
  wire::put_u32(p + 8, static_cast<std::uint32_t>(headers.size()));
  wire::put_u64(p + 12, static_cast<std::uint64_t>(timestamp_ms));
  p += kRecordHeaderSize;
  if (klen) std::memcpy(p, key->data(), klen);
  p += klen;
  if (!value.empty()) std::memcpy(p, value.data(), value.size());
  p += value.size();
  if (!headers.empty()) std::memcpy(p, headers.data(), headers.size());
  if (count_ == 0) first_ts_ = max_ts_ = timestamp_ms;
  if (timestamp_ms > max_ts_) max_ts_ = timestamp_ms;
  ++count_;
}

std::string BatchBuilder::finish() {
  BatchHeader h;
  h.length = static_cast<std::uint32_t>(buf_.size());
  h.first_timestamp_ms = first_ts_;
  h.max_timestamp_ms = max_ts_;
  h.record_count = count_;
  h.producer_id = producer_id_;
  h.producer_seq = producer_seq_;
  h.encode(buf_.data());
  wire::put_u32(buf_.data() + 8, crc32c(buf_.data() + 12, buf_.size() - 12));
  std::string out;
  out.swap(buf_);
  buf_.resize(kBatchHeaderSize);
  count_ = 0;
  producer_id_ = producer_seq_ = 0;
  return out;
}

void append_header(std::string& out, std::string_view name, std::string_view value) {
  char b[4];
  wire::put_u16(b, static_cast<std::uint16_t>(name.size()));
  out.append(b, 2).append(name);
  wire::put_u32(b, static_cast<std::uint32_t>(value.size()));
  out.append(b, 4).append(value);
}

bool decode_headers(std::string_view enc, std::vector<Header>& out) {
  const char* p = enc.data();
  const char* end = p + enc.size();
  while (p < end) {
    if (end - p < 2) return false;
    const std::uint16_t nl = wire::get_u16(p);
    p += 2;
    if (end - p < nl + 4) return false;
    std::string_view name(p, nl);
    p += nl;
    const std::uint32_t vl = wire::get_u32(p);
    p += 4;
    if (static_cast<std::uint64_t>(end - p) < vl) return false;
    out.push_back({name, std::string_view(p, vl)});
    p += vl;
  }
  return true;
}

BatchReader::BatchReader(const char* batch, std::size_t len)
    : h_(BatchHeader::decode(batch)),
      p_(batch + kBatchHeaderSize),
      end_(batch + std::min<std::size_t>(len, h_.length)),
      next_offset_(h_.base_offset) {}

bool BatchReader::next(RecordView& r) {
  if (static_cast<std::size_t>(end_ - p_) < kRecordHeaderSize) return false;
  const std::uint32_t klen = wire::get_u32(p_);
  const std::uint32_t vlen = wire::get_u32(p_ + 4);
  const std::uint32_t hlen = wire::get_u32(p_ + 8);
  const std::uint64_t kbytes = klen == kNoKey ? 0 : klen;
  if (kRecordHeaderSize + kbytes + vlen + hlen > static_cast<std::uint64_t>(end_ - p_)) return false;
  r.timestamp_ms = static_cast<std::int64_t>(wire::get_u64(p_ + 12));
  const char* q = p_ + kRecordHeaderSize;
  if (klen == kNoKey) r.key.reset(); else r.key = std::string_view(q, klen);
  q += kbytes;
  r.value = std::string_view(q, vlen);
  q += vlen;
  r.headers = std::string_view(q, hlen);
  q += hlen;
  r.offset = next_offset_++;
  p_ = q;
  return true;
}

}  // namespace sluice
