// Retention by size and by age deletes whole sealed segments from the oldest and moves
// the log start; the active segment is never deleted.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>

#include "layout.h"
#include "producers.h"
#include "storage_test_util.h"

namespace sluice::fs_storage::testing {
namespace {

using sluice::testing::TestHost;

class RetentionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    host_.set("storage.segment_bytes", "1024");
    host_.set("storage.retention_interval_ms", "0");
    engine_ = std::make_unique<FsStorageEngine>(host_, std::make_shared<PosixFileSystem>());
  }
  std::shared_ptr<ShardLog> open(RetentionPolicy p) {
    StreamSpec spec;
    spec.retention = p;
    auto s = engine_->open_shard(test_ref(), spec);
    EXPECT_TRUE(s) << s.error().to_string();
    return *s;
  }
  TestHost host_;
  std::unique_ptr<FsStorageEngine> engine_;
};

TEST_F(RetentionTest, SizeRetentionDeletesOldestSealedSegmentsAndMovesLogStart) {
  auto shard = open(RetentionPolicy{2048, -1});
  for (int i = 0; i < 40; ++i) ASSERT_TRUE(append_wait(*shard, make_batch("v", 3, 1000, 30)));
  auto before = shard->stats();
  ASSERT_GT(before.size_bytes, 2048u);
  engine_->run_retention_once();
  auto after = shard->stats();
  EXPECT_LE(after.size_bytes, 2048u);
  EXPECT_LT(after.segments, before.segments);
  EXPECT_GT(after.log_start.value(), 0u);
  EXPECT_EQ(after.high_watermark, before.high_watermark);
  const auto dir = engine_->shard_directory(test_ref()).value() + "/log/";
  EXPECT_FALSE(std::filesystem::exists(dir + segment_file_name(0)));
  EXPECT_TRUE(std::filesystem::exists(dir + segment_file_name(after.log_start.value())));

  auto before_start = shard->read(Offset(0), 10, 1 << 20);
  ASSERT_FALSE(before_start);
  EXPECT_EQ(before_start.error().code, Errc::offset_out_of_range);
  EXPECT_NE(before_start.error().message.find("log start " + std::to_string(after.log_start.value())),
            std::string::npos)
      << before_start.error().message;
  auto rest = read_all(*shard, after.log_start.value());
  EXPECT_EQ(rest.size(), after.high_watermark.value() - after.log_start.value());

  // The log start survives a restart.
  engine_->close_shard(test_ref());
  shard = open(RetentionPolicy{2048, -1});
  EXPECT_EQ(shard->stats().log_start, after.log_start);
}

