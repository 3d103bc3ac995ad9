#include "routes.h"

namespace sluice::http_api {

std::optional<RouteDef> match_route(const std::vector<std::string>& s) {
  const std::size_t n = s.size();
  if (n == 1 && s[0] == "healthz") return RouteDef{Route::healthz, "/healthz", "GET"};
  if (n == 1 && s[0] == "readyz") return RouteDef{Route::readyz, "/readyz", "GET"};
  if (n == 1 && s[0] == "metrics") return RouteDef{Route::metrics, "/metrics", "GET"};
  if (n == 1 && s[0] == "openapi.yaml") return RouteDef{Route::openapi, "/openapi.yaml", "GET"};
  if (n < 2 || s[0] != "v1") return std::nullopt;
  if (n == 2 && s[1] == "cluster") return RouteDef{Route::cluster, "/v1/cluster", "GET"};
  if (n == 2 && s[1] == "features") return RouteDef{Route::fleet, "/v1/features", "GET"};
  if (n == 4 && s[1] == "features" && s[3] == "finalize")
    return RouteDef{Route::fleet, "/v1/features/{f}/finalize", "POST"};
  if (n == 2 && s[1] == "brokers") return RouteDef{Route::fleet, "/v1/brokers", "GET"};
  if (n == 4 && s[1] == "brokers" && s[3] == "drain")
    return RouteDef{Route::fleet, "/v1/brokers/{id}/drain", "POST"};
  if (n == 2 && s[1] == "tombstones") return RouteDef{Route::fleet, "/v1/tombstones", "GET"};
  if (n == 3 && s[1] == "metadata" && s[2] == "members")
    return RouteDef{Route::members, "/v1/metadata/members", "GET, POST"};
  if (n == 4 && s[1] == "metadata" && s[2] == "members")
    return RouteDef{Route::members, "/v1/metadata/members/{id}", "DELETE"};
  if (s[1] != "tenants") return std::nullopt;
  if (n == 2) return RouteDef{Route::tenants, "/v1/tenants", "GET, POST"};
  if (n == 3) return RouteDef{Route::tenant, "/v1/tenants/{t}", "GET, DELETE"};
  if (s[3] != "namespaces") return std::nullopt;
  if (n == 4) return RouteDef{Route::namespaces, "/v1/tenants/{t}/namespaces", "GET, POST"};
  if (n == 5) return RouteDef{Route::namespace_, "{ns}", "GET, DELETE"};
  if (n == 6 && s[5] == "caches") return RouteDef{Route::caches, "{ns}/caches", "GET, POST"};
  if (n == 7 && s[5] == "caches") return RouteDef{Route::caches, "{ns}/caches/{c}", "GET, DELETE"};
  if (n == 8 && s[5] == "caches" && s[7] == "keys")
    return RouteDef{Route::cache_keys, "{ns}/caches/{c}/keys", "GET"};
  if (n == 9 && s[5] == "caches" && s[7] == "keys")
    return RouteDef{Route::cache_keys, "{ns}/caches/{c}/keys/{k}", "GET, PUT, DELETE"};
  if (n == 6 && s[5] == "counters") return RouteDef{Route::counters, "{ns}/counters", "GET, POST"};
  if (n == 7 && s[5] == "counters") return RouteDef{Route::counters, "{ns}/counters/{c}", "GET, DELETE"};
  if (n == 9 && s[5] == "counters" && s[7] == "keys")
    return RouteDef{Route::counter_keys, "{ns}/counters/{c}/keys/{k}", "GET"};
  if (n == 10 && s[5] == "counters" && s[7] == "keys" && s[9] == "add")
    return RouteDef{Route::counter_keys, "{ns}/counters/{c}/keys/{k}/add", "POST"};
  if (s[5] != "streams") return std::nullopt;
  if (n == 6) return RouteDef{Route::streams, "{ns}/streams", "GET, POST"};
  if (n == 7) return RouteDef{Route::stream, "{ns}/streams/{s}", "GET, DELETE"};
  if (n == 8 && s[7] == "records") return RouteDef{Route::records, "{ns}/streams/{s}/records", "POST"};
  if (n == 8 && s[7] == "shards") return RouteDef{Route::shards, "{ns}/streams/{s}/shards", "GET"};
  if (n == 10 && s[7] == "shards" && s[9] == "records")
    return RouteDef{Route::shard_records, "{ns}/streams/{s}/shards/{n}/records", "GET"};
  if (n == 10 && s[7] == "shards" && s[9] == "subscribe")
    return RouteDef{Route::shard_subscribe, "{ns}/streams/{s}/shards/{n}/subscribe", "GET"};
  if (n == 10 && s[7] == "shards" && s[9] == "leader")
    return RouteDef{Route::shard_leader, "{ns}/streams/{s}/shards/{n}/leader", "POST"};
  if (n == 10 && s[7] == "shards" && s[9] == "elect")
    return RouteDef{Route::shard_elect, "{ns}/streams/{s}/shards/{n}/elect", "POST"};
  if (n == 10 && s[7] == "shards" && s[9] == "reassign")
    return RouteDef{Route::shard_reassign, "{ns}/streams/{s}/shards/{n}/reassign", "POST"};
  if (s[7] != "groups") return std::nullopt;
  if (n == 8) return RouteDef{Route::groups, "{ns}/streams/{s}/groups", "GET"};
  if (n == 9) return RouteDef{Route::groups, "{ns}/streams/{s}/groups/{g}", "GET"};
  if (n < 12 || s[9] != "shards") return std::nullopt;
  if (n == 12 && s[11] == "records")
    return RouteDef{Route::groups, "{ns}/streams/{s}/groups/{g}/shards/{n}/records", "GET"};
  if (n == 12 && s[11] == "subscribe")
    return RouteDef{Route::groups, "{ns}/streams/{s}/groups/{g}/shards/{n}/subscribe", "GET"};
  if (n == 12 && s[11] == "ack")
    return RouteDef{Route::groups, "{ns}/streams/{s}/groups/{g}/shards/{n}/ack", "POST"};
  if (n == 12 && s[11] == "nack")
    return RouteDef{Route::groups, "{ns}/streams/{s}/groups/{g}/shards/{n}/nack", "POST"};
  if (n == 12 && s[11] == "dead-letters")
    return RouteDef{Route::groups, "{ns}/streams/{s}/groups/{g}/shards/{n}/dead-letters", "GET"};
  if (n == 13 && s[11] == "dead-letters" && s[12] == "replay")
    return RouteDef{Route::groups, "{ns}/streams/{s}/groups/{g}/shards/{n}/dead-letters/replay", "POST"};
  return std::nullopt;
}

bool method_allowed(std::string_view allow, std::string_view method) {
  while (!allow.empty()) {
    auto comma = allow.find(',');
    auto m = allow.substr(0, comma);
    while (!m.empty() && m.front() == ' ') m.remove_prefix(1);
    if (m == method) return true;
    if (comma == std::string_view::npos) break;
    allow.remove_prefix(comma + 1);
  }
  return false;
}

std::span<const std::string_view> query_params(const RouteDef& def, std::string_view method) {
  using sv = std::string_view;
  static constexpr sv kPublish[] = {"ack", "producer_id", "sequence"};
  static constexpr sv kFetch[] = {"offset", "max", "wait_ms"};
  static constexpr sv kSubscribe[] = {"offset", "format", "credit"};
  static constexpr sv kGroupRecords[] = {"max", "wait_ms", "max_deliveries", "ack_timeout_ms"};
  static constexpr sv kGroupSubscribe[] = {"format", "credit", "max_deliveries", "ack_timeout_ms"};
  static constexpr sv kDeadLetters[] = {"offset", "max"};
  static constexpr sv kCacheList[] = {"prefix", "after", "limit"};
  static constexpr sv kCachePut[] = {"if_revision", "if_incarnation", "ack", "ttl_ms"};
  static constexpr sv kCacheDelete[] = {"if_revision", "if_incarnation", "ack"};
  static constexpr sv kCounterAdd[] = {"producer_id", "sequence", "ack", "if_incarnation"};
  const sv l = def.label;
  switch (def.route) {
    case Route::records: return kPublish;
    case Route::shard_records: return kFetch;
    case Route::shard_subscribe: return kSubscribe;
    case Route::groups:
      if (l.ends_with("/records")) return kGroupRecords;
      if (l.ends_with("/subscribe")) return kGroupSubscribe;
      if (l.ends_with("/dead-letters")) return kDeadLetters;
      return {};
    case Route::cache_keys:
      if (l.ends_with("/keys")) return kCacheList;
      if (method == "PUT") return kCachePut;
      if (method == "DELETE") return kCacheDelete;
      return {};
    case Route::counter_keys:
      return l.ends_with("/add") ? std::span<const sv>(kCounterAdd) : std::span<const sv>{};
    default:
      return {};
  }
}

std::optional<std::string> check_query(const RouteDef& def, std::string_view method,
                                       const std::vector<std::pair<std::string, std::string>>& query) {
  if (query.empty()) return std::nullopt;
  const auto takes = query_params(def, method);
  for (std::size_t i = 0; i < query.size(); ++i) {
    const std::string& k = query[i].first;
    bool known = false;
    for (auto t : takes) known = known || t == k;
    if (!known) {
      std::string m = "unknown query parameter \"" + k.substr(0, 64) + "\" for " + std::string(method) + " " +
                      std::string(def.label) + "; it takes ";
      if (takes.empty()) m += "none";
      for (std::size_t j = 0; j < takes.size(); ++j) m += (j ? ", " : "") + std::string(takes[j]);
      return m;
    }
    for (std::size_t j = 0; j < i; ++j)
      if (query[j].first == k) return "query parameter \"" + k + "\" is given more than once";
  }
  return std::nullopt;
}

}  // namespace sluice::http_api
