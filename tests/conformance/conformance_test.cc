// The metadata conformance suite: the same cases against every MetadataStore backend
// (docs/architecture.md "Metadata in PostgreSQL": both backends pass one conformance suite).
//
//   raft      raft-meta, a single member in a temporary directory
//   postgres  postgres-meta on the test PostgreSQL (ctest fixture sluice_pg), a fresh
//             schema per test
//
// Only behaviour the contract (metadata.h, features.h) defines is checked here, caches
// included. One known difference is left to the backend suites: a create below the
// feature's level after the finalize (a level-8 stream create, a level-10 cache create) is
// stored at 0 by raft-meta (apply must not diverge) and refused by PostgreSQL's trigger.
#include "conformance_fixture.h"
#include "sluice/levels.h"

namespace sluice::conformance {
TEST_P(Conformance, IncarnationsStrictlyIncreaseAcrossDeleteAndRecreate) {
  auto in = make();
  auto& s = *in->store;
  make_ns(s);
  std::vector<std::uint64_t> seen;
  for (int round = 0; round < 4; ++round) {
    auto c = s.create_stream(kKey, spec(2));
    ASSERT_TRUE(c.ok()) << c.error().to_string();
    ASSERT_GT(c->incarnation.value(), 0u) << "finalized at bootstrap: never incarnation 0";
    if (!seen.empty()) {
      EXPECT_GT(c->incarnation.value(), seen.back());
    }
    seen.push_back(c->incarnation.value());
    auto g = s.get_stream(kKey);
    ASSERT_TRUE(g.ok());
    EXPECT_EQ(g->incarnation, c->incarnation);
    auto d = s.delete_stream(kKey);
    ASSERT_TRUE(d.ok()) << d.error().to_string();
    EXPECT_EQ(d->incarnation, c->incarnation);
    auto ts = s.list_tombstones();
    ASSERT_TRUE(ts.ok()) << ts.error().to_string();
    ASSERT_EQ(ts->size(), 1u) << "one tombstone per name, overwritten";
    EXPECT_EQ(ts->front().key, kKey);
    EXPECT_EQ(ts->front().deleted_up_to, c->incarnation);
  }
  EXPECT_EQ(s.get_stream(kKey).error().code, Errc::not_found);
}

TEST_P(Conformance, TombstonesAreInTheSnapshotAndTheDeleteChange) {
  auto in = make();
  auto& s = *in->store;
  make_ns(s);
  auto c = s.create_stream(kKey, spec(3));
  ASSERT_TRUE(c.ok());
  auto before = s.snapshot();
  ASSERT_TRUE(before.ok());
  Collector col;
  auto h = s.watch(before->seq, col.on_change(), col.on_resync());
  ASSERT_TRUE(s.delete_stream(kKey).ok());
  ASSERT_TRUE(pgtest::eventually([&] { return col.size() >= 1; }));
  auto ev = col.copy().front();
  EXPECT_EQ(ev.kind, ChangeEvent::Kind::stream_deleted);
  EXPECT_EQ(ev.stream.incarnation, c->incarnation);
  ASSERT_TRUE(ev.tombstone.has_value());
  EXPECT_EQ(ev.tombstone->deleted_up_to, c->incarnation);
  EXPECT_EQ(ev.tombstone->seq, ev.seq);
  EXPECT_EQ(ev.assignments.size(), 3u) << "the delete carries the assignments it removes";
  auto snap = s.snapshot();
  ASSERT_TRUE(snap.ok());
  ASSERT_EQ(snap->tombstones.size(), 1u);
  EXPECT_EQ(snap->tombstones[0].deleted_up_to, c->incarnation);
  EXPECT_EQ(snap->tombstones[0].seq, ev.seq);
  EXPECT_TRUE(snap->streams.empty());
  EXPECT_TRUE(snap->assignments.empty());
  EXPECT_GE(snap->seq, ev.seq);
}

TEST_P(Conformance, LegacyBeforeFinalizeStoresZeroAndWritesNoTombstone) {
  auto in = make({.hold_back_incarnations = true});
  auto& s = *in->store;
  make_ns(s);
  for (int round = 0; round < 2; ++round) {
    auto c = s.create_stream(kKey, spec());
    ASSERT_TRUE(c.ok()) << c.error().to_string();
    EXPECT_EQ(c->incarnation.value(), 0u);
    auto d = s.delete_stream(kKey);
    ASSERT_TRUE(d.ok());
    auto ts = s.list_tombstones();
    ASSERT_TRUE(ts.ok());
    EXPECT_TRUE(ts->empty()) << "no tombstone before the finalize";
  }
  // Finalize with a stream at 0 alive: deleting it afterwards records "incarnation 0
  // deleted" on both backends (raft-meta's flagged entry at level 14, postgres-meta's
  // level-10 writer), so a broker that slept through the delete still removes the legacy
  // data ("after the finalize, the next delete removes that old data").
  ASSERT_TRUE(s.create_stream(kKey, spec()).ok());
  auto f = s.finalize_feature(kInc);
  ASSERT_TRUE(f.ok()) << f.error().to_string();
  auto d0 = s.delete_stream(kKey);
  ASSERT_TRUE(d0.ok());
  EXPECT_EQ(d0->incarnation.value(), 0u);
  {
    auto ts = s.list_tombstones();
    ASSERT_TRUE(ts.ok());
    ASSERT_EQ(ts->size(), 1u);
    EXPECT_EQ((*ts)[0].deleted_up_to, Incarnation{0});
    auto snap = s.snapshot();
    ASSERT_TRUE(snap.ok());
    ASSERT_EQ(snap->tombstones.size(), 1u);
    EXPECT_EQ(snap->tombstones[0].deleted_up_to, Incarnation{0});
  }
  // The next create is incarnated, and its delete leaves a tombstone.
  auto c1 = s.create_stream(kKey, spec());
  ASSERT_TRUE(c1.ok());
  EXPECT_GT(c1->incarnation.value(), 0u);
  ASSERT_TRUE(s.delete_stream(kKey).ok());
  auto ts = s.list_tombstones();
  ASSERT_EQ(ts->size(), 1u);
  EXPECT_EQ(ts->front().deleted_up_to, c1->incarnation);
  auto c2 = s.create_stream(kKey, spec());
  ASSERT_TRUE(c2.ok());
  EXPECT_GT(c2->incarnation, c1->incarnation);
}

TEST_P(Conformance, FinalizeGateRefusesWhileAServingBrokerLacksIt) {
  auto in = make({.hold_back_incarnations = true});
  auto& s = *in->store;
  ASSERT_TRUE(s.register_broker(broker(7, false)).ok());
  ASSERT_TRUE(s.register_broker(broker(8, true)).ok());
  auto fs = s.list_features();
  ASSERT_TRUE(fs.ok());
  auto it = std::find_if(fs->begin(), fs->end(), [](auto& f) { return f.name == kInc; });
  ASSERT_NE(it, fs->end());
  EXPECT_FALSE(it->finalized);
  EXPECT_EQ(it->lacking, std::vector<NodeId>{NodeId{7}});
  EXPECT_EQ(it->supported_by, std::vector<NodeId>{NodeId{8}});

  auto refused = s.finalize_feature(kInc);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, Errc::conflict);
  EXPECT_NE(refused.error().message.find("7"), std::string::npos) << refused.error().message;

