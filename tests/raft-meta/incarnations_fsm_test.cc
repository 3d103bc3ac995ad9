// CatalogFsm at level 10: incarnations, tombstones, fleet features, brokers, assignments,
// and the mixed-level rule (felix post-mortem, docs/metadata-levels.md): entries written the way
// a level-8 proposer writes them store what level 8 stores.
#include <gtest/gtest.h>

#include <sqlite3.h>

#include <cstring>

#include "catalog_fsm.h"
#include "command.h"
#include "proposer.h"
#include "sluice/features.h"

namespace sluice::raft_meta {
namespace {

const StreamKey kOrders{"acme", "prod", "orders"};
const std::string kInc(kStreamIncarnations);

StreamSpec spec(std::uint32_t shards = 1) {
  StreamSpec s;
  s.shards = shards;
  return s;
}

class Feeder {
 public:
  explicit Feeder(CatalogFsm& fsm) : fsm_(fsm) {}
  ApplyResult operator()(const Command& c) {
    entries_.push_back(encode_command(c));
    return fsm_.apply(next_++, entries_.back());
  }
  std::uint64_t next() const { return next_; }
  const std::vector<std::string>& entries() const { return entries_; }

 private:
  CatalogFsm& fsm_;
  std::uint64_t next_ = 1;
  std::vector<std::string> entries_;
};

Command init(std::vector<std::string> finalize = {}) {
  Command c = Command::init_cluster("11111111-2222-4333-8444-555555555555");
  c.finalize_features = std::move(finalize);
  return c;
}

// A create as a level-10 proposer writes it once it sees the feature finalized.
Command create_at(const StreamKey& k, std::uint64_t proposed, std::uint32_t shards = 1) {
  Command c = Command::create_stream(k, spec(shards), static_cast<std::int64_t>(proposed));
  c.proposed_incarnation = proposed;
  return c;
}

// Exactly what a level-8 proposer writes: level 8, proposed 0, unflagged, no placement.
Command level8_create(const StreamKey& k, std::int64_t clock_us) {
  Command c = Command::create_stream(k, spec(), clock_us);
  c.level = 8;
  return c;
}
Command level8_delete(const StreamKey& k) {
  Command c = Command::delete_stream(k);
  c.level = 8;
  return c;
}

void setup_namespace(Feeder& f, std::vector<std::string> finalize) {
  ASSERT_TRUE(f(init(std::move(finalize))).ok());
  ASSERT_TRUE(f(Command::create_tenant("acme")).ok());
  ASSERT_TRUE(f(Command::create_namespace("acme", "prod")).ok());
}

TEST(Incarnations, CreateDeleteRecreateAfterFinalizeIncarnationsStrictlyIncrease) {
  CatalogFsm fsm;
  Feeder f(fsm);
  setup_namespace(f, {kInc});
  ASSERT_TRUE(fsm.is_finalized(kInc));

  auto c1 = f(create_at(kOrders, 1000));
  ASSERT_TRUE(c1.ok()) << c1.error->to_string();
  EXPECT_EQ(c1.stream.incarnation, Incarnation{1000});
  auto d1 = f(Command::delete_stream(kOrders));
  ASSERT_TRUE(d1.ok());
  ASSERT_TRUE(d1.tombstone.has_value());
  EXPECT_EQ(d1.tombstone->deleted_up_to, Incarnation{1000});
  EXPECT_EQ(d1.tombstone->seq, d1.seq);
  ASSERT_TRUE(fsm.tombstone(kOrders).has_value());
  EXPECT_EQ(fsm.tombstone(kOrders)->deleted_up_to, Incarnation{1000});

  // The proposer's clock went backwards (or a restore rewound it): still above the tombstone.
  auto c2 = f(create_at(kOrders, 500));
  ASSERT_TRUE(c2.ok());
  EXPECT_EQ(c2.stream.incarnation, Incarnation{1001});
  auto d2 = f(Command::delete_stream(kOrders));
  ASSERT_TRUE(d2.ok());
  EXPECT_EQ(fsm.tombstone(kOrders)->deleted_up_to, Incarnation{1001});  // overwritten
  EXPECT_EQ(fsm.tombstone(kOrders)->seq, d2.seq);
  EXPECT_EQ(fsm.tombstone_count(), 1u);  // one row per name

  auto c3 = f(create_at(kOrders, 9000));
  ASSERT_TRUE(c3.ok());
  EXPECT_EQ(c3.stream.incarnation, Incarnation{9000});
  EXPECT_GT(c3.stream.incarnation, c2.stream.incarnation);
  EXPECT_GT(c2.stream.incarnation, c1.stream.incarnation);
  // The tombstone stays while the name lives again (kept forever).
  EXPECT_EQ(fsm.tombstone(kOrders)->deleted_up_to, Incarnation{1001});
  EXPECT_EQ(fsm.catalog_snapshot().tombstones.size(), 1u);
}

TEST(Incarnations, LegacyRecreateBeforeFinalizeStoresZeroAndWritesNoTombstone) {
  CatalogFsm fsm;
  Feeder f(fsm);
  setup_namespace(f, {});  // held back: not finalized
  ASSERT_FALSE(fsm.is_finalized(kInc));
  // Even a non-zero proposal stores 0 before the finalize.
  auto c1 = f(create_at(kOrders, 1000));
  ASSERT_TRUE(c1.ok());
  EXPECT_EQ(c1.stream.incarnation, Incarnation{0});
  auto d1 = f(Command::delete_stream(kOrders));
  ASSERT_TRUE(d1.ok());
  EXPECT_FALSE(d1.tombstone.has_value());
  auto c2 = f(create_at(kOrders, 2000));
  ASSERT_TRUE(c2.ok());
  EXPECT_EQ(c2.stream.incarnation, Incarnation{0});
  EXPECT_EQ(fsm.tombstone_count(), 0u);
}

TEST(Incarnations, DeleteOfAStreamAtZeroWritesNoTombstoneEvenAfterFinalize) {
  CatalogFsm fsm;
  Feeder f(fsm);
  setup_namespace(f, {});
  ASSERT_EQ(f(create_at(kOrders, 0)).stream.incarnation, Incarnation{0});
  auto fin = f(Command::finalize_feature(kInc));
  ASSERT_TRUE(fin.ok()) << fin.error->to_string();
  EXPECT_EQ(fin.finalized_seq, fin.seq);
  auto d = f(Command::delete_stream(kOrders));
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d.tombstone.has_value());
  EXPECT_EQ(fsm.tombstone_count(), 0u);
  // The next create after the finalize gets a real incarnation.
  auto c = f(create_at(kOrders, 777));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c.stream.incarnation, Incarnation{777});
}

