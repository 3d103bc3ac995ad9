// The replication protocol (replica_manager.h) against a model log and an in-process peer
// network: quorum, the in-sync set and fencing (truncation and the envelope checks have files
// of their own). The real
// log is exercised by replica_log tests and the multi-process tests (test_replication.py).
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "replica_cluster.h"
#include "replica_manager.h"
#include "replication_wire.h"

namespace sluice::fs_storage::replica_test {
namespace {

TEST(ReplicaManager, AQuorumAppendCompletesOnceEveryInSyncReplicaHasItOnDisk) {
  Cluster c(3);
  c.tell();
  std::vector<std::future<Result<Offset>>> acks;
  for (std::uint64_t i = 0; i < 20; ++i) acks.push_back(c.logs_[1]->append(100 + i));
  for (auto& f : acks) {
    ASSERT_EQ(f.wait_for(30s), std::future_status::ready);
    auto r = f.get();
    ASSERT_TRUE(r) << r.error().message;
    // Acknowledged only once both followers held it durably.
    EXPECT_GE(c.logs_[2]->durable_end(), *r);
    EXPECT_GE(c.logs_[3]->durable_end(), *r);
  }
  EXPECT_EQ(c.logs_[1]->entries(), c.logs_[2]->entries());
  EXPECT_EQ(c.logs_[1]->entries(), c.logs_[3]->entries());
  // Followers learn the high watermark with their next fetch.
  EXPECT_TRUE(eventually([&] { return c.logs_[2]->high_watermark() == Offset{20}; }));
}

// A parked fetch answered by a write takes its wait_ms deadline back: a deadline left
// behind would wake the timer thread and a worker wait_ms later, for nothing, once per
// parked fetch (docs/replication.md "Fewer wake-ups on the data path").
TEST(ReplicaManager, AnAnsweredParkedFetchLeavesNoTimerBehind) {
  auto o = Cluster::fast_options();
  o.fetch_wait = 60s;  // every deadline left behind would still be pending at the end
  Cluster c(3, o);
  c.tell();
  for (std::uint64_t i = 0; i < 20; ++i) {
    auto f = c.logs_[1]->append(100 + i);
    ASSERT_EQ(f.wait_for(30s), std::future_status::ready);
    ASSERT_TRUE(f.get());
  }
  // Both followers hold everything durably and their next fetch (the one that reported
  // it) is parked: at most those two fetches' deadlines are pending on the leader, not one
  // per answered fetch (>= 40).
  EXPECT_EQ(c.logs_[1]->high_watermark(), Offset{20});
  EXPECT_EQ(c.logs_[2]->durable_end(), Offset{20});
  EXPECT_EQ(c.logs_[3]->durable_end(), Offset{20});
  EXPECT_LE(c.managers_[1]->pending_timers(), 2u);
  EXPECT_GE(c.managers_[1]->counters().fetches_served, 40u);
}

TEST(ReplicaManager, ALaggingReplicaLeavesTheInSyncSetButNeverBelowMinInsyncAndComesBack) {
  Cluster c(3);
  c.tell();
  ASSERT_TRUE(c.logs_[1]->append(1).get());
  c.net_.cut[3][1] = true;  // broker 3 cannot reach the leader
  auto f = c.logs_[1]->append(2);
  EXPECT_NE(f.wait_for(200ms), std::future_status::ready) << "acknowledged without broker 3";
  // After max_lag the leader drops broker 3 (min_insync 2 allows it); the ack follows.
  ASSERT_TRUE(eventually([&] {
    c.managers_[1]->check_now();
    return c.catalog().in_sync.size() == 2;
  }));
  c.tell();
  ASSERT_EQ(f.wait_for(30s), std::future_status::ready);
  EXPECT_TRUE(f.get());
  // Broker 2 also cut: the set may not shrink below min_insync, so appends wait and expire.
  c.net_.cut[2][1] = true;
  auto g = c.logs_[1]->append(3, 300ms);
  std::this_thread::sleep_for(c.opts_.max_lag + 100ms);  // lets the lag pass; not a sync point
  c.managers_[1]->check_now();
  EXPECT_EQ(c.catalog().in_sync.size(), 2u);
  ASSERT_TRUE(eventually([&] {
    c.managers_[1]->check_now();
    return ready(g);
  }));
  auto r = g.get();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::not_enough_replicas);
  // Healed: both catch up and broker 3 rejoins with its directory.
  c.net_.cut[2][1] = c.net_.cut[3][1] = false;
  ASSERT_TRUE(eventually([&] {
    c.managers_[1]->check_now();
    return c.catalog().in_sync.size() == 3;
  }));
  EXPECT_EQ(c.catalog().in_sync.back(), (InSyncReplica{NodeId{3}, "dir-3"}));
  EXPECT_EQ(c.logs_[1]->entries(), c.logs_[3]->entries());
}

// Regression (review): a joining replica was checked against the high watermark the log
// showed, but the log raises it on its own, without the manager's lock, up to the target it
// was given, once its own sync is done. If that happened between the check and the
// proposal that lowers the target to the joiner, a replica lacking records acknowledged
// meanwhile was recorded in sync (and could be elected). The manager reads the high
// watermark again once the joiner counts, and waits if it is past the joiner.
TEST(ReplicaManager, AReplicaThatFellBehindTheHighWatermarkWhileJoiningDoesNotJoin) {
  auto o = Cluster::fast_options();
  o.max_lag = 60s;  // lag plays no part here
  Cluster c(3, o);
  c.set_catalog([](ReplicaAssignment& a) {
    a.in_sync = {InSyncReplica{NodeId{1}, dir_of(1)}, InSyncReplica{NodeId{2}, dir_of(2)}};
    a.min_insync = 2;
  });
  c.tell();
  // A replica that has not fetched yet is listed too, at 0 with no directory: broker 3
  // then could not join at the check below, and the held appends waited for ever (a hang
  // seen under sanitizers).
  auto reported = [&](std::uint32_t b, Offset at) {
    for (const auto& p : c.managers_[1]->progress(shard_ref()))
      if (p.broker == NodeId{b} && p.directory_id == dir_of(b) && p.durable_end == at) return true;
    return false;
  };
  ASSERT_TRUE(eventually([&] { return reported(2, Offset{0}) && reported(3, Offset{0}); }));
  c.logs_[3]->refuse_appends(true);         // broker 3 stays at 0, fetching
  c.logs_[1]->hold_own_sync_at(Offset{0});  // the leader's own sync of what follows is pending
  auto a1 = c.logs_[1]->append(1);
  auto a2 = c.logs_[1]->append(2);
  ASSERT_TRUE(eventually([&] { return reported(2, Offset{2}); }));  // the target is now 2
  ASSERT_EQ(c.logs_[1]->high_watermark(), Offset{0});
  // Broker 3 holds the high watermark the manager reads (0); the leader's sync completes
  // right before the manager lowers the target to propose it: [0, 2) is acknowledged.
  c.logs_[1]->finish_own_sync_before_the_target_is_lowered();
  c.managers_[1]->check_now();
  ASSERT_FALSE(c.logs_[1]->own_sync_held()) << "the check did not lower the target to propose broker 3";
  ASSERT_EQ(a1.wait_for(30s), std::future_status::ready);
  ASSERT_EQ(a2.wait_for(30s), std::future_status::ready);
  EXPECT_TRUE(a1.get());
  EXPECT_TRUE(a2.get());
  for (const auto& m : c.catalog().in_sync)
    EXPECT_NE(m.broker, NodeId{3}) << "broker 3 was recorded in sync holding 0 of the acknowledged [0, 2)";
  // Once it holds them it joins.
  c.logs_[3]->refuse_appends(false);
  ASSERT_TRUE(eventually([&] {
    c.managers_[1]->check_now();
    return c.catalog().in_sync.size() == 3;
  }));
}

// Regression (review): an in-sync change the catalog applied but whose answer was lost (a
// timeout) stopped counting its members at once. A joining replica the catalog now
// records could then lack records the leader acknowledged without it, and be elected.
// The proposal counts (maximal ISR) until the catalog's next word arrives.
TEST(ReplicaManager, AnInSyncChangeWithALostAnswerKeepsCountingItsMembers) {
  Cluster c(3);
  c.tell();
  ASSERT_TRUE(c.logs_[1]->append(1).get());
  c.net_.cut[3][1] = true;
  ASSERT_TRUE(eventually([&] {
    c.managers_[1]->check_now();
    return c.catalog().in_sync.size() == 2;
  }));
  c.tell();
  // Broker 3 catches up; the catalog records it, but the leader never hears the answer.
  {
    std::lock_guard lk(c.cat_mu_);
    c.lose_answers_ = true;
  }
  c.net_.cut[3][1] = false;
  ASSERT_TRUE(eventually([&] {
    c.managers_[1]->check_now();
    return c.catalog().in_sync.size() == 3;
  }));
  // Broker 3, a member in the catalog's word, is cut off again before the leader hears it.
  c.net_.cut[3][1] = true;
  auto f = c.logs_[1]->append(2, 30s);
  for (int i = 0; i < 5; ++i) c.managers_[1]->check_now();  // the retried change is refused
  EXPECT_NE(f.wait_for(300ms), std::future_status::ready)
      << "acknowledged without broker 3, which the catalog records as in sync";
  // The catalog's word arrives: broker 3 is a member, so the append still waits for it.
  c.tell();
  c.managers_[1]->check_now();
  EXPECT_FALSE(ready(f));
  c.net_.cut[3][1] = false;
  ASSERT_EQ(f.wait_for(30s), std::future_status::ready);
  EXPECT_TRUE(f.get());
  ASSERT_TRUE(eventually([&] { return c.logs_[3]->entries() == c.logs_[1]->entries(); }));
}

// Seed pulsar-fenced-empty-ledger-loss: a leader deposed while partitioned must not
// acknowledge anything with quorum, with data or with an empty log.
void deposed_leader_acknowledges_nothing(bool with_data) {
  Cluster c(3);
  c.tell();
  if (with_data) {
    for (std::uint64_t i = 0; i < 5; ++i) ASSERT_TRUE(c.logs_[1]->append(i).get());
  }
  // The catalog moves leadership to broker 2 (epoch 2); broker 1 is partitioned and does not
  // hear of it, broker 3 does.
  c.net_.cut[1][2] = c.net_.cut[1][3] = true;
  c.set_catalog([](ReplicaAssignment& a) {
    a.leader = NodeId{2};
    a.leader_epoch = LeaderEpoch{2};
    a.in_sync = {{NodeId{2}, "dir-2"}, {NodeId{3}, "dir-3"}};
  });
  c.tell({2, 3});
  auto stale = c.logs_[1]->append(999, 2s);
  auto fresh = c.logs_[2]->append(42);
  ASSERT_EQ(fresh.wait_for(30s), std::future_status::ready);
  ASSERT_TRUE(fresh.get());
  // The old leader's append: never acknowledged. It expires (or is fenced once it hears).
  ASSERT_TRUE(eventually([&] {
    c.managers_[1]->check_now();
    return ready(stale);
  }));
  auto r = stale.get();
  ASSERT_FALSE(r) << "a deposed leader acknowledged offset " << r->value();
  // Healed, it learns the new epoch, truncates its unacknowledged suffix and follows.
  c.net_.cut[1][2] = c.net_.cut[1][3] = false;
  c.tell({1});
  ASSERT_TRUE(eventually([&] { return c.logs_[1]->entries() == c.logs_[2]->entries(); }));
  for (auto& [epoch, v] : c.logs_[1]->entries()) EXPECT_NE(v, 999u);
  // And a quorum append on it now is refused: it is a follower.
  auto again = c.logs_[1]->append(1000).get();
  ASSERT_FALSE(again);
}

TEST(ReplicaManager, DeposedLeaderAcknowledgesNothing) { deposed_leader_acknowledges_nothing(true); }
TEST(ReplicaManager, DeposedLeaderWithAnEmptyLogAcknowledgesNothing) {
  deposed_leader_acknowledges_nothing(false);
}

// The harder case (seeds audit): above, both followers left the deposed leader, so no
// fetch could raise its high watermark whatever it did. Here broker 3 has not heard of
// epoch 2 and keeps fetching from broker 1 in epoch 1, caught up; only broker 2 (the new
// leader) is cut off from it. Broker 1 may then drop broker 2 from its in-sync set and
// acknowledge on {1, 3}: only the catalog's compare-and-set, which refuses its change
// (the version moved on with epoch 2), stands between it and an acknowledged write that
// epoch 2 does not hold.
TEST(ReplicaManager, ADeposedLeaderWithAFollowerStillFetchingAcknowledgesNothing) {
  Cluster c(3);
  c.tell();
  ASSERT_TRUE(c.logs_[1]->append(1).get());
  c.net_.cut[1][2] = c.net_.cut[2][1] = true;
  c.set_catalog([](ReplicaAssignment& a) {
    a.leader = NodeId{2};
    a.leader_epoch = LeaderEpoch{2};
    a.in_sync = {{NodeId{2}, "dir-2"}, {NodeId{3}, "dir-3"}};
  });
  c.tell({2});
  auto stale = c.logs_[1]->append(999, 2s);
  ASSERT_TRUE(eventually([&] { return c.logs_[3]->durable_end() == Offset{2}; }))
      << "broker 3 still copies from broker 1";
  const int updates_before = [&] {
    std::lock_guard lk(c.cat_mu_);
    return c.updates_;
  }();
  // Past max_lag broker 1 proposes to drop broker 2; the catalog refuses (another version).
  ASSERT_TRUE(eventually([&] {
    c.managers_[1]->check_now();
    return ready(stale);
  }));
  auto r = stale.get();
  ASSERT_FALSE(r) << "a deposed leader acknowledged offset " << r->value() << " with a follower of its old epoch";
  {
    std::lock_guard lk(c.cat_mu_);
    EXPECT_EQ(c.updates_, updates_before) << "the catalog took a change from the deposed leader";
    EXPECT_EQ(c.catalog_.leader, NodeId{2});
  }
  // Broker 3 hears of epoch 2, then broker 1: the unacknowledged 999 is cut everywhere.
  c.tell({3});
  c.net_.cut[1][2] = c.net_.cut[2][1] = false;
  c.tell({1});
  ASSERT_TRUE(c.logs_[2]->append(42).get());
  ASSERT_TRUE(eventually([&] {
    return c.logs_[1]->entries() == c.logs_[2]->entries() && c.logs_[3]->entries() == c.logs_[2]->entries();
  }));
  for (auto& [epoch, v] : c.logs_[2]->entries()) EXPECT_NE(v, 999u);
}

TEST(ReplicaManager, AFollowerInANewerEpochFencesTheOldLeaderAndItsPendingAppends) {
  Cluster c(3);
  c.tell();
  ASSERT_TRUE(c.logs_[1]->append(1).get());
  c.net_.cut[2][1] = true;  // broker 2 stops fetching: the next append waits
  auto pending = c.logs_[1]->append(2);
  EXPECT_NE(pending.wait_for(100ms), std::future_status::ready);
  // A message from epoch 2 (a replica that heard of a newer leader) reaches the old leader:
  // it fences itself, and its pending quorum append fails.
  FetchRequest req;
  req.env = Incarnated{shard_ref(), LeaderEpoch{2}, NodeId{3}, "dir-3"};
  req.fetch_offset = c.logs_[3]->durable_end();
  req.durable_end = req.fetch_offset;
  std::promise<Result<std::string>> answer;
  c.transports_[3]->request(NodeId{1}, kReplicaFetch, encode(req), 5s,
                            [&](Result<std::string> r) { answer.set_value(std::move(r)); });
  auto a = answer.get_future().get();
  ASSERT_FALSE(a);
  EXPECT_EQ(a.error().code, Errc::not_leader);
  ASSERT_EQ(pending.wait_for(30s), std::future_status::ready);
  auto r = pending.get();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::fenced);
  EXPECT_EQ(c.logs_[1]->leader_epoch(), LeaderEpoch{2});
}

