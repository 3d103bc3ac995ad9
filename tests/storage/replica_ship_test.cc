// A leader ships what it has written before its own fdatasync is done, so its sync and its
// followers' overlap (docs/replication.md "Shipping before the leader's sync"). These tests
// pin the two rules that make that safe: nothing is acknowledged before the leader's own
// sync, and a restarted leader never continues its epoch (a power cut may have taken a
// shipped tail from its disk but not from its followers').
#include <gtest/gtest.h>

#include "replica_node.h"
#include "storage_test_util.h"

namespace sluice::fs_storage::testing {
namespace {

using namespace std::chrono_literals;

constexpr NodeId kLeader{1};

struct Pair {
  Node leader, follower;
  Pair() {
    EXPECT_TRUE(leader.log->become_leader(LeaderEpoch(1)));
    EXPECT_TRUE(follower.log->become_follower(LeaderEpoch(1), kLeader));
    leader.log->set_in_sync(2, 2);
    // [0, 9), durable on the leader: segments at 0 and 6, so the next batch needs no roll.
    append_n(*leader.log, "synced", 3);
    replicate(*leader.log, *follower.log);
    leader.log->advance_high_watermark(follower.log->durable_end());
  }
  ~Pair() { leader.fs->unblock_syncs(); }  // a failed assertion must not leave a flush held
  // Holds the leader's next sync and appends one quorum batch: written, not synced.
  Pending append_unsynced(const std::string& tag) {
    leader.fs->block_syncs();
    auto q = start_append(*leader.log, batch(tag), AckMode::quorum);
    EXPECT_TRUE(eventually([&] { return leader.fs->blocked_sync_waiters() == 1; }));
    return q;
  }
  // What the follower fetches at its log end, as the manager would (read_raw + append).
  void ship() {
    const Offset at = follower.log->durable_end();
    auto c = leader.log->read_raw(at, 1 << 20);
    ASSERT_TRUE(c) << c.error().to_string();
    ASSERT_FALSE(c->bytes.empty()) << "nothing beyond " << at.value();
    ASSERT_TRUE(follower.log->append_replica(c->bytes, at, c->last_epoch));
  }
};

TEST(ReplicaShipTest, ALeaderShipsItsUnsyncedTailButAcknowledgesOnlyAfterItsOwnSync) {
  Pair p;
  ASSERT_EQ(p.leader.log->high_watermark(), Offset(9));
  auto q = p.append_unsynced("tail");
  EXPECT_EQ(p.leader.log->durable_end(), Offset(9));
  EXPECT_EQ(p.leader.log->written_end(), Offset(12));
  p.ship();
  EXPECT_EQ(p.follower.log->durable_end(), Offset(12));
  // The follower has it on disk; the leader does not yet: nothing is acknowledged.
  p.leader.log->advance_high_watermark(p.follower.log->durable_end());
  EXPECT_EQ(p.leader.log->high_watermark(), Offset(9));
  EXPECT_FALSE(q.done());
  // The leader's own sync finishes: the high watermark moves to what the follower
  // reported, with no further word from it, and the append is acknowledged.
  p.leader.fs->unblock_syncs();
  auto r = q.get();
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->base_offset, Offset(9));
  EXPECT_EQ(p.leader.log->high_watermark(), Offset(12));
}

TEST(ReplicaShipTest, ARestartedLeaderNeedsANewEpochAndItsFollowerCutsTheTailItLost) {
  Pair p;
  auto q = p.append_unsynced("lost");
  p.ship();  // the follower syncs [9, 12), which the leader never will
  ASSERT_EQ(p.follower.log->durable_end(), Offset(12));
  // Power cut on the leader: its unsynced tail is gone; the held sync then fails.
  p.leader.fs->crash(1, CrashOptions{});
  p.leader.fs->unblock_syncs();
  auto r = q.get();
  ASSERT_FALSE(r);  // never acknowledged
  p.leader.restart();
  ASSERT_EQ(p.leader.log->durable_end(), Offset(9));

  // It led epoch 1 before the restart: leading it again would write other records at
  // [9, 12) in the same epoch as the follower's copy, and the epoch history could not tell.
  EXPECT_TRUE(p.leader.log->led_before_reopen(LeaderEpoch(1)));
  auto again = p.leader.log->become_leader(LeaderEpoch(1));
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, Errc::fenced);
  EXPECT_NE(again.error().message.find("needs a new epoch"), std::string::npos)
      << again.error().message;

  // The catalog raised the epoch (the replication manager asks for it): the leader writes
  // other records at 9 in epoch 2.
  ASSERT_TRUE(p.leader.log->become_leader(LeaderEpoch(2)));
  p.leader.log->set_in_sync(1, 1);
  append_n(*p.leader.log, "new", 1);
  // The follower, told of epoch 2, asks where its last epoch ends (KIP-279) and cuts there.
  ASSERT_TRUE(p.follower.log->become_follower(LeaderEpoch(2), kLeader));
  auto end = p.leader.log->end_offset_for(p.follower.log->last_data_epoch());
  ASSERT_TRUE(end);
  EXPECT_EQ(end->epoch, LeaderEpoch(1));
  EXPECT_EQ(end->end, Offset(9));
  ASSERT_TRUE(p.follower.log->truncate_to(end->end));
  EXPECT_EQ(p.follower.log->durable_end(), Offset(9));
  replicate(*p.leader.log, *p.follower.log);
  // Both logs are now the same, byte for byte.
  auto a = p.leader.log->read_raw(Offset(0), 1 << 20);
  auto b = p.follower.log->read_raw(Offset(0), 1 << 20);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->bytes, b->bytes);
  auto a2 = p.leader.log->read_raw(Offset(9), 1 << 20);
  auto b2 = p.follower.log->read_raw(Offset(9), 1 << 20);
  ASSERT_TRUE(a2 && b2);
  EXPECT_EQ(a2->bytes, b2->bytes);
  EXPECT_EQ(a2->last_epoch, LeaderEpoch(2));
  EXPECT_EQ(b2->last_epoch, LeaderEpoch(2));
}

}  // namespace
}  // namespace sluice::fs_storage::testing
