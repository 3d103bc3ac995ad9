// The metadata conformance suite, counters: level 18, the fleet feature `counters`
// (docs/metadata-levels.md), on every backend (conformance_test.cc instantiates the suite).
#include "conformance_fixture.h"
#include "sluice/levels.h"

namespace sluice::conformance {

const StreamKey kCounter{"acme", "prod", "hits"};

TEST_P(Conformance, CounterIncarnationsStrictlyIncreaseAcrossDeleteAndRecreate) {
  auto in = make();
  auto& s = *in->store;
  make_ns(s);
  std::vector<std::uint64_t> seen;
  for (int round = 0; round < 4; ++round) {
    auto c = s.create_counter(kCounter);
    ASSERT_TRUE(c.ok()) << c.error().to_string();
    ASSERT_GT(c->incarnation.value(), 0u) << "a counter is always incarnated";
    if (!seen.empty()) {
      EXPECT_GT(c->incarnation.value(), seen.back());
    }
    seen.push_back(c->incarnation.value());
    EXPECT_EQ(c->key, kCounter);
    auto g = s.get_counter(kCounter);
    ASSERT_TRUE(g.ok()) << g.error().to_string();
    EXPECT_EQ(*g, *c);
    auto d = s.delete_counter(kCounter);
    ASSERT_TRUE(d.ok()) << d.error().to_string();
    EXPECT_EQ(d->incarnation, c->incarnation);
    auto snap = s.snapshot();
    ASSERT_TRUE(snap.ok()) << snap.error().to_string();
    ASSERT_EQ(snap->counter_tombstones.size(), 1u) << "one counter tombstone per name, overwritten";
    EXPECT_EQ(snap->counter_tombstones[0].key, kCounter);
    EXPECT_EQ(snap->counter_tombstones[0].deleted_up_to, c->incarnation);
    EXPECT_TRUE(snap->counters.empty());
    EXPECT_TRUE(snap->tombstones.empty()) << "counter tombstones are not stream tombstones";
    EXPECT_TRUE(snap->cache_tombstones.empty()) << "nor cache tombstones";
  }
  EXPECT_EQ(s.get_counter(kCounter).error().code, Errc::not_found);
}

TEST_P(Conformance, CounterChangesCarryTheCounterAndItsTombstone) {
  auto in = make();
  auto& s = *in->store;
  make_ns(s);
  auto before = s.snapshot();
  ASSERT_TRUE(before.ok());
  Collector col;
  auto h = s.watch(before->seq, col.on_change(), col.on_resync());
  auto c = s.create_counter(kCounter);
  ASSERT_TRUE(c.ok()) << c.error().to_string();
  {
    auto snap = s.snapshot();
    ASSERT_TRUE(snap.ok());
    ASSERT_EQ(snap->counters.size(), 1u);
    EXPECT_EQ(snap->counters[0], *c);
    EXPECT_GE(snap->seq, c->created_seq);
  }
  auto d = s.delete_counter(kCounter);
  ASSERT_TRUE(d.ok()) << d.error().to_string();
  ASSERT_TRUE(pgtest::eventually([&] { return col.size() >= 2; }));
  auto evs = col.copy();
  ASSERT_EQ(evs.size(), 2u);
  EXPECT_EQ(evs[0].kind, ChangeEvent::Kind::counter_created);
  EXPECT_EQ(evs[0].seq, c->created_seq);
  EXPECT_EQ(evs[0].tenant, "acme");
  EXPECT_EQ(evs[0].ns, "prod");
  EXPECT_EQ(evs[0].counter, *c);
  EXPECT_FALSE(evs[0].counter_tombstone.has_value());
  EXPECT_FALSE(evs[0].cache_tombstone.has_value());
  EXPECT_EQ(evs[1].kind, ChangeEvent::Kind::counter_deleted);
  EXPECT_EQ(evs[1].counter.key, kCounter);
  EXPECT_EQ(evs[1].counter.incarnation, c->incarnation);
  ASSERT_TRUE(evs[1].counter_tombstone.has_value());
  EXPECT_EQ(evs[1].counter_tombstone->key, kCounter);
  EXPECT_EQ(evs[1].counter_tombstone->deleted_up_to, c->incarnation);
  EXPECT_EQ(evs[1].counter_tombstone->seq, evs[1].seq);
  EXPECT_FALSE(evs[1].tombstone.has_value());
}

// Held back at bootstrap (an upgraded cluster): creates are refused until the finalize,
// and the finalize waits for every serving broker to report `counters`.
TEST_P(Conformance, CountersNeedTheFeatureFinalizedAndEveryBrokerToReportIt) {
  auto in = make({.hold_back_incarnations = true});
  auto& s = *in->store;
  make_ns(s);
  auto refused = s.create_counter(kCounter);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, Errc::conflict);
  EXPECT_NE(refused.error().message.find(kCountersF), std::string::npos) << refused.error().message;
  BrokerRegistration lacking = broker(7, true);
  lacking.features = {kInc, kCacheInc, kRepl, kReassign};  // a level-17 broker
  ASSERT_TRUE(s.register_broker(lacking).ok());
  auto fs = s.list_features();
  ASSERT_TRUE(fs.ok());
  auto it = std::find_if(fs->begin(), fs->end(), [](auto& f) { return f.name == kCountersF; });
  ASSERT_NE(it, fs->end());
  EXPECT_FALSE(it->finalized);
  EXPECT_EQ(it->required_level, kCountersLevel);
  EXPECT_EQ(it->lacking, std::vector<NodeId>{NodeId{7}});
  auto gate = s.finalize_feature(kCountersF);
  ASSERT_FALSE(gate.ok());
  EXPECT_EQ(gate.error().code, Errc::conflict);
  ASSERT_TRUE(s.unregister_broker(NodeId{7}).ok());
  auto f = s.finalize_feature(kCountersF);
  ASSERT_TRUE(f.ok()) << f.error().to_string();
  EXPECT_TRUE(f->finalized);
  auto again = s.register_broker(lacking);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().code, Errc::conflict);
  auto c = s.create_counter(kCounter);
  ASSERT_TRUE(c.ok()) << c.error().to_string();
  EXPECT_GT(c->incarnation.value(), 0u);
}

