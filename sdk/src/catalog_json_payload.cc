// The stored change-payload format (raft-meta's and postgres-meta's change logs): see
// sluice/catalog_json.h for the shape per kind.
#include "catalog_json_fields.h"

namespace sluice {

namespace json = boost::json;
using namespace json_detail;

// --- the change-payload shape ------------------------------------------------------------

namespace {

using K = ChangeEvent::Kind;

bool is_stream_kind(K k) { return k == K::stream_created || k == K::stream_deleted; }
bool is_cache_kind(K k) { return k == K::cache_created || k == K::cache_deleted; }
bool is_counter_kind(K k) { return k == K::counter_created || k == K::counter_deleted; }
bool is_broker_kind(K k) { return k == K::broker_registered || k == K::broker_unregistered; }

json::object tombstone_payload(const Tombstone& t) {
  json::object o;
  o["deleted_up_to"] = t.deleted_up_to.value();
  o["seq"] = t.seq.value();
  return o;
}

std::optional<Tombstone> tombstone_from_payload(const json::object& o, const StreamKey& key) {
  auto* v = o.if_contains("tombstone");
  if (!v) return std::nullopt;
  auto& t = as_object(*v, "tombstone");
  return Tombstone{key, Incarnation{u64(t, "deleted_up_to")}, ChangeSeq{u64(t, "seq")}};
}

}  // namespace

std::string encode_change_payload(const ChangeEvent& e) {
  // Field order is part of the format: these bytes are hashed (raft-meta state_hash).
  json::object o;
  if (is_stream_kind(e.kind)) {
    const StreamInfo& s = e.stream;
    o["tenant"] = s.key.tenant;
    o["ns"] = s.key.ns;
    o["name"] = s.key.name;
    o["incarnation"] = s.incarnation.value();
    o["shards"] = s.spec.shards;
    o["max_bytes"] = s.spec.retention.max_bytes;
    o["max_age_ms"] = s.spec.retention.max_age_ms;
    o["ack"] = to_string(s.spec.default_ack);
    o["created_seq"] = s.created_seq.value();
    o["created_at_us"] = s.created_at_us;
    put_replication(o, s.spec);
    json::array as;
    for (auto& x : e.assignments) {
      json::object a;
      a["shard"] = x.shard.value();
      a["incarnation"] = x.incarnation.value();
      a["generation"] = x.generation.value();
      a["leader"] = x.leader.value();
      a["replicas"] = ids_json(x.replicas);
      put_replica_state(a, x);
      as.emplace_back(std::move(a));
    }
    o["assignments"] = std::move(as);
    if (e.tombstone) o["tombstone"] = tombstone_payload(*e.tombstone);
  } else if (is_cache_kind(e.kind)) {
    const CacheInfo& c = e.cache;
    o["tenant"] = c.key.tenant;
    o["ns"] = c.key.ns;
    o["name"] = c.key.name;
    o["incarnation"] = c.incarnation.value();
    o["default_ttl_ms"] = c.spec.default_ttl_ms;
    o["created_seq"] = c.created_seq.value();
    if (e.cache_tombstone) o["tombstone"] = tombstone_payload(*e.cache_tombstone);
  } else if (is_counter_kind(e.kind)) {
    const CounterInfo& c = e.counter;
    o["tenant"] = c.key.tenant;
    o["ns"] = c.key.ns;
    o["name"] = c.key.name;
    o["incarnation"] = c.incarnation.value();
    o["created_seq"] = c.created_seq.value();
    if (e.counter_tombstone) o["tombstone"] = tombstone_payload(*e.counter_tombstone);
  } else if (is_broker_kind(e.kind)) {
    const BrokerInfo& b = e.broker;
    o["id"] = b.id.value();
    o["address"] = b.address;
    o["directory_id"] = b.directory_id;
    o["version"] = b.version;
    o["features"] = strings_json(b.features);
    o["registered_seq"] = b.registered_seq.value();
    if (!b.peer_address.empty()) o["peer_address"] = b.peer_address;
  } else if (e.kind == K::feature_finalized) {
    o["feature"] = e.feature;
  } else if (e.kind == K::shard_changed) {
    // The one assignment as the update left it; every field, always.
    Assignment x = e.assignments.empty() ? Assignment{} : e.assignments.front();
    o["tenant"] = e.stream.key.tenant;
    o["ns"] = e.stream.key.ns;
    o["name"] = e.stream.key.name;
    o["shard"] = x.shard.value();
    o["incarnation"] = x.incarnation.value();
    o["generation"] = x.generation.value();
    o["leader"] = x.leader.value();
    o["replicas"] = ids_json(x.replicas);
    o["leader_epoch"] = x.leader_epoch.value();
    o["in_sync"] = in_sync_json(x.in_sync);
    o["version"] = x.version.value();
    // Only while a reassignment runs (level 17): older payloads stay byte for byte the same.
    if (!x.target_replicas.empty()) o["target_replicas"] = ids_json(x.target_replicas);
  } else {  // tenant and namespace events
    o["tenant"] = e.tenant;
    if (e.kind == K::namespace_created || e.kind == K::namespace_deleted) o["ns"] = e.ns;
  }
  return json::serialize(o);
}

Result<ChangeEvent> decode_change_payload(ChangeSeq seq, std::string_view kind,
                                          std::string_view payload) {
  const std::string where = "change " + std::to_string(seq.value());
  auto k = parse_change_kind(kind);
  if (!k) return Error(Errc::malformed_body, where + " has unknown kind '" + std::string(kind) + "'");
  boost::system::error_code ec;
  json::value v = json::parse(payload, ec);
  if (ec) return Error(Errc::malformed_body, where + ": payload is not JSON (" + ec.message() + ")");
  try {
    auto& o = as_object(v, "payload");
    ChangeEvent ev{};
    ev.kind = *k;
    ev.seq = seq;
    if (is_stream_kind(*k)) {
      ev.tenant = str(o, "tenant");
      ev.ns = str(o, "ns");
      StreamInfo& s = ev.stream;
      s.key = StreamKey{ev.tenant, ev.ns, str(o, "name")};
      s.incarnation = Incarnation{u64(o, "incarnation")};
      s.spec.shards = u32(o, "shards");
      s.spec.retention.max_bytes = i64(o, "max_bytes");
      s.spec.retention.max_age_ms = i64(o, "max_age_ms");
      s.spec.default_ack = json::value_to<AckMode>(field(o, "ack"));
      s.created_seq = ChangeSeq{u64(o, "created_seq")};
      s.created_at_us = i64(o, "created_at_us");
      get_replication(o, s.spec);
      if (o.contains("assignments")) {
        for (auto& e : arr(o, "assignments")) {
          auto& ao = as_object(e, "assignment");
          Assignment a;
          a.key = s.key;
          a.shard = ShardIndex{u32(ao, "shard")};
          a.incarnation = Incarnation{u64(ao, "incarnation")};
          a.generation = Generation{u64(ao, "generation")};
          a.leader = NodeId{u32(ao, "leader")};
          a.replicas = node_ids(ao, "replicas");
          get_replica_state(ao, a);
          ev.assignments.push_back(std::move(a));
        }
      }
      ev.tombstone = tombstone_from_payload(o, s.key);
    } else if (is_cache_kind(*k)) {
      ev.tenant = str(o, "tenant");
      ev.ns = str(o, "ns");
      CacheInfo& c = ev.cache;
      c.key = StreamKey{ev.tenant, ev.ns, str(o, "name")};
      c.incarnation = Incarnation{u64(o, "incarnation")};
      c.spec.default_ttl_ms = i64(o, "default_ttl_ms");
      c.created_seq = ChangeSeq{u64(o, "created_seq")};
      ev.cache_tombstone = tombstone_from_payload(o, c.key);
    } else if (is_counter_kind(*k)) {
      ev.tenant = str(o, "tenant");
      ev.ns = str(o, "ns");
      CounterInfo& c = ev.counter;
      c.key = StreamKey{ev.tenant, ev.ns, str(o, "name")};
      c.incarnation = Incarnation{u64(o, "incarnation")};
      c.created_seq = ChangeSeq{u64(o, "created_seq")};
      ev.counter_tombstone = tombstone_from_payload(o, c.key);
    } else if (is_broker_kind(*k)) {
      BrokerInfo& b = ev.broker;
      b.id = NodeId{u32(o, "id")};
      b.address = str(o, "address");
      b.directory_id = str(o, "directory_id");
      b.version = str(o, "version");
      b.features = strings(o, "features");
      b.registered_seq = ChangeSeq{u64(o, "registered_seq")};
      b.peer_address = opt_str(o, "peer_address");
    } else if (*k == K::feature_finalized) {
      ev.feature = str(o, "feature");
    } else if (*k == K::shard_changed) {
      ev.tenant = str(o, "tenant");
      ev.ns = str(o, "ns");
      Assignment a;
      a.key = StreamKey{ev.tenant, ev.ns, str(o, "name")};
      a.shard = ShardIndex{u32(o, "shard")};
      a.incarnation = Incarnation{u64(o, "incarnation")};
      a.generation = Generation{u64(o, "generation")};
      a.leader = NodeId{u32(o, "leader")};
      a.replicas = node_ids(o, "replicas");
      a.leader_epoch = LeaderEpoch{u64(o, "leader_epoch")};
      a.in_sync = in_sync_of(o, "in_sync");
      a.version = ShardVersion{u64(o, "version")};
      if (o.contains("target_replicas")) a.target_replicas = node_ids(o, "target_replicas");
      ev.stream.key = a.key;
      ev.stream.incarnation = a.incarnation;
      ev.assignments.push_back(std::move(a));
    } else {
      ev.tenant = str(o, "tenant");
      if (*k == K::namespace_created || *k == K::namespace_deleted) ev.ns = str(o, "ns");
    }
    return ev;
  } catch (const std::exception& e) {
    return Error(Errc::malformed_body, where + " (" + std::string(kind) + "): " + e.what());
  }
}

}  // namespace sluice
