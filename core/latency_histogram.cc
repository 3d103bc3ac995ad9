#include "latency_histogram.h"

#include <algorithm>
#include <cstdio>
#include <string>

namespace sluice::core {

void LatencyHistogram::observe(std::chrono::steady_clock::duration d) {
  const auto ns = std::max<std::int64_t>(0, std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
  const double s = static_cast<double>(ns) / 1e9;
  const auto i = static_cast<std::size_t>(std::lower_bound(kBounds.begin(), kBounds.end(), s) - kBounds.begin());
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(static_cast<std::uint64_t>(ns), std::memory_order_relaxed);
}

void LatencyHistogram::family(MetricsWriter& w, std::string_view name, std::string_view help) {
  std::string head = "# HELP ";
  head.append(name).append(" ").append(help).append("\n# TYPE ").append(name).append(" histogram\n");
  w.append_raw(head);
}

void LatencyHistogram::render(MetricsWriter& w, std::string_view name, const MetricLabels& labels) const {
  const std::string bucket = std::string(name) + "_bucket";
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i <= kBounds.size(); ++i) {
    cumulative += buckets_[i].load(std::memory_order_relaxed);
    MetricLabels l = labels;
    char le[32];
    if (i < kBounds.size())
      std::snprintf(le, sizeof le, "%g", kBounds[i]);
    else
      std::snprintf(le, sizeof le, "+Inf");
    l.push_back({"le", le});
    w.sample(bucket, l, cumulative);
  }
  w.sample(std::string(name) + "_sum", labels, static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) / 1e9);
  // count = the +Inf bucket as read above, so the two always agree within one scrape.
  w.sample(std::string(name) + "_count", labels, cumulative);
}

}  // namespace sluice::core
