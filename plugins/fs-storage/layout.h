// Where fs-storage keeps things (docs/architecture.md "Storage"). Pure functions: no I/O.
//
//   <storage.dir>/                         default <host.data_dir()>/shards
//     <tenant>/<namespace>/<stream>/       each component passed sluice::validate_name
//       3/                                 shard 3, incarnation 0 (legacy name)
//       3-00000000000000ab/                shard 3, incarnation 0xab ("%u-%016x")
//         log/
//           00000000000000000000.log       segment: SDK record batches back to back,
//           00000000000000000000.idx       named by base offset ("%020llu"); .idx only for
//           00000000000000001234.log       sealed segments (a cache, CRC-checked)
//           00000000000000001234.idx.tmp   transient while an index is written
//           producers.snapshot             idempotent-producer state at a segment boundary
//         groups/<group>/journal           one consumer group (group.h)
//         groups/<group>/dead-letters/log/ its dead-letter log (same segment format)
//         lost-copy                        this disk held the replicated shard and lost
//                                          its log (docs/replication.md "A lost shard copy")
//     .replicas/<t>/<n>/<s>/<shard>        empty file: a replicated copy was created here
//     .delete-pending/<id>.marker          an unfinished delete (engine.h, delete protocol)
//     .deleted/<id>/<t>/<n>/<s>/<shard>    moved-away incarnations, garbage to remove
//
// Everything of one shard incarnation lives under its directory, so deleting an
// incarnation is one directory move and two incarnations never share a file.
//
// Segment (.log): the exact SDK batch encoding (record_batch.h), contiguous, no padding.
// The first batch's base_offset equals the file name; offsets are contiguous within and
// across segments.
//
// Sparse index (.idx), little-endian:
//   0  u32 magic "SLIX"  4 u32 version 1  8 u64 base_offset  16 u64 log_size
//   24 u64 next_offset   32 i64 last_max_timestamp_ms          40 u32 entry_count
//   44 entries: (u32 relative_offset, u32 file_position) * entry_count
//   .. u32 crc32c of everything before it
// It is valid only if magic, version, base and CRC match and log_size equals the current
// size of the .log; otherwise it is rebuilt from the log.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "sluice/error.h"
#include "sluice/types.h"

namespace sluice::fs_storage {

// "<shard>" for incarnation 0, "<shard>-%016x" otherwise.
std::string shard_dir_name(ShardIndex shard, Incarnation incarnation);

// <root>/<tenant>/<ns>/<stream>/<shard_dir_name>. Errc::invalid_name if any component
// fails validate_name.
Result<std::string> shard_dir(const std::string& root, const ShardRef& ref);

// Inverse of shard_dir_name: "<u32 decimal>" (incarnation 0) or "<u32>-<16 lowercase hex>"
// with a non-zero incarnation. Leading zeros, other characters or lengths: nullopt.
std::optional<std::pair<ShardIndex, Incarnation>> parse_shard_dir_name(std::string_view name);

// Reserved entries directly under <storage.dir>. Every valid name starts with a letter, a
// digit or '_', so these can never collide with a tenant.
inline constexpr std::string_view kDeletedDir = ".deleted";
inline constexpr std::string_view kDeletePendingDir = ".delete-pending";
inline constexpr std::string_view kReplicasDir = ".replicas";

// Beside the shard's directories, on the same disk: <root>/.replicas/<t>/<n>/<s>/<shard dir
// name>, whose presence says this storage.dir created a copy of the replicated shard. The
// copy's log directory missing while this exists is a lost copy, not a new one.
Result<std::string> replica_mark(const std::string& root, const ShardRef& ref);
inline constexpr std::string_view kLostCopyFile = "lost-copy";

inline std::string log_dir(const std::string& shard_dir) { return shard_dir + "/log"; }

std::string segment_file_name(std::uint64_t base_offset);  // "%020llu.log"
std::string index_file_name(std::uint64_t base_offset);    // "%020llu.idx"

// Base offset from "%020llu.log" (ext ".log") or "%020llu.idx" (ext ".idx"); nullopt for
// any other name.
std::optional<std::uint64_t> parse_offset_file_name(std::string_view name, std::string_view ext);

}  // namespace sluice::fs_storage
