#include "command.h"

#include <boost/json.hpp>
#include <optional>
#include <stdexcept>

#include "sluice/catalog_json.h"

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
    case CommandType::update_shard: return "update_shard";
    case CommandType::reassign_shard: return "reassign_shard";
    case CommandType::create_counter: return "create_counter";
    case CommandType::delete_counter: return "delete_counter";
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
                 CommandType::leave_member, CommandType::update_shard,
                 CommandType::reassign_shard, CommandType::create_counter,
                 CommandType::delete_counter}) {
    if (to_string(t) == s) {
      out = t;
      return true;
    }
  }
  return false;
}

namespace {
Command of(CommandType t) {
  Command c;
  c.type = t;
  return c;
}
// A command about one name: a tenant, a namespace, or a stream or cache (key.name set).
Command about(CommandType t, const StreamKey& key) {
  Command c = of(t);
  c.tenant = key.tenant;
  c.ns = key.ns;
  c.name = key.name;
  return c;
}
}  // namespace

Command Command::init_cluster(std::string id) {
  Command c = of(CommandType::init_cluster);
  c.cluster_id = std::move(id);
  return c;
}
Command Command::create_tenant(std::string tenant) {
  return about(CommandType::create_tenant, {std::move(tenant), "", ""});
}
Command Command::delete_tenant(std::string tenant) {
  return about(CommandType::delete_tenant, {std::move(tenant), "", ""});
}
Command Command::create_namespace(std::string tenant, std::string ns) {
  return about(CommandType::create_namespace, {std::move(tenant), std::move(ns), ""});
}
Command Command::delete_namespace(std::string tenant, std::string ns) {
  return about(CommandType::delete_namespace, {std::move(tenant), std::move(ns), ""});
}
Command Command::create_stream(const StreamKey& key, const StreamSpec& spec, std::int64_t clock_us) {
  Command c = about(CommandType::create_stream, key);
  c.spec = spec;
  c.clock_us = clock_us;
  return c;
}
Command Command::delete_stream(const StreamKey& key) { return about(CommandType::delete_stream, key); }
Command Command::register_broker(const BrokerRegistration& reg) {
  Command c = of(CommandType::register_broker);
  c.broker = reg;
  return c;
}
Command Command::unregister_broker(NodeId id) {
  Command c = of(CommandType::unregister_broker);
  c.broker.id = id;
  return c;
}
Command Command::finalize_feature(std::string name) {
  Command c = of(CommandType::finalize_feature);
  c.feature = std::move(name);
  return c;
}
Command Command::create_cache(const StreamKey& key, const CacheSpec& spec, std::int64_t clock_us) {
  Command c = about(CommandType::create_cache, key);
  c.cache_spec = spec;
  c.clock_us = clock_us;
  return c;
}
Command Command::delete_cache(const StreamKey& key) { return about(CommandType::delete_cache, key); }
Command Command::create_counter(const StreamKey& key, std::int64_t clock_us) {
  Command c = about(CommandType::create_counter, key);
  c.clock_us = clock_us;
  return c;
}
Command Command::delete_counter(const StreamKey& key) { return about(CommandType::delete_counter, key); }
Command Command::join_member(const JoinRequest& req) {
  Command c = of(CommandType::join_member);
  c.member = req;
  return c;
}
Command Command::leave_member(NodeId id) {
  Command c = of(CommandType::leave_member);
  c.member.id = id;
  return c;
}
Command Command::update_shard(const ShardUpdate& u) {
  // A replica list change is its own op (level 17): see command.h.
  Command c = about(u.replicas ? CommandType::reassign_shard : CommandType::update_shard, u.key);
  c.shard_update = u;
  return c;
}

