#include "node_host.h"

#include <signal.h>
#include <unistd.h>

#include "sluice/log.h"

namespace sluice::core {

std::string NodeHost::config_string(std::string_view key, std::string_view def) const {
  return config_.has(key) ? config_.get_string(key, def) : std::string(def);
}

std::int64_t NodeHost::config_int(std::string_view key, std::int64_t def) const {
  return config_.has(key) ? config_.get_int(key, def) : def;
}

bool NodeHost::config_bool(std::string_view key, bool def) const {
  return config_.has(key) ? config_.get_bool(key, def) : def;
}

Result<void> NodeHost::adopt_cluster_id(const std::string& cluster_id) {
  const bool had = !id_.cluster_id().empty();
  auto r = id_.adopt_cluster_id(cluster_id);
  if (r && !had)
    log(LogLevel::info, "identity", "adopted cluster.id " + cluster_id + " (persisted to meta.properties)");
  return r;
}

// Lines below log.level are dropped (log_line checks the threshold).
void NodeHost::stop_node(std::string_view reason) {
  log_line(LogLevel::error, "sluiced", "stopping: " + std::string(reason));
  if (!stop_requested_.exchange(true)) ::kill(::getpid(), SIGTERM);
}

void NodeHost::log(LogLevel level, std::string_view component, std::string_view message) {
  if (!log_enabled(level)) return;
  log_line(level, component, message);
}

}  // namespace sluice::core
