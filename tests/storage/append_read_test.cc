// Append/read behaviour of fs-storage: offsets, segment rolls, the sparse index, fetch
// limits, the high-watermark boundaries and notify_when_beyond.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>

#include "layout.h"
#include "segment.h"
#include "shard_log.h"
#include "storage_test_util.h"

namespace sluice::fs_storage::testing {
namespace {

using sluice::testing::TestHost;

class AppendReadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    host_.set("storage.segment_bytes", "2048");
    host_.set("storage.index_interval_bytes", "256");
    host_.set("storage.retention_interval_ms", "0");
    engine_ = std::make_unique<FsStorageEngine>(host_, std::make_shared<PosixFileSystem>());
    auto s = engine_->open_shard(test_ref(), StreamSpec{});
    ASSERT_TRUE(s) << s.error().to_string();
    shard_ = *s;
  }
  TestHost host_;
  std::unique_ptr<FsStorageEngine> engine_;
  std::shared_ptr<ShardLog> shard_;
};

TEST_F(AppendReadTest, RoundTripAcrossSegmentRollsWithContiguousOffsetsFromZero) {
  std::uint64_t expect = 0;
  for (int i = 0; i < 60; ++i) {
    auto r = append_wait(*shard_, make_batch("b" + std::to_string(i), 5, 1000, 20));
    ASSERT_TRUE(r) << r.error().to_string();
    EXPECT_EQ(r->base_offset.value(), expect);
    EXPECT_EQ(r->count, 5u);
    expect += 5;
  }
  auto st = shard_->stats();
  EXPECT_EQ(st.high_watermark.value(), 300u);
  EXPECT_GE(st.segments, 4u) << "segment_bytes=2048 must have rolled several times";
  EXPECT_EQ(st.appended_records, 300u);

  auto all = read_all(*shard_);
  ASSERT_EQ(all.size(), 300u);
  std::uint64_t off = 0;
  for (auto& [o, v] : all) {
    EXPECT_EQ(o, off);
    EXPECT_EQ(v, "b" + std::to_string(off / 5) + "#" + std::to_string(off % 5) + std::string(20, 'x'));
    ++off;
  }
  // Sealed segments have their .idx cache; the active one has none.
  auto dir = engine_->shard_directory(test_ref()).value() + "/log/";
  EXPECT_TRUE(std::filesystem::exists(dir + index_file_name(0)));
}

TEST_F(AppendReadTest, ReadFromTheMiddleOfASegmentFindsTheRightBatch) {
  for (int i = 0; i < 60; ++i) ASSERT_TRUE(append_wait(*shard_, make_batch("b" + std::to_string(i), 5, 1000, 20)));
  // Every offset, including ones inside a batch and behind index entries.
  for (std::uint64_t from = 0; from < 300; from += 7) {
    auto r = shard_->read(Offset(from), 1, 1);
    ASSERT_TRUE(r) << r.error().to_string();
    ASSERT_EQ(r->batches.size(), 1u) << "from " << from;
    BatchReader reader(r->batches[0].data(), r->batches[0].size());
    EXPECT_EQ(reader.header().base_offset, from / 5 * 5) << "from " << from;
    EXPECT_EQ(r->next_offset.value(), from / 5 * 5 + 5);
  }
}

