// Deferred directory syncs of a new single-replica shard (docs/architecture.md "Deferred
// directory syncs of a new shard"): open_shard creates the shard's directories and first
// segment without fsyncing their parents, and the first flush syncs them before it
// acknowledges. A power cut that undoes every unsynced directory entry
// (CrashOptions::lose_unsynced_entries) must keep every ACKNOWLEDGED record; a create
// that was never appended to may vanish, cleanly (the next open starts an empty log).
#include <gtest/gtest.h>

#include <atomic>
#include <iostream>

#include "layout.h"
#include "storage_test_util.h"

namespace sluice::fs_storage::testing {
namespace {

using sluice::testing::TestHost;

CrashOptions power_cut() {
  CrashOptions c;
  c.lose_unsynced_entries = true;
  c.keep_unsynced_prefix = true;
  return c;
}

// The records of one value tag read back from a shard (after recovery).
std::map<std::uint64_t, std::string> reopen_and_read(TestHost& host,
                                                     const std::shared_ptr<FaultFileSystem>& fs) {
  FsStorageEngine e(host, fs);
  auto s = e.open_shard(test_ref(), StreamSpec{});
  EXPECT_TRUE(s) << s.error().to_string();
  if (!s) return {};
  return read_all(**s);
}

TEST(DeferredSyncCrashTest, AnAcknowledgedFirstAppendSurvivesAPowerCut) {
  TestHost host;
  host.set("storage.retention_interval_ms", "0");
  auto fs = std::make_shared<FaultFileSystem>();
  std::map<std::uint64_t, std::string> acked;
  {
    FsStorageEngine e(host, fs);
    auto s = e.open_shard(test_ref(), StreamSpec{});
    ASSERT_TRUE(s) << s.error().to_string();
    auto a = append_wait(**s, make_batch("first", 3));
    ASSERT_TRUE(a) << a.error().to_string();
    for (std::uint32_t i = 0; i < 3; ++i) acked[a->base_offset.value() + i] = "first#" + std::to_string(i);
    fs->crash(1, power_cut());  // the process dies with the engine still open
  }
  fs->restart();
  EXPECT_EQ(reopen_and_read(host, fs), acked);
}

TEST(DeferredSyncCrashTest, AnEmptyCreateMayVanishCleanly) {
  TestHost host;
  host.set("storage.retention_interval_ms", "0");
  auto fs = std::make_shared<FaultFileSystem>();
  std::string shard_dir;
  {
    FsStorageEngine e(host, fs);
    auto s = e.open_shard(test_ref(), StreamSpec{});
    ASSERT_TRUE(s) << s.error().to_string();
    shard_dir = *e.shard_directory(test_ref());
    fs->crash(2, power_cut());
  }
  fs->restart();
  // The create was never made durable: its directory is gone (the deferral is real) ...
  auto there = fs->is_directory(shard_dir);
  ASSERT_TRUE(there);
  EXPECT_FALSE(*there) << "an unacknowledged create's entries were synced at open";
  // ... and the name opens again as an empty log, then takes and keeps appends.
  {
    FsStorageEngine e(host, fs);
    auto s = e.open_shard(test_ref(), StreamSpec{});
    ASSERT_TRUE(s) << s.error().to_string();
    EXPECT_TRUE(read_all(**s).empty());
    ASSERT_TRUE(append_wait(**s, make_batch("again", 1)));
    fs->crash(3, power_cut());
  }
  fs->restart();
  auto got = reopen_and_read(host, fs);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got.begin()->second, "again#0");
}

// A cut at every mutating file-system step from the open through the first two appends:
// whatever was acknowledged before the cut is there after it, and the shard always opens.
TEST(DeferredSyncCrashTest, ACutAtEveryStepOfCreateAndFirstAppendsKeepsWhatWasAcknowledged) {
  int cuts = 0;
  for (int step = 0; step < 40; ++step) {
    SCOPED_TRACE("cut before mutating step " + std::to_string(step));
    TestHost host;
    host.set("storage.retention_interval_ms", "0");
    auto fs = std::make_shared<FaultFileSystem>();
    std::map<std::uint64_t, std::string> acked;
    bool cut = false;
    {
      FsStorageEngine e(host, fs);
      fs->crash_after(step, static_cast<std::uint64_t>(step) + 100, power_cut());
      auto s = e.open_shard(test_ref(), StreamSpec{});
      if (s) {
        for (int n = 0; n < 2 && !fs->crashed(); ++n) {
          const std::string tag = "a" + std::to_string(n);
          auto a = append_wait(**s, make_batch(tag, 2));
          if (!a) break;
          for (std::uint32_t i = 0; i < 2; ++i)
            acked[a->base_offset.value() + i] = tag + "#" + std::to_string(i);
        }
      }
      cut = fs->crashed();
      if (!cut) fs->crash(static_cast<std::uint64_t>(step), power_cut());
    }
    if (cut) ++cuts;
    fs->restart();
    auto got = reopen_and_read(host, fs);
    for (const auto& [off, v] : acked) {
      auto it = got.find(off);
      ASSERT_NE(it, got.end()) << "acknowledged offset " << off << " lost";
      EXPECT_EQ(it->second, v);
    }
    if (!cut) break;  // the whole sequence ran before the countdown: every step covered
  }
  EXPECT_GT(cuts, 3);
}

// The entries a shard's acknowledgement depends on may have been created by ANOTHER open:
// shard 0 of a stream creates <tenant>/<ns>/<stream> and is never appended to; shard 1,
// opened after, finds them and takes an acknowledged append. A power cut must keep it.
TEST(DeferredSyncCrashTest, AnAckOnOneShardSyncsTheDirectoriesAnotherShardCreated) {
  TestHost host;
  host.set("storage.retention_interval_ms", "0");
  auto fs = std::make_shared<FaultFileSystem>();
  const ShardRef s1 = test_ref(1);
  std::map<std::uint64_t, std::string> acked;
  {
    FsStorageEngine e(host, fs);
    ASSERT_TRUE(e.open_shard(test_ref(0), StreamSpec{}));
    auto s = e.open_shard(s1, StreamSpec{});
    ASSERT_TRUE(s) << s.error().to_string();
    auto a = append_wait(**s, make_batch("one", 2));
    ASSERT_TRUE(a) << a.error().to_string();
    for (std::uint32_t i = 0; i < 2; ++i) acked[a->base_offset.value() + i] = "one#" + std::to_string(i);
    fs->crash(4, power_cut());
  }
  fs->restart();
  FsStorageEngine e(host, fs);
  auto s = e.open_shard(s1, StreamSpec{});
  ASSERT_TRUE(s) << s.error().to_string();
  EXPECT_EQ(read_all(**s), acked);
}

// A shard opened, closed without an append (its syncs never ran) and opened again by a new
// process that did not lose power: the second open finds the directories and a log, and
// its first acknowledgement must still make them durable.
TEST(DeferredSyncCrashTest, AReopenedShardSyncsTheEntriesAnEarlierOpenLeftUnsynced) {
  TestHost host;
  host.set("storage.retention_interval_ms", "0");
  auto fs = std::make_shared<FaultFileSystem>();
  {
    FsStorageEngine e(host, fs);
    ASSERT_TRUE(e.open_shard(test_ref(), StreamSpec{}));
  }  // clean stop, no power loss: the entries stay unsynced
  std::map<std::uint64_t, std::string> acked;
  {
    FsStorageEngine e(host, fs);
    auto s = e.open_shard(test_ref(), StreamSpec{});
    ASSERT_TRUE(s) << s.error().to_string();
    auto a = append_wait(**s, make_batch("late", 2));
    ASSERT_TRUE(a) << a.error().to_string();
    for (std::uint32_t i = 0; i < 2; ++i) acked[a->base_offset.value() + i] = "late#" + std::to_string(i);
    fs->crash(5, power_cut());
  }
  fs->restart();
  EXPECT_EQ(reopen_and_read(host, fs), acked);
}

// A replicated shard opened beside a single-replica one that was never appended to: the
// tenant, namespace and stream directories were created by the first open, whose syncs
// were deferred and never ran. The replicated open must make its whole directory chain
// durable at once (its epoch history and group log are written before any append), not
// only the entries it created itself.
TEST(DeferredSyncCrashTest, AReplicatedShardSyncsTheChainANeverAppendedShardLeftUnsynced) {
  TestHost host;
  host.set("storage.retention_interval_ms", "0");
  auto fs = std::make_shared<FaultFileSystem>();
  const ShardRef replicated = test_ref(1);
  StreamSpec rf3;
  rf3.replication_factor = 3;
  rf3.min_insync = 2;
  const std::string root = host.data_dir() + "/shards";
  auto dir = shard_dir(root, replicated);
  ASSERT_TRUE(dir) << dir.error().to_string();
  {
    FsStorageEngine e(host, fs);
    ASSERT_TRUE(e.open_shard(test_ref(0), StreamSpec{}));  // creates acme/orders/events, syncs deferred
    auto s = e.open_shard(replicated, rf3);
    ASSERT_TRUE(s) << s.error().to_string();
    fs->crash(6, power_cut());
  }
  fs->restart();
  auto there = fs->is_directory(log_dir(*dir));
  ASSERT_TRUE(there) << there.error().to_string();
  EXPECT_TRUE(*there) << log_dir(*dir) << " vanished in the power cut";
}

}  // namespace
}  // namespace sluice::fs_storage::testing
