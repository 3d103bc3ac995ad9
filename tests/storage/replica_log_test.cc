// The replica-log primitives of fs-storage (shard_log.h "Replicated shards";
// docs/replication.md): read_raw -> append_replica
// copies, truncation of a divergent suffix, the high watermark, quorum acks and fencing.
// Completion is observed through callbacks and notifications, never through sleeps.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>

#include "epoch_history.h"
#include "layout.h"
#include "replica_node.h"
#include "shard_replica_log.h"
#include "storage_test_util.h"

namespace sluice::fs_storage::testing {
namespace {

using sluice::testing::TestHost;
using namespace std::chrono_literals;

TEST(ReplicaLogTest, SingleReplicaShardsAreUnchangedAndWriteNoEpochHistory) {
  Node n(0, StreamSpec{});
  EXPECT_FALSE(n.log->replicated());
  ASSERT_TRUE(append_wait(*n.log, batch("a"), AckMode::quorum));  // quorum == leader at RF=1
  EXPECT_EQ(n.log->high_watermark(), Offset(3));
  EXPECT_EQ(n.log->durable_end(), Offset(3));
  EXPECT_EQ(read_all(*n.log).size(), 3u);
  EXPECT_EQ(n.log->become_leader(LeaderEpoch(1)).error().code, Errc::not_supported);
  n.restart();
  EXPECT_EQ(read_all(*n.log).size(), 3u);
  EXPECT_FALSE(std::filesystem::exists(n.shard_dir() + "/" + std::string(kEpochHistoryName)));
  EXPECT_FALSE(std::filesystem::exists(n.shard_dir() + "/" + std::string(kHighWatermarkName)));
}

// Regression (review): waiter handles were numbered per log, and a cancel finds its log by
// stream name: after a delete and recreate, a subscriber's stale cancel of handle 3 dropped
// another subscriber's handle 3 on the new log, which then waited forever.
TEST(ReplicaLogTest, AWaiterHandleOfOneLogNeverCancelsAnothersWaiter) {
  Node a(0, StreamSpec{}), b(0, StreamSpec{});
  std::atomic<bool> fired_a{false}, fired_b{false};
  const auto ha = a.log->notify_when_beyond(Offset(0), [&] { fired_a = true; });
  const auto hb = b.log->notify_when_beyond(Offset(0), [&] { fired_b = true; });
  ASSERT_NE(ha, 0u);
  ASSERT_NE(hb, 0u);
  EXPECT_NE(ha, hb);
  b.log->cancel_notify(ha);  // the old log's handle, cancelled on the new one
  ASSERT_TRUE(append_wait(*b.log, batch("x"), AckMode::leader));
  EXPECT_TRUE(eventually([&] { return fired_b.load(); }));
  EXPECT_FALSE(fired_a.load());
  a.log->cancel_notify(ha);
}

TEST(ReplicaLogTest, ADamagedEpochHistoryRefusesTheOpen) {
  Node n;
  ASSERT_TRUE(n.log->become_leader(LeaderEpoch(2)));
  const std::string path = n.shard_dir() + "/" + std::string(kEpochHistoryName);
  n.log.reset();
  n.engine.reset();
  std::string bytes = slurp(path);
  bytes[bytes.size() - 1] ^= 1;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  FsStorageEngine engine(n.host, n.fs);
  auto s = engine.open_shard(n.ref, n.spec);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, Errc::corrupt_data);
  EXPECT_NE(s.error().message.find("leader-epochs"), std::string::npos) << s.error().message;
}

TEST(ReplicaLogTest, EpochIsDurableBeforeActingAndARestartRefusesOlderEpochs) {
  Node n;
  // Reopened (here: new) replicated shards have no role: client appends are refused.
  auto r0 = append_wait(*n.log, batch("early"));
  ASSERT_FALSE(r0);
  EXPECT_EQ(r0.error().code, Errc::not_leader);

  ASSERT_TRUE(n.log->become_leader(LeaderEpoch(5)));
  append_n(*n.log, "e5-", 2);
  EXPECT_EQ(n.log->leader_epoch(), LeaderEpoch(5));
  ASSERT_EQ(n.log->epoch_entries().size(), 1u);
  EXPECT_EQ(n.log->epoch_entries()[0], (EpochEntry{LeaderEpoch(5), Offset(0)}));
  ASSERT_TRUE(n.log->fence(LeaderEpoch(6)));

  // Power loss right after: only synced bytes survive.
  n.fs->crash(1, CrashOptions{});
  n.restart();
  EXPECT_EQ(n.log->leader_epoch(), LeaderEpoch(6));
  EXPECT_EQ(n.log->epoch_entries().size(), 1u);
  EXPECT_EQ(n.log->durable_end(), Offset(6));
  EXPECT_EQ(n.log->high_watermark(), Offset(0));  // unknown until the manager says
  EXPECT_TRUE(read_all(*n.log).empty());
  auto r1 = append_wait(*n.log, batch("after restart"));
  ASSERT_FALSE(r1);
  EXPECT_EQ(r1.error().code, Errc::not_leader);

  for (auto e : {5, 4}) {
    auto l = n.log->become_leader(LeaderEpoch(e));
    ASSERT_FALSE(l);
    EXPECT_EQ(l.error().code, Errc::fenced);
    auto f = n.log->become_follower(LeaderEpoch(e), NodeId(2));
    ASSERT_FALSE(f);
    EXPECT_EQ(f.error().code, Errc::fenced);
  }
  // Epoch 6 belongs to another leader (this replica was fenced by it).
  EXPECT_EQ(n.log->become_leader(LeaderEpoch(6)).error().code, Errc::fenced);
  ASSERT_TRUE(n.log->become_follower(LeaderEpoch(6), NodeId(2)));
  ASSERT_TRUE(n.log->become_leader(LeaderEpoch(7)));
  auto r2 = append_wait(*n.log, batch("e7"));
  ASSERT_TRUE(r2) << r2.error().to_string();
  EXPECT_EQ(r2->base_offset, Offset(6));
  ASSERT_EQ(n.log->epoch_entries().size(), 2u);
  EXPECT_EQ(n.log->epoch_entries()[1], (EpochEntry{LeaderEpoch(7), Offset(6)}));
  n.restart();
  EXPECT_EQ(n.log->leader_epoch(), LeaderEpoch(7));
  EXPECT_EQ(n.log->become_follower(LeaderEpoch(6), NodeId(2)).error().code, Errc::fenced);
  // It led epoch 7 before the restart: it may neither follow in it nor lead it again (it
  // may have shipped an unsynced tail that the restart lost); the next epoch is fine.
  EXPECT_TRUE(n.log->led_before_reopen(LeaderEpoch(7)));
  EXPECT_EQ(n.log->become_follower(LeaderEpoch(7), NodeId(2)).error().code, Errc::fenced);
  EXPECT_EQ(n.log->become_leader(LeaderEpoch(7)).error().code, Errc::fenced);
  ASSERT_TRUE(n.log->become_leader(LeaderEpoch(8)));
  EXPECT_FALSE(n.log->led_before_reopen(LeaderEpoch(8)));
  ASSERT_TRUE(n.log->become_leader(LeaderEpoch(8)));  // a repeat while leading is fine
  EXPECT_EQ(n.log->epoch_entries().size(), 3u);
}

TEST(ReplicaLogTest, FollowerRefusesClientAppendsNamingTheLeader) {
  Node n;
  ASSERT_TRUE(n.log->become_follower(LeaderEpoch(3), NodeId(42)));
  for (auto ack : {AckMode::none, AckMode::leader, AckMode::quorum}) {
    auto r = append_wait(*n.log, batch("client"), ack);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, Errc::not_leader);
    EXPECT_NE(r.error().message.find("broker 42"), std::string::npos) << r.error().message;
  }
  EXPECT_EQ(n.log->durable_end(), Offset(0));
  EXPECT_FALSE(n.log->stats().leading);
}

