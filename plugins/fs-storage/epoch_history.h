// The leader-epoch history of one replicated shard incarnation (docs/replication.md
// "Persistent fencing"; KIP-101 / KIP-279).
//
// It holds the current epoch (the highest epoch this replica has acted in: led, followed,
// or been fenced by), the last epoch it led in (so a restarted leader may lead its own
// epoch again, and a replica fenced by or following that epoch may not), and the entries epoch -> start offset of the first batch written in
// that epoch, ascending in both. A batch's epoch is the epoch of the last entry whose start
// offset is <= the batch's base offset: the SDK batch header has no epoch field, so the
// history is the only record of it (and read_raw never hands out a chunk that crosses an
// entry boundary, so one epoch describes a whole chunk).
//
// File <shard dir>/leader-epochs, little-endian:
//   0  u32 magic "SLEH"   4 u32 version 1   8 u64 current epoch   16 u64 led epoch
//   24 u32 entry_count    28 entries: (u64 epoch, u64 start_offset) * entry_count
//   .. u32 crc32c of everything before it
// save() writes <file>.tmp, fdatasyncs it, renames it over the file and fsyncs the shard
// directory, so after a power cut the file holds either the old or the new history, and a
// new file exists only once its directory entry is durable. The caller saves BEFORE it
// acts in a new epoch or writes a batch of a new epoch.
//
// Errors: load() of a malformed file is Errc::corrupt_data naming the file (a replica that
// cannot tell which epochs it has acted in must not serve); I/O errors are storage_failure.
//
// Thread-safety: none. ShardLogImpl serializes writers (its replica mutex) and guards the
// in-memory copy readers look at with its own mutex.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "file_system.h"
#include "sluice/error.h"
#include "sluice/types.h"

namespace sluice::fs_storage {

inline constexpr std::string_view kEpochHistoryName = "leader-epochs";

struct EpochEntry {
  LeaderEpoch epoch;
  Offset start_offset;  // base offset of the first batch written in `epoch`
  bool operator==(const EpochEntry&) const = default;
};

// KIP-279's answer: the end of the largest epoch <= the requested one.
struct EpochEnd {
  LeaderEpoch epoch;  // that epoch (the requested one if it is below every entry; 0 if empty)
  Offset end;         // start offset of the next higher entry, or the log end
};

// The high-watermark checkpoint <shard dir>/high-watermark (u64 offset | u32 crc32c),
// written when a replicated shard closes: a lower bound of what was committed, so a
// reopened replica can serve it again at once (capped at its recovered log end). It is
// only a hint: .tmp + fdatasync + rename, no directory fsync (an old or missing checkpoint
// is as valid, just lower).
inline constexpr std::string_view kHighWatermarkName = "high-watermark";
Result<void> write_hwm_checkpoint(FileSystem& fs, const std::string& shard_dir, Offset hwm);
// nullopt if absent or malformed (a malformed hint is ignored, never trusted).
std::optional<Offset> read_hwm_checkpoint(FileSystem& fs, const std::string& shard_dir);

class EpochHistory {
 public:
  EpochHistory() = default;

  // Recovery: removes a leftover .tmp (a save cut short), then read()s. Only for a shard
  // nobody is saving to: the .tmp it removes may be a concurrent save's.
  static Result<EpochHistory> load(FileSystem& fs, const std::string& shard_dir);
  // Reads <shard_dir>/leader-epochs (an absent file is an empty history at epoch 0) and
  // changes nothing, so it may run beside a save (which renames over the file atomically).
  static Result<EpochHistory> read(FileSystem& fs, const std::string& shard_dir);

  // Writes `next` durably (see the file comment) and then adopts it. On failure the
  // in-memory copy is unchanged.
  Result<void> save(FileSystem& fs, const std::string& shard_dir, LeaderEpoch current,
                    LeaderEpoch led, std::vector<EpochEntry> entries);

  LeaderEpoch current() const { return current_; }
  LeaderEpoch led() const { return led_; }
  const std::vector<EpochEntry>& entries() const { return entries_; }
  std::optional<EpochEntry> last() const {
    if (entries_.empty()) return std::nullopt;
    return entries_.back();
  }

  // The epoch the batch at `offset` was written in (the last entry starting at or below
  // it); 0 if there is none.
  LeaderEpoch epoch_at(Offset offset) const;
  // Start offset of the first entry beginning after `offset` (where the epoch of `offset`
  // ends), if any.
  std::optional<Offset> next_boundary_after(Offset offset) const;
  // KIP-279 (see EpochEnd); `log_end` answers for the latest epoch.
  EpochEnd end_offset_for(LeaderEpoch e, Offset log_end) const;
  // The entries that survive cutting the log at `end`: those starting below it (an entry
  // starting exactly at `end` describes no data and goes too).
  std::vector<EpochEntry> truncated(Offset end) const;
  // In memory only (open_shard, after recovery cut a torn tail): forgets entries starting
  // beyond `log_end`; the next save() persists the shorter list.
  void forget_beyond(Offset log_end) {
    while (!entries_.empty() && entries_.back().start_offset > log_end) entries_.pop_back();
  }

  static std::string encode(LeaderEpoch current, LeaderEpoch led,
                            const std::vector<EpochEntry>& entries);
  static Result<EpochHistory> decode(std::string_view bytes, const std::string& path);

 private:
  LeaderEpoch current_;
  LeaderEpoch led_;
  std::vector<EpochEntry> entries_;
};

}  // namespace sluice::fs_storage