// The nested values (broker, member, spec) use the SDK codec (sluice/catalog_json.h), whose
// field names are the ones this format has always had.
std::string encode_command(const Command& c) {
  json::object o;
  o["v"] = kCommandFormatVersion;
  o["op"] = to_string(c.type);
  o["level"] = c.level;
  switch (c.type) {
    case CommandType::init_cluster:
      o["cluster_id"] = c.cluster_id;
      if (!c.finalize_features.empty()) o["finalize_features"] = json::value_from(c.finalize_features);
      break;
    case CommandType::register_broker:
      o["broker"] = json::value_from(c.broker);
      break;
    case CommandType::unregister_broker:
      o["broker_id"] = c.broker.id.value();
      break;
    case CommandType::finalize_feature:
      o["feature"] = c.feature;
      break;
    case CommandType::join_member:
      o["member"] = json::value_from(c.member);
      break;
    case CommandType::leave_member:
      o["member_id"] = c.member.id.value();
      break;
    case CommandType::update_shard:
    case CommandType::reassign_shard:
      o["update"] = json::value_from(c.shard_update);
      break;
    case CommandType::create_counter:
    case CommandType::delete_counter:
      o["tenant"] = c.tenant;
      o["ns"] = c.ns;
      o["name"] = c.name;
      if (c.type == CommandType::create_counter) {
        o["proposed_incarnation"] = c.proposed_incarnation;
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
    case CommandType::create_cache:
    case CommandType::delete_cache:
      o["tenant"] = c.tenant;
      o["ns"] = c.ns;
      o["name"] = c.name;
      o["proposed_incarnation"] = c.proposed_incarnation;
      o["incarnations"] = c.incarnations == IncarnationRule::flagged;
      if (c.type == CommandType::create_cache) {
        o["spec"] = json::value_from(c.cache_spec);
        o["clock_us"] = c.clock_us;
      }
      if (c.type == CommandType::create_stream) {
        o["spec"] = json::value_from(c.spec);
        o["clock_us"] = c.clock_us;
        if (!c.placement.empty()) {
          json::array pl;
          for (auto& p : c.placement)
            pl.emplace_back(json::object{{"leader", p.leader}, {"replicas", json::value_from(p.replicas)}});
          o["placement"] = std::move(pl);
        }
      }
      break;
  }
  return json::serialize(o);
}

namespace {

Error bad(std::string what) { return Error(Errc::malformed_body, "bad command: " + what); }

// The format version of a parsed entry; nullopt if it has none.
std::optional<std::uint64_t> format_version(const json::object& o) {
  try {
    return json_field::u64(o, "v");
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// The fields of `op` (already set in c.type). Throws std::invalid_argument when one is
// missing or malformed (json_field).
void decode_fields(const json::object& o, Command& c) {
  using namespace json_field;
  switch (c.type) {
    case CommandType::init_cluster:
      c.cluster_id = string(o, "cluster_id");
      if (o.contains("finalize_features")) c.finalize_features = strings(o, "finalize_features");
      break;
    case CommandType::register_broker:
      c.broker = json::value_to<BrokerRegistration>(required(o, "broker"));
      break;
    case CommandType::unregister_broker:
      c.broker.id = NodeId{u32(o, "broker_id")};
      break;
    case CommandType::finalize_feature:
      c.feature = string(o, "feature");
      break;
    case CommandType::join_member:
      c.member = json::value_to<JoinRequest>(required(o, "member"));
      break;
    case CommandType::leave_member:
      c.member.id = NodeId{u32(o, "member_id")};
      break;
    case CommandType::update_shard:
    case CommandType::reassign_shard:
      c.shard_update = json::value_to<ShardUpdate>(required(o, "update"));
      c.tenant = c.shard_update.key.tenant;
      c.ns = c.shard_update.key.ns;
      c.name = c.shard_update.key.name;
      break;
    case CommandType::create_counter:
    case CommandType::delete_counter:
      c.tenant = string(o, "tenant");
      c.ns = string(o, "ns");
      c.name = string(o, "name");
      if (c.type == CommandType::create_counter) {
        c.proposed_incarnation = u64(o, "proposed_incarnation");
        c.clock_us = i64(o, "clock_us");
      }
      break;
    case CommandType::create_tenant:
    case CommandType::delete_tenant:
      c.tenant = string(o, "tenant");
      break;
    case CommandType::create_namespace:
    case CommandType::delete_namespace:
      c.tenant = string(o, "tenant");
      c.ns = string(o, "ns");
      break;
    case CommandType::create_stream:
    case CommandType::delete_stream:
    case CommandType::create_cache:
    case CommandType::delete_cache:
      c.tenant = string(o, "tenant");
      c.ns = string(o, "ns");
      c.name = string(o, "name");
      c.proposed_incarnation = u64(o, "proposed_incarnation");
      c.incarnations = boolean(o, "incarnations") ? IncarnationRule::flagged : IncarnationRule::legacy;
      if (c.type == CommandType::create_cache) {
        c.cache_spec = json::value_to<CacheSpec>(required(o, "spec"));
        c.clock_us = i64(o, "clock_us");
      }
      if (c.type == CommandType::create_stream) {
        c.spec = json::value_to<StreamSpec>(required(o, "spec"));
        c.clock_us = i64(o, "clock_us");
        if (auto* pv = o.if_contains("placement")) {
          if (!pv->is_array()) throw std::invalid_argument("placement must be an array");
          for (auto& e : pv->get_array()) {
            auto& po = object(e, "placement entry");
            Command::ShardPlacement p;
            p.leader = u32(po, "leader");
            if (po.contains("replicas")) p.replicas = u32s(po, "replicas");
            c.placement.push_back(std::move(p));
          }
        }
      }
      break;
  }
}

}  // namespace

namespace {

// One command object (top level, or an entry of a batch), already parsed.
DecodedEntry decode_value(const json::value& v, bool in_batch) {
  DecodedEntry d;
  auto* o = v.if_object();
  if (!o) {
    d.error = bad("not an object");
    return d;
  }
  auto version = format_version(*o);
  if (!version) {
    d.error = bad("missing format version");
    return d;
  }
  auto* op = o->if_contains("op");
  Command c;
  const bool known = op && op->is_string() && parse_type(op->get_string(), c.type);
  const bool is_batch = op && op->is_string() && op->get_string() == "batch";
  // A newer format version, or an op this build does not know: a newer build's command.
  if (*version > kCommandFormatVersion ||
      (*version == kCommandFormatVersion && op && op->is_string() && !known && !is_batch)) {
    d.newer = true;
    return d;
  }
  if (*version != kCommandFormatVersion) {
    d.error = bad("unknown command format version " + std::to_string(*version));
    return d;
  }
  if (is_batch) {
    if (in_batch) {
      d.error = bad("batch: a batch inside a batch");
      return d;
    }
    try {
      d.level = json_field::u32(*o, "level");
      auto* ev = o->if_contains("entries");
      if (!ev || !ev->is_array() || ev->get_array().empty() ||
          ev->get_array().size() > kMaxBatchCommands)
        throw std::invalid_argument("entries must be an array of 1.." +
                                    std::to_string(kMaxBatchCommands) + " commands");
      d.batch = true;
      d.inner.reserve(ev->get_array().size());
      for (auto& e : ev->get_array()) d.inner.push_back(decode_value(e, true));
    } catch (const std::exception& e) {
      d.batch = false;
      d.inner.clear();
      d.error = bad(std::string("batch: ") + e.what());
    }
    return d;
  }
  if (!known) {
    d.error = bad("unknown op");
    return d;
  }
  try {
    c.level = json_field::u32(*o, "level");
    decode_fields(*o, c);
  } catch (const std::exception& e) {
    d.error = bad(std::string(to_string(c.type)) + ": " + e.what());
    return d;
  }
  d.command = std::move(c);
  return d;
}

}  // namespace

DecodedEntry decode_entry(std::string_view bytes) {
  boost::system::error_code ec;
  json::value v = json::parse(bytes, ec);
  if (ec) {
    DecodedEntry d;
    d.error = bad("not JSON (" + ec.message() + ")");
    return d;
  }
  return decode_value(v, false);
}

bool needs_newer_build(std::string_view bytes) { return decode_entry(bytes).newer; }

Result<Command> decode_command(std::string_view bytes) {
  DecodedEntry d = decode_entry(bytes);
  if (d.command) return std::move(*d.command);
  if (d.error) return *d.error;
  if (d.batch) return bad("a batch entry, not one command");
  // A newer build's command: this build cannot decode it (apply holds at it).
  boost::system::error_code ec;
  json::value v = json::parse(bytes, ec);
  auto version = v.is_object() ? format_version(v.get_object()) : std::nullopt;
  if (version && *version != kCommandFormatVersion)
    return bad("unknown command format version " + std::to_string(*version));
  return bad("unknown op");
}

bool is_batchable(CommandType t) {
  switch (t) {
    case CommandType::create_tenant:
    case CommandType::delete_tenant:
    case CommandType::create_namespace:
    case CommandType::delete_namespace:
    case CommandType::create_stream:
    case CommandType::delete_stream:
    case CommandType::create_cache:
    case CommandType::delete_cache:
    case CommandType::update_shard:
    case CommandType::reassign_shard:
    case CommandType::create_counter:
    case CommandType::delete_counter:
      return true;
    case CommandType::init_cluster:
    case CommandType::register_broker:
    case CommandType::unregister_broker:
    case CommandType::finalize_feature:
    case CommandType::join_member:
    case CommandType::leave_member:
      return false;
  }
  return false;
}

// Built by concatenation: the commands are already JSON objects, so the proposer does not
// parse them again.
std::string encode_batch(const std::vector<std::string>& encoded, std::uint32_t level) {
  std::size_t n = 64;
  for (auto& e : encoded) n += e.size() + 1;
  std::string out;
  out.reserve(n);
  out += "{\"v\":";
  out += std::to_string(kCommandFormatVersion);
  out += ",\"op\":\"batch\",\"level\":";
  out += std::to_string(level);
  out += ",\"entries\":[";
  for (std::size_t i = 0; i < encoded.size(); ++i) {
    if (i) out += ',';
    out += encoded[i];
  }
  out += "]}";
  return out;
}

}  // namespace sluice::raft_meta
