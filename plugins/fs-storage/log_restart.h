// Starting a replica's log over at a new start offset, on disk (ShardLogImpl::restart_at;
// docs/replication.md "Below the leader's log start").
//
// A follower whose whole log lies below its leader's log start drops it and continues with
// an empty log that starts at the leader's log start, as Kafka's truncateFullyAndStartAt.
// That touches several files (every segment and index, the producer snapshot, the
// leader-epoch history), so one file is the commit point: the marker
// <log dir>/restart-at (u64 start | u32 crc32c; .tmp, fdatasync, rename, fsync of the log
// directory). The steps, in order:
//
//   1. write the marker                        <- commit point; before it, the old log stands
//   2. drop_below(start): remove every segment and index below `start`; create
//      <start>.log if no segment lies at or above it; write an empty producer snapshot at
//      `start`; fsync the log directory
//   3. clear the leader-epoch history's entries (epoch_history.h save: durable)
//   4. remove the marker; fsync the log directory
//
// A crash (power cut included) before 1 finds the old log. A crash anywhere after 1 finds
// the marker at the next open: recover_log redoes 2 (it is idempotent) before it scans,
// and the engine redoes 3 and 4 (finish_restart) before the shard is usable. So a replica
// comes back with either its old log or the empty log at `start`, never a mix, and never
// with a history that claims epochs for offsets it no longer holds. No batch is appended
// above `start` before 4 is durable, so a marker on disk always means "nothing at or above
// `start` is held yet".
//
// Errors: I/O failures are storage_failure; a marker that fails its CRC is corrupt_data
// (the open is refused: whether the old log was dropped cannot be told).
// Thread: the caller's; the shard log holds its writer token (restart_at), or the shard is
// not open yet (recovery, open).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "epoch_history.h"
#include "file_system.h"
#include "sluice/error.h"
#include "sluice/host.h"
#include "sluice/types.h"

namespace sluice::fs_storage {

inline constexpr std::string_view kRestartMarkerName = "restart-at";

// Step 1: writes <log_dir>/restart-at durably (the directory is fsynced).
Result<void> write_restart_marker(FileSystem& fs, const std::string& log_dir, Offset start);

// The marker's start, nullopt if there is none; corrupt_data if it is malformed.
Result<std::optional<Offset>> read_restart_marker(FileSystem& fs, const std::string& log_dir);

// Step 2 (see above). Idempotent.
Result<void> drop_below(FileSystem& fs, const std::string& log_dir, Offset start);

// Steps 3 and 4 at open, after recover_log redid step 2 (RecoveredLog::restarted_at).
// `history` is null for a shard that is not replicated (it has none); otherwise its
// entries are cleared and saved in `shard_dir`. `what` names the log in the warning.
Result<void> finish_restart(FileSystem& fs, PluginHost& host, const std::string& what,
                            const std::string& shard_dir, const std::string& log_dir,
                            Offset start, EpochHistory* history);

// Step 4 alone (restart_at, after it saved the history itself).
Result<void> remove_restart_marker(FileSystem& fs, const std::string& log_dir);

}  // namespace sluice::fs_storage
