// Where a replicated shard's log starts (shard_log_start.cc, log_restart.h;
// docs/replication.md "Below the leader's log start"): retention never passes the high
// watermark, and a follower whose whole log lies below its leader's log start drops it and
// starts over there (restart_at), durably and crash-safely.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "log_restart.h"
#include "replica_node.h"
#include "shard_replica_log.h"
#include "sluice/record_batch.h"
#include "storage_test_util.h"

namespace sluice::fs_storage::testing {
namespace {

StreamSpec with_retention(std::int64_t max_bytes) {
  StreamSpec s = repl_spec();
  s.retention = RetentionPolicy{max_bytes, -1};
  return s;
}

// Every file name in a directory that is not a segment (.idx, snapshots, markers).
std::vector<std::string> other_files(const std::string& dir) {
  std::vector<std::string> out;
  for (auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (!parse_offset_file_name(name, ".log")) out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Checks that `f` holds the empty log starting at `start`, and nothing of its old one.
void expect_empty_at(Node& f, std::uint64_t start) {
  EXPECT_EQ(f.log->log_start(), Offset(start));
  EXPECT_EQ(f.log->durable_end(), Offset(start));
  EXPECT_EQ(f.log->high_watermark(), Offset(start));
  EXPECT_TRUE(f.log->epoch_entries().empty());
  EXPECT_EQ(f.log->last_data_epoch(), LeaderEpoch(0));
  EXPECT_EQ(f.log->stats().log_end, Offset(start));
  const std::map<std::string, std::string> only{{segment_file_name(start), ""}};
  EXPECT_EQ(segment_files(f.log_dir()), only);
  EXPECT_EQ(other_files(f.log_dir()), std::vector<std::string>{"producers.snapshot"});
  auto below = f.log->read(Offset(0), 100, 1 << 20);
  ASSERT_FALSE(below);
  EXPECT_EQ(below.error().code, Errc::offset_out_of_range);
  auto at = f.log->read(Offset(start), 100, 1 << 20);
  ASSERT_TRUE(at) << at.error().to_string();
  EXPECT_TRUE(at->batches.empty());
  EXPECT_EQ(at->log_start, Offset(start));
}

TEST(ReplicaLogStartTest, RetentionNeverMovesTheLogStartPastTheHighWatermark) {
  Node a(kIncarnation, with_retention(1024));
  ASSERT_TRUE(a.log->become_leader(LeaderEpoch(1)));
  append_n(*a.log, "r", 10);  // segments at 0, 6, 12, 18, 24; far above 1 KiB in all
  a.engine->run_retention_once();
  EXPECT_EQ(a.log->log_start(), Offset(0)) << "retention removed records nobody has committed";
  a.log->advance_high_watermark(Offset(14));
  a.engine->run_retention_once();
  // The segment [12, 18) holds the high watermark: it and everything after it stay.
  EXPECT_EQ(a.log->log_start(), Offset(12));
  a.log->advance_high_watermark(Offset(30));
  a.engine->run_retention_once();
  EXPECT_EQ(a.log->log_start(), Offset(24));
}

// trim_before (docs/architecture.md "Cache compaction") has retention's bounds: never past
// the high watermark; roll_segment is the leader's only.
TEST(ReplicaLogStartTest, TrimNeverMovesTheLogStartPastTheHighWatermarkAndOnlyALeaderRolls) {
  Node a(kIncarnation, with_retention(-1));
  ASSERT_TRUE(a.log->become_leader(LeaderEpoch(1)));
  append_n(*a.log, "r", 10);  // segments at 0, 6, 12, 18, 24
  auto t = a.log->trim_before(Offset(30));
  ASSERT_TRUE(t) << t.error().to_string();
  EXPECT_EQ(*t, Offset(0)) << "trim removed records nobody has committed";
  a.log->advance_high_watermark(Offset(14));
  t = a.log->trim_before(Offset(30));
  ASSERT_TRUE(t) << t.error().to_string();
  EXPECT_EQ(*t, Offset(12));
  auto r = a.log->roll_segment();
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(*r, Offset(30));

  Node f;
  ASSERT_TRUE(f.log->become_follower(LeaderEpoch(1), NodeId(1)));
  auto fr = f.log->roll_segment();
  ASSERT_FALSE(fr);
  EXPECT_EQ(fr.error().code, Errc::not_leader);
}

TEST(ReplicaLogStartTest, RestartAtLeavesAnEmptyLogAtTheNewStartThatReopensAndFollows) {
  Node a(kIncarnation, with_retention(1024)), f;
  ASSERT_TRUE(f.log->become_follower(LeaderEpoch(2), NodeId(1)));
  // f copied [0, 18) before the leader's retention removed everything below 24.
  ASSERT_TRUE(a.log->become_leader(LeaderEpoch(1)));
  append_n(*a.log, "e1-", 4);
  replicate(*a.log, *f.log, 700, 12);
  ASSERT_TRUE(a.log->become_leader(LeaderEpoch(2)));
  append_n(*a.log, "e2-", 6);
  replicate(*a.log, *f.log, 700, 18);
  ASSERT_EQ(f.log->durable_end(), Offset(18));
  ASSERT_EQ(f.log->epoch_entries().size(), 2u);
  f.log->advance_high_watermark(Offset(9));
  a.log->advance_high_watermark(Offset(30));
  a.engine->run_retention_once();
  ASSERT_EQ(a.log->log_start(), Offset(24));

  // Refused: a start below what f holds, and on a leader.
  auto below_end = f.log->restart_at(Offset(12));
  ASSERT_FALSE(below_end);
  EXPECT_EQ(below_end.error().code, Errc::conflict);
  EXPECT_NE(below_end.error().message.find("ends at 18"), std::string::npos)
      << below_end.error().message;
  EXPECT_EQ(a.log->restart_at(Offset(40)).error().code, Errc::conflict);
  EXPECT_EQ(f.log->durable_end(), Offset(18));

  // Below its high watermark (9) too: the leader's log start says all of it expired.
  ASSERT_TRUE(f.log->restart_at(Offset(24)));
  expect_empty_at(f, 24);
  EXPECT_EQ(f.log->leader_epoch(), LeaderEpoch(2));  // the epochs it acted in stay
  ASSERT_TRUE(f.log->restart_at(Offset(24)));  // already there: nothing to do
  EXPECT_EQ(f.log->log_start(), Offset(24));

  // A new process finds the same empty log at 24.
  f.restart();
  expect_empty_at(f, 24);
  EXPECT_EQ(f.log->leader_epoch(), LeaderEpoch(2));

  // It follows the leader from there: append_replica at 24, byte for byte.
  ASSERT_TRUE(f.log->become_follower(LeaderEpoch(2), NodeId(1)));
  replicate(*a.log, *f.log);
  EXPECT_EQ(f.log->durable_end(), Offset(30));
  EXPECT_EQ(segment_files(f.log_dir()), segment_files(a.log_dir()));
  EXPECT_EQ(f.log->epoch_entries(), (std::vector<EpochEntry>{{LeaderEpoch(2), Offset(24)}}));
  f.log->advance_high_watermark(Offset(30));
  const auto held = read_all(*f.log, 24);
  EXPECT_EQ(held.size(), 6u);
  EXPECT_EQ(held.at(24).substr(0, 6), "e2-4#0");
  f.restart();
  EXPECT_EQ(f.log->log_start(), Offset(24));
  EXPECT_EQ(f.log->durable_end(), Offset(30));
  EXPECT_EQ(f.log->epoch_entries(), (std::vector<EpochEntry>{{LeaderEpoch(2), Offset(24)}}));
}

TEST(ReplicaLogStartTest, RestartAtForgetsTheProducerStateOfTheDroppedLog) {
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
  ShardReplicaLog seam(f.log);  // as the replication manager calls it
  ASSERT_TRUE(seam.restart_at(Offset(10), LeaderEpoch(1)));
  EXPECT_EQ(seam.log_start(), Offset(10));
  ASSERT_TRUE(f.log->become_leader(LeaderEpoch(2)));
  // Producer 9's sequences 0..3 lie in the dropped log: this log has never seen it.
  BatchBuilder next;
  next.add(std::nullopt, "p4", {}, 1000);
  next.set_producer(9, 4);
  auto gap = append_wait(*f.log, next.finish());
  ASSERT_FALSE(gap);
  EXPECT_EQ(gap.error().code, Errc::sequence_gap);
  EXPECT_NE(gap.error().message.find("expected sequence 0"), std::string::npos)
      << gap.error().message;
  BatchBuilder first;
  first.add(std::nullopt, "p0", {}, 1000);
  first.set_producer(9, 0);
  auto ok = append_wait(*f.log, first.finish());
  ASSERT_TRUE(ok) << ok.error().to_string();
  EXPECT_FALSE(ok->duplicate);
  EXPECT_EQ(ok->base_offset, Offset(10));
}

// A power cut at every step of restart_at in turn (directory entries not yet fsynced are
// lost too), and one right after it returned: each restart finds the old log, whole, or
// the new empty one, never a mix; once it found the new one, every later cut does too.
TEST(ReplicaLogStartTest, APowerCutAnywhereInRestartAtFindsTheOldLogOrTheNewOne) {
  Node a;
  ASSERT_TRUE(a.log->become_leader(LeaderEpoch(1)));
  append_n(*a.log, "e1-", 4);
  ASSERT_TRUE(a.log->become_leader(LeaderEpoch(2)));
  append_n(*a.log, "e2-", 2);
  bool seen_new = false;
  int steps = 0;
  for (int k = 0; k < 200; ++k) {
    SCOPED_TRACE("power cut before mutating operation " + std::to_string(k + 1));
    Node f;
    ASSERT_TRUE(f.log->become_follower(LeaderEpoch(2), NodeId(1)));
    replicate(*a.log, *f.log);
    f.log->advance_high_watermark(Offset(9));
    const auto old_segments = segment_files(f.log_dir());
    const auto old_entries = f.log->epoch_entries();
    ASSERT_EQ(f.log->durable_end(), Offset(18));
    ASSERT_EQ(old_segments.size(), 3u);

    CrashOptions cut;
    cut.lose_unsynced_entries = true;
    cut.keep_unsynced_prefix = k % 2 == 0;
    cut.append_garbage = k % 3 == 0;
    f.fs->crash_after(k, static_cast<std::uint64_t>(k) + 1, cut);
    auto r = f.log->restart_at(Offset(40));
    const bool cut_inside = f.fs->crashed();
    if (!cut_inside) {
      ASSERT_TRUE(r) << r.error().to_string();
      f.fs->crash(static_cast<std::uint64_t>(k) + 1, cut);  // right after it returned
    } else {
      ASSERT_FALSE(r);
    }
    f.restart();
    const bool is_new = f.log->log_start() == Offset(40);
    if (is_new) {
      expect_empty_at(f, 40);
    } else {
      EXPECT_EQ(f.log->log_start(), Offset(0));
      EXPECT_EQ(f.log->durable_end(), Offset(18));
      EXPECT_EQ(segment_files(f.log_dir()), old_segments);
      EXPECT_EQ(f.log->epoch_entries(), old_entries);
      EXPECT_FALSE(std::filesystem::exists(f.log_dir() + "/" + std::string(kRestartMarkerName)));
    }
    EXPECT_TRUE(is_new || !seen_new) << "found the old log after an earlier cut found the new";
    seen_new = seen_new || is_new;
    // Either way it goes on: from 18 in the old log, from 40 in the new one.
    ASSERT_TRUE(f.log->become_follower(LeaderEpoch(2), NodeId(1)));
    EXPECT_EQ(f.log->durable_end(), Offset(is_new ? 40 : 18));
    if (!cut_inside) {
      steps = k;
      break;
    }
  }
  EXPECT_TRUE(seen_new);
  EXPECT_GE(steps, 10) << "restart_at did fewer mutating operations than its protocol has";
}

// The engine finishes a restart it finds at open, for both logs of the shard.
TEST(ReplicaLogStartTest, ARestartMarkerFoundAtOpenIsFinishedForBothLogs) {
  Node n;
  ASSERT_TRUE(n.log->become_leader(LeaderEpoch(1)));
  append_n(*n.log, "d", 2);
  ASSERT_EQ(n.log->epoch_entries().size(), 1u);
  const std::string data_log = n.log_dir();
  const std::string group_log = n.shard_dir() + "/" + std::string(kGroupLogDir) + "/log";
  n.log.reset();
  n.engine.reset();
  // As a crash right after each log's commit point leaves them.
  ASSERT_TRUE(write_restart_marker(*n.fs, data_log, Offset(40)));
  ASSERT_TRUE(write_restart_marker(*n.fs, group_log, Offset(5)));
  n.open();
  expect_empty_at(n, 40);
  EXPECT_EQ(n.log->leader_epoch(), LeaderEpoch(1));
  auto* groups = n.log->group_ops()->log().get();
  EXPECT_EQ(groups->log_start(), Offset(5));
  EXPECT_EQ(groups->durable_end(), Offset(5));
  EXPECT_EQ(segment_files(group_log),
            (std::map<std::string, std::string>{{segment_file_name(5), ""}}));
  EXPECT_FALSE(std::filesystem::exists(group_log + "/" + std::string(kRestartMarkerName)));
}

TEST(ReplicaLogStartTest, ACorruptRestartMarkerRefusesTheOpen) {
  Node n;
  const std::string marker = n.log_dir() + "/" + std::string(kRestartMarkerName);
  n.log.reset();
  n.engine.reset();
  std::ofstream(marker, std::ios::binary | std::ios::trunc) << std::string(12, '\x07');
  FsStorageEngine engine(n.host, n.fs);
  auto s = engine.open_shard(n.ref, n.spec);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, Errc::corrupt_data);
  EXPECT_NE(s.error().message.find(marker), std::string::npos) << s.error().message;
}

}  // namespace
}  // namespace sluice::fs_storage::testing