// Seed kafka-15495: a replica back with a new directory is a new, empty replica. It counts
// for nothing until the catalog records its new directory in the in-sync set.
TEST(ReplicaManager, AReplicaWithANewDirectoryCountsForNothingUntilRecorded) {
  Cluster c(2);
  c.set_catalog([](ReplicaAssignment& a) { a.min_insync = 2; });
  // Broker 2 lost its disk: an empty log and a new directory id; the catalog still has the old.
  c.logs_[1]->put_entries(LeaderEpoch{1}, {1, 2, 3, 4, 5});
  c.managers_[2]->stop();
  c.transports_[2] = std::make_unique<FakeTransport>(c.net_, NodeId{2}, "dir-2-new");
  c.raw_[2] = c.transports_[2].get();
  c.transports_[2]->peers = &c.raw_;
  c.dirs_[2] = "dir-2-new";
  c.start_manager(2);
  c.tell();
  ASSERT_TRUE(eventually([&] { return c.logs_[2]->durable_end() == Offset{5}; }));
  // Let broker 2 report that position at least once more.
  auto f = c.logs_[1]->append(6);
  ASSERT_TRUE(eventually([&] { return c.logs_[2]->durable_end() == Offset{6}; }));
  std::this_thread::sleep_for(3 * c.opts_.fetch_wait);  // not a sync point: more fetches
  EXPECT_EQ(c.logs_[1]->high_watermark(), Offset{0})
      << "a replica with an unrecorded directory raised the high watermark";
  EXPECT_NE(f.wait_for(0s), std::future_status::ready);
  // The leader records the new directory once it holds everything up to the watermark.
  c.managers_[1]->check_now();
  ASSERT_TRUE(eventually([&] { return c.catalog().in_sync.size() == 2; }));
  EXPECT_EQ(c.catalog().in_sync.back(), (InSyncReplica{NodeId{2}, "dir-2-new"}));
  ASSERT_EQ(f.wait_for(30s), std::future_status::ready);
  EXPECT_TRUE(f.get());
}