// --- the data path ---------------------------------------------------------------------

TEST(ReplicaLogTest, ReadRawToAppendReplicaCopiesTheLogByteForByte) {
  Node leader, follower;
  ASSERT_TRUE(leader.log->become_leader(LeaderEpoch(1)));
  append_n(*leader.log, "e1-", 5);
  ASSERT_TRUE(leader.log->become_leader(LeaderEpoch(3)));  // re-elected in a later epoch
  append_n(*leader.log, "e3-", 6);
  const Offset end = leader.log->durable_end();
  EXPECT_EQ(end, Offset(33));
  // The leader serves beyond its high watermark (followers need the unreplicated data).
  EXPECT_EQ(leader.log->high_watermark(), Offset(0));

  // A chunk never crosses an epoch boundary and starts only at batch boundaries.
  auto c = leader.log->read_raw(Offset(12), 1 << 20);
  ASSERT_TRUE(c) << c.error().to_string();
  EXPECT_EQ(c->next_offset, Offset(15));
  EXPECT_EQ(c->last_epoch, LeaderEpoch(1));
  auto bad = leader.log->read_raw(Offset(13), 1 << 20);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, Errc::invalid_argument);
  EXPECT_EQ(leader.log->read_raw(Offset(34), 100).error().code, Errc::offset_out_of_range);
  auto tail = leader.log->read_raw(end, 100);
  ASSERT_TRUE(tail);
  EXPECT_TRUE(tail->bytes.empty());
  EXPECT_EQ(tail->last_epoch, LeaderEpoch(3));

  ASSERT_TRUE(follower.log->become_follower(LeaderEpoch(3), NodeId(1)));
  std::atomic<int> fired{0};
  const auto h = follower.log->notify_when_end_beyond(Offset(0), [&] { ++fired; });
  EXPECT_NE(h, 0u);
  replicate(*leader.log, *follower.log);
  EXPECT_EQ(fired.load(), 1);
  EXPECT_EQ(follower.log->durable_end(), end);
  EXPECT_EQ(follower.log->epoch_entries(), leader.log->epoch_entries());
  auto lf = segment_files(leader.log_dir());
  EXPECT_GT(lf.size(), 3u);  // the copy rolled segments exactly where the leader did
  EXPECT_EQ(segment_files(follower.log_dir()), lf);

  // Followers show nothing above the high watermark, and never more than they hold.
  EXPECT_TRUE(read_all(*follower.log).empty());
  follower.log->advance_high_watermark(Offset(1000));
  EXPECT_EQ(follower.log->high_watermark(), end);
  EXPECT_EQ(read_all(*follower.log).size(), 33u);

  // Everything survives a restart of the follower, epochs included; the high watermark it
  // closed with is its checkpoint.
  follower.restart();
  EXPECT_EQ(follower.log->durable_end(), end);
  EXPECT_EQ(follower.log->high_watermark(), end);
  EXPECT_EQ(read_all(*follower.log).size(), 33u);
  EXPECT_EQ(follower.log->epoch_entries(), leader.log->epoch_entries());
  EXPECT_EQ(follower.log->leader_epoch(), LeaderEpoch(3));
}

