// The record batch: the unit that is published, stored, replicated and fetched.
//
// One encoding is used end to end, so storage writes what the API built without
// re-encoding it (the only edits are base_offset, incarnation and the CRC), and fetch
// hands stored bytes back. All integers are little-endian.
//
//   offset size field
//   0      4    magic            "SLB1" (0x31424c53)
//   4      4    length           total bytes of the batch, header included
//   8      4    crc32c           CRC-32C of bytes [12, length)
//   12     2    version          1
//   14     2    flags            0 (reserved)
//   16     8    base_offset      offset of the first record (assigned by storage)
//   24     8    incarnation      the shard incarnation it was written under
//   32     8    first_timestamp  ms since epoch of the first record
//   40     8    max_timestamp    greatest record timestamp (retention by age uses it)
//   48     4    record_count     > 0
//   52     4    reserved         0
//   56     8    producer_id      0 = not idempotent
//   64     8    producer_seq     the producer's sequence for this shard (batch granularity)
//   72     ...  records
//
// Each record:
//   u32 key_len (0xffffffff = no key) | u32 value_len | u32 headers_len | i64 timestamp_ms
//   | key | value | headers
// headers: repeated (u16 name_len | name | u32 value_len | value), headers_len bytes total.
//
// Thread-safety: BatchBuilder and BatchReader are not shared between threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/error.h"
#include "sluice/types.h"

namespace sluice {

inline constexpr std::uint32_t kBatchMagic = 0x31424c53;  // "SLB1"
inline constexpr std::size_t kBatchHeaderSize = 72;
inline constexpr std::size_t kRecordHeaderSize = 20;
inline constexpr std::uint32_t kNoKey = 0xffffffffu;
inline constexpr std::uint16_t kBatchVersion = 1;

std::uint32_t crc32c(const void* data, std::size_t n, std::uint32_t seed = 0);

namespace wire {
inline void put_u16(char* p, std::uint16_t v) { std::memcpy(p, &v, 2); }
inline void put_u32(char* p, std::uint32_t v) { std::memcpy(p, &v, 4); }
inline void put_u64(char* p, std::uint64_t v) { std::memcpy(p, &v, 8); }
inline std::uint16_t get_u16(const char* p) { std::uint16_t v; std::memcpy(&v, p, 2); return v; }
inline std::uint32_t get_u32(const char* p) { std::uint32_t v; std::memcpy(&v, p, 4); return v; }
inline std::uint64_t get_u64(const char* p) { std::uint64_t v; std::memcpy(&v, p, 8); return v; }
}  // namespace wire

struct BatchHeader {
  std::uint32_t magic = kBatchMagic;
  std::uint32_t length = 0;
  std::uint32_t crc = 0;
  std::uint16_t version = kBatchVersion;
  std::uint16_t flags = 0;
  std::uint64_t base_offset = 0;
  std::uint64_t incarnation = 0;
  std::int64_t first_timestamp_ms = 0;
  std::int64_t max_timestamp_ms = 0;
  std::uint32_t record_count = 0;
  std::uint64_t producer_id = 0;
  std::uint64_t producer_seq = 0;

  static BatchHeader decode(const char* p);  // p has kBatchHeaderSize bytes
  void encode(char* p) const;
  std::uint64_t next_offset() const { return base_offset + record_count; }
};

// Checks magic, version, length bounds and CRC of one complete batch in [p, p+n).
// `n` may be larger than the batch. Returns the header on success.
enum class BatchCheck { ok, truncated, bad_magic, bad_length, bad_crc, bad_records };
BatchCheck check_batch(const char* p, std::size_t n, BatchHeader* out);
// check_batch without the walk of the records region: magic, version, length bounds,
// record_count > 0 and CRC. For a batch whose records were walked when it was first taken
// (a replica copying its leader's stored batches: the CRC proves the bytes are the ones
// checked), so that copying costs no per-record work. Never for bytes from a client.
BatchCheck check_batch_frame(const char* p, std::size_t n, BatchHeader* out);
std::string_view to_string(BatchCheck);

// Re-stamps base offset and incarnation and recomputes the CRC, in place.
void restamp_batch(char* p, std::uint64_t base_offset, std::uint64_t incarnation);
// The same for a batch whose CRC is known to be valid (check_batch said ok, and nothing
// changed it since): updates the CRC for the 16 changed bytes alone, in O(log length)
// instead of a pass over the batch. On a batch with a wrong CRC the result is just as
// wrong, so never use it to repair one.
void restamp_checked_batch(char* p, std::uint64_t base_offset, std::uint64_t incarnation);

struct Header {
  std::string_view name;
  std::string_view value;
};

// One record, viewing memory owned by someone else (a request body, a batch buffer).
struct RecordView {
  std::optional<std::string_view> key;
  std::string_view value;
  std::string_view headers;  // encoded as described above
  std::int64_t timestamp_ms = 0;
  std::uint64_t offset = 0;  // filled by BatchReader
};

// Builds one encoded batch in a single contiguous buffer: one allocation per batch, not
// per record (reserve() up front when the size is known).
class BatchBuilder {
 public:
  BatchBuilder();
  void reserve(std::size_t bytes) { buf_.reserve(bytes); }
  // Encoded headers can be produced with encode_headers().
  void add(std::optional<std::string_view> key, std::string_view value, std::string_view headers,
           std::int64_t timestamp_ms);
  std::uint32_t count() const { return count_; }
  std::size_t size_bytes() const { return buf_.size(); }
  // Marks the batch as an idempotent producer's send (id != 0).
  void set_producer(std::uint64_t id, std::uint64_t seq) {
    producer_id_ = id;
    producer_seq_ = seq;
  }
  // Finishes the header (offset 0, incarnation 0, CRC) and hands out the buffer. The
  // builder is empty afterwards.
  std::string finish();

 private:
  std::string buf_;
  std::uint32_t count_ = 0;
  std::int64_t first_ts_ = 0;
  std::int64_t max_ts_ = 0;
  std::uint64_t producer_id_ = 0;
  std::uint64_t producer_seq_ = 0;
};

void append_header(std::string& out, std::string_view name, std::string_view value);
// Decodes encoded headers; returns false if malformed.
bool decode_headers(std::string_view encoded, std::vector<Header>& out);

// Iterates the records of one *checked* batch (see check_batch).
class BatchReader {
 public:
  BatchReader(const char* batch, std::size_t len);
  const BatchHeader& header() const { return h_; }
  // Returns false at the end (or on a malformed record, which check_batch excludes).
  bool next(RecordView& r);

 private:
  BatchHeader h_;
  const char* p_;
  const char* end_;
  std::uint64_t next_offset_;
};

}  // namespace sluice
