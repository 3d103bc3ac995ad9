// The storage contract: a StorageEngine holds shard logs, one per ShardRef (stream,
// shard, incarnation). Everything that holds data holds it per incarnation.
//
// Durability contract (seeds: pulsar-fenced-empty-ledger-loss):
//   * An append completes with success only when recovery will find the batch:
//     AckMode::leader completes after fdatasync of the bytes (group commit: concurrent
//     appends share one sync). AckMode::none completes as soon as offsets are assigned.
//   * Records become visible to readers only once synced ("high watermark"), so a
//     consumer never sees a record that a crash could take back.
//   * After any write or sync error, the shard refuses every later append with
//     Errc::storage_failure until it is reopened; appends queued behind the failure are
//     failed, never acknowledged.
//   * Recovery truncates only a torn tail of the active segment (never acknowledged),
//     and fails loudly (Errc::corrupt_data, naming file and byte position) on corruption
//     anywhere else, unless the operator enabled repair.
//
// Thread-safety: every method of ShardLog and StorageEngine may be called from any thread.
// Callbacks run on a storage thread (or inline in append() for AckMode::none and for
// immediate failures); they must not block.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sluice/error.h"
#include "sluice/types.h"

namespace sluice {

struct AppendResult {
  Offset base_offset;      // first record's offset
  std::uint32_t count = 0; // records in the batch
  bool duplicate = false;  // an idempotent retry: these are the original offsets, nothing written
};
using AppendCallback = std::function<void(Result<AppendResult>)>;

// A fetch answer: whole, CRC-checked batches, as stored. The first batch may start
// before `from`; readers skip records below it.
struct FetchResult {
  std::vector<std::string> batches;
  Offset next_offset;     // where the next fetch should start
  Offset high_watermark;  // end of the durable, visible log
  Offset log_start;       // first retained offset
};

struct GroupOptions {
  std::uint32_t max_deliveries = 5;    // 1..1000
  std::int64_t ack_timeout_ms = 30000; // redelivery after this long without an ack
};

struct GroupDelivery {
  std::vector<std::string> batches;  // whole stored batches holding the delivered records
  struct Item {
    Offset offset;
    std::uint32_t delivery = 1;  // 1 on first delivery
  };
  std::vector<Item> records;  // what to hand to the consumer, in offset order
  // The fetch stopped at one of its bounds (max_records, bytes, records scanned, dead-letter
  // moves) with more to do: fetch again at once, even if `records` is short or empty. False
  // when it stopped because nothing more was due or readable (or max outstanding was
  // reached): then wait for a new record, an ack or an ack timeout. An engine that cannot
  // tell may leave it false (clients then wait as before), never set it when idle.
  bool more = false;
};

struct GroupPosition {
  std::string group;
  Offset committed;          // every record below is acked or dead-lettered
  std::uint64_t outstanding = 0;  // delivered, not yet acked
  Offset dead_letter_end;    // dead letters held (offsets in the group's dead-letter log)
  Offset dead_letter_start;
};

// One replica as the shard's leader sees it.
struct ReplicaProgress {
  NodeId broker;
  std::string directory_id;   // as the replica's last fetch named it
  Offset durable_end;         // its log end, synced on its disk, as it last reported (a
                              // follower writes only synced data: this is its log end)
  Offset high_watermark;      // its high watermark: what the leader last told it, capped at
                              // its durable end (the leader's own for the leader)
  std::int64_t lag_ms = 0;    // how long it has been behind the leader's log end (0: caught up)
  bool in_sync = false;       // a member of the catalog's in-sync set
};

struct ShardStats {
  Offset log_start;
  Offset high_watermark;
  Offset log_end;             // end of what this replica holds (synced or not)
  LeaderEpoch leader_epoch;   // the highest epoch this replica has acted in
  bool leading = true;        // false on a follower
  std::vector<ReplicaProgress> replicas;  // the leader's view of every replica; empty elsewhere
  std::uint64_t size_bytes = 0;       // bytes of batches in the log
  // Bytes on disk held ahead of the writes: zeros an engine preallocated (fs-storage: a
  // preallocated active segment's unwritten end and a spare segment). On disk beside
  // size_bytes; 0 for an engine that preallocates nothing.
  std::uint64_t preallocated_bytes = 0;
  std::uint64_t segments = 0;
  std::uint64_t appended_records = 0;  // since open
  std::uint64_t syncs = 0;             // fdatasync calls since open
  // This replica is a lost copy that has not caught up yet (ShardLog::copy_lost,
  // docs/replication.md "A lost shard copy"). False for an engine that cannot tell.
  bool copy_lost = false;
};

class ShardLog {
 public:
  virtual ~ShardLog() = default;

