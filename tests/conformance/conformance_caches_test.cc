// The metadata conformance suite, caches: level 14, `cache_incarnations`
// (docs/metadata-levels.md), on every backend (conformance_test.cc instantiates the suite).
#include "conformance_fixture.h"
#include "sluice/levels.h"

namespace sluice::conformance {

const StreamKey kCache{"acme", "prod", "sessions"};

TEST_P(Conformance, CacheIncarnationsStrictlyIncreaseAcrossDeleteAndRecreate) {
  auto in = make();
  auto& s = *in->store;
  make_ns(s);
  std::vector<std::uint64_t> seen;
  for (int round = 0; round < 4; ++round) {
    auto c = s.create_cache(kCache, CacheSpec{60000});
    ASSERT_TRUE(c.ok()) << c.error().to_string();
    ASSERT_GT(c->incarnation.value(), 0u) << "finalized at bootstrap: never incarnation 0";
    if (!seen.empty()) {
      EXPECT_GT(c->incarnation.value(), seen.back());
    }
    seen.push_back(c->incarnation.value());
    EXPECT_EQ(c->key, kCache);
    EXPECT_EQ(c->spec.default_ttl_ms, 60000);
    auto g = s.get_cache(kCache);
    ASSERT_TRUE(g.ok()) << g.error().to_string();
    EXPECT_EQ(g->incarnation, c->incarnation);
    EXPECT_EQ(g->created_seq, c->created_seq);
    auto d = s.delete_cache(kCache);
    ASSERT_TRUE(d.ok()) << d.error().to_string();
    EXPECT_EQ(d->incarnation, c->incarnation);
    auto snap = s.snapshot();
    ASSERT_TRUE(snap.ok()) << snap.error().to_string();
    ASSERT_EQ(snap->cache_tombstones.size(), 1u) << "one cache tombstone per name, overwritten";
    EXPECT_EQ(snap->cache_tombstones[0].key, kCache);
    EXPECT_EQ(snap->cache_tombstones[0].deleted_up_to, c->incarnation);
    EXPECT_TRUE(snap->caches.empty());
    EXPECT_TRUE(snap->tombstones.empty()) << "cache tombstones are not stream tombstones";
    EXPECT_TRUE(s.list_tombstones()->empty());
  }
  EXPECT_EQ(s.get_cache(kCache).error().code, Errc::not_found);
}

TEST_P(Conformance, CacheChangesCarryTheCacheAndTheCacheTombstone) {
  auto in = make();
  auto& s = *in->store;
  make_ns(s);
  auto before = s.snapshot();
  ASSERT_TRUE(before.ok());
  Collector col;
  auto h = s.watch(before->seq, col.on_change(), col.on_resync());
  auto c = s.create_cache(kCache, CacheSpec{});
  ASSERT_TRUE(c.ok()) << c.error().to_string();
  {
    auto snap = s.snapshot();
    ASSERT_TRUE(snap.ok());
    ASSERT_EQ(snap->caches.size(), 1u);
    EXPECT_EQ(snap->caches[0].key, kCache);
    EXPECT_EQ(snap->caches[0].incarnation, c->incarnation);
    EXPECT_EQ(snap->caches[0].spec.default_ttl_ms, -1);
    EXPECT_EQ(snap->caches[0].created_seq, c->created_seq);
    EXPECT_GE(snap->seq, c->created_seq);
  }
  auto d = s.delete_cache(kCache);
  ASSERT_TRUE(d.ok()) << d.error().to_string();
  ASSERT_TRUE(pgtest::eventually([&] { return col.size() >= 2; }));
  auto evs = col.copy();
  ASSERT_EQ(evs.size(), 2u);
  EXPECT_EQ(evs[0].kind, ChangeEvent::Kind::cache_created);
  EXPECT_EQ(evs[0].seq, c->created_seq);
  EXPECT_EQ(evs[0].tenant, "acme");
  EXPECT_EQ(evs[0].ns, "prod");
  EXPECT_EQ(evs[0].cache.key, kCache);
  EXPECT_EQ(evs[0].cache.incarnation, c->incarnation);
  EXPECT_EQ(evs[0].cache.spec.default_ttl_ms, -1);
  EXPECT_FALSE(evs[0].cache_tombstone.has_value());
  EXPECT_EQ(evs[1].kind, ChangeEvent::Kind::cache_deleted);
  EXPECT_EQ(evs[1].cache.key, kCache);
  EXPECT_EQ(evs[1].cache.incarnation, c->incarnation);
  ASSERT_TRUE(evs[1].cache_tombstone.has_value());
  EXPECT_EQ(evs[1].cache_tombstone->key, kCache);
  EXPECT_EQ(evs[1].cache_tombstone->deleted_up_to, c->incarnation);
  EXPECT_EQ(evs[1].cache_tombstone->seq, evs[1].seq);
  EXPECT_FALSE(evs[1].tombstone.has_value()) << "the stream tombstone stays empty";
  EXPECT_LT(evs[0].seq, evs[1].seq);
  auto snap = s.snapshot();
  ASSERT_TRUE(snap.ok());
  ASSERT_EQ(snap->cache_tombstones.size(), 1u);
  EXPECT_EQ(snap->cache_tombstones[0].seq, evs[1].seq);
  EXPECT_EQ(col.resyncs.load(), 0);
}

TEST_P(Conformance, CacheLegacyBeforeFinalizeStoresZeroAndWritesNoTombstone) {
  auto in = make({.hold_back_incarnations = true});
  auto& s = *in->store;
  make_ns(s);
  for (int round = 0; round < 2; ++round) {
    auto c = s.create_cache(kCache, CacheSpec{});
    ASSERT_TRUE(c.ok()) << c.error().to_string();
    EXPECT_EQ(c->incarnation.value(), 0u);
    ASSERT_TRUE(s.delete_cache(kCache).ok());
    auto snap = s.snapshot();
    ASSERT_TRUE(snap.ok());
    EXPECT_TRUE(snap->cache_tombstones.empty()) << "no cache tombstone before the finalize";
  }
  // Finalizing stream_incarnations does not incarnate caches.
  ASSERT_TRUE(s.finalize_feature(kInc).ok());
  {
    auto c = s.create_cache(kCache, CacheSpec{});
    ASSERT_TRUE(c.ok()) << c.error().to_string();
    EXPECT_EQ(c->incarnation.value(), 0u);
  }
  // Finalize cache_incarnations with a cache at 0 alive: deleting it afterwards records
  // "incarnation 0 deleted" on both backends (raft-meta's flagged entry, postgres-meta's
  // level-14 writer), so a broker that slept through the delete drops the legacy data.
  auto f = s.finalize_feature(kCacheInc);
  ASSERT_TRUE(f.ok()) << f.error().to_string();
  EXPECT_TRUE(f->finalized);
  auto d0 = s.delete_cache(kCache);
  ASSERT_TRUE(d0.ok()) << d0.error().to_string();
  EXPECT_EQ(d0->incarnation.value(), 0u);
  {
    auto snap = s.snapshot();
    ASSERT_TRUE(snap.ok());
    ASSERT_EQ(snap->cache_tombstones.size(), 1u);
    EXPECT_EQ(snap->cache_tombstones[0].deleted_up_to, Incarnation{0});
  }
  // The next create is incarnated, and its delete raises the tombstone.
  auto c1 = s.create_cache(kCache, CacheSpec{});
  ASSERT_TRUE(c1.ok());
  EXPECT_GT(c1->incarnation.value(), 0u);
  ASSERT_TRUE(s.delete_cache(kCache).ok());
  auto snap = s.snapshot();
  ASSERT_TRUE(snap.ok());
  ASSERT_EQ(snap->cache_tombstones.size(), 1u);
  EXPECT_EQ(snap->cache_tombstones[0].deleted_up_to, c1->incarnation);
  auto c2 = s.create_cache(kCache, CacheSpec{});
  ASSERT_TRUE(c2.ok());
  EXPECT_GT(c2->incarnation, c1->incarnation);
}

TEST_P(Conformance, CacheIncarnationsFinalizeGateRefusesWhileAServingBrokerLacksIt) {
  auto in = make({.hold_back_incarnations = true});
  auto& s = *in->store;
  BrokerRegistration lacking = broker(7, true);
  lacking.features = {kInc};  // a build from before cache incarnations
  ASSERT_TRUE(s.register_broker(lacking).ok());
  ASSERT_TRUE(s.register_broker(broker(8, true)).ok());
  auto fs = s.list_features();
  ASSERT_TRUE(fs.ok());
  auto it = std::find_if(fs->begin(), fs->end(), [](auto& f) { return f.name == kCacheInc; });
  ASSERT_NE(it, fs->end());
  EXPECT_FALSE(it->finalized);
  EXPECT_EQ(it->required_level, kFlaggedEntriesLevel);
  EXPECT_EQ(it->lacking, std::vector<NodeId>{NodeId{7}});
  auto refused = s.finalize_feature(kCacheInc);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, Errc::conflict);
  EXPECT_NE(refused.error().message.find("7"), std::string::npos) << refused.error().message;
  ASSERT_TRUE(s.unregister_broker(NodeId{7}).ok());
  auto f1 = s.finalize_feature(kCacheInc);
  ASSERT_TRUE(f1.ok()) << f1.error().to_string();
  EXPECT_TRUE(f1->finalized);
  auto f2 = s.finalize_feature(kCacheInc);  // idempotent: the same answer
  ASSERT_TRUE(f2.ok());
  EXPECT_EQ(f2->finalized_seq, f1->finalized_seq);
  // A broker that lacks it is no longer admitted.
  auto again = s.register_broker(lacking);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().code, Errc::conflict);
  EXPECT_NE(again.error().message.find(kCacheInc), std::string::npos) << again.error().message;
  auto snap = s.snapshot();
  ASSERT_TRUE(snap.ok());
  EXPECT_EQ(snap->finalized_features, std::vector<std::string>{kCacheInc});
}