// Regression (review): the leader's log raises its high watermark after each of its own
// syncs, toward the last target the manager gave it. A member that came back with a new
// directory (a wiped disk) made the manager return without a new target, and the old one,
// set while the member still counted, went on acknowledging records it no longer held.
TEST(ReplicaManager, AMemberBackWithANewDirectoryStopsTheHighWatermarkAtOnce) {
  Cluster c(3);
  c.tell();
  ASSERT_TRUE(c.logs_[1]->append(1).get());
  c.logs_[1]->hold_own_sync_at(Offset{1});  // the leader's own sync of what follows waits
  auto a2 = c.logs_[1]->append(2);
  auto reported = [&](std::uint32_t b, Offset at, const std::string& dir) {
    for (const auto& p : c.managers_[1]->progress(shard_ref()))
      if (p.broker == NodeId{b} && p.durable_end == at && p.directory_id == dir) return true;
    return false;
  };
  ASSERT_TRUE(eventually([&] { return reported(2, Offset{2}, "dir-2") && reported(3, Offset{2}, "dir-3"); }));
  ASSERT_EQ(c.logs_[1]->high_watermark(), Offset{1}) << "held by the leader's own sync";
  // Broker 3 comes back with an empty disk under a new directory, and fetches.
  c.managers_[3]->stop();
  c.logs_[3] = std::make_shared<ModelLog>(shard_ref());
  c.transports_[3]->set_dir("dir-3-new");
  c.dirs_[3] = "dir-3-new";
  c.start_manager(3);
  c.tell({3});
  ASSERT_TRUE(eventually([&] { return reported(3, Offset{2}, "dir-3-new"); }));
  c.logs_[1]->finish_own_sync();
  EXPECT_EQ(c.logs_[1]->high_watermark(), Offset{1})
      << "acknowledged [1, 2) on a target set while broker 3's lost copy counted";
  EXPECT_FALSE(ready(a2));
  // Recorded under its new directory (it holds everything by now), the append completes.
  ASSERT_TRUE(eventually([&] {
    c.managers_[1]->check_now();
    return c.catalog().in_sync.size() == 3 && c.catalog().in_sync.back().directory_id == "dir-3-new";
  }));
  c.tell();
  ASSERT_EQ(a2.wait_for(30s), std::future_status::ready);
  EXPECT_TRUE(a2.get());
}

