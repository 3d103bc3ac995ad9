// Metadata members and caches.
//
//   GET    /v1/metadata/members        {"members":[{"id","raft_address","rpc_address","level",
//                                       "joined_seq","role","held","held_index",
//                                       "held_required_level","held_reason","applied",
//                                       "state_hash"}],
//                                       "leader","group_level","level_floor"}
//   POST   /v1/metadata/members        {"id","raft_address","rpc_address","level"} -> 200 member
//                                       (adds a member, or re-admits a known id at the same
//                                       addresses with its new level); 409 taken id, or a
//                                       level below the group's floor
//   DELETE /v1/metadata/members/{id}   204; 404 unknown; 409 the last voter
//   GET    {ns}/caches                 {"caches":[cache]}
//   POST   {ns}/caches                 {"name", "default_ttl_ms"?} -> 201 cache; 409 while a
//                                       metadata member is below level 14 (upgraded members)
//   GET    {ns}/caches/{c}             cache {"tenant","namespace","name","incarnation",
//                                       "default_ttl_ms","created_seq"}
//   DELETE {ns}/caches/{c}             200 the deleted cache
//
// Backends without members or caches answer 501 not_supported.
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value_from.hpp>

#include "cache_store.h"
#include "codec.h"
#include "handlers.h"
#include "problem.h"
#include "sluice/catalog_json.h"
#include "sluice/failpoint.h"
#include "sluice/names.h"

