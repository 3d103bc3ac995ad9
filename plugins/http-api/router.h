// Request routing and the admin/status handlers. Beast-free: works on HttpRequest /
// HttpResponse through an Exchange (http_types.h). The path table is the contract of
// docs/api.md; README.md lists what this build serves.
//
// Order of checks for every request: parse the target (percent-decoding each path
// segment on its own) -> with auth.enabled, unless the route is open: the bearer token
// (401 unauthorized) -> match the route shape (404 not_found) -> method (405 + Allow) ->
// with auth.enabled, the token's roles against the route and its path alone (403
// forbidden; docs/security.md) -> validate every name in the path with
// sluice::validate_name (400 invalid_name) -> handler. So an invalid name never reaches
// the Node or its catalog, and a refusal never depends on whether a resource exists.
//
// Threading: handle() runs on the connection's strand. Catalog calls (which may block
// for seconds) run on the admin pool via Exchange::run_blocking; fetch, stream lookup,
// shards, info, ready and metrics run inline (fast local reads); publish is async.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "auth.h"
#include "cache_store.h"
#include "config.h"
#include "http_types.h"
#include "metrics.h"
#include "sluice/node.h"
#include "quotas.h"
#include "waiters.h"

namespace sluice::http_api {

class Router {
 public:
  // `tokens`: the tokens in force when auth.enabled (docs/security.md), else null.
  Router(Node& node, HttpMetrics& metrics, const HttpConfig& cfg, const TokenStore* tokens = nullptr)
      : node_(node),
        metrics_(metrics),
        cfg_(cfg),
        tokens_(tokens),
        waiters_(cfg.max_waiters_per_shard),
        quotas_(cfg.publish_bytes_per_s),
        cache_(node, CacheConfig{cfg.cache_max_value_bytes, cfg.cache_max_key_bytes, cfg.cache_shards,
                                 cfg.cache_threads, cfg.default_replication_factor, cfg.cache_clock_skew_ms,
                                 cfg.cache_compact_min_bytes, cfg.cache_compact_ratio, cfg.cache_compact_sweep_ms}),
        counters_(node,
                  CacheConfig{cfg.cache_max_value_bytes, cfg.cache_max_key_bytes, cfg.cache_shards, cfg.cache_threads,
                              cfg.default_replication_factor, cfg.cache_clock_skew_ms, cfg.cache_compact_min_bytes,
                              cfg.cache_compact_ratio, cfg.cache_compact_sweep_ms},
                  CacheFlavor::counters()) {
    metrics_.set_quotas(&quotas_);
    metrics_.set_cache(&cache_, &counters_);
  }
  // Stops the cache and counter pools (queued requests are dropped, running ones finish).
  void stop() {
    cache_.stop();
    counters_.stop();
  }
  // Answers through ex->respond(), exactly once (unless the server stops first).
  void handle(const std::shared_ptr<Exchange>& ex);

  // With auth on: whether the request's token may read the metrics (an open route's detail).
  bool may_see_detail(const HttpRequest& req) const;

  // The 401 or 403 that `head` (method, target and Authorization; no body) is sure to get,
  // or nullopt. The session asks once a request's header has arrived and before it reads
  // the body, so a client without a valid token cannot make the server read up to
  // http.max_body_bytes (nor invite it with "Expect: 100-continue"). Thread-safe.
  std::optional<HttpResponse> refusal_before_body(const HttpRequest& head) const;

  // The most body bytes `head`'s route takes, when below http.max_body_bytes, with the
  // setting that says so (a cache PUT: cache.max_value_bytes); nullopt: http.max_body_bytes.
  // The session applies it before it reads (or invites, with 100 Continue) the body.
  struct BodyLimit {
    std::size_t bytes;
    const char* setting;
  };
  std::optional<BodyLimit> body_limit(const HttpRequest& head) const;

 private:
  void dispatch(const std::shared_ptr<Exchange>& ex);
  // With auth.enabled and a route that is not open: the 401 for a missing or unknown
  // bearer token, else nullopt with `who` (and the `table` holding it) set.
  std::optional<HttpResponse> authenticate(const HttpRequest& req, const std::vector<std::string>& seg,
                                           const std::optional<RouteDef>& def,
                                           std::shared_ptr<const TokenTable>& table,
                                           const TokenEntry*& who) const;

  Node& node_;
  HttpMetrics& metrics_;
  const HttpConfig& cfg_;
  const TokenStore* tokens_;
  ShardWaiters waiters_;
  PublishQuotas quotas_;
  CacheStore cache_;
  CacheStore counters_;  // the counter data plane (docs/api.md "Counters")
};

}  // namespace sluice::http_api
