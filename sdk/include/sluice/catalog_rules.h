// Catalog rules as pure functions (STYLE.md "Decisions are pure functions"). Both metadata
// backends and the host call these, so Raft and Postgres decide alike. They take state
// and return decisions; they never do I/O.
#pragma once

#include <cstdint>

#include "sluice/error.h"
#include "sluice/types.h"

namespace sluice {

inline constexpr std::uint32_t kMaxShardsPerStream = 1024;

// Structural validity, stable forever: shards 1..kMaxShardsPerStream, retention values -1
// (unlimited) or > 0. Metadata apply uses only this, because what apply accepts must never
// depend on the build that applies it (felix post-mortem, "apply reads only the entry").
Result<void> validate_stream_spec(const StreamSpec& spec);

// What this build can serve (ack quorum needs replication, which it lacks). Checked by the
// proposer and the broker, never inside apply.
Result<void> check_spec_supported(const StreamSpec& spec);

}  // namespace sluice
