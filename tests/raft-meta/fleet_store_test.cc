// RaftMetaStore at level 10 with a real libuv raft in a temporary directory: bootstrap
// features, metadata.level, the finalize gate over live brokers, liveness (with an injected
// clock, so nothing here depends on timing), placement, restarts.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <optional>
#include <thread>

#include "all_features.h"
#include "raft_meta_store.h"
#include "sluice/features.h"
#include "test_host.h"

namespace sluice::raft_meta {
namespace {

using sluice::testing::TestHost;
using Clock = std::chrono::steady_clock;
const std::string kInc(kStreamIncarnations);
// Every feature held back: what a cluster upgraded from level 8 looks like.
const std::string kHoldBoth = sluice::testing::all_features_joined();

std::map<std::string, std::string> base_config() {
  return {{"raft.address", "127.0.0.1:0"}, {"metadata.rpc_address", "127.0.0.1:0"}, {"metadata.timeout_ms", "20000"}};
}

// A manual clock for broker liveness.
struct ManualClock {
  std::atomic<std::int64_t> ms{1'000'000};
  Clock::time_point now() const { return Clock::time_point(std::chrono::milliseconds(ms.load())); }
  void advance(std::chrono::milliseconds d) { ms += d.count(); }
};

RaftMetaConfig config_with_clock(TestHost& host, ManualClock& clock) {
  auto cfg = RaftMetaConfig::from_host(host);
  cfg.clock = [&clock] { return clock.now(); };
  return cfg;
}

StreamSpec spec(std::uint32_t shards = 1) {
  StreamSpec s;
  s.shards = shards;
  return s;
}

void make_namespace(RaftMetaStore& s) {
  ASSERT_TRUE(s.create_tenant("acme").ok());
  ASSERT_TRUE(s.create_namespace("acme", "prod").ok());
}

const FeatureInfo* find(const std::vector<FeatureInfo>& fs, const std::string& n) {
  for (auto& f : fs)
    if (f.name == n) return &f;
  return nullptr;
}

TEST(RaftMetaFleet, BootstrapFinalizesEveryKnownFeatureUnlessHeldBack) {
  {
    TestHost host(base_config());
    RaftMetaStore store(host);
    ASSERT_TRUE(store.start().ok());
    auto fs = store.list_features();
    ASSERT_TRUE(fs.ok());
    for (auto& k : known_features()) {
      auto* f = find(*fs, std::string(k.name));
      ASSERT_NE(f, nullptr) << k.name;
      EXPECT_TRUE(f->finalized) << k.name;
      EXPECT_GT(f->finalized_seq, ChangeSeq{0});
      EXPECT_EQ(f->required_level, k.required_level);
    }
    EXPECT_EQ(store.snapshot()->finalized_features.size(), known_features().size());
  }
  {
    TestHost host(base_config());
    host.set("metadata.bootstrap_hold_back", kInc);
    RaftMetaStore store(host);
    ASSERT_TRUE(store.start().ok());
    auto fs = store.list_features();
    ASSERT_TRUE(fs.ok());
    auto* f = find(*fs, kInc);
    ASSERT_NE(f, nullptr);
    EXPECT_FALSE(f->finalized);
    EXPECT_EQ(f->finalized_seq, ChangeSeq{0});
    // Not finalized: creates store 0.
    make_namespace(store);
    EXPECT_EQ(store.create_stream({"acme", "prod", "s"}, spec())->incarnation, Incarnation{0});
  }
}

// "*" holds back every feature: a cluster like a level-8 one, at this build's level.
TEST(RaftMetaFleet, HoldingBackEveryFeatureBootstrapsNoneFinalized) {
  TestHost host(base_config());
  host.set("metadata.bootstrap_hold_back", "*");
  RaftMetaStore store(host);
  ASSERT_TRUE(store.start().ok());
  EXPECT_TRUE(store.snapshot()->finalized_features.empty());
  auto fs = store.list_features();
  ASSERT_TRUE(fs.ok());
  EXPECT_EQ(fs->size(), known_features().size());
  for (auto& f : *fs) EXPECT_FALSE(f.finalized) << f.name;
  make_namespace(store);
  EXPECT_EQ(store.create_stream({"acme", "prod", "s"}, spec())->incarnation, Incarnation{0});
}

TEST(RaftMetaFleet, Level8MemberBootstrapsNoFeaturesAndProposesZero) {
  TestHost host(base_config());
  host.set("metadata.level", "8");
  RaftMetaStore store(host);
  ASSERT_TRUE(store.start().ok());
  EXPECT_EQ(store.status().level, MetadataLevel{8});
  EXPECT_TRUE(store.snapshot()->finalized_features.empty());
  make_namespace(store);
  auto s = store.create_stream({"acme", "prod", "orders"}, spec());
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  EXPECT_EQ(s->incarnation, Incarnation{0});
  auto cmd = store.stream_create_command({"acme", "prod", "x"}, spec());
  EXPECT_EQ(cmd.proposed_incarnation, 0u);
  EXPECT_EQ(cmd.level, 8u);
  EXPECT_EQ(cmd.incarnations, IncarnationRule::legacy);
  // The gate: the group (this member) is below the feature's level.
  auto fin = store.finalize_feature(kInc);
  ASSERT_FALSE(fin.ok());
  EXPECT_EQ(fin.error().code, Errc::conflict);
  EXPECT_NE(fin.error().message.find("level"), std::string::npos) << fin.error().message;
}

TEST(RaftMetaFleet, Level8MemberProposesZeroEvenAfterTheFinalizeCommitted) {
  // The felix hole: the catalog says finalized, the member is at level 8. It proposes 0,
  // and apply stores 0 (what a real level-8 build stores).
  TestHost host(base_config());
  // Level 10 (flagged entries would raise the floor to 14 and refuse the restart at 8):
  // finalizes stream_incarnations.
  host.set("metadata.level", "10");
  {
    RaftMetaStore store(host);
    ASSERT_TRUE(store.start().ok());
    make_namespace(store);
    auto s = store.create_stream({"acme", "prod", "orders"}, spec());
    ASSERT_TRUE(s.ok());
    EXPECT_NE(s->incarnation, Incarnation{0});
    ASSERT_TRUE(store.delete_stream({"acme", "prod", "orders"}).ok());
  }
  host.set("metadata.level", "8");
  RaftMetaStore store(host);
  ASSERT_TRUE(store.start().ok());
  auto again = store.create_stream({"acme", "prod", "orders"}, spec());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->incarnation, Incarnation{0});
  EXPECT_EQ(store.list_tombstones()->size(), 1u);  // the level-10 delete's, unchanged
}

TEST(RaftMetaFleet, MetadataLevelOutsideTheBuildsRangeIsRefusedAtCreate) {
  // The product's levels are 8, 10 and 14; 9 and 11..13 never shipped.
  for (const char* bad : {"7", "9", "11", "13", "15", "0"}) {
    TestHost host(base_config());
    host.set("metadata.level", bad);
    try {
      RaftMetaStore store(host);
      ADD_FAILURE() << "metadata.level=" << bad << " accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("metadata.level"), std::string::npos);
    }
  }
  TestHost host(base_config());
  host.set("metadata.bootstrap_hold_back", "no_such_feature");
  EXPECT_THROW(RaftMetaStore store(host), std::invalid_argument);
}

TEST(RaftMetaFleet, FinalizeIsRefusedWhileALiveBrokerLacksTheFeatureAndSucceedsAfterItUnregisters) {
  TestHost host(base_config());
  host.set("metadata.bootstrap_hold_back", kHoldBoth);
  RaftMetaStore store(host);
  ASSERT_TRUE(store.start().ok());
  auto b1 = store.register_broker({NodeId{1}, "127.0.0.1:9001", "d1", "0.7.0", {kInc}});
  ASSERT_TRUE(b1.ok()) << b1.error().to_string();
  EXPECT_TRUE(b1->live);
  ASSERT_TRUE(store.register_broker({NodeId{2}, "127.0.0.1:9002", "d2", "0.6.0", {}}).ok());

  auto fs = store.list_features();
  ASSERT_TRUE(fs.ok());
  auto* f = find(*fs, kInc);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->supported_by, std::vector<NodeId>{NodeId{1}});
  EXPECT_EQ(f->lacking, std::vector<NodeId>{NodeId{2}});