TEST_F(RetentionTest, AgeRetentionDeletesSegmentsWhoseNewestRecordIsTooOld) {
  auto shard = open(RetentionPolicy{-1, 60'000});
  const std::int64_t now = 10'000'000;
  for (int i = 0; i < 15; ++i) ASSERT_TRUE(append_wait(*shard, make_batch("old", 3, now - 120'000, 30)));
  for (int i = 0; i < 15; ++i) ASSERT_TRUE(append_wait(*shard, make_batch("new", 3, now - 1'000, 30)));
  engine_->run_retention_once(now);
  auto st = shard->stats();
  EXPECT_GT(st.log_start.value(), 0u) << "old segments deleted";
  EXPECT_LE(st.log_start.value(), 45u) << "no segment holding a new record is deleted";
  auto rest = read_all(*shard, st.log_start.value());
  for (std::uint64_t o = 45; o < 90; ++o) EXPECT_TRUE(rest.count(o)) << o;
}

// Regression: a segment's age was taken from its LAST batch's max timestamp, so one
// client-stamped old batch at the end of a segment got fresh, acknowledged records deleted.
// The age is the running maximum over all its batches: in the writer, in the recovery scan
// and in the .idx (verify_on_start=tail trusts it).
TEST_F(RetentionTest, OldTimestampedLastBatchDoesNotMakeAFreshSegmentOld) {
  const std::int64_t now = 10'000'000;
  const std::size_t len = make_batch("v", 3, now, 30).size();
  const std::size_t per_segment = 1024 / len;
  ASSERT_GE(per_segment, 2u);
  auto fill = [&](ShardLog& shard) {
    for (std::size_t i = 0; i + 1 < per_segment; ++i)
      ASSERT_TRUE(append_wait(shard, make_batch("fresh", 3, now - 1'000, 30)));
    ASSERT_TRUE(append_wait(shard, make_batch("ancient", 3, 1, 30)));  // last batch of segment 0
    for (std::size_t i = 0; i < per_segment + 1; ++i)
      ASSERT_TRUE(append_wait(shard, make_batch("fresh", 3, now - 1'000, 30)));
  };
  auto shard = open(RetentionPolicy{-1, 60'000});
  fill(*shard);
  ASSERT_GE(shard->stats().segments, 3u);
  ASSERT_TRUE(std::filesystem::exists(engine_->shard_directory(test_ref()).value() + "/log/" +
                                      segment_file_name(3 * per_segment)))
      << "the old-timestamped batch is the last one of segment 0";

  engine_->run_retention_once(now);  // writer path
  EXPECT_EQ(shard->stats().log_start.value(), 0u) << "segment 0 holds fresh records";

  for (const char* verify : {"all", "tail"}) {  // recovery scan, then the trusted .idx
    SCOPED_TRACE(verify);
    shard.reset();
    engine_.reset();
    host_.set("storage.verify_on_start", verify);
    engine_ = std::make_unique<FsStorageEngine>(host_, std::make_shared<PosixFileSystem>());
    shard = open(RetentionPolicy{-1, 60'000});
    engine_->run_retention_once(now);
    EXPECT_EQ(shard->stats().log_start.value(), 0u) << "segment 0 holds fresh records";
    EXPECT_EQ(read_all(*shard).size(), shard->stats().high_watermark.value());
  }
  // Once every record of segment 0 is old, it goes.
  engine_->run_retention_once(now + 10 * 60'000);
  EXPECT_GT(shard->stats().log_start.value(), 0u);
}

TEST_F(RetentionTest, ActiveSegmentIsNeverDeleted) {
  auto shard = open(RetentionPolicy{0, 0});
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(append_wait(*shard, make_batch("v", 3, 1, 30)));
  engine_->run_retention_once();
  auto st = shard->stats();
  EXPECT_EQ(st.segments, 1u);
  EXPECT_EQ(st.high_watermark.value(), 60u);
  auto r = append_wait(*shard, make_batch("more", 1));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->base_offset.value(), 60u);
}

TEST_F(RetentionTest, UnlimitedPolicyDeletesNothing) {
  auto shard = open(RetentionPolicy{});
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(append_wait(*shard, make_batch("v", 3, 1, 30)));
  auto before = shard->stats();
  engine_->run_retention_once();
  EXPECT_EQ(shard->stats().segments, before.segments);
  EXPECT_EQ(shard->stats().log_start.value(), 0u);
}

// ShardLog::roll_segment / trim_before (docs/architecture.md "Cache compaction"): a roll
// seals the active segment at the log end; a trim deletes whole sealed segments entirely
// below its offset, never the active one, and the new log start survives a reopen.
TEST_F(RetentionTest, RollSealsTheActiveSegmentAndTrimDropsWholeSegmentsBelow) {
  auto shard = open(RetentionPolicy{-1, -1});
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(append_wait(*shard, make_batch("a", 3, 1000, 10)));
  ASSERT_EQ(shard->stats().segments, 1u);
  auto rolled = shard->roll_segment();
  ASSERT_TRUE(rolled) << rolled.error().to_string();
  EXPECT_EQ(*rolled, Offset(9));
  EXPECT_EQ(shard->stats().segments, 2u);
  auto again = shard->roll_segment();  // the active segment is empty: no new one
  ASSERT_TRUE(again);
  EXPECT_EQ(*again, Offset(9));
  EXPECT_EQ(shard->stats().segments, 2u);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(append_wait(*shard, make_batch("b", 3, 1000, 10)));

  // Segment [0, 9) is not entirely below 5: nothing goes.
  auto t = shard->trim_before(Offset(5));
  ASSERT_TRUE(t) << t.error().to_string();
  EXPECT_EQ(*t, Offset(0));
  EXPECT_EQ(read_all(*shard).size(), 15u);
  // Far beyond the end: only sealed segments go, never the active one.
  t = shard->trim_before(Offset(1000));
  ASSERT_TRUE(t) << t.error().to_string();
  EXPECT_EQ(*t, Offset(9));
  const auto dir = engine_->shard_directory(test_ref()).value() + "/log/";
  EXPECT_FALSE(std::filesystem::exists(dir + segment_file_name(0)));
  auto below = shard->read(Offset(0), 10, 1 << 20);
  ASSERT_FALSE(below);
  EXPECT_EQ(below.error().code, Errc::offset_out_of_range);
  auto rest = read_all(*shard, 9);
  EXPECT_EQ(rest.size(), 6u);
  EXPECT_EQ(shard->stats().log_start, Offset(9));

  // Appends after the trim continue the offsets; the start survives a reopen.
  ASSERT_TRUE(append_wait(*shard, make_batch("c", 3, 1000, 10)));
  engine_->close_shard(test_ref());
  shard = open(RetentionPolicy{-1, -1});
  EXPECT_EQ(shard->stats().log_start, Offset(9));
  EXPECT_EQ(shard->stats().high_watermark, Offset(18));
  EXPECT_EQ(read_all(*shard, 9).size(), 9u);
}

// trim_before never passes the producer snapshot (producer state must outlive the data):
// when the snapshot could not be written at a roll, the segments above the previous one stay.
TEST_F(RetentionTest, TrimNeverPassesTheProducerSnapshot) {
  auto shard = open(RetentionPolicy{-1, -1});
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(append_wait(*shard, make_batch("a", 3, 1000, 10)));
  ASSERT_EQ(*shard->roll_segment(), Offset(9));  // snapshot at 9
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(append_wait(*shard, make_batch("b", 3, 1000, 10)));
  // A directory where the snapshot's temporary file goes: writing the snapshot fails.
  const auto dir = engine_->shard_directory(test_ref()).value() + "/log/";
  const std::string tmp = dir + std::string(kProducerSnapshotName) + ".tmp";
  ASSERT_TRUE(std::filesystem::create_directory(tmp));
  ASSERT_EQ(*shard->roll_segment(), Offset(15));  // rolled; the snapshot stays at 9
  ASSERT_TRUE(append_wait(*shard, make_batch("c", 3, 1000, 10)));
  auto t = shard->trim_before(Offset(1000));
  ASSERT_TRUE(t) << t.error().to_string();
  EXPECT_EQ(*t, Offset(9)) << "segment [9, 15) lies beyond the producer snapshot";
  std::filesystem::remove(tmp);
  ASSERT_EQ(*shard->roll_segment(), Offset(18));  // snapshot at 18 now
  t = shard->trim_before(Offset(1000));
  ASSERT_TRUE(t) << t.error().to_string();
  EXPECT_EQ(*t, Offset(18));
  EXPECT_EQ(read_all(*shard, 18).size(), 0u);
}

}  // namespace
}  // namespace sluice::fs_storage::testing