  virtual const ShardRef& ref() const = 0;

  // `batch` is an encoded batch (record_batch.h). Storage assigns base_offset, stamps
  // the incarnation and recomputes the CRC. `cb` is called exactly once.
  //
  // Idempotent producers: a batch whose header has producer_id != 0 carries the producer's
  // sequence for this shard (one per batch, starting at 0). Producer state lives in the
  // shard incarnation (rebuilt from the log on recovery), so the first send to a new
  // incarnation is never a duplicate. Per producer:
  //   sequence == next expected      -> appended
  //   one of the last 5 sequences    -> completes with the original offsets and
  //                                     duplicate = true, writing nothing (after the
  //                                     original is durable, if it is still in flight)
  //   anything else                  -> Errc::sequence_gap naming the expected sequence
  // An engine without idempotent producers refuses such a batch with Errc::not_supported.
  virtual void append(std::string batch, AckMode ack, AppendCallback cb) = 0;
  // append(), from a caller whose thread may block in this call for one write and sync
  // (docs/architecture.md "Inline appends"): an HTTP I/O thread with no other request in
  // flight, say. An engine may then write and sync the batch on this thread, when that is
  // sooner than a hand-off to its flusher (a lone append to an idle shard), and call `cb`
  // before returning; otherwise it behaves as append(). The caller must hold no lock that
  // `cb` takes. Default: append().
  virtual void append_may_block(std::string batch, AckMode ack, AppendCallback cb);

  // Batches holding offsets >= from, up to about max_bytes (at least one batch if any
  // is available) and max_records. from == high watermark gives an empty result;
  // from > high watermark is invalid_argument; from < log start is
  // offset_out_of_range (message names the log start).
  virtual Result<FetchResult> read(Offset from, std::uint32_t max_records,
                                   std::size_t max_bytes) = 0;

  // Calls `cb` once, as soon as the high watermark exceeds `offset` or the shard closes
  // (possibly inline, if that is already true; then it returns 0). Otherwise returns a
  // non-zero handle for cancel_notify. Used for long-poll fetch.
  virtual std::uint64_t notify_when_beyond(Offset offset, std::function<void()> cb) = 0;
  // Drops a waiter that has not fired (a long poll that timed out), so idle shards do not
  // accumulate callbacks. A handle that already fired, or 0, is ignored. `cb` is destroyed
  // before this returns, or it has run or is running.
  virtual void cancel_notify(std::uint64_t handle) = 0;

  virtual ShardStats stats() = 0;

  // A replicated copy that this disk once held and lost (its log deleted, or ending below
  // the high watermark it closed with): it holds none of what the catalog's in-sync set
  // counts it for. At start the broker takes such a copy out of the in-sync set before it
  // registers (docs/replication.md "A lost shard copy"), so the controller never elects it
  // from the empty log; the engine must never lead it meanwhile. Default: false (an engine
  // that cannot tell).
  virtual bool copy_lost() const { return false; }

