// The server's own counters, appended to Node::metrics_text() on GET /metrics.
// Thread-safety: all methods may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace sluice::http_api {

class PublishQuotas;
class CacheStore;

class HttpMetrics {
 public:
  void request_done(const std::string& route, int status);
  void add_bytes_in(std::uint64_t n) { bytes_in_.fetch_add(n, std::memory_order_relaxed); }
  void add_bytes_out(std::uint64_t n) { bytes_out_.fetch_add(n, std::memory_order_relaxed); }
  void inc_in_flight() { in_flight_.fetch_add(1, std::memory_order_relaxed); }
  void dec_in_flight() { in_flight_.fetch_sub(1, std::memory_order_relaxed); }
  std::int64_t in_flight() const { return in_flight_.load(std::memory_order_relaxed); }
  void connection_opened() { connections_.fetch_add(1, std::memory_order_relaxed); }
  void connection_closed() { connections_.fetch_sub(1, std::memory_order_relaxed); }
  void connection_evicted() { evicted_.fetch_add(1, std::memory_order_relaxed); }
  void connection_refused() { refused_.fetch_add(1, std::memory_order_relaxed); }
  // Refused connections still open: their 503 sent, what the client sent being drained for
  // up to 1 s before the close (server.cc refuse()).
  void refusing_opened() { refusing_.fetch_add(1, std::memory_order_relaxed); }
  void refusing_closed() { refusing_.fetch_sub(1, std::memory_order_relaxed); }
  std::int64_t refusing() const { return refusing_.load(std::memory_order_relaxed); }
  void request_timed_out() { timed_out_.fetch_add(1, std::memory_order_relaxed); }
  // tls.cert_file set: a client whose TLS handshake failed (plain text, an untrusted or
  // missing client certificate, a timeout) and was closed.
  void tls_handshake_failed() { tls_failed_.fetch_add(1, std::memory_order_relaxed); }

  // WebSocket subscriptions: open ones, the frames they sent, the bytes they hold queued,
  // and why they closed (docs/api.md "Subscribe", close reasons).
  void ws_opened() { ws_open_.fetch_add(1, std::memory_order_relaxed); }
  void ws_closed() { ws_open_.fetch_sub(1, std::memory_order_relaxed); }
  std::int64_t ws_open() const { return ws_open_.load(std::memory_order_relaxed); }
  void ws_frame_sent() { ws_frames_.fetch_add(1, std::memory_order_relaxed); }
  void ws_buffered(std::int64_t delta) { ws_buffered_.fetch_add(delta, std::memory_order_relaxed); }
  void ws_close_reason(const std::string& reason);

  // Publish quota refusals are counted by the quotas themselves (set once, at start).
  void set_quotas(const PublishQuotas* q) { quotas_ = q; }
  // The cache store's gauges (set once, at start).
  void set_cache(const CacheStore* c, const CacheStore* counters) {
    cache_ = c;
    counters_ = counters;
  }

  // Prometheus text format (version 0.0.4).
  std::string render() const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, std::uint64_t> requests_;
  std::atomic<std::int64_t> in_flight_{0};
  std::atomic<std::int64_t> connections_{0};
  std::atomic<std::int64_t> refusing_{0};
  std::atomic<std::uint64_t> bytes_in_{0};
  std::atomic<std::uint64_t> bytes_out_{0};
  std::atomic<std::uint64_t> evicted_{0}, refused_{0}, timed_out_{0}, tls_failed_{0};
  const PublishQuotas* quotas_ = nullptr;
  const CacheStore* cache_ = nullptr;
  const CacheStore* counters_ = nullptr;
  std::map<std::string, std::uint64_t> ws_closes_;  // under mu_
  std::atomic<std::int64_t> ws_open_{0};
  std::atomic<std::uint64_t> ws_frames_{0};
  std::atomic<std::int64_t> ws_buffered_{0};
};

}  // namespace sluice::http_api
