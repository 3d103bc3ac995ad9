// Background verification (background_verify.h; docs/architecture.md "Restart: background
// verification"): after a fast start (verify_on_start=checkpoint), what recovery skipped is
// CRC-checked on a thread; a corrupt batch is reported with file and position, recorded in
// <storage.dir>/.corrupt and stops the node, and every later start refuses until a repair.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "background_verify.h"
#include "layout.h"
#include "recovery.h"
#include "recovery_point.h"
#include "storage_test_util.h"

namespace sluice::fs_storage::testing {
namespace {

using sluice::testing::TestHost;
namespace fsys = std::filesystem;
constexpr auto kWait = std::chrono::seconds(60);

// Byte positions of the batches of a segment file (walks the length fields).
std::vector<std::uint64_t> batch_starts(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::uint64_t> out;
  std::uint64_t pos = 0;
  while (pos + kBatchHeaderSize <= data.size()) {
    out.push_back(pos);
    pos += BatchHeader::decode(data.data() + pos).length;
  }
  return out;
}

std::vector<std::string> segment_files(const std::string& log_dir) {
  std::vector<std::string> out;
  for (const auto& e : fsys::directory_iterator(log_dir))
    if (e.path().extension() == ".log") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

class BackgroundVerify : public ::testing::Test {
 protected:
  void SetUp() override {
    host_.set("storage.retention_interval_ms", "0");
    host_.set("storage.segment_bytes", "4096");
    host_.set("storage.verify_on_start", "checkpoint");
    host_.set("storage.verify_in_background", "true");
    host_.set("storage.verify_mb_per_sec", "0");
  }
  std::string root() const { return host_.data_dir() + "/shards"; }
  // A shard of several sealed segments, closed cleanly; answers its log directory.
  std::string fill(int batches = 40, std::size_t value_pad = 60) {
    FsStorageEngine e(host_, std::make_shared<PosixFileSystem>());
    auto s = e.open_shard(test_ref(), StreamSpec{});
    EXPECT_TRUE(s);
    for (int i = 0; i < batches; ++i) {
      auto r = append_wait(**s, make_batch("v" + std::to_string(i), 3, 1000, value_pad));
      EXPECT_TRUE(r) << r.error().to_string();
    }
    return e.shard_directory(test_ref()).value() + "/log";
  }
  TestHost host_;
};

TEST_F(BackgroundVerify, AFlippedByteInASealedSegmentStopsTheNodeNamingFileAndPosition) {
  const std::string log_dir = fill();
  auto segs = segment_files(log_dir);
  ASSERT_GT(segs.size(), 2u) << "the test needs sealed segments";
  const std::string sealed = segs[1];
  const auto starts = batch_starts(sealed);
  ASSERT_GT(starts.size(), 2u);
  const std::uint64_t bad = starts[starts.size() / 2];
  flip_byte(sealed, bad + kBatchHeaderSize + 10);  // inside the records

  {
    FsStorageEngine e(host_, std::make_shared<PosixFileSystem>());
    ASSERT_TRUE(e.clean_start());
    auto s = e.open_shard(test_ref(), StreamSpec{});
    ASSERT_TRUE(s) << "a fast start does not read the sealed segment: " << s.error().to_string();
    ASSERT_NE(e.verifier(), nullptr);
    ASSERT_TRUE(e.verifier()->wait_idle(kWait));
    auto stops = host_.stop_requests();
    ASSERT_EQ(stops.size(), 1u) << "the corrupt batch was not reported";
    EXPECT_NE(stops[0].find(sealed), std::string::npos) << stops[0];
    EXPECT_NE(stops[0].find("at byte " + std::to_string(bad)), std::string::npos) << stops[0];
    EXPECT_NE(stops[0].find("corrupt"), std::string::npos) << stops[0];
    EXPECT_TRUE(fsys::exists(root() + "/" + std::string(kCorruptMarkerName)));
  }
  // Every later start refuses, naming the finding.
  try {
    FsStorageEngine e(host_, std::make_shared<PosixFileSystem>());
    FAIL() << "a start after a finding must refuse";
  } catch (const std::runtime_error& ex) {
    EXPECT_NE(std::string(ex.what()).find("refusing to start"), std::string::npos) << ex.what();
    EXPECT_NE(std::string(ex.what()).find(sealed + " at byte " + std::to_string(bad)), std::string::npos)
        << ex.what();
  }
  // A repair start checks everything, cuts the log at the corrupt batch and clears the marker.
  host_.set("storage.repair", "true");
  {
    FsStorageEngine e(host_, std::make_shared<PosixFileSystem>());
    EXPECT_EQ(e.verifier(), nullptr) << "a repair start is a full check";
    // Until the log it names was recovered under repair, the finding stands (a repair start
    // that is killed first, or an admin command, must not clear it).
    EXPECT_TRUE(fsys::exists(root() + "/" + std::string(kCorruptMarkerName)));
    auto other = e.open_shard(test_ref(1), StreamSpec{});
    ASSERT_TRUE(other);
    EXPECT_TRUE(fsys::exists(root() + "/" + std::string(kCorruptMarkerName)));
    auto s = e.open_shard(test_ref(), StreamSpec{});
    ASSERT_TRUE(s) << s.error().to_string();
    EXPECT_FALSE(fsys::exists(root() + "/" + std::string(kCorruptMarkerName)));
    auto all = read_all(**s);
    std::uint64_t expect = 0;
    for (auto& [off, v] : all) ASSERT_EQ(off, expect++);  // a dense prefix
    EXPECT_LT(all.size(), 120u);
    EXPECT_TRUE(host_.logged("storage.repair"));
  }
  host_.set("storage.repair", "false");
  FsStorageEngine e(host_, std::make_shared<PosixFileSystem>());  // starts again
  EXPECT_TRUE(e.open_shard(test_ref(), StreamSpec{}));
}

// After a crash (no clean-shutdown marker), the active segment below its recovery point is
// walked by headers only: its CRCs are checked in the background.
TEST_F(BackgroundVerify, AFlippedByteBelowARecoveryPointIsFoundAfterACrash) {
  host_.set("storage.segment_bytes", "1048576");  // everything in the active segment
  const std::string log_dir = fill(20);
  ASSERT_TRUE(fsys::remove(root() + "/" + std::string(kCleanShutdownName)));  // as after SIGKILL
  const std::string active = segment_files(log_dir).back();
  const auto starts = batch_starts(active);
  const std::uint64_t bad = starts[5];
  flip_byte(active, bad + kBatchHeaderSize + 12);
  FsStorageEngine e(host_, std::make_shared<PosixFileSystem>());
  ASSERT_FALSE(e.clean_start());
  auto s = e.open_shard(test_ref(), StreamSpec{});
  ASSERT_TRUE(s) << s.error().to_string();
  ASSERT_TRUE(e.verifier()->wait_idle(kWait));
  auto stops = host_.stop_requests();
  ASSERT_EQ(stops.size(), 1u) << "a corrupt batch below the recovery point went unreported";
  EXPECT_NE(stops[0].find(active + " at byte " + std::to_string(bad)), std::string::npos) << stops[0];
}

TEST_F(BackgroundVerify, ACleanLogIsCheckedWholeAndNotReported) {
  const std::string log_dir = fill();
  std::uint64_t bytes = 0;
  for (const auto& f : segment_files(log_dir)) bytes += fsys::file_size(f);
  FsStorageEngine e(host_, std::make_shared<PosixFileSystem>());
  auto s = e.open_shard(test_ref(), StreamSpec{});
  ASSERT_TRUE(s);
  ASSERT_TRUE(e.verifier()->wait_idle(kWait));
  EXPECT_TRUE(host_.stop_requests().empty());
  EXPECT_EQ(e.verifier()->bytes_checked(), bytes) << "every byte the fast start skipped is checked";
  EXPECT_EQ(e.verifier()->bytes_queued(), 0u);
  EXPECT_TRUE(host_.logged("background verification done"));
  EXPECT_FALSE(fsys::exists(root() + "/" + std::string(kCorruptMarkerName)));
}

// Drops `path`'s clean pages from the page cache (fdatasync first, so all are clean).
void drop_file_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << path;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

// Verification reads every sealed segment once; it must not leave them in the page cache
// (pushing out the tails consumers read), nor drop what was cached before it.
TEST_F(BackgroundVerify, VerificationLeavesThePageCacheAsItFoundIt) {
  host_.set("storage.segment_bytes", "65536");
  const std::string log_dir = fill(100, 1000);  // about 300 KiB: four sealed segments or more
  auto segs = segment_files(log_dir);
  ASSERT_GE(segs.size(), 5u) << "the test needs sealed segments";
  segs.pop_back();  // the active one: opening the shard may read it
  for (const auto& f : segs) {
    drop_file_cache(f);
    if (resident_pages(f).first != 0) GTEST_SKIP() << "this file system keeps no droppable page cache";
  }
  // The first sealed segment is read (and so cached) before the start; the others are not.
  {
    std::ifstream in(segs[0], std::ios::binary);
    std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_EQ(all.size(), fsys::file_size(segs[0]));
  }
  const std::size_t cached_before = resident_pages(segs[0]).first;
  ASSERT_GT(cached_before, 0u);

  FsStorageEngine e(host_, std::make_shared<PosixFileSystem>());
  auto s = e.open_shard(test_ref(), StreamSpec{});
  ASSERT_TRUE(s);
  ASSERT_TRUE(e.verifier()->wait_idle(kWait));
  EXPECT_TRUE(host_.stop_requests().empty());
  ASSERT_GT(e.verifier()->bytes_checked(), 3u * 60000) << "the sealed segments were checked";
  EXPECT_EQ(resident_pages(segs[0]).first, cached_before) << "what was cached before stays cached";
  for (std::size_t i = 1; i < segs.size(); ++i)
    EXPECT_EQ(resident_pages(segs[i]).first, 0u) << segs[i] << " was left in the page cache";
}

// A range given up half-read (its log closed meanwhile) leaves nothing "to go" behind: the
// progress line counts only what is still to be read.
TEST_F(BackgroundVerify, ARangeGivenUpHalfReadIsNoLongerCountedAsQueued) {
  host_.set("storage.segment_bytes", std::to_string(64 << 20));
  host_.set("storage.verify_mb_per_sec", "1");  // 1 MiB/s: the 4 MiB range takes seconds
  {
    FsStorageEngine e(host_, std::make_shared<PosixFileSystem>());
    auto s = e.open_shard(test_ref(), StreamSpec{});
    ASSERT_TRUE(s);
    for (int i = 0; i < 64; ++i) ASSERT_TRUE(append_wait(**s, make_batch("v" + std::to_string(i), 64, 1000, 1000)));
  }
  FsStorageEngine e(host_, std::make_shared<PosixFileSystem>());
  ASSERT_TRUE(e.clean_start());
  auto s = e.open_shard(test_ref(), StreamSpec{});
  ASSERT_TRUE(s);
  const std::uint64_t total = e.verifier()->bytes_queued();
  ASSERT_GT(total, 4u << 20) << "one range of several reads";
  const auto deadline = std::chrono::steady_clock::now() + kWait;
  while (e.verifier()->bytes_checked() == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_GT(e.verifier()->bytes_checked(), 0u);
  e.close_shard(test_ref());  // the rest of the range no longer needs checking
  ASSERT_TRUE(e.verifier()->wait_idle(kWait));
  EXPECT_EQ(e.verifier()->bytes_queued(), 0u) << "checked " << e.verifier()->bytes_checked() << " of " << total;
  EXPECT_TRUE(host_.stop_requests().empty());
}

// A consumer group's dead letters are a log of their own, opened with the group (lazily):
// what a fast start did not read there is checked in the background too, a finding stops
// the node naming the dead-letter segment, and a repair start opens that group itself so
// its full check clears the marker.
TEST_F(BackgroundVerify, AFlippedByteInASealedDeadLetterSegmentIsFoundAndRepaired) {
  std::string dl_dir;
  {
    FsStorageEngine e(host_, std::make_shared<PosixFileSystem>());
    auto s = e.open_shard(test_ref(), StreamSpec{});
    ASSERT_TRUE(s);
    // 100 dead letters: opening the group reads only the newest 64 (its tail check), so the
    // older sealed segments are left to the background check, as in a long-lived group.
    for (int i = 0; i < 100; ++i)
      ASSERT_TRUE(append_wait(**s, make_batch("d" + std::to_string(i), 1, 1000, 200)));
    GroupOptions o;
    o.max_deliveries = 1;
    auto first = (*s)->group_fetch("g", 100, o);
    ASSERT_TRUE(first) << first.error().to_string();
    std::vector<Offset> all;
    for (const auto& r : first->records) all.push_back(r.offset);
    ASSERT_EQ(all.size(), 100u);
    ASSERT_TRUE((*s)->group_nack("g", all));
    auto again = (*s)->group_fetch("g", 100, o);  // past max_deliveries: all dead-lettered
    ASSERT_TRUE(again) << again.error().to_string();
    auto p = (*s)->group_position("g");
    ASSERT_TRUE(p);
    ASSERT_EQ(p->dead_letter_end.value(), 100u);
    dl_dir = e.shard_directory(test_ref()).value() + "/groups/g/dead-letters/log";
  }
  auto segs = segment_files(dl_dir);
  ASSERT_GT(segs.size(), 2u) << "the test needs sealed dead-letter segments";
  const std::string sealed = segs[1];
  const auto starts = batch_starts(sealed);
  ASSERT_GT(starts.size(), 1u);
  const std::uint64_t bad = starts[1];
  flip_byte(sealed, bad + kBatchHeaderSize + 10);
  {
    FsStorageEngine e(host_, std::make_shared<PosixFileSystem>());
    ASSERT_TRUE(e.clean_start());
    auto s = e.open_shard(test_ref(), StreamSpec{});
    ASSERT_TRUE(s);
    auto gp = (*s)->group_position("g");
    ASSERT_TRUE(gp) << "opening the group reads only its newest dead letters: " << gp.error().to_string();
    ASSERT_TRUE(e.verifier()->wait_idle(kWait));
    auto stops = host_.stop_requests();
    ASSERT_EQ(stops.size(), 1u) << "the corrupt dead letter was not reported";
    EXPECT_NE(stops[0].find(sealed + " at byte " + std::to_string(bad)), std::string::npos) << stops[0];
  }
  EXPECT_THROW(FsStorageEngine(host_, std::make_shared<PosixFileSystem>()), std::runtime_error)
      << "a start after a finding must refuse";
  host_.set("storage.repair", "true");
  {
    FsStorageEngine e(host_, std::make_shared<PosixFileSystem>());
    EXPECT_TRUE(fsys::exists(root() + "/" + std::string(kCorruptMarkerName)));
    auto s = e.open_shard(test_ref(), StreamSpec{});
    ASSERT_TRUE(s) << s.error().to_string();
    EXPECT_FALSE(fsys::exists(root() + "/" + std::string(kCorruptMarkerName)))
        << "opening the shard opened the group the marker names, and its full check repaired it";
  }
  host_.set("storage.repair", "false");
  FsStorageEngine e(host_, std::make_shared<PosixFileSystem>());
  auto s = e.open_shard(test_ref(), StreamSpec{});
  ASSERT_TRUE(s);
  auto p = (*s)->group_position("g");
  ASSERT_TRUE(p) << p.error().to_string();
  EXPECT_LT(p->dead_letter_end.value(), 100u) << "the repair cut the dead letters at the corrupt one";
}

TEST_F(BackgroundVerify, AFullCheckAtStartNeedsNoThread) {
  fill(5);
  host_.set("storage.verify_on_start", "all");
  FsStorageEngine e(host_, std::make_shared<PosixFileSystem>());
  EXPECT_EQ(e.verifier(), nullptr);
}

// The guard against false alarms: a bad batch read from a log that was since cut at or
// below it, closed, or trimmed past it is moot; below the lowest cut it is still reported
// (a follower's truncation of its tail must not switch the check off for the whole log).
TEST_F(BackgroundVerify, AFindingStandsUnlessTheLogWasCutAtOrBelowIt) {
  const std::string log_dir = fill();
  const std::string sealed = segment_files(log_dir)[1];
  const auto starts = batch_starts(sealed);
  flip_byte(sealed, starts[1] + kBatchHeaderSize + 3);
  auto fs = std::make_shared<PosixFileSystem>();
  auto file = fs->open(sealed, OpenMode::read_write);
  ASSERT_TRUE(file);
  auto base = parse_offset_file_name(fsys::path(sealed).filename().string(), ".log");
  ASSERT_TRUE(base);
  auto seg = std::make_shared<Segment>(*base, sealed, sealed + ".idx", std::move(file).value());
  // The corrupt batch is the segment's second: it starts 3 records (one batch) in.
  const std::uint64_t bad_offset = *base + 3;
  const auto size = fsys::file_size(sealed);

  struct Case {
    std::uint64_t floor;
    bool reported;
  };
  for (const Case c : {Case{~0ull, true}, Case{bad_offset + 3, true}, Case{bad_offset, false},
                       Case{*base, false}, Case{0, false}}) {
    std::vector<std::string> found;
    BackgroundVerifier v(host_, 0, [&](const std::string& dir, const std::string& m) {
      EXPECT_EQ(dir, log_dir);
      found.push_back(m);
    });
    VerifyJob job;
    job.what = "test";
    job.log_dir = log_dir;
    job.incarnation = test_ref().incarnation;
    job.ranges.push_back({seg, size});
    job.stands = [floor = c.floor](std::uint64_t offset) { return offset < floor; };
    v.add(std::move(job));
    ASSERT_TRUE(v.wait_idle(kWait));
    EXPECT_EQ(found.size(), c.reported ? 1u : 0u) << "cut floor " << c.floor << ", bad batch at " << bad_offset;
  }
}

// What makes the guard above see a close and a cut: the log's cut floor.
TEST_F(BackgroundVerify, TheCutFloorFallsAtACloseAndStaysUpOtherwise) {
  FsStorageEngine e(host_, std::make_shared<PosixFileSystem>());
  auto s = e.open_shard(test_ref(), StreamSpec{});
  ASSERT_TRUE(s);
  auto log = e.replica(test_ref());
  ASSERT_TRUE(log);
  EXPECT_EQ(log->cut_floor(), ~0ull);
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(append_wait(**s, make_batch("v", 3, 1000, 60)));
  e.run_retention_once();
  EXPECT_EQ(log->cut_floor(), ~0ull) << "appends and retention rewrite no byte";
  e.close_shard(test_ref());
  EXPECT_EQ(log->cut_floor(), 0u);
}

// A range waiting in the queue does not keep its segment open: a segment that retention
// deletes meanwhile gives its disk space back at once, not when the verifier reaches it
// (hours later on a large broker at the verifier's rate).
TEST_F(BackgroundVerify, AQueuedRangeDoesNotKeepItsSegmentOpen) {
  const std::string log_dir = fill();
  const auto files = segment_files(log_dir);
  ASSERT_GE(files.size(), 2u);
  auto fs = std::make_shared<PosixFileSystem>();
  auto open_segment = [&](const std::string& path) {
    auto file = fs->open(path, OpenMode::read_write);
    EXPECT_TRUE(file);
    auto base = parse_offset_file_name(fsys::path(path).filename().string(), ".log");
    EXPECT_TRUE(base);
    return std::make_shared<Segment>(base.value_or(0), path, path + ".idx", std::move(file).value());
  };
  auto first = open_segment(files[0]);
  auto second = open_segment(files[1]);
  // One byte a second: the first job's first read leaves the verifier pacing until stop().
  BackgroundVerifier v(host_, 1, [](const std::string&, const std::string&) {});
  for (const auto& seg : {first, second}) {
    VerifyJob job;
    job.what = "test";
    job.log_dir = log_dir;
    job.incarnation = test_ref().incarnation;
    job.ranges.push_back({seg, fsys::file_size(seg->log_path())});
    job.stands = [](std::uint64_t) { return true; };
    v.add(std::move(job));
  }
  std::weak_ptr<Segment> queued = second;
  second.reset();  // retention deletes it: the log's reference goes
  EXPECT_TRUE(queued.expired()) << "a range waiting in the verifier's queue keeps its segment open";
  v.stop();
}

}  // namespace
}  // namespace sluice::fs_storage::testing
