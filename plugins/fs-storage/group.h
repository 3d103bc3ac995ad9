// ConsumerGroup: one consumer group of one shard incarnation (storage.h "consumer groups").
//
// On disk, <shard dir>/groups/<group>/:
//   journal         append-only records, each  u32 payload_len | u32 crc32c(type..payload)
//                   | u8 type | payload   (little-endian):
//                     1 DELIVER  u32 n, n * (u64 offset, u32 delivery)   written, not synced
//                     2 ACK      u32 n, n * u64 offset                   fdatasync'ed per call
//                     3 DEAD     u64 offset                              fdatasync'ed per move
//                     4 REPLAYED u64 from, u64 to (dead-letter offsets)  fdatasync'ed per call
//                     5 GEN      u64 generation   first record of a journal started by a
//                                compaction (a journal without it is generation 0)
//                     6 REPLAY_PENDING u64 from, u64 to, u64 shard_from  fdatasync'ed before
//                                the replay's shard append (shard_from: the shard's high
//                                watermark then; the replayed batch lies at or after it)
//                   A record that fails its CRC or is cut short ends the journal (torn tail
//                   of unsynced DELIVER records): it is truncated there at open.
//   snapshot        the group state (committed, cursor, done set, outstanding offsets with
//                   delivery counts, replayed ranges, pending replays) as of byte
//                   `journal_offset` of journal generation `generation`; CRC-checked, a bad
//                   one fails the group's open (corrupt_data). Written by compaction.
//
// Compaction (journal_size > storage.group_journal_compact_bytes, checked at the end of a
// call, never in the middle of one): fdatasync the journal; write snapshot.tmp + fdatasync,
// rename to snapshot, fsync dir (step group.compact.after_snapshot); write journal.tmp
// holding GEN g+1 + fdatasync (group.compact.after_journal_tmp), rename over journal, fsync
// dir (group.compact.after_journal). Recovery: *.tmp removed; snapshot loaded; journal
// generation == snapshot generation -> only records at/after journal_offset are applied (a
// crash, or a failed reset, between the two renames); == generation + 1 -> all; anything
// else is corrupt_data. If the reset fails the group keeps appending to the old journal
// (after journal_offset), which that rule replays.
//
// Crash windows closed at open (after the journal is replayed):
//   * dead letters: the last 64 dead-letter records whose `sluice-original-offset` is not
//     done in the journal (crash between the dead-letter append and its DEAD record) get
//     their DEAD record now, so the record is not dead-lettered twice.
//   * replays: a REPLAY_PENDING without its REPLAYED: the shard from shard_from to the high
//     watermark is searched for a record with header `sluice-replayed-from` =
//     "<group>:<dead-letter offset in range>"; found -> REPLAYED is journaled; not found ->
//     the replay is done now (append, then REPLAYED). Same before every replay() call.
//   dead-letters/   a segment log (the shard log code: ShardLogImpl + recover_log), one
//                   record per batch: the original key, value and headers plus
//                   `sluice-original-offset` and `sluice-deliveries`.
//
// In memory: committed (every offset below is acked or dead-lettered), outstanding
// (offset -> delivery count, deadline), done (acked/dead-lettered offsets above committed),
// cursor (next never-delivered offset), replayed dead-letter ranges.
//
// Recovery loads the snapshot (if any), then replays the journal: delivered-but-not-done
// offsets are outstanding with their recorded delivery count and an expired deadline
// (redelivered by the next fetch); the cursor is one past the highest delivered offset
// (acks and dead letters do not move it; fetch skips done offsets instead). A DELIVER record lost in a crash only
// makes a record look new again (delivered again as delivery 1): never skipped.
//
// Files: group.cc (open, delivery, acks, positions), group_journal.cc (journal, snapshot,
// compaction), group_dead_letters.cc (dead letters, replays), group_records.h (the record
// encoding they share).
//
// Thread-safety: every public method takes the group's mutex (held across its I/O; groups
// never take the shard's append lock except through ShardLogImpl's public methods).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "file_system.h"
#include "options.h"
#include "sluice/host.h"
#include "sluice/storage.h"

namespace sluice::fs_storage {

class ShardLogImpl;
class FlushPool;

// Milliseconds of a steady clock; injectable for tests.
using GroupClock = std::function<std::int64_t()>;
// Test seam: called at each named crash point (group.compact.after_snapshot_tmp,
// .after_snapshot, .after_journal_tmp, .after_journal; group.dead.after_append;
// group.replay.after_intent, .after_append); true stops the operation there as a crash
// would (a stopped dead-letter move or replay returns internal; a stopped compaction is
// only logged, the call it followed already succeeded).
using GroupStepHook = std::function<bool(std::string_view step)>;
// Replicated shards (group_ops.h): commits one op in the shard's group log before the
// group changes anything of its own (ACK, DEAD with its dead-letter batch as `extra`,
// REPLAY_PENDING, REPLAYED). Empty on an unreplicated shard.
using GroupReplicate = std::function<Result<void>(std::uint8_t type, std::string_view payload,
                                                  std::string_view extra)>;
std::int64_t steady_now_ms();

// invalid_argument unless max_deliveries is in [1, 1000] and ack_timeout_ms > 0 (storage.h).
Result<void> check_group_options(const GroupOptions& opts);

inline constexpr std::string_view kOriginalOffsetHeader = "sluice-original-offset";
inline constexpr std::string_view kDeliveriesHeader = "sluice-deliveries";
// On every record a replay appends to the shard: "<group>:<dead-letter offset>".
inline constexpr std::string_view kReplayedFromHeader = "sluice-replayed-from";

class ConsumerGroup {
 public:
  // Opens (create = true: creating) the group directory and replays its journal.
  static Result<std::unique_ptr<ConsumerGroup>> open(const std::string& name,
                                                     const std::string& dir, ShardLogImpl& shard,
                                                     const Options& opts,
                                                     std::shared_ptr<FileSystem> fs,
                                                     PluginHost& host, FlushPool& pool,
                                                     GroupClock clock, GroupStepHook hook = {},
                                                     GroupReplicate replicate = {});
  ~ConsumerGroup();