namespace sluice::http_api {

namespace json = boost::json;

namespace {

// The SDK codec's shape, but state_hash as a string: JSON numbers above 2^53 lose
// precision in many clients.
json::object member_json(const MemberInfo& m) {
  json::object o = json::value_from(m).as_object();
  o["state_hash"] = std::to_string(m.state_hash);
  return o;
}

json::object cache_json(const CacheInfo& c) {
  json::object o;
  o["tenant"] = c.key.tenant;
  o["namespace"] = c.key.ns;
  o["name"] = c.key.name;
  o["incarnation"] = c.incarnation.value();
  o["default_ttl_ms"] = c.spec.default_ttl_ms;
  o["created_seq"] = c.created_seq.value();
  return o;
}

// A JSON integer field within [lo, hi]; absent -> `def` (nullopt def: required).
Result<std::int64_t> int_field(const json::object& o, const char* k, std::int64_t lo, std::int64_t hi,
                               std::optional<std::int64_t> def) {
  const auto* v = o.if_contains(k);
  if (!v) {
    if (def) return *def;
    return Error(Errc::invalid_argument, std::string("field \"") + k + "\" is required");
  }
  std::int64_t x = 0;
  if (v->is_int64())
    x = v->get_int64();
  else if (v->is_uint64() && v->get_uint64() <= static_cast<std::uint64_t>(INT64_MAX))
    x = static_cast<std::int64_t>(v->get_uint64());
  else
    return Error(Errc::invalid_argument, std::string("field \"") + k + "\" must be an integer");
  if (x < lo || x > hi)
    return Error(Errc::invalid_argument, std::string("field \"") + k + "\" must be between " +
                                             std::to_string(lo) + " and " + std::to_string(hi));
  return x;
}

Result<std::string> address_field(const json::object& o, const char* k) {
  const auto* v = o.if_contains(k);
  if (!v || !v->is_string())
    return Error(Errc::invalid_argument, std::string("field \"") + k + "\" (ip:port) is required");
  std::string a(v->get_string());
  auto colon = a.rfind(':');
  if (a.empty() || a.size() > 255 || colon == std::string::npos || colon == 0 || colon + 1 == a.size())
    return Error(Errc::invalid_argument, std::string("field \"") + k + "\" must be ip:port");
  for (char c : a)
    if (!((c >= '0' && c <= '9') || c == '.' || c == ':' || (c >= 'a' && c <= 'z') || c == '-'))
      return Error(Errc::invalid_argument, std::string("field \"") + k + "\" must be ip:port");
  return a;
}

Result<JoinRequest> join_body(std::string_view body) {
  json::monotonic_resource mr;
  json::value v(json::storage_ptr{&mr});
  if (auto r = parse_json_object(body, v); !r) return r.error();
  const auto& o = v.get_object();
  if (auto r = check_fields(o, {"id", "raft_address", "rpc_address", "level"}, ""); !r) return r.error();
  JoinRequest j;
  auto id = int_field(o, "id", 1, 0x7fffffff, std::nullopt);
  if (!id) return id.error();
  auto level = int_field(o, "level", 1, 1000, std::nullopt);
  if (!level) return level.error();
  auto raft = address_field(o, "raft_address");
  if (!raft) return raft.error();
  auto rpc = address_field(o, "rpc_address");
  if (!rpc) return rpc.error();
  j.id = NodeId{static_cast<std::uint32_t>(*id)};
  j.level = MetadataLevel{static_cast<std::uint32_t>(*level)};
  j.raft_address = std::move(*raft);
  j.rpc_address = std::move(*rpc);
  return j;
}

Result<std::pair<std::string, CacheSpec>> cache_body(std::string_view body) {
  json::monotonic_resource mr;
  json::value v(json::storage_ptr{&mr});
  if (auto r = parse_json_object(body, v); !r) return r.error();
  const auto& o = v.get_object();
  if (auto r = check_fields(o, {"name", "default_ttl_ms"}, ""); !r) return r.error();
  const auto* n = o.if_contains("name");
  if (!n) return Error(Errc::invalid_argument, "field \"name\" is required");
  if (!n->is_string()) return Error(Errc::invalid_argument, "field \"name\" must be a string");
  std::string name(n->get_string());
  if (auto r = validate_name(NameKind::cache, name); !r) return r.error();
  CacheSpec spec;
  auto ttl = int_field(o, "default_ttl_ms", -1, 10LL * 365 * 24 * 3600 * 1000, -1);
  if (!ttl) return ttl.error();
  if (*ttl == 0) return Error(Errc::invalid_argument, "field \"default_ttl_ms\" must be -1 (no expiry) or positive");
  spec.default_ttl_ms = *ttl;
  return std::make_pair(std::move(name), spec);
}

}  // namespace

void handle_members(Node& node, const std::shared_ptr<Exchange>& ex, const std::vector<std::string>& seg,
                    std::string_view method, std::string_view body) {
  if (seg.size() == 3 && method == "GET") {
    return respond_blocking(ex, [&node]() -> HttpResponse {
      auto r = node.catalog().list_members();
      if (!r) return problem(r.error());
      json::array a;
      for (auto& m : r->members) a.push_back(member_json(m));
      json::object o;
      o["members"] = std::move(a);
      o["leader"] = r->leader.value();
      o["group_level"] = r->group_level.value();
      o["level_floor"] = r->level_floor.value();
      return json_response(200, o);
    });
  }
  if (seg.size() == 3) {  // POST
    auto j = join_body(body);
    if (!j) return ex->respond(problem(j.error()));
    return respond_blocking(ex, [&node, j = std::move(*j)]() -> HttpResponse {
      auto r = node.catalog().join_member(j);
      return r ? json_response(200, member_json(*r)) : problem(r.error());
    });
  }
  // DELETE /v1/metadata/members/{id}
  const std::string& s = seg[3];
  std::uint64_t id = 0;
  bool ok = !s.empty() && s.size() <= 10;
  for (char c : s) {
    if (c < '0' || c > '9') ok = false;
    else id = id * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (!ok || id == 0 || id > 0x7fffffff)
    return ex->respond(problem(Error(Errc::invalid_argument, "a member id is a number from 1 to 2147483647")));
  respond_blocking(ex, [&node, id]() -> HttpResponse {
    auto r = node.catalog().remove_member(NodeId{static_cast<std::uint32_t>(id)});
    if (!r) return problem(r.error());
    HttpResponse resp;
    resp.status = 204;
    return resp;
  });
}

void handle_caches(Node& node, CacheStore& store, const std::shared_ptr<Exchange>& ex,
                   const std::vector<std::string>& seg, std::string_view method, std::string_view body) {
  const std::string t = seg[2], n = seg[4];
  if (seg.size() == 6 && method == "GET") {
    return respond_blocking(ex, [&node, t, n]() -> HttpResponse {
      auto r = node.catalog().list_caches(t, n);
      if (!r) return problem(r.error());
      json::array a;
      for (auto& c : *r) a.push_back(cache_json(c));
      json::object o;
      o["caches"] = std::move(a);
      return json_response(200, o);
    });
  }
  if (seg.size() == 6) {  // POST
    auto b = cache_body(body);
    if (!b) return ex->respond(problem(b.error()));
    StreamKey key{t, n, std::move(b->first)};
    return respond_blocking(ex, [&node, &store, key = std::move(key), spec = b->second]() -> HttpResponse {
      auto r = node.catalog().create_cache(key, spec);
      if (!r) return problem(r.error());
      // The first write creates it if this fails (or a crash comes first).
      (void)store.ensure_backing(*r);
      return json_response(201, cache_json(*r));
    });
  }
  StreamKey key{t, n, seg[6]};
  if (method == "GET")
    return respond_blocking(ex, [&node, key = std::move(key)]() -> HttpResponse {
      auto r = node.catalog().get_cache(key);
      return r ? json_response(200, cache_json(*r)) : problem(r.error());
    });
  respond_blocking(ex, [&node, &store, key = std::move(key)]() -> HttpResponse {
    auto r = node.catalog().delete_cache(key);
    if (!r) return problem(r.error());
    failpoint("cache.delete.after_catalog");  // crash tests: the backing stream is left
    // Left behind only by a failure here; a recreated cache never adopts it (its
    // created_seq is older than the cache's, cache_store.cc ensure_backing).
    (void)store.delete_backing(*r);
    return json_response(200, cache_json(*r));
  });
}

}  // namespace sluice::http_api
