#include "sluice/record_batch.h"

#include <algorithm>
#include <array>
#include <cstring>

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

// GF(2) matrices on the 32-bit CRC register (the zero-byte shifts below).
using Gf2Op = std::array<std::uint32_t, 32>;  // column i: the image of bit i

constexpr std::uint32_t gf2_apply(const Gf2Op& m, std::uint32_t v) {
  std::uint32_t r = 0;
  for (int i = 0; v != 0; ++i, v >>= 1)
    if (v & 1) r ^= m[i];
  return r;
}

constexpr Gf2Op gf2_square(const Gf2Op& m) {
  Gf2Op r{};
  for (int i = 0; i < 32; ++i) r[i] = gf2_apply(m, m[i]);
  return r;
}

#if defined(__x86_64__)
// Hardware CRC-32C. One `crc32` instruction has a latency of three cycles and a throughput
// of one, so a single dependency chain runs at a third of the unit's speed. Long inputs are
// cut into three adjacent blocks whose CRCs run as three independent chains, then joined:
// for the raw register, crc(s, A || B) = shift_|B|(crc(s, A)) ^ crc(0, B), where shift_n is
// "feed n zero bytes", a linear map on 32 bits (a GF(2) matrix), applied here through four
// 256-entry tables per block size. Batches are 64 KiB, so this is the publish path's CRC,
// the follower's check of every replicated batch, and the recovery scan.
using ShiftTable = std::array<std::array<std::uint32_t, 256>, 4>;

// shift by 2^log2_bytes zero bytes.
constexpr ShiftTable make_shift(int log2_bytes) {
  Gf2Op op{};  // one zero bit: reflected, so shift right and fold in the polynomial
  op[0] = 0x82f63b78u;
  for (int i = 1; i < 32; ++i) op[i] = 1u << (i - 1);
  for (int k = 0; k < log2_bytes + 3; ++k) op = gf2_square(op);
  ShiftTable t{};
  for (int k = 0; k < 4; ++k)
    for (std::uint32_t b = 0; b < 256; ++b) t[k][b] = gf2_apply(op, b << (8 * k));
  return t;
}

constexpr std::size_t kLongBlock = 8192;  // 2^13
constexpr std::size_t kShortBlock = 256;  // 2^8
constexpr ShiftTable kShiftLong = make_shift(13);
constexpr ShiftTable kShiftShort = make_shift(8);