  auto refused = store.finalize_feature(kInc);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, Errc::conflict);
  EXPECT_NE(refused.error().message.find("2"), std::string::npos) << refused.error().message;
  EXPECT_EQ(store.finalize_feature("no_such_feature").error().code, Errc::not_found);

  ASSERT_TRUE(store.unregister_broker(NodeId{2}).ok());
  auto ok = store.finalize_feature(kInc);
  ASSERT_TRUE(ok.ok()) << ok.error().to_string();
  EXPECT_TRUE(ok->finalized);
  EXPECT_GT(ok->finalized_seq, ChangeSeq{0});
  auto applied = store.status().applied;
  auto again = store.finalize_feature(kInc);  // idempotent, nothing proposed
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->finalized_seq, ok->finalized_seq);
  EXPECT_EQ(store.status().applied, applied);

  // After the finalize an old broker cannot register.
  auto late = store.register_broker({NodeId{2}, "127.0.0.1:9002", "d2", "0.6.0", {}});
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.error().code, Errc::conflict);
}

TEST(RaftMetaFleet, LivenessFollowsHeartbeatsWithARestartGrace) {
  TestHost host(base_config());
  host.set("metadata.bootstrap_hold_back", kHoldBoth);
  host.set("broker.session_timeout_ms", "1000");
  ManualClock clock;
  {
    RaftMetaStore store(host, config_with_clock(host, clock));
    ASSERT_TRUE(store.start().ok());
    EXPECT_EQ(store.heartbeat_broker(NodeId{5}).error().code, Errc::not_found);
    ASSERT_TRUE(store.register_broker({NodeId{5}, "h:5", "d5", "0.6.0", {}}).ok());
    clock.advance(std::chrono::milliseconds(1500));  // grace and registration both expired
    auto bs = store.list_brokers();
    ASSERT_TRUE(bs.ok());
    ASSERT_EQ(bs->size(), 1u);
    EXPECT_FALSE((*bs)[0].live);
    ASSERT_TRUE(store.heartbeat_broker(NodeId{5}).ok());
    EXPECT_TRUE((*store.list_brokers())[0].live);
    // A live broker lacking the feature blocks the finalize; a dead one does not.
    EXPECT_EQ(store.finalize_feature(kInc).error().code, Errc::conflict);
    clock.advance(std::chrono::milliseconds(1001));
    EXPECT_FALSE((*store.list_brokers())[0].live);
    // With no live broker, placement falls back to the registered ones: the shard is
    // served when that broker comes back (a broker that slept through a recreate).
    auto cmd = store.stream_create_command({"acme", "prod", "x"}, spec(2));
    EXPECT_EQ(cmd.placement[0].leader, 5u);
  }
  // A restart: registered brokers count as live for one session timeout.
  RaftMetaStore store(host, config_with_clock(host, clock));
  ASSERT_TRUE(store.start().ok());
  EXPECT_TRUE((*store.list_brokers())[0].live);
  EXPECT_TRUE((*store.snapshot()).brokers[0].live);
  // ... and the controller waits that grace out: it must not act on liveness it only
  // assumed (a dead broker elected, a reassignment finished onto a crashed target).
  EXPECT_FALSE(store.is_controller());
  clock.advance(std::chrono::milliseconds(1000));
  EXPECT_FALSE((*store.list_brokers())[0].live);
  EXPECT_TRUE(store.is_controller()) << "the grace is over: this leader is the controller";
  auto fin = store.finalize_feature(kInc);
  EXPECT_TRUE(fin.ok()) << fin.error().to_string();
}

