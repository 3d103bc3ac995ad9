// Metadata levels and fleet feature names: the constants that each new behaviour adds
// (docs/metadata-levels.md, docs/upgrades.md). They live apart from types.h and features.h so
// that adding a level or a feature rebuilds only the code that uses them (a change here
// used to touch nearly every object of both build trees). features.h includes this header.
#pragma once

#include <string_view>

#include "sluice/types.h"

namespace sluice {

// The metadata level this build implements (docs/metadata-levels.md). Level 8 is the
// baseline (streams, caches, tenants, namespaces, fleet features; no incarnations); level
// 10 lets `stream_incarnations` be finalized; level 14 adds `cache_incarnations` and the
// per-entry `incarnations` flag; level 16 adds `replicated_shards`; level 17 adds
// `shard_reassignment`; level 18 adds `counters`; level 19 adds batch entries (raft-meta).
// A member may run lower (`metadata.level`).
inline constexpr MetadataLevel kBuildMetadataLevel{19};
inline constexpr MetadataLevel kLowestMetadataLevel{8};
// The level that lets `stream_incarnations` be finalized.
inline constexpr MetadataLevel kStreamIncarnationsLevel{10};
// The level of `cache_incarnations` and of the per-entry `incarnations` flag: a proposer
// flags an entry only when every member is at this level, and the first flagged entry
// raises the group's level floor to it.
inline constexpr MetadataLevel kFlaggedEntriesLevel{14};
// The level of replicated shards (docs/metadata-levels.md): stream specs with a
// replication factor above 1 and shard-state compare-and-set entries.
inline constexpr MetadataLevel kReplicatedShardsLevel{16};
// The level of shard reassignment (docs/metadata-levels.md): shard compare-and-sets that
// change a shard's replica list (ShardUpdate::replicas).
inline constexpr MetadataLevel kShardReassignmentLevel{17};
// The level of counters (docs/metadata-levels.md): create_counter / delete_counter entries.
// A member below it holds at the first one; proposals need every member at 18.
inline constexpr MetadataLevel kCountersLevel{18};
// The level of batch entries (docs/metadata-levels.md): one raft-meta entry carrying several
// commands, each applied as it would be alone. A member below it holds at the first one; a
// proposer batches only while every member is at 19, and the first batch applied raises the
// group's level floor to 19. No fleet feature: brokers never see entries, only their changes.
inline constexpr MetadataLevel kBatchedEntriesLevel{19};

// --- fleet feature names (features.h: the rules; features.cc: known_features()) ---------

inline constexpr std::string_view kStreamIncarnations = "stream_incarnations";
inline constexpr std::string_view kCacheIncarnations = "cache_incarnations";
// Stream specs with replication_factor > 1 and update_shard (metadata level 16,
// docs/replication.md). Until it is finalized, creates refuse replication factors above 1.
inline constexpr std::string_view kReplicatedShards = "replicated_shards";
// Shard compare-and-sets that change a shard's replica list: reassignment and broker
// drains (metadata level 17, docs/replication.md "Reassignment"). Every serving broker must
// report it, because a broker's storage has to follow a replica list that changes.
inline constexpr std::string_view kShardReassignment = "shard_reassignment";
// Counters (metadata level 18, docs/api.md "Counters"): create_counter/delete_counter
// entries. Until it is finalized, counter creates are refused. Every serving broker must
// report it: a broker that lacks it cannot serve a counter's keys.
inline constexpr std::string_view kCounters = "counters";
// Background compaction of cache and counter backing streams (docs/architecture.md "Cache
// compaction"): restate records and trimmed log starts. A broker compacts only once it is
// finalized: an older broker would not understand restate records. No catalog change.
inline constexpr std::string_view kCacheCompaction = "cache_compaction";
// A replicated shard copy that was lost (docs/replication.md "A lost shard copy") says so in
// its fetches, and its leader adds it back to the in-sync set only once it no longer does:
// once it holds what its leader held when it began to fetch. No catalog change. Every
// serving broker must report it, since a leader of an older build refuses the longer fetch.
inline constexpr std::string_view kLostCopyFetch = "lost_copy_fetch";

}  // namespace sluice
