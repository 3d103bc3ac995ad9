#include "rpc_codec.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace sluice::raft_meta::rpc {

namespace json = boost::json;

namespace {
std::uint64_t u(const json::object& o, const char* k) { return o.at(k).to_number<std::uint64_t>(); }
std::int64_t i(const json::object& o, const char* k) { return o.at(k).to_number<std::int64_t>(); }
std::string s(const json::object& o, const char* k) { return std::string(o.at(k).as_string()); }
json::array ids(const std::vector<NodeId>& v) {
  json::array a;
  for (auto x : v) a.emplace_back(x.value());
  return a;
}
std::vector<NodeId> ids_from(const json::value& v) {
  std::vector<NodeId> out;
  for (auto& e : v.as_array()) out.push_back(NodeId{e.to_number<std::uint32_t>()});
  return out;
}
json::array strs(const std::vector<std::string>& v) {
  json::array a;
  for (auto& x : v) a.emplace_back(x);
  return a;
}
std::vector<std::string> strs_from(const json::value& v) {
  std::vector<std::string> out;
  for (auto& e : v.as_array()) out.emplace_back(e.as_string());
  return out;
}
template <class T, class F>
json::array arr(const std::vector<T>& v) {
  json::array a;
  for (auto& x : v) a.push_back(to_json(x));
  return a;
}
template <class T, class F>
std::vector<T> arr_from(const json::value& v, F f) {
  std::vector<T> out;
  for (auto& e : v.as_array()) out.push_back(f(e));
  return out;
}
}  // namespace

