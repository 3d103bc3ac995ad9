// The SDK's catalog codec (sluice/catalog_json.h): every type round-trips, decoding is
// strict, and the stored change payloads keep the bytes the backends always wrote.
#include "sluice/catalog_json.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

namespace sluice {
namespace {

namespace json = boost::json;

StreamKey key() { return StreamKey{"t", "n", "s"}; }

StreamInfo stream() {
  StreamInfo s;
  s.key = key();
  s.incarnation = Incarnation{1764670000000000ull};
  s.spec.shards = 3;
  s.spec.retention.max_bytes = -1;
  s.spec.retention.max_age_ms = 60000;
  s.spec.default_ack = AckMode::none;
  s.created_seq = ChangeSeq{7};
  s.created_at_us = -5;
  return s;
}

Assignment assignment(std::uint32_t shard) {
  return Assignment{key(), ShardIndex{shard}, Incarnation{9}, Generation{7}, NodeId{2},
                    {NodeId{2}, NodeId{3}}};
}

BrokerInfo broker() {
  return BrokerInfo{NodeId{4}, "h:1", "dir", "1.2", {"a", "b"}, true, ChangeSeq{11}};
}

CacheInfo cache() { return CacheInfo{StreamKey{"t", "n", "c"}, Incarnation{3}, CacheSpec{5000}, ChangeSeq{12}}; }

MemberInfo member() {
  MemberInfo m;
  m.id = NodeId{2};
  m.raft_address = "r:1";
  m.rpc_address = "p:1";
  m.level = MetadataLevel{14};
  m.joined_seq = ChangeSeq{3};
  m.role = "follower";
  m.held = true;
  m.held_index = ChangeSeq{40};
  m.held_required_level = MetadataLevel{15};
  m.held_reason = "why";
  m.applied = ChangeSeq{39};
  m.state_hash = 0xFFFFFFFFFFFFFFFFull;
  return m;
}

ChangeEvent stream_event() {
  ChangeEvent e{};
  e.kind = ChangeEvent::Kind::stream_deleted;
  e.seq = ChangeSeq{20};
  e.tenant = "t";
  e.ns = "n";
  e.stream = stream();
  e.assignments = {assignment(0), assignment(1)};
  e.tombstone = Tombstone{key(), Incarnation{9}, ChangeSeq{20}};
  return e;
}

// Encode, decode, encode again: the same JSON (every encoder writes every field).
template <class T>
void expect_round_trip(const T& x) {
  json::value first = json::value_from(x);
  auto back = decode_json<T>(first);
  ASSERT_TRUE(back.ok()) << back.error().to_string() << " in " << json::serialize(first);
  EXPECT_EQ(json::serialize(json::value_from(back.value())), json::serialize(first));
}

TEST(CatalogJson, EveryTypeRoundTrips) {
  expect_round_trip(AckMode::quorum);
  expect_round_trip(ChangeEvent::Kind::cache_deleted);
  expect_round_trip(key());
  expect_round_trip(stream().spec);
  expect_round_trip(stream());
  expect_round_trip(TenantInfo{"t", ChangeSeq{1}});
  expect_round_trip(NamespaceInfo{"t", "n", ChangeSeq{2}});
  expect_round_trip(Tombstone{key(), Incarnation{8}, ChangeSeq{9}});
  expect_round_trip(assignment(0));
  expect_round_trip(broker());
  expect_round_trip(BrokerRegistration{NodeId{4}, "h:1", "dir", "1.2", {"x"}});
  expect_round_trip(FeatureInfo{"stream_incarnations", MetadataLevel{10}, true, ChangeSeq{3},
                                {NodeId{1}}, {NodeId{2}, NodeId{3}}});
  expect_round_trip(CacheSpec{-1});
  expect_round_trip(cache());
  expect_round_trip(member());
  expect_round_trip(MembersView{{member(), member()}, NodeId{2}, MetadataLevel{8}, MetadataLevel{14}});
  expect_round_trip(JoinRequest{NodeId{3}, "r:3", "p:3", MetadataLevel{10}});
  expect_round_trip(stream_event());
  ChangeEvent ce{};
  ce.kind = ChangeEvent::Kind::cache_deleted;
  ce.cache = cache();
  ce.cache_tombstone = Tombstone{cache().key, Incarnation{3}, ChangeSeq{13}};
  expect_round_trip(ce);
  CatalogSnapshot snap;
  snap.seq = ChangeSeq{99};
  snap.tenants = {TenantInfo{"t", ChangeSeq{1}}};
  snap.namespaces = {NamespaceInfo{"t", "n", ChangeSeq{2}}};
  snap.streams = {stream()};
  snap.tombstones = {Tombstone{key(), Incarnation{8}, ChangeSeq{9}}};
  snap.assignments = {assignment(0)};
  snap.finalized_features = {"cache_incarnations"};
  snap.brokers = {broker()};
  snap.caches = {cache()};
  snap.cache_tombstones = {Tombstone{cache().key, Incarnation{2}, ChangeSeq{10}}};
  expect_round_trip(snap);
}

TEST(CatalogJson, ReplicatedShardStateRoundTrips) {
  StreamInfo s = stream();
  s.spec.replication_factor = 3;
  s.spec.min_insync = 2;
  expect_round_trip(s.spec);
  Assignment a = assignment(0);
  a.leader_epoch = LeaderEpoch{4};
  a.in_sync = {{NodeId{2}, "d2"}, {NodeId{3}, "d3"}};
  a.version = ShardVersion{7};
  expect_round_trip(a);
  auto back = decode_json<Assignment>(json::value_from(a));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->in_sync, a.in_sync);
  EXPECT_EQ(back->version, a.version);
  BrokerInfo b = broker();
  b.peer_address = "h:9";
  expect_round_trip(b);
  EXPECT_EQ(decode_json<BrokerInfo>(json::value_from(b))->peer_address, "h:9");
  BrokerRegistration reg{NodeId{4}, "h:1", "dir", "1.2", {"x"}, "h:9"};
  EXPECT_EQ(decode_json<BrokerRegistration>(json::value_from(reg))->peer_address, "h:9");
  expect_round_trip(ShardUpdate{key(), ShardIndex{1}, Incarnation{9}, ShardVersion{7}, NodeId{3},
                                LeaderEpoch{5}, {{NodeId{3}, "d3"}}});
  // RF 1 writes none of the level-16 fields: older payloads keep their bytes.
  auto plain = json::serialize(json::value_from(stream().spec));
  EXPECT_EQ(plain.find("replication_factor"), std::string::npos);
  EXPECT_EQ(json::serialize(json::value_from(assignment(0))).find("version"), std::string::npos);
  EXPECT_EQ(json::serialize(json::value_from(broker())).find("peer_address"), std::string::npos);