  // Broker 7 stops serving (clean shutdown): the gate opens.
  ASSERT_TRUE(s.unregister_broker(NodeId{7}).ok());
  auto f1 = s.finalize_feature(kInc);
  ASSERT_TRUE(f1.ok()) << f1.error().to_string();
  EXPECT_TRUE(f1->finalized);
  EXPECT_GT(f1->finalized_seq.value(), 0u);
  auto f2 = s.finalize_feature(kInc);  // idempotent: the same answer
  ASSERT_TRUE(f2.ok());
  EXPECT_EQ(f2->finalized_seq, f1->finalized_seq);

  auto unknown = s.finalize_feature("no_such_feature");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().code, Errc::not_found);
  auto snap = s.snapshot();
  ASSERT_TRUE(snap.ok());
  EXPECT_EQ(snap->finalized_features, std::vector<std::string>{kInc});
}

TEST_P(Conformance, RegistrationRefusedAfterFinalizeForBrokersLackingIt) {
  auto in = make();  // bootstrap finalizes stream_incarnations
  auto& s = *in->store;
  auto old = s.register_broker(broker(3, false));
  ASSERT_FALSE(old.ok());
  EXPECT_EQ(old.error().code, Errc::conflict);
  EXPECT_NE(old.error().message.find(kInc), std::string::npos) << old.error().message;
  auto b = s.register_broker(broker(3, true));
  ASSERT_TRUE(b.ok()) << b.error().to_string();
  EXPECT_TRUE(b->live);
  auto brokers = s.list_brokers();
  ASSERT_TRUE(brokers.ok());
  ASSERT_EQ(brokers->size(), 1u);
  EXPECT_EQ(brokers->front().id, NodeId{3});
  EXPECT_TRUE(brokers->front().live);
  EXPECT_TRUE(s.heartbeat_broker(NodeId{3}).ok());
  EXPECT_EQ(s.heartbeat_broker(NodeId{99}).error().code, Errc::not_found);
  EXPECT_EQ(s.unregister_broker(NodeId{99}).error().code, Errc::not_found);
}

