// core/latency_histogram.h: buckets, cumulative rendering, sum and count.
#include "latency_histogram.h"

#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <string>

namespace sluice::core {
namespace {

using namespace std::chrono_literals;

// "name{labels} value" lines of one family, keyed by everything before the value.
std::map<std::string, double> samples(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const auto sp = line.rfind(' ');
    out[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
  }
  return out;
}

TEST(LatencyHistogram, CountsEachObservationInItsBucketCumulatively) {
  LatencyHistogram h;
  h.observe(50us);    // <= 0.0001
  h.observe(100us);   // exactly on the first bound: counted in it (le is inclusive)
  h.observe(3ms);     // <= 0.005
  h.observe(20s);     // above every bound: only +Inf
  MetricsWriter w;
  LatencyHistogram::family(w, "x_seconds", "help text");
  h.render(w, "x_seconds", {{"ack", "leader"}});
  const std::string text = std::move(w).str();
  EXPECT_NE(text.find("# TYPE x_seconds histogram\n"), std::string::npos) << text;
  auto s = samples(text);
  EXPECT_EQ(s.at(R"(x_seconds_bucket{ack="leader",le="0.0001"})"), 2);
  EXPECT_EQ(s.at(R"(x_seconds_bucket{ack="leader",le="0.0025"})"), 2);
  EXPECT_EQ(s.at(R"(x_seconds_bucket{ack="leader",le="0.005"})"), 3);
  EXPECT_EQ(s.at(R"(x_seconds_bucket{ack="leader",le="10"})"), 3);
  EXPECT_EQ(s.at(R"(x_seconds_bucket{ack="leader",le="+Inf"})"), 4);
  EXPECT_EQ(s.at(R"(x_seconds_count{ack="leader"})"), 4);
  EXPECT_NEAR(s.at(R"(x_seconds_sum{ack="leader"})"), 20.00315, 1e-6);
  // Buckets never decrease, and +Inf is the last one.
  double prev = 0;
  std::size_t buckets = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("x_seconds_bucket", 0) == 0) {
      const double v = std::stod(line.substr(line.rfind(' ') + 1));
      EXPECT_GE(v, prev) << line;
      prev = v;
      ++buckets;
    }
  EXPECT_EQ(buckets, LatencyHistogram::kBounds.size() + 1);
}

TEST(LatencyHistogram, AnEmptyHistogramRendersZeros) {
  LatencyHistogram h;
  MetricsWriter w;
  h.render(w, "y_seconds", {});
  auto s = samples(std::move(w).str());
  EXPECT_EQ(s.at(R"(y_seconds_bucket{le="+Inf"})"), 0);
  EXPECT_EQ(s.at("y_seconds_count"), 0);
  EXPECT_EQ(s.at("y_seconds_sum"), 0);
}

}  // namespace
}  // namespace sluice::core
