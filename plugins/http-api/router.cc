#include "router.h"

#include <algorithm>
#include <cctype>
#include <exception>
#include <string>
#include <vector>

#include <boost/json/array.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "codec.h"
#include "handlers.h"
#include "path.h"
#include "problem.h"
#include "routes.h"
#include "subscribe.h"
#include "sluice/catalog_rules.h"
#include "sluice/names.h"

namespace sluice::http_api {

namespace json = boost::json;

// /readyz's reason for a caller that may not see it (auth on, no admin or metrics token).
constexpr std::string_view kReadyzWithheld =
    "not ready; the reason is in the broker's log, or ask with an admin or metrics token";

HttpResponse with_leader(HttpResponse r, Node& node, const StreamKey& key, ShardIndex shard) {
  if (auto a = node.leader_address(key, shard); !a.empty()) r.headers.emplace_back("Sluice-Leader", std::move(a));
  return r;
}

namespace {

HttpResponse empty_response(int status) {
  HttpResponse r;
  r.status = status;
  return r;
}

// Reads {"name": string} (the create body of tenants and namespaces).
Result<std::string> name_body(std::string_view body, NameKind kind) {
  json::monotonic_resource mr;
  json::value v(json::storage_ptr{&mr});
  if (auto r = parse_json_object(body, v); !r) return r.error();
  const auto& o = v.get_object();
  if (auto r = check_fields(o, {"name"}, ""); !r) return r.error();
  const auto* n = o.if_contains("name");
  if (!n) return Error(Errc::invalid_argument, "field \"name\" is required");
  if (!n->is_string()) return Error(Errc::invalid_argument, "field \"name\" must be a string");
  std::string name(n->get_string().data(), n->get_string().size());
  if (auto r = validate_name(kind, name); !r) return r.error();
  return name;
}

Result<std::uint32_t> u32_field(const json::value& v, std::string_view what, std::uint32_t lo) {
  if (v.is_int64() && v.get_int64() >= lo && v.get_int64() <= 0xffffffffLL)
    return static_cast<std::uint32_t>(v.get_int64());
  if (v.is_uint64() && v.get_uint64() >= lo && v.get_uint64() <= 0xffffffffULL)
    return static_cast<std::uint32_t>(v.get_uint64());
  return Error(Errc::invalid_argument, "field \"" + std::string(what) + "\" must be an integer >= " +
                                           std::to_string(lo));
}

Result<std::int64_t> i64_field(const json::value& v, std::string_view what) {
  if (v.is_int64()) return v.get_int64();
  if (v.is_uint64() && v.get_uint64() <= static_cast<std::uint64_t>(INT64_MAX))
    return static_cast<std::int64_t>(v.get_uint64());
  return Error(Errc::invalid_argument, "field \"" + std::string(what) + "\" must be an integer");
}

// Reads the create-stream body: {"name","shards"?,"retention"?:{...},"ack"?,
// "replication_factor"?,"min_insync"?}. replication_factor defaults to
// stream.default_replication_factor, min_insync to a majority of the replication factor;
// the Node checks the ranges (validate_stream_spec) and what it serves.
Result<std::pair<std::string, StreamSpec>> stream_body(std::string_view body,
                                                       std::uint32_t default_replication_factor) {
  json::monotonic_resource mr;
  json::value v(json::storage_ptr{&mr});
  if (auto r = parse_json_object(body, v); !r) return r.error();
  const auto& o = v.get_object();
  const std::initializer_list<std::string_view> fields = {
      "name", "shards", "retention", "ack", "replication_factor", "min_insync"};
  if (auto r = check_fields(o, fields, ""); !r) return r.error();
  const auto* n = o.if_contains("name");
  if (!n) return Error(Errc::invalid_argument, "field \"name\" is required");
  if (!n->is_string()) return Error(Errc::invalid_argument, "field \"name\" must be a string");
  std::string name(n->get_string().data(), n->get_string().size());
  if (auto r = validate_name(NameKind::stream, name); !r) return r.error();
  if (reserved_stream_name(name))
    return Error(Errc::invalid_name, "stream names starting with '__' are reserved (they back caches)");
  StreamSpec spec;
  spec.replication_factor = default_replication_factor;
  if (const auto* s = o.if_contains("shards")) {
    auto r = u32_field(*s, "shards", 1);
    if (!r) return r.error();
    spec.shards = *r;
  }
  if (const auto* rv = o.if_contains("retention")) {
    if (!rv->is_object())
      return Error(Errc::invalid_argument, "field \"retention\" must be an object");
    const auto& ro = rv->get_object();
    if (auto r = check_fields(ro, {"max_bytes", "max_age_ms"}, "retention."); !r) return r.error();
    if (const auto* b = ro.if_contains("max_bytes")) {
      auto r = i64_field(*b, "retention.max_bytes");
      if (!r) return r.error();
      spec.retention.max_bytes = *r;
    }
    if (const auto* a = ro.if_contains("max_age_ms")) {
      auto r = i64_field(*a, "retention.max_age_ms");
      if (!r) return r.error();
      spec.retention.max_age_ms = *r;
    }
  }
  if (const auto* a = o.if_contains("ack")) {
    if (!a->is_string()) return Error(Errc::invalid_argument, "field \"ack\" must be a string");
    auto m = parse_ack_mode(std::string_view(a->get_string().data(), a->get_string().size()));
    if (!m) return Error(Errc::invalid_argument, "field \"ack\" must be \"none\", \"leader\" or \"quorum\"");
    spec.default_ack = *m;
  }
  if (const auto* f = o.if_contains("replication_factor")) {
    auto r = u32_field(*f, "replication_factor", 1);
    if (!r) return r.error();
    spec.replication_factor = *r;
  }
  spec.min_insync = default_min_insync(spec.replication_factor);
  // A replicated stream acknowledges on its in-sync set unless the create says otherwise.
  if (!o.if_contains("ack") && spec.replication_factor > 1) spec.default_ack = AckMode::quorum;
  if (const auto* f = o.if_contains("min_insync")) {
    auto r = u32_field(*f, "min_insync", 1);
    if (!r) return r.error();
    spec.min_insync = *r;
  }
  return std::pair{std::move(name), spec};
}

// The leader-move body: {"broker": N}, nothing else.
Result<NodeId> leader_body(std::string_view body) {
  json::monotonic_resource mr;
  json::value v(json::storage_ptr{&mr});
  if (auto r = parse_json_object(body, v); !r) return r.error();
  const auto& o = v.get_object();
  if (auto r = check_fields(o, {"broker"}, ""); !r) return r.error();
  const auto* b = o.if_contains("broker");
  if (!b) return Error(Errc::invalid_argument, "field \"broker\" is required");
  auto id = u32_field(*b, "broker", 1);
  if (!id) return id.error();
  return NodeId{*id};
}

// The election body: {"preferred": true} or {"broker": N, "unclean": true}, nothing else.
Result<std::pair<Node::Election, NodeId>> elect_body(std::string_view body) {
  json::monotonic_resource mr;
  json::value v(json::storage_ptr{&mr});
  if (auto r = parse_json_object(body, v); !r) return r.error();
  const auto& o = v.get_object();
  if (auto r = check_fields(o, {"broker", "unclean", "preferred"}, ""); !r) return r.error();
  auto flag = [&](const char* name) -> Result<bool> {
    const auto* f = o.if_contains(name);
    if (!f) return false;
    if (!f->is_bool()) return Error(Errc::invalid_argument, std::string("field \"") + name + "\" must be true or false");
    return f->get_bool();
  };
  auto unclean = flag("unclean");
  if (!unclean) return unclean.error();
  auto preferred = flag("preferred");
  if (!preferred) return preferred.error();
  if (*preferred == *unclean)
    return Error(Errc::invalid_argument,
                 "an election is either {\"preferred\": true} or {\"broker\": N, \"unclean\": true}; an unclean "
                 "one may lose acknowledged records, and the controller elects eligible replicas by itself");
  const auto* b = o.if_contains("broker");
  if (*preferred) {
    if (b) return Error(Errc::invalid_argument, "a preferred election names no broker (the first replica leads)");
    return std::pair{Node::Election::preferred, NodeId{0}};
  }
  if (!b) return Error(Errc::invalid_argument, "field \"broker\" is required");
  auto id = u32_field(*b, "broker", 1);
  if (!id) return id.error();
  return std::pair{Node::Election::unclean, NodeId{*id}};
}

// The reassignment body: {"replicas": [B, ...]}, broker ids, nothing else (the rules on the
// list itself are plan_reassignment's).
Result<std::vector<NodeId>> reassign_body(std::string_view body) {
  json::monotonic_resource mr;
  json::value v(json::storage_ptr{&mr});
  if (auto r = parse_json_object(body, v); !r) return r.error();
  const auto& o = v.get_object();
  if (auto r = check_fields(o, {"replicas"}, ""); !r) return r.error();
  const auto* reps = o.if_contains("replicas");
  if (!reps) return Error(Errc::invalid_argument, "field \"replicas\" is required");
  if (!reps->is_array() || reps->get_array().empty() || reps->get_array().size() > kMaxReplicationFactor)
    return Error(Errc::invalid_argument, "field \"replicas\" must be an array of 1 to " +
                                             std::to_string(kMaxReplicationFactor) + " broker ids");
  std::vector<NodeId> out;
  for (const auto& e : reps->get_array()) {
    auto id = u32_field(e, "replicas", 1);
    if (!id) return id.error();
    out.push_back(NodeId{*id});
  }
  return out;
}

Result<ShardIndex> shard_segment(const std::string& s) {
  if (s.empty() || s.size() > 10 ||
      !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return Error(Errc::invalid_argument, "shard must be a non-negative integer");
  const auto v = std::stoull(s);
  if (v > 0xffffffffULL) return Error(Errc::invalid_argument, "shard is out of range");
  return ShardIndex{static_cast<std::uint32_t>(v)};
}


// 401, with the challenge RFC 6750 asks for (error="invalid_token" only when a bearer token
// was sent but is not known). The detail says what was wrong with the header, never what it
// carried.
HttpResponse unauthorized(const std::string& detail, bool invalid_token) {
  HttpResponse r = problem(401, "unauthorized", "Unauthorized", detail);
  r.headers.emplace_back("WWW-Authenticate",
                         invalid_token ? "Bearer realm=\"sluice\", error=\"invalid_token\"" : "Bearer realm=\"sluice\"");
  return r;
}

// 403: the same bytes for every path of a route apart from "instance" (the request's path),
// whether or not the resource exists.
HttpResponse forbidden(const HttpRequest& req, const Need& need) {
  json::object o;
  o["type"] = "https://sluice.dev/errors/forbidden";
  o["title"] = "Forbidden";
  o["status"] = 403;
  o["code"] = "forbidden";
  o["detail"] = "this token's roles do not allow " + req.method + " here: it needs " + describe(need) +
                " (docs/security.md)";
  o["instance"] = std::string_view(req.target).substr(0, req.target.find('?'));
  HttpResponse r;
  r.status = 403;
  r.content_type = std::string(kProblemJson);
  r.body = json::serialize(o);
  return r;
}

}  // namespace

std::optional<HttpResponse> Router::authenticate(const HttpRequest& req, const std::vector<std::string>& seg,
                                                 const std::optional<RouteDef>& def,
                                                 std::shared_ptr<const TokenTable>& table,
                                                 const TokenEntry*& who) const {
  if (!tokens_ || (def && required(def->route, seg, req.method, cfg_.metrics_open).kind == Need::open))
    return std::nullopt;
  auto tok = bearer_token(req.authorization);
  if (!tok) return unauthorized(tok.error().message, false);
  table = tokens_->current();
  who = table ? table->find(*tok) : nullptr;
  if (!who) return unauthorized("the bearer token is not valid", true);
  return std::nullopt;
}

bool Router::may_see_detail(const HttpRequest& req) const {
  if (!tokens_) return true;
  auto tok = bearer_token(req.authorization);
  if (!tok) return false;
  auto table = tokens_->current();
  const TokenEntry* e = table ? table->find(*tok) : nullptr;
  Need n;
  n.kind = Need::metrics;
  return e && allows(*e, n);
}

std::optional<HttpResponse> Router::refusal_before_body(const HttpRequest& head) const {
  if (!tokens_) return std::nullopt;
  auto target = parse_target(head.target);
  if (!target) return std::nullopt;  // answered in full once the body is read
  const auto& seg = target->segments;
  const auto def = match_route(seg);
  std::shared_ptr<const TokenTable> table;
  const TokenEntry* who = nullptr;
  if (auto refusal = authenticate(head, seg, def, table, who)) return refusal;
  if (!who || !def || !method_allowed(def->allow, head.method)) return std::nullopt;
  const Need need = required(def->route, seg, head.method, cfg_.metrics_open);
  if (!allows(*who, need)) return forbidden(head, need);
  return std::nullopt;
}

std::optional<Router::BodyLimit> Router::body_limit(const HttpRequest& head) const {
  if (head.method != "PUT") return std::nullopt;
  auto target = parse_target(head.target);
  if (!target) return std::nullopt;
  const auto def = match_route(target->segments);
  if (!def || def->route != Route::cache_keys || target->segments.size() != 9) return std::nullopt;
  const std::size_t v = cache_.config().max_value_bytes;
  if (v >= cfg_.max_body_bytes) return std::nullopt;
  return BodyLimit{v, "cache.max_value_bytes"};
}

void Router::handle(const std::shared_ptr<Exchange>& ex) {
  try {
    dispatch(ex);
  } catch (const std::exception& e) {
    ex->respond(problem(Error(Errc::internal, std::string("unexpected exception: ") + e.what())));
  }
}

void Router::dispatch(const std::shared_ptr<Exchange>& ex) {
  const HttpRequest& req = ex->request();
  auto target = parse_target(req.target);
  if (!target) {
    ex->respond(problem(Error(Errc::invalid_argument,
                              "request target is not an absolute path or has a malformed "
                              "percent-encoding")));
    return;
  }
  // A node without auth serves only requests addressed to the local machine: a web page
  // that rebinds its own name to 127.0.0.1 (DNS rebinding) would otherwise reach every
  // route from the user's browser, deletes included (review finding). With auth.enabled,
  // or auth.allow_insecure (the operator accepted an open node), any Host.
  if (!cfg_.auth_enabled && !cfg_.allow_insecure && !local_host_header(req.host))
    return ex->respond(problem(403, "forbidden", "Forbidden",
                               "this node has no authentication and answers only requests addressed to "
                               "the local machine (Host 127.0.0.1, [::1] or localhost), not Host " +
                                   req.host.substr(0, 256) + " (docs/security.md \"DNS rebinding\")"));
  const auto& seg = target->segments;
  auto def = match_route(seg);
  // Authentication first (only healthz, readyz and, if configured, metrics are open): a
  // client without a valid token learns nothing, not even which routes exist.
  std::shared_ptr<const TokenTable> table;
  const TokenEntry* who = nullptr;
  if (tokens_ && def) ex->set_route(std::string(def->label));
  if (auto refusal = authenticate(req, seg, def, table, who)) return ex->respond(std::move(*refusal));
  if (!def) {
    ex->respond(problem(Error(Errc::not_found, "no such route")));
    return;
  }
  ex->set_route(std::string(def->label));
  // A browser page from elsewhere opening a subscription (cross-site WebSocket hijacking):
  // auth.h origin_allowed.
  if (req.websocket && !origin_allowed(req.origin, req.host, cfg_.ws_allowed_origins))
    return ex->respond(problem(403, "forbidden", "Forbidden",
                               "a WebSocket from the web page origin " + req.origin.substr(0, 256) +
                                   " is not allowed here: it is not this broker's address and "
                                   "http.ws_allowed_origins does not list it (docs/security.md)"));
  if (!method_allowed(def->allow, req.method)) {
    HttpResponse r = problem(405, "method_not_allowed", "Method not allowed",
                             "method " + req.method + " is not allowed here; allowed: " +
                                 std::string(def->allow));
    r.headers.emplace_back("Allow", std::string(def->allow));
    ex->respond(std::move(r));
    return;
  }
  // Authorization from the route and the names in the path alone, before any lookup.
  if (who) {
    const Need need = required(def->route, seg, req.method, cfg_.metrics_open);
    if (!allows(*who, need)) return ex->respond(forbidden(req, need));
    // A subscription outlives this check: it asks again, against the tokens in force then.
    if (req.websocket)
      ex->set_authorization([store = tokens_, hash = who->hash, need] {
        auto t = store->current();
        const TokenEntry* e = t ? t->find_hash(hash) : nullptr;
        return e && allows(*e, need);
      });
  }
  // Every query parameter is one the route takes, once (routes.h check_query).
  if (auto why = check_query(*def, req.method, target->query))
    return ex->respond(problem(Error(Errc::invalid_argument, std::move(*why))));
  // Every name in the path is validated before anything touches the Node.
  static constexpr NameKind kinds[] = {NameKind::tenant, NameKind::ns, NameKind::stream};
  const bool tenant_path = seg.size() > 1 && seg[1] == "tenants";
  for (std::size_t i = 2, k = 0; tenant_path && i < seg.size() && i <= 6; i += 2, ++k) {
    if (auto r = validate_name(kinds[k], seg[i]); !r) {
      ex->respond(problem(r.error()));
      return;
    }
  }
  // Streams named "__..." back caches (cache_codec.h): no data route reaches them. The
  // operator's routes do (describe, delete, shards, leader move, election, reassignment):
  // a cache's shards are repaired like any stream's.
  if (tenant_path && seg.size() > 6 && seg[5] == "streams" && reserved_stream_name(seg[6])) {
    const Route r = def->route;
    if (r != Route::stream && r != Route::shards && r != Route::shard_leader && r != Route::shard_elect &&
        r != Route::shard_reassign) {
      ex->respond(problem(Error(Errc::invalid_name,
                                "stream names starting with '__' are reserved: they back caches, whose "
                                "keys are served under {ns}/caches/{c}/keys")));
      return;
    }
  }
  const bool get = req.method == "GET";
  Node& node = node_;
  switch (def->route) {
    case Route::healthz: {
      json::object o;
      o["status"] = "ok";
      ex->respond(json_response(200, o));
      return;
    }
    case Route::readyz: {
      std::string why;
      const bool ready = node.ready(&why);
      json::object o;
      o["status"] = ready ? "ready" : "not_ready";
      // Always open, so with auth on the reason (it names tenants' streams and storage
      // errors with file paths) only goes to a token that may read the metrics (review).
      if (!ready) o["reason"] = may_see_detail(req) ? why : std::string(kReadyzWithheld);
      ex->respond(json_response(ready ? 200 : 503, o));
      return;
    }
    case Route::metrics: {
      HttpResponse r;
      r.content_type = "text/plain; version=0.0.4";
      r.body = node.metrics_text();
      if (!r.body.empty() && r.body.back() != '\n') r.body.push_back('\n');
      r.body += metrics_.render();
      ex->respond(std::move(r));
      return;
    }
    case Route::cluster:
      ex->respond(json_response(200, cluster_json(node.info())));
      return;
    case Route::openapi: {
      HttpResponse r;
      r.content_type = "application/yaml";
      r.body = std::string(openapi_document());
      ex->respond(std::move(r));
      return;
    }
    case Route::tenants:
      if (get) {
        respond_blocking(ex, [&node]() -> HttpResponse {
          auto r = node.catalog().list_tenants();
          if (!r) return problem(r.error());
          json::array a;
          for (auto& t : *r) a.push_back(tenant_json(t));
          json::object o;
          o["tenants"] = std::move(a);
          return json_response(200, o);
        });
      } else {
        auto name = name_body(req.body, NameKind::tenant);
        if (!name) return ex->respond(problem(name.error()));
        respond_blocking(ex, [&node, name = std::move(*name)]() -> HttpResponse {
          auto r = node.catalog().create_tenant(name);
          return r ? json_response(201, tenant_json(*r)) : problem(r.error());
        });
      }
      return;
    case Route::tenant:
      if (get) {
        respond_blocking(ex, [&node, t = seg[2]]() -> HttpResponse {
          auto r = node.catalog().list_tenants();
          if (!r) return problem(r.error());
          for (auto& ti : *r)
            if (ti.name == t) return json_response(200, tenant_json(ti));
          return problem(Error(Errc::not_found, "tenant '" + t + "' not found"));
        });
      } else {
        respond_blocking(ex, [&node, t = seg[2]]() -> HttpResponse {
          auto r = node.catalog().delete_tenant(t);
          return r ? empty_response(204) : problem(r.error());
        });
      }
      return;
    case Route::namespaces:
      if (get) {
        respond_blocking(ex, [&node, t = seg[2]]() -> HttpResponse {
          auto r = node.catalog().list_namespaces(t);
          if (!r) return problem(r.error());
          json::array a;
          for (auto& n : *r) a.push_back(namespace_json(n));
          json::object o;
          o["namespaces"] = std::move(a);
          return json_response(200, o);
        });
      } else {
        auto name = name_body(req.body, NameKind::ns);
        if (!name) return ex->respond(problem(name.error()));
        respond_blocking(ex, [&node, t = seg[2], name = std::move(*name)]() -> HttpResponse {
          auto r = node.catalog().create_namespace(t, name);
          return r ? json_response(201, namespace_json(*r)) : problem(r.error());
        });
      }
      return;
    case Route::namespace_:
      if (get) {
        respond_blocking(ex, [&node, t = seg[2], n = seg[4]]() -> HttpResponse {
          auto r = node.catalog().list_namespaces(t);
          if (!r) return problem(r.error());
          for (auto& ni : *r)
            if (ni.name == n) return json_response(200, namespace_json(ni));
          return problem(Error(Errc::not_found, "namespace '" + t + "/" + n + "' not found"));
        });
      } else {
        respond_blocking(ex, [&node, t = seg[2], n = seg[4]]() -> HttpResponse {
          auto r = node.catalog().delete_namespace(t, n);
          return r ? empty_response(204) : problem(r.error());
        });
      }
      return;
    case Route::streams:
      if (get) {
        respond_blocking(ex, [&node, t = seg[2], n = seg[4]]() -> HttpResponse {
          auto r = node.catalog().list_streams(t, n);
          if (!r) return problem(r.error());
          json::array a;
          for (auto& s : *r)
            if (!reserved_stream_name(s.key.name)) a.push_back(stream_json(s));
          json::object o;
          o["streams"] = std::move(a);
          return json_response(200, o);
        });
      } else {
        auto body = stream_body(req.body, cfg_.default_replication_factor);
        if (!body) return ex->respond(problem(body.error()));
        StreamKey key{seg[2], seg[4], std::move(body->first)};
        respond_blocking(ex, [&node, key = std::move(key), spec = body->second]() -> HttpResponse {
          auto r = node.create_stream(key, spec);
          return r ? json_response(201, stream_json(*r)) : problem(r.error());
        });
      }
      return;
    case Route::stream: {
      StreamKey key{seg[2], seg[4], seg[6]};
      if (get) {
        respond_blocking(ex, [&node, key = std::move(key)]() -> HttpResponse {
          auto r = node.catalog().get_stream(key);
          return r ? json_response(200, stream_json(*r)) : problem(r.error());
        });
      } else {
        respond_blocking(ex, [&node, key = std::move(key)]() -> HttpResponse {
          auto r = node.catalog().delete_stream(key);
          return r ? json_response(200, stream_json(*r)) : problem(r.error());
        });
      }
      return;
    }
    case Route::records:
      handle_publish(node, cfg_, quotas_, ex, StreamKey{seg[2], seg[4], seg[6]}, *target);
      return;
    case Route::shards: {
      auto r = node.shards(StreamKey{seg[2], seg[4], seg[6]});
      if (!r) return ex->respond(problem(r.error()));
      json::array a;
      for (auto& s : *r) a.push_back(shard_status_json(s));
      json::object o;
      o["shards"] = std::move(a);
      ex->respond(json_response(200, o));
      return;
    }
    case Route::shard_records: {
      auto shard = shard_segment(seg[8]);
      if (!shard) return ex->respond(problem(shard.error()));
      handle_fetch(node, cfg_, waiters_, ex, StreamKey{seg[2], seg[4], seg[6]}, *shard, *target);
      return;
    }
    case Route::shard_subscribe: {
      auto shard = shard_segment(seg[8]);
      if (!shard) return ex->respond(problem(shard.error()));
      handle_subscribe(node, ex, StreamKey{seg[2], seg[4], seg[6]}, *shard, *target);
      return;
    }
    case Route::shard_leader: {
      auto shard = shard_segment(seg[8]);
      if (!shard) return ex->respond(problem(shard.error()));
      auto broker = leader_body(req.body);
      if (!broker) return ex->respond(problem(broker.error()));
      respond_blocking(ex, [&node, key = StreamKey{seg[2], seg[4], seg[6]}, s = *shard, b = *broker]() -> HttpResponse {
        auto r = node.move_leader(key, s, b);
        return r ? json_response(200, assignment_json(*r)) : problem(r.error());
      });
      return;
    }
    case Route::shard_elect: {
      auto shard = shard_segment(seg[8]);
      if (!shard) return ex->respond(problem(shard.error()));
      auto body = elect_body(req.body);
      if (!body) return ex->respond(problem(body.error()));
      respond_blocking(ex, [&node, key = StreamKey{seg[2], seg[4], seg[6]}, s = *shard, b = *body]() -> HttpResponse {
        auto r = node.elect_leader(key, s, b.first, b.second);
        return r ? json_response(200, assignment_json(*r)) : problem(r.error());
      });
      return;
    }
    case Route::shard_reassign: {
      auto shard = shard_segment(seg[8]);
      if (!shard) return ex->respond(problem(shard.error()));
      auto target = reassign_body(req.body);
      if (!target) return ex->respond(problem(target.error()));
      respond_blocking(ex, [&node, key = StreamKey{seg[2], seg[4], seg[6]}, s = *shard, t = *target]() -> HttpResponse {
        auto r = node.reassign_shard(key, s, t);
        // 202 while the controller moves the copies; 200 when only the order changed.
        return r ? json_response(r->target_replicas.empty() ? 200 : 202, assignment_json(*r)) : problem(r.error());
      });
      return;
    }
    case Route::fleet:
      handle_fleet(node, ex, seg, req.body);
      return;
    case Route::groups:
      handle_groups(node, cfg_, ex, seg, *target);
      return;
    case Route::members:
      handle_members(node, ex, seg, req.method, req.body);
      return;
    case Route::caches:
      handle_caches(node, cache_, ex, seg, req.method, req.body);
      return;
    case Route::cache_keys:
      handle_cache_keys(cache_, ex, seg, *target);
      return;
    case Route::counters:
      handle_counters(node, counters_, ex, seg, req.method, req.body);
      return;
    case Route::counter_keys:
      handle_counter_keys(counters_, ex, seg, *target, req.body);
      return;
  }
}

}  // namespace sluice::http_api