TEST_P(Conformance, CounterNamesAndStateErrors) {
  auto in = make();
  auto& s = *in->store;
  EXPECT_EQ(s.create_counter({"acme", "prod", "c"}).error().code, Errc::not_found);
  make_ns(s);
  EXPECT_EQ(s.create_counter({"acme", "prod", "bad name"}).error().code, Errc::invalid_name);
  EXPECT_EQ(s.create_counter({"acme", "prod", ""}).error().code, Errc::invalid_name);
  EXPECT_EQ(s.create_counter({"acme", "prod", "../x"}).error().code, Errc::invalid_name);
  EXPECT_EQ(s.create_counter({"acme", "nope", "c"}).error().code, Errc::not_found);
  EXPECT_EQ(s.get_counter(kCounter).error().code, Errc::not_found);
  EXPECT_EQ(s.delete_counter(kCounter).error().code, Errc::not_found);
  EXPECT_EQ(s.get_counter({"acme", "prod", "bad name"}).error().code, Errc::invalid_name);
  EXPECT_EQ(s.list_counters("acme", "nope").error().code, Errc::not_found);
  EXPECT_TRUE(s.list_counters("acme", "prod")->empty());
  auto b = s.create_counter({"acme", "prod", "b"});
  ASSERT_TRUE(b.ok()) << b.error().to_string();
  auto a = s.create_counter({"acme", "prod", "a"});
  ASSERT_TRUE(a.ok()) << a.error().to_string();
  EXPECT_GT(a->created_seq, b->created_seq);
  EXPECT_EQ(s.create_counter({"acme", "prod", "a"}).error().code, Errc::already_exists);
  // A cache and a counter may share a name: they are different things.
  ASSERT_TRUE(s.create_cache({"acme", "prod", "a"}, CacheSpec{}).ok());
  auto ls = s.list_counters("acme", "prod");
  ASSERT_TRUE(ls.ok()) << ls.error().to_string();
  ASSERT_EQ(ls->size(), 2u);
  EXPECT_EQ((*ls)[0].key.name, "a");
  EXPECT_EQ((*ls)[1].key.name, "b");
  ASSERT_TRUE(s.delete_cache({"acme", "prod", "a"}).ok());
  EXPECT_TRUE(s.get_counter({"acme", "prod", "a"}).ok()) << "deleting the cache leaves the counter";
  // A namespace with counters is not deleted.
  EXPECT_EQ(s.delete_namespace("acme", "prod").error().code, Errc::conflict);
  ASSERT_TRUE(s.delete_counter({"acme", "prod", "a"}).ok());
  ASSERT_TRUE(s.delete_counter({"acme", "prod", "b"}).ok());
  ASSERT_TRUE(s.delete_namespace("acme", "prod").ok());
  auto snap = s.snapshot();
  ASSERT_TRUE(snap.ok());
  EXPECT_EQ(snap->counter_tombstones.size(), 2u) << "kept after the namespace is gone";
}

}  // namespace sluice::conformance