json::value to_json(const TenantInfo& t) {
  return json::object{{"name", t.name}, {"created_seq", t.created_seq.value()}};
}
json::value to_json(const NamespaceInfo& n) {
  return json::object{{"tenant", n.tenant}, {"name", n.name}, {"created_seq", n.created_seq.value()}};
}
json::value to_json(const StreamKey& k) {
  return json::object{{"tenant", k.tenant}, {"ns", k.ns}, {"name", k.name}};
}
json::value to_json(const StreamSpec& sp) {
  return json::object{{"shards", sp.shards},
                      {"max_bytes", sp.retention.max_bytes},
                      {"max_age_ms", sp.retention.max_age_ms},
                      {"ack", to_string(sp.default_ack)}};
}
json::value to_json(const StreamInfo& st) {
  return json::object{{"key", to_json(st.key)},
                      {"incarnation", st.incarnation.value()},
                      {"spec", to_json(st.spec)},
                      {"created_seq", st.created_seq.value()},
                      {"created_at_us", st.created_at_us}};
}
json::value to_json(const Tombstone& t) {
  return json::object{{"key", to_json(t.key)},
                      {"deleted_up_to", t.deleted_up_to.value()},
                      {"seq", t.seq.value()}};
}
json::value to_json(const Assignment& a) {
  return json::object{{"key", to_json(a.key)},          {"shard", a.shard.value()},
                      {"incarnation", a.incarnation.value()}, {"generation", a.generation.value()},
                      {"leader", a.leader.value()},     {"replicas", ids(a.replicas)}};
}
json::value to_json(const BrokerInfo& b) {
  return json::object{{"id", b.id.value()},           {"address", b.address},
                      {"directory_id", b.directory_id}, {"version", b.version},
                      {"features", strs(b.features)}, {"live", b.live},
                      {"registered_seq", b.registered_seq.value()}};
}
json::value to_json(const BrokerRegistration& b) {
  return json::object{{"id", b.id.value()},
                      {"address", b.address},
                      {"directory_id", b.directory_id},
                      {"version", b.version},
                      {"features", strs(b.features)}};
}
json::value to_json(const FeatureInfo& f) {
  return json::object{{"name", f.name},
                      {"required_level", f.required_level.value()},
                      {"finalized", f.finalized},
                      {"finalized_seq", f.finalized_seq.value()},
                      {"supported_by", ids(f.supported_by)},
                      {"lacking", ids(f.lacking)}};
}
json::value to_json(const ChangeEvent& e) {
  json::object o{{"kind", to_string(e.kind)}, {"seq", e.seq.value()}, {"tenant", e.tenant},
                 {"ns", e.ns},                {"stream", to_json(e.stream)},
                 {"feature", e.feature},      {"broker", to_json(e.broker)}};
  json::array as;
  for (auto& a : e.assignments) as.push_back(to_json(a));
  o["assignments"] = std::move(as);
  if (e.tombstone) o["tombstone"] = to_json(*e.tombstone);
  if (e.kind == ChangeEvent::Kind::cache_created || e.kind == ChangeEvent::Kind::cache_deleted)
    o["cache"] = to_json(e.cache);
  if (e.cache_tombstone) o["cache_tombstone"] = to_json(*e.cache_tombstone);
  return o;
}
json::value to_json(const CacheSpec& c) { return json::object{{"default_ttl_ms", c.default_ttl_ms}}; }
json::value to_json(const CacheInfo& c) {
  return json::object{{"key", to_json(c.key)},
                      {"incarnation", c.incarnation.value()},
                      {"spec", to_json(c.spec)},
                      {"created_seq", c.created_seq.value()}};
}
json::value to_json(const MemberInfo& m) {
  return json::object{{"id", m.id.value()},
                      {"raft_address", m.raft_address},
                      {"rpc_address", m.rpc_address},
                      {"level", m.level.value()},
                      {"joined_seq", m.joined_seq.value()},
                      {"role", m.role},
                      {"held", m.held},
                      {"held_index", m.held_index.value()},
                      {"held_required_level", m.held_required_level.value()},
                      {"held_reason", m.held_reason},
                      {"applied", m.applied.value()},
                      {"state_hash", m.state_hash}};
}
json::value to_json(const MembersView& v) {
  json::array ms;
  for (auto& m : v.members) ms.push_back(to_json(m));
  return json::object{{"members", std::move(ms)},
                      {"leader", v.leader.value()},
                      {"group_level", v.group_level.value()},
                      {"level_floor", v.level_floor.value()}};
}
json::value to_json(const JoinRequest& j) {
  return json::object{{"id", j.id.value()},
                      {"raft_address", j.raft_address},
                      {"rpc_address", j.rpc_address},
                      {"level", j.level.value()}};
}
json::value to_json(const CatalogSnapshot& c) {
  json::object o{{"seq", c.seq.value()}, {"finalized_features", strs(c.finalized_features)}};
  json::array t, n, st, tb, as, br;
  for (auto& x : c.tenants) t.push_back(to_json(x));
  for (auto& x : c.namespaces) n.push_back(to_json(x));
  for (auto& x : c.streams) st.push_back(to_json(x));
  for (auto& x : c.tombstones) tb.push_back(to_json(x));
  for (auto& x : c.assignments) as.push_back(to_json(x));
  for (auto& x : c.brokers) br.push_back(to_json(x));
  json::array ca, ct;
  for (auto& x : c.caches) ca.push_back(to_json(x));
  for (auto& x : c.cache_tombstones) ct.push_back(to_json(x));
  o["caches"] = std::move(ca);
  o["cache_tombstones"] = std::move(ct);
  o["tenants"] = std::move(t);
  o["namespaces"] = std::move(n);
  o["streams"] = std::move(st);
  o["tombstones"] = std::move(tb);
  o["assignments"] = std::move(as);
  o["brokers"] = std::move(br);
  return o;
}
json::value to_json(const MetadataStatus& m) {
  return json::object{{"backend", m.backend}, {"cluster_id", m.cluster_id}, {"ready", m.ready},
                      {"detail", m.detail},   {"level", m.level.value()},   {"applied", m.applied.value()}};
}
json::value to_json(const Error& e) {
  return json::object{{"code", errc_name(e.code)},
                      {"message", e.message},
                      {"outcome", e.outcome == Outcome::definite    ? "definite"
                                  : e.outcome == Outcome::transient ? "transient"
                                                                    : "uncertain"}};
}