  // Change payloads: a replicated stream create and a shard change.
  ChangeEvent e = stream_event();
  e.kind = ChangeEvent::Kind::stream_created;
  e.tombstone.reset();
  e.stream.spec = s.spec;
  e.assignments = {a};
  auto got = decode_change_payload(e.seq, "stream_created", encode_change_payload(e));
  ASSERT_TRUE(got.ok()) << got.error().to_string();
  EXPECT_EQ(got->stream.spec, s.spec);
  ASSERT_EQ(got->assignments.size(), 1u);
  EXPECT_EQ(got->assignments[0].in_sync, a.in_sync);
  EXPECT_EQ(got->assignments[0].leader_epoch, a.leader_epoch);
  ChangeEvent sc{};
  sc.kind = ChangeEvent::Kind::shard_changed;
  sc.seq = ChangeSeq{30};
  sc.tenant = "t";
  sc.ns = "n";
  sc.stream.key = key();
  sc.stream.incarnation = a.incarnation;
  sc.assignments = {a};
  auto p = encode_change_payload(sc);
  auto dec = decode_change_payload(sc.seq, "shard_changed", p);
  ASSERT_TRUE(dec.ok()) << dec.error().to_string();
  EXPECT_EQ(dec->kind, ChangeEvent::Kind::shard_changed);
  EXPECT_EQ(dec->stream.key, key());
  ASSERT_EQ(dec->assignments.size(), 1u);
  EXPECT_EQ(dec->assignments[0].key, key());
  EXPECT_EQ(dec->assignments[0].version, a.version);
  EXPECT_EQ(dec->assignments[0].in_sync, a.in_sync);
  EXPECT_EQ(encode_change_payload(*dec), p);
  expect_round_trip(sc);
}

// Level 17: a running reassignment's target travels in the assignment, the shard_changed
// payload and the update; without one, nothing new is written (older payloads keep their bytes).
TEST(CatalogJson, AReassignmentTargetSurvivesEveryEncoding) {
  Assignment a = assignment(0);
  a.replicas = {NodeId{1}, NodeId{2}, NodeId{3}, NodeId{4}};
  a.leader_epoch = LeaderEpoch{2};
  a.in_sync = {{NodeId{2}, "d2"}};
  a.version = ShardVersion{3};
  ChangeEvent sc{};
  sc.kind = ChangeEvent::Kind::shard_changed;
  sc.seq = ChangeSeq{31};
  sc.tenant = "t";
  sc.ns = "n";
  sc.stream.key = key();
  sc.assignments = {a};
  const auto plain = encode_change_payload(sc);
  EXPECT_EQ(plain.find("target_replicas"), std::string::npos) << plain;
  a.target_replicas = {NodeId{4}, NodeId{2}, NodeId{3}};
  expect_round_trip(a);
  EXPECT_EQ(decode_json<Assignment>(json::value_from(a))->target_replicas, a.target_replicas);
  sc.assignments = {a};
  auto dec = decode_change_payload(sc.seq, "shard_changed", encode_change_payload(sc));
  ASSERT_TRUE(dec.ok()) << dec.error().to_string();
  EXPECT_EQ(dec->assignments.at(0).target_replicas, a.target_replicas);
  ShardUpdate u{key(), ShardIndex{0}, a.incarnation, ShardVersion{3}, NodeId{2}, LeaderEpoch{2}, a.in_sync};
  const auto level16 = json::serialize(json::value_from(u));
  EXPECT_EQ(level16.find("replicas"), std::string::npos) << level16;
  u.replicas = a.replicas;
  u.target_replicas = a.target_replicas;
  expect_round_trip(u);
  auto ub = decode_json<ShardUpdate>(json::value_from(u));
  ASSERT_TRUE(ub.ok());
  EXPECT_EQ(ub->replicas, u.replicas);
  EXPECT_EQ(ub->target_replicas, u.target_replicas);
}

TEST(CatalogJson, ValuesSurviveTheRoundTrip) {
  auto e = decode_json<ChangeEvent>(json::value_from(stream_event()));
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->kind, ChangeEvent::Kind::stream_deleted);
  EXPECT_EQ(e->stream.key, key());
  EXPECT_EQ(e->stream.spec, stream().spec);
  EXPECT_EQ(e->stream.incarnation, Incarnation{1764670000000000ull});
  ASSERT_EQ(e->assignments.size(), 2u);
  EXPECT_EQ(e->assignments[1].shard, ShardIndex{1});
  EXPECT_EQ(e->assignments[1].replicas, (std::vector<NodeId>{NodeId{2}, NodeId{3}}));
  ASSERT_TRUE(e->tombstone);
  EXPECT_EQ(e->tombstone->deleted_up_to, Incarnation{9});
  EXPECT_FALSE(e->cache_tombstone);
  auto m = decode_json<MemberInfo>(json::value_from(member()));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->state_hash, 0xFFFFFFFFFFFFFFFFull);
  EXPECT_TRUE(m->held);
}