// Regression (review): a heartbeat that arrived between a finalize's gate (no serving
// broker lacks the feature) and its commit brought back, as serving, a broker that lacks
// it. The heartbeat is sent from inside the finalize, at its liveness check (the injected
// clock), and the finalize waits for its answer before it proposes: without the fix it
// succeeds there, with it it is refused (transient), and after the commit for good.
TEST(RaftMetaFleet, AHeartbeatDuringAFinalizeCannotBringBackABrokerThatLacksTheFeature) {
  TestHost host(base_config());
  host.set("metadata.bootstrap_hold_back", kHoldBoth);
  host.set("broker.session_timeout_ms", "1000");
  ManualClock clock;
  const auto test_thread = std::this_thread::get_id();
  std::atomic<bool> armed{false};
  std::function<void()> at_check;
  auto cfg = RaftMetaConfig::from_host(host);
  cfg.clock = [&] {
    if (std::this_thread::get_id() == test_thread && armed.exchange(false)) at_check();
    return clock.now();
  };
  RaftMetaStore store(host, cfg);
  ASSERT_TRUE(store.start().ok());
  ASSERT_TRUE(store.register_broker({NodeId{5}, "h:5", "d5", "0.6.0", {}}).ok());
  clock.advance(std::chrono::milliseconds(1500));  // away: it does not hold the finalize back
  ASSERT_FALSE((*store.list_brokers())[0].live);

  std::future<Result<void>> hb;
  at_check = [&] {
    hb = std::async(std::launch::async, [&] { return store.heartbeat_broker(NodeId{5}); });
    EXPECT_EQ(hb.wait_for(std::chrono::seconds(120)), std::future_status::ready);
  };
  armed = true;
  auto fin = store.finalize_feature(kInc);
  ASSERT_TRUE(hb.valid()) << "the finalize never checked liveness";
  ASSERT_EQ(hb.wait_for(std::chrono::seconds(120)), std::future_status::ready);
  auto h = hb.get();
  ASSERT_TRUE(fin.ok()) << fin.error().to_string();
  EXPECT_FALSE(h.ok()) << "a broker lacking " << kInc << " was admitted back during its finalize";
  if (!h.ok()) {
    EXPECT_EQ(h.error().code, Errc::unavailable) << h.error().to_string();
    EXPECT_EQ(h.error().outcome, Outcome::transient);
  }
  EXPECT_FALSE((*store.list_brokers())[0].live);
  auto after = store.heartbeat_broker(NodeId{5});  // the feature is final: refused for good
  ASSERT_FALSE(after.ok());
  EXPECT_EQ(after.error().code, Errc::conflict) << after.error().to_string();
}