TenantInfo tenant_from(const json::value& v) {
  auto& o = v.as_object();
  return TenantInfo{s(o, "name"), ChangeSeq{u(o, "created_seq")}};
}
NamespaceInfo namespace_from(const json::value& v) {
  auto& o = v.as_object();
  return NamespaceInfo{s(o, "tenant"), s(o, "name"), ChangeSeq{u(o, "created_seq")}};
}
StreamKey key_from(const json::value& v) {
  auto& o = v.as_object();
  return StreamKey{s(o, "tenant"), s(o, "ns"), s(o, "name")};
}
StreamSpec spec_from(const json::value& v) {
  auto& o = v.as_object();
  StreamSpec sp;
  sp.shards = static_cast<std::uint32_t>(u(o, "shards"));
  sp.retention.max_bytes = i(o, "max_bytes");
  sp.retention.max_age_ms = i(o, "max_age_ms");
  auto ack = parse_ack_mode(s(o, "ack"));
  if (!ack) throw std::invalid_argument("unknown ack mode");
  sp.default_ack = *ack;
  return sp;
}
StreamInfo stream_from(const json::value& v) {
  auto& o = v.as_object();
  StreamInfo st;
  st.key = key_from(o.at("key"));
  st.incarnation = Incarnation{u(o, "incarnation")};
  st.spec = spec_from(o.at("spec"));
  st.created_seq = ChangeSeq{u(o, "created_seq")};
  st.created_at_us = i(o, "created_at_us");
  return st;
}
Tombstone tombstone_from(const json::value& v) {
  auto& o = v.as_object();
  return Tombstone{key_from(o.at("key")), Incarnation{u(o, "deleted_up_to")}, ChangeSeq{u(o, "seq")}};
}
Assignment assignment_from(const json::value& v) {
  auto& o = v.as_object();
  Assignment a;
  a.key = key_from(o.at("key"));
  a.shard = ShardIndex{static_cast<std::uint32_t>(u(o, "shard"))};
  a.incarnation = Incarnation{u(o, "incarnation")};
  a.generation = Generation{u(o, "generation")};
  a.leader = NodeId{static_cast<std::uint32_t>(u(o, "leader"))};
  a.replicas = ids_from(o.at("replicas"));
  return a;
}
BrokerInfo broker_from(const json::value& v) {
  auto& o = v.as_object();
  BrokerInfo b;
  b.id = NodeId{static_cast<std::uint32_t>(u(o, "id"))};
  b.address = s(o, "address");
  b.directory_id = s(o, "directory_id");
  b.version = s(o, "version");
  b.features = strs_from(o.at("features"));
  b.live = o.at("live").as_bool();
  b.registered_seq = ChangeSeq{u(o, "registered_seq")};
  return b;
}
BrokerRegistration registration_from(const json::value& v) {
  auto& o = v.as_object();
  BrokerRegistration b;
  b.id = NodeId{static_cast<std::uint32_t>(u(o, "id"))};
  b.address = s(o, "address");
  b.directory_id = s(o, "directory_id");
  b.version = s(o, "version");
  b.features = strs_from(o.at("features"));
  return b;
}
FeatureInfo feature_from(const json::value& v) {
  auto& o = v.as_object();
  FeatureInfo f;
  f.name = s(o, "name");
  f.required_level = MetadataLevel{static_cast<std::uint32_t>(u(o, "required_level"))};
  f.finalized = o.at("finalized").as_bool();
  f.finalized_seq = ChangeSeq{u(o, "finalized_seq")};
  f.supported_by = ids_from(o.at("supported_by"));
  f.lacking = ids_from(o.at("lacking"));
  return f;
}
ChangeEvent event_from(const json::value& v) {
  using K = ChangeEvent::Kind;
  auto& o = v.as_object();
  ChangeEvent e{};
  std::string kind = s(o, "kind");
  bool found = false;
  for (auto k : {K::tenant_created, K::tenant_deleted, K::namespace_created, K::namespace_deleted,
                 K::stream_created, K::stream_deleted, K::feature_finalized, K::broker_registered,
                 K::broker_unregistered, K::cache_created, K::cache_deleted})
    if (to_string(k) == kind) {
      e.kind = k;
      found = true;
    }
  if (!found) throw std::invalid_argument("unknown change kind " + kind);
  e.seq = ChangeSeq{u(o, "seq")};
  e.tenant = s(o, "tenant");
  e.ns = s(o, "ns");
  e.stream = stream_from(o.at("stream"));
  e.feature = s(o, "feature");
  e.broker = broker_from(o.at("broker"));
  for (auto& a : o.at("assignments").as_array()) e.assignments.push_back(assignment_from(a));
  if (auto* t = o.if_contains("tombstone")) e.tombstone = tombstone_from(*t);
  if (auto* c = o.if_contains("cache")) e.cache = cache_from(*c);
  if (auto* t = o.if_contains("cache_tombstone")) e.cache_tombstone = tombstone_from(*t);
  return e;
}
CacheSpec cache_spec_from(const json::value& v) {
  CacheSpec c;
  c.default_ttl_ms = v.as_object().at("default_ttl_ms").to_number<std::int64_t>();
  return c;
}
CacheInfo cache_from(const json::value& v) {
  auto& o = v.as_object();
  CacheInfo c;
  c.key = key_from(o.at("key"));
  c.incarnation = Incarnation{u(o, "incarnation")};
  c.spec = cache_spec_from(o.at("spec"));
  c.created_seq = ChangeSeq{u(o, "created_seq")};
  return c;
}
MemberInfo member_from(const json::value& v) {
  auto& o = v.as_object();
  MemberInfo m;
  m.id = NodeId{static_cast<std::uint32_t>(u(o, "id"))};
  m.raft_address = s(o, "raft_address");
  m.rpc_address = s(o, "rpc_address");
  m.level = MetadataLevel{static_cast<std::uint32_t>(u(o, "level"))};
  m.joined_seq = ChangeSeq{u(o, "joined_seq")};
  m.role = s(o, "role");
  m.held = o.at("held").as_bool();
  m.held_index = ChangeSeq{u(o, "held_index")};
  m.held_required_level = MetadataLevel{static_cast<std::uint32_t>(u(o, "held_required_level"))};
  m.held_reason = s(o, "held_reason");
  m.applied = ChangeSeq{u(o, "applied")};
  m.state_hash = u(o, "state_hash");
  return m;
}
MembersView members_from(const json::value& v) {
  auto& o = v.as_object();
  MembersView m;
  for (auto& x : o.at("members").as_array()) m.members.push_back(member_from(x));
  m.leader = NodeId{static_cast<std::uint32_t>(u(o, "leader"))};
  m.group_level = MetadataLevel{static_cast<std::uint32_t>(u(o, "group_level"))};
  m.level_floor = MetadataLevel{static_cast<std::uint32_t>(u(o, "level_floor"))};
  return m;
}
JoinRequest join_from(const json::value& v) {
  auto& o = v.as_object();
  JoinRequest j;
  j.id = NodeId{static_cast<std::uint32_t>(u(o, "id"))};
  j.raft_address = s(o, "raft_address");
  j.rpc_address = s(o, "rpc_address");
  j.level = MetadataLevel{static_cast<std::uint32_t>(u(o, "level"))};
  return j;
}
CatalogSnapshot snapshot_from(const json::value& v) {
  auto& o = v.as_object();
  CatalogSnapshot c;
  c.seq = ChangeSeq{u(o, "seq")};
  for (auto& x : o.at("tenants").as_array()) c.tenants.push_back(tenant_from(x));
  for (auto& x : o.at("namespaces").as_array()) c.namespaces.push_back(namespace_from(x));
  for (auto& x : o.at("streams").as_array()) c.streams.push_back(stream_from(x));
  for (auto& x : o.at("tombstones").as_array()) c.tombstones.push_back(tombstone_from(x));
  for (auto& x : o.at("assignments").as_array()) c.assignments.push_back(assignment_from(x));
  for (auto& x : o.at("brokers").as_array()) c.brokers.push_back(broker_from(x));
  c.finalized_features = strs_from(o.at("finalized_features"));
  if (auto* x = o.if_contains("caches"))
    for (auto& e : x->as_array()) c.caches.push_back(cache_from(e));
  if (auto* x = o.if_contains("cache_tombstones"))
    for (auto& e : x->as_array()) c.cache_tombstones.push_back(tombstone_from(e));
  return c;
}
MetadataStatus status_from(const json::value& v) {
  auto& o = v.as_object();
  MetadataStatus m;
  m.backend = s(o, "backend");
  m.cluster_id = s(o, "cluster_id");
  m.ready = o.at("ready").as_bool();
  m.detail = s(o, "detail");
  m.level = MetadataLevel{static_cast<std::uint32_t>(u(o, "level"))};
  m.applied = ChangeSeq{u(o, "applied")};
  return m;
}
Error error_from(const json::value& v) {
  auto& o = v.as_object();
  std::string code = s(o, "code");
  Errc c = Errc::internal;
  for (int k = 0; k <= static_cast<int>(Errc::not_supported); ++k)
    if (errc_name(static_cast<Errc>(k)) == code) c = static_cast<Errc>(k);
  std::string out = s(o, "outcome");
  Outcome oc = out == "definite" ? Outcome::definite
               : out == "transient" ? Outcome::transient
                                    : Outcome::uncertain;
  return Error(c, s(o, "message"), oc);
}

