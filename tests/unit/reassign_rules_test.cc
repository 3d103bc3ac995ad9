// The reassignment rules of catalog_rules.h (docs/replication.md "Reassignment"): the start
// of a move, each controller step, broker drains, and check_shard_update on a replica list.
#include <gtest/gtest.h>

#include "sluice/catalog_rules.h"

namespace sluice {
namespace {

Assignment shard123() {
  Assignment a;
  a.key = StreamKey{"t", "n", "s"};
  a.shard = ShardIndex{0};
  a.incarnation = Incarnation{7};
  a.leader = NodeId{1};
  a.replicas = {NodeId{1}, NodeId{2}, NodeId{3}};
  a.leader_epoch = LeaderEpoch{4};
  a.in_sync = {{NodeId{1}, "d1"}, {NodeId{2}, "d2"}, {NodeId{3}, "d3"}};
  a.version = ShardVersion{10};
  return a;
}

std::vector<BrokerInfo> live(std::initializer_list<std::uint32_t> ids, std::uint32_t dead = 0) {
  std::vector<BrokerInfo> out;
  for (auto id : ids) {
    BrokerInfo b;
    b.id = NodeId{id};
    b.directory_id = "d" + std::to_string(id);
    b.live = id != dead;
    out.push_back(b);
  }
  return out;
}

std::vector<NodeId> ids(std::initializer_list<std::uint32_t> l) {
  std::vector<NodeId> out;
  for (auto i : l) out.push_back(NodeId{i});
  return out;
}

// Applies an update the way both backends do (check, then store), for the step tests.
Assignment applied(const Assignment& cur, const ShardUpdate& u) {
  EXPECT_TRUE(check_shard_update(cur, u).ok()) << check_shard_update(cur, u).error().to_string();
  Assignment a = cur;
  a.leader = u.leader;
  a.leader_epoch = u.leader_epoch;
  a.in_sync = u.in_sync;
  a.version = ShardVersion{cur.version.value() + 1};
  if (u.replicas) {
    a.replicas = *u.replicas;
    a.target_replicas = u.target_replicas;
  }
  return a;
}

TEST(ReassignRules, AMoveStartsWithTheOldListFollowedByTheNewBrokersAndKeepsTheState) {
  auto cur = shard123();
  auto u = plan_reassignment(cur, ids({4, 2, 3}), 3, live({1, 2, 3, 4}));
  ASSERT_TRUE(u.ok()) << u.error().to_string();
  ASSERT_TRUE(u->replicas.has_value());
  EXPECT_EQ(*u->replicas, ids({1, 2, 3, 4}));
  EXPECT_EQ(u->target_replicas, ids({4, 2, 3}));
  EXPECT_EQ(u->leader, cur.leader);
  EXPECT_EQ(u->leader_epoch, cur.leader_epoch);
  EXPECT_EQ(u->in_sync, cur.in_sync);
  EXPECT_EQ(u->expected_version, cur.version);
  // Only a new order: no copying, no target.
  auto o = plan_reassignment(cur, ids({3, 1, 2}), 3, live({1, 2, 3}));
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(*o->replicas, ids({3, 1, 2}));
  EXPECT_TRUE(o->target_replicas.empty());
}

TEST(ReassignRules, BadTargetsAreRefusedWithTheirReason) {
  auto cur = shard123();
  const auto brokers = live({1, 2, 3, 4, 5}, 5);
  struct Case {
    std::vector<NodeId> target;
    Errc code;
    const char* says;
  } cases[] = {
      {ids({2, 3}), Errc::invalid_argument, "replication factor 3"},
      {ids({2, 3, 3}), Errc::invalid_argument, "twice"},
      {ids({2, 3, 0}), Errc::invalid_argument, "not 0"},
      {ids({2, 3, 9}), Errc::invalid_argument, "not registered"},
      {ids({2, 3, 5}), Errc::conflict, "not live"},
      {ids({1, 2, 3}), Errc::conflict, "already"},
  };
  for (const auto& c : cases) {
    auto r = plan_reassignment(cur, c.target, 3, brokers);
    ASSERT_FALSE(r.ok()) << c.says;
    EXPECT_EQ(r.error().code, c.code) << r.error().message;
    EXPECT_NE(r.error().message.find(c.says), std::string::npos) << r.error().message;
  }
  auto running = cur;
  running.replicas = ids({1, 2, 3, 4});
  running.target_replicas = ids({4, 2, 3});
  auto r = plan_reassignment(running, ids({1, 2, 4}), 3, brokers);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::conflict);
  EXPECT_NE(r.error().message.find("already moving to [4,2,3]"), std::string::npos);
  auto leaderless = cur;
  leaderless.leader = NodeId{0};
  EXPECT_EQ(plan_reassignment(leaderless, ids({4, 2, 3}), 3, brokers).error().code, Errc::conflict);
  Assignment single = cur;
  single.replicas = ids({1});
  r = plan_reassignment(single, ids({2}), 1, brokers);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("replication factor 1"), std::string::npos);
}