// The felix rollout hole: a level-8 member proposes after the finalize committed. Every
// entry it writes must be decided the way level 8 decides it, on every member: incarnation
// 0 and no tombstone, even where an earlier (level-10) delete left a tombstone for the name.
// Fails if decide_create_incarnation loses its "unflagged 0 stays 0" rule (the recreate of
// `orders` would store tombstone+1) or decide_delete_tombstone loses "no tombstone for an
// unflagged delete at 0" (level-8 deletes would write rows).
void check_level8_entries(bool finalized) {
  SCOPED_TRACE(finalized ? "feature finalized" : "feature not finalized");
  CatalogFsm fsm;
  Feeder f(fsm);
  setup_namespace(f, finalized ? std::vector<std::string>{kInc} : std::vector<std::string>{});
  // Before the level-8 member speaks: a level-10 member created and deleted `orders`.
  ASSERT_TRUE(f(create_at(kOrders, 5000)).ok());
  ASSERT_TRUE(f(Command::delete_stream(kOrders)).ok());
  const auto tombstones_before = fsm.list_tombstones();
  ASSERT_EQ(tombstones_before.size(), finalized ? 1u : 0u);

  // Now entries exactly as a level-8 proposer writes them.
  const StreamKey fresh{"acme", "prod", "fresh"};
  std::vector<ApplyResult> rs;
  rs.push_back(f(level8_create(kOrders, 1700000000000000)));
  rs.push_back(f(level8_create(fresh, 1700000000000001)));
  rs.push_back(f(level8_delete(kOrders)));
  rs.push_back(f(level8_delete(fresh)));
  rs.push_back(f(level8_create(kOrders, 1700000000000002)));
  rs.push_back(f(level8_create(fresh, 1700000000000003)));
  for (auto& r : rs) ASSERT_TRUE(r.ok()) << r.error->to_string();

  // What level 8 stores: every stream at incarnation 0, and no tombstone from these entries.
  for (auto& r : rs) EXPECT_EQ(r.stream.incarnation, Incarnation{0}) << "entry " << r.seq.value();
  EXPECT_FALSE(rs[2].tombstone.has_value());
  EXPECT_FALSE(rs[3].tombstone.has_value());
  auto snap = fsm.catalog_snapshot();
  ASSERT_EQ(snap.streams.size(), 2u);
  for (auto& s : snap.streams) EXPECT_EQ(s.incarnation, Incarnation{0}) << s.key.to_string();
  ASSERT_EQ(snap.tombstones.size(), tombstones_before.size());
  for (std::size_t i = 0; i < snap.tombstones.size(); ++i) {
    EXPECT_EQ(snap.tombstones[i].deleted_up_to, tombstones_before[i].deleted_up_to);
    EXPECT_EQ(snap.tombstones[i].seq, tombstones_before[i].seq);
  }
  for (auto& a : snap.assignments) EXPECT_EQ(a.incarnation, Incarnation{0});
}