  Result<GroupDelivery> fetch(std::uint32_t max_records, const GroupOptions& opts);
  Result<void> ack(const std::vector<Offset>& offsets);
  Result<void> nack(const std::vector<Offset>& offsets);
  GroupPosition position();
  Result<FetchResult> dead_letters(Offset from, std::uint32_t max_records, std::size_t max_bytes);
  Result<std::uint64_t> replay(Offset from, Offset to);
  // Applies one committed op of the shard's group log (group_ops.h) that another leader
  // (or this one, before a crash) proposed. Idempotent: an ack of a done offset, a dead
  // letter already in the dead-letter log (by its offset there), a replay already
  // pending or replayed change nothing. corrupt_data if a dead letter would leave a gap.
  Result<void> apply_op(std::uint8_t type, std::string_view payload, std::string_view extra);
  void close();

 private:
  struct Outstanding {
    std::uint32_t deliveries;
    std::int64_t deadline_ms;
  };
  struct PendingReplay {
    std::uint64_t from, to, shard_from;
  };
  ConsumerGroup(std::string name, std::string dir, ShardLogImpl& shard,
                std::shared_ptr<FileSystem> fs, PluginHost& host, GroupClock clock,
                GroupStepHook hook, std::uint64_t compact_bytes, std::uint64_t max_outstanding);

  Result<void> load_snapshot(bool* found, std::uint64_t* gen, std::uint64_t* offset);
  Result<void> replay_journal(bool have_snapshot, std::uint64_t snap_gen, std::uint64_t snap_off);
  void apply_record(std::uint8_t type, const char* p, std::uint32_t len, std::int64_t now);
  // Compaction (see above) when the journal is over the threshold; failures are logged.
  void maybe_compact();
  Result<void> compact();
  std::string encode_snapshot(std::uint64_t journal_offset) const;
  Result<void> reconcile_dead_letters();
  Result<void> resolve_pending_replays();
  // The not-yet-replayed dead letters in [from, to) as one batch for the shard (empty if none).
  // `capped`: refuse more than kMaxReplayBytes (a new replay); recovery finishes an
  // intent already journaled whatever its size.
  Result<std::string> build_replay(std::uint64_t from, std::uint64_t to, std::uint64_t* n, bool capped = true);
  // propose: commit REPLAYED in the group log first (replicated shards).
  Result<void> journal_replayed(std::uint64_t from, std::uint64_t to, bool propose);
  Result<void> propose(std::uint8_t type, const std::string& payload, std::string_view extra = {}) {
    return replicate_ ? replicate_(type, payload, extra) : Result<void>{};
  }
  bool stop_at(std::string_view step) { return hook_ && hook_(step); }
  Result<void> append_journal(std::uint8_t type, const std::string& payload, bool sync);
  Result<void> check_outstanding(const std::vector<Offset>& offsets, const char* verb);
  void mark_done(std::uint64_t offset);
  void skip_below(std::uint64_t log_start);
  // The stored batch holding `offset` (read from the shard), cached in `cache` by base.
  Result<const std::string*> batch_for(std::uint64_t offset, std::map<std::uint64_t, std::string>& cache);
  Result<void> dead_letter(std::uint64_t offset, std::uint32_t deliveries,
                           std::map<std::uint64_t, std::string>& cache);
  bool replayed(std::uint64_t dl_offset) const;
  // unavailable once closed; storage_failure once a journal write or sync failed (mu_ held).
  Result<void> usable() const;
  // How a replay's batch is appended to the shard: quorum on a replicated shard.
  AckMode shard_ack() const;

  const std::string name_;
  const std::string dir_;
  ShardLogImpl& shard_;
  const std::shared_ptr<FileSystem> fs_;
  PluginHost& host_;
  const GroupClock clock_;
  const GroupStepHook hook_;
  GroupReplicate replicate_;  // set once by open()
  const std::uint64_t compact_bytes_;
  const std::uint64_t max_outstanding_;  // storage.group_max_outstanding

  std::mutex mu_;
  std::unique_ptr<File> journal_;
  std::uint64_t journal_size_ = 0;
  std::uint64_t generation_ = 0;      // of the open journal
  std::uint64_t next_compact_at_ = 0;  // journal size that triggers compaction
  bool dir_unsynced_ = false;         // a journal rename whose directory fsync failed
  // Set when a journal write or sync failed: the group refuses calls until the shard is
  // reopened (the journal is read again from disk). A record whose fdatasync failed may
  // never reach the disk, and replay stops at it: a later acknowledged ack written after it
  // would be cut with it after a power cut.
  std::string failed_;
  std::shared_ptr<ShardLogImpl> dead_;  // the dead-letter log

  std::uint64_t committed_ = 0;
  std::uint64_t cursor_ = 0;
  std::map<std::uint64_t, Outstanding> outstanding_;
  std::set<std::uint64_t> done_;                            // above committed_
  std::map<std::uint64_t, std::uint64_t> replayed_;         // dead-letter [from, to) ranges
  std::vector<PendingReplay> pending_;                      // journaled intent, no REPLAYED yet
};

}  // namespace sluice::fs_storage
