// The record batch (sluice/record_batch.h): encoding, CRC, and re-stamping.
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/record_batch.h"

namespace sluice {
namespace {

// The publish path stamps offsets under the shard's lock with restamp_checked_batch,
// which updates the CRC for the stamped bytes alone. It must give exactly the CRC a full
// recompute gives, for every batch length (the zero-byte shift is built from one
// power of two per bit of the length) and any stamp.
TEST(RecordBatch, CheckedRestampEqualsFullRecompute) {
  std::uint64_t x = 0x9e3779b97f4a7c15ull;
  auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  int checked = 0;
  for (std::size_t value_len : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{100},
                                std::size_t{1024}, std::size_t{8191}, std::size_t{65536}, std::size_t{1} << 20}) {
    for (int round = 0; round < 4; ++round) {
      BatchBuilder b;
      std::string v(value_len, '\0');
      for (auto& c : v) c = static_cast<char>(next());
      b.add(std::nullopt, v, "", 1000 + round);
      if (round % 2) b.add(std::string_view("key"), v.substr(0, value_len / 3), "", 2000);
      std::string batch = b.finish();
      restamp_batch(batch.data(), next(), next());  // some earlier stamp, valid CRC
      const std::uint64_t base = next(), inc = round == 3 ? 0 : next();
      std::string full = batch;
      restamp_batch(full.data(), base, inc);
      restamp_checked_batch(batch.data(), base, inc);
      ASSERT_EQ(batch, full) << "value_len " << value_len << " round " << round;
      BatchHeader h;
      ASSERT_EQ(check_batch(batch.data(), batch.size(), &h), BatchCheck::ok);
      EXPECT_EQ(h.base_offset, base);
      EXPECT_EQ(h.incarnation, inc);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 32);
  // A batch damaged before the stamp stays damaged: the update carries the error along.
  BatchBuilder b;
  b.add(std::nullopt, std::string(300, 'v'), "", 5);
  std::string batch = b.finish();
  batch[200] ^= 0x01;
  restamp_checked_batch(batch.data(), 10, 3);
  EXPECT_EQ(check_batch(batch.data(), batch.size(), nullptr), BatchCheck::bad_crc);
}

TEST(RecordBatch, RoundTripAndCrc) {
  BatchBuilder b;
  std::string hdrs;
  append_header(hdrs, "h1", "v1");
  b.add(std::string_view("k1"), "value-1", hdrs, 1000);
  b.add(std::nullopt, "", "", 2000);
  b.add(std::string_view(""), std::string(5000, 'x'), "", 1500);
  std::string batch = b.finish();
  restamp_batch(batch.data(), 42, 7);
  BatchHeader h;
  ASSERT_EQ(check_batch(batch.data(), batch.size(), &h), BatchCheck::ok);
  EXPECT_EQ(h.base_offset, 42u);
  EXPECT_EQ(h.incarnation, 7u);
  EXPECT_EQ(h.record_count, 3u);
  EXPECT_EQ(h.max_timestamp_ms, 2000);
  BatchReader rd(batch.data(), batch.size());
  RecordView r;
  ASSERT_TRUE(rd.next(r));
  EXPECT_EQ(r.offset, 42u);
  EXPECT_EQ(*r.key, "k1");
  EXPECT_EQ(r.value, "value-1");
  std::vector<Header> hv;
  ASSERT_TRUE(decode_headers(r.headers, hv));
  ASSERT_EQ(hv.size(), 1u);
  EXPECT_EQ(hv[0].name, "h1");
  ASSERT_TRUE(rd.next(r));
  EXPECT_FALSE(r.key.has_value());
  EXPECT_EQ(r.offset, 43u);
  ASSERT_TRUE(rd.next(r));
  EXPECT_EQ(r.key, std::string_view(""));
  EXPECT_EQ(r.value.size(), 5000u);
  EXPECT_FALSE(rd.next(r));

  for (std::size_t pos : {std::size_t{20}, std::size_t{60}, batch.size() - 1}) {
    std::string bad = batch;
    bad[pos] ^= 0x01;
    EXPECT_EQ(check_batch(bad.data(), bad.size(), nullptr), BatchCheck::bad_crc) << pos;
  }
  EXPECT_EQ(check_batch(batch.data(), batch.size() - 1, nullptr), BatchCheck::truncated);
}

// check_batch_frame is check_batch without the records walk (a follower's copy of its
// leader's batches): it finds the same damage to the frame and the CRC, and passes a
// CRC-valid batch whose records region does not parse, which only check_batch refuses.
TEST(RecordBatch, TheFrameCheckFindsFrameDamageButWalksNoRecord) {
  BatchBuilder b;
  b.add(std::string_view("k"), "v", "", 1);
  b.add(std::nullopt, "w", "", 2);
  std::string batch = b.finish();
  BatchHeader h;
  ASSERT_EQ(check_batch_frame(batch.data(), batch.size(), &h), BatchCheck::ok);
  EXPECT_EQ(h.record_count, 2u);
  std::string flipped = batch;
  flipped[40] ^= 0x01;
  EXPECT_EQ(check_batch_frame(flipped.data(), flipped.size(), nullptr), BatchCheck::bad_crc);
  EXPECT_EQ(check_batch_frame(batch.data(), batch.size() - 1, nullptr), BatchCheck::truncated);
  // Claim a third record: the region no longer parses, the CRC is made to hold again.
  std::string lying = batch;
  BatchHeader lh = BatchHeader::decode(lying.data());
  lh.record_count = 3;
  lh.encode(lying.data());
  restamp_batch(lying.data(), lh.base_offset, lh.incarnation);  // recomputes the CRC
  EXPECT_EQ(check_batch(lying.data(), lying.size(), nullptr), BatchCheck::bad_records);
  EXPECT_EQ(check_batch_frame(lying.data(), lying.size(), nullptr), BatchCheck::ok);
}

TEST(Crc32c, KnownVector) {
  // RFC 3720 B.4: 32 bytes of zeros.
  std::string zeros(32, '\0');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8a9136aau);
  EXPECT_EQ(crc32c("123456789", 9), 0xe3069283u);
}

// The hardware path cuts long inputs into three interleaved chains and joins them with
// zero-shift tables (sdk/src/record_batch.cc). Every length around the block boundaries
// (3 x 8192 and 3 x 256), every start alignment and a chained seed must give what a plain
// bitwise CRC-32C gives.
TEST(Crc32c, InterleavedChainsMatchTheBitwiseDefinition) {
  auto bitwise = [](const unsigned char* p, std::size_t n, std::uint32_t seed) {
    std::uint32_t c = ~seed;
    for (std::size_t i = 0; i < n; ++i) {
      c ^= p[i];
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    }
    return ~c;
  };
  std::vector<unsigned char> buf(3 * 8192 * 3 + 64);
  std::uint64_t x = 0x9e3779b97f4a7c15ull;
  for (auto& b : buf) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    b = static_cast<unsigned char>(x);
  }
  std::vector<std::size_t> lengths;
  for (std::size_t n = 0; n <= 1024; ++n) lengths.push_back(n);
  for (std::size_t base : {3 * 256, 3 * 8192, 2 * 3 * 8192, 65536, 3 * 8192 * 3})
    for (std::size_t d = 0; d <= 17; ++d) {
      lengths.push_back(base + d);
      if (base >= d) lengths.push_back(base - d);
    }
  for (std::size_t align = 0; align < 8; ++align)
    for (std::size_t n : lengths) {
      if (align + n > buf.size()) continue;
      const unsigned char* p = buf.data() + align;
      ASSERT_EQ(crc32c(p, n), bitwise(p, n, 0)) << "length " << n << ", offset " << align;
      ASSERT_EQ(crc32c(p, n, 0x12345678u), bitwise(p, n, 0x12345678u)) << n;
    }
  // Chaining: crc(A || B) from crc(A) as the seed.
  const std::size_t a = 40000;
  EXPECT_EQ(crc32c(buf.data() + a, 30000, crc32c(buf.data(), a)), bitwise(buf.data(), a + 30000, 0));
}

}  // namespace
}  // namespace sluice