// raft-meta once turned an unknown change kind into tenant_created; postgres-meta refused.
TEST(CatalogJson, UnknownChangeKindIsRefused) {
  json::value v = json::value_from(stream_event());
  v.as_object()["kind"] = "member_joined";
  auto e = decode_json<ChangeEvent>(v);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().code, Errc::malformed_body);
  EXPECT_NE(e.error().message.find("member_joined"), std::string::npos);
  EXPECT_FALSE(parse_change_kind("member_joined"));
  EXPECT_FALSE(parse_change_kind(""));
  auto p = decode_change_payload(ChangeSeq{5}, "member_joined", R"({"tenant":"t"})");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.error().code, Errc::malformed_body);
}

TEST(CatalogJson, WrongTypesAreRefused) {
  auto with = [](json::value v, const char* k, json::value x) {
    v.as_object()[k] = std::move(x);
    return v;
  };
  json::value s = json::value_from(stream());
  EXPECT_FALSE(decode_json<StreamInfo>(with(s, "incarnation", "7")).ok());
  EXPECT_FALSE(decode_json<StreamInfo>(with(s, "incarnation", -1)).ok());
  EXPECT_FALSE(decode_json<StreamInfo>(with(s, "incarnation", 1.5)).ok());
  EXPECT_FALSE(decode_json<StreamInfo>(with(s, "key", "t/n/s")).ok());
  EXPECT_FALSE(decode_json<StreamInfo>(json::value("stream")).ok());
  json::value spec = json::value_from(stream().spec);
  EXPECT_FALSE(decode_json<StreamSpec>(with(spec, "ack", "sometimes")).ok());
  EXPECT_FALSE(decode_json<StreamSpec>(with(spec, "shards", 4294967296ull)).ok());
  json::value b = json::value_from(broker());
  EXPECT_FALSE(decode_json<BrokerInfo>(with(b, "live", 1)).ok());
  EXPECT_FALSE(decode_json<BrokerInfo>(with(b, "features", json::array{1, 2})).ok());
  json::value a = json::value_from(assignment(0));
  EXPECT_FALSE(decode_json<Assignment>(with(a, "replicas", json::array{"2"})).ok());
  json::value missing = json::value_from(member());
  missing.as_object().erase("state_hash");
  EXPECT_FALSE(decode_json<MemberInfo>(missing).ok());
  EXPECT_FALSE(decode_change_payload(ChangeSeq{1}, "tenant_created", R"({"tenant":7})").ok());
  EXPECT_FALSE(decode_change_payload(ChangeSeq{1}, "tenant_created", R"(["t"])").ok());
  EXPECT_FALSE(decode_change_payload(ChangeSeq{1}, "tenant_created", "{").ok());
  EXPECT_FALSE(decode_change_payload(ChangeSeq{1}, "stream_created",
                                     R"({"tenant":"t","ns":"n","name":"s"})").ok());
}