TEST(ReplicaLogTest, AppendReplicaRejectsGapsOverlapsBadCrcAndOtherIncarnations) {
  Node leader, follower, other(kIncarnation + 1);
  ASSERT_TRUE(leader.log->become_leader(LeaderEpoch(1)));
  append_n(*leader.log, "x", 4);
  ASSERT_TRUE(follower.log->become_follower(LeaderEpoch(1), NodeId(1)));
  ASSERT_TRUE(other.log->become_follower(LeaderEpoch(1), NodeId(1)));
  auto first = leader.log->read_raw(Offset(0), 1);  // one batch: [0, 3)
  auto later = leader.log->read_raw(Offset(6), 1);  // one batch: [6, 9)
  ASSERT_TRUE(first && later);
  auto expect = [](Result<void> r, Errc code, const std::string& needle) {
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, code) << r.error().to_string();
    EXPECT_NE(r.error().message.find(needle), std::string::npos) << r.error().message;
  };

  // Gap: the follower ends at 0.
  expect(follower.log->append_replica(later->bytes, Offset(6), LeaderEpoch(1)), Errc::conflict, "6");
  // Claimed to continue the log, but the batch is elsewhere.
  expect(follower.log->append_replica(later->bytes, Offset(0), LeaderEpoch(1)), Errc::conflict,
         "should be at offset 0");
  // Bad CRC.
  std::string corrupt = first->bytes;
  corrupt[corrupt.size() - 5] ^= 0x40;
  expect(follower.log->append_replica(corrupt, Offset(0), LeaderEpoch(1)), Errc::corrupt_data,
         "CRC mismatch");
  // Another incarnation's batch.
  expect(other.log->append_replica(first->bytes, Offset(0), LeaderEpoch(1)), Errc::stale_route,
         "incarnation 7");
  EXPECT_EQ(follower.log->durable_end(), Offset(0));
  EXPECT_EQ(other.log->durable_end(), Offset(0));
  EXPECT_TRUE(follower.log->epoch_entries().empty());  // nothing was recorded for a refusal

  ASSERT_TRUE(follower.log->append_replica(first->bytes, Offset(0), LeaderEpoch(1)));
  // Overlap: the same chunk again.
  expect(follower.log->append_replica(first->bytes, Offset(0), LeaderEpoch(1)), Errc::conflict,
         "ends at 3");
  // A chunk of an epoch this follower has not been told of.
  auto second = leader.log->read_raw(Offset(3), 1);
  ASSERT_TRUE(second);
  expect(follower.log->append_replica(second->bytes, Offset(3), LeaderEpoch(2)), Errc::conflict,
         "epoch 2");
  EXPECT_EQ(follower.log->durable_end(), Offset(3));
  // A leader takes no replicated batches.
  expect(leader.log->append_replica(second->bytes, Offset(12), LeaderEpoch(1)), Errc::conflict,
         "not a follower");
}

// Regression (review): the follower checked its generation, let go of its lock and then
// cut, so a cut decided for the old leader could land after the follower had moved to a
// new epoch and fetched (and reported) records the new leader counted toward its high
// watermark. The log refuses a cut or a restart decided in another epoch.
// `a` leads epoch 1 and writes `batches` batches of 3 records; `f` follows it and copies all.
void lead_and_copy(Node& a, Node& f, int batches) {
  ASSERT_TRUE(a.log->become_leader(LeaderEpoch(1)));
  append_n(*a.log, "e1-", batches);
  ASSERT_TRUE(f.log->become_follower(LeaderEpoch(1), NodeId(1)));
  replicate(*a.log, *f.log);
  ASSERT_EQ(f.log->durable_end(), Offset(3 * batches));
}

TEST(ReplicaLogTest, ACutDecidedInAnEarlierEpochIsRefused) {
  Node a, f;
  ASSERT_NO_FATAL_FAILURE(lead_and_copy(a, f, 10));
  ASSERT_TRUE(f.log->become_follower(LeaderEpoch(2), NodeId(1)));
  auto cut = f.log->truncate_to(Offset(12), LeaderEpoch(1));
  ASSERT_FALSE(cut);
  EXPECT_EQ(cut.error().code, Errc::conflict);
  EXPECT_NE(cut.error().message.find("decided in epoch 1"), std::string::npos) << cut.error().message;
  auto restart = f.log->restart_at(Offset(40), LeaderEpoch(1));
  ASSERT_FALSE(restart);
  EXPECT_EQ(restart.error().code, Errc::conflict);
  EXPECT_EQ(f.log->durable_end(), Offset(30));
  EXPECT_EQ(f.log->log_start(), Offset(0));
  // In its own epoch the same cut is made.
  ASSERT_TRUE(f.log->truncate_to(Offset(12), LeaderEpoch(2)));
  EXPECT_EQ(f.log->durable_end(), Offset(12));
}

// Regression (review): when the epoch history could not be saved after the data was cut,
// the error was returned but the shard went on, its history still naming an epoch that
// began beyond the cut: the next chunks of that epoch were stamped with the previous one.
TEST(ReplicaLogTest, AHistoryThatCannotBeSavedAfterACutFailsTheShard) {
  Node a, f;
  ASSERT_NO_FATAL_FAILURE(lead_and_copy(a, f, 4));
  // f leads epoch 2 briefly and writes its own batches after 12: history (1,0), (2,12).
  ASSERT_TRUE(f.log->become_leader(LeaderEpoch(2)));
  append_n(*f.log, "e2-", 2);
  ASSERT_TRUE(f.log->become_follower(LeaderEpoch(3), NodeId(1)));
  ASSERT_EQ(f.log->epoch_entries().size(), 2u);
  const std::string shard = f.shard_dir();
  f.fs->fail_dir_sync(shard.substr(shard.rfind('/')));  // the history's directory, not log/
  auto cut = f.log->truncate_to(Offset(12), LeaderEpoch(3));
  ASSERT_FALSE(cut);
  EXPECT_EQ(cut.error().code, Errc::storage_failure);
  // Failed until reopened: nothing more is taken on that history.
  auto next = f.log->truncate_to(Offset(100), LeaderEpoch(3));
  ASSERT_FALSE(next) << "the shard went on after its history could not be saved";
  EXPECT_EQ(next.error().code, Errc::storage_failure);
  // Reopened, the history ends where the log does.
  f.restart();
  EXPECT_EQ(f.log->durable_end(), Offset(12));
  ASSERT_EQ(f.log->epoch_entries().size(), 1u);
  EXPECT_EQ(f.log->epoch_entries().back().epoch, LeaderEpoch(1));
}

