// Catalog commands: what a raft-meta log entry says (docs/metadata-levels.md; docs/architecture.md "Metadata").
//
// Wire format (format version 1): one JSON object per RAFT_COMMAND entry, UTF-8, e.g.
//
//   {"v":1,"op":"create_stream","level":8,"tenant":"t","ns":"n","name":"s",
//    "spec":{"shards":3,"max_bytes":-1,"max_age_ms":-1,"ack":"leader"},
//    "proposed_incarnation":0,"incarnations":false,"clock_us":1764670000000000,
//    "placement":[{"leader":1,"replicas":[1]},{"leader":2,"replicas":[2]},{"leader":0,"replicas":[]}]}
//
// Additions for level 10 (still format version 1: new fields are optional with defaults,
// new ops are new `op` values that older entries never carry):
//   init_cluster      "finalize_features":[names]           (default [])
//   create_stream     "placement":[{"leader","replicas"}]   (default: every shard unassigned)
//   register_broker   "broker":{"id","address","directory_id","version","features":[..]}
//   unregister_broker "broker_id"
//   finalize_feature  "feature"
//   create_cache      "tenant","ns","name","spec":{"default_ttl_ms"},"clock_us",
//                     "proposed_incarnation","incarnations"
//   delete_cache      "tenant","ns","name","proposed_incarnation","incarnations"
//   join_member       "member":{"id","raft_address","rpc_address","level"}
//   leave_member      "member_id"
//
// Additions for level 16 (replicated shards; still format version 1):
//   create_stream     "spec" gains "replication_factor","min_insync" (written only above 1),
//                     and each placement entry lists replication_factor replicas, the
//                     leader first
//   update_shard      "update":{"key","shard","incarnation","expected_version","leader",
//                     "leader_epoch","in_sync":[{"broker","directory_id"}]}
// A member below level 16 holds at either (an older build knows neither the op nor the
// spec fields, and would decide them differently); apply refuses them (conflict) while a
// recorded member is below 16 or `replicated_shards` is not finalized, and the first one
// applied raises the group's level floor to 16.
//
// Addition for level 17 (reassignment; still format version 1):
//   reassign_shard    "update": as update_shard, plus "replicas":[ids] and
//                     "target_replicas":[ids] (docs/replication.md "Reassignment")
// A member below level 17 holds at it (an older build does not know the op, so it can
// never apply the in-sync part without the replica list); apply refuses it (conflict)
// while a recorded member is below 17 or `shard_reassignment` is not finalized, and the
// first one applied raises the group's level floor to 17.
//
// Addition for level 18 (counters; still format version 1):
//   create_counter    "tenant","ns","name","proposed_incarnation","clock_us"
//   delete_counter    "tenant","ns","name"
// A member below level 18 holds at either (an older build does not know the op); apply
// refuses them (conflict) while a recorded member is below 18 or `counters` is not
// finalized, and the first one applied raises the group's level floor to 18. A counter's
// incarnation is always max(proposed, tombstone + 1) and every delete leaves a tombstone
// (counters have no legacy, unincarnated past: docs/metadata-levels.md).
//
// Addition for level 19 (batch entries; still format version 1):
//   batch             "entries":[command objects]  (1..kMaxBatchCommands, each a command
//                     as it would be written alone, its own "v", "op" and "level")
// One entry, several commands: apply gives each its own change sequence (consecutive,
// docs/metadata-levels.md "Batch entries") and applies it in its own savepoint exactly as
// it would be alone, with its own result. A member below level 19 holds at it (a level-18
// build does not know the op); apply refuses the whole batch (conflict, nothing applied)
// while a recorded member is below 19, and the first batch applied raises the group's level
// floor to 19. A batch never nests, and never carries a command that changes the group
// itself (init_cluster, join_member, leave_member, register_broker, unregister_broker,
// finalize_feature: refused inside a batch, invalid_argument): the proposer batches only
// the catalog's name operations and shard updates (is_batchable).
//
// Every create and delete carries `proposed_incarnation` and `incarnations` from the start
// (felix post-mortem: "apply decides only from fields a new proposer writes"). A level-8
// proposer always writes 0 / false. `level` records the level the proposer wrote at; apply
// never consults the applying member's own level, build or clock.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/error.h"
#include "sluice/levels.h"
#include "sluice/metadata.h"
#include "sluice/types.h"