TEST_P(Conformance, ChangeFeedDeliversEveryChangeInOrder) {
  auto in = make();
  auto& s = *in->store;
  Collector col;
  auto h = s.watch(ChangeSeq{0}, col.on_change(), col.on_resync());
  make_ns(s);
  ASSERT_TRUE(s.register_broker(broker(1, true)).ok());
  auto c = s.create_stream(kKey, spec(2));
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(s.delete_stream(kKey).ok());
  ASSERT_TRUE(s.unregister_broker(NodeId{1}).ok());
  ASSERT_TRUE(s.delete_namespace("acme", "prod").ok());
  ASSERT_TRUE(s.delete_tenant("acme").ok());
  using K = ChangeEvent::Kind;
  const std::vector<K> want = {K::tenant_created,    K::namespace_created, K::broker_registered,
                               K::stream_created,    K::stream_deleted,    K::broker_unregistered,
                               K::namespace_deleted, K::tenant_deleted};
  ASSERT_TRUE(pgtest::eventually([&] { return col.size() >= want.size(); })) << col.size();
  auto evs = col.copy();
  ASSERT_EQ(evs.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(evs[i].kind, want[i]) << i;
    if (i) {
      EXPECT_GT(evs[i].seq, evs[i - 1].seq) << i;
    }
  }
  EXPECT_EQ(col.resyncs.load(), 0);
  EXPECT_EQ(evs[3].stream.key, kKey);
  EXPECT_EQ(evs[3].stream.incarnation, c->incarnation);
  EXPECT_EQ(evs[3].stream.created_seq, evs[3].seq);
  ASSERT_EQ(evs[3].assignments.size(), 2u);
  EXPECT_EQ(evs[3].assignments[0].leader, NodeId{1});
  EXPECT_EQ(evs[4].assignments.size(), 2u);
  EXPECT_EQ(evs[2].broker.id, NodeId{1});
  // A second watch from the middle gets exactly the rest.
  Collector tail;
  auto h2 = s.watch(evs[4].seq, tail.on_change(), tail.on_resync());
  ASSERT_TRUE(pgtest::eventually([&] { return tail.size() >= 3; }));
  auto t = tail.copy();
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].seq, evs[5].seq);
}

TEST_P(Conformance, ChangeFeedTooOldCursorResyncsFromSnapshot) {
  auto in = make({.change_retention = 5});
  auto& s = *in->store;
  ASSERT_TRUE(s.create_tenant("acme").ok());
  for (int i = 0; i < 12; ++i) ASSERT_TRUE(s.create_namespace("acme", "ns" + std::to_string(i)).ok());
  Collector old;
  auto h = s.watch(ChangeSeq{0}, old.on_change(), old.on_resync());
  ASSERT_TRUE(pgtest::eventually([&] { return old.resyncs.load() == 1; }));
  EXPECT_EQ(old.size(), 0u) << "a resync delivers nothing";
  auto snap = s.snapshot();
  ASSERT_TRUE(snap.ok());
  EXPECT_EQ(snap->namespaces.size(), 12u);
  Collector fresh;
  auto h2 = s.watch(snap->seq, fresh.on_change(), fresh.on_resync());
  ASSERT_TRUE(s.create_namespace("acme", "after").ok());
  ASSERT_TRUE(pgtest::eventually([&] { return fresh.size() >= 1; }));
  EXPECT_EQ(fresh.copy().front().ns, "after");
  EXPECT_EQ(fresh.resyncs.load(), 0);
}

std::uint64_t fnv(const StreamKey& k) {
  std::uint64_t h = 14695981039346656037ull;
  for (char c : k.to_string()) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return h;
}