TEST(ReplicaLogTest, TruncationRemovesOnlyTheDivergentSuffixAndNeverGoesBelowTheHighWatermark) {
  Node a, b, f;
  // Epoch 1 led by a; b copies only its first 6 batches, f copies all 10.
  ASSERT_TRUE(a.log->become_leader(LeaderEpoch(1)));
  append_n(*a.log, "e1-", 10);
  ASSERT_TRUE(b.log->become_follower(LeaderEpoch(1), NodeId(1)));
  ASSERT_TRUE(f.log->become_follower(LeaderEpoch(1), NodeId(1)));
  replicate(*a.log, *b.log, 1, 18);
  replicate(*a.log, *f.log);
  ASSERT_EQ(b.log->durable_end(), Offset(18));
  ASSERT_EQ(f.log->durable_end(), Offset(30));
  f.log->advance_high_watermark(Offset(9));

  // Epoch 2: b leads and writes its own batches after offset 18.
  ASSERT_TRUE(b.log->become_leader(LeaderEpoch(2)));
  append_n(*b.log, "e2-", 4);
  ASSERT_TRUE(f.log->become_follower(LeaderEpoch(2), NodeId(2)));

  // f asks b where its last epoch ends, and cuts there.
  const LeaderEpoch f_last = f.log->epoch_entries().back().epoch;
  auto div = b.log->end_offset_for(f_last);
  ASSERT_TRUE(div);
  EXPECT_EQ(div->epoch, LeaderEpoch(1));
  EXPECT_EQ(div->end, Offset(18));

  // Never below the high watermark (nothing changes).
  auto refused = f.log->truncate_to(Offset(6));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, Errc::conflict);
  EXPECT_NE(refused.error().message.find("high watermark 9"), std::string::npos);
  EXPECT_EQ(f.log->durable_end(), Offset(30));
  // Not on a leader either.
  EXPECT_EQ(b.log->truncate_to(Offset(18)).error().code, Errc::conflict);

  const auto segs_before = segment_files(f.log_dir()).size();
  ASSERT_TRUE(f.log->truncate_to(div->end));
  EXPECT_EQ(f.log->durable_end(), Offset(18));
  // Background verification ignores findings at or above the cut, never below it.
  EXPECT_EQ(f.log->cut_floor(), 18u);
  EXPECT_LT(segment_files(f.log_dir()).size(), segs_before);  // whole segments went
  // Everything below the cut is untouched; nothing above it is left.
  f.log->advance_high_watermark(Offset(18));
  b.log->advance_high_watermark(Offset(100));
  const auto b_all = read_all(*b.log);
  auto f_after = read_all(*f.log);
  ASSERT_EQ(f_after.size(), 18u);
  for (auto& [off, v] : f_after) EXPECT_EQ(b_all.at(off), v) << off;
  EXPECT_EQ(b_all.at(18).substr(0, 6), "e2-0#0");  // what f held at 18 ("e1-6#0") is gone
  EXPECT_EQ(f.log->truncate_to(Offset(100)).ok(), true);  // beyond the end: nothing to do
  EXPECT_EQ(f.log->durable_end(), Offset(18));

  // A cut inside a batch takes the whole batch: here [15, 18) -> end 15 is below hwm 18.
  EXPECT_EQ(f.log->truncate_to(Offset(16)).error().code, Errc::conflict);

  // f catches up from b and then holds b's log exactly, epochs included.
  replicate(*b.log, *f.log);
  EXPECT_EQ(segment_files(f.log_dir()), segment_files(b.log_dir()));
  EXPECT_EQ(f.log->epoch_entries(), b.log->epoch_entries());
  f.restart();
  EXPECT_EQ(f.log->durable_end(), b.log->durable_end());
  EXPECT_EQ(f.log->epoch_entries(), b.log->epoch_entries());
  EXPECT_EQ(f.log->high_watermark(), Offset(18));  // the checkpoint from its close
}

// Regression (review): a truncation across segments removed the later ones, cut and synced
// the segment before them, and only then synced the directory: a power cut in between
// brought the removed segments back behind the shorter one, a gap the open refuses as damage
// ("does not follow the previous segment's end") until storage.repair. A power cut before
// each mutating step of the truncation in turn: every restart opens, holding a prefix of
// the leader's log.
TEST(ReplicaLogTest, APowerCutAtAnyStepOfATruncationLeavesALogThatOpens) {
  bool finished = false;
  for (int step = 0; step < 60 && !finished; ++step) {
    SCOPED_TRACE("a power cut before mutating operation " + std::to_string(step + 1) + " of the truncation");
    Node a, f;
    ASSERT_TRUE(a.log->become_leader(LeaderEpoch(1)));
    append_n(*a.log, "e1-", 10);
    ASSERT_TRUE(f.log->become_follower(LeaderEpoch(1), NodeId(1)));
    replicate(*a.log, *f.log);
    ASSERT_EQ(f.log->durable_end(), Offset(30));
    ASSERT_GT(segment_files(f.log_dir()).size(), 3u);
    f.fs->crash_after(step, static_cast<std::uint64_t>(step) + 1, CrashOptions{false, false, true});
    auto r = f.log->truncate_to(Offset(15));  // inside a segment, with whole segments after it
    if (!f.fs->crashed()) {
      ASSERT_TRUE(r) << r.error().to_string();
      finished = true;
    }
    f.restart();  // the open must succeed
    const auto end = f.log->durable_end();
    EXPECT_TRUE(end == Offset(15) || end == Offset(18) || end == Offset(30)) << end.value();
    auto lf = segment_files(a.log_dir());
    for (auto& [name, bytes] : segment_files(f.log_dir())) {
      ASSERT_TRUE(lf.count(name)) << name;
      ASSERT_LE(bytes.size(), lf[name].size());
      EXPECT_EQ(bytes, lf[name].substr(0, bytes.size())) << name;
    }
  }
  EXPECT_TRUE(finished) << "the truncation has more steps than the test tried";
}

