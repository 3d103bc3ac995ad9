// Restart with storage.verify_on_start=checkpoint (recovery_point.h; docs/architecture.md
// "Restart: recovery point and clean-shutdown marker"): the clean-shutdown marker is taken
// durably at start, only what lies beyond a log's recovery point is checked, a torn tail
// beyond it is cut, and a torn or corrupt recovery point is ignored (everything is checked).
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>

#include "fault_file_system.h"
#include "layout.h"
#include "recovery_point.h"
#include "storage_test_util.h"

namespace sluice::fs_storage::testing {
namespace {

using sluice::testing::TestHost;
namespace fsys = std::filesystem;

class RecoveryPointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    host_.set("storage.retention_interval_ms", "0");
    host_.set("storage.index_interval_bytes", "256");
    host_.set("storage.segment_bytes", "1048576");
    host_.set("storage.verify_on_start", "checkpoint");
    // What a start reads, alone: these tests leave corrupt bytes below a recovery point on
    // purpose, which the background check (BackgroundVerify.*) would report meanwhile and
    // mark, refusing the next start of the test.
    host_.set("storage.verify_in_background", "false");
  }
  std::string marker() const { return host_.data_dir() + "/shards/" + std::string(kCleanShutdownName); }
  // Appends `n` batches of 3 records ("<tag><i>#k"), remembering what was acknowledged.
  void append(ShardLog& s, const std::string& tag, int n) {
    for (int i = 0; i < n; ++i) {
      auto r = append_wait(s, make_batch(tag + std::to_string(i), 3, 1000, 30));
      ASSERT_TRUE(r) << r.error().to_string();
      for (std::uint32_t k = 0; k < 3; ++k)
        acked_[r->base_offset.value() + k] = tag + std::to_string(i) + "#" + std::to_string(k);
    }
  }
  void expect_acked(ShardLog& s) {
    auto all = read_all(s);
    for (auto& [off, v] : acked_) {
      auto it = all.find(off);
      ASSERT_NE(it, all.end()) << "acknowledged offset " << off << " lost";
      EXPECT_EQ(it->second.substr(0, v.size()), v) << "offset " << off;  // then padding
    }
    std::uint64_t expect = 0;
    for (auto& [off, v] : all) ASSERT_EQ(off, expect++);
  }
  TestHost host_;
  std::map<std::uint64_t, std::string> acked_;
};

// The reserved end (recovery_point.h) rides in the record's once-reserved field, in 4 KiB
// units rounded up (a larger bound only checks more); one below the position is malformed.
TEST(RecoveryPointRecord, TheReservedEndRoundTripsRoundedUpToAPage) {
  RecoveryPoint rp{4096, 10000, 5000, 77, 0};
  auto none = decode_recovery_point(encode_recovery_point(rp));
  ASSERT_TRUE(none);
  EXPECT_EQ(none->reserved_end, 0u);
  rp.reserved_end = 20001;
  auto back = decode_recovery_point(encode_recovery_point(rp));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->reserved_end, 20480u);  // 5 pages
  EXPECT_EQ(back->position, 10000u);
  EXPECT_EQ(back->next_offset, 5000u);
  EXPECT_EQ(back->max_ts, 77);
  rp.reserved_end = 4096;  // below the position
  EXPECT_FALSE(decode_recovery_point(encode_recovery_point(rp)));
}

TEST_F(RecoveryPointTest, CleanShutdownWritesTheMarkerLastAndTheNextStartTakesIt) {
  std::string log_dir;
  {
    FsStorageEngine e(host_, std::make_shared<PosixFileSystem>());
    EXPECT_FALSE(e.clean_start());
    auto s = e.open_shard(test_ref(), StreamSpec{});
    ASSERT_TRUE(s);
    append(**s, "a", 10);
    log_dir = e.shard_directory(test_ref()).value() + "/log";
    EXPECT_FALSE(fsys::exists(marker()));  // only at shutdown
  }
  EXPECT_TRUE(fsys::exists(marker()));
  auto rp = read_recovery_point(*std::make_shared<PosixFileSystem>(), log_dir);
  ASSERT_TRUE(rp);
  EXPECT_EQ(rp->segment_base, 0u);
  EXPECT_EQ(rp->next_offset, 30u);
  EXPECT_EQ(rp->position, fsys::file_size(log_dir + "/" + segment_file_name(0)));
  FsStorageEngine e(host_, std::make_shared<PosixFileSystem>());
  EXPECT_TRUE(e.clean_start());
  EXPECT_FALSE(fsys::exists(marker()));  // taken before anything is written
  auto s = e.open_shard(test_ref(), StreamSpec{});
  ASSERT_TRUE(s);
  expect_acked(**s);
  append(**s, "b", 2);  // appends continue at the end
  expect_acked(**s);
}