TEST_F(AppendReadTest, SealedSegmentIndexEntriesPointAtBatchStarts) {
  for (int i = 0; i < 60; ++i) ASSERT_TRUE(append_wait(*shard_, make_batch("b", 5, 1000, 20)));
  const auto dir = engine_->shard_directory(test_ref()).value() + "/log/";
  std::ifstream in(dir + index_file_name(0), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto idx = decode_index_file(bytes);
  ASSERT_TRUE(idx) << idx.error().to_string();
  EXPECT_EQ(idx->base_offset, 0u);
  EXPECT_EQ(idx->log_size, std::filesystem::file_size(dir + segment_file_name(0)));
  ASSERT_FALSE(idx->entries.empty()) << "interval 256 < segment 2048 must give entries";
  std::ifstream log(dir + segment_file_name(0), std::ios::binary);
  std::string seg((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  std::uint32_t prev = 0;
  for (auto& e : idx->entries) {
    BatchHeader h;
    ASSERT_EQ(check_batch(seg.data() + e.position, seg.size() - e.position, &h), BatchCheck::ok);
    EXPECT_EQ(h.base_offset, e.relative_offset);
    EXPECT_GE(e.position - prev, 256u) << "about one entry per index_interval_bytes";
    prev = e.position;
  }
}

TEST_F(AppendReadTest, ReadHonoursMaxRecordsAndMaxBytesButReturnsAtLeastOneBatch) {
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(append_wait(*shard_, make_batch("b", 10)));
  auto one = shard_->read(Offset(15), 1, 1 << 20);
  ASSERT_TRUE(one);
  ASSERT_EQ(one->batches.size(), 1u);
  EXPECT_EQ(one->next_offset.value(), 20u);

  auto records = shard_->read(Offset(0), 25, 1 << 20);
  ASSERT_TRUE(records);
  EXPECT_EQ(records->batches.size(), 3u) << "25 records need 3 batches of 10";

  auto tiny = shard_->read(Offset(0), 1000, 1);
  ASSERT_TRUE(tiny);
  EXPECT_EQ(tiny->batches.size(), 1u) << "max_bytes smaller than a batch still returns one";

  const std::size_t batch_len = make_batch("b", 10).size();
  auto two = shard_->read(Offset(0), 1000, 2 * batch_len + batch_len / 2);
  ASSERT_TRUE(two);
  EXPECT_EQ(two->batches.size(), 2u);
  EXPECT_EQ(two->high_watermark.value(), 100u);
  EXPECT_EQ(two->log_start.value(), 0u);
}

TEST_F(AppendReadTest, StoredBatchesCarryAssignedOffsetIncarnationAndValidCrc) {
  auto s = engine_->open_shard(test_ref(0, 0xab), StreamSpec{});
  ASSERT_TRUE(s);
  ASSERT_TRUE(append_wait(**s, make_batch("x", 3)));
  ASSERT_TRUE(append_wait(**s, make_batch("y", 2)));
  auto r = (*s)->read(Offset(0), 100, 1 << 20);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->batches.size(), 2u);
  BatchHeader h;
  ASSERT_EQ(check_batch(r->batches[1].data(), r->batches[1].size(), &h), BatchCheck::ok);
  EXPECT_EQ(h.base_offset, 3u);
  EXPECT_EQ(h.incarnation, 0xabu);
}

// Records published with timestamp -1 get the leader's clock at append (the caches'
// expiry clock, docs/api.md "Expiry"); any other timestamp is kept as published.
TEST_F(AppendReadTest, TimestampMinusOneIsStampedWithTheLeadersClock) {
  BatchBuilder asks;
  asks.add(std::string_view("k1"), "a", {}, -1);
  asks.add(std::string_view("k2"), "b", {}, -1);
  BatchBuilder keeps;
  keeps.add(std::string_view("k3"), "c", {}, 12345);
  const auto now = [] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  const std::int64_t before = now();
  ASSERT_TRUE(append_wait(*shard_, asks.finish()));
  const std::int64_t after = now();
  ASSERT_TRUE(append_wait(*shard_, keeps.finish()));
  auto r = shard_->read(Offset(0), 100, 1 << 20);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->batches.size(), 2u);
  BatchHeader h;
  ASSERT_EQ(check_batch(r->batches[0].data(), r->batches[0].size(), &h), BatchCheck::ok) << "CRC redone";
  EXPECT_GE(h.first_timestamp_ms, before);
  EXPECT_LE(h.max_timestamp_ms, after);
  BatchReader rd(r->batches[0].data(), r->batches[0].size());
  RecordView rv;
  int n = 0;
  while (rd.next(rv)) {
    EXPECT_GE(rv.timestamp_ms, before);
    EXPECT_LE(rv.timestamp_ms, after);
    EXPECT_EQ(rv.timestamp_ms, h.first_timestamp_ms) << "one stamp per batch";
    ++n;
  }
  EXPECT_EQ(n, 2);
  BatchReader rd2(r->batches[1].data(), r->batches[1].size());
  ASSERT_TRUE(rd2.next(rv));
  EXPECT_EQ(rv.timestamp_ms, 12345);
}

// The trigger is the first record's timestamp, not the header's copy of it: a batch whose
// header says otherwise is still stamped, so no record keeps -1.
TEST_F(AppendReadTest, StampingFollowsTheFirstRecordNotTheHeader) {
  BatchBuilder asks;
  asks.add(std::string_view("k1"), "a", {}, -1);
  std::string b = asks.finish();
  wire::put_u64(b.data() + 32, 777);  // first_timestamp_ms in the header
  restamp_batch(b.data(), 0, 0);      // a valid CRC again
  ASSERT_TRUE(append_wait(*shard_, std::move(b)));
  auto r = shard_->read(Offset(0), 100, 1 << 20);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->batches.size(), 1u);
  BatchReader rd(r->batches[0].data(), r->batches[0].size());
  RecordView rv;
  ASSERT_TRUE(rd.next(rv));
  EXPECT_GT(rv.timestamp_ms, 0);
}