// Review of the fix above: a heartbeat that read the finalized features before a finalize,
// and took the liveness lock only after that finalize had committed and left finalizing_,
// made the broker live. The finalize runs to its end inside the heartbeat, between the two
// (at the heartbeat's clock read).
TEST(RaftMetaFleet, AHeartbeatThatReadTheFeaturesBeforeAFinalizeEndedIsRefused) {
  TestHost host(base_config());
  host.set("metadata.bootstrap_hold_back", kHoldBoth);
  host.set("broker.session_timeout_ms", "1000");
  ManualClock clock;
  std::atomic<std::thread::id> hb_thread{};
  std::atomic<bool> armed{false};
  std::optional<Result<FeatureInfo>> fin;
  RaftMetaStore* store_ptr = nullptr;
  auto cfg = RaftMetaConfig::from_host(host);
  cfg.clock = [&] {
    if (std::this_thread::get_id() == hb_thread.load() && armed.exchange(false)) fin = store_ptr->finalize_feature(kInc);
    return clock.now();
  };
  RaftMetaStore store(host, cfg);
  store_ptr = &store;
  ASSERT_TRUE(store.start().ok());
  ASSERT_TRUE(store.register_broker({NodeId{5}, "h:5", "d5", "0.6.0", {}}).ok());
  clock.advance(std::chrono::milliseconds(1500));  // away: it does not hold the finalize back
  ASSERT_FALSE((*store.list_brokers())[0].live);
  armed = true;
  Result<void> h = Error(Errc::internal, "not run");
  std::thread t([&] {
    hb_thread = std::this_thread::get_id();
    h = store.heartbeat_broker(NodeId{5});
  });
  t.join();
  ASSERT_TRUE(fin.has_value()) << "the heartbeat never read the clock";
  ASSERT_TRUE(fin->ok()) << fin->error().to_string();
  EXPECT_FALSE(h.ok()) << "a broker lacking " << kInc << " was made live after its finalize";
  EXPECT_FALSE((*store.list_brokers())[0].live);
  auto after = store.heartbeat_broker(NodeId{5});
  ASSERT_FALSE(after.ok());
  EXPECT_EQ(after.error().code, Errc::conflict) << after.error().to_string();
}

