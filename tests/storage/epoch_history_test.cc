// The persistent leader-epoch history of a replicated shard (epoch_history.h;
// docs/replication.md "Persistent fencing"; KIP-101 / KIP-279).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "epoch_history.h"
#include "replica_node.h"
#include "storage_test_util.h"

namespace sluice::fs_storage::testing {
namespace {

using sluice::testing::TestHost;

TEST(EpochHistoryTest, EndOffsetForFollowsKip279) {
  auto fs = std::make_shared<PosixFileSystem>();
  TestHost host;
  EpochHistory h;
  ASSERT_TRUE(h.save(*fs, host.data_dir(), LeaderEpoch(7), LeaderEpoch(4),
                     {{LeaderEpoch(2), Offset(0)}, {LeaderEpoch(4), Offset(10)},
                      {LeaderEpoch(5), Offset(25)}}));
  auto loaded = EpochHistory::load(*fs, host.data_dir());
  ASSERT_TRUE(loaded) << loaded.error().to_string();
  EXPECT_EQ(loaded->current(), LeaderEpoch(7));
  EXPECT_EQ(loaded->led(), LeaderEpoch(4));
  EXPECT_EQ(loaded->entries(), h.entries());
  auto at = [&](std::uint64_t e) { return loaded->end_offset_for(LeaderEpoch(e), Offset(40)); };
  EXPECT_EQ(at(1).epoch, LeaderEpoch(1));  // below every entry: the first start
  EXPECT_EQ(at(1).end, Offset(0));
  EXPECT_EQ(at(2).end, Offset(10));
  EXPECT_EQ(at(3).epoch, LeaderEpoch(2));  // largest epoch <= 3 is 2
  EXPECT_EQ(at(3).end, Offset(10));
  EXPECT_EQ(at(4).end, Offset(25));
  EXPECT_EQ(at(5).end, Offset(40));  // the latest: the log end
  EXPECT_EQ(at(9).epoch, LeaderEpoch(5));
  EXPECT_EQ(at(9).end, Offset(40));
  EXPECT_EQ(loaded->epoch_at(Offset(9)), LeaderEpoch(2));
  EXPECT_EQ(loaded->epoch_at(Offset(10)), LeaderEpoch(4));
  EXPECT_EQ(loaded->truncated(Offset(25)).size(), 2u);  // an entry at the cut goes

  // A damaged file is refused, never read as "no epochs".
  const std::string path = host.data_dir() + "/" + std::string(kEpochHistoryName);
  std::string bytes = slurp(path);
  bytes[9] ^= 1;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  auto bad = EpochHistory::load(*fs, host.data_dir());
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, Errc::corrupt_data);
  EXPECT_NE(bad.error().message.find(path), std::string::npos);
}

// load() is recovery: it removes a save's leftover .tmp. read() changes nothing, so a
// reader beside a live shard cannot delete the .tmp a save is about to rename (that made
// ReplicaDivergenceTest's save fail in a sanitizer run).
TEST(EpochHistoryTest, ReadLeavesATmpFileAndLoadRemovesIt) {
  auto fs = std::make_shared<PosixFileSystem>();
  TestHost host;
  EpochHistory h;
  ASSERT_TRUE(h.save(*fs, host.data_dir(), LeaderEpoch(3), LeaderEpoch(3), {{LeaderEpoch(3), Offset(0)}}));
  const std::string tmp = host.data_dir() + "/" + std::string(kEpochHistoryName) + ".tmp";
  std::ofstream(tmp, std::ios::binary) << "a save in progress";
  auto r = EpochHistory::read(*fs, host.data_dir());
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->current(), LeaderEpoch(3));
  EXPECT_TRUE(std::filesystem::exists(tmp)) << "read() must not touch a concurrent save's file";
  auto l = EpochHistory::load(*fs, host.data_dir());
  ASSERT_TRUE(l) << l.error().to_string();
  EXPECT_EQ(l->current(), LeaderEpoch(3));
  EXPECT_FALSE(std::filesystem::exists(tmp)) << "recovery removes a save cut short";
}

}  // namespace
}  // namespace sluice::fs_storage::testing