TEST_F(AppendReadTest, ReadAtHighWatermarkIsEmptyAndBeyondIsInvalidArgument) {
  ASSERT_TRUE(append_wait(*shard_, make_batch("b", 4)));
  auto at = shard_->read(Offset(4), 10, 1 << 20);
  ASSERT_TRUE(at);
  EXPECT_TRUE(at->batches.empty());
  EXPECT_EQ(at->next_offset.value(), 4u);
  EXPECT_EQ(at->high_watermark.value(), 4u);
  auto past = shard_->read(Offset(5), 10, 1 << 20);
  ASSERT_FALSE(past);
  EXPECT_EQ(past.error().code, Errc::invalid_argument);
}

TEST_F(AppendReadTest, MalformedBatchIsRejectedWithoutUsingAnOffset) {
  std::string bad = make_batch("b", 2);
  bad[60] ^= 1;  // breaks the CRC
  auto r = append_wait(*shard_, bad);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::malformed_body);
  auto ok = append_wait(*shard_, make_batch("b", 2));
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->base_offset.value(), 0u);
}

TEST_F(AppendReadTest, NotifyWhenBeyondFiresAfterAnAppendSyncs) {
  std::atomic<int> fired{0};
  EXPECT_NE(shard_->notify_when_beyond(Offset(0), [&] { ++fired; }), 0u) << "registered: a handle";
  EXPECT_EQ(fired.load(), 0) << "nothing appended yet";
  ASSERT_TRUE(append_wait(*shard_, make_batch("b", 1)));
  EXPECT_TRUE(eventually([&] { return fired.load() == 1; }));
  // Already beyond: inline, handle 0.
  EXPECT_EQ(shard_->notify_when_beyond(Offset(0), [&] { ++fired; }), 0u);
  EXPECT_EQ(fired.load(), 2);
  // A waiter beyond the end is called when the shard closes.
  EXPECT_NE(shard_->notify_when_beyond(Offset(100), [&] { ++fired; }), 0u);
  engine_->close_shard(test_ref());
  EXPECT_EQ(fired.load(), 3);
  // After close: inline.
  EXPECT_EQ(shard_->notify_when_beyond(Offset(100), [&] { ++fired; }), 0u);
  EXPECT_EQ(fired.load(), 4);
}

// The leak a reviewer found: every long poll that timed out on an idle shard left its
// callback registered until the next append.
TEST_F(AppendReadTest, CancelledWaitersLeaveNothingBehindAndNeverFire) {
  auto impl = std::dynamic_pointer_cast<ShardLogImpl>(shard_);
  ASSERT_TRUE(impl);
  std::atomic<int> fired{0};
  auto token = std::make_shared<int>(0);  // owned by every callback
  std::vector<std::uint64_t> handles;
  for (int i = 0; i < 1000; ++i) {
    const std::uint64_t h = shard_->notify_when_beyond(Offset(i % 3), [&, token] { ++fired; });
    ASSERT_NE(h, 0u);
    handles.push_back(h);
  }
  EXPECT_EQ(impl->waiter_count(), 1000u);
  for (auto h : handles) shard_->cancel_notify(h);  // every poll timed out
  EXPECT_EQ(impl->waiter_count(), 0u);
  EXPECT_EQ(token.use_count(), 1) << "cancel_notify destroys the callbacks before it returns";
  ASSERT_TRUE(append_wait(*shard_, make_batch("b", 5)));
  // A waiter registered after the append synced: it is flushed by the next append, and the
  // flusher wakes waiters before acking, so once this append is acked every due waiter ran.
  std::atomic<bool> later{false};
  const std::uint64_t h2 = shard_->notify_when_beyond(Offset(5), [&] { later = true; });
  ASSERT_NE(h2, 0u);
  ASSERT_TRUE(append_wait(*shard_, make_batch("c", 1)));
  EXPECT_TRUE(later.load());
  EXPECT_EQ(fired.load(), 0) << "a cancelled waiter never fires";
}

