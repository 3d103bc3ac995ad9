#include "command.h"

#include <boost/json.hpp>

namespace sluice::raft_meta {

namespace json = boost::json;

std::string_view to_string(CommandType t) {
  switch (t) {
    case CommandType::init_cluster: return "init_cluster";
    case CommandType::create_tenant: return "create_tenant";
    case CommandType::delete_tenant: return "delete_tenant";
    case CommandType::create_namespace: return "create_namespace";
    case CommandType::delete_namespace: return "delete_namespace";
    case CommandType::create_stream: return "create_stream";
    case CommandType::delete_stream: return "delete_stream";
    case CommandType::register_broker: return "register_broker";
    case CommandType::unregister_broker: return "unregister_broker";
    case CommandType::finalize_feature: return "finalize_feature";
    case CommandType::create_cache: return "create_cache";
    case CommandType::delete_cache: return "delete_cache";
    case CommandType::join_member: return "join_member";
    case CommandType::leave_member: return "leave_member";
  }
  return "unknown";
}

static bool parse_type(std::string_view s, CommandType& out) {
  for (auto t : {CommandType::init_cluster, CommandType::create_tenant, CommandType::delete_tenant,
                 CommandType::create_namespace, CommandType::delete_namespace,
                 CommandType::create_stream, CommandType::delete_stream,
                 CommandType::register_broker, CommandType::unregister_broker,
                 CommandType::finalize_feature, CommandType::create_cache,
                 CommandType::delete_cache, CommandType::join_member,
                 CommandType::leave_member}) {
    if (to_string(t) == s) {
      out = t;
      return true;
    }
  }
  return false;
}

Command Command::init_cluster(std::string id) {
  Command c;
  c.type = CommandType::init_cluster;
  c.cluster_id = std::move(id);
  return c;
}
Command Command::create_tenant(std::string tenant) {
  Command c;
  c.type = CommandType::create_tenant;
  c.tenant = std::move(tenant);
  return c;
}
Command Command::delete_tenant(std::string tenant) {
  Command c;
  c.type = CommandType::delete_tenant;
  c.tenant = std::move(tenant);
  return c;
}
Command Command::create_namespace(std::string tenant, std::string ns) {
  Command c;
  c.type = CommandType::create_namespace;
  c.tenant = std::move(tenant);
  c.ns = std::move(ns);
  return c;
}
Command Command::delete_namespace(std::string tenant, std::string ns) {
  Command c;
  c.type = CommandType::delete_namespace;
  c.tenant = std::move(tenant);
  c.ns = std::move(ns);
  return c;
}
Command Command::create_stream(const StreamKey& key, const StreamSpec& spec, std::int64_t clock_us) {
  Command c;
  c.type = CommandType::create_stream;
  c.tenant = key.tenant;
  c.ns = key.ns;
  c.name = key.name;
  c.spec = spec;
  c.clock_us = clock_us;
  return c;
}
Command Command::delete_stream(const StreamKey& key) {
  Command c;
  c.type = CommandType::delete_stream;
  c.tenant = key.tenant;
  c.ns = key.ns;
  c.name = key.name;
  return c;
}

Command Command::register_broker(const BrokerRegistration& reg) {
  Command c;
  c.type = CommandType::register_broker;
  c.broker = reg;
  return c;
}
Command Command::unregister_broker(NodeId id) {
  Command c;
  c.type = CommandType::unregister_broker;
  c.broker.id = id;
  return c;
}
Command Command::finalize_feature(std::string name) {
  Command c;
  c.type = CommandType::finalize_feature;
  c.feature = std::move(name);
  return c;
}

Command Command::create_cache(const StreamKey& key, const CacheSpec& spec, std::int64_t clock_us) {
  Command c;
  c.type = CommandType::create_cache;
  c.tenant = key.tenant;
  c.ns = key.ns;
  c.name = key.name;
  c.cache_spec = spec;
  c.clock_us = clock_us;
  return c;
}
Command Command::delete_cache(const StreamKey& key) {
  Command c;
  c.type = CommandType::delete_cache;
  c.tenant = key.tenant;
  c.ns = key.ns;
  c.name = key.name;
  return c;
}
Command Command::join_member(const JoinRequest& req) {
  Command c;
  c.type = CommandType::join_member;
  c.member = req;
  return c;
}
Command Command::leave_member(NodeId id) {
  Command c;
  c.type = CommandType::leave_member;
  c.member.id = id;
  return c;
}

namespace {
json::array string_array(const std::vector<std::string>& v) {
  json::array a;
  for (auto& s : v) a.emplace_back(s);
  return a;
}
}  // namespace

std::string encode_command(const Command& c) {
  json::object o;
  o["v"] = kCommandFormatVersion;
  o["op"] = to_string(c.type);
  o["level"] = c.level;
  switch (c.type) {
    case CommandType::init_cluster:
      o["cluster_id"] = c.cluster_id;
      if (!c.finalize_features.empty()) o["finalize_features"] = string_array(c.finalize_features);
      break;
    case CommandType::register_broker: {
      json::object b;
      b["id"] = c.broker.id.value();
      b["address"] = c.broker.address;
      b["directory_id"] = c.broker.directory_id;
      b["version"] = c.broker.version;
      b["features"] = string_array(c.broker.features);
      o["broker"] = std::move(b);
      break;
    }
    case CommandType::unregister_broker:
      o["broker_id"] = c.broker.id.value();
      break;
    case CommandType::finalize_feature:
      o["feature"] = c.feature;
      break;
    case CommandType::join_member: {
      json::object m;
      m["id"] = c.member.id.value();
      m["raft_address"] = c.member.raft_address;
      m["rpc_address"] = c.member.rpc_address;
      m["level"] = c.member.level.value();
      o["member"] = std::move(m);
      break;
    }
    case CommandType::leave_member:
      o["member_id"] = c.member.id.value();
      break;
    case CommandType::create_cache:
    case CommandType::delete_cache:
      o["tenant"] = c.tenant;
      o["ns"] = c.ns;
      o["name"] = c.name;
      o["proposed_incarnation"] = c.proposed_incarnation;
      o["incarnations"] = c.incarnations == IncarnationRule::flagged;
      if (c.type == CommandType::create_cache) {
        json::object spec;
        spec["default_ttl_ms"] = c.cache_spec.default_ttl_ms;
        o["spec"] = std::move(spec);
        o["clock_us"] = c.clock_us;
      }
      break;
    case CommandType::create_tenant:
    case CommandType::delete_tenant:
      o["tenant"] = c.tenant;
      break;
    case CommandType::create_namespace:
    case CommandType::delete_namespace:
      o["tenant"] = c.tenant;
      o["ns"] = c.ns;
      break;
    case CommandType::create_stream:
    case CommandType::delete_stream:
      o["tenant"] = c.tenant;
      o["ns"] = c.ns;
      o["name"] = c.name;
      o["proposed_incarnation"] = c.proposed_incarnation;
      o["incarnations"] = c.incarnations == IncarnationRule::flagged;
      if (c.type == CommandType::create_stream) {
        json::object spec;
        spec["shards"] = c.spec.shards;
        spec["max_bytes"] = c.spec.retention.max_bytes;
        spec["max_age_ms"] = c.spec.retention.max_age_ms;
        spec["ack"] = to_string(c.spec.default_ack);
        o["spec"] = std::move(spec);
        o["clock_us"] = c.clock_us;
        if (!c.placement.empty()) {
          json::array pl;
          for (auto& p : c.placement) {
            json::object po;
            po["leader"] = p.leader;
            json::array rs;
            for (auto r : p.replicas) rs.emplace_back(r);
            po["replicas"] = std::move(rs);
            pl.emplace_back(std::move(po));
          }
          o["placement"] = std::move(pl);
        }
      }
      break;
  }
  return json::serialize(o);
}

namespace {

Error bad(std::string what) { return Error(Errc::malformed_body, "bad command: " + what); }

bool get_string(const json::object& o, const char* k, std::string& out) {
  auto* v = o.if_contains(k);
  if (!v || !v->is_string()) return false;
  out = std::string(v->get_string());
  return true;
}

bool get_i64(const json::object& o, const char* k, std::int64_t& out) {
  auto* v = o.if_contains(k);
  if (!v) return false;
  if (v->is_int64()) {
    out = v->get_int64();
    return true;
  }
  if (v->is_uint64() && v->get_uint64() <= static_cast<std::uint64_t>(INT64_MAX)) {
    out = static_cast<std::int64_t>(v->get_uint64());
    return true;
  }
  return false;
}

bool get_u64(const json::object& o, const char* k, std::uint64_t& out) {
  auto* v = o.if_contains(k);
  if (!v) return false;
  if (v->is_uint64()) {
    out = v->get_uint64();
    return true;
  }
  if (v->is_int64() && v->get_int64() >= 0) {
    out = static_cast<std::uint64_t>(v->get_int64());
    return true;
  }
  return false;
}

bool get_u32(const json::object& o, const char* k, std::uint32_t& out) {
  std::uint64_t v = 0;
  if (!get_u64(o, k, v) || v > UINT32_MAX) return false;
  out = static_cast<std::uint32_t>(v);
  return true;
}

// Optional array of strings: absent -> empty (true); present but malformed -> false.
bool get_strings(const json::object& o, const char* k, std::vector<std::string>& out) {
  out.clear();
  auto* v = o.if_contains(k);
  if (!v) return true;
  if (!v->is_array()) return false;
  for (auto& e : v->get_array()) {
    if (!e.is_string()) return false;
    out.emplace_back(e.get_string());
  }
  return true;
}

}  // namespace

bool needs_newer_build(std::string_view bytes) {
  boost::system::error_code ec;
  json::value v = json::parse(bytes, ec);
  if (ec || !v.is_object()) return false;
  const auto& o = v.get_object();
  std::uint64_t version = 0;
  if (!get_u64(o, "v", version)) return false;
  if (version > kCommandFormatVersion) return true;
  std::string op;
  CommandType t;
  return version == kCommandFormatVersion && get_string(o, "op", op) && !parse_type(op, t);
}

Result<Command> decode_command(std::string_view bytes) {
  boost::system::error_code ec;
  json::value v = json::parse(bytes, ec);
  if (ec) return bad("not JSON (" + ec.message() + ")");
  auto* o = v.if_object();
  if (!o) return bad("not an object");
  std::uint64_t version = 0;
  if (!get_u64(*o, "v", version)) return bad("missing format version");
  if (version != kCommandFormatVersion)
    return bad("unknown command format version " + std::to_string(version));
  Command c;
  std::string op;
  if (!get_string(*o, "op", op) || !parse_type(op, c.type)) return bad("unknown op");
  std::uint64_t level = 0;
  if (!get_u64(*o, "level", level) || level > UINT32_MAX) return bad("missing level");
  c.level = static_cast<std::uint32_t>(level);
  switch (c.type) {
    case CommandType::init_cluster:
      if (!get_string(*o, "cluster_id", c.cluster_id)) return bad("missing cluster_id");
      if (!get_strings(*o, "finalize_features", c.finalize_features))
        return bad("finalize_features must be an array of strings");
      break;
    case CommandType::register_broker: {
      auto* bv = o->if_contains("broker");
      if (!bv || !bv->is_object()) return bad("missing broker");
      auto& bo = bv->get_object();
      std::uint32_t id = 0;
      if (!get_u32(bo, "id", id) || !get_string(bo, "address", c.broker.address) ||
          !get_string(bo, "directory_id", c.broker.directory_id) ||
          !get_string(bo, "version", c.broker.version) ||
          !get_strings(bo, "features", c.broker.features))
        return bad("incomplete broker");
      c.broker.id = NodeId{id};
      break;
    }
    case CommandType::unregister_broker: {
      std::uint32_t id = 0;
      if (!get_u32(*o, "broker_id", id)) return bad("missing broker_id");
      c.broker.id = NodeId{id};
      break;
    }
    case CommandType::finalize_feature:
      if (!get_string(*o, "feature", c.feature)) return bad("missing feature");
      break;
    case CommandType::join_member: {
      auto* mv = o->if_contains("member");
      if (!mv || !mv->is_object()) return bad("missing member");
      auto& mo = mv->get_object();
      std::uint32_t id = 0, level = 0;
      if (!get_u32(mo, "id", id) || !get_string(mo, "raft_address", c.member.raft_address) ||
          !get_string(mo, "rpc_address", c.member.rpc_address) || !get_u32(mo, "level", level))
        return bad("incomplete member");
      c.member.id = NodeId{id};
      c.member.level = MetadataLevel{level};
      break;
    }
    case CommandType::leave_member: {
      std::uint32_t id = 0;
      if (!get_u32(*o, "member_id", id)) return bad("missing member_id");
      c.member.id = NodeId{id};
      break;
    }
    case CommandType::create_cache:
    case CommandType::delete_cache: {
      if (!get_string(*o, "tenant", c.tenant) || !get_string(*o, "ns", c.ns) ||
          !get_string(*o, "name", c.name))
        return bad("missing tenant, ns or name");
      if (!get_u64(*o, "proposed_incarnation", c.proposed_incarnation))
        return bad("missing proposed_incarnation");
      auto* flag = o->if_contains("incarnations");
      if (!flag || !flag->is_bool()) return bad("missing incarnations flag");
      c.incarnations = flag->get_bool() ? IncarnationRule::flagged : IncarnationRule::legacy;
      if (c.type == CommandType::create_cache) {
        auto* sv = o->if_contains("spec");
        if (!sv || !sv->is_object()) return bad("missing spec");
        if (!get_i64(sv->get_object(), "default_ttl_ms", c.cache_spec.default_ttl_ms))
          return bad("incomplete spec");
        if (!get_i64(*o, "clock_us", c.clock_us)) return bad("missing clock_us");
      }
      break;
    }
    case CommandType::create_tenant:
    case CommandType::delete_tenant:
      if (!get_string(*o, "tenant", c.tenant)) return bad("missing tenant");
      break;
    case CommandType::create_namespace:
    case CommandType::delete_namespace:
      if (!get_string(*o, "tenant", c.tenant) || !get_string(*o, "ns", c.ns))
        return bad("missing tenant or ns");
      break;
    case CommandType::create_stream:
    case CommandType::delete_stream: {
      if (!get_string(*o, "tenant", c.tenant) || !get_string(*o, "ns", c.ns) ||
          !get_string(*o, "name", c.name))
        return bad("missing tenant, ns or name");
      if (!get_u64(*o, "proposed_incarnation", c.proposed_incarnation))
        return bad("missing proposed_incarnation");
      auto* flag = o->if_contains("incarnations");
      if (!flag || !flag->is_bool()) return bad("missing incarnations flag");
      c.incarnations = flag->get_bool() ? IncarnationRule::flagged : IncarnationRule::legacy;
      if (c.type == CommandType::create_stream) {
        auto* sv = o->if_contains("spec");
        if (!sv || !sv->is_object()) return bad("missing spec");
        auto& so = sv->get_object();
        std::uint64_t shards = 0;
        std::string ack;
        if (!get_u64(so, "shards", shards) || shards > UINT32_MAX ||
            !get_i64(so, "max_bytes", c.spec.retention.max_bytes) ||
            !get_i64(so, "max_age_ms", c.spec.retention.max_age_ms) ||
            !get_string(so, "ack", ack))
          return bad("incomplete spec");
        c.spec.shards = static_cast<std::uint32_t>(shards);
        auto mode = parse_ack_mode(ack);
        if (!mode) return bad("unknown ack mode");
        c.spec.default_ack = *mode;
        if (!get_i64(*o, "clock_us", c.clock_us)) return bad("missing clock_us");
        if (auto* pv = o->if_contains("placement")) {
          if (!pv->is_array()) return bad("placement must be an array");
          for (auto& e : pv->get_array()) {
            if (!e.is_object()) return bad("placement entries must be objects");
            auto& po = e.get_object();
            Command::ShardPlacement p;
            if (!get_u32(po, "leader", p.leader)) return bad("placement entry without leader");
            auto* rv = po.if_contains("replicas");
            if (rv) {
              if (!rv->is_array()) return bad("replicas must be an array");
              for (auto& r : rv->get_array()) {
                if (r.is_uint64() && r.get_uint64() <= UINT32_MAX)
                  p.replicas.push_back(static_cast<std::uint32_t>(r.get_uint64()));
                else if (r.is_int64() && r.get_int64() >= 0 && r.get_int64() <= UINT32_MAX)
                  p.replicas.push_back(static_cast<std::uint32_t>(r.get_int64()));
                else
                  return bad("replicas must be node ids");
              }
            }
            c.placement.push_back(std::move(p));
          }
        }
      }
      break;
    }
  }
  return c;
}

}  // namespace sluice::raft_meta