TEST(Incarnations, stream_entries_from_a_level_8_proposer_store_what_level_8_stores) {
  check_level8_entries(/*finalized=*/true);
  check_level8_entries(/*finalized=*/false);
}

// Caches, at the last level before 14 (felix post-mortem: "Caches have the same test against
// level 13"; this product's last level before 14 is 10). Entries written the way a level-10
// proposer writes cache creates and deletes -- stamp_entry at level 10: proposed 0,
// unflagged -- store what level 10 stores: every cache at incarnation 0, and no cache
// tombstone from them, with cache_incarnations finalized or not, even where an earlier
// level-14 delete left a tombstone for the name. Fails if decide_create_incarnation loses
// "unflagged 0 stays 0" (the recreate of `sessions` would store tombstone+1) or
// decide_delete_tombstone loses "no tombstone for an unflagged delete at 0".
void check_level10_cache_entries(bool finalized) {
  SCOPED_TRACE(finalized ? "cache_incarnations finalized" : "cache_incarnations not finalized");
  CatalogFsm fsm;  // a level-14 member: it decides these entries like every other member
  Feeder f(fsm);
  std::vector<std::string> fin{kInc};
  if (finalized) fin.push_back(std::string(kCacheIncarnations));
  setup_namespace(f, fin);
  const StreamKey sessions{"acme", "prod", "sessions"};
  // Before: a level-14 proposer (every member at 14) created and deleted `sessions`.
  ProposerView at14{MetadataLevel{14}, MetadataLevel{14}, true, finalized};
  Command c14 = Command::create_cache(sessions, CacheSpec{}, 0);
  ASSERT_TRUE(stamp_entry(c14, at14, 9000).ok());
  ASSERT_TRUE(f(c14).ok());
  Command d14 = Command::delete_cache(sessions);
  ASSERT_TRUE(stamp_entry(d14, at14, 9001).ok());
  auto del14 = f(d14);
  ASSERT_TRUE(del14.ok());
  const auto tombstones_before = fsm.list_cache_tombstones();
  // Finalized: the flagged delete wrote tombstone 9000. Not finalized: the create stored 0
  // and the delete of a cache at 0 wrote none (a recreate must stay servable at 0).
  ASSERT_EQ(tombstones_before.size(), finalized ? 1u : 0u);
  if (finalized) {
    EXPECT_EQ(tombstones_before[0].deleted_up_to, Incarnation{9000});
  }

  // Now entries exactly as a level-10 proposer writes them (in a group at 10).
  const ProposerView at10{MetadataLevel{10}, MetadataLevel{10}, true, finalized};
  const StreamKey fresh{"acme", "prod", "fresh"};
  auto level10 = [&](Command c) {
    EXPECT_TRUE(stamp_entry(c, at10, 1700000000000000).ok());
    EXPECT_EQ(c.proposed_incarnation, 0u);
    EXPECT_EQ(c.incarnations, IncarnationRule::legacy);
    return f(c);
  };
  std::vector<ApplyResult> rs;
  rs.push_back(level10(Command::create_cache(sessions, CacheSpec{}, 0)));
  rs.push_back(level10(Command::create_cache(fresh, CacheSpec{60000}, 0)));
  rs.push_back(level10(Command::delete_cache(sessions)));
  rs.push_back(level10(Command::delete_cache(fresh)));
  rs.push_back(level10(Command::create_cache(sessions, CacheSpec{}, 0)));
  rs.push_back(level10(Command::create_cache(fresh, CacheSpec{}, 0)));
  for (auto& r : rs) ASSERT_TRUE(r.ok()) << r.error->to_string();
  for (auto& r : rs) EXPECT_EQ(r.cache.incarnation, Incarnation{0}) << "entry " << r.seq.value();
  EXPECT_FALSE(rs[2].tombstone.has_value());
  EXPECT_FALSE(rs[3].tombstone.has_value());
  auto snap = fsm.catalog_snapshot();
  ASSERT_EQ(snap.caches.size(), 2u);
  for (auto& c : snap.caches) EXPECT_EQ(c.incarnation, Incarnation{0}) << c.key.to_string();
  ASSERT_EQ(snap.cache_tombstones.size(), tombstones_before.size());
  for (std::size_t k = 0; k < snap.cache_tombstones.size(); ++k) {
    EXPECT_EQ(snap.cache_tombstones[k].deleted_up_to, tombstones_before[k].deleted_up_to);
    EXPECT_EQ(snap.cache_tombstones[k].seq, tombstones_before[k].seq);
  }
}