// Whether the leader, broker 1, reports broker `b` at durable end `end`.
bool reported_at(Cluster& c, std::uint32_t b, Offset end) {
  for (const auto& p : c.managers_[1]->progress(shard_ref()))
    if (p.broker == NodeId{b} && p.durable_end == end) return true;
  return false;
}

// Three brokers, lag playing no part (a drop must not wait for it), records 1..3 acknowledged
// and broker 2 reported at 3.
void three_records_on_three(Cluster& c) {
  c.tell();
  for (std::uint64_t i = 1; i <= 3; ++i) ASSERT_TRUE(c.logs_[1]->append(i).get());
  ASSERT_TRUE(eventually([&] { return reported_at(c, 2, Offset{3}); }));
}

ReplicaOptions no_lag_drops() {
  auto o = Cluster::fast_options();
  o.max_lag = 60s;
  return o;
}

// Review finding: a member whose copy lost data under the same directory (a damaged or
// removed shard directory beside a surviving meta.properties, a repair) reported a shorter
// log and was taken at its word: it counted at its new position and stayed in the in-sync
// set, electable, for up to max_lag. It now counts for nothing and leaves the set at the
// next check, then joins again once it holds everything.
TEST(ReplicaManager, AMemberWhoseLogWentBackwardsLeavesTheInSyncSetAtOnce) {
  Cluster c(3, no_lag_drops());
  three_records_on_three(c);
  auto at = [&](std::uint32_t b, Offset end) { return reported_at(c, b, end); };
  // Broker 2 comes back with the same directory id and an empty shard log, and cannot
  // catch up for now.
  c.managers_[2]->stop();
  c.logs_[2] = std::make_shared<ModelLog>(shard_ref());
  c.logs_[2]->refuse_appends(true);
  c.start_manager(2);
  c.tell({2});
  ASSERT_TRUE(eventually([&] { return at(2, Offset{0}); }));
  // While the catalog still records broker 2 in sync (its update is held), broker 2 counts,
  // and for nothing: a record broker 3 holds is not acknowledged past it.
  c.block_updates(true);
  auto q = c.logs_[1]->append(4);
  // (A drop needs two reports below what it had: see below. The check waits on the held
  // update, so it runs on a thread of its own.)
  ASSERT_TRUE(eventually([&] { return at(3, Offset{4}); }));
  std::thread check([&] {
    for (int i = 0; i < 6000 && c.update_calls() == 0; ++i) {  // at most a minute
      c.managers_[1]->check_now();
      std::this_thread::sleep_for(10ms);
    }
  });
  const bool proposed = eventually([&] { return c.update_calls() > 0; });
  EXPECT_EQ(c.logs_[1]->high_watermark(), Offset{3}) << "the mark passed a record broker 2 lacks";
  EXPECT_EQ(q.wait_for(0s), std::future_status::timeout);
  c.block_updates(false);
  check.join();
  ASSERT_TRUE(proposed);
  ASSERT_TRUE(eventually([&] {
    c.managers_[1]->check_now();
    return c.catalog().in_sync.size() == 2;
  })) << "broker 2 stayed in sync (electable) holding none of the acknowledged records";
  for (const auto& m : c.catalog().in_sync) EXPECT_NE(m.broker, NodeId{2});
  c.tell();
  ASSERT_EQ(q.wait_for(30s), std::future_status::ready);
  EXPECT_TRUE(q.get());
  // It holds everything again: it joins.
  c.logs_[2]->refuse_appends(false);
  ASSERT_TRUE(eventually([&] {
    c.managers_[1]->check_now();
    return c.catalog().in_sync.size() == 3;
  }));
}

