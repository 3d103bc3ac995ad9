// A lost shard copy (docs/replication.md "A lost shard copy"), against the model log: a
// broker whose disk lost its copy of one shard, under a directory id the catalog still
// records, never leads it and takes itself out of the in-sync set; it follows as a new
// replica, forgets its loss once it holds what its leader held, and the leader's rule
// brings it back.
#include <gtest/gtest.h>

#include <future>

#include "replica_cluster.h"
#include "replica_manager.h"

namespace sluice::fs_storage::replica_test {
namespace {

std::vector<std::uint32_t> in_sync_brokers(const ReplicaAssignment& a) {
  std::vector<std::uint32_t> out;
  for (const auto& m : a.in_sync) out.push_back(m.broker.value());
  std::sort(out.begin(), out.end());
  return out;
}

// Brokers 2 and 3 hold [0, 5) of epoch 1, committed; broker 1's copy was lost.
void lost_copy_on_broker_1(Cluster& c) {
  for (std::uint32_t b : {2u, 3u}) {
    c.logs_[b]->put_entries(LeaderEpoch{1}, values(0, 5));
    c.logs_[b]->set_hwm(Offset{5});
  }
  c.logs_[1]->set_lost();
}

// Seed kafka-15495 for one shard: the catalog's leader comes back with an empty copy of it
// under the directory id the in-sync set records. Leading, it would acknowledge new records
// at offsets 0-4 and its followers would cut theirs to match.
TEST(ReplicaManager, ALostCopyTheCatalogNamesLeaderLeadsNothingAndGivesUpTheLeadership) {
  Cluster c(3);
  lost_copy_on_broker_1(c);
  c.tell();
  ASSERT_TRUE(eventually([&] { return c.catalog().leader == NodeId{0}; }));
  auto a = c.catalog();
  EXPECT_EQ(a.leader_epoch, LeaderEpoch{2}) << "a leadership given up raises the epoch";
  EXPECT_EQ(in_sync_brokers(a), (std::vector<std::uint32_t>{2, 3}));
  EXPECT_FALSE(c.logs_[1]->ever_led());
  // Counted no more, and with no leader to catch up from: forgotten at once, so that an
  // operator could elect it uncleanly were every other copy gone too.
  EXPECT_TRUE(c.logs_[1]->copy_lost());
  c.tell();
  EXPECT_FALSE(c.logs_[1]->copy_lost());

  // The controller elects broker 2; broker 1 follows as a new replica, takes the 5 records,
  // and the leader's rule brings it back once it has caught up.
  c.set_catalog([](ReplicaAssignment& r) {
    r.leader = NodeId{2};
    r.leader_epoch = LeaderEpoch{3};
  });
  c.tell();
  ASSERT_TRUE(eventually([&] { return c.logs_[1]->entries() == c.logs_[2]->entries(); }));
  ASSERT_TRUE(eventually([&] { return !c.logs_[1]->copy_lost(); }));
  ASSERT_TRUE(eventually([&] {
    c.managers_[2]->check_now();
    return c.catalog().in_sync.size() == 3;
  }));
  EXPECT_FALSE(c.logs_[1]->ever_led());
  EXPECT_EQ(c.logs_[2]->entries().size(), 5u);
}

// A lost copy that follows leaves the in-sync set at once rather than after max_lag, and
// the leader and its epoch stay as they are.
TEST(ReplicaManager, ALostFollowerCopyLeavesTheInSyncSetAndComesBackOnceCaughtUp) {
  Cluster c(3);
  for (std::uint32_t b : {1u, 2u}) {
    c.logs_[b]->put_entries(LeaderEpoch{1}, values(0, 5));
    c.logs_[b]->set_hwm(Offset{5});
  }
  c.logs_[3]->set_lost();
  // It cannot fetch until it has left: a copy that catches up before its leave request is
  // made drops the request and stays in the set, rightly, and then the set never shows
  // the leave this test is about (it did so in about 1 run in 100).
  c.net_.cut[3][1] = c.net_.cut[3][2] = true;
  c.tell();
  ASSERT_TRUE(eventually([&] { return in_sync_brokers(c.catalog()) == std::vector<std::uint32_t>{1, 2}; }));
  EXPECT_EQ(c.catalog().leader, NodeId{1});
  EXPECT_EQ(c.catalog().leader_epoch, LeaderEpoch{1});
  EXPECT_TRUE(c.logs_[3]->copy_lost());
  c.net_.cut[3][1] = c.net_.cut[3][2] = false;
  c.tell();
  ASSERT_TRUE(eventually([&] { return c.logs_[3]->entries() == c.logs_[1]->entries(); }));
  ASSERT_TRUE(eventually([&] { return !c.logs_[3]->copy_lost(); }));
  ASSERT_TRUE(eventually([&] {
    c.managers_[1]->check_now();
    return c.catalog().in_sync.size() == 3;
  }));
}

// Review finding (stop 43): a leader of an older build keeps its record of a member that
// left the in-sync set, so it may count a restarted lost copy again on the position the
// copy reported before the loss, before the copy's first fetch corrects it. The copy
// forgot its loss as soon as the catalog stopped counting it, so, counted again with an
// empty log, it could be elected, and lead: its followers would cut acknowledged records to
// match. It now stays lost until it holds what its leader held.
TEST(ReplicaManager, ALostCopyCountedAgainBeforeItCaughtUpStillLeadsNothing) {
  Cluster c(3);
  for (std::uint32_t b : {1u, 2u}) {
    c.logs_[b]->put_entries(LeaderEpoch{1}, values(0, 5));
    c.logs_[b]->set_hwm(Offset{5});
  }
  c.logs_[3]->set_lost();
  c.net_.cut[3][1] = c.net_.cut[3][2] = true;  // it cannot fetch anything yet
  c.tell();
  ASSERT_TRUE(eventually([&] { return in_sync_brokers(c.catalog()) == std::vector<std::uint32_t>{1, 2}; }));
  c.tell();  // the catalog no longer counts it
  EXPECT_TRUE(c.logs_[3]->copy_lost());
  // The older leader counts it again; then that leader dies, and the controller elects
  // broker 3 from the in-sync set.
  c.set_catalog([&](ReplicaAssignment& r) {
    r.in_sync = {InSyncReplica{NodeId{1}, c.dirs_[1]}, InSyncReplica{NodeId{2}, c.dirs_[2]},
                 InSyncReplica{NodeId{3}, c.dirs_[3]}};
  });
  c.set_catalog([](ReplicaAssignment& r) {
    r.leader = NodeId{3};
    r.leader_epoch = LeaderEpoch{2};
  });
  c.tell({2, 3});
  ASSERT_TRUE(eventually([&] { return c.catalog().leader == NodeId{0}; }))
      << "the empty copy kept the leadership it was given";
  EXPECT_FALSE(c.logs_[3]->ever_led());
  EXPECT_EQ(in_sync_brokers(c.catalog()), (std::vector<std::uint32_t>{1, 2}));
  EXPECT_TRUE(c.logs_[3]->copy_lost());
  // The controller elects broker 2; broker 3 catches up from it, forgets its loss, and the
  // leader's rule brings it back.
  c.set_catalog([](ReplicaAssignment& r) {
    r.leader = NodeId{2};
    r.leader_epoch = LeaderEpoch{r.leader_epoch.value() + 1};
  });
  c.net_.cut[3][1] = c.net_.cut[3][2] = false;
  c.tell();
  ASSERT_TRUE(eventually([&] { return !c.logs_[3]->copy_lost(); }));
  EXPECT_EQ(c.logs_[3]->entries(), c.logs_[2]->entries());
  ASSERT_TRUE(eventually([&] {
    c.managers_[2]->check_now();
    return c.catalog().in_sync.size() == 3;
  }));
  EXPECT_FALSE(c.logs_[3]->ever_led());
}

// Whether the leader, broker `leader`, has broker `b`'s report of durable end `end`.
bool reports(Cluster& c, std::uint32_t leader, std::uint32_t b, Offset end) {
  for (const auto& p : c.managers_[leader]->progress(shard_ref()))
    if (p.broker == NodeId{b} && p.directory_id == c.dirs_[b] && p.durable_end == end) return true;
  return false;
}

// Review finding: the loss is forgotten once the copy holds what its leader held, not at
// its first fetch answer: a copy a few chunks short, counted again, still leaves the set.
TEST(ReplicaManager, ALostCopyShortOfItsLeadersLogEndStaysLostAcrossFetches) {
  auto o = Cluster::fast_options();
  o.fetch_max_bytes = 32;  // two model entries per chunk
  o.max_lag = 60s;         // the leader's lag check plays no part
  Cluster c(3, o);
  for (std::uint32_t b : {1u, 2u}) {
    c.logs_[b]->put_entries(LeaderEpoch{1}, values(0, 5));
    c.logs_[b]->set_hwm(Offset{5});
  }
  c.logs_[3]->set_lost();
  c.logs_[3]->refuse_appends_from(Offset{2});  // it takes its first chunk, [0, 2), only
  c.tell();
  ASSERT_TRUE(eventually([&] { return in_sync_brokers(c.catalog()) == std::vector<std::uint32_t>{1, 2}; }));
  c.tell();
  ASSERT_TRUE(eventually([&] { return reports(c, 1, 3, Offset{2}); }));  // answered twice since
  EXPECT_TRUE(c.logs_[3]->copy_lost());
  c.set_catalog([&](ReplicaAssignment& r) {  // counted again (an older leader's record)
    r.in_sync.push_back(InSyncReplica{NodeId{3}, c.dirs_[3]});
  });
  c.tell();
  ASSERT_TRUE(eventually([&] { return in_sync_brokers(c.catalog()) == std::vector<std::uint32_t>{1, 2}; }))
      << "a copy holding 2 of the leader's 5 records stayed in the in-sync set";
  EXPECT_TRUE(c.logs_[3]->copy_lost());
  c.tell();
  c.logs_[3]->refuse_appends_from(std::nullopt);
  ASSERT_TRUE(eventually([&] { return !c.logs_[3]->copy_lost(); }));
  EXPECT_EQ(c.logs_[3]->entries(), c.logs_[1]->entries());
  ASSERT_TRUE(eventually([&] {
    c.managers_[1]->check_now();
    return c.catalog().in_sync.size() == 3;
  }));
}

// Review finding: both logs of the shard went with the directory, and the group op log's
// acks and dead letters are the shard's state as much as its records: a copy whose data
// log caught up stays lost until its group log has too.
TEST(ReplicaManager, ALostCopyForgetsItsLossOnlyOnceItsGroupLogHasCaughtUpToo) {
  auto o = Cluster::fast_options();
  o.max_lag = 60s;
  Cluster c(3, o);
  std::map<std::uint32_t, std::shared_ptr<ModelLog>> groups;
  for (std::uint32_t b : {1u, 2u, 3u}) {
    groups[b] = std::make_shared<ModelLog>(shard_ref());
    groups[b]->group_log_of(c.logs_[b]);
  }
  for (std::uint32_t b : {1u, 2u}) {
    c.logs_[b]->put_entries(LeaderEpoch{1}, values(0, 5));
    c.logs_[b]->set_hwm(Offset{5});
    groups[b]->put_entries(LeaderEpoch{1}, values(0, 3));
    groups[b]->set_hwm(Offset{3});
  }
  c.logs_[3]->set_lost();
  groups[3]->refuse_appends(true);
  auto tell = [&] {  // as the engine does: the data log, then the group log
    c.tell();
    const auto ra = c.catalog();
    for (std::uint32_t b : {1u, 2u, 3u}) ASSERT_TRUE(c.managers_[b]->assign(groups[b], ra, LogKind::groups));
  };
  tell();
  ASSERT_TRUE(eventually([&] { return in_sync_brokers(c.catalog()) == std::vector<std::uint32_t>{1, 2}; }));
  tell();
  // Its data log holds all 5 records, and has fetched again since (the answer that got it
  // there has been handled).
  ASSERT_TRUE(eventually([&] { return reports(c, 1, 3, Offset{5}); }));
  EXPECT_TRUE(c.logs_[3]->copy_lost()) << "forgotten while its group log held none of the 3 ops";
  groups[3]->refuse_appends(false);
  ASSERT_TRUE(eventually([&] { return !c.logs_[3]->copy_lost(); }));
  EXPECT_EQ(groups[3]->entries(), groups[1]->entries());
  EXPECT_FALSE(c.logs_[3]->ever_led());
  EXPECT_FALSE(groups[3]->ever_led());
}

// Review finding: the leader's record of a member keeps the position it reported before its
// copy was lost. Once the catalog takes the member out of the in-sync set the record goes, so
// the lag check cannot add the empty copy back before it has fetched anything.
TEST(ReplicaManager, ALeaderForgetsTheRecordOfAMemberTheCatalogTookOutOfTheInSyncSet) {
  // A long max_lag: the old record stays recent enough for the lag check throughout, however
  // slow the machine, so the test cannot pass for that reason with the fix reverted.
  auto o = Cluster::fast_options();
  o.max_lag = 60s;
  Cluster c(3, o);
  for (std::uint32_t b : {1u, 2u, 3u}) {
    c.logs_[b]->put_entries(LeaderEpoch{1}, values(0, 5));
    c.logs_[b]->set_hwm(Offset{5});
  }
  c.tell();
  auto f = c.logs_[1]->append(5);
  ASSERT_EQ(f.wait_for(30s), std::future_status::ready);
  ASSERT_TRUE(f.get());  // every member reported 6
  // Broker 3 restarts with its copy lost, and cannot reach anyone.
  c.net_.cut[3][1] = c.net_.cut[3][2] = true;
  c.logs_[3] = std::make_shared<ModelLog>(shard_ref());
  c.logs_[3]->set_lost();
  c.tell({3});
  ASSERT_TRUE(eventually([&] { return in_sync_brokers(c.catalog()) == std::vector<std::uint32_t>{1, 2}; }));
  c.tell({1, 2});
  for (int i = 0; i < 50; ++i) {
    c.managers_[1]->check_now();
    ASSERT_EQ(in_sync_brokers(c.catalog()), (std::vector<std::uint32_t>{1, 2}))
        << "the empty copy was counted again on its old position";
    std::this_thread::sleep_for(2ms);
  }
  c.net_.cut[3][1] = c.net_.cut[3][2] = false;
  c.tell();
  ASSERT_TRUE(eventually([&] {
    c.managers_[1]->check_now();
    return c.catalog().in_sync.size() == 3;
  }));
  EXPECT_EQ(c.logs_[3]->entries(), c.logs_[1]->entries());
}

// The only in-sync member lost its copy: the shard is left without a leader and with an
// empty in-sync set (the controller then says why), never led from the empty copy.
TEST(ReplicaManager, TheOnlyInSyncMembersLostCopyLeavesTheShardLeaderless) {
  Cluster c(2);
  c.set_catalog([&](ReplicaAssignment& r) {
    r.in_sync = {InSyncReplica{NodeId{1}, c.dirs_[1]}};
    r.min_insync = 1;
  });
  c.logs_[2]->put_entries(LeaderEpoch{1}, values(0, 3));  // behind: not in sync
  c.logs_[1]->set_lost();
  c.tell();
  ASSERT_TRUE(eventually([&] { return c.catalog().leader == NodeId{0}; }));
  EXPECT_TRUE(c.catalog().in_sync.empty());
  EXPECT_FALSE(c.logs_[1]->ever_led());
}

// The window the fleet feature lost_copy_fetch closes (docs/replication.md "A lost shard
// copy"): under load a leader's high watermark lags its log end, so a lost copy can hold
// the high watermark (the leader's rule for joining) before it holds its mark (the
// leader's log end at its first fetch answer, its rule for forgetting the loss). Brokers 1
// and 2 hold [0, 5), committed; broker 2 is cut off and the leader writes [5, 10), which
// stays uncommitted (high watermark 5); broker 3's copy was lost, and it takes [0, 8) of
// its mark 10 and no more, until the test lets it.
void lost_copy_between_the_high_watermark_and_its_mark(Cluster& c) {
  for (std::uint32_t b : {1u, 2u}) {
    c.logs_[b]->put_entries(LeaderEpoch{1}, values(0, 5));
    c.logs_[b]->set_hwm(Offset{5});
  }
  c.logs_[3]->set_lost();
  c.net_.cut[3][1] = c.net_.cut[3][2] = true;
  c.tell();
  ASSERT_TRUE(eventually([&] { return in_sync_brokers(c.catalog()) == std::vector<std::uint32_t>{1, 2}; }));
  c.tell();
  ASSERT_TRUE(eventually([&] { return reports(c, 1, 2, Offset{5}); }));
  c.net_.cut[2][1] = true;
  for (std::uint64_t v = 5; v < 10; ++v) (void)c.logs_[1]->append(v, 1s);
  ASSERT_EQ(c.logs_[1]->high_watermark(), Offset{5});
  c.logs_[3]->refuse_appends_from(Offset{8});
  c.net_.cut[3][1] = c.net_.cut[3][2] = false;
  ASSERT_TRUE(eventually([&] { return reports(c, 1, 3, Offset{8}); }));  // answered twice since
  ASSERT_TRUE(c.logs_[3]->copy_lost());
}

ReplicaOptions options_for_the_window(bool finalized) {
  auto o = Cluster::fast_options();
  o.fetch_max_bytes = 32;  // two model entries per chunk
  o.max_lag = 60s;         // lag plays no part
  if (finalized) o.lost_copy_fetch = [] { return true; };
  return o;
}

TEST(ReplicaManager, ALostCopyThatSaysSoJoinsTheInSyncSetOnlyOnceItHasCaughtUp) {
  Cluster c(3, options_for_the_window(true));
  lost_copy_between_the_high_watermark_and_its_mark(c);
  for (int i = 0; i < 20; ++i) {
    c.managers_[1]->check_now();
    ASSERT_EQ(in_sync_brokers(c.catalog()), (std::vector<std::uint32_t>{1, 2}))
        << "a lost copy at the high watermark but short of its mark was added back";
  }
  c.logs_[3]->refuse_appends_from(std::nullopt);
  ASSERT_TRUE(eventually([&] { return !c.logs_[3]->copy_lost(); }));
  // Its next fetch no longer says so, and the leader's rule brings it back.
  ASSERT_TRUE(eventually([&] {
    c.managers_[1]->check_now();
    return in_sync_brokers(c.catalog()) == std::vector<std::uint32_t>{1, 2, 3};
  }));
  EXPECT_EQ(c.logs_[3]->entries(), c.logs_[1]->entries());
  EXPECT_FALSE(c.logs_[3]->ever_led());
}

// Until the feature is finalized a lost copy's fetches are what an older leader accepts,
// without the flag, and the leader's rule is the high watermark alone: the copy comes back
// short of its mark (and asks to leave again; the window above).
TEST(ReplicaManager, ALostCopySaysSoInItsFetchesOnlyOnceTheFleetFeatureIsFinalized) {
  Cluster c(3, options_for_the_window(false));
  lost_copy_between_the_high_watermark_and_its_mark(c);
  ASSERT_TRUE(eventually([&] {
    c.managers_[1]->check_now();
    return in_sync_brokers(c.catalog()) == std::vector<std::uint32_t>{1, 2, 3};
  }));
  EXPECT_TRUE(c.logs_[3]->copy_lost());
}

// The leader's rule reads the flag on either log of the shard: its group op log's fetches
// are the copy's too (review finding: only the data log's flag was tested). Here only the
// group log says so, a state the engine does not produce on its own (both logs share the
// copy's loss), to see that half of the rule alone.
TEST(ReplicaManager, AReplicaWhoseGroupLogSaysItIsLostDoesNotJoin) {
  auto o = options_for_the_window(true);
  Cluster c(3, o);
  std::map<std::uint32_t, std::shared_ptr<ModelLog>> groups;
  for (std::uint32_t b : {1u, 2u, 3u}) groups[b] = std::make_shared<ModelLog>(shard_ref());
  for (std::uint32_t b : {1u, 2u}) {
    c.logs_[b]->put_entries(LeaderEpoch{1}, values(0, 5));
    c.logs_[b]->set_hwm(Offset{5});
    groups[b]->put_entries(LeaderEpoch{1}, values(0, 3));
    groups[b]->set_hwm(Offset{3});
  }
  groups[3]->set_lost();
  c.set_catalog([&](ReplicaAssignment& r) {
    r.in_sync = {InSyncReplica{NodeId{1}, c.dirs_[1]}, InSyncReplica{NodeId{2}, c.dirs_[2]}};
  });
  auto tell = [&] {  // as the engine does: the data log, then the group log
    c.tell();
    const auto ra = c.catalog();
    for (std::uint32_t b : {1u, 2u, 3u}) ASSERT_TRUE(c.managers_[b]->assign(groups[b], ra, LogKind::groups));
  };
  tell();
  ASSERT_TRUE(eventually([&] {
    return c.logs_[3]->entries() == c.logs_[1]->entries() && groups[3]->entries() == groups[1]->entries();
  }));
  ASSERT_TRUE(eventually([&] { return reports(c, 1, 3, Offset{5}); }));
  for (int i = 0; i < 20; ++i) {
    c.managers_[1]->check_now();
    ASSERT_EQ(in_sync_brokers(c.catalog()), (std::vector<std::uint32_t>{1, 2}))
        << "joined while its group log's fetches said that its copy was lost";
    std::this_thread::sleep_for(2ms);
  }
  ASSERT_TRUE(groups[3]->forget_copy_lost());
  ASSERT_TRUE(eventually([&] {
    c.managers_[1]->check_now();
    return in_sync_brokers(c.catalog()) == std::vector<std::uint32_t>{1, 2, 3};
  }));
}

}  // namespace
}  // namespace sluice::fs_storage::replica_test