TEST(Incarnations, cache_entries_from_a_level_10_proposer_store_what_level_10_stores) {
  check_level10_cache_entries(/*finalized=*/true);
  check_level10_cache_entries(/*finalized=*/false);
}

// docs/metadata-levels.md (review finding): an entry above this build's level must stop the
// member, not be refused and skipped — skipping decides it differently from a build that
// knows it, and the members would diverge for good.
TEST(Incarnations, AFlaggedEntryHoldsAMemberBelowLevel14InsteadOfBeingSkipped) {
  CatalogFsm fsm(kDefaultChangeRetention, MetadataLevel{10});
  Feeder f(fsm);
  setup_namespace(f, {kInc});
  const auto before = fsm.state_hash();
  const auto applied = fsm.applied();
  Command c = create_at(kOrders, 10);
  c.incarnations = IncarnationRule::flagged;
  auto r = f(c);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error->code, Errc::unavailable);
  ASSERT_TRUE(fsm.held().has_value());
  EXPECT_EQ(fsm.held()->index, applied.value() + 1);
  EXPECT_NE(fsm.held()->reason.find("level 14"), std::string::npos) << fsm.held()->reason;
  EXPECT_EQ(fsm.held()->required, MetadataLevel{14});
  // Later entries change nothing; applied stays before the held entry; no snapshot.
  auto later = f(create_at({"acme", "prod", "other"}, 11));
  ASSERT_FALSE(later.ok());
  EXPECT_EQ(fsm.state_hash(), before);
  EXPECT_EQ(fsm.applied(), applied);
  EXPECT_TRUE(fsm.snapshot().empty());
  EXPECT_EQ(fsm.get_stream(kOrders).error().code, Errc::not_found);
}

TEST(Incarnations, ACommandOfANewerBuildHoldsTheMemberButGarbageIsRejected) {
  CatalogFsm fsm;
  Feeder f(fsm);
  setup_namespace(f, {kInc});
  const auto applied = fsm.applied();
  // Garbage is rejected identically by every build: applied moves on.
  EXPECT_FALSE(fsm.apply(applied.value() + 1, "garbage").ok());
  EXPECT_FALSE(fsm.held().has_value());
  EXPECT_EQ(fsm.applied().value(), applied.value() + 1);
  // A well-formed command this build does not know holds it.
  EXPECT_FALSE(fsm.apply(applied.value() + 2, R"({"v":1,"op":"create_gauge","level":19})").ok());
  ASSERT_TRUE(fsm.held().has_value());
  EXPECT_EQ(fsm.held()->index, applied.value() + 2);
  CatalogFsm other;
  Feeder g(other);
  setup_namespace(g, {kInc});
  EXPECT_FALSE(other.apply(applied.value() + 1, R"({"v":2,"op":"create_stream"})").ok());
  EXPECT_TRUE(other.held().has_value());
}

TEST(Fleet, RegistrationLackingAFinalizedFeatureIsRefused) {
  CatalogFsm fsm;
  Feeder f(fsm);
  setup_namespace(f, {});
  BrokerRegistration old{NodeId{7}, "10.0.0.7:8080", "dir-7", "0.6.0-preview.7", {}};
  auto r1 = f(Command::register_broker(old));
  ASSERT_TRUE(r1.ok()) << r1.error->to_string();  // nothing finalized yet
  EXPECT_EQ(r1.broker.registered_seq, r1.seq);
  ASSERT_TRUE(f(Command::finalize_feature(kInc)).ok());
  BrokerRegistration old2 = old;
  old2.id = NodeId{8};
  auto r2 = f(Command::register_broker(old2));
  ASSERT_FALSE(r2.ok());
  EXPECT_EQ(r2.error->code, Errc::conflict);
  EXPECT_EQ(r2.error->outcome, Outcome::definite);
  EXPECT_FALSE(fsm.broker(NodeId{8}).has_value());
  BrokerRegistration upgraded{NodeId{8}, "10.0.0.8:8080", "dir-8", "0.7.0", {kInc}};
  ASSERT_TRUE(f(Command::register_broker(upgraded)).ok());
  ASSERT_EQ(fsm.list_brokers().size(), 2u);
  EXPECT_EQ(fsm.broker(NodeId{8})->features, std::vector<std::string>{kInc});
  auto u = f(Command::unregister_broker(NodeId{7}));
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(f(Command::unregister_broker(NodeId{7})).error->code, Errc::not_found);
  EXPECT_EQ(fsm.list_brokers().size(), 1u);

  auto ch = fsm.changes_after(ChangeSeq{0}, 100);
  using K = ChangeEvent::Kind;
  std::vector<K> kinds;
  for (auto& e : ch.events) kinds.push_back(e.kind);
  std::vector<K> want{K::tenant_created, K::namespace_created, K::broker_registered,
                      K::feature_finalized, K::broker_registered, K::broker_unregistered};
  EXPECT_EQ(kinds, want);
  EXPECT_EQ(ch.events[3].feature, kInc);
  EXPECT_EQ(ch.events[4].broker.id, NodeId{8});
  EXPECT_EQ(ch.events[4].broker.features, std::vector<std::string>{kInc});
  EXPECT_EQ(ch.events[5].broker.id, NodeId{7});
}