// Review (a refused start puts the marker back): a run that started without a marker (after
// a crash) and stopped cleanly wrote one that also vouched for a shard it never opened, so
// the next start trusted that log as closed cleanly and read it through the page cache,
// where an earlier run's failed sync may have left pages never written (an unclean start
// drops them first). Such a run now drops the page cache of every log it never opened
// before it writes the marker; a run that took a marker, or saw a sync fail, does not need
// to, or writes none.
TEST_F(RecoveryPointTest, ARunAfterACrashDropsTheCacheOfTheShardsItNeverOpenedBeforeTheMarker) {
  auto fs = std::make_shared<FaultFileSystem>();
  const ShardRef a = test_ref(0), b = test_ref(1);
  std::string b_log;
  {
    FsStorageEngine e(host_, fs);
    for (const auto& r : {a, b}) {
      auto s = e.open_shard(r, StreamSpec{});
      ASSERT_TRUE(s);
      append(**s, "x", 3);
    }
    b_log = e.shard_directory(b).value() + "/log/" + segment_file_name(0);
  }
  ASSERT_TRUE(fsys::exists(marker()));
  fsys::remove(marker());  // as a crash leaves it
  const auto drops_of_b = [&] {
    std::size_t n = 0;
    for (const auto& d : fs->cache_drops())
      if (d.path == b_log && d.offset == 0 && d.len == 0) ++n;
    return n;
  };
  {
    FsStorageEngine e(host_, fs);
    ASSERT_FALSE(e.clean_start());
    ASSERT_TRUE(e.open_shard(a, StreamSpec{}));  // b is never opened (a start refused halfway)
  }
  EXPECT_EQ(drops_of_b(), 1u) << "the marker vouched for a log whose page cache was not dropped";
  EXPECT_TRUE(fsys::exists(marker()));
  {
    FsStorageEngine e(host_, fs);
    ASSERT_TRUE(e.clean_start());  // took the marker: puts it back, nothing to drop
  }
  EXPECT_EQ(drops_of_b(), 1u);
  EXPECT_TRUE(fsys::exists(marker()));
  {
    FsStorageEngine e(host_, fs);
    auto s = e.open_shard(a, StreamSpec{});
    ASSERT_TRUE(s);
    fs->fail_syncs(true);
    std::atomic<bool> done{false};
    (*s)->append(make_batch("y", 1), AckMode::leader, [&](Result<AppendResult> r) {
      EXPECT_FALSE(r) << "acknowledged with its sync failing";
      done = true;
    });
    ASSERT_TRUE(eventually([&] { return done.load(); }));
    s->reset();
    e.close_shard(a);  // closed mid-run: not among the shards shutdown closes
    fs->fail_syncs(false);
  }
  EXPECT_FALSE(fsys::exists(marker())) << "a run whose sync failed wrote the marker";
}

