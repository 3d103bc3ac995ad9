#include "metrics.h"

namespace sluice::http_api {

void HttpMetrics::request_done(const std::string& route, int status) {
  std::lock_guard lk(mu_);
  ++requests_[{route, status}];
}

namespace {
// Label values: escape backslash, double quote and newline (Prometheus text format).
std::string label(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '\\' || c == '"') o.push_back('\\');
    if (c == '\n') { o += "\\n"; continue; }
    o.push_back(c);
  }
  return o;
}
}  // namespace

std::string HttpMetrics::render() const {
  std::string o;
  o += "# HELP sluice_http_requests_total HTTP requests answered, by route and status.\n";
  o += "# TYPE sluice_http_requests_total counter\n";
  {
    std::lock_guard lk(mu_);
    for (auto& [k, n] : requests_)
      o += "sluice_http_requests_total{route=\"" + label(k.first) + "\",status=\"" +
           std::to_string(k.second) + "\"} " + std::to_string(n) + "\n";
  }
  o += "# HELP sluice_http_requests_in_flight HTTP requests being served.\n";
  o += "# TYPE sluice_http_requests_in_flight gauge\n";
  o += "sluice_http_requests_in_flight " + std::to_string(in_flight_.load()) + "\n";
  o += "# HELP sluice_http_connections Open HTTP connections.\n";
  o += "# TYPE sluice_http_connections gauge\n";
  o += "sluice_http_connections " + std::to_string(connections_.load()) + "\n";
  o += "# HELP sluice_http_received_bytes_total Request bytes read (headers and body).\n";
  o += "# TYPE sluice_http_received_bytes_total counter\n";
  o += "sluice_http_received_bytes_total " + std::to_string(bytes_in_.load()) + "\n";
  o += "# HELP sluice_http_sent_bytes_total Response bytes written (headers and body).\n";
  o += "# TYPE sluice_http_sent_bytes_total counter\n";
  o += "sluice_http_sent_bytes_total " + std::to_string(bytes_out_.load()) + "\n";
  return o;
}

}  // namespace sluice::http_api