TEST(ReplicaLogTest, TruncationInsideASegmentCutsAtTheBatchAndRebuildsProducerState) {
  Node a, f;
  ASSERT_TRUE(a.log->become_leader(LeaderEpoch(1)));
  for (std::uint64_t seq = 0; seq < 4; ++seq) {
    BatchBuilder bb;
    bb.add(std::nullopt, "p" + std::to_string(seq), {}, 1000);
    bb.set_producer(9, seq);
    ASSERT_TRUE(append_wait(*a.log, bb.finish()));
  }
  ASSERT_TRUE(f.log->become_follower(LeaderEpoch(1), NodeId(1)));
  replicate(*a.log, *f.log);
  ASSERT_EQ(f.log->durable_end(), Offset(4));
  ASSERT_TRUE(f.log->truncate_to(Offset(2)));  // small batches: one segment, cut inside it
  EXPECT_EQ(f.log->durable_end(), Offset(2));
  // f leads now: producer 9's next sequence is 2 (seqs 2 and 3 were cut away).
  ASSERT_TRUE(f.log->become_leader(LeaderEpoch(2)));
  BatchBuilder gap;
  gap.add(std::nullopt, "p4", {}, 1000);
  gap.set_producer(9, 4);
  auto g = append_wait(*f.log, gap.finish());
  ASSERT_FALSE(g);
  EXPECT_EQ(g.error().code, Errc::sequence_gap);
  EXPECT_NE(g.error().message.find("expected sequence 2"), std::string::npos) << g.error().message;
  BatchBuilder dup;
  dup.add(std::nullopt, "p1", {}, 1000);
  dup.set_producer(9, 1);
  f.log->set_in_sync(1, 1);
  auto d = start_append(*f.log, dup.finish(), AckMode::leader);
  f.log->advance_high_watermark(Offset(2));
  auto dr = d.get();
  ASSERT_TRUE(dr) << dr.error().to_string();
  EXPECT_TRUE(dr->duplicate);
  EXPECT_EQ(dr->base_offset, Offset(1));
}

// --- quorum acks, the high watermark, fencing --------------------------------------------

TEST(ReplicaLogTest, QuorumAppendWaitsForTheHighWatermarkAndReadersSeeNothingAboveIt) {
  Node n;
  ASSERT_TRUE(n.log->become_leader(LeaderEpoch(1)));
  n.log->set_in_sync(2, 2);
  auto leader_ack = append_wait(*n.log, batch("leader-ack"), AckMode::leader);  // [0, 3)
  ASSERT_TRUE(leader_ack);  // local fdatasync is enough for ack=leader
  auto q = start_append(*n.log, batch("quorum"), AckMode::quorum);  // [3, 6)
  wait_durable_beyond(*n.log, 5);
  EXPECT_FALSE(q.done());
  EXPECT_TRUE(read_all(*n.log).empty());
  std::atomic<int> woke{0};
  ASSERT_NE(n.log->notify_when_beyond(Offset(3), [&] { ++woke; }), 0u);

  n.log->advance_high_watermark(Offset(3));
  EXPECT_EQ(read_all(*n.log).size(), 3u);
  EXPECT_EQ(woke.load(), 0);
  EXPECT_FALSE(q.done());  // its batch ends at 6
  n.log->advance_high_watermark(Offset(2));  // never backwards
  EXPECT_EQ(n.log->high_watermark(), Offset(3));

  n.log->advance_high_watermark(Offset(6));
  EXPECT_EQ(woke.load(), 1);
  ASSERT_TRUE(q.done());
  auto r = q.get();
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->base_offset, Offset(3));
  EXPECT_EQ(read_all(*n.log).size(), 6u);
  EXPECT_EQ(n.log->high_watermark(), Offset(6));
}

TEST(ReplicaLogTest, QuorumAppendFailsNotEnoughReplicasOnceExpiredBelowMinInsync) {
  Node n;
  ASSERT_TRUE(n.log->become_leader(LeaderEpoch(1)));
  n.log->set_in_sync(1, 2);
  n.log->set_quorum_timeout(100ms);
  auto q = start_append(*n.log, batch("q"), AckMode::quorum);
  wait_durable_beyond(*n.log, 2);
  n.log->advance_high_watermark(Offset(3));  // replicated, but the in-sync set is too small
  EXPECT_FALSE(q.done());
  n.log->expire_quorum_waiters(std::chrono::steady_clock::now() - 1h);  // nothing is due
  EXPECT_FALSE(q.done());
  n.log->expire_quorum_waiters(std::chrono::steady_clock::now() + 1h);
  ASSERT_TRUE(q.done());
  auto r = q.get();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::not_enough_replicas);
  EXPECT_NE(r.error().message.find("min_insync is 2"), std::string::npos) << r.error().message;

  // Enough replicas again: a waiting append completes when the set grows.
  auto q2 = start_append(*n.log, batch("q2"), AckMode::quorum);
  wait_durable_beyond(*n.log, 5);
  n.log->advance_high_watermark(Offset(6));
  EXPECT_FALSE(q2.done());
  n.log->set_in_sync(2, 2);
  ASSERT_TRUE(q2.done());
  EXPECT_TRUE(q2.get());
}

// Regression (review): a retry of an idempotent producer's ack=quorum batch was answered
// "done" once the high watermark passed its original, without the min_insync check its
// original's quorum waiter makes. After an unclean election (in-sync set {leader},
// min_insync 2) the original failed not_enough_replicas and its retry then got a quorum
// ack backed by one copy. The retry now waits for min_insync too, and expires as the
// original did.
TEST(ReplicaLogTest, ARetryOfAQuorumAppendNeedsMinInsyncAsItsOriginalDid) {
  Node n;
  ASSERT_TRUE(n.log->become_leader(LeaderEpoch(1)));
  n.log->set_in_sync(1, 2);
  n.log->set_quorum_timeout(100ms);
  const auto produced = [](std::uint64_t seq) {
    BatchBuilder bb;
    bb.add(std::nullopt, "p" + std::to_string(seq), {}, 1000);
    bb.set_producer(7, seq);
    return bb.finish();
  };
  auto q = start_append(*n.log, produced(0), AckMode::quorum);
  wait_durable_beyond(*n.log, 0);
  n.log->advance_high_watermark(Offset(1));  // the in-sync set is the leader alone
  n.log->expire_quorum_waiters(std::chrono::steady_clock::now() + 1h);
  ASSERT_TRUE(q.done());
  auto r = q.get();
  ASSERT_FALSE(r);
  ASSERT_EQ(r.error().code, Errc::not_enough_replicas);

  // The retry: below the high watermark, and still not acknowledged by a quorum.
  auto retry = start_append(*n.log, produced(0), AckMode::quorum);
  EXPECT_FALSE(retry.done()) << "a quorum ack for a batch the in-sync set cannot acknowledge";
  n.log->expire_quorum_waiters(std::chrono::steady_clock::now() + 1h);
  ASSERT_TRUE(retry.done()) << "a waiting retry expires as a quorum append does";
  auto rr = retry.get();
  ASSERT_FALSE(rr);
  EXPECT_EQ(rr.error().code, Errc::not_enough_replicas);
  EXPECT_EQ(rr.error().outcome, Outcome::uncertain);

  // An ack=leader retry is answered from the high watermark, as before.
  auto leader_retry = start_append(*n.log, produced(0), AckMode::leader);
  auto lr = leader_retry.get();
  ASSERT_TRUE(lr) << lr.error().to_string();
  EXPECT_TRUE(lr->duplicate);

  // Enough replicas again: a waiting quorum retry completes when the set grows.
  auto again = start_append(*n.log, produced(0), AckMode::quorum);
  EXPECT_FALSE(again.done());
  n.log->set_in_sync(2, 2);
  ASSERT_TRUE(again.done());
  auto ar = again.get();
  ASSERT_TRUE(ar) << ar.error().to_string();
  EXPECT_TRUE(ar->duplicate);
  EXPECT_EQ(ar->base_offset, Offset(0));
}

