#include "codec.h"

#include <libpq-fe.h>

#include <boost/json.hpp>

namespace sluice::postgres_meta {

namespace json = boost::json;

namespace {

json::object stream_object(const StreamInfo& s) {
  json::object o;
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
  return o;
}

std::uint64_t u64(const json::object& o, const char* k) {
  auto* p = o.if_contains(k);
  if (!p) return 0;
  if (p->is_uint64()) return p->get_uint64();
  if (p->is_int64()) return static_cast<std::uint64_t>(p->get_int64());
  return 0;
}
std::int64_t i64(const json::object& o, const char* k) {
  auto* p = o.if_contains(k);
  if (!p) return 0;
  if (p->is_int64()) return p->get_int64();
  if (p->is_uint64()) return static_cast<std::int64_t>(p->get_uint64());
  return 0;
}
std::string str(const json::object& o, const char* k) {
  auto* p = o.if_contains(k);
  return p && p->is_string() ? std::string(p->get_string()) : std::string();
}

}  // namespace

std::string names_payload(const std::string& tenant, const std::string* ns) {
  json::object o;
  o["tenant"] = tenant;
  if (ns) o["ns"] = *ns;
  return json::serialize(o);
}

std::string stream_change_payload(const StreamInfo& s, const std::vector<Assignment>& as,
                                  const std::optional<Tombstone>& t) {
  json::object o = stream_object(s);
  json::array a;
  for (auto& x : as) {
    json::object e;
    e["shard"] = x.shard.value();
    e["incarnation"] = x.incarnation.value();
    e["generation"] = x.generation.value();
    e["leader"] = x.leader.value();
    json::array rs;
    for (auto r : x.replicas) rs.emplace_back(r.value());
    e["replicas"] = std::move(rs);
    a.emplace_back(std::move(e));
  }
  o["assignments"] = std::move(a);
  if (t) {
    json::object to;
    to["deleted_up_to"] = t->deleted_up_to.value();
    to["seq"] = t->seq.value();
    o["tombstone"] = std::move(to);
  }
  return json::serialize(o);
}

std::string broker_payload(const BrokerInfo& b) {
  json::object o;
  o["id"] = b.id.value();
  o["address"] = b.address;
  o["directory_id"] = b.directory_id;
  o["version"] = b.version;
  json::array fs;
  for (auto& f : b.features) fs.emplace_back(f);
  o["features"] = std::move(fs);
  o["registered_seq"] = b.registered_seq.value();
  return json::serialize(o);
}

std::string feature_payload(const std::string& name) {
  json::object o;
  o["feature"] = name;
  return json::serialize(o);
}

Result<ChangeEvent> decode_change(std::int64_t seq, std::string_view kind,
                                  std::string_view payload) {
  using K = ChangeEvent::Kind;
  ChangeEvent ev{};
  bool known = false;
  for (auto k : {K::tenant_created, K::tenant_deleted, K::namespace_created, K::namespace_deleted,
                 K::stream_created, K::stream_deleted, K::feature_finalized, K::broker_registered,
                 K::broker_unregistered})
    if (kind == to_string(k)) {
      ev.kind = k;
      known = true;
    }
  if (!known)
    return Error(Errc::internal, "change " + std::to_string(seq) + " has unknown kind '" +
                                     std::string(kind) + "'");
  ev.seq = ChangeSeq{static_cast<std::uint64_t>(seq)};
  boost::system::error_code ec;
  json::value v = json::parse(payload, ec);
  if (ec || !v.is_object())
    return Error(Errc::internal, "change " + std::to_string(seq) + " has a malformed payload");
  auto& o = v.get_object();
  ev.tenant = str(o, "tenant");
  ev.ns = str(o, "ns");
  if (ev.kind == K::stream_created || ev.kind == K::stream_deleted) {
    ev.stream.key = StreamKey{ev.tenant, ev.ns, str(o, "name")};
    ev.stream.incarnation = Incarnation{u64(o, "incarnation")};
    ev.stream.spec.shards = static_cast<std::uint32_t>(u64(o, "shards"));
    ev.stream.spec.retention.max_bytes = i64(o, "max_bytes");
    ev.stream.spec.retention.max_age_ms = i64(o, "max_age_ms");
    ev.stream.spec.default_ack = parse_ack_mode(str(o, "ack")).value_or(AckMode::leader);
    ev.stream.created_seq = ChangeSeq{u64(o, "created_seq")};
    ev.stream.created_at_us = i64(o, "created_at_us");
    if (auto* av = o.if_contains("assignments"); av && av->is_array()) {
      for (auto& e : av->get_array()) {
        if (!e.is_object()) continue;
        auto& ao = e.get_object();
        Assignment a;
        a.key = ev.stream.key;
        a.shard = ShardIndex{static_cast<std::uint32_t>(u64(ao, "shard"))};
        a.incarnation = Incarnation{u64(ao, "incarnation")};
        a.generation = Generation{u64(ao, "generation")};
        a.leader = NodeId{static_cast<std::uint32_t>(u64(ao, "leader"))};
        if (auto* rv = ao.if_contains("replicas"); rv && rv->is_array())
          for (auto& r : rv->get_array())
            if (r.is_int64() || r.is_uint64())
              a.replicas.push_back(NodeId{static_cast<std::uint32_t>(
                  r.is_uint64() ? r.get_uint64() : static_cast<std::uint64_t>(r.get_int64()))});
        ev.assignments.push_back(std::move(a));
      }
    }
    if (auto* tv = o.if_contains("tombstone"); tv && tv->is_object()) {
      Tombstone t;
      t.key = ev.stream.key;
      t.deleted_up_to = Incarnation{u64(tv->get_object(), "deleted_up_to")};
      t.seq = ChangeSeq{u64(tv->get_object(), "seq")};
      ev.tombstone = t;
    }
  } else if (ev.kind == K::feature_finalized) {
    ev.feature = str(o, "feature");
  } else if (ev.kind == K::broker_registered || ev.kind == K::broker_unregistered) {
    ev.broker.id = NodeId{static_cast<std::uint32_t>(u64(o, "id"))};
    ev.broker.address = str(o, "address");
    ev.broker.directory_id = str(o, "directory_id");
    ev.broker.version = str(o, "version");
    if (auto* fv = o.if_contains("features"); fv && fv->is_array())
      for (auto& f : fv->get_array())
        if (f.is_string()) ev.broker.features.emplace_back(f.get_string());
    ev.broker.registered_seq = ChangeSeq{u64(o, "registered_seq")};
  }
  return ev;
}

namespace {
struct ParsedConninfo {
  PQconninfoOption* opts = nullptr;
  ~ParsedConninfo() {
    if (opts) PQconninfoFree(opts);
  }
};
}  // namespace

Result<std::string> describe_conninfo(const std::string& conninfo) {
  ParsedConninfo p;
  char* err = nullptr;
  p.opts = PQconninfoParse(conninfo.c_str(), &err);
  if (!p.opts) {
    // libpq's message may quote the string (and so a password): never echo it.
    if (err) PQfreemem(err);
    return Error(Errc::invalid_argument,
                 "metadata.postgres.url is not a valid libpq connection string or URI "
                 "(expected e.g. postgresql://user@host:5432/db or 'host=... dbname=...'; "
                 "the value is not shown because it may contain a password)");
  }
  std::string out;
  for (auto* o = p.opts; o->keyword; ++o) {
    std::string_view k = o->keyword;
    if (!o->val || !*o->val) continue;
    if (k == "host" || k == "hostaddr" || k == "port" || k == "dbname" || k == "user") {
      if (!out.empty()) out += " ";
      out += std::string(k) + "=" + o->val;
    }
  }
  if (out.empty()) out = "(libpq defaults)";
  return out;
}

std::string conninfo_password(const std::string& conninfo) {
  ParsedConninfo p;
  char* err = nullptr;
  p.opts = PQconninfoParse(conninfo.c_str(), &err);
  if (err) PQfreemem(err);
  if (!p.opts) return {};
  for (auto* o = p.opts; o->keyword; ++o)
    if (std::string_view(o->keyword) == "password" && o->val) return o->val;
  return {};
}

std::string scrub(std::string msg, const std::string& secret) {
  if (secret.empty()) return msg;
  for (std::size_t pos = msg.find(secret); pos != std::string::npos;
       pos = msg.find(secret, pos + 3))
    msg.replace(pos, secret.size(), "***");
  return msg;
}

}  // namespace sluice::postgres_meta
