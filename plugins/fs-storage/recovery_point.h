// The per-log recovery point and the engine's clean-shutdown marker (docs/architecture.md
// "Restart: recovery point and clean-shutdown marker").
//
//   <log dir>/recovery-point   (48 bytes, little-endian)
//     0 u32 magic "SLRP"  4 u32 version 1  8 u64 segment base  16 u64 position
//     24 u64 next_offset  32 i64 max_ts    40 u32 reserved end / 4096 (0: none)
//     44 u32 crc32c of bytes [0, 44)
//   Claim: every segment below `segment base` is whole and was fdatasync'ed, and bytes
//   [0, position) of segment `segment base` are whole batches that were fdatasync'ed,
//   ending at offset next_offset (max_ts: the running max over them). It never claims more
//   than was synced: the writer takes the published (post-fdatasync) fields, and every cut
//   below it (truncate_to, restart_at, repair) removes it durably first.
//   Reserved end (a preallocated segment only): nothing was ever written into segment
//   `segment base` at or beyond that byte since it was a spare of zeros, so recovery after
//   a crash checks its zeros only that far (docs/architecture.md "Preallocated segments").
//   The writer makes a point naming a larger one durable, directory included, before it
//   writes beyond it. A build before it wrote 0 there and ignores it (a whole read), and
//   since a point left by such a build (or by a run that kept no points) may claim a
//   reserved end that writes went past, recovery takes batches ending exactly there as
//   the end only if the page there is zeros, and removes a point whose reservation it did
//   not keep (docs/upgrades.md "A broker's data directory across builds").
//   Written as .tmp + fdatasync + rename, without a directory fsync: a power cut leaves the
//   new point, the previous one or none, and each claims only synced bytes.
//
//   <storage.dir>/.clean-shutdown   (empty)
//   Written by shutdown() after every shard closed cleanly (its segment synced, then its
//   active segment's .idx, producer snapshot and recovery point at the log end written and
//   the log directory fsynced), then <storage.dir> is fsynced. Taken (removed, then
//   <storage.dir> fsynced) by the engine's constructor before anything is written, so a
//   crash after a restart never finds a stale marker.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "file_system.h"
#include "segment.h"
#include "sluice/error.h"

namespace sluice::fs_storage {

inline constexpr std::string_view kRecoveryPointName = "recovery-point";
inline constexpr std::string_view kCleanShutdownName = ".clean-shutdown";
// <storage.dir>/.corrupt: background verification found a corrupt batch; its content is the
// message. A start refuses while it is there, unless storage.repair (docs/architecture.md
// "Restart: background verification").
inline constexpr std::string_view kCorruptMarkerName = ".corrupt";

struct RecoveryPoint {
  std::uint64_t segment_base = 0;
  std::uint64_t position = 0;
  std::uint64_t next_offset = 0;
  std::int64_t max_ts = kNoTimestamp;
  std::uint64_t reserved_end = 0;  // a multiple of 4096; 0: no claim (see above)
};

std::string encode_recovery_point(const RecoveryPoint& rp);
// nullopt unless the bytes are exactly one well-formed record (size, magic, version, CRC).
std::optional<RecoveryPoint> decode_recovery_point(std::string_view bytes);

// `durable`: the log directory is fsynced after the rename too, so a power cut cannot bring
// back an older point (a reservation needs that; a periodic point does not).
Result<void> write_recovery_point(FileSystem& fs, const std::string& log_dir, const RecoveryPoint& rp,
                                  bool durable = false);
// The point on disk, if any and well-formed (a torn or corrupt file reads as none).
std::optional<RecoveryPoint> read_recovery_point(FileSystem& fs, const std::string& log_dir);
// Removes it durably (remove + fsync of the log directory): before any cut of the log.
Result<void> remove_recovery_point(FileSystem& fs, const std::string& log_dir);

// Whether <root>/.clean-shutdown was there; it is removed durably either way.
Result<bool> take_clean_marker(FileSystem& fs, const std::string& root);
Result<void> write_clean_marker(FileSystem& fs, const std::string& root);

struct CorruptMarker {
  std::string log_dir;  // the log that holds the corrupt batch
  std::string message;  // "corrupt batch in <file> at byte <pos>: <reason>"
};
// Durably (.tmp + fdatasync + rename + fsync of `root`): "<log dir>\n<message>".
Result<void> write_corrupt_marker(FileSystem& fs, const std::string& root, const CorruptMarker& m);
// The marker, or nullopt when there is none.
Result<std::optional<CorruptMarker>> read_corrupt_marker(FileSystem& fs, const std::string& root);
Result<void> remove_corrupt_marker(FileSystem& fs, const std::string& root);  // durably

}  // namespace sluice::fs_storage
