// The route table: a request target's decoded path segments (path.h) -> the route, its
// template (a metrics label) and the methods it allows. The contract is docs/api.md. Pure:
// the router (router.cc) and the fuzz target (tests/fuzz/) call the same functions.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
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

// The query parameters `def` takes with `method` (docs/api.md); empty for most routes.
std::span<const std::string_view> query_params(const RouteDef& def, std::string_view method);
// nullopt if every parameter in `query` is one `def` takes with `method` and none is given
// twice; otherwise why not. A misspelt or repeated parameter is refused before the handler
// runs, never ignored: `?ack=quorum&ack=none` or `?akc=quorum` must not quietly publish with
// a weaker acknowledgement than the client asked for.
std::optional<std::string> check_query(const RouteDef& def, std::string_view method,
                                       const std::vector<std::pair<std::string, std::string>>& query);

}  // namespace sluice::http_api
