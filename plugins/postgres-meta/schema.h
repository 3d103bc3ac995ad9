// The postgres-meta schema: versioned migrations (README.md "Schema and migrations").
#pragma once

#include <string_view>
#include <vector>

namespace sluice::postgres_meta {

// The schema version this build knows. A database at a higher version is refused at start,
// unless every migration above this version says older binaries may use the schema it
// leaves (sluice_schema_version.older_binaries_ok): then an older binary still starts
// mid-upgrade, or after a rollback.
inline constexpr int kSchemaVersion = 7;

struct Migration {
  int version;
  std::string_view description;
  std::string_view sql;  // runs with search_path = the configured schema
  // Whether a binary that knows only the versions below this one may run on the schema this
  // migration leaves. True only for a purely additive migration: new tables, new nullable
  // or defaulted columns, new functions. An older binary then neither reads nor writes the
  // new parts, so everything it writes must stay valid without them (a new rule it does
  // not know belongs in a trigger, which binds it too). Recorded in the row it inserts;
  // binaries from before this column treat every newer version as incompatible.
  bool older_binaries_ok = false;
};

// Every migration, in version order (1..kSchemaVersion).
const std::vector<Migration>& migrations();

// Guards: triggers that tighten a rule without changing the schema's shape. Not versioned:
// every build that has one installs it at start if its trigger is missing (so an older
// binary, which refuses a schema version above its own, still starts mid-upgrade).
struct Guard {
  std::string_view trigger;  // the trigger's name: present means installed
  std::string_view description;
  std::string_view sql;
};
const std::vector<Guard>& guards();

// SQLSTATEs raised by the rules inside the database (migrations 2 and 3 for streams,
// migration 6 for caches: SL005..SL008 are SL001..SL004 under cache_incarnations).
inline constexpr std::string_view kStateOldInstanceCreate = "SL001";   // pre-incarnation create
inline constexpr std::string_view kStateIncarnationRepeat = "SL002";   // not above the tombstone
inline constexpr std::string_view kStateOldInstanceDelete = "SL003";   // pre-incarnation delete (v3: any, once finalized)
inline constexpr std::string_view kStateTombstoneKept = "SL004";       // tombstones are forever
inline constexpr std::string_view kStateOldInstanceCacheCreate = "SL005";  // pre-level-14 cache create
inline constexpr std::string_view kStateCacheIncarnationRepeat = "SL006";  // not above the cache tombstone
inline constexpr std::string_view kStateOldInstanceCacheDelete = "SL007";  // pre-level-14 cache delete
inline constexpr std::string_view kStateCacheTombstoneKept = "SL008";      // cache tombstones are forever
// Migration 7 (level 18, counters): SL009..SL012 are SL005..SL008 for counters.
inline constexpr std::string_view kStateOldInstanceCounterCreate = "SL009";  // counter create below 18 / not finalized
inline constexpr std::string_view kStateCounterIncarnationRepeat = "SL010";  // not above the counter tombstone
inline constexpr std::string_view kStateOldInstanceCounterDelete = "SL011";  // counter delete below level 18
inline constexpr std::string_view kStateCounterTombstoneKept = "SL012";      // counter tombstones are forever
// Guard brokers_heartbeat_guard: a heartbeat of a broker lacking a finalized feature.
inline constexpr std::string_view kStateBrokerLacksFeature = "SL013";

}  // namespace sluice::postgres_meta