TEST(ReassignRules, TheControllerWaitsForTheNewReplicasThenMovesLeadershipThenDropsTheOldOnes) {
  auto cur = shard123();
  const auto brokers = live({1, 2, 3, 4});
  cur = applied(cur, *plan_reassignment(cur, ids({4, 2, 3}), 3, brokers));
  // Broker 4 has not caught up: nothing to do, and the progress says why.
  auto p = plan_reassignment_step(cur, brokers);
  EXPECT_FALSE(p.change);
  EXPECT_NE(p.why.find("waiting for broker [4]"), std::string::npos) << p.why;
  // It joins the in-sync set, but with another directory than its broker has now: not yet.
  cur.in_sync.push_back({NodeId{4}, "an-old-disk"});
  EXPECT_FALSE(plan_reassignment_step(cur, brokers).change);
  cur.in_sync.back().directory_id = "d4";
  // Leader 1 leaves: leadership moves first, to the target's first replica, next epoch.
  p = plan_reassignment_step(cur, brokers);
  ASSERT_TRUE(p.change) << p.why;
  EXPECT_EQ(p.update.leader, NodeId{4});
  EXPECT_EQ(p.update.leader_epoch, LeaderEpoch{cur.leader_epoch.value() + 1});
  EXPECT_FALSE(p.update.replicas.has_value());
  cur = applied(cur, p.update);
  // Then the list becomes the target; the in-sync set keeps only its members.
  p = plan_reassignment_step(cur, brokers);
  ASSERT_TRUE(p.change) << p.why;
  ASSERT_TRUE(p.update.replicas.has_value());
  EXPECT_EQ(*p.update.replicas, ids({4, 2, 3}));
  EXPECT_TRUE(p.update.target_replicas.empty());
  EXPECT_EQ(p.update.leader, NodeId{4});
  EXPECT_EQ(p.update.leader_epoch, cur.leader_epoch);
  ASSERT_EQ(p.update.in_sync.size(), 3u);
  for (const auto& m : p.update.in_sync) EXPECT_NE(m.broker, NodeId{1});
  cur = applied(cur, p.update);
  EXPECT_FALSE(plan_reassignment_step(cur, brokers).change);
  EXPECT_TRUE(plan_reassignment_step(cur, brokers).why.empty());
}

TEST(ReassignRules, AReplicaListChangeIsCheckedAgainstTheNewList) {
  auto cur = shard123();
  ShardUpdate u{cur.key, cur.shard, cur.incarnation, cur.version, NodeId{4}, LeaderEpoch{5},
                {{NodeId{4}, "d4"}}};
  EXPECT_EQ(check_shard_update(cur, u).error().code, Errc::invalid_argument) << "4 is not a replica yet";
  u.replicas = ids({4, 2, 3});
  EXPECT_TRUE(check_shard_update(cur, u).ok());
  u.replicas = ids({4, 2, 2});
  EXPECT_EQ(check_shard_update(cur, u).error().code, Errc::invalid_argument);
  u.replicas = ids({1, 2, 3, 4});
  u.target_replicas = ids({5, 2, 3});
  EXPECT_NE(check_shard_update(cur, u).error().message.find("not in the replica list"), std::string::npos);
  u.replicas.reset();
  u.target_replicas = ids({4});
  EXPECT_EQ(check_shard_update(cur, u).error().code, Errc::invalid_argument) << "a target needs a list";
}

TEST(ReassignRules, ADrainReplacesTheBrokerByTheLeastLoadedLiveOneAndListsWhatCannotMove) {
  auto a = shard123();
  auto b = shard123();
  b.shard = ShardIndex{1};
  b.replicas = ids({2, 3, 4});
  b.leader = NodeId{2};
  auto single = shard123();
  single.key.name = "one";
  single.replicas = ids({1});
  auto elsewhere = shard123();
  elsewhere.key.name = "other";
  elsewhere.replicas = ids({2, 3, 4});
  // Broker 5 holds nothing: it takes broker 1's copy of shard 0; broker 6 is down.
  auto brokers = live({1, 2, 3, 4, 5, 6}, 6);
  auto plan = plan_drain(NodeId{1}, {a, b, single, elsewhere}, brokers);
  ASSERT_EQ(plan.moves.size(), 2u);
  EXPECT_EQ(plan.moves[0].assignment.shard, ShardIndex{0});
  EXPECT_EQ(plan.moves[0].target, ids({5, 2, 3}));
  EXPECT_TRUE(plan.moves[0].refused.empty());
  EXPECT_EQ(plan.moves[1].assignment.key.name, "one");
  EXPECT_NE(plan.moves[1].refused.find("replication factor 1"), std::string::npos);
  // No live broker outside the list: refused, naming it.
  plan = plan_drain(NodeId{1}, {a}, live({1, 2, 3}));
  ASSERT_EQ(plan.moves.size(), 1u);
  EXPECT_NE(plan.moves[0].refused.find("no live broker"), std::string::npos);
  // Already moving off it: skipped.
  auto moving = a;
  moving.replicas = ids({1, 2, 3, 5});
  moving.target_replicas = ids({5, 2, 3});
  EXPECT_TRUE(plan_drain(NodeId{1}, {moving}, brokers).moves.empty());
}

}  // namespace
}  // namespace sluice
