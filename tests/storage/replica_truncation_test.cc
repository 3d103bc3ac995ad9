// Follower truncation (replica_manager.h, docs/replication.md "Truncation") against the
// model log: a follower cuts only the divergent suffix, never below its high watermark, and
// stops instead of diverging from a leader that lacks its committed records.
#include <gtest/gtest.h>

#include "replica_cluster.h"
#include "replica_manager.h"

namespace sluice::fs_storage::replica_test {
namespace {

TEST(ReplicaManager, AFollowerTruncatesOnlyTheDivergentSuffix) {
  Cluster c(2);
  // The leader wrote 0..9 in epoch 1 and 10..12 in epoch 3; the follower holds 0..9 and an
  // unacknowledged 10..14 of epoch 1.
  c.logs_[1]->put_entries(LeaderEpoch{1}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  c.logs_[1]->put_entries(LeaderEpoch{3}, {30, 31, 32});
  c.logs_[2]->put_entries(LeaderEpoch{1}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 90, 91, 92, 93, 94});
  c.logs_[2]->set_hwm(Offset{5});
  c.set_catalog([](ReplicaAssignment& a) { a.leader_epoch = LeaderEpoch{3}; });
  c.tell();
  ASSERT_TRUE(eventually([&] { return c.logs_[2]->entries() == c.logs_[1]->entries(); }));
  EXPECT_EQ(c.logs_[2]->truncations(), 1);
}

// An unclean leader that lost data: its history ends epoch 1 at 3 (then 40 in epoch 4).
// The follower holds 0..9 of epoch 1 with its high watermark at 8; once it has asked, it
// holds (and has cut nothing).
void follow_a_leader_lacking_committed_records(Cluster& c) {
  c.logs_[1]->put_entries(LeaderEpoch{1}, {0, 1, 2});
  c.logs_[1]->put_entries(LeaderEpoch{4}, {40});
  c.logs_[2]->put_entries(LeaderEpoch{1}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  c.logs_[2]->set_hwm(Offset{8});
  c.set_catalog([](ReplicaAssignment& a) { a.leader_epoch = LeaderEpoch{4}; });
  c.tell();
  ASSERT_TRUE(eventually([&] { return c.managers_[2]->counters().diverged_holds >= 1; }));
}

// Regression (review): the hold cut [high watermark, end) before holding. The follower's
// high watermark lags the old leader's by a fetch round (after a crash it is the
// close-time checkpoint), so the cut could drop committed records, the evidence of what
// the unclean election lost. A held follower cuts nothing.
TEST(ReplicaManager, AHeldFollowerKeepsEvenTheRecordsAboveItsHighWatermark) {
  Cluster c(2);
  ASSERT_NO_FATAL_FAILURE(follow_a_leader_lacking_committed_records(c));
  const auto holds = c.managers_[2]->counters().diverged_holds;
  ASSERT_TRUE(eventually([&] { return c.managers_[2]->counters().diverged_holds >= holds + 2; }));
  EXPECT_EQ(c.logs_[2]->truncations(), 0u);
  EXPECT_EQ(c.logs_[2]->durable_end(), Offset{10});
  auto e = c.logs_[2]->entries();
  ASSERT_EQ(e.size(), 10u);
  for (std::uint64_t i = 0; i < 10; ++i) EXPECT_EQ(e[i].second, i);
}

TEST(ReplicaManager, AFollowerNeverTruncatesBelowItsHighWatermark) {
  Cluster c(2);
  ASSERT_NO_FATAL_FAILURE(follow_a_leader_lacking_committed_records(c));  // it keeps everything below 8
  EXPECT_TRUE(eventually([&] { return c.logs_[2]->durable_end() >= Offset{8}; }));
  auto e = c.logs_[2]->entries();
  ASSERT_GE(e.size(), 8u);
  for (std::uint64_t i = 0; i < 8; ++i) EXPECT_EQ(e[i].second, i);
}

// Regression (review): a follower whose leader lacks records below the follower's high
// watermark (an unclean election: the elected broker was behind) held its cut at the
// high watermark, then went on fetching. Once the leader's log passed the follower's end
// it appended the leader's records after its own: the two logs held different records at
// the same offsets, below both high watermarks, and the follower could rejoin the in-sync
// set and lead. It now keeps its records and does not follow that leader.
TEST(ReplicaManager, AFollowerWhoseLeaderLacksItsCommittedRecordsStopsInsteadOfDiverging) {
  Cluster c(2);
  ASSERT_NO_FATAL_FAILURE(follow_a_leader_lacking_committed_records(c));
  // The leader writes on, past the follower's end.
  c.logs_[1]->put_entries(LeaderEpoch{4}, {41, 42, 43, 44, 45, 46, 47, 48, 49, 50});
  const auto holds = c.managers_[2]->counters().diverged_holds;
  ASSERT_TRUE(eventually([&] {
    return c.managers_[2]->counters().diverged_holds >= holds + 5 || c.logs_[2]->durable_end() > Offset{8};
  }));
  EXPECT_EQ(c.logs_[2]->durable_end(), Offset{10}) << "it appended the leader's records after its own";
  auto e = c.logs_[2]->entries();
  for (std::uint64_t i = 0; i < e.size(); ++i) EXPECT_EQ(e[i].second, i) << "offset " << i;
  EXPECT_EQ(c.managers_[2]->counters().chunks_appended, 0u);
}

// Regression (review): when the leader answered an epoch this follower never held, the
// follower cut to its own high watermark, which may lag the leader's: committed records
// were cut from a replica that could be elected before fetching them again. KIP-279: cut to
// where its own largest epoch below the answer ends, and ask again with that epoch.
TEST(ReplicaManager, AFollowerWithoutTheLeadersEpochAsksAgainInsteadOfCuttingToItsHighWatermark) {
  Cluster c(2);
  // Epoch 2 (the leader's) and epoch 3 (the follower's, as a short-lived leader) both wrote
  // at 3 and diverge there; epoch 1's [0, 3) is shared.
  c.logs_[1]->put_entries(LeaderEpoch{1}, {0, 1, 2});
  c.logs_[1]->put_entries(LeaderEpoch{2}, {20, 21, 22});
  c.logs_[1]->put_entries(LeaderEpoch{6}, {60});
  c.logs_[2]->put_entries(LeaderEpoch{1}, {0, 1, 2});
  c.logs_[2]->put_entries(LeaderEpoch{3}, {30, 31, 32, 33, 34});
  c.logs_[2]->set_hwm(Offset{1});  // behind the leader's
  c.set_catalog([](ReplicaAssignment& a) { a.leader_epoch = LeaderEpoch{6}; });
  c.tell();
  ASSERT_TRUE(eventually([&] { return c.logs_[2]->entries() == c.logs_[1]->entries(); }));
  EXPECT_EQ(c.logs_[2]->lowest_cut(), Offset{3}) << "cut below the end of the epoch both logs share";
}

}  // namespace
}  // namespace sluice::fs_storage::replica_test