TEST(ReplicaLogTest, DeposedLeaderFailsPendingAndLaterQuorumAppendsWithFenced) {
  Node n;
  ASSERT_TRUE(n.log->become_leader(LeaderEpoch(4)));
  n.log->set_in_sync(2, 2);
  append_n(*n.log, "data", 2);
  auto waiting = start_append(*n.log, batch("waiting"), AckMode::quorum);
  wait_durable_beyond(*n.log, 8);
  ASSERT_TRUE(n.log->fence(LeaderEpoch(5)));
  ASSERT_TRUE(waiting.done());
  auto r = waiting.get();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::fenced);
  EXPECT_NE(r.error().message.find("epoch 4 was deposed by epoch 5"), std::string::npos)
      << r.error().message;
  // Regression (review): it was appended, and a follower may have it and lead next, so its
  // outcome is uncertain (docs/api.md "Ack modes"); "definite" told a client that a retry
  // could not duplicate it.
  EXPECT_EQ(r.error().outcome, Outcome::uncertain);
  // Its high watermark moving (it cannot, without followers; here by hand) acks nothing.
  n.log->advance_high_watermark(Offset(9));
  for (auto ack : {AckMode::quorum, AckMode::leader}) {
    auto later = append_wait(*n.log, batch("later"), ack);
    ASSERT_FALSE(later);
    EXPECT_EQ(later.error().code, Errc::fenced);
    EXPECT_EQ(later.error().outcome, Outcome::definite);  // refused: nothing written
  }
  EXPECT_EQ(n.log->leader_epoch(), LeaderEpoch(5));
  EXPECT_EQ(n.log->fence(LeaderEpoch(3)).error().code, Errc::fenced);
  n.restart();
  EXPECT_EQ(n.log->become_leader(LeaderEpoch(4)).error().code, Errc::fenced);
}

TEST(ReplicaLogTest, DeposedLeaderWithAnEmptyLogFailsAnInFlightQuorumAppend) {
  Node n;
  ASSERT_TRUE(n.log->become_leader(LeaderEpoch(1)));
  n.log->set_in_sync(3, 2);
  // Hold the append between its write and its fdatasync, then depose the leader.
  n.fs->block_syncs();
  auto q = start_append(*n.log, batch("first"), AckMode::quorum);
  ASSERT_TRUE(eventually([&] { return n.fs->blocked_sync_waiters() == 1; }));
  auto fenced = std::async(std::launch::async, [&] { return n.log->fence(LeaderEpoch(2)); });
  // fence refuses in memory first, then waits for its own history fsync.
  ASSERT_TRUE(eventually([&] { return n.fs->blocked_sync_waiters() == 2; }));
  EXPECT_FALSE(q.done());
  n.fs->unblock_syncs();
  ASSERT_TRUE(fenced.get());
  auto r = q.get();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::fenced);
  EXPECT_NE(r.error().message.find("epoch 1 was deposed by epoch 2"), std::string::npos);
  EXPECT_EQ(r.error().outcome, Outcome::uncertain);  // written, then fenced in flight
  n.log->advance_high_watermark(Offset(3));

  // And with nothing in flight at all: the check is on the epoch, not on data.
  Node empty;
  ASSERT_TRUE(empty.log->become_leader(LeaderEpoch(1)));
  ASSERT_TRUE(empty.log->fence(LeaderEpoch(2)));
  auto e = append_wait(*empty.log, batch("x"), AckMode::quorum);
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().code, Errc::fenced);
  EXPECT_EQ(e.error().outcome, Outcome::definite);
  EXPECT_EQ(empty.log->durable_end(), Offset(0));
}

// Seed pulsar-fenced-empty-ledger-loss, the exact case: a replica that never held a record
// is fenced (or told to follow) in a newer epoch, and the power goes. Its epoch must come
// back from the disk, empty log or not: a fresh process that forgot it would take a write
// from the deposed leader's epoch. fence and become_follower save an epoch history with no
// entries (no data), and the reopen reads it.
TEST(ReplicaLogTest, AnEmptyLogFencedOrFollowingKeepsItsEpochAcrossAPowerCut) {
  for (const bool follow : {false, true}) {
    SCOPED_TRACE(follow ? "become_follower" : "fence");
    Node n;
    ASSERT_EQ(n.log->durable_end(), Offset(0));
    if (follow)
      ASSERT_TRUE(n.log->become_follower(LeaderEpoch(3), NodeId(2)));
    else
      ASSERT_TRUE(n.log->fence(LeaderEpoch(3)));
    n.fs->crash(1, CrashOptions{});  // only synced bytes (and synced directory entries) survive
    n.restart();
    EXPECT_EQ(n.log->leader_epoch(), LeaderEpoch(3));
    EXPECT_TRUE(n.log->epoch_entries().empty());
    for (auto e : {1, 2}) {
      auto l = n.log->become_leader(LeaderEpoch(e));
      ASSERT_FALSE(l) << "led epoch " << e << " after the restart";
      EXPECT_EQ(l.error().code, Errc::fenced);
      auto f = n.log->become_follower(LeaderEpoch(e), NodeId(1));
      ASSERT_FALSE(f);
      EXPECT_EQ(f.error().code, Errc::fenced);
    }
    auto a = append_wait(*n.log, batch("deposed"), AckMode::quorum);
    ASSERT_FALSE(a);
    EXPECT_EQ(n.log->durable_end(), Offset(0));
  }
}