inline std::uint64_t load64(const unsigned char* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

inline std::uint64_t shift(const ShiftTable& t, std::uint64_t c) {
  return t[0][c & 0xff] ^ t[1][(c >> 8) & 0xff] ^ t[2][(c >> 16) & 0xff] ^ t[3][(c >> 24) & 0xff];
}

// Consumes rounds of three adjacent blocks of `block` bytes while they last.
__attribute__((target("sse4.2"))) inline std::uint64_t crc32c_3way(const unsigned char*& p,
                                                                 std::size_t& n, std::uint64_t c,
                                                                 std::size_t block,
                                                                 const ShiftTable& t) {
  while (n >= 3 * block) {
    std::uint64_t c1 = 0, c2 = 0;
    for (std::size_t i = 0; i < block; i += 8) {
      c = _mm_crc32_u64(c, load64(p + i));
      c1 = _mm_crc32_u64(c1, load64(p + block + i));
      c2 = _mm_crc32_u64(c2, load64(p + 2 * block + i));
    }
    c = shift(t, c) ^ c1;
    c = shift(t, c) ^ c2;
    p += 3 * block;
    n -= 3 * block;
  }
  return c;
}

__attribute__((target("sse4.2"))) std::uint32_t crc32c_hw(const unsigned char* p, std::size_t n,
                                                          std::uint32_t crc) {
  std::uint64_t c = crc;
  c = crc32c_3way(p, n, c, kLongBlock, kShiftLong);
  c = crc32c_3way(p, n, c, kShortBlock, kShiftShort);
  while (n >= 8) {
    c = _mm_crc32_u64(c, load64(p));
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

namespace {
// The raw register update (no pre/post inversion), on whichever unit crc32c() uses.
std::uint32_t crc32c_raw(const unsigned char* p, std::size_t n, std::uint32_t crc) {
#if defined(__x86_64__)
  return kHaveHw ? crc32c_hw(p, n, crc) : crc32c_sw(p, n, crc);
#else
  return crc32c_sw(p, n, crc);
#endif
}

// Feeding 2^k zero bytes to the raw register, for k = 0..31, as GF(2) matrices; built
// once, on first use (4 KiB).
const std::array<Gf2Op, 32>& zero_byte_ops() {
  static const std::array<Gf2Op, 32> ops = [] {
    std::array<Gf2Op, 32> o{};
    Gf2Op op{};  // one zero bit
    op[0] = 0x82f63b78u;
    for (int i = 1; i < 32; ++i) op[i] = 1u << (i - 1);
    for (int k = 0; k < 3; ++k) op = gf2_square(op);  // one zero byte
    for (auto& x : o) {
      x = op;
      op = gf2_square(op);
    }
    return o;
  }();
  return ops;
}

// The raw register after feeding n zero bytes: O(log n) matrix applications.
std::uint32_t crc32c_shift_zeros(std::uint32_t crc, std::uint64_t n) {
  const auto& ops = zero_byte_ops();
  for (int k = 0; n != 0 && k < 32; ++k, n >>= 1)
    if (n & 1) crc = gf2_apply(ops[k], crc);
  return crc;
}
}  // namespace

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

BatchCheck check_batch_frame(const char* p, std::size_t n, BatchHeader* out) {
  if (n < kBatchHeaderSize) return BatchCheck::truncated;
  BatchHeader h = BatchHeader::decode(p);
  if (h.magic != kBatchMagic) return BatchCheck::bad_magic;
  if (h.length < kBatchHeaderSize || h.version != kBatchVersion) return BatchCheck::bad_length;
  if (h.length > n) return BatchCheck::truncated;
  if (crc32c(p + 12, h.length - 12) != h.crc) return BatchCheck::bad_crc;
  if (h.record_count == 0) return BatchCheck::bad_records;
  if (out) *out = h;
  return BatchCheck::ok;
}

BatchCheck check_batch(const char* p, std::size_t n, BatchHeader* out) {
  BatchHeader h;
  if (const BatchCheck c = check_batch_frame(p, n, &h); c != BatchCheck::ok) return c;
  if (!records_well_formed(p + kBatchHeaderSize, p + h.length, h.record_count)) return BatchCheck::bad_records;
  if (out) *out = h;
  return BatchCheck::ok;
}

void restamp_batch(char* p, std::uint64_t base_offset, std::uint64_t incarnation) {
  wire::put_u64(p + 16, base_offset);
  wire::put_u64(p + 24, incarnation);
  const std::uint32_t len = wire::get_u32(p + 4);
  wire::put_u32(p + 8, crc32c(p + 12, len - 12));
}

void restamp_checked_batch(char* p, std::uint64_t base_offset, std::uint64_t incarnation) {
  // The CRC is linear: for messages of equal length, crc(new) = crc(old) ^ raw(old ^ new),
  // where raw is the register with no inversions. old ^ new is zero but for bytes [16, 32)
  // of the batch, which are bytes [4, 20) of the CRC's range [12, length): leading zeros
  // leave a zero register unchanged, so raw(old ^ new) is the raw CRC of those 16 bytes,
  // followed by the length - 32 zero bytes that come after them.
  unsigned char delta[16];
  std::memcpy(delta, p + 16, 16);
  wire::put_u64(p + 16, base_offset);
  wire::put_u64(p + 24, incarnation);
  for (int i = 0; i < 16; ++i) delta[i] ^= static_cast<unsigned char>(p[16 + i]);
  const std::uint32_t len = wire::get_u32(p + 4);
  const std::uint32_t d = crc32c_shift_zeros(crc32c_raw(delta, 16, 0), len - 32);
  wire::put_u32(p + 8, wire::get_u32(p + 8) ^ d);
}

BatchBuilder::BatchBuilder() { buf_.resize(kBatchHeaderSize); }

void BatchBuilder::add(std::optional<std::string_view> key, std::string_view value,
                       std::string_view headers, std::int64_t timestamp_ms) {
  // append(), not resize() + memcpy: resize would zero-fill every byte before the copy
  // writes it (a second pass over the batch on the publish path).
  char h[kRecordHeaderSize];
  wire::put_u32(h, key ? static_cast<std::uint32_t>(key->size()) : kNoKey);
  wire::put_u32(h + 4, static_cast<std::uint32_t>(value.size()));
  wire::put_u32(h + 8, static_cast<std::uint32_t>(headers.size()));
  wire::put_u64(h + 12, static_cast<std::uint64_t>(timestamp_ms));
  buf_.append(h, kRecordHeaderSize);
  if (key) buf_.append(key->data(), key->size());
  buf_.append(value.data(), value.size());
  buf_.append(headers.data(), headers.size());
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