namespace {
bool write_all(int fd, const char* p, std::size_t n, std::string* why) {
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (why) *why = std::string("write: ") + (w < 0 ? std::strerror(errno) : "closed");
      return false;
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}
bool read_all(int fd, char* p, std::size_t n, std::string* why, bool first) {
  std::size_t got = 0;
  while (got < n) {
    ssize_t r = ::recv(fd, p + got, n - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      if (why)
        *why = r == 0 ? (first && got == 0 ? "closed" : "truncated frame")
                      : std::string("read: ") + std::strerror(errno);
      return false;
    }
    got += static_cast<std::size_t>(r);
  }
  return true;
}
}  // namespace

bool write_frame(int fd, const std::string& body, std::string* why) {
  if (body.size() > kMaxFrame) {
    if (why) *why = "frame too large";
    return false;
  }
  unsigned char h[4];
  auto n = static_cast<std::uint32_t>(body.size());
  for (int k = 0; k < 4; ++k) h[k] = static_cast<unsigned char>(n >> (8 * k));
  return write_all(fd, reinterpret_cast<const char*>(h), 4, why) &&
         write_all(fd, body.data(), body.size(), why);
}

bool read_frame(int fd, std::string& out, std::string* why) {
  unsigned char h[4];
  if (!read_all(fd, reinterpret_cast<char*>(h), 4, why, true)) return false;
  std::uint32_t n = 0;
  for (int k = 0; k < 4; ++k) n |= static_cast<std::uint32_t>(h[k]) << (8 * k);
  if (n > kMaxFrame) {
    if (why) *why = "oversized frame (" + std::to_string(n) + " bytes, max " + std::to_string(kMaxFrame) + ")";
    return false;
  }
  out.resize(n);
  if (!read_all(fd, out.data(), n, why, false)) {
    if (why && *why == "closed") *why = "truncated frame";
    return false;
  }
  return true;
}

}  // namespace sluice::raft_meta::rpc