// Unknown features are refused by the proposer (RaftMetaStore::finalize_feature); apply
// records any well-formed name, because "known" depends on the applying build.
TEST(Fleet, FinalizeIsIdempotentAndApplyDoesNotDependOnTheBuildsFeatureList) {
  CatalogFsm fsm;
  Feeder f(fsm);
  setup_namespace(f, {});
  auto a = f(Command::finalize_feature(kInc));
  ASSERT_TRUE(a.ok());
  auto changes = fsm.change_count();
  auto b = f(Command::finalize_feature(kInc));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b.finalized_seq, a.finalized_seq);  // unchanged
  EXPECT_EQ(fsm.change_count(), changes);       // no second event
  auto u = f(Command::finalize_feature("feature_of_a_newer_build"));
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(fsm.finalized_features().size(), 2u);
  auto bad = f(Command::finalize_feature("Bad Name"));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error->code, Errc::invalid_argument);
}

TEST(Fleet, InitClusterFinalizesTheListedFeaturesAtItsIndex) {
  CatalogFsm fsm;
  Feeder f(fsm);
  ASSERT_TRUE(f(init({kInc})).ok());
  auto fin = fsm.finalized_features();
  ASSERT_EQ(fin.size(), 1u);
  EXPECT_EQ(fin.at(kInc), ChangeSeq{1});
  CatalogFsm none;
  Feeder g(none);
  ASSERT_TRUE(g(init()).ok());
  EXPECT_TRUE(none.finalized_features().empty());
}

TEST(Assignments, CreateWritesOneRowPerShardAtTheCreatesIndexAndDeleteRemovesThem) {
  CatalogFsm fsm;
  Feeder f(fsm);
  setup_namespace(f, {kInc});
  Command c = create_at(kOrders, 4242, 3);
  c.placement = {{2, {2}}, {3, {3}}, {1, {1}}};
  auto r = f(c);
  ASSERT_TRUE(r.ok()) << r.error->to_string();
  ASSERT_EQ(r.assignments.size(), 3u);
  auto rows = fsm.assignments(kOrders);
  ASSERT_EQ(rows.size(), 3u);
  const std::uint32_t leaders[] = {2, 3, 1};
  for (std::uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(rows[i].shard, ShardIndex{i});
    EXPECT_EQ(rows[i].generation, first_generation(r.seq));
    EXPECT_EQ(rows[i].generation, Generation{r.seq.value()});
    EXPECT_EQ(rows[i].incarnation, Incarnation{4242});
    EXPECT_EQ(rows[i].leader, NodeId{leaders[i]});
    EXPECT_EQ(rows[i].replicas, std::vector<NodeId>{NodeId{leaders[i]}});
  }
  // Without a placement (an older proposer's entry) every shard is unassigned.
  auto legacy = f(level8_create({"acme", "prod", "legacy"}, 1));
  ASSERT_TRUE(legacy.ok());
  ASSERT_EQ(legacy.assignments.size(), 1u);
  EXPECT_EQ(legacy.assignments[0].leader, NodeId{0});
  EXPECT_EQ(legacy.assignments[0].generation, Generation{legacy.seq.value()});
  // A placement that does not match the shard count is refused.
  Command bad = create_at({"acme", "prod", "bad"}, 1, 2);
  bad.placement = {{1, {1}}};
  EXPECT_EQ(f(bad).error->code, Errc::invalid_argument);

  auto d = f(Command::delete_stream(kOrders));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d.assignments.size(), 3u);
  EXPECT_TRUE(fsm.assignments(kOrders).empty());

  // The change feed carries the assignment changes (and the tombstone).
  auto ch = fsm.changes_after(ChangeSeq{r.seq.value() - 1}, 100);
  ASSERT_FALSE(ch.resync);
  ASSERT_EQ(ch.events.size(), 3u);
  EXPECT_EQ(ch.events[0].kind, ChangeEvent::Kind::stream_created);
  ASSERT_EQ(ch.events[0].assignments.size(), 3u);
  EXPECT_EQ(ch.events[0].assignments[1].leader, NodeId{3});
  EXPECT_EQ(ch.events[0].assignments[1].key, kOrders);
  EXPECT_EQ(ch.events[0].assignments[1].generation, Generation{r.seq.value()});
  const auto& del = ch.events[2];
  EXPECT_EQ(del.kind, ChangeEvent::Kind::stream_deleted);
  ASSERT_EQ(del.assignments.size(), 3u);
  EXPECT_EQ(del.assignments[2].leader, NodeId{1});
  EXPECT_EQ(del.assignments[2].incarnation, Incarnation{4242});
  ASSERT_TRUE(del.tombstone.has_value());
  EXPECT_EQ(del.tombstone->deleted_up_to, Incarnation{4242});
  EXPECT_EQ(del.tombstone->seq, d.seq);
  // Recreate: the new first generation lands above the deleted stream's.
  auto again = f(create_at(kOrders, 1));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(assignment_supersedes(again.assignments[0].incarnation,
                                    again.assignments[0].generation, Incarnation{4242},
                                    Generation{r.seq.value()}));
}