namespace sluice::raft_meta {

inline constexpr std::uint32_t kCommandFormatVersion = 1;

enum class CommandType {
  init_cluster,
  create_tenant,
  delete_tenant,
  create_namespace,
  delete_namespace,
  create_stream,
  delete_stream,
  // Level 8 fleet ops (added to format version 1; older entries never carry them).
  register_broker,
  unregister_broker,
  finalize_feature,
  // Caches (baseline, level 8): decided like streams, under `cache_incarnations`.
  create_cache,
  delete_cache,
  // Metadata members (baseline): the replicated record of each voter's addresses and
  // level, from which every proposer computes the group level.
  join_member,
  leave_member,
  // Level 16: the compare-and-set of one shard's replica state (MetadataStore::update_shard).
  update_shard,
  // Level 17: an update_shard that also changes the replica list (reassignment).
  reassign_shard,
  // Level 18: counters (fleet feature `counters`).
  create_counter,
  delete_counter,
};
std::string_view to_string(CommandType);

// Whether an entry is decided with the incarnation rules (level 14+) or the legacy ones.
// A level-8 proposer always writes `legacy`.
enum class IncarnationRule : bool { legacy = false, flagged = true };

struct Command {
  CommandType type = CommandType::init_cluster;
  std::uint32_t level = kBuildMetadataLevel.value();  // level the proposer wrote at
  std::string cluster_id;                             // init_cluster
  std::string tenant;                                 // every op but init_cluster
  std::string ns;                                     // namespace and stream ops
  std::string name;                                   // stream ops
  StreamSpec spec;                                    // create_stream
  std::uint64_t proposed_incarnation = 0;             // create/delete; 0 at level 8
  IncarnationRule incarnations = IncarnationRule::legacy;  // create/delete
  std::int64_t clock_us = 0;                          // proposer's clock (create_stream)
  // create_stream: one entry per shard, chosen by the proposer. Optional: an entry without
  // it (older proposers) assigns every shard to node 0 ("unassigned").
  struct ShardPlacement {
    std::uint32_t leader = 0;              // 0 = unassigned
    std::vector<std::uint32_t> replicas;   // includes the leader when assigned
    bool operator==(const ShardPlacement&) const = default;
  };
  std::vector<ShardPlacement> placement;
  std::vector<std::string> finalize_features;  // init_cluster; optional, default empty
  BrokerRegistration broker{};                 // register_broker (broker.id: unregister_broker)
  std::string feature;                         // finalize_feature
  CacheSpec cache_spec;                        // create_cache
  JoinRequest member{};                        // join_member (member.id: leave_member)
  ShardUpdate shard_update{};                  // update_shard

  static Command init_cluster(std::string id);
  static Command create_tenant(std::string tenant);
  static Command delete_tenant(std::string tenant);
  static Command create_namespace(std::string tenant, std::string ns);
  static Command delete_namespace(std::string tenant, std::string ns);
  static Command create_stream(const StreamKey& key, const StreamSpec& spec, std::int64_t clock_us);
  static Command delete_stream(const StreamKey& key);
  static Command register_broker(const BrokerRegistration& reg);
  static Command unregister_broker(NodeId id);
  static Command finalize_feature(std::string name);
  static Command create_cache(const StreamKey& key, const CacheSpec& spec, std::int64_t clock_us);
  static Command delete_cache(const StreamKey& key);
  static Command join_member(const JoinRequest& req);
  static Command leave_member(NodeId id);
  static Command update_shard(const ShardUpdate& u);
  static Command create_counter(const StreamKey& key, std::int64_t clock_us);
  static Command delete_counter(const StreamKey& key);

  bool is_create() const { return type == CommandType::create_stream || type == CommandType::create_cache; }
  bool is_delete() const { return type == CommandType::delete_stream || type == CommandType::delete_cache; }
};

std::string encode_command(const Command& c);

// Level 19: the commands a proposer may put in a batch entry (names and shard updates;
// never one that changes the group's members, brokers or features). Also what
// CatalogFsm::touches_fleet takes as leaving a proposer's view alone.
bool is_batchable(CommandType t);
// Bounds of one batch entry (the proposer's; apply accepts up to kMaxBatchCommands).
inline constexpr std::size_t kMaxBatchCommands = 64;
inline constexpr std::size_t kMaxBatchBytes = 256 * 1024;
// A batch entry from already encoded commands (each an encode_command() result).
std::string encode_batch(const std::vector<std::string>& encoded, std::uint32_t level);

// One committed entry as apply sees it, from a single parse: a command this build knows,
// a well-formed command of a newer build (`newer`: it must hold the member), something
// malformed (`error`: rejected alike by every build), or a batch of such entries.
struct DecodedEntry {
  std::optional<Command> command;
  bool newer = false;
  std::optional<Error> error;
  bool batch = false;                // level 19; `inner` holds its entries, `level` its writer's
  std::uint32_t level = 0;
  std::vector<DecodedEntry> inner;
};
DecodedEntry decode_entry(std::string_view bytes);
// Fails with Errc::malformed_body for anything that is not a well-formed command of a
// known format version.
Result<Command> decode_command(std::string_view bytes);

// True if `bytes` is a well-formed command object written by a newer build: a newer format
// version or an op this build does not know. Such an entry must hold the member, never be
// skipped (skipping it would decide it differently from the builds that know it).
bool needs_newer_build(std::string_view bytes);

}  // namespace sluice::raft_meta