// Closing a shard that never held a batch writes no clean state (the broker closes a
// stream's shards before deleting them, and five syncs per shard halved the create + delete
// pairs: docs/benchmarks.md "Create + delete pairs"), and still counts as clean: the
// engine's marker is written and the next start opens the shard and appends to it.
TEST_F(RecoveryPointTest, ClosingANeverWrittenShardSyncsNothingAndStaysClean) {
  auto fs = std::make_shared<FaultFileSystem>();
  {
    FsStorageEngine e(host_, fs);
    ASSERT_TRUE(e.open_shard(test_ref(), StreamSpec{}));
    const std::uint64_t before = fs->syncs();
    e.close_shard(test_ref());
    EXPECT_EQ(fs->syncs(), before) << "closing an empty shard synced something";
    ASSERT_TRUE(e.open_shard(test_ref(), StreamSpec{}));
  }
  EXPECT_TRUE(fsys::exists(marker()));
  fs->restart();
  FsStorageEngine e(host_, fs);
  EXPECT_TRUE(e.clean_start());
  auto s = e.open_shard(test_ref(), StreamSpec{});
  ASSERT_TRUE(s);
  append(**s, "a", 2);
  expect_acked(**s);
}

// A crash right after a start from a clean shutdown: the marker the start took must not
// come back (it was removed and its directory fsynced before anything was written).
TEST_F(RecoveryPointTest, CrashRightAfterStartNeverFindsTheStaleMarker) {
  auto fs = std::make_shared<FaultFileSystem>();
  {
    FsStorageEngine e(host_, fs);
    auto s = e.open_shard(test_ref(), StreamSpec{});
    ASSERT_TRUE(s);
    append(**s, "a", 10);
  }
  ASSERT_TRUE(fsys::exists(marker()));
  {
    FsStorageEngine e(host_, fs);
    ASSERT_TRUE(e.clean_start());
    auto s = e.open_shard(test_ref(), StreamSpec{});
    ASSERT_TRUE(s);
    append(**s, "b", 3);
    CrashOptions cut;
    cut.lose_unsynced_entries = true;  // a power cut: unsynced directory entries are undone
    fs->crash(11, cut);
    s->reset();
    e.shutdown();  // fails against the crashed file system: writes nothing
    fs->restart();
  }
  EXPECT_FALSE(fsys::exists(marker()));
  FsStorageEngine e(host_, fs);
  EXPECT_FALSE(e.clean_start()) << "a stale clean-shutdown marker was trusted after a crash";
  auto s = e.open_shard(test_ref(), StreamSpec{});
  ASSERT_TRUE(s) << s.error().to_string();
  expect_acked(**s);
}

// After SIGKILL or a power cut, recovery checks what lies beyond the recovery point and
// cuts a torn tail there; every acknowledged record stays.
TEST_F(RecoveryPointTest, TornTailBeyondTheRecoveryPointIsCut) {
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    TestHost host;
    for (auto [k, v] : std::vector<std::pair<std::string, std::string>>{
             {"storage.retention_interval_ms", "0"}, {"storage.index_interval_bytes", "256"},
             {"storage.segment_bytes", "1048576"}, {"storage.verify_on_start", "checkpoint"},
             {"storage.verify_in_background", "false"}})
      host.set(k, v);
    acked_.clear();
    auto fs = std::make_shared<FaultFileSystem>();
    {
      FsStorageEngine e(host, fs);
      auto s = e.open_shard(test_ref(), StreamSpec{});
      ASSERT_TRUE(s);
      append(**s, "a", 10);
    }  // clean: the recovery point is at the end of these 10 batches
    {
      FsStorageEngine e(host, fs);
      auto s = e.open_shard(test_ref(), StreamSpec{});
      ASSERT_TRUE(s);
      append(**s, "b", 4);
      fs->block_syncs();  // written, never synced: never acknowledged
      std::atomic<int> done{0};
      for (int i = 0; i < 3; ++i)
        (*s)->append(make_batch("u" + std::to_string(i), 3, 1000, 30), AckMode::leader,
                     [&](Result<AppendResult>) { ++done; });
      ASSERT_TRUE(eventually([&] { return fs->blocked_sync_waiters() >= 1; }));
      CrashOptions torn;
      torn.keep_unsynced_prefix = true;
      torn.append_garbage = true;  // at least one torn byte beyond the synced end
      fs->crash(seed, torn);
      fs->unblock_syncs();
      ASSERT_TRUE(eventually([&] { return done.load() == 3; }));
      s->reset();
      e.shutdown();
      fs->restart();
    }
    FsStorageEngine e(host, fs);
    EXPECT_FALSE(e.clean_start());
    auto s = e.open_shard(test_ref(), StreamSpec{});
    ASSERT_TRUE(s) << s.error().to_string();
    expect_acked(**s);
    EXPECT_TRUE(host.logged("truncated torn tail"));
    append(**s, "c", 1);  // and the log goes on from the cut
    expect_acked(**s);
  }
}

