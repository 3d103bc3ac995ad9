#include "node_host.h"

#include "sluice/log.h"

namespace sluice::core {

Result<void> NodeHost::adopt_cluster_id(const std::string& cluster_id) {
  const bool had = !id_.cluster_id().empty();
  auto r = id_.adopt_cluster_id(cluster_id);
  if (r && !had)
    log(LogLevel::info, "identity", "adopted cluster.id " + cluster_id + " (persisted to meta.properties)");
  return r;
}

void NodeHost::log(LogLevel level, std::string_view component, std::string_view message) {
  log_line(level, component, message);
}

}  // namespace sluice::core
