// The record batch decoder (sdk/include/sluice/record_batch.h): check_batch, BatchReader,
// decode_headers. Storage and replication trust a batch check_batch accepted.
//
// Properties: a batch check_batch accepts lies within the input, reads back exactly
// record_count records with consecutive offsets, is refused once truncated by a byte, and
// re-encodes through BatchBuilder (+ restamp_batch) to a batch that checks and decodes to
// the same records (decode -> encode -> decode). Headers that decode re-encode to the
// same bytes. Each input is checked as it is and with its CRC made right (so mutations
// reach the records). The accepted batch is copied into a buffer of exactly its length, so ASan
// stops any read past it.
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fuzz_check.h"
#include "sluice/record_batch.h"

using namespace sluice;

namespace {

struct Rec {
  std::optional<std::string> key;
  std::string value, headers;
  std::int64_t ts;
  std::uint64_t offset;
  bool operator==(const Rec&) const = default;
};

std::vector<Rec> read_all(const char* p, std::size_t n) {
  BatchReader r(p, n);
  std::vector<Rec> out;
  RecordView v;
  while (r.next(v)) {
    Rec x{v.key ? std::optional<std::string>(*v.key) : std::nullopt, std::string(v.value),
          std::string(v.headers), v.timestamp_ms, v.offset};
    out.push_back(std::move(x));
  }
  return out;
}

void check(const char* in, std::size_t size) {
  BatchHeader h;
  const BatchCheck c = check_batch(in, size, &h);
  FUZZ_CHECK(!to_string(c).empty());
  if (c != BatchCheck::ok) return;

  FUZZ_CHECK(h.length >= kBatchHeaderSize && h.length <= size);
  FUZZ_CHECK(h.record_count > 0);
  // Exactly the batch, nothing after it.
  std::unique_ptr<char[]> exact(new char[h.length]);
  std::memcpy(exact.get(), in, h.length);
  FUZZ_CHECK(check_batch(exact.get(), h.length, nullptr) == BatchCheck::ok);
  FUZZ_CHECK(check_batch(exact.get(), h.length - 1, nullptr) != BatchCheck::ok);

  const std::vector<Rec> recs = read_all(exact.get(), h.length);
  FUZZ_CHECK(recs.size() == h.record_count);
  BatchBuilder b;
  for (std::size_t i = 0; i < recs.size(); ++i) {
    const Rec& r = recs[i];
    FUZZ_CHECK(r.offset == h.base_offset + i);
    std::vector<Header> hs;
    if (decode_headers(r.headers, hs)) {
      std::string again;
      for (auto& x : hs) append_header(again, x.name, x.value);
      FUZZ_CHECK(again == r.headers);
    }
    b.add(r.key ? std::optional<std::string_view>(*r.key) : std::nullopt, r.value, r.headers, r.ts);
  }
  b.set_producer(h.producer_id, h.producer_seq);
  std::string rebuilt = b.finish();
  restamp_batch(rebuilt.data(), h.base_offset, h.incarnation);

  BatchHeader h2;
  FUZZ_CHECK(check_batch(rebuilt.data(), rebuilt.size(), &h2) == BatchCheck::ok);
  FUZZ_CHECK(h2.length == h.length && h2.record_count == h.record_count);
  FUZZ_CHECK(h2.base_offset == h.base_offset && h2.incarnation == h.incarnation);
  FUZZ_CHECK(h2.producer_id == h.producer_id && h2.producer_seq == h.producer_seq);
  // The records region is the same bytes; the header may differ only where the builder
  // derives a field (timestamps) or writes a reserved one (flags, bytes 52..56).
  FUZZ_CHECK(std::memcmp(rebuilt.data() + kBatchHeaderSize, exact.get() + kBatchHeaderSize,
                         h.length - kBatchHeaderSize) == 0);
  FUZZ_CHECK(read_all(rebuilt.data(), rebuilt.size()) == recs);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const char* in = reinterpret_cast<const char*>(data);
  check(in, size);
  // A mutation almost always breaks the CRC, which would keep the fuzzer out of the
  // records: check once more with the CRC the length field asks for made right.
  if (size < kBatchHeaderSize) return 0;
  const std::uint32_t len = wire::get_u32(in + 4);
  if (len < kBatchHeaderSize || len > size) return 0;
  std::string fixed(in, size);
  wire::put_u32(fixed.data() + 8, crc32c(fixed.data() + 12, len - 12));
  check(fixed.data(), fixed.size());
  return 0;
}
