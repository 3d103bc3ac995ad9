#include "metrics.h"

#include "cache_store.h"

#include "quotas.h"
#include "sluice/metrics_text.h"

namespace sluice::http_api {

void HttpMetrics::request_done(const std::string& route, int status) {
  std::lock_guard lk(mu_);
  ++requests_[{route, status}];
}

void HttpMetrics::ws_close_reason(const std::string& reason) {
  std::lock_guard lk(mu_);
  ++ws_closes_[reason];
}

std::string HttpMetrics::render() const {
  MetricsWriter w;
  w.family("sluice_http_requests_total", "HTTP requests answered, by route and status.", MetricType::counter);
  {
    std::lock_guard lk(mu_);
    for (auto& [k, n] : requests_)
      w.sample("sluice_http_requests_total", {{"route", k.first}, {"status", std::to_string(k.second)}}, n);
  }
  w.single("sluice_http_requests_in_flight", "HTTP requests being served.", MetricType::gauge, in_flight_.load());
  w.single("sluice_http_connections", "Open HTTP connections.", MetricType::gauge, connections_.load());
  w.single("sluice_http_connections_evicted_total",
           "Connections closed to make room for a new one at http.max_connections (the longest idle or "
           "reading, none with a request in progress).",
           MetricType::counter, evicted_.load());
  w.single("sluice_http_connections_refused_total",
           "Connections answered 503 at http.max_connections because every open one had a request in progress.",
           MetricType::counter, refused_.load());
  w.single("sluice_http_connections_refusing",
           "Refused connections not yet closed: their 503 sent, what the client sent being read and dropped for up "
           "to 1 s. They count with closing connections against the bound on those (http.max_connections, at "
           "least 1024); beyond it a new connection is closed at once.",
           MetricType::gauge, refusing_.load());
  w.single("sluice_http_request_timeouts_total",
           "Connections closed because a request did not arrive whole within http.request_timeout_ms.",
           MetricType::counter, timed_out_.load());
  w.single("sluice_http_tls_handshake_failures_total",
           "Connections closed because their TLS handshake failed or did not finish within http.request_timeout_ms "
           "(tls.cert_file set).",
           MetricType::counter, tls_failed_.load());
  w.single("sluice_http_quota_rejections_total",
           "Publishes answered 429 quota_exceeded (quota.publish_bytes_per_s, per tenant on this broker).",
           MetricType::counter, quotas_ ? quotas_->rejections() : 0);
  w.single("sluice_cache_indexed_shards",
           "Backing-stream shards this broker holds a cache index for (docs/api.md \"Caches (keys)\"); a "
           "deleted cache's go when the change feed reports its backing stream's delete.",
           MetricType::gauge, cache_ ? cache_->indexed_shards() : 0);
  w.single("sluice_counter_indexed_shards",
           "Backing-stream shards this broker holds a counter index for (docs/api.md \"Counters\").",
           MetricType::gauge, counters_ ? counters_->indexed_shards() : 0);
  w.single("sluice_cache_pending_writes",
           "Cache writes in progress on this broker: queued for, or in, their shard's group commit (a steadily "
           "high value: a shard's writes arrive faster than its appends complete).",
           MetricType::gauge, cache_ ? cache_->pending_writes() : 0);
  w.single("sluice_cache_leftovers_deleted_total",
           "Backing streams of deleted caches and counters this broker deleted because the broker that handled "
           "the delete had not (it died between the catalog delete and the backing stream's).",
           MetricType::counter,
           (cache_ ? cache_->leftovers_deleted() : 0) + (counters_ ? counters_->leftovers_deleted() : 0));
  w.single("sluice_counter_pending_writes", "Counter adds in progress on this broker (queued for, or in, their shard's group commit).",
           MetricType::gauge, counters_ ? counters_->pending_writes() : 0);
  w.single("sluice_cache_compactions_total",
           "Compactions of cache and counter backing shards this broker led that finished: live keys "
           "restated at the log end, older segments deleted (docs/architecture.md \"Cache compaction\").",
           MetricType::counter,
           (cache_ ? cache_->compactions() : 0) + (counters_ ? counters_->compactions() : 0));
  w.single("sluice_cache_compacted_bytes_total",
           "Bytes of cache and counter backing shards those compactions deleted.", MetricType::counter,
           (cache_ ? cache_->compacted_bytes() : 0) + (counters_ ? counters_->compacted_bytes() : 0));
  w.single("sluice_http_received_bytes_total", "Request bytes read (headers and body).", MetricType::counter,
           bytes_in_.load());
  w.single("sluice_http_sent_bytes_total", "Response bytes written (headers and body).", MetricType::counter,
           bytes_out_.load());
  w.single("sluice_http_ws_subscriptions", "Open WebSocket subscriptions.", MetricType::gauge, ws_open_.load());
  w.single("sluice_http_ws_frames_sent_total", "Frames WebSocket subscriptions sent (records and batches).",
           MetricType::counter, ws_frames_.load());
  w.single("sluice_http_ws_buffered_bytes", "Frame bytes WebSocket subscriptions hold queued for their sockets.",
           MetricType::gauge, ws_buffered_.load());
  w.family("sluice_http_ws_closes_total", "WebSocket subscriptions ended, by reason.", MetricType::counter);
  {
    std::lock_guard lk(mu_);
    for (auto& [reason, n] : ws_closes_) w.sample("sluice_http_ws_closes_total", {{"reason", reason}}, n);
  }
  return std::move(w).str();
}

}  // namespace sluice::http_api