  // --- consumer groups (per shard incarnation) ---------------------------------------
  // A group delivers every record at least once. A delivered record is outstanding until
  // acked; it is delivered again after a nack or once ack_timeout_ms passes without an
  // ack. When a record would be delivered more than max_deliveries times it moves to the
  // group's dead letters instead (and counts as done). Positions, acks and dead letters
  // are durable (synced before the call returns); delivery counts are best effort across
  // a crash (a record may be redelivered, never skipped).
  // Bad options are invalid_argument and a group name failing validate_name (names.h)
  // invalid_name, refused before the group is created. An engine without consumer groups
  // answers every group call with Errc::not_supported (list_groups: an empty list).
  virtual Result<GroupDelivery> group_fetch(const std::string& group, std::uint32_t max_records,
                                            const GroupOptions& opts) = 0;
  // invalid_argument naming the offset if it is not outstanding for this group (never
  // delivered, or already acked); nothing is changed then.
  virtual Result<void> group_ack(const std::string& group, const std::vector<Offset>& offsets) = 0;
  virtual Result<void> group_nack(const std::string& group, const std::vector<Offset>& offsets) = 0;
  virtual Result<GroupPosition> group_position(const std::string& group) = 0;
  virtual Result<std::vector<std::string>> list_groups() = 0;
  // Dead letters are stored as batches in the group's own log (offsets there are dead-letter
  // offsets; each record keeps its original key, value and headers, plus headers
  // `sluice-original-offset` and `sluice-deliveries`).
  virtual Result<FetchResult> dead_letters(const std::string& group, Offset from,
                                           std::uint32_t max_records, std::size_t max_bytes) = 0;
  // Publishes the dead letters in [from, to) to this shard again (new offsets, delivered to
  // every group as new records) and marks them replayed. Returns how many were replayed.
  virtual Result<std::uint64_t> replay_dead_letters(const std::string& group, Offset from,
                                                    Offset to) = 0;

  // --- compaction of keyed logs (docs/architecture.md "Cache compaction") --------------
  // Seals the active segment if it holds anything and starts a new one at the log end;
  // returns the active segment's base (the log end if it rolled). Appends queued meanwhile
  // land in the new segment. Leader only on a replicated shard (not_leader otherwise).
  // Default: not_supported.
  virtual Result<Offset> roll_segment();
  // Deletes whole sealed segments lying entirely below `before`, oldest first (the same
  // deletion as retention): never the active segment, never beyond the high watermark on a
  // replicated shard, never beyond the producer snapshot. The directory is fsynced. Returns
  // the new log start. Default: not_supported.
  virtual Result<Offset> trim_before(Offset before);
};

// The catalog's word on one shard incarnation's replicas (Assignment, metadata.h).
struct ReplicaAssignment {
  std::vector<NodeId> replicas;  // the first is the preferred leader
  NodeId leader;                 // 0: the shard has no leader
  LeaderEpoch leader_epoch;
  std::vector<InSyncReplica> in_sync;
  ShardVersion version;
  std::uint32_t min_insync = 1;
};

class StorageEngine {
 public:
  virtual ~StorageEngine() = default;

  // Opens (creating if absent) the log of one shard incarnation. Opening runs recovery.
  // Returns the same object while it stays open.
  virtual Result<std::shared_ptr<ShardLog>> open_shard(const ShardRef& ref,
                                                       const StreamSpec& spec) = 0;

  // Tells the engine the catalog's replica state of an open shard: after open_shard, before
  // any append, and after every change to it. The engine leads, follows or fences that
  // shard accordingly (docs/replication.md). An engine without replication accepts only a
  // single replica (the default) and answers not_supported otherwise.
  virtual Result<void> assign(const ShardRef& ref, const ReplicaAssignment& assignment);

  // Stops serving the shard (pending appends complete first). Data stays on disk.
  virtual void close_shard(const ShardRef& ref) = 0;

  // Removes this broker's copy of one shard incarnation, on the catalog's word: its replica
  // list no longer names this broker (a finished reassignment, docs/replication.md
  // "Reassignment"). Closes the shard first, then the same crash-safe protocol as
  // delete_incarnations. Answers whether a copy was on disk. Default: not_supported.
  virtual Result<bool> remove_replica(const ShardRef& ref);

  // Stops all background work; pending appends complete or fail before it returns.
  virtual void shutdown() = 0;

  // Deletes every incarnation <= up_to of `stream` held here (every shard), on the control
  // plane's word (a tombstone or a finalized delete) or an operator's. Open shards of those
  // incarnations are closed first. Crash-safe protocol:
  //   1. write and fsync a marker naming the directories
  //   2. rename each into <storage.dir>/.deleted/, fsync the parents
  //   3. remove the marker (fsync); the .deleted/ entries are removed afterwards
  // A crash at any step is finished when the engine next starts, before any shard opens,
  // so no record of a deleted incarnation is ever served. Returns the directories moved.
  virtual Result<std::uint32_t> delete_incarnations(const StreamKey& stream, Incarnation up_to) = 0;

  // Every shard incarnation directory held here (for orphan reports and tests).
  virtual Result<std::vector<ShardRef>> list_on_disk() = 0;
};

}  // namespace sluice
