#include "sluice/catalog_rules.h"

#include <string>

namespace sluice {

Result<void> validate_stream_spec(const StreamSpec& spec) {
  if (spec.shards < 1 || spec.shards > kMaxShardsPerStream)
    return Error(Errc::invalid_argument, "shards must be between 1 and " +
                                             std::to_string(kMaxShardsPerStream) + ", got " +
                                             std::to_string(spec.shards));
  if (spec.retention.max_bytes == 0 || spec.retention.max_bytes < -1)
    return Error(Errc::invalid_argument, "retention.max_bytes must be -1 (unlimited) or positive");
  if (spec.retention.max_age_ms == 0 || spec.retention.max_age_ms < -1)
    return Error(Errc::invalid_argument, "retention.max_age_ms must be -1 (unlimited) or positive");
  return {};
}

Result<void> check_spec_supported(const StreamSpec& spec) {
  if (spec.default_ack == AckMode::quorum)
    return Error(Errc::invalid_argument,
                 "ack 'quorum' needs replication, which this build does not support yet");
  return {};
}

}  // namespace sluice