// One report below what a member had reported may be a stale request (a fetch handled after
// the retry that replaced it): it alone does not drop the member (late review). Two in a row
// do.
TEST(ReplicaManager, OneStaleReportDoesNotDropAMemberTwoInARowDo) {
  Cluster c(3, no_lag_drops());
  three_records_on_three(c);
  auto at = [&](std::uint32_t b, Offset end) { return reported_at(c, b, end); };
  c.managers_[2]->stop();  // only the fetches below reach the leader for broker 2
  auto report = [&](Offset durable_end) {
    FetchRequest req;
    req.env = Incarnated{shard_ref(), LeaderEpoch{1}, NodeId{2}, "dir-2"};
    req.fetch_offset = durable_end;
    req.durable_end = durable_end;
    std::promise<Result<std::string>> answer;
    c.transports_[2]->request(NodeId{1}, kReplicaFetch, encode(req), 30s,
                              [&](Result<std::string> r) { answer.set_value(std::move(r)); });
    auto f = answer.get_future();
    ASSERT_EQ(f.wait_for(30s), std::future_status::ready);
    ASSERT_TRUE(at(2, durable_end));
  };
  report(Offset{1});  // stale, and the check runs before the next report
  c.managers_[1]->check_now();
  EXPECT_EQ(c.catalog().in_sync.size(), 3u) << "one stale report dropped a healthy member";
  report(Offset{3});
  report(Offset{1});
  report(Offset{1});
  c.managers_[1]->check_now();
  ASSERT_TRUE(eventually([&] { return c.catalog().in_sync.size() == 2; }));
}

