// The route table: a request target's decoded path segments (path.h) -> the route, its
// template (a metrics label) and the methods it allows. The contract is docs/api.md. Pure:
// the router (router.cc) and the fuzz target (tests/fuzz/) call the same functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::http_api {

enum class Route {
  healthz, readyz, metrics, cluster, tenants, tenant, namespaces, namespace_, streams, stream,
  records, shards, shard_records, shard_subscribe, shard_leader, shard_elect, shard_reassign, fleet, groups, openapi,
  members, caches, cache_keys, counters, counter_keys
};

struct RouteDef {
  Route route;
  std::string_view label;  // route template, for metrics
  std::string_view allow;  // "GET, POST"
};

// nullopt: no such route (404).
std::optional<RouteDef> match_route(const std::vector<std::string>& segments);
// True if `method` is one of `allow` ("GET, POST").
bool method_allowed(std::string_view allow, std::string_view method);

}  // namespace sluice::http_api