TEST_P(Conformance, AssignmentsOnePerShardAtTheCreateSeqRemovedByDelete) {
  auto in = make();
  auto& s = *in->store;
  make_ns(s);
  // Unassigned with no broker.
  auto lone = s.create_stream({"acme", "prod", "lone"}, spec(2));
  ASSERT_TRUE(lone.ok());
  ASSERT_TRUE(s.register_broker(broker(2, true)).ok());
  ASSERT_TRUE(s.register_broker(broker(5, true)).ok());
  auto c = s.create_stream(kKey, spec(4));
  ASSERT_TRUE(c.ok());
  auto snap = s.snapshot();
  ASSERT_TRUE(snap.ok());
  std::vector<Assignment> mine, lone_as;
  for (auto& a : snap->assignments) {
    (a.key == kKey ? mine : lone_as).push_back(a);
  }
  ASSERT_EQ(lone_as.size(), 2u);
  for (auto& a : lone_as) EXPECT_EQ(a.leader, NodeId{0});
  ASSERT_EQ(mine.size(), 4u);
  const NodeId ids[] = {NodeId{2}, NodeId{5}};
  const std::uint64_t off = fnv(kKey) % 2;
  for (std::uint32_t i = 0; i < 4; ++i) {
    EXPECT_EQ(mine[i].shard, ShardIndex{i});
    EXPECT_EQ(mine[i].incarnation, c->incarnation);
    EXPECT_EQ(mine[i].generation, first_generation(c->created_seq));
    EXPECT_EQ(mine[i].leader, ids[(off + i) % 2]) << i;
    EXPECT_EQ(mine[i].replicas, std::vector<NodeId>{mine[i].leader});
  }
  ASSERT_TRUE(s.delete_stream(kKey).ok());
  auto after = s.snapshot();
  for (auto& a : after->assignments) EXPECT_NE(a.key, kKey);
  EXPECT_EQ(after->assignments.size(), 2u);
  // A recreate's first generation is above the deleted one's (a later create seq).
  auto c2 = s.create_stream(kKey, spec(1));
  ASSERT_TRUE(c2.ok());
  EXPECT_GT(first_generation(c2->created_seq), first_generation(c->created_seq));
}

TEST_P(Conformance, NamesSpecsAndStateErrors) {
  auto in = make();
  auto& s = *in->store;
  EXPECT_EQ(s.create_tenant("").error().code, Errc::invalid_name);
  EXPECT_EQ(s.create_tenant("a/b").error().code, Errc::invalid_name);
  EXPECT_EQ(s.create_tenant(".hidden").error().code, Errc::invalid_name);
  EXPECT_EQ(s.create_namespace("nope", "x").error().code, Errc::not_found);
  make_ns(s);
  EXPECT_EQ(s.create_tenant("acme").error().code, Errc::already_exists);
  EXPECT_EQ(s.create_namespace("acme", "prod").error().code, Errc::already_exists);
  EXPECT_EQ(s.create_stream({"acme", "prod", "bad name"}, spec()).error().code, Errc::invalid_name);
  EXPECT_EQ(s.create_stream({"acme", "nope", "x"}, spec()).error().code, Errc::not_found);
  EXPECT_EQ(s.create_stream(kKey, spec(0)).error().code, Errc::invalid_argument);
  EXPECT_EQ(s.create_stream(kKey, spec(kMaxShardsPerStream + 1)).error().code, Errc::invalid_argument);
  StreamSpec bad = spec();
  bad.retention.max_bytes = 0;
  EXPECT_EQ(s.create_stream(kKey, bad).error().code, Errc::invalid_argument);
  StreamSpec good = spec(3);
  good.retention.max_age_ms = 60000;
  good.default_ack = AckMode::none;
  auto c = s.create_stream(kKey, good);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(s.create_stream(kKey, good).error().code, Errc::already_exists);
  auto g = s.get_stream(kKey);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->spec, good);
  EXPECT_EQ(g->created_seq, c->created_seq);
  auto ls = s.list_streams("acme", "prod");
  ASSERT_TRUE(ls.ok());
  ASSERT_EQ(ls->size(), 1u);
  EXPECT_EQ(s.list_streams("acme", "nope").error().code, Errc::not_found);
  EXPECT_EQ(s.list_namespaces("nope").error().code, Errc::not_found);
  EXPECT_EQ(s.delete_namespace("acme", "prod").error().code, Errc::conflict);
  EXPECT_EQ(s.delete_tenant("acme").error().code, Errc::conflict);
  EXPECT_EQ(s.delete_stream({"acme", "prod", "nope"}).error().code, Errc::not_found);
  EXPECT_EQ(s.delete_tenant("nope").error().code, Errc::not_found);
  ASSERT_TRUE(s.delete_stream(kKey).ok());
  ASSERT_TRUE(s.delete_namespace("acme", "prod").ok());
  ASSERT_TRUE(s.delete_tenant("acme").ok());
  EXPECT_TRUE(s.list_tenants()->empty());
  auto st = s.status();
  EXPECT_TRUE(st.ready);
  EXPECT_FALSE(st.cluster_id.empty());
  EXPECT_EQ(st.cluster_id, in->host->cluster_id()) << "adopted through the host";
}