// Seed felix-incarnations-postmortem: "Leaders also keep follower positions and quorum
// marks per incarnation. A recreate at the same generation can't inherit the old stream's
// progress." The shard is deleted and created again (incarnation 8) under the same name,
// with the same leader, epoch and replicas; the followers have not heard of it yet. Their
// positions in incarnation 7 must neither show in incarnation 8's progress nor raise its
// high watermark: its records would be acknowledged as replicated while only the leader
// holds them.
TEST(ReplicaManager, ARecreatedShardInheritsNoFollowerProgressFromTheOldIncarnation) {
  Cluster c(3);
  c.tell();
  for (std::uint64_t i = 1; i <= 3; ++i) ASSERT_TRUE(c.logs_[1]->append(i).get());
  auto both_at = [&](const ShardRef& ref, Offset end) {
    int n = 0;
    for (const auto& p : c.managers_[1]->progress(ref))
      if (p.broker != NodeId{1} && p.durable_end == end) ++n;
    return n == 2;
  };
  ASSERT_TRUE(eventually([&] { return both_at(shard_ref(), Offset{3}); }));
  c.managers_[2]->stop();
  c.managers_[3]->stop();
  auto recreated = std::make_shared<ModelLog>(shard_ref(8));
  ASSERT_TRUE(c.managers_[1]->assign(recreated, c.catalog()));
  auto q = recreated->append(1);
  (void)recreated->append(2);
  auto third = recreated->append(3);
  c.managers_[1]->check_now();
  EXPECT_TRUE(c.managers_[1]->progress(shard_ref()).empty()) << "incarnation 7 is still led";
  for (const auto& p : c.managers_[1]->progress(shard_ref(8)))
    if (p.broker != NodeId{1}) EXPECT_EQ(p.durable_end, Offset{0}) << "broker " << p.broker.value();
  EXPECT_FALSE(both_at(shard_ref(8), Offset{3}));
  EXPECT_EQ(recreated->high_watermark(), Offset{0})
      << "incarnation 8's mark rose on the followers' word about incarnation 7";
  EXPECT_EQ(q.wait_for(0s), std::future_status::timeout) << "a record only the leader holds was acknowledged";
}