TEST(RaftMetaFleet, PlacementRoundRobinsOverLiveBrokersAndEventsCarryAssignments) {
  TestHost host(base_config());
  RaftMetaStore store(host);
  ASSERT_TRUE(store.start().ok());
  make_namespace(store);
  // No broker: every shard unassigned.
  auto none = store.create_stream({"acme", "prod", "early"}, spec(2));
  ASSERT_TRUE(none.ok());
  auto snap0 = store.snapshot();
  ASSERT_EQ(snap0->assignments.size(), 2u);
  EXPECT_EQ(snap0->assignments[0].leader, NodeId{0});

  for (std::uint32_t id : {3u, 1u, 2u})
    ASSERT_TRUE(store.register_broker({NodeId{id}, "h", "d", "v", sluice::testing::all_features()}).ok());
  const StreamKey key{"acme", "prod", "orders"};
  auto s = store.create_stream(key, spec(6));
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  std::vector<Assignment> mine;
  auto snap = store.snapshot();
  ASSERT_TRUE(snap.ok());
  for (auto& a : snap->assignments)
    if (a.key == key) mine.push_back(a);
  ASSERT_EQ(mine.size(), 6u);
  // Consecutive shards go to consecutive brokers (sorted by id), wrapping around.
  for (std::size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(mine[i].generation, Generation{s->created_seq.value()});
    EXPECT_EQ(mine[i].incarnation, s->incarnation);
    std::uint32_t l = mine[i].leader.value();
    std::uint32_t next = mine[(i + 1) % 6].leader.value();
    EXPECT_EQ(next, l % 3 + 1) << "shard " << i;
    EXPECT_EQ(mine[i].replicas, std::vector<NodeId>{mine[i].leader});
  }
  EXPECT_EQ(mine[0].leader, mine[3].leader);

  auto d = store.delete_stream(key);
  ASSERT_TRUE(d.ok());
  auto tombs = store.list_tombstones();
  ASSERT_TRUE(tombs.ok());
  ASSERT_EQ(tombs->size(), 1u);
  EXPECT_EQ((*tombs)[0].deleted_up_to, s->incarnation);

  auto batch = store.changes_after(ChangeSeq{s->created_seq.value() - 1}, 100);
  ASSERT_FALSE(batch.events.empty());
  EXPECT_EQ(batch.events.front().kind, ChangeEvent::Kind::stream_created);
  EXPECT_EQ(batch.events.front().assignments.size(), 6u);
  EXPECT_EQ(batch.events.back().kind, ChangeEvent::Kind::stream_deleted);
  EXPECT_EQ(batch.events.back().assignments.size(), 6u);
  ASSERT_TRUE(batch.events.back().tombstone.has_value());
}

TEST(RaftMetaFleet, RestartKeepsTombstonesFeaturesAndBrokers) {
  TestHost host(base_config());
  host.set("raft.snapshot_threshold", "8");  // also exercise snapshot + log replay
  host.set("raft.snapshot_trailing", "2");
  std::uint64_t hash = 0;
  Incarnation first;
  {
    RaftMetaStore store(host);
    ASSERT_TRUE(store.start().ok());
    make_namespace(store);
    ASSERT_TRUE(store.register_broker({NodeId{4}, "h:4", "d4", "0.7.0", sluice::testing::all_features()}).ok());
    for (int i = 0; i < 4; ++i) {
      auto s = store.create_stream({"acme", "prod", "orders"}, spec(2));
      ASSERT_TRUE(s.ok()) << s.error().to_string();
      if (i == 0) first = s->incarnation;
      EXPECT_GE(s->incarnation, first);
      ASSERT_TRUE(store.delete_stream({"acme", "prod", "orders"}).ok());
    }
    hash = store.state_hash();
  }
  RaftMetaStore store(host);
  ASSERT_TRUE(store.start().ok());
  EXPECT_EQ(store.state_hash(), hash);
  auto tombs = store.list_tombstones();
  ASSERT_TRUE(tombs.ok());
  ASSERT_EQ(tombs->size(), 1u);
  EXPECT_GT((*tombs)[0].deleted_up_to, first);
  auto bs = store.list_brokers();
  ASSERT_EQ(bs->size(), 1u);
  EXPECT_EQ((*bs)[0].features, sluice::testing::all_features());
  auto fs = store.list_features();
  EXPECT_TRUE(find(*fs, kInc)->finalized);
  auto s = store.create_stream({"acme", "prod", "orders"}, spec());
  ASSERT_TRUE(s.ok());
  EXPECT_GT(s->incarnation, (*tombs)[0].deleted_up_to);
}

}  // namespace
}  // namespace sluice::raft_meta