TEST(ReplicaLogTest, FencingByItsOwnEpochStopsALeader) {
  Node n;
  ASSERT_TRUE(n.log->become_leader(LeaderEpoch(3)));
  auto q = start_append(*n.log, batch("q"), AckMode::quorum);
  wait_durable_beyond(*n.log, 2);
  ASSERT_TRUE(n.log->fence(LeaderEpoch(3)));  // the catalog left the shard leaderless
  auto r = q.get();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::fenced);
  EXPECT_EQ(append_wait(*n.log, batch("later")).error().code, Errc::fenced);
  EXPECT_EQ(n.log->leader_epoch(), LeaderEpoch(3));
  EXPECT_EQ(n.log->become_leader(LeaderEpoch(3)).error().code, Errc::fenced);
  ASSERT_TRUE(n.log->fence(LeaderEpoch(3)));  // again: nothing to do
  ASSERT_TRUE(n.log->become_leader(LeaderEpoch(4)));
}

// Regression (review): closing a replicated shard took the group ops' mutex (to write its
// checkpoint) before it closed the data log. A dead-letter replay holds that mutex while
// its record waits for the data log's quorum, and once the replication manager has let go
// of the shard nothing expires that wait: close (a delete, a shutdown) hung for ever.
TEST(ReplicaLogTest, ClosingAShardEndsAReplayWaitingForItsQuorum) {
  Node n;
  ASSERT_TRUE(n.log->become_leader(LeaderEpoch(1)));
  GroupOps* ops = n.log->group_ops();
  ASSERT_NE(ops, nullptr);
  ASSERT_TRUE(ops->log()->become_leader(LeaderEpoch(1)));
  ops->log()->set_in_sync(1, 1);
  n.log->set_in_sync(1, 1);
  // The manager's part, by hand: the high watermarks follow the leader's durable ends; the
  // data log's stops following once `hold_data` is set.
  std::atomic<bool> stop{false}, hold_data{false};
  std::thread manager([&] {
    while (!stop.load()) {
      ops->log()->advance_high_watermark(ops->log()->durable_end());
      if (!hold_data.load()) n.log->advance_high_watermark(n.log->durable_end());
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  append_n(*n.log, "data", 1);  // offsets 0..2
  GroupOptions o;
  o.max_deliveries = 1;
  auto d = n.log->group_fetch("g", 10, o);
  ASSERT_TRUE(d) << d.error().to_string();
  ASSERT_EQ(d->records.size(), 3u);
  ASSERT_TRUE(n.log->group_nack("g", {Offset(0)}));
  auto again = n.log->group_fetch("g", 10, o);  // offset 0 would exceed max_deliveries
  ASSERT_TRUE(again) << again.error().to_string();
  EXPECT_TRUE(again->records.empty());

  hold_data = true;  // the replay's record now waits for a quorum that never comes
  auto replayed = std::make_shared<std::promise<Result<std::uint64_t>>>();
  auto replay_done = replayed->get_future();
  std::thread([log = n.log, replayed] { replayed->set_value(log->replay_dead_letters("g", Offset(0), Offset(1))); })
      .detach();
  wait_durable_beyond(*n.log, 3);  // the replayed copy is written at offset 3
  auto closed = std::make_shared<std::promise<void>>();
  auto close_done = closed->get_future();
  std::thread([engine = n.engine.get(), ref = n.ref, closed] {
    engine->close_shard(ref);
    closed->set_value();
  }).detach();
  const bool ended = close_done.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  stop = true;
  manager.join();
  ASSERT_TRUE(ended) << "closing the shard waited for a replay that waited for the closed shard";
  ASSERT_EQ(replay_done.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  EXPECT_FALSE(replay_done.get()) << "the replay was not acknowledged";
}

TEST(ReplicaLogTest, BecomingFollowerFailsTheFormerLeadersQuorumAppends) {
  Node n;
  ASSERT_TRUE(n.log->become_leader(LeaderEpoch(1)));
  auto q = start_append(*n.log, batch("q"), AckMode::quorum);
  wait_durable_beyond(*n.log, 2);
  ASSERT_TRUE(n.log->become_follower(LeaderEpoch(2), NodeId(3)));
  auto r = q.get();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::fenced);
  EXPECT_EQ(n.log->leader(), NodeId(3));
}

// The manager's loop, concurrently with client appends: the follower long-polls the
// leader's durable end, copies, and the leader's high watermark follows the follower.
TEST(ReplicaLogTest, ConcurrentAppendsAndReplicationAcknowledgeEveryQuorumAppend) {
  Node leader, follower;
  ASSERT_TRUE(leader.log->become_leader(LeaderEpoch(1)));
  ASSERT_TRUE(follower.log->become_follower(LeaderEpoch(1), NodeId(1)));
  leader.log->set_in_sync(2, 2);
  constexpr int kAppends = 200;
  std::vector<Pending> pending;
  pending.reserve(kAppends);
  std::atomic<bool> stop{false}, broken{false};
  std::thread manager([&] {
    while (!stop.load()) {
      const std::uint64_t at = follower.log->durable_end().value();
      auto p = std::make_shared<std::promise<void>>();
      auto f = p->get_future();
      const auto h = leader.log->notify_when_end_beyond(Offset(at), [p] { p->set_value(); });
      if (f.wait_for(20ms) != std::future_status::ready) {
        leader.log->cancel_end_notify(h);
        continue;
      }
      auto c = leader.log->read_raw(Offset(at), 4096);
      auto r = c ? follower.log->append_replica(c->bytes, Offset(at), c->last_epoch)
                 : Result<void>(c.error());
      if (!r) {
        ADD_FAILURE() << r.error().to_string();
        broken = true;
        return;
      }
      leader.log->advance_high_watermark(follower.log->durable_end());
    }
  });
  for (int i = 0; i < kAppends; ++i)
    pending.push_back(start_append(*leader.log, batch("c" + std::to_string(i), 1 + i % 3),
                                   i % 4 == 0 ? AckMode::leader : AckMode::quorum));
  std::uint64_t end = 0;
  for (auto& p : pending) {
    if (!eventually([&] { return p.done() || broken.load(); }) || broken) break;
    auto r = p.get();
    EXPECT_TRUE(r) << r.error().to_string();
    if (r) end = std::max<std::uint64_t>(end, r->base_offset.value() + r->count);
  }
  EXPECT_TRUE(eventually([&] { return leader.log->high_watermark().value() == end || broken; }));
  stop = true;
  manager.join();
  ASSERT_FALSE(broken);
  EXPECT_EQ(follower.log->durable_end(), Offset(end));
  EXPECT_EQ(segment_files(follower.log_dir()), segment_files(leader.log_dir()));
  EXPECT_EQ(read_all(*leader.log).size(), end);
}

// The ReplicaManager drives the shard log through the ReplicaLog seam.
TEST(ReplicaLogTest, ShardReplicaLogServesTheReplicaManagerSeam) {
  Node a, b;
  std::shared_ptr<ReplicaLog> leader = std::make_shared<ShardReplicaLog>(a.log);
  std::shared_ptr<ReplicaLog> follower = std::make_shared<ShardReplicaLog>(b.log);
  EXPECT_EQ(leader->ref(), a.ref);
  ASSERT_TRUE(leader->become_leader(LeaderEpoch(2)));
  ASSERT_TRUE(follower->become_follower(LeaderEpoch(2), NodeId(1)));
  EXPECT_EQ(follower->last_data_epoch(), LeaderEpoch(0));
  append_n(*a.log, "s", 3);
  EXPECT_EQ(leader->last_data_epoch(), LeaderEpoch(2));
  EXPECT_EQ(leader->log_start(), Offset(0));
  while (follower->durable_end() < leader->durable_end()) {
    auto c = leader->read_raw(follower->durable_end(), 1);
    ASSERT_TRUE(c) << c.error().to_string();
    EXPECT_EQ(c->epoch, LeaderEpoch(2));
    ASSERT_TRUE(follower->append_replica(c->bytes, follower->durable_end(), c->epoch, LeaderEpoch(2)));
    EXPECT_EQ(follower->durable_end(), c->next);
  }
  EXPECT_EQ(follower->last_data_epoch(), LeaderEpoch(2));
  auto end = leader->end_offset_for(LeaderEpoch(2));
  ASSERT_TRUE(end);
  EXPECT_EQ(end->end, Offset(9));
  leader->advance_high_watermark(follower->durable_end());
  EXPECT_EQ(leader->high_watermark(), Offset(9));
  ASSERT_TRUE(leader->fence(LeaderEpoch(3)));
  EXPECT_EQ(leader->leader_epoch(), LeaderEpoch(3));
  EXPECT_EQ(segment_files(b.log_dir()), segment_files(a.log_dir()));
}

// --- crashes -----------------------------------------------------------------------------

TEST(ReplicaLogTest, CrashAfterAppendReplicaKeepsEverythingReportedDurable) {
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Node leader, f;
    ASSERT_TRUE(leader.log->become_leader(LeaderEpoch(1)));
    append_n(*leader.log, "a", 3);
    ASSERT_TRUE(leader.log->become_leader(LeaderEpoch(2)));
    append_n(*leader.log, "b", 4);
    ASSERT_TRUE(f.log->become_follower(LeaderEpoch(2), NodeId(1)));
    replicate(*leader.log, *f.log, 1, 9 + 3 * (seed % 3));
    const Offset durable = f.log->durable_end();
    const auto entries = f.log->epoch_entries();

    // A chunk that is written but whose fdatasync never happens.
    auto next = leader.log->read_raw(durable, 1 << 20);
    ASSERT_TRUE(next);
    ASSERT_FALSE(next->bytes.empty());
    f.fs->block_syncs();
    auto pending = std::async(std::launch::async, [&] {
      return f.log->append_replica(next->bytes, durable, next->last_epoch);
    });
    ASSERT_TRUE(eventually([&] { return f.fs->blocked_sync_waiters() == 1; }));
    f.fs->crash(seed, CrashOptions{seed % 2 == 0, seed % 3 == 0});
    f.fs->unblock_syncs();
    auto pr = pending.get();
    ASSERT_FALSE(pr);  // never reported durable
    f.restart();
    EXPECT_GE(f.log->durable_end(), durable);
    // What it holds is a prefix of the leader's log, byte for byte.
    auto lf = segment_files(leader.log_dir());
    for (auto& [name, bytes] : segment_files(f.log_dir())) {
      ASSERT_TRUE(lf.count(name)) << name;
      ASSERT_LE(bytes.size(), lf[name].size());
      EXPECT_EQ(bytes, lf[name].substr(0, bytes.size())) << name;
    }
    // The epoch history is at least what it was (a new epoch would have been durable first).
    auto now = f.log->epoch_entries();
    ASSERT_GE(now.size(), entries.size());
    EXPECT_TRUE(std::equal(entries.begin(), entries.end(), now.begin()));
    // It continues where it stands.
    ASSERT_TRUE(f.log->become_follower(LeaderEpoch(2), NodeId(1)));
    replicate(*leader.log, *f.log);
    EXPECT_EQ(segment_files(f.log_dir()), lf);
    EXPECT_EQ(f.log->epoch_entries(), leader.log->epoch_entries());
  }
}

}  // namespace
}  // namespace sluice::fs_storage::testing
