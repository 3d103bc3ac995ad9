// Regressions from a review of the follower path: ways a replica could keep records its
// leader does not hold below the high watermark, or stop following for ever.
// (docs/replication.md "Truncation"; seed kafka-15495 and KIP-279 in the design.)
#include <gtest/gtest.h>

#include <chrono>
#include <future>

#include "epoch_history.h"
#include "replica_node.h"
#include "storage_test_util.h"

namespace sluice::fs_storage::testing {
namespace {

using namespace std::chrono_literals;

// A deposed leader's flusher kept writing what it had accepted in its epoch after
// become_follower returned. The follower loop then asked where the new leader's history
// diverges and cut from the log end it saw; a batch landing after that stayed, unseen,
// under the new leader's data. The role change now returns only once those batches are on
// disk, so the cut sees them.
TEST(ReplicaDivergenceTest, ADeposedLeadersQueuedBatchesAreOnDiskBeforeItFollows) {
  Node n;
  ASSERT_TRUE(n.log->become_leader(LeaderEpoch(1)));
  n.log->set_in_sync(1, 1);
  append_n(*n.log, "before", 1);  // [0, 3)
  // Hold the segment's next sync (not the epoch history's): A is written and waits for its
  // sync, B queues behind it.
  n.fs->block_syncs("/log/");
  auto a = start_append(*n.log, batch("a"), AckMode::leader);  // [3, 6)
  ASSERT_TRUE(eventually([&] { return n.fs->blocked_sync_waiters() == 1; }));
  auto b = start_append(*n.log, batch("b"), AckMode::leader);  // [6, 9), queued
  auto follow = std::async(std::launch::async, [&] { return n.log->become_follower(LeaderEpoch(2), NodeId(2)); });
  // Declared after the futures so a failed assertion unblocks before their destructors wait.
  UnblockSyncsOnExit unblock{*n.fs};
  // Its new epoch reaches the history file (not blocked) ... read() beside the log's own
  // saves: load() would remove the .tmp a save is about to rename.
  ASSERT_TRUE(eventually([&] {
    auto h = EpochHistory::read(*n.fs, n.shard_dir());
    return h && h->current() == LeaderEpoch(2);
  }));
  // ... but it does not return while the deposed epoch's batches are still to be written.
  // (Without the fix it returned at once: nothing else it waits for is blocked.)
  EXPECT_EQ(follow.wait_for(300ms), std::future_status::timeout)
      << "become_follower returned with the deposed leader's batches still queued";
  n.fs->unblock_syncs();
  ASSERT_TRUE(follow.get());
  EXPECT_EQ(n.log->durable_end(), Offset(9)) << "what it accepted as leader is all on disk";
  EXPECT_TRUE(a.get());  // ack=leader: acknowledged once on its disk
  EXPECT_TRUE(b.get());
}

// A chunk fetched from the old leader, appended after the follower moved to a new epoch
// (and after that epoch's truncation ran), could sit under the new leader's data.
TEST(ReplicaDivergenceTest, AChunkFetchedInAnEarlierEpochIsRefused) {
  Node leader, follower;
  ASSERT_TRUE(leader.log->become_leader(LeaderEpoch(1)));
  leader.log->set_in_sync(2, 2);
  ASSERT_TRUE(follower.log->become_follower(LeaderEpoch(1), NodeId(1)));
  append_n(*leader.log, "e1", 2);  // [0, 6)
  auto chunk = leader.log->read_raw(Offset(0), 1 << 20);
  ASSERT_TRUE(chunk) << chunk.error().to_string();
  // The follower moves on to epoch 2 (another leader) before the fetched chunk is written.
  ASSERT_TRUE(follower.log->become_follower(LeaderEpoch(2), NodeId(3)));
  auto r = follower.log->append_replica(chunk->bytes, Offset(0), chunk->last_epoch, LeaderEpoch(1));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::conflict);
  EXPECT_NE(r.error().message.find("fetched in epoch 1"), std::string::npos) << r.error().message;
  EXPECT_EQ(follower.log->durable_end(), Offset(0));
  // Fetched in the current epoch, the same bytes are taken (the leader of epoch 2 kept them).
  ASSERT_TRUE(follower.log->append_replica(chunk->bytes, Offset(0), chunk->last_epoch, LeaderEpoch(2)));
  EXPECT_EQ(follower.log->durable_end(), Offset(6));
}

// A replica that led an epoch without writing anything has a history entry at its log end
// with no data under it. When the next leader's log goes on there in an earlier epoch (it
// kept what it wrote before), every chunk was refused ("truncate first") and truncation cut
// nothing: the follower was stuck for ever and, in the in-sync set, held the high watermark.
TEST(ReplicaDivergenceTest, AnEpochLedWithoutDataDoesNotBlockTheNextLeadersEarlierData) {
  Node a, b;
  // Epoch 4: a leads and writes [0, 6); b has it all.
  ASSERT_TRUE(a.log->become_leader(LeaderEpoch(4)));
  a.log->set_in_sync(2, 2);
  ASSERT_TRUE(b.log->become_follower(LeaderEpoch(4), NodeId(1)));
  append_n(*a.log, "e4", 2);
  replicate(*a.log, *b.log);
  // a writes [6, 9) in epoch 4, which b never fetches.
  append_n(*a.log, "e4-tail", 1);
  // Epoch 5: b leads and writes nothing. Epoch 6: a leads again, keeping [6, 9).
  ASSERT_TRUE(b.log->become_leader(LeaderEpoch(5)));
  ASSERT_TRUE(a.log->become_follower(LeaderEpoch(5), NodeId(2)));
  ASSERT_TRUE(a.log->become_leader(LeaderEpoch(6)));
  ASSERT_TRUE(b.log->become_follower(LeaderEpoch(6), NodeId(1)));
  // b follows: its last data epoch is 4, which ends at 9 on a: nothing to cut.
  ASSERT_EQ(b.log->last_data_epoch(), LeaderEpoch(4));
  auto end = a.log->end_offset_for(LeaderEpoch(4));
  ASSERT_TRUE(end);
  EXPECT_EQ(end->end, Offset(9));
  ASSERT_EQ(b.log->durable_end(), Offset(6));
  // The fetch at 6 answers a chunk of epoch 4, which b now takes.
  auto c = a.log->read_raw(Offset(6), 1 << 20);
  ASSERT_TRUE(c) << c.error().to_string();
  ASSERT_EQ(c->last_epoch, LeaderEpoch(4));
  auto r = b.log->append_replica(c->bytes, Offset(6), c->last_epoch, LeaderEpoch(6));
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(b.log->durable_end(), Offset(9));
  // Its history no longer claims an epoch 5 it holds no data of; after a restart too.
  EXPECT_EQ(b.log->last_data_epoch(), LeaderEpoch(4));
  auto h = EpochHistory::read(*b.fs, b.shard_dir());
  ASSERT_TRUE(h) << h.error().to_string();
  for (const auto& e : h->entries()) EXPECT_NE(e.epoch, LeaderEpoch(5));
  b.restart();
  EXPECT_EQ(b.log->durable_end(), Offset(9));
}

}  // namespace
}  // namespace sluice::fs_storage::testing