std::vector<std::string> level10_entries() {
  CatalogFsm scratch;
  Feeder f(scratch);
  f(init({}));
  f(Command::create_tenant("acme"));
  f(Command::create_namespace("acme", "prod"));
  f(Command::register_broker({NodeId{1}, "a:1", "d1", "v", {kInc}}));
  f(Command::register_broker({NodeId{2}, "a:2", "d2", "v", {}}));
  f(create_at(kOrders, 0));
  f(Command::unregister_broker(NodeId{2}));
  f(Command::finalize_feature(kInc));
  f(Command::delete_stream(kOrders));
  Command c = create_at(kOrders, 100, 2);
  c.placement = {{1, {1}}, {0, {}}};
  f(c);
  f(Command::delete_stream(kOrders));
  f(create_at(kOrders, 50));
  f(Command::register_broker({NodeId{3}, "a:3", "d3", "v", {}}));  // refused
  f(Command::finalize_feature("nope"));                             // refused
  return f.entries();
}

TEST(Determinism, TwoFsmsFedTheSameLevel10EntriesHaveEqualStateAndSnapshotsRestoreEqual) {
  auto entries = level10_entries();
  CatalogFsm a, b;
  std::uint64_t i = 1;
  for (auto& e : entries) {
    auto ra = a.apply(i, e);
    auto rb = b.apply(i, e);
    EXPECT_EQ(ra.ok(), rb.ok()) << "entry " << i;
    EXPECT_EQ(ra.stream.incarnation, rb.stream.incarnation) << "entry " << i;
    i += 2;
  }
  EXPECT_EQ(a.state_hash(), b.state_hash());
  EXPECT_EQ(a.tombstone(kOrders)->deleted_up_to, Incarnation{100});
  EXPECT_EQ(a.get_stream(kOrders)->incarnation, Incarnation{101});

  CatalogFsm c;
  ASSERT_TRUE(c.restore(a.snapshot()).ok());
  EXPECT_EQ(c.state_hash(), a.state_hash());
  auto sa = a.catalog_snapshot();
  auto sc = c.catalog_snapshot();
  EXPECT_EQ(sc.tombstones.size(), sa.tombstones.size());
  EXPECT_EQ(sc.assignments.size(), sa.assignments.size());
  EXPECT_EQ(sc.finalized_features, sa.finalized_features);
  EXPECT_EQ(sc.brokers.size(), 1u);
  // The restored copy keeps deciding alike.
  auto e = encode_command(Command::delete_stream(kOrders));
  EXPECT_EQ(a.apply(i, e).tombstone->deleted_up_to, c.apply(i, e).tombstone->deleted_up_to);
  EXPECT_EQ(a.state_hash(), c.state_hash());

  // Each new table is part of the hash.
  CatalogFsm d, g;
  d.apply(1, entries[0]);
  g.apply(1, entries[0]);
  EXPECT_EQ(d.state_hash(), g.state_hash());
  d.apply(2, encode_command(Command::register_broker({NodeId{9}, "x", "y", "z", {}})));
  g.apply(2, encode_command(Command::register_broker({NodeId{9}, "x", "y", "z2", {}})));
  EXPECT_NE(d.state_hash(), g.state_hash());
}

