// Per-tenant publish quotas (quota.publish_bytes_per_s, README "Limits"): a token bucket of
// request-body bytes per tenant on this broker, refilled at the rate and holding at most one
// second's worth. A request is admitted while the bucket is not empty and then charged in
// full (the bucket may go into debt, so a body larger than a second's worth still passes, and
// the average stays at the rate); otherwise it is answered 429 with the seconds until the
// debt is paid. Off (no lock taken) when the rate is 0.
//
// Thread-safety: all methods from any thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <string>
#include <iterator>
#include <unordered_map>

namespace sluice::http_api {

class PublishQuotas {
 public:
  explicit PublishQuotas(std::uint64_t bytes_per_s) : rate_(static_cast<double>(bytes_per_s)) {}

  bool enabled() const { return rate_ > 0; }
  std::uint64_t rate() const { return static_cast<std::uint64_t>(rate_); }
  std::uint64_t rejections() const { return rejections_.load(std::memory_order_relaxed); }
  std::size_t tracked() {
    std::lock_guard lk(mu_);
    return buckets_.size();
  }

  // 0: admitted and charged. Otherwise: refused, retry after this many seconds (>= 1).
  std::uint32_t charge(const std::string& tenant, std::size_t bytes,
                       std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now()) {
    if (!enabled()) return 0;
    std::lock_guard lk(mu_);
    auto it = buckets_.find(tenant);
    if (it == buckets_.end()) {
      // Names that are not tenants reach here too: keep only buckets that differ from a new
      // one (in debt or partly spent), so the map cannot grow without bound.
      if (buckets_.size() >= kPruneAbove) prune(now);
      it = buckets_.emplace(tenant, Bucket{rate_, now}).first;
    }
    Bucket& b = it->second;
    refill(b, now);
    if (b.tokens <= 0) {
      rejections_.fetch_add(1, std::memory_order_relaxed);
      const double wait = -b.tokens / rate_;
      return static_cast<std::uint32_t>(std::max(1.0, std::ceil(wait)));
    }
    b.tokens -= static_cast<double>(bytes);
    return 0;
  }

 private:
  struct Bucket {
    double tokens;
    std::chrono::steady_clock::time_point at;
  };
  static constexpr std::size_t kPruneAbove = 4096;

  void refill(Bucket& b, std::chrono::steady_clock::time_point now) const {
    const double dt = std::chrono::duration<double>(now - b.at).count();
    if (dt > 0) b.tokens = std::min(rate_, b.tokens + dt * rate_);
    b.at = now;
  }
  void prune(std::chrono::steady_clock::time_point now) {
    for (auto it = buckets_.begin(); it != buckets_.end();) {
      refill(it->second, now);
      it = it->second.tokens >= rate_ ? buckets_.erase(it) : std::next(it);
    }
  }

  const double rate_;
  std::mutex mu_;
  std::unordered_map<std::string, Bucket> buckets_;
  std::atomic<std::uint64_t> rejections_{0};
};

}  // namespace sluice::http_api