TEST_F(AppendReadTest, CancellingAFiredUnknownOrZeroHandleIsHarmless) {
  auto impl = std::dynamic_pointer_cast<ShardLogImpl>(shard_);
  ASSERT_TRUE(impl);
  std::atomic<int> fired{0};
  const std::uint64_t h1 = shard_->notify_when_beyond(Offset(0), [&] { ++fired; });
  ASSERT_TRUE(append_wait(*shard_, make_batch("b", 1)));  // wakes before the ack
  EXPECT_EQ(fired.load(), 1);
  std::atomic<int> other{0};
  const std::uint64_t h2 = shard_->notify_when_beyond(Offset(1), [&] { ++other; });
  ASSERT_NE(h2, 0u);
  EXPECT_NE(h1, h2) << "handles are never reused";
  shard_->cancel_notify(h1);  // already fired
  shard_->cancel_notify(0);
  shard_->cancel_notify(h2 + 1000);  // never issued
  EXPECT_EQ(impl->waiter_count(), 1u) << "only the cancelled handle is dropped";
  ASSERT_TRUE(append_wait(*shard_, make_batch("c", 1)));
  EXPECT_EQ(other.load(), 1);
  EXPECT_EQ(fired.load(), 1);
  shard_->cancel_notify(h2);
  EXPECT_EQ(impl->waiter_count(), 0u);
}

TEST_F(AppendReadTest, CloseFiresTheWaitersThatWereNotCancelled) {
  std::vector<int> fired;
  std::mutex mu;
  auto cb = [&](int i) {
    return [&, i] {
      std::lock_guard lk(mu);
      fired.push_back(i);
    };
  };
  const auto a = shard_->notify_when_beyond(Offset(10), cb(1));
  const auto b = shard_->notify_when_beyond(Offset(10), cb(2));
  const auto c = shard_->notify_when_beyond(Offset(20), cb(3));
  ASSERT_TRUE(a && b && c);
  shard_->cancel_notify(b);
  engine_->close_shard(test_ref());
  EXPECT_EQ(fired, (std::vector<int>{1, 3}));
  shard_->cancel_notify(a);  // after close: harmless
}

TEST_F(AppendReadTest, AckModeNoneCompletesInlineAndDataIsReadableAfterSync) {
  std::atomic<bool> called{false};
  shard_->append(make_batch("n", 3), AckMode::none, [&](Result<AppendResult> r) {
    EXPECT_TRUE(r);
    called = true;
  });
  EXPECT_TRUE(called.load()) << "AckMode::none answers inside append()";
  EXPECT_TRUE(eventually([&] { return shard_->stats().high_watermark.value() == 3; }));
  EXPECT_EQ(read_all(*shard_).size(), 3u);
}

TEST_F(AppendReadTest, ReopenAfterCleanShutdownKeepsEverythingAndContinuesOffsets) {
  for (int i = 0; i < 30; ++i) ASSERT_TRUE(append_wait(*shard_, make_batch("b", 5, 1000, 20)));
  shard_.reset();
  engine_->shutdown();
  engine_.reset();
  for (std::string verify : {"all", "tail"}) {
    host_.set("storage.verify_on_start", verify);
    FsStorageEngine e(host_, std::make_shared<PosixFileSystem>());
    auto s = e.open_shard(test_ref(), StreamSpec{});
    ASSERT_TRUE(s) << s.error().to_string();
    EXPECT_EQ((*s)->stats().high_watermark.value(), 150u) << verify;
    EXPECT_EQ(read_all(**s).size(), 150u) << verify;
  }
  FsStorageEngine e(host_, std::make_shared<PosixFileSystem>());
  auto s = e.open_shard(test_ref(), StreamSpec{});
  ASSERT_TRUE(s);
  auto r = append_wait(**s, make_batch("more", 1));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->base_offset.value(), 150u);
}

TEST_F(AppendReadTest, InvalidIndexCacheIsRebuiltFromTheLog) {
  for (int i = 0; i < 30; ++i) ASSERT_TRUE(append_wait(*shard_, make_batch("b", 5, 1000, 20)));
  auto idx = engine_->shard_directory(test_ref()).value() + "/log/" + index_file_name(0);
  shard_.reset();
  engine_.reset();
  {
    std::FILE* f = std::fopen(idx.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    std::fseek(f, 50, SEEK_SET);
    std::fputc(0x5a, f);
    std::fclose(f);
  }
  host_.set("storage.verify_on_start", "tail");
  FsStorageEngine e(host_, std::make_shared<PosixFileSystem>());
  auto s = e.open_shard(test_ref(), StreamSpec{});
  ASSERT_TRUE(s) << s.error().to_string();
  auto all = read_all(**s);
  ASSERT_EQ(all.size(), 150u);
  for (std::uint64_t from = 0; from < 150; from += 11) {
    auto r = (*s)->read(Offset(from), 1, 1);
    ASSERT_TRUE(r);
    BatchReader reader(r->batches.at(0).data(), r->batches[0].size());
    EXPECT_EQ(reader.header().base_offset, from / 5 * 5);
  }
}

}  // namespace
}  // namespace sluice::fs_storage::testing