// --- replicated shards (level 16, docs/replication.md) -----------------------------------

TEST_P(Conformance, ReplicatedCreatePlacesDistinctBrokersAtEpochOneAllInSync) {
  auto in = make();
  auto& s = *in->store;
  make_ns(s);
  for (std::uint32_t id : {1u, 2u, 3u, 4u}) ASSERT_TRUE(s.register_broker(broker(id, true)).ok());
  auto before = s.snapshot();
  ASSERT_TRUE(before.ok());
  Collector col;
  auto h = s.watch(before->seq, col.on_change(), col.on_resync());
  auto c = s.create_stream(kKey, replicated(4, 3, 2));
  ASSERT_TRUE(c.ok()) << c.error().to_string();
  EXPECT_EQ(c->spec.replication_factor, 3u);
  EXPECT_EQ(c->spec.min_insync, 2u);
  auto got = s.get_stream(kKey);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->spec, c->spec) << "replication_factor and min_insync are stored";
  auto as = assignments_of(s, kKey);
  ASSERT_EQ(as.size(), 4u);
  for (auto& a : as) {
    SCOPED_TRACE("shard " + std::to_string(a.shard.value()));
    ASSERT_EQ(a.replicas.size(), 3u);
    std::set<NodeId> distinct(a.replicas.begin(), a.replicas.end());
    EXPECT_EQ(distinct.size(), 3u);
    EXPECT_EQ(a.leader, a.replicas.front());
    EXPECT_EQ(a.leader_epoch, LeaderEpoch{1});
    EXPECT_EQ(a.version, ShardVersion{1});
    ASSERT_EQ(a.in_sync.size(), 3u);
    for (std::size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(a.in_sync[i].broker, a.replicas[i]);
      EXPECT_EQ(a.in_sync[i].directory_id, "dir-" + std::to_string(a.replicas[i].value()));
    }
  }
  // The create's change carries the replica state too.
  ASSERT_TRUE(pgtest::eventually([&] { return col.size() >= 1; }));
  auto ev = col.copy().front();
  EXPECT_EQ(ev.kind, ChangeEvent::Kind::stream_created);
  EXPECT_EQ(ev.stream.spec.replication_factor, 3u);
  ASSERT_EQ(ev.assignments.size(), 4u);
  EXPECT_EQ(ev.assignments[0].in_sync, as[0].in_sync);
  EXPECT_EQ(ev.assignments[0].version, ShardVersion{1});
  // A replication factor of 1 keeps the old shape: no epoch, version 0, empty in-sync set.
  auto one = s.create_stream({"acme", "prod", "single"}, spec(1));
  ASSERT_TRUE(one.ok());
  auto a1 = assignments_of(s, {"acme", "prod", "single"});
  ASSERT_EQ(a1.size(), 1u);
  EXPECT_EQ(a1[0].replicas.size(), 1u);
  EXPECT_EQ(a1[0].leader_epoch, LeaderEpoch{0});
  EXPECT_EQ(a1[0].version, ShardVersion{0});
  EXPECT_TRUE(a1[0].in_sync.empty());
  EXPECT_EQ(s.get_stream({"acme", "prod", "single"})->spec.replication_factor, 1u);
}