// Without a clean-shutdown marker (SIGKILL), bytes below a valid recovery point are not
// read again: a byte flipped there goes unnoticed at open, which a full check would refuse.
TEST_F(RecoveryPointTest, OnlyWhatLiesBeyondTheRecoveryPointIsChecked) {
  std::string seg;
  {
    FsStorageEngine e(host_, std::make_shared<PosixFileSystem>());
    auto s = e.open_shard(test_ref(), StreamSpec{});
    ASSERT_TRUE(s);
    append(**s, "a", 10);
    seg = segment_path(e, test_ref(), 0);
  }
  fsys::remove(marker());
  const auto len = make_batch("a0", 3, 1000, 30).size();
  flip_byte(seg, len * 2 + 100);  // inside batch 2, below the recovery point
  {
    FsStorageEngine e(host_, std::make_shared<PosixFileSystem>());
    auto s = e.open_shard(test_ref(), StreamSpec{});
    ASSERT_TRUE(s) << s.error().to_string();
    EXPECT_EQ((*s)->stats().high_watermark.value(), 30u);
  }
  fsys::remove(marker());
  host_.set("storage.verify_on_start", "all");
  FsStorageEngine e(host_, std::make_shared<PosixFileSystem>());
  auto s = e.open_shard(test_ref(), StreamSpec{});
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, Errc::corrupt_data);
}

