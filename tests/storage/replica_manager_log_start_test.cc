// The replication protocol below the leader's log start (docs/replication.md "Below the
// leader's log start"), against the model log: the leader answers such a fetch with its log
// start, and the follower starts its log over there, for the data and the group log.
#include <gtest/gtest.h>

#include <future>

#include "replica_cluster.h"
#include "replica_manager.h"
#include "replication_wire.h"

namespace sluice::fs_storage::replica_test {
namespace {

// The leader wrote [0, 20) in epoch 1, all of it committed, and its retention removed
// everything below 12. It alone is in sync.
void leader_starting_at_12(Cluster& c) {
  c.logs_[1]->put_entries(LeaderEpoch{1}, values(0, 20));
  c.logs_[1]->set_hwm(Offset{20});
  c.logs_[1]->expire_below(Offset{12});
  c.set_catalog([](ReplicaAssignment& a) {
    a.in_sync = {InSyncReplica{NodeId{1}, "dir-1"}};
    a.min_insync = 1;
  });
}

TEST(ReplicaManager, ANewReplicaAndAFollowerBelowTheLeadersLogStartStartOverThere) {
  Cluster c(3);
  leader_starting_at_12(c);
  // Broker 2 is a new, empty replica. Broker 3 holds [0, 5), committed (its high watermark
  // is 5), from before it was away: below the leader's log start, so all of it goes.
  c.logs_[3]->put_entries(LeaderEpoch{1}, values(0, 5));
  c.logs_[3]->set_hwm(Offset{5});
  c.tell();
  for (std::uint32_t b : {2u, 3u}) {
    SCOPED_TRACE("broker " + std::to_string(b));
    ASSERT_TRUE(eventually([&] {
      return c.logs_[b]->log_start() == Offset{12} &&
             c.logs_[b]->entries() == c.logs_[1]->entries();
    }));
    EXPECT_EQ(c.logs_[b]->restarts(), 1);
    EXPECT_EQ(c.logs_[b]->truncations(), 0);
    EXPECT_EQ(c.managers_[b]->counters().log_restarts, 1u);
  }
  // They follow on from there, and rejoin the in-sync set once caught up.
  auto f = c.logs_[1]->append(20);
  ASSERT_EQ(f.wait_for(30s), std::future_status::ready);
  ASSERT_TRUE(f.get());
  ASSERT_TRUE(eventually([&] {
    return c.logs_[2]->durable_end() == Offset{21} && c.logs_[3]->durable_end() == Offset{21};
  }));
  ASSERT_TRUE(eventually([&] {
    c.managers_[1]->check_now();
    return c.catalog().in_sync.size() == 3;
  }));
  c.tell();
  EXPECT_TRUE(eventually([&] { return c.logs_[3]->high_watermark() == Offset{21}; }));
  EXPECT_EQ(c.logs_[2]->entries(), c.logs_[1]->entries());
  EXPECT_EQ(c.logs_[3]->entries(), c.logs_[1]->entries());
}

TEST(ReplicaManager, TheGroupLogStartsOverAtItsLeadersLogStartToo) {
  Cluster c(2);
  leader_starting_at_12(c);
  std::map<std::uint32_t, std::shared_ptr<ModelLog>> groups;
  for (std::uint32_t b : {1u, 2u}) groups[b] = std::make_shared<ModelLog>(shard_ref());
  groups[1]->put_entries(LeaderEpoch{1}, values(100, 108));
  groups[1]->set_hwm(Offset{8});
  groups[1]->expire_below(Offset{5});
  c.tell();
  for (std::uint32_t b : {1u, 2u})
    ASSERT_TRUE(c.managers_[b]->assign(groups[b], c.catalog(), LogKind::groups));
  ASSERT_TRUE(eventually([&] {
    return groups[2]->log_start() == Offset{5} && groups[2]->entries() == groups[1]->entries();
  }));
  EXPECT_EQ(groups[2]->restarts(), 1);
  ASSERT_TRUE(eventually([&] { return c.logs_[2]->entries() == c.logs_[1]->entries(); }));
  EXPECT_EQ(c.logs_[2]->restarts(), 1);  // the data log's own, at 12
  EXPECT_EQ(c.logs_[2]->log_start(), Offset{12});
  EXPECT_EQ(c.managers_[2]->counters().log_restarts, 2u);
}

// The leader's answer, as a follower sees it on the wire: no error, no chunk, the fetch
// offset as chunk_base, and the log start; at once, although the fetch would wait.
TEST(ReplicaManager, TheLeaderAnswersAFetchBelowItsLogStartWithItsLogStart) {
  Cluster c(2);
  leader_starting_at_12(c);
  c.tell({1});  // broker 2 does not fetch by itself: the test speaks for it
  auto fetch = [&](std::uint64_t at) {
    FetchRequest req;
    req.env = Incarnated{shard_ref(), LeaderEpoch{1}, NodeId{2}, "dir-2"};
    req.fetch_offset = Offset{at};
    req.durable_end = Offset{at};
    req.max_bytes = 1 << 20;
    req.wait_ms = 60'000;
    std::promise<Result<std::string>> p;
    c.transports_[2]->request(NodeId{1}, kReplicaFetch, encode(req), 5s,
                              [&](Result<std::string> r) { p.set_value(std::move(r)); });
    auto f = p.get_future();
    EXPECT_EQ(f.wait_for(30s), std::future_status::ready);
    return f.get();
  };
  for (std::uint64_t at : {0u, 7u}) {
    auto bytes = fetch(at);
    ASSERT_TRUE(bytes) << bytes.error().message;
    auto r = decode_fetch_response(*bytes);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_TRUE(r->chunk.empty());
    EXPECT_EQ(r->chunk_base, Offset{at});
    EXPECT_EQ(r->log_start, Offset{12});
    EXPECT_EQ(r->log_end, Offset{20});
    EXPECT_EQ(r->leader_epoch, LeaderEpoch{1});
  }
  // At the log start itself: the records, as always.
  auto bytes = fetch(12);
  ASSERT_TRUE(bytes) << bytes.error().message;
  auto r = decode_fetch_response(*bytes);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->chunk_base, Offset{12});
  EXPECT_EQ(r->chunk.size(), 8u * 16u);
  EXPECT_EQ(r->chunk_epoch, LeaderEpoch{1});
}

}  // namespace
}  // namespace sluice::fs_storage::replica_test
