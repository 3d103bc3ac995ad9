// Catalog rules as pure functions (STYLE.md "Decisions are pure functions"). Both metadata
// backends and the host call these, so Raft and Postgres decide alike. They take state
// and return decisions; they never do I/O.
#pragma once

#include <cstdint>

#include "sluice/error.h"
#include "sluice/types.h"

namespace sluice {

inline constexpr std::uint32_t kMaxShardsPerStream = 1024;

// Shards 1..kMaxShardsPerStream; retention values -1 (unlimited) or > 0; ack none|leader
// (quorum needs replication, which this build does not have).
Result<void> validate_stream_spec(const StreamSpec& spec);

}  // namespace sluice