// Regression (review): below the recovery point every batch was synced (acknowledged). A
// damaged last batch there (a flipped header byte, or its sector read back as zeros) was
// taken, after a SIGKILL, for a torn tail or unwritten space and cut: acknowledged records
// gone, logged as "never acknowledged". It is refused as corruption, as a full check would.
TEST_F(RecoveryPointTest, DamageBelowTheRecoveryPointIsCorruptionNotATornTail) {
  for (const std::string how : {"header", "zeros"}) {
    SCOPED_TRACE(how);
    TestHost host;
    for (auto [k, v] : std::vector<std::pair<std::string, std::string>>{
             {"storage.retention_interval_ms", "0"}, {"storage.index_interval_bytes", "256"},
             {"storage.segment_bytes", "1048576"}, {"storage.verify_on_start", "checkpoint"},
             {"storage.verify_in_background", "false"}, {"storage.preallocate_segments", "false"}})
      host.set(k, v);
    std::string seg;
    {
      FsStorageEngine e(host, std::make_shared<PosixFileSystem>());
      auto s = e.open_shard(test_ref(), StreamSpec{});
      ASSERT_TRUE(s);
      append(**s, how, 10);  // clean close: the recovery point is at the end of batch 9
      seg = segment_path(e, test_ref(), 0);
    }
    fsys::remove(host.data_dir() + "/shards/" + std::string(kCleanShutdownName));  // as after SIGKILL
    const auto len = make_batch(how + "0", 3, 1000, 30).size();
    ASSERT_EQ(fsys::file_size(seg), 10 * len);
    if (how == "header") {
      flip_byte(seg, 9 * len + 1);  // the magic of the last batch
    } else {
      std::fstream f(seg, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(static_cast<std::streamoff>(9 * len));
      const std::string zeros(len, '\0');
      f.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
    }
    FsStorageEngine e(host, std::make_shared<PosixFileSystem>());
    auto s = e.open_shard(test_ref(), StreamSpec{});
    ASSERT_FALSE(s) << "an acknowledged batch below the recovery point was cut";
    EXPECT_EQ(s.error().code, Errc::corrupt_data) << s.error().to_string();
    EXPECT_EQ(fsys::file_size(seg), 10 * len) << "recovery cut the log";
  }
}

// Regression (review): a recovery point naming bytes the log no longer has (its segment
// shorter, or missing while later ones remain) was ignored with a warning: the log opened
// shorter and handed the lost offsets out again. Every cut removes the point first, so
// this is lost data: corrupt_data, unless storage.repair.
TEST_F(RecoveryPointTest, APointNamingBytesTheLogNoLongerHasRefusesTheStart) {
  for (const std::string how : {"shorter", "missing"}) {
    SCOPED_TRACE(how);
    fsys::remove_all(host_.data_dir() + "/shards");
    // "missing": small segments, so the point names the newest of several.
    host_.set("storage.segment_bytes", how == "missing" ? "1024" : "1048576");
    std::string seg, log_dir;
    {
      FsStorageEngine e(host_, std::make_shared<PosixFileSystem>());
      auto s = e.open_shard(test_ref(), StreamSpec{});
      ASSERT_TRUE(s);
      append(**s, "a", 10);
      seg = segment_path(e, test_ref(), 0);
      log_dir = e.shard_directory(test_ref()).value() + "/log";
    }
    fsys::remove(marker());  // as after SIGKILL
    const auto len = make_batch("a0", 3, 1000, 30).size();
    if (how == "shorter") {
      fsys::resize_file(seg, 4 * len);  // whole batches, as a lost write leaves them
    } else {
      // Earlier segments stay; the newest, which the point names, is gone.
      std::string newest;
      for (const auto& f : fsys::directory_iterator(log_dir))
        if (f.path().extension() == ".log" && f.path().string() > newest) newest = f.path().string();
      ASSERT_NE(newest, seg) << "only one segment: the test proves nothing";
      fsys::remove(newest);
    }
    {
      FsStorageEngine e(host_, std::make_shared<PosixFileSystem>());
      auto s = e.open_shard(test_ref(), StreamSpec{});
      ASSERT_FALSE(s) << "the log opened without the bytes its recovery point names";
      EXPECT_EQ(s.error().code, Errc::corrupt_data) << s.error().to_string();
      EXPECT_NE(s.error().message.find("acknowledged batches are gone"), std::string::npos) << s.error().message;
    }
    if (how == "shorter") {
      host_.set("storage.repair", "true");
      FsStorageEngine e(host_, std::make_shared<PosixFileSystem>());
      auto s = e.open_shard(test_ref(), StreamSpec{});
      ASSERT_TRUE(s) << s.error().to_string();
      EXPECT_EQ(read_all(**s).size(), 12u);
      host_.set("storage.repair", "false");
    }
  }
}

// A recovery point that is torn or fails its CRC is ignored: every batch is checked again
// (here that finds a corrupt batch below where the point claimed).
TEST_F(RecoveryPointTest, TornOrCorruptRecoveryPointIsIgnoredAndEverythingIsChecked) {
  for (const std::string how : {"crc", "torn"}) {
    SCOPED_TRACE(how);
    fsys::remove_all(host_.data_dir() + "/shards");
    std::string seg, rp_path;
    {
      FsStorageEngine e(host_, std::make_shared<PosixFileSystem>());
      auto s = e.open_shard(test_ref(), StreamSpec{});
      ASSERT_TRUE(s);
      append(**s, "a", 10);
      seg = segment_path(e, test_ref(), 0);
      rp_path = e.shard_directory(test_ref()).value() + "/log/" + std::string(kRecoveryPointName);
    }
    fsys::remove(marker());
    ASSERT_TRUE(fsys::exists(rp_path));
    if (how == "crc") flip_byte(rp_path, 45);           // the CRC field
    else fsys::resize_file(rp_path, 20);                 // a torn write
    const auto len = make_batch("a0", 3, 1000, 30).size();
    flip_byte(seg, len * 2 + 100);
    FsStorageEngine e(host_, std::make_shared<PosixFileSystem>());
    auto s = e.open_shard(test_ref(), StreamSpec{});
    ASSERT_FALSE(s) << "a " << how << " recovery point was trusted";
    EXPECT_EQ(s.error().code, Errc::corrupt_data);
    EXPECT_TRUE(host_.logged("ignoring"));
  }
}

}  // namespace
}  // namespace sluice::fs_storage::testing
