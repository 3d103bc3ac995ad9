#include "sluice/catalog_json.h"

#include "catalog_json_fields.h"

#include <boost/json.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>

namespace sluice {

namespace json = boost::json;

using namespace json_detail;

namespace json_field {
const json::value& required(const json::object& o, std::string_view k) { return field(o, k); }
std::string string(const json::object& o, std::string_view k) { return str(o, k); }
std::uint64_t u64(const json::object& o, std::string_view k) { return sluice::u64(o, k); }
std::uint32_t u32(const json::object& o, std::string_view k) { return sluice::u32(o, k); }
std::int64_t i64(const json::object& o, std::string_view k) { return sluice::i64(o, k); }
bool boolean(const json::object& o, std::string_view k) { return sluice::boolean(o, k); }
std::vector<std::string> strings(const json::object& o, std::string_view k) { return sluice::strings(o, k); }
std::vector<std::uint32_t> u32s(const json::object& o, std::string_view k) {
  std::vector<std::uint32_t> out;
  for (auto& e : arr(o, k)) out.push_back(u32_of(e, k));
  return out;
}
const json::object& object(const json::value& v, std::string_view what) { return as_object(v, what); }
}  // namespace json_field

bool json_numbers_finite(const json::value& v) {
  switch (v.kind()) {
    case json::kind::double_: return std::isfinite(v.get_double());
    case json::kind::array:
      for (const auto& e : v.get_array())
        if (!json_numbers_finite(e)) return false;
      return true;
    case json::kind::object:
      for (const auto& kv : v.get_object())
        if (!json_numbers_finite(kv.value())) return false;
      return true;
    default: return true;
  }
}

std::optional<ChangeEvent::Kind> parse_change_kind(std::string_view s) {
  using K = ChangeEvent::Kind;
  for (auto k : {K::tenant_created, K::tenant_deleted, K::namespace_created, K::namespace_deleted,
                 K::stream_created, K::stream_deleted, K::feature_finalized, K::broker_registered,
                 K::broker_unregistered, K::cache_created, K::cache_deleted, K::shard_changed,
                 K::counter_created, K::counter_deleted})
    if (s == to_string(k)) return k;
  return std::nullopt;
}

// --- enums -------------------------------------------------------------------------------

void tag_invoke(const json::value_from_tag&, json::value& jv, const AckMode& x) { jv = to_string(x); }
AckMode tag_invoke(const json::value_to_tag<AckMode>&, const json::value& jv) {
  if (!jv.is_string()) refuse("ack mode must be a string");
  auto m = parse_ack_mode(jv.get_string());
  if (!m) refuse("unknown ack mode \"" + std::string(jv.get_string()) + "\"");
  return *m;
}

void tag_invoke(const json::value_from_tag&, json::value& jv, const ChangeEvent::Kind& x) {
  jv = to_string(x);
}
ChangeEvent::Kind tag_invoke(const json::value_to_tag<ChangeEvent::Kind>&, const json::value& jv) {
  if (!jv.is_string()) refuse("change kind must be a string");
  auto k = parse_change_kind(jv.get_string());
  if (!k) refuse("unknown change kind \"" + std::string(jv.get_string()) + "\"");
  return *k;
}

// --- names and streams -------------------------------------------------------------------

void tag_invoke(const json::value_from_tag&, json::value& jv, const StreamKey& k) {
  jv = json::object{{"tenant", k.tenant}, {"ns", k.ns}, {"name", k.name}};
}
StreamKey tag_invoke(const json::value_to_tag<StreamKey>&, const json::value& jv) {
  auto& o = as_object(jv, "key");
  return StreamKey{str(o, "tenant"), str(o, "ns"), str(o, "name")};
}

void tag_invoke(const json::value_from_tag&, json::value& jv, const StreamSpec& sp) {
  json::object o{{"shards", sp.shards},
                 {"max_bytes", sp.retention.max_bytes},
                 {"max_age_ms", sp.retention.max_age_ms},
                 {"ack", to_string(sp.default_ack)}};
  put_replication(o, sp);
  jv = std::move(o);
}
StreamSpec tag_invoke(const json::value_to_tag<StreamSpec>&, const json::value& jv) {
  auto& o = as_object(jv, "spec");
  StreamSpec sp;
  sp.shards = u32(o, "shards");
  sp.retention.max_bytes = i64(o, "max_bytes");
  sp.retention.max_age_ms = i64(o, "max_age_ms");
  sp.default_ack = json::value_to<AckMode>(field(o, "ack"));
  get_replication(o, sp);
  return sp;
}

void tag_invoke(const json::value_from_tag&, json::value& jv, const StreamInfo& st) {
  jv = json::object{{"key", json::value_from(st.key)},
                    {"incarnation", st.incarnation.value()},
                    {"spec", json::value_from(st.spec)},
                    {"created_seq", st.created_seq.value()},
                    {"created_at_us", st.created_at_us}};
}
StreamInfo tag_invoke(const json::value_to_tag<StreamInfo>&, const json::value& jv) {
  auto& o = as_object(jv, "stream");
  StreamInfo st;
  st.key = json::value_to<StreamKey>(field(o, "key"));
  st.incarnation = Incarnation{u64(o, "incarnation")};
  st.spec = json::value_to<StreamSpec>(field(o, "spec"));
  st.created_seq = ChangeSeq{u64(o, "created_seq")};
  st.created_at_us = i64(o, "created_at_us");
  return st;
}

void tag_invoke(const json::value_from_tag&, json::value& jv, const TenantInfo& t) {
  jv = json::object{{"name", t.name}, {"created_seq", t.created_seq.value()}};
}
TenantInfo tag_invoke(const json::value_to_tag<TenantInfo>&, const json::value& jv) {
  auto& o = as_object(jv, "tenant");
  return TenantInfo{str(o, "name"), ChangeSeq{u64(o, "created_seq")}};
}

void tag_invoke(const json::value_from_tag&, json::value& jv, const NamespaceInfo& n) {
  jv = json::object{{"tenant", n.tenant}, {"name", n.name}, {"created_seq", n.created_seq.value()}};
}
NamespaceInfo tag_invoke(const json::value_to_tag<NamespaceInfo>&, const json::value& jv) {
  auto& o = as_object(jv, "namespace");
  return NamespaceInfo{str(o, "tenant"), str(o, "name"), ChangeSeq{u64(o, "created_seq")}};
}

void tag_invoke(const json::value_from_tag&, json::value& jv, const Tombstone& t) {
  jv = json::object{{"key", json::value_from(t.key)},
                    {"deleted_up_to", t.deleted_up_to.value()},
                    {"seq", t.seq.value()}};
}
Tombstone tag_invoke(const json::value_to_tag<Tombstone>&, const json::value& jv) {
  auto& o = as_object(jv, "tombstone");
  return Tombstone{json::value_to<StreamKey>(field(o, "key")), Incarnation{u64(o, "deleted_up_to")},
                   ChangeSeq{u64(o, "seq")}};
}

void tag_invoke(const json::value_from_tag&, json::value& jv, const InSyncReplica& r) {
  jv = json::object{{"broker", r.broker.value()}, {"directory_id", r.directory_id}};
}
InSyncReplica tag_invoke(const json::value_to_tag<InSyncReplica>&, const json::value& jv) {
  auto& o = as_object(jv, "in_sync entry");
  return InSyncReplica{NodeId{u32(o, "broker")}, str(o, "directory_id")};
}

void tag_invoke(const json::value_from_tag&, json::value& jv, const Assignment& a) {
  json::object o{{"key", json::value_from(a.key)},          {"shard", a.shard.value()},
                 {"incarnation", a.incarnation.value()}, {"generation", a.generation.value()},
                 {"leader", a.leader.value()},           {"replicas", ids_json(a.replicas)}};
  put_replica_state(o, a);
  jv = std::move(o);
}
Assignment tag_invoke(const json::value_to_tag<Assignment>&, const json::value& jv) {
  auto& o = as_object(jv, "assignment");
  Assignment a;
  a.key = json::value_to<StreamKey>(field(o, "key"));
  a.shard = ShardIndex{u32(o, "shard")};
  a.incarnation = Incarnation{u64(o, "incarnation")};
  a.generation = Generation{u64(o, "generation")};
  a.leader = NodeId{u32(o, "leader")};
  a.replicas = node_ids(o, "replicas");
  get_replica_state(o, a);
  return a;
}

void tag_invoke(const json::value_from_tag&, json::value& jv, const ShardUpdate& u) {
  json::object o{{"key", json::value_from(u.key)},
                 {"shard", u.shard.value()},
                 {"incarnation", u.incarnation.value()},
                 {"expected_version", u.expected_version.value()},
                 {"leader", u.leader.value()},
                 {"leader_epoch", u.leader_epoch.value()},
                 {"in_sync", in_sync_json(u.in_sync)}};
  // Only a reassignment step carries these (level 17): a level-16 update reads as before.
  if (u.replicas) {
    o["replicas"] = ids_json(*u.replicas);
    o["target_replicas"] = ids_json(u.target_replicas);
  }
  jv = std::move(o);
}
ShardUpdate tag_invoke(const json::value_to_tag<ShardUpdate>&, const json::value& jv) {
  auto& o = as_object(jv, "shard update");
  ShardUpdate u;
  u.key = json::value_to<StreamKey>(field(o, "key"));
  u.shard = ShardIndex{u32(o, "shard")};
  u.incarnation = Incarnation{u64(o, "incarnation")};
  u.expected_version = ShardVersion{u64(o, "expected_version")};
  u.leader = NodeId{u32(o, "leader")};
  u.leader_epoch = LeaderEpoch{u64(o, "leader_epoch")};
  u.in_sync = in_sync_of(o, "in_sync");
  if (o.contains("replicas")) {
    u.replicas = node_ids(o, "replicas");
    if (o.contains("target_replicas")) u.target_replicas = node_ids(o, "target_replicas");
  }
  return u;
}

// --- fleet -------------------------------------------------------------------------------

void tag_invoke(const json::value_from_tag&, json::value& jv, const BrokerInfo& b) {
  json::object o{{"id", b.id.value()},           {"address", b.address},
                 {"directory_id", b.directory_id}, {"version", b.version},
                 {"features", strings_json(b.features)}, {"live", b.live},
                 {"registered_seq", b.registered_seq.value()}};
  if (!b.peer_address.empty()) o["peer_address"] = b.peer_address;
  jv = std::move(o);
}
BrokerInfo tag_invoke(const json::value_to_tag<BrokerInfo>&, const json::value& jv) {
  auto& o = as_object(jv, "broker");
  BrokerInfo b;
  b.id = NodeId{u32(o, "id")};
  b.address = str(o, "address");
  b.directory_id = str(o, "directory_id");
  b.version = str(o, "version");
  b.features = strings(o, "features");
  b.live = boolean(o, "live");
  b.registered_seq = ChangeSeq{u64(o, "registered_seq")};
  b.peer_address = opt_str(o, "peer_address");
  return b;
}

void tag_invoke(const json::value_from_tag&, json::value& jv, const BrokerRegistration& b) {
  json::object o{{"id", b.id.value()},
                 {"address", b.address},
                 {"directory_id", b.directory_id},
                 {"version", b.version},
                 {"features", strings_json(b.features)}};
  if (!b.peer_address.empty()) o["peer_address"] = b.peer_address;
  jv = std::move(o);
}
BrokerRegistration tag_invoke(const json::value_to_tag<BrokerRegistration>&, const json::value& jv) {
  auto& o = as_object(jv, "broker");
  BrokerRegistration b;
  b.id = NodeId{u32(o, "id")};
  b.address = str(o, "address");
  b.directory_id = str(o, "directory_id");
  b.version = str(o, "version");
  b.features = strings(o, "features");
  b.peer_address = opt_str(o, "peer_address");
  return b;
}

void tag_invoke(const json::value_from_tag&, json::value& jv, const FeatureInfo& f) {
  jv = json::object{{"name", f.name},
                    {"required_level", f.required_level.value()},
                    {"finalized", f.finalized},
                    {"finalized_seq", f.finalized_seq.value()},
                    {"supported_by", ids_json(f.supported_by)},
                    {"lacking", ids_json(f.lacking)}};
}
FeatureInfo tag_invoke(const json::value_to_tag<FeatureInfo>&, const json::value& jv) {
  auto& o = as_object(jv, "feature");
  FeatureInfo f;
  f.name = str(o, "name");
  f.required_level = MetadataLevel{u32(o, "required_level")};
  f.finalized = boolean(o, "finalized");
  f.finalized_seq = ChangeSeq{u64(o, "finalized_seq")};
  f.supported_by = node_ids(o, "supported_by");
  f.lacking = node_ids(o, "lacking");
  return f;
}

// --- caches ------------------------------------------------------------------------------

void tag_invoke(const json::value_from_tag&, json::value& jv, const CacheSpec& c) {
  jv = json::object{{"default_ttl_ms", c.default_ttl_ms}};
}
CacheSpec tag_invoke(const json::value_to_tag<CacheSpec>&, const json::value& jv) {
  CacheSpec c;
  c.default_ttl_ms = i64(as_object(jv, "cache spec"), "default_ttl_ms");
  return c;
}

void tag_invoke(const json::value_from_tag&, json::value& jv, const CacheInfo& c) {
  jv = json::object{{"key", json::value_from(c.key)},
                    {"incarnation", c.incarnation.value()},
                    {"spec", json::value_from(c.spec)},
                    {"created_seq", c.created_seq.value()}};
}
CacheInfo tag_invoke(const json::value_to_tag<CacheInfo>&, const json::value& jv) {
  auto& o = as_object(jv, "cache");
  CacheInfo c;
  c.key = json::value_to<StreamKey>(field(o, "key"));
  c.incarnation = Incarnation{u64(o, "incarnation")};
  c.spec = json::value_to<CacheSpec>(field(o, "spec"));
  c.created_seq = ChangeSeq{u64(o, "created_seq")};
  return c;
}

// --- counters ----------------------------------------------------------------------------

void tag_invoke(const json::value_from_tag&, json::value& jv, const CounterInfo& c) {
  jv = json::object{{"key", json::value_from(c.key)},
                    {"incarnation", c.incarnation.value()},
                    {"created_seq", c.created_seq.value()}};
}
CounterInfo tag_invoke(const json::value_to_tag<CounterInfo>&, const json::value& jv) {
  auto& o = as_object(jv, "counter");
  CounterInfo c;
  c.key = json::value_to<StreamKey>(field(o, "key"));
  c.incarnation = Incarnation{u64(o, "incarnation")};
  c.created_seq = ChangeSeq{u64(o, "created_seq")};
  return c;
}

// --- members -----------------------------------------------------------------------------

// A MemberInfo is its JoinRequest (the same first four fields) and what it reports.
void tag_invoke(const json::value_from_tag&, json::value& jv, const MemberInfo& m) {
  json::object o = json::value_from(JoinRequest{m.id, m.raft_address, m.rpc_address, m.level}).as_object();
  o["joined_seq"] = m.joined_seq.value();
  o["role"] = m.role;
  o["held"] = m.held;
  o["held_index"] = m.held_index.value();
  o["held_required_level"] = m.held_required_level.value();
  o["held_reason"] = m.held_reason;
  o["applied"] = m.applied.value();
  o["state_hash"] = m.state_hash;
  jv = std::move(o);
}
MemberInfo tag_invoke(const json::value_to_tag<MemberInfo>&, const json::value& jv) {
  auto& o = as_object(jv, "member");
  MemberInfo m;
  JoinRequest j = json::value_to<JoinRequest>(jv);
  m.id = j.id;
  m.raft_address = std::move(j.raft_address);
  m.rpc_address = std::move(j.rpc_address);
  m.level = j.level;
  m.joined_seq = ChangeSeq{u64(o, "joined_seq")};
  m.role = str(o, "role");
  m.held = boolean(o, "held");
  m.held_index = ChangeSeq{u64(o, "held_index")};
  m.held_required_level = MetadataLevel{u32(o, "held_required_level")};
  m.held_reason = str(o, "held_reason");
  m.applied = ChangeSeq{u64(o, "applied")};
  m.state_hash = u64(o, "state_hash");
  return m;
}

void tag_invoke(const json::value_from_tag&, json::value& jv, const MembersView& v) {
  json::array ms;
  for (auto& m : v.members) ms.push_back(json::value_from(m));
  jv = json::object{{"members", std::move(ms)},
                    {"leader", v.leader.value()},
                    {"group_level", v.group_level.value()},
                    {"level_floor", v.level_floor.value()}};
}
MembersView tag_invoke(const json::value_to_tag<MembersView>&, const json::value& jv) {
  auto& o = as_object(jv, "members view");
  MembersView m;
  m.members = list<MemberInfo>(o, "members");
  m.leader = NodeId{u32(o, "leader")};
  m.group_level = MetadataLevel{u32(o, "group_level")};
  m.level_floor = MetadataLevel{u32(o, "level_floor")};
  return m;
}

void tag_invoke(const json::value_from_tag&, json::value& jv, const JoinRequest& j) {
  jv = json::object{{"id", j.id.value()},
                    {"raft_address", j.raft_address},
                    {"rpc_address", j.rpc_address},
                    {"level", j.level.value()}};
}
JoinRequest tag_invoke(const json::value_to_tag<JoinRequest>&, const json::value& jv) {
  auto& o = as_object(jv, "member");
  JoinRequest j;
  j.id = NodeId{u32(o, "id")};
  j.raft_address = str(o, "raft_address");
  j.rpc_address = str(o, "rpc_address");
  j.level = MetadataLevel{u32(o, "level")};
  return j;
}

// --- change events and snapshots ---------------------------------------------------------

void tag_invoke(const json::value_from_tag&, json::value& jv, const ChangeEvent& e) {
  json::object o{{"kind", to_string(e.kind)},         {"seq", e.seq.value()},
                 {"tenant", e.tenant},                {"ns", e.ns},
                 {"stream", json::value_from(e.stream)}, {"feature", e.feature},
                 {"broker", json::value_from(e.broker)}};
  json::array as;
  for (auto& a : e.assignments) as.push_back(json::value_from(a));
  o["assignments"] = std::move(as);
  if (e.tombstone) o["tombstone"] = json::value_from(*e.tombstone);
  if (e.kind == ChangeEvent::Kind::cache_created || e.kind == ChangeEvent::Kind::cache_deleted)
    o["cache"] = json::value_from(e.cache);
  if (e.cache_tombstone) o["cache_tombstone"] = json::value_from(*e.cache_tombstone);
  if (e.kind == ChangeEvent::Kind::counter_created || e.kind == ChangeEvent::Kind::counter_deleted)
    o["counter"] = json::value_from(e.counter);
  if (e.counter_tombstone) o["counter_tombstone"] = json::value_from(*e.counter_tombstone);
  jv = std::move(o);
}
ChangeEvent tag_invoke(const json::value_to_tag<ChangeEvent>&, const json::value& jv) {
  auto& o = as_object(jv, "change");
  ChangeEvent e{};
  e.kind = json::value_to<ChangeEvent::Kind>(field(o, "kind"));
  e.seq = ChangeSeq{u64(o, "seq")};
  e.tenant = str(o, "tenant");
  e.ns = str(o, "ns");
  e.stream = json::value_to<StreamInfo>(field(o, "stream"));
  e.feature = str(o, "feature");
  e.broker = json::value_to<BrokerInfo>(field(o, "broker"));
  e.assignments = list<Assignment>(o, "assignments");
  if (auto* t = o.if_contains("tombstone")) e.tombstone = json::value_to<Tombstone>(*t);
  if (auto* c = o.if_contains("cache")) e.cache = json::value_to<CacheInfo>(*c);
  if (auto* t = o.if_contains("cache_tombstone")) e.cache_tombstone = json::value_to<Tombstone>(*t);
  if (auto* c = o.if_contains("counter")) e.counter = json::value_to<CounterInfo>(*c);
  if (auto* t = o.if_contains("counter_tombstone"))
    e.counter_tombstone = json::value_to<Tombstone>(*t);
  return e;
}

void tag_invoke(const json::value_from_tag&, json::value& jv, const CatalogSnapshot& c) {
  auto all = [](const auto& v) {
    json::array a;
    for (auto& x : v) a.push_back(json::value_from(x));
    return a;
  };
  json::object o{{"seq", c.seq.value()},
                    {"finalized_features", strings_json(c.finalized_features)},
                    {"caches", all(c.caches)},
                    {"cache_tombstones", all(c.cache_tombstones)},
                    {"tenants", all(c.tenants)},
                    {"namespaces", all(c.namespaces)},
                    {"streams", all(c.streams)},
                    {"tombstones", all(c.tombstones)},
                    {"assignments", all(c.assignments)},
                    {"brokers", all(c.brokers)}};
  // Level 18, written only when there is one, so older snapshots stay byte-identical.
  if (!c.counters.empty()) o["counters"] = all(c.counters);
  if (!c.counter_tombstones.empty()) o["counter_tombstones"] = all(c.counter_tombstones);
  jv = std::move(o);
}
CatalogSnapshot tag_invoke(const json::value_to_tag<CatalogSnapshot>&, const json::value& jv) {
  auto& o = as_object(jv, "snapshot");
  CatalogSnapshot c;
  c.seq = ChangeSeq{u64(o, "seq")};
  c.tenants = list<TenantInfo>(o, "tenants");
  c.namespaces = list<NamespaceInfo>(o, "namespaces");
  c.streams = list<StreamInfo>(o, "streams");
  c.tombstones = list<Tombstone>(o, "tombstones");
  c.assignments = list<Assignment>(o, "assignments");
  c.brokers = list<BrokerInfo>(o, "brokers");
  c.finalized_features = strings(o, "finalized_features");
  c.caches = optional_list<CacheInfo>(o, "caches");
  c.cache_tombstones = optional_list<Tombstone>(o, "cache_tombstones");
  c.counters = optional_list<CounterInfo>(o, "counters");
  c.counter_tombstones = optional_list<Tombstone>(o, "counter_tombstones");
  return c;
}

template <class T>
Result<T> decode_json(const json::value& v) {
  try {
    return json::value_to<T>(v);
  } catch (const std::exception& e) {
    return Error(Errc::malformed_body, e.what());
  }
}

template Result<AckMode> decode_json(const json::value&);
template Result<ChangeEvent::Kind> decode_json(const json::value&);
template Result<StreamKey> decode_json(const json::value&);
template Result<StreamSpec> decode_json(const json::value&);
template Result<StreamInfo> decode_json(const json::value&);
template Result<TenantInfo> decode_json(const json::value&);
template Result<NamespaceInfo> decode_json(const json::value&);
template Result<Tombstone> decode_json(const json::value&);
template Result<InSyncReplica> decode_json(const json::value&);
template Result<Assignment> decode_json(const json::value&);
template Result<ShardUpdate> decode_json(const json::value&);
template Result<BrokerInfo> decode_json(const json::value&);
template Result<BrokerRegistration> decode_json(const json::value&);
template Result<FeatureInfo> decode_json(const json::value&);
template Result<CacheSpec> decode_json(const json::value&);
template Result<CacheInfo> decode_json(const json::value&);
template Result<CounterInfo> decode_json(const json::value&);
template Result<MemberInfo> decode_json(const json::value&);
template Result<MembersView> decode_json(const json::value&);
template Result<JoinRequest> decode_json(const json::value&);
template Result<ChangeEvent> decode_json(const json::value&);
template Result<CatalogSnapshot> decode_json(const json::value&);

}  // namespace sluice
