// Recovery rules: a torn tail of the active segment is truncated (and logged); any other
// invalid batch fails open_shard with corrupt_data naming file and byte, unless repair.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "layout.h"
#include "storage_test_util.h"

namespace sluice::fs_storage::testing {
namespace {

using sluice::testing::TestHost;

void append_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::app | std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

class CorruptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    host_.set("storage.retention_interval_ms", "0");
    host_.set("storage.index_interval_bytes", "256");
    // The mode these tests are about: every batch checked at open (the broker's default,
    // checkpoint, finds the same corruption after the start: background_verify_test.cc).
    host_.set("storage.verify_on_start", "all");
  }
  // Writes `batches` batches of 3 records each, closes the engine, returns batch length.
  std::size_t write(int batches, const std::string& segment_bytes) {
    host_.set("storage.segment_bytes", segment_bytes);
    FsStorageEngine e(host_, std::make_shared<PosixFileSystem>());
    auto s = e.open_shard(test_ref(), StreamSpec{});
    EXPECT_TRUE(s);
    for (int i = 0; i < batches; ++i) EXPECT_TRUE(append_wait(**s, make_batch("v", 3, 1000, 30)));
    seg0_ = segment_path(e, test_ref(), 0);
    dir_ = e.shard_directory(test_ref()).value() + "/log";
    return make_batch("v", 3, 1000, 30).size();
  }
  Result<std::shared_ptr<ShardLog>> reopen() {
    engine_ = std::make_unique<FsStorageEngine>(host_, std::make_shared<PosixFileSystem>());
    return engine_->open_shard(test_ref(), StreamSpec{});
  }
  TestHost host_;
  std::unique_ptr<FsStorageEngine> engine_;
  std::string seg0_, dir_;
};

TEST_F(CorruptionTest, TornTailOfActiveSegmentIsTruncatedAndLogged) {
  const std::size_t len = write(5, "1048576");
  std::string partial = make_batch("torn", 3, 1000, 30).substr(0, len / 2);
  append_bytes(seg0_, partial + "garbage!");
  auto s = reopen();
  ASSERT_TRUE(s) << s.error().to_string();
  EXPECT_TRUE(host_.logged("truncated torn tail"));
  EXPECT_TRUE(host_.logged("never acknowledged"));
  EXPECT_TRUE(host_.logged(segment_file_name(0) + " at byte " + std::to_string(5 * len)));
  EXPECT_TRUE(host_.logged("discarded " + std::to_string(partial.size() + 8) + " bytes"));
  EXPECT_EQ(std::filesystem::file_size(seg0_), 5 * len);
  EXPECT_EQ((*s)->stats().high_watermark.value(), 15u);
  auto r = append_wait(**s, make_batch("after", 1));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->base_offset.value(), 15u);
  EXPECT_EQ(read_all(**s).size(), 16u);
}

TEST_F(CorruptionTest, FlippedByteInSealedSegmentFailsOpenNamingFileAndPosition) {
  const std::size_t len = write(20, "1024");
  flip_byte(seg0_, len + 60);  // inside the second batch
  auto s = reopen();
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, Errc::corrupt_data);
  EXPECT_NE(s.error().message.find(seg0_), std::string::npos) << s.error().message;
  EXPECT_NE(s.error().message.find("at byte " + std::to_string(len)), std::string::npos)
      << s.error().message;
  EXPECT_NE(s.error().message.find("corrupt batch in"), std::string::npos);
}

TEST_F(CorruptionTest, RepairCutsTheLogAtTheFirstCorruptBatchAndLogsWhatWasDiscarded) {
  const std::size_t len = write(20, "1024");
  flip_byte(seg0_, len + 60);
  host_.set("storage.repair", "true");
  auto s = reopen();
  ASSERT_TRUE(s) << s.error().to_string();
  EXPECT_TRUE(host_.logged("storage.repair"));
  EXPECT_TRUE(host_.logged("whole segment(s)"));
  auto st = (*s)->stats();
  EXPECT_EQ(st.high_watermark.value(), 3u) << "only the first batch precedes the corruption";
  EXPECT_EQ(st.segments, 1u);
  auto r = append_wait(**s, make_batch("after", 1));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->base_offset.value(), 3u);
}

TEST_F(CorruptionTest, CorruptBatchInActiveSegmentFollowedByValidBatchesFailsLoudly) {
  const std::size_t len = write(6, "1048576");
  flip_byte(seg0_, 2 * len + 70);
  auto s = reopen();
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, Errc::corrupt_data);
  EXPECT_NE(s.error().message.find("at byte " + std::to_string(2 * len)), std::string::npos)
      << s.error().message;
  EXPECT_FALSE(host_.logged("truncated torn tail"));
  EXPECT_EQ(std::filesystem::file_size(seg0_), 6 * len) << "nothing truncated";
}

// A batch of one record whose value is `value`, stamped as storage would have written it.
std::string stamped_batch(const std::string& value, std::uint64_t base, std::uint64_t inc = 0) {
  BatchBuilder b;
  b.add(std::nullopt, value, {}, 1000);
  std::string out = b.finish();
  restamp_batch(out.data(), base, inc);
  return out;
}