TEST_P(Conformance, ReplicatedCreateWithTooFewLiveBrokersIsA503NamingBothCounts) {
  auto in = make();
  auto& s = *in->store;
  make_ns(s);
  for (std::uint32_t id : {1u, 2u}) ASSERT_TRUE(s.register_broker(broker(id, true)).ok());
  auto c = s.create_stream(kKey, replicated(1, 3, 2));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code, Errc::not_enough_replicas);
  EXPECT_EQ(http_status(c.error().code), 503);
  EXPECT_NE(c.error().message.find("needs 3 live brokers, 2 are live"), std::string::npos)
      << c.error().message;
  EXPECT_EQ(s.get_stream(kKey).error().code, Errc::not_found) << "nothing was created";
}

TEST_P(Conformance, ReplicationIsRefusedUntilReplicatedShardsIsFinalized) {
  auto in = make({.hold_back_incarnations = true});
  auto& s = *in->store;
  make_ns(s);
  for (std::uint32_t id : {1u, 2u, 3u}) ASSERT_TRUE(s.register_broker(broker(id, true)).ok());
  auto c = s.create_stream(kKey, replicated(1, 3, 2));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code, Errc::conflict);
  EXPECT_NE(c.error().message.find(kRepl), std::string::npos) << c.error().message;
  ASSERT_TRUE(s.create_stream(kKey, spec(1)).ok()) << "replication factor 1 as before";
  auto a = assignments_of(s, kKey);
  ASSERT_EQ(a.size(), 1u);
  auto u = s.update_shard({kKey, ShardIndex{0}, a[0].incarnation, ShardVersion{0}, a[0].leader,
                           LeaderEpoch{0}, {}});
  ASSERT_FALSE(u.ok());
  EXPECT_EQ(u.error().code, Errc::conflict);
  // Finalized: replicated creates work, once stream_incarnations is finalized too (without
  // it a re-created replicated stream would be incarnation 0 with its versions starting
  // over, and a delayed update_shard for the deleted one would pass its compare-and-set).
  auto f = s.finalize_feature(kRepl);
  ASSERT_TRUE(f.ok()) << f.error().to_string();
  auto without = s.create_stream({"acme", "prod", "copies"}, replicated(1, 3, 2));
  ASSERT_FALSE(without.ok());
  EXPECT_EQ(without.error().code, Errc::conflict);
  EXPECT_NE(without.error().message.find("stream_incarnations"), std::string::npos) << without.error().message;
  ASSERT_TRUE(s.finalize_feature(std::string(kStreamIncarnations)).ok());
  auto r = s.create_stream({"acme", "prod", "copies"}, replicated(1, 3, 2));
  ASSERT_TRUE(r.ok()) << r.error().to_string();
}

