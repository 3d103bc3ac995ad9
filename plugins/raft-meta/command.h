// Catalog commands: what a raft-meta log entry says (ARCHITECTURE.md §4, §5).
//
// Wire format (format version 1): one JSON object per RAFT_COMMAND entry, UTF-8, e.g.
//
//   {"v":1,"op":"create_stream","level":8,"tenant":"t","ns":"n","name":"s",
//    "spec":{"shards":3,"max_bytes":-1,"max_age_ms":-1,"ack":"leader"},
//    "proposed_incarnation":0,"incarnations":false,"clock_us":1764670000000000}
//
// Every create and delete carries `proposed_incarnation` and `incarnations` from the start
// (felix post-mortem: "apply decides only from fields a new proposer writes"). A level-8
// proposer always writes 0 / false. `level` records the level the proposer wrote at; apply
// never consults the applying member's own level, build or clock.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "sluice/error.h"
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

  static Command init_cluster(std::string id);
  static Command create_tenant(std::string tenant);
  static Command delete_tenant(std::string tenant);
  static Command create_namespace(std::string tenant, std::string ns);
  static Command delete_namespace(std::string tenant, std::string ns);
  static Command create_stream(const StreamKey& key, const StreamSpec& spec, std::int64_t clock_us);
  static Command delete_stream(const StreamKey& key);
};

std::string encode_command(const Command& c);
// Fails with Errc::malformed_body for anything that is not a well-formed command of a
// known format version.
Result<Command> decode_command(std::string_view bytes);

}  // namespace sluice::raft_meta