TEST(Determinism, ApplyIgnoresTheProposersLevelField) {
  // Same entry content, different `level` recorded: the decision is the same.
  CatalogFsm a, b;
  Feeder fa(a), fb(b);
  setup_namespace(fa, {kInc});
  setup_namespace(fb, {kInc});
  Command c8 = create_at(kOrders, 300);
  c8.level = 8;
  Command c10 = create_at(kOrders, 300);
  c10.level = 10;
  EXPECT_EQ(fa(c8).stream.incarnation, fb(c10).stream.incarnation);
}

TEST(CommandCodec, Level10FieldsRoundTripAndOldEntriesDecodeWithDefaults) {
  Command c = create_at(kOrders, 5, 2);
  c.placement = {{4, {4, 5}}, {0, {}}};
  auto d = decode_command(encode_command(c));
  ASSERT_TRUE(d.ok()) << d.error().to_string();
  EXPECT_EQ(d->placement, c.placement);
  EXPECT_EQ(d->level, kBuildMetadataLevel.value());

  Command i = init({kInc});
  auto di = decode_command(encode_command(i));
  ASSERT_TRUE(di.ok());
  EXPECT_EQ(di->finalize_features, std::vector<std::string>{kInc});

  BrokerRegistration reg{NodeId{3}, "h:1", "dir", "1.0", {"a", "b"}};
  auto dr = decode_command(encode_command(Command::register_broker(reg)));
  ASSERT_TRUE(dr.ok());
  EXPECT_EQ(dr->broker.id, NodeId{3});
  EXPECT_EQ(dr->broker.features, reg.features);
  EXPECT_EQ(decode_command(encode_command(Command::unregister_broker(NodeId{3})))->broker.id,
            NodeId{3});
  EXPECT_EQ(decode_command(encode_command(Command::finalize_feature(kInc)))->feature, kInc);

  // Entries written by the previous (level 8) build: no placement, no finalize_features.
  auto old = decode_command(
      R"({"v":1,"op":"create_stream","level":8,"tenant":"acme","ns":"prod","name":"orders",)"
      R"("proposed_incarnation":0,"incarnations":false,"spec":{"shards":3,"max_bytes":-1,)"
      R"("max_age_ms":-1,"ack":"leader"},"clock_us":1764670000000000})");
  ASSERT_TRUE(old.ok()) << old.error().to_string();
  EXPECT_TRUE(old->placement.empty());
  auto old_init = decode_command(R"({"v":1,"op":"init_cluster","level":8,"cluster_id":"x"})");
  ASSERT_TRUE(old_init.ok());
  EXPECT_TRUE(old_init->finalize_features.empty());
}

// Level 18: a counter's incarnation is never 0 and never at or below its tombstone, every
// delete leaves one, and a schema-5 image (a level-17 build's) restores as schema 6 with
// counters usable.
TEST(Counters, IncarnationsNeverRepeatAndASchema5ImageIsUpgraded) {
  CatalogFsm fsm;
  Feeder f(fsm);
  setup_namespace(f, {kInc, std::string(kCounters)});
  const StreamKey k{"acme", "prod", "hits"};
  Command zero = Command::create_counter(k, 0);  // proposes 0: still incarnated
  auto c1 = f(zero);
  ASSERT_TRUE(c1.ok()) << c1.error->to_string();
  EXPECT_EQ(c1.counter.incarnation, Incarnation{1});
  auto d1 = f(Command::delete_counter(k));
  ASSERT_TRUE(d1.ok());
  ASSERT_TRUE(d1.tombstone.has_value());
  EXPECT_EQ(d1.tombstone->deleted_up_to, Incarnation{1});
  auto c2 = f(zero);
  ASSERT_TRUE(c2.ok());
  EXPECT_EQ(c2.counter.incarnation, Incarnation{2});
  EXPECT_EQ(f(Command::delete_counter({"acme", "prod", "nope"})).error->code, Errc::not_found);
  EXPECT_EQ(f(Command::create_counter({"acme", "prod", "bad name"}, 5)).error->code, Errc::invalid_name);
  EXPECT_EQ(f(Command::delete_namespace("acme", "prod")).error->code, Errc::conflict);

  // A schema-5 image: what a level-17 build snapshots (no counter tables).
  CatalogFsm old;
  Feeder g(old);
  setup_namespace(g, {kInc});
  std::string image = old.snapshot();
  ASSERT_FALSE(image.empty());
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(":memory:", &db), SQLITE_OK);
  auto* buf = static_cast<unsigned char*>(sqlite3_malloc64(image.size()));
  std::memcpy(buf, image.data(), image.size());
  ASSERT_EQ(sqlite3_deserialize(db, "main", buf, static_cast<sqlite3_int64>(image.size()),
                                static_cast<sqlite3_int64>(image.size()),
                                SQLITE_DESERIALIZE_FREEONCLOSE | SQLITE_DESERIALIZE_RESIZEABLE),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "DROP TABLE counters; DROP TABLE counter_tombstones;"
                             " UPDATE meta SET value = '5' WHERE key = 'schema_version';",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_int64 size = 0;
  unsigned char* p = sqlite3_serialize(db, "main", &size, 0);
  ASSERT_NE(p, nullptr);
  std::string v5(reinterpret_cast<const char*>(p), static_cast<std::size_t>(size));
  sqlite3_free(p);
  sqlite3_close(db);
  CatalogFsm up;
  auto r = up.restore(v5);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(up.state_hash(), old.state_hash()) << "the upgrade recreates exactly the schema-6 tables";
  ASSERT_TRUE(up.apply(g.next(), encode_command(Command::finalize_feature(std::string(kCounters)))).ok());
  auto c = up.apply(g.next() + 1, encode_command(Command::create_counter(k, 7)));
  ASSERT_TRUE(c.ok()) << c.error->to_string();
  EXPECT_TRUE(up.counter(k).has_value());
}

}  // namespace
}  // namespace sluice::raft_meta