TEST_P(Conformance, UpdateShardIsACompareAndSetSeenByWatchers) {
  auto in = make();
  auto& s = *in->store;
  make_ns(s);
  for (std::uint32_t id : {1u, 2u, 3u}) ASSERT_TRUE(s.register_broker(broker(id, true)).ok());
  ASSERT_TRUE(s.create_stream(kKey, replicated(2, 3, 2)).ok());
  const Assignment a = assignments_of(s, kKey).at(1);
  const NodeId leader = a.leader;
  const NodeId other = a.replicas[1];
  auto before = s.snapshot();
  ASSERT_TRUE(before.ok());
  Collector col;
  auto h = s.watch(before->seq, col.on_change(), col.on_resync());

  // The leader drops the last replica from the in-sync set.
  ShardUpdate u{kKey, a.shard, a.incarnation, a.version, leader, a.leader_epoch,
                {a.in_sync[0], a.in_sync[1]}};
  auto r = s.update_shard(u);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->version, ShardVersion{2});
  EXPECT_EQ(r->in_sync, u.in_sync);
  EXPECT_EQ(r->replicas, a.replicas);
  auto stored = assignments_of(s, kKey).at(1);
  EXPECT_EQ(stored.version, ShardVersion{2});
  EXPECT_EQ(stored.in_sync, u.in_sync);
  EXPECT_EQ(assignments_of(s, kKey).at(0).version, ShardVersion{1}) << "one shard only";

  // A stale writer: its expected version is gone.
  auto stale = s.update_shard(u);
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.error().code, Errc::conflict);
  EXPECT_NE(stale.error().message.find("holds 2"), std::string::npos) << stale.error().message;
  // Another incarnation of the name.
  ShardUpdate other_inc = u;
  other_inc.expected_version = ShardVersion{2};
  other_inc.incarnation = Incarnation{a.incarnation.value() + 1};
  EXPECT_EQ(s.update_shard(other_inc).error().code, Errc::stale_route);
  // Unknown stream and shard.
  ShardUpdate unknown = u;
  unknown.key.name = "nope";
  EXPECT_EQ(s.update_shard(unknown).error().code, Errc::not_found);
  unknown = u;
  unknown.expected_version = ShardVersion{2};
  unknown.shard = ShardIndex{7};
  EXPECT_EQ(s.update_shard(unknown).error().code, Errc::not_found);
  // A new leader without a new epoch; an in-sync set without the leader.
  ShardUpdate bad = u;
  bad.expected_version = ShardVersion{2};
  bad.leader = other;
  EXPECT_EQ(s.update_shard(bad).error().code, Errc::invalid_argument);
  bad = u;
  bad.expected_version = ShardVersion{2};
  bad.in_sync = {a.in_sync[1]};
  EXPECT_EQ(s.update_shard(bad).error().code, Errc::invalid_argument);
  // The controller moves leadership, with a new epoch.
  ShardUpdate move = u;
  move.expected_version = ShardVersion{2};
  move.leader = other;
  move.leader_epoch = LeaderEpoch{2};
  auto moved = s.update_shard(move);
  ASSERT_TRUE(moved.ok()) << moved.error().to_string();
  EXPECT_EQ(moved->version, ShardVersion{3});
  EXPECT_EQ(moved->leader, other);
  EXPECT_EQ(moved->leader_epoch, LeaderEpoch{2});

  // Watchers see both changes, each carrying the assignment as it was left.
  ASSERT_TRUE(pgtest::eventually([&] { return col.size() >= 2; })) << col.size();
  auto evs = col.copy();
  ASSERT_EQ(evs.size(), 2u) << "refused updates record nothing";
  for (auto& e : evs) {
    EXPECT_EQ(e.kind, ChangeEvent::Kind::shard_changed);
    EXPECT_EQ(e.stream.key, kKey);
    ASSERT_EQ(e.assignments.size(), 1u);
    EXPECT_EQ(e.assignments[0].key, kKey);
    EXPECT_EQ(e.assignments[0].shard, a.shard);
    EXPECT_EQ(e.assignments[0].incarnation, a.incarnation);
  }
  EXPECT_EQ(evs[0].assignments[0].version, ShardVersion{2});
  EXPECT_EQ(evs[0].assignments[0].in_sync, u.in_sync);
  EXPECT_EQ(evs[1].assignments[0].version, ShardVersion{3});
  EXPECT_EQ(evs[1].assignments[0].leader, other);
  EXPECT_LT(evs[0].seq, evs[1].seq);
}

TEST_P(Conformance, PeerAddressRoundTrips) {
  auto in = make();
  auto& s = *in->store;
  Collector col;
  auto h = s.watch(ChangeSeq{0}, col.on_change(), col.on_resync());
  BrokerRegistration reg = broker(5, true);
  reg.peer_address = "10.1.2.3:7900";
  auto b = s.register_broker(reg);
  ASSERT_TRUE(b.ok()) << b.error().to_string();
  EXPECT_EQ(b->peer_address, reg.peer_address);
  auto listed = s.list_brokers();
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ(listed->front().peer_address, reg.peer_address);
  auto snap = s.snapshot();
  ASSERT_TRUE(snap.ok());
  ASSERT_EQ(snap->brokers.size(), 1u);
  EXPECT_EQ(snap->brokers[0].peer_address, reg.peer_address);
  ASSERT_TRUE(pgtest::eventually([&] {
    for (auto& e : col.copy())
      if (e.kind == ChangeEvent::Kind::broker_registered) return true;
    return false;
  }));
  for (auto& e : col.copy()) {
    if (e.kind == ChangeEvent::Kind::broker_registered) {
      EXPECT_EQ(e.broker.peer_address, reg.peer_address);
    }
  }
  // Re-registering without one clears it (the broker's own word, each time).
  ASSERT_TRUE(s.register_broker(broker(5, true)).ok());
  EXPECT_EQ(s.list_brokers()->front().peer_address, "");
}

INSTANTIATE_TEST_SUITE_P(Backends, Conformance,
                         ::testing::Values(Backend{"raft", make_raft},
                                           Backend{"postgres", make_postgres}),
                         [](const auto& info) { return info.param.name; });

}  // namespace sluice::conformance