void overwrite(const std::string& path, std::uint64_t pos, const std::string& bytes) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(pos));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Regression: recovery took any valid batch anywhere after a torn batch (even inside its
// payload) as proof of mid-log corruption, so a torn write of a record whose value is an
// encoded batch made the node refuse to start.
TEST_F(CorruptionTest, TornTailWhoseValueIsAnEncodedBatchIsTruncated) {
  const std::size_t len = write(5, "1048576");
  const std::string inner = make_batch("inner", 2);  // as a client built it: offset 0
  ASSERT_EQ(check_batch(inner.data(), inner.size(), nullptr), BatchCheck::ok);
  const std::string outer = stamped_batch("prefix" + inner + "suffix", 15);
  append_bytes(seg0_, outer.substr(0, outer.size() - 3));  // cut short: never synced
  auto s = reopen();
  ASSERT_TRUE(s) << s.error().to_string();
  EXPECT_TRUE(host_.logged("truncated torn tail of"));
  EXPECT_TRUE(host_.logged(segment_file_name(0) + " at byte " + std::to_string(5 * len)));
  EXPECT_EQ(std::filesystem::file_size(seg0_), 5 * len);
  EXPECT_EQ((*s)->stats().high_watermark.value(), 15u);
}

// Same, with an embedded batch that even carries a plausible offset and the incarnation:
// the torn batch's header is intact and its extent is within the file, so recovery does
// not look inside it.
TEST_F(CorruptionTest, TornBatchIsNotSearchedInsideItsOwnDeclaredExtent) {
  const std::size_t len = write(5, "1048576");
  std::string inner = make_batch("inner", 2);
  restamp_batch(inner.data(), 16, 0);
  std::string outer = stamped_batch("prefix" + inner + "suffix", 15);
  outer[outer.size() - 1] ^= 0x40;  // last bytes never made it: CRC fails
  append_bytes(seg0_, outer);
  auto s = reopen();
  ASSERT_TRUE(s) << s.error().to_string();
  EXPECT_TRUE(host_.logged("truncated torn tail of"));
  EXPECT_EQ(std::filesystem::file_size(seg0_), 5 * len);
  EXPECT_EQ((*s)->stats().high_watermark.value(), 15u);
}

// A group commit (batches k, k+1 in one write, one fdatasync) torn by power loss: a sector
// of batch k never reached the disk (reads as zeros) while batch k+1 did. Never
// acknowledged, so it is a torn tail, not corruption.
TEST_F(CorruptionTest, TornGroupCommitWithUnwrittenSectorIsTruncated) {
  const std::size_t len = write(5, "1048576");
  const std::string k = stamped_batch(std::string(3000, 'x'), 15);
  const std::string k1 = stamped_batch("next", 16);
  append_bytes(seg0_, k + k1);
  const std::uint64_t sector = (5 * len + 200 + 511) / 512 * 512;  // inside batch k
  overwrite(seg0_, sector, std::string(512, '\0'));
  auto s = reopen();
  ASSERT_TRUE(s) << s.error().to_string();
  EXPECT_TRUE(host_.logged("torn group commit"));
  EXPECT_TRUE(host_.logged(segment_file_name(0) + " at byte " + std::to_string(5 * len)));
  EXPECT_EQ(std::filesystem::file_size(seg0_), 5 * len);
  EXPECT_EQ((*s)->stats().high_watermark.value(), 15u);
}

// Still loud: garbage over a batch's header in the middle of the active segment, followed
// by properly sequenced batches.
TEST_F(CorruptionTest, GarbageMidActiveSegmentFollowedBySequencedBatchesFailsLoudly) {
  const std::size_t len = write(6, "1048576");
  overwrite(seg0_, 2 * len, "GARBAGE!");
  auto s = reopen();
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, Errc::corrupt_data);
  EXPECT_NE(s.error().message.find("at byte " + std::to_string(2 * len)), std::string::npos)
      << s.error().message;
  EXPECT_FALSE(host_.logged("truncated torn tail"));
  EXPECT_EQ(std::filesystem::file_size(seg0_), 6 * len);
}

// Still loud: a flipped bit in the CRC-less length field makes a mid-log batch claim an
// extent past the end of the file; the batches after it are still found.
TEST_F(CorruptionTest, CorruptLengthPointingPastEndStillFailsLoudly) {
  const std::size_t len = write(6, "1048576");
  overwrite(seg0_, 2 * len + 4 + 2, std::string(1, '\x40'));  // length += 4 MiB
  auto s = reopen();
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, Errc::corrupt_data);
  EXPECT_EQ(std::filesystem::file_size(seg0_), 6 * len);
}

TEST_F(CorruptionTest, MissingMiddleSegmentIsAnOffsetGapAndFailsOpen) {
  write(20, "1024");
  std::vector<std::string> logs;
  for (auto& e : std::filesystem::directory_iterator(dir_))
    if (e.path().extension() == ".log") logs.push_back(e.path().string());
  std::sort(logs.begin(), logs.end());
  ASSERT_GE(logs.size(), 3u);
  std::filesystem::remove(logs[1]);
  auto s = reopen();
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, Errc::corrupt_data);
  EXPECT_NE(s.error().message.find("does not follow"), std::string::npos) << s.error().message;
}

TEST_F(CorruptionTest, CorruptionFoundByReadIsReportedWithFileAndPosition) {
  const std::size_t len = write(4, "1048576");
  auto s = reopen();
  ASSERT_TRUE(s);
  flip_byte(seg0_, len + 60);  // behind recovery's back
  auto r = (*s)->read(Offset(3), 1, 1);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::corrupt_data);
  EXPECT_NE(r.error().message.find(seg0_ + " at byte " + std::to_string(len)), std::string::npos)
      << r.error().message;
}

}  // namespace
}  // namespace sluice::fs_storage::testing