namespace sluice::raft_meta {
namespace {

// Regression (review): a create proposed from a view that had not seen a finalize appended
// just before it proposed 0; applied after the finalize, it stored the stream at
// incarnation 0 (refused by every broker). The proposer writes its clock whether or not it
// has seen the finalize, and apply ignores it until the finalize.
TEST(Incarnations, ACreateProposedBeforeItsViewSawTheFinalizeStillGetsAnIncarnation) {
  CatalogFsm fsm;
  Feeder f(fsm);
  setup_namespace(f, {});
  const ProposerView stale{MetadataLevel{14}, MetadataLevel{14}, /*stream_incarnations_finalized=*/false};
  Command racing = Command::create_stream(kOrders, spec(), 1'700'000'000'000'000);
  ASSERT_TRUE(stamp_entry(racing, stale, 1'700'000'000'000'000).ok());
  Command before = Command::create_stream(StreamKey{"acme", "prod", "before"}, spec(), 1'700'000'000'000'000);
  ASSERT_TRUE(stamp_entry(before, stale, 1'700'000'000'000'000).ok());
  // Applied before the finalize, the clock is ignored: incarnation 0, as before.
  ASSERT_EQ(f(before).stream.incarnation, Incarnation{0});
  ASSERT_TRUE(f(Command::finalize_feature(kInc)).ok());
  auto c = f(racing);
  ASSERT_TRUE(c.ok()) << c.error->to_string();
  EXPECT_EQ(c.stream.incarnation, Incarnation{1'700'000'000'000'000});
}

// Regression (review): peer_address is a level-16 field of register_broker, an op members
// below 16 apply without it; written while such a member was recorded, members at 16 stored
// it and the others did not, for good. It is written only while the group is at 16.
TEST(Incarnations, ARegistrationCarriesItsPeerAddressOnlyInAGroupAtLevel16) {
  BrokerRegistration reg;
  reg.id = NodeId{3};
  reg.address = "127.0.0.1:8080";
  reg.peer_address = "127.0.0.1:7900";
  Command low = Command::register_broker(reg);
  ASSERT_TRUE(stamp_entry(low, ProposerView{MetadataLevel{16}, MetadataLevel{14}}, 0).ok());
  EXPECT_EQ(low.broker.peer_address, "");
  Command high = Command::register_broker(reg);
  ASSERT_TRUE(stamp_entry(high, ProposerView{MetadataLevel{16}, MetadataLevel{16}}, 0).ok());
  EXPECT_EQ(high.broker.peer_address, "127.0.0.1:7900");
}

// Regression (review): before stream_incarnations every creation is incarnation 0 with a
// shard version starting at 1, so an update_shard computed for a deleted replicated stream
// passed its re-creation's compare-and-set. Replicated creates need the finalize.
TEST(Incarnations, AReplicatedCreateNeedsStreamIncarnationsFinalized) {
  ProposerView v{MetadataLevel{16}, MetadataLevel{16}};
  v.replicated_shards_finalized = true;
  auto r = check_replicated_create(v, "replication_factor 3");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::conflict);
  EXPECT_NE(r.error().message.find("stream_incarnations"), std::string::npos) << r.error().message;
  v.stream_incarnations_finalized = true;
  EXPECT_TRUE(check_replicated_create(v, "replication_factor 3"));
}

}  // namespace
}  // namespace sluice::raft_meta