// Seed kafka-15495: the catalog still names broker 1 leader, but broker 1 came back with
// an empty disk (a new directory id). It must not lead: its empty log would become the truth.
TEST(ReplicaManager, ABrokerBackWithANewDirectoryNeverLeadsOnTheCatalogsOldWord) {
  Cluster c(2);
  c.managers_[1]->stop();
  c.transports_[1] = std::make_unique<FakeTransport>(c.net_, NodeId{1}, "dir-1-new");
  c.raw_[1] = c.transports_[1].get();
  c.transports_[1]->peers = &c.raw_;
  c.dirs_[1] = "dir-1-new";
  c.start_manager(1);
  c.tell();
  auto f = c.logs_[1]->append(1);
  ASSERT_EQ(f.wait_for(30s), std::future_status::ready);
  auto r = f.get();
  ASSERT_FALSE(r) << "a leader with an unrecorded directory accepted an append";
  // Recorded with its new directory (an operator's unclean election), it leads.
  c.set_catalog([](ReplicaAssignment& a) {
    a.leader_epoch = LeaderEpoch{2};
    a.in_sync = {InSyncReplica{NodeId{1}, "dir-1-new"}};
    a.min_insync = 1;
  });
  c.tell();
  auto g = c.logs_[1]->append(1);
  ASSERT_TRUE(eventually([&] {
    c.managers_[1]->check_now();
    return g.wait_for(0s) == std::future_status::ready;
  }));
  EXPECT_TRUE(g.get());
}

