// A Prometheus histogram of durations with fixed buckets (docs/operations.md "Metrics").
// observe() is lock-free: one relaxed atomic increment for the bucket and one for the
// sum, so it sits on per-request paths; render() reads the counters without
// stopping writers (a scrape may see a count one observation ahead of the sum, as with any
// Prometheus client library's lock-free histogram).
//
// Thread-safety: observe() and render() from any threads.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string_view>

#include "sluice/metrics_text.h"

namespace sluice::core {

class LatencyHistogram {
 public:
  // Upper bounds in seconds: 100 µs (a page-cache ack) to 10 s (a quorum timeout).
  static constexpr std::array<double, 15> kBounds = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                     0.05,   0.1,     0.25,   0.5,   1,      2.5,   10};

  void observe(std::chrono::steady_clock::duration d);

  // The family's HELP/TYPE lines; then one render() per label set.
  static void family(MetricsWriter& w, std::string_view name, std::string_view help);
  // name_bucket{labels, le} (cumulative, +Inf last), name_sum, name_count.
  void render(MetricsWriter& w, std::string_view name, const MetricLabels& labels) const;

 private:
  std::array<std::atomic<std::uint64_t>, kBounds.size() + 1> buckets_{};  // last: above every bound
  std::atomic<std::uint64_t> sum_ns_{0};
};

}  // namespace sluice::core
