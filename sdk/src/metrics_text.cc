#include "sluice/metrics_text.h"

#include <cstdio>

namespace sluice {

std::string escape_label_value(std::string_view v) {
  std::string o;
  o.reserve(v.size());
  for (char c : v) {
    if (c == '\\' || c == '"') o.push_back('\\');
    if (c == '\n') {
      o += "\\n";
      continue;
    }
    o.push_back(c);
  }
  return o;
}

void MetricsWriter::family(std::string_view name, std::string_view help, MetricType type) {
  out_ += "# HELP ";
  out_ += name;
  out_ += ' ';
  out_ += help;
  out_ += "\n# TYPE ";
  out_ += name;
  out_ += type == MetricType::counter ? " counter\n" : " gauge\n";
}

void MetricsWriter::begin_sample(std::string_view name, const MetricLabels& labels) {
  out_ += name;
  if (!labels.empty()) {
    out_ += '{';
    bool first = true;
    for (const auto& [k, v] : labels) {
      if (!first) out_ += ',';
      first = false;
      out_ += k;
      out_ += "=\"";
      out_ += escape_label_value(v);
      out_ += '"';
    }
    out_ += '}';
  }
  out_ += ' ';
}

void MetricsWriter::sample(std::string_view name, const MetricLabels& labels, double value) {
  begin_sample(name, labels);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g\n", value);
  out_ += buf;
}

void MetricsWriter::sample(std::string_view name, const MetricLabels& labels, std::int64_t value) {
  begin_sample(name, labels);
  out_ += std::to_string(value);
  out_ += '\n';
}

void MetricsWriter::sample(std::string_view name, const MetricLabels& labels, std::uint64_t value) {
  begin_sample(name, labels);
  out_ += std::to_string(value);
  out_ += '\n';
}

void MetricsWriter::single(std::string_view name, std::string_view help, MetricType type,
                           std::uint64_t value) {
  family(name, help, type);
  sample(name, {}, value);
}

void MetricsWriter::single(std::string_view name, std::string_view help, MetricType type,
                           std::int64_t value) {
  family(name, help, type);
  sample(name, {}, value);
}

}  // namespace sluice