CounterInfo counter_info() { return CounterInfo{StreamKey{"t", "n", "k"}, Incarnation{7}, ChangeSeq{21}}; }

// Level 18: counters round-trip in every encoding (value, change payload, snapshot), and a
// snapshot without counters is written exactly as before them.
TEST(CatalogJson, CountersRoundTripAndOlderShapesStayTheSame) {
  expect_round_trip(counter_info());
  ChangeEvent ce{};
  ce.kind = ChangeEvent::Kind::counter_deleted;
  ce.seq = ChangeSeq{22};
  ce.tenant = "t";
  ce.ns = "n";
  ce.counter = counter_info();
  ce.counter_tombstone = Tombstone{counter_info().key, Incarnation{7}, ChangeSeq{22}};
  expect_round_trip(ce);
  for (auto k : {ChangeEvent::Kind::counter_created, ChangeEvent::Kind::counter_deleted}) {
    ChangeEvent e = ce;
    e.kind = k;
    if (k == ChangeEvent::Kind::counter_created) e.counter_tombstone.reset();
    auto back = decode_change_payload(e.seq, to_string(k), encode_change_payload(e));
    ASSERT_TRUE(back.ok()) << back.error().to_string();
    EXPECT_EQ(back->kind, k);
    EXPECT_EQ(back->counter, e.counter);
    EXPECT_EQ(back->counter_tombstone.has_value(), e.counter_tombstone.has_value());
    if (back->counter_tombstone) {
      EXPECT_EQ(back->counter_tombstone->key, e.counter.key);
      EXPECT_EQ(back->counter_tombstone->deleted_up_to, Incarnation{7});
    }
  }
  EXPECT_EQ(encode_change_payload(ce),
            R"({"tenant":"t","ns":"n","name":"k","incarnation":7,"created_seq":21,)"
            R"("tombstone":{"deleted_up_to":7,"seq":22}})");
  CatalogSnapshot snap;
  json::value none = json::value_from(snap);
  EXPECT_FALSE(none.as_object().contains("counters"));
  EXPECT_FALSE(none.as_object().contains("counter_tombstones"));
  snap.counters = {counter_info()};
  snap.counter_tombstones = {Tombstone{counter_info().key, Incarnation{6}, ChangeSeq{20}}};
  expect_round_trip(snap);
  auto back = decode_json<CatalogSnapshot>(json::value_from(snap));
  ASSERT_TRUE(back.ok());
  ASSERT_EQ(back->counters.size(), 1u);
  EXPECT_EQ(back->counters[0], counter_info());
  ASSERT_EQ(back->counter_tombstones.size(), 1u);
}

// Snapshots written before caches existed have no "caches" member.
TEST(CatalogJson, OlderSnapshotsWithoutCachesDecode) {
  json::value v = json::value_from(CatalogSnapshot{});
  v.as_object().erase("caches");
  v.as_object().erase("cache_tombstones");
  EXPECT_TRUE(decode_json<CatalogSnapshot>(v).ok());
}