// Regression (review): a fetch at the tail is served on the transport's thread, which
// first took the shard's lock to see whether it was at the tail. A role change holds that
// lock across the log's epoch save (an fsync), so one slow disk stalled every peer message
// this broker receives, for every shard, until the fsync returned. The check now only
// tries the lock and hands the fetch to a worker when it is held.
TEST(ReplicaManager, ARoleChangeWaitingOnTheDiskDoesNotStallThePeerTransport) {
  Cluster c(3);
  c.tell();
  ASSERT_TRUE(c.logs_[1]->append(1).get());
  c.logs_[1]->block_epoch_changes();
  c.set_catalog([](ReplicaAssignment& a) { a.leader_epoch = LeaderEpoch{2}; });
  auto role_change = std::async(std::launch::async, [&] { c.tell({1}); });
  ASSERT_TRUE(eventually([&] { return c.logs_[1]->blocked_epoch_changes() == 1; }));
  // The epoch-1 tail fetch of broker 2 arrives while the leader's lock is held ...
  FetchRequest at_tail;
  at_tail.env = Incarnated{shard_ref(), LeaderEpoch{1}, NodeId{2}, "dir-2"};
  at_tail.fetch_offset = c.logs_[1]->high_watermark();
  auto tail_answer = std::make_shared<std::promise<Result<std::string>>>();
  c.transports_[2]->request(NodeId{1}, kReplicaFetch, encode(at_tail), 60s,
                            [tail_answer](Result<std::string> r) { tail_answer->set_value(std::move(r)); });
  // ... and a message behind it on the same transport thread is still delivered.
  FetchRequest other = at_tail;
  other.env.ref.shard = ShardIndex{3};
  std::promise<Result<std::string>> behind;
  c.transports_[2]->request(NodeId{1}, kReplicaFetch, encode(other), 60s,
                            [&](Result<std::string> r) { behind.set_value(std::move(r)); });
  auto f = behind.get_future();
  const bool delivered = f.wait_for(30s) == std::future_status::ready;
  c.logs_[1]->unblock_epoch_changes();
  role_change.get();
  ASSERT_TRUE(delivered) << "the transport thread waited for the role change's disk write";
  auto r = f.get();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::not_found);
  // The held fetch is answered by a worker once the role change is done: in epoch 2 the
  // epoch-1 fetch is fenced.
  auto tf = tail_answer->get_future();
  ASSERT_EQ(tf.wait_for(30s), std::future_status::ready);
  auto t = tf.get();
  ASSERT_FALSE(t);
  EXPECT_EQ(t.error().code, Errc::fenced);
}

// Regression (review): the periodic check ran on the replication workers and called the
// metadata store from there (an in-sync change), blocking for as long as the store took.
// With the store down, the workers sat in those calls: quorum appends outlived their
// deadline, and followers' fetches went unanswered. The check and its catalog calls have
// their own thread now; deadlines and fetches stay on the workers.
TEST(ReplicaManager, AMetadataStoreThatDoesNotAnswerStallsNeitherDeadlinesNorFollowers) {
  auto o = Cluster::fast_options();
  o.workers = 1;                // one worker: anything that blocks it shows
  o.check_interval = 20ms;      // the timer runs the checks, as in production
  Cluster c(3, o);
  struct Unblock {  // a failed assertion must not leave stop() joining a blocked call
    Cluster& c;
    ~Unblock() { c.block_updates(false); }
  } unblock{c};
  c.tell();
  ASSERT_TRUE(c.logs_[1]->append(1).get());
  c.block_updates(true);
  c.net_.cut[3][1] = true;  // broker 3 lags: after max_lag the check proposes to drop it
  ASSERT_TRUE(eventually([&] { return c.update_calls() >= 1; })) << "the check never asked the catalog";
  // The catalog call is waiting. A quorum append (broker 3 is still in the recorded set)
  // expires at its deadline ...
  auto q = c.logs_[1]->append(2, 200ms);
  ASSERT_EQ(q.wait_for(30s), std::future_status::ready) << "no quorum deadline ran while the catalog call waited";
  auto r = q.get();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::not_enough_replicas);  // the model log's expiry answer
  // ... and broker 2 still copies what the leader writes.
  auto more = c.logs_[1]->append(3, 30s);
  ASSERT_TRUE(eventually([&] { return c.logs_[2]->entries().size() == 3; }))
      << "broker 2 stopped replicating while the catalog call waited";
  c.block_updates(false);
  ASSERT_TRUE(eventually([&] { return c.catalog().in_sync.size() == 2; }));
  c.tell();
  ASSERT_EQ(more.wait_for(30s), std::future_status::ready);
  EXPECT_TRUE(more.get());
}

}  // namespace
}  // namespace sluice::fs_storage::replica_test
