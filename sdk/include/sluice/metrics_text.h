// One writer for the Prometheus text exposition format (version 0.0.4), used by the host
// and every plugin that contributes to GET /metrics, so escaping and the HELP/TYPE lines
// are written in one place.
//
//   MetricsWriter w;
//   w.family("sluice_shard_high_watermark", "Next offset ...", MetricType::gauge);
//   w.sample("sluice_shard_high_watermark", {{"stream", "orders"}, {"shard", "0"}}, 42);
//   std::string text = std::move(w).str();
//
// Samples of one family must follow its family() line; the writer does not reorder.
// Thread-safety: one writer per thread.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice {

enum class MetricType { counter, gauge };

// A label value escaped for the text format: backslash, double quote and newline.
std::string escape_label_value(std::string_view v);

using MetricLabels = std::vector<std::pair<std::string_view, std::string>>;

class MetricsWriter {
 public:
  // "# HELP name help" and "# TYPE name type".
  void family(std::string_view name, std::string_view help, MetricType type);
  void sample(std::string_view name, const MetricLabels& labels, double value);
  void sample(std::string_view name, const MetricLabels& labels, std::int64_t value);
  void sample(std::string_view name, const MetricLabels& labels, std::uint64_t value);
  // A family with one unlabelled sample.
  void single(std::string_view name, std::string_view help, MetricType type, std::uint64_t value);
  void single(std::string_view name, std::string_view help, MetricType type, std::int64_t value);
  // Text already in the format (another component's render()).
  void append_raw(std::string_view text) { out_ += text; }

  const std::string& str() const& { return out_; }
  std::string str() && { return std::move(out_); }

 private:
  void begin_sample(std::string_view name, const MetricLabels& labels);
  std::string out_;
};

}  // namespace sluice