// The exact bytes the raft-meta and postgres-meta encoders wrote before the codec moved
// here: the raft-meta state hash covers them, so members of both builds must agree.
TEST(CatalogJson, ChangePayloadsKeepTheirBytes) {
  ChangeEvent e = stream_event();
  EXPECT_EQ(encode_change_payload(e),
            R"({"tenant":"t","ns":"n","name":"s","incarnation":1764670000000000,"shards":3,)"
            R"("max_bytes":-1,"max_age_ms":60000,"ack":"none","created_seq":7,"created_at_us":-5,)"
            R"("assignments":[{"shard":0,"incarnation":9,"generation":7,"leader":2,"replicas":[2,3]},)"
            R"({"shard":1,"incarnation":9,"generation":7,"leader":2,"replicas":[2,3]}],)"
            R"("tombstone":{"deleted_up_to":9,"seq":20}})");
  ChangeEvent c{};
  c.kind = ChangeEvent::Kind::cache_created;
  c.cache = cache();
  EXPECT_EQ(encode_change_payload(c),
            R"({"tenant":"t","ns":"n","name":"c","incarnation":3,"default_ttl_ms":5000,"created_seq":12})");
  ChangeEvent b{};
  b.kind = ChangeEvent::Kind::broker_registered;
  b.broker = broker();
  EXPECT_EQ(encode_change_payload(b),
            R"({"id":4,"address":"h:1","directory_id":"dir","version":"1.2","features":["a","b"],"registered_seq":11})");
  ChangeEvent f{};
  f.kind = ChangeEvent::Kind::feature_finalized;
  f.feature = "x";
  EXPECT_EQ(encode_change_payload(f), R"({"feature":"x"})");
  ChangeEvent n{};
  n.kind = ChangeEvent::Kind::namespace_deleted;
  n.tenant = "t";
  n.ns = "n";
  EXPECT_EQ(encode_change_payload(n), R"({"tenant":"t","ns":"n"})");
  n.kind = ChangeEvent::Kind::tenant_created;
  EXPECT_EQ(encode_change_payload(n), R"({"tenant":"t"})");
}

TEST(CatalogJson, ChangePayloadsRoundTripForEveryKind) {
  using K = ChangeEvent::Kind;
  for (auto k : {K::tenant_created, K::tenant_deleted, K::namespace_created, K::namespace_deleted,
                 K::stream_created, K::stream_deleted, K::feature_finalized, K::broker_registered,
                 K::broker_unregistered, K::cache_created, K::cache_deleted}) {
    ChangeEvent e{};
    e.kind = k;
    e.seq = ChangeSeq{30};
    e.tenant = "t";
    e.ns = "n";
    e.feature = "f";
    e.stream = stream();
    e.assignments = {assignment(0)};
    e.tombstone = Tombstone{key(), Incarnation{9}, ChangeSeq{30}};
    e.broker = broker();
    e.broker.live = false;  // not stored
    e.cache = cache();
    e.cache.key = StreamKey{"t", "n", "c"};
    e.cache_tombstone = Tombstone{e.cache.key, Incarnation{3}, ChangeSeq{30}};
    std::string bytes = encode_change_payload(e);
    auto back = decode_change_payload(ChangeSeq{30}, to_string(k), bytes);
    ASSERT_TRUE(back.ok()) << to_string(k) << ": " << back.error().to_string();
    EXPECT_EQ(back->kind, k);
    EXPECT_EQ(back->seq, ChangeSeq{30});
    EXPECT_EQ(encode_change_payload(back.value()), bytes) << to_string(k);
    if (k == K::stream_deleted) {
      EXPECT_EQ(back->stream.key, key());
      EXPECT_EQ(back->assignments.at(0).key, key());
      ASSERT_TRUE(back->tombstone);
      EXPECT_EQ(back->tombstone->key, key());
    }
    if (k == K::cache_deleted) {
      ASSERT_TRUE(back->cache_tombstone);
      EXPECT_EQ(back->cache_tombstone->key, e.cache.key);
      EXPECT_FALSE(back->tombstone);
    }
  }
}

// Schema-1 snapshots stored stream changes without assignments or tombstone.
TEST(CatalogJson, SchemaOneStreamPayloadDecodes) {
  auto e = decode_change_payload(
      ChangeSeq{4}, "stream_created",
      R"({"tenant":"t","ns":"n","name":"s","incarnation":0,"shards":1,"max_bytes":-1,)"
      R"("max_age_ms":-1,"ack":"leader","created_seq":4,"created_at_us":0})");
  ASSERT_TRUE(e.ok()) << e.error().to_string();
  EXPECT_TRUE(e->assignments.empty());
  EXPECT_FALSE(e->tombstone);
}

}  // namespace
}  // namespace sluice
