// A lost shard copy (docs/replication.md "A lost shard copy"), against the model log: a
// broker whose disk lost its copy of one shard, under a directory id the catalog still
// records, never leads it and takes itself out of the in-sync set; once the catalog no
// longer counts it, it follows as a new replica and the leader's rule brings it back.
#include <gtest/gtest.h>

#include <future>
#include <numeric>

#include "replica_cluster.h"
#include "replica_manager.h"

namespace sluice::fs_storage::replica_test {
namespace {

std::vector<std::uint64_t> values(std::uint64_t from, std::uint64_t to) {
  std::vector<std::uint64_t> v(to - from);
  std::iota(v.begin(), v.end(), from);
  return v;
}

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
  EXPECT_TRUE(c.logs_[1]->copy_lost()) << "forgotten only once an assignment no longer counts it";

  // The controller elects broker 2; broker 1 follows as a new replica, takes the 5 records,
  // and the leader's rule brings it back once it has caught up.
  c.tell();
  EXPECT_FALSE(c.logs_[1]->copy_lost());
  c.set_catalog([](ReplicaAssignment& r) {
    r.leader = NodeId{2};
    r.leader_epoch = LeaderEpoch{3};
  });
  c.tell();
  ASSERT_TRUE(eventually([&] { return c.logs_[1]->entries() == c.logs_[2]->entries(); }));
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
  c.tell();
  ASSERT_TRUE(eventually([&] { return in_sync_brokers(c.catalog()) == std::vector<std::uint32_t>{1, 2}; }));
  EXPECT_EQ(c.catalog().leader, NodeId{1});
  EXPECT_EQ(c.catalog().leader_epoch, LeaderEpoch{1});
  c.tell();
  EXPECT_FALSE(c.logs_[3]->copy_lost());
  ASSERT_TRUE(eventually([&] { return c.logs_[3]->entries() == c.logs_[1]->entries(); }));
  ASSERT_TRUE(eventually([&] {
    c.managers_[1]->check_now();
    return c.catalog().in_sync.size() == 3;
  }));
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

}  // namespace
}  // namespace sluice::fs_storage::replica_test