TEST_P(Conformance, CacheNamesSpecsAndStateErrors) {
  auto in = make();
  auto& s = *in->store;
  EXPECT_EQ(s.create_cache({"acme", "prod", "c"}, CacheSpec{}).error().code, Errc::not_found);
  make_ns(s);
  EXPECT_EQ(s.create_cache({"acme", "prod", "bad name"}, CacheSpec{}).error().code, Errc::invalid_name);
  EXPECT_EQ(s.create_cache({"acme", "prod", ""}, CacheSpec{}).error().code, Errc::invalid_name);
  EXPECT_EQ(s.create_cache({"acme", "prod", "../x"}, CacheSpec{}).error().code, Errc::invalid_name);
  EXPECT_EQ(s.create_cache({"acme", "nope", "c"}, CacheSpec{}).error().code, Errc::not_found);
  EXPECT_EQ(s.create_cache(kCache, CacheSpec{0}).error().code, Errc::invalid_argument);
  EXPECT_EQ(s.create_cache(kCache, CacheSpec{-5}).error().code, Errc::invalid_argument);
  EXPECT_EQ(s.create_cache(kCache, CacheSpec{10LL * 365 * 24 * 3600 * 1000 + 1}).error().code,
            Errc::invalid_argument);
  EXPECT_EQ(s.get_cache(kCache).error().code, Errc::not_found);
  EXPECT_EQ(s.delete_cache(kCache).error().code, Errc::not_found);
  EXPECT_EQ(s.get_cache({"acme", "prod", "bad name"}).error().code, Errc::invalid_name);
  EXPECT_EQ(s.list_caches("acme", "nope").error().code, Errc::not_found);
  EXPECT_TRUE(s.list_caches("acme", "prod")->empty());
  auto b = s.create_cache({"acme", "prod", "b"}, CacheSpec{1000});
  ASSERT_TRUE(b.ok()) << b.error().to_string();
  auto a = s.create_cache({"acme", "prod", "a"}, CacheSpec{});
  ASSERT_TRUE(a.ok()) << a.error().to_string();
  EXPECT_GT(a->created_seq, b->created_seq);
  EXPECT_EQ(s.create_cache({"acme", "prod", "a"}, CacheSpec{}).error().code, Errc::already_exists);
  // A stream and a cache may share a name: they are different things.
  auto st = s.create_stream({"acme", "prod", "a"}, spec());
  ASSERT_TRUE(st.ok()) << st.error().to_string();
  auto ls = s.list_caches("acme", "prod");
  ASSERT_TRUE(ls.ok()) << ls.error().to_string();
  ASSERT_EQ(ls->size(), 2u);
  EXPECT_EQ((*ls)[0].key.name, "a");
  EXPECT_EQ((*ls)[1].key.name, "b");
  EXPECT_EQ((*ls)[1].spec.default_ttl_ms, 1000);
  ASSERT_TRUE(s.delete_stream({"acme", "prod", "a"}).ok());
  EXPECT_TRUE(s.get_cache({"acme", "prod", "a"}).ok()) << "deleting the stream leaves the cache";
  // A namespace with caches is not deleted.
  EXPECT_EQ(s.delete_namespace("acme", "prod").error().code, Errc::conflict);
  ASSERT_TRUE(s.delete_cache({"acme", "prod", "a"}).ok());
  ASSERT_TRUE(s.delete_cache({"acme", "prod", "b"}).ok());
  ASSERT_TRUE(s.delete_namespace("acme", "prod").ok());
  auto snap = s.snapshot();
  ASSERT_TRUE(snap.ok());
  EXPECT_EQ(snap->cache_tombstones.size(), 2u) << "kept after the namespace is gone";
  EXPECT_EQ(snap->tombstones.size(), 1u);
}

}  // namespace sluice::conformance
