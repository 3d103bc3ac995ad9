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

struct ShardStats {
  Offset log_start;
  Offset high_watermark;
  std::uint64_t size_bytes = 0;
  std::uint64_t segments = 0;
  std::uint64_t appended_records = 0;  // since open
  std::uint64_t syncs = 0;             // fdatasync calls since open
};

class ShardLog {
 public:
  virtual ~ShardLog() = default;

  virtual const ShardRef& ref() const = 0;

  // `batch` is an encoded batch (record_batch.h). Storage assigns base_offset, stamps
  // the incarnation and recomputes the CRC. `cb` is called exactly once.
  virtual void append(std::string batch, AckMode ack, AppendCallback cb) = 0;

  // Batches holding offsets >= from, up to about max_bytes (at least one batch if any
  // is available) and max_records. from == high watermark gives an empty result;
  // from > high watermark is invalid_argument; from < log start is
  // offset_out_of_range (message names the log start).
  virtual Result<FetchResult> read(Offset from, std::uint32_t max_records,
                                   std::size_t max_bytes) = 0;

  // Calls `cb` once, as soon as the high watermark exceeds `offset` or the shard closes
  // (possibly inline, if that is already true). Used for long-poll fetch.
  virtual void notify_when_beyond(Offset offset, std::function<void()> cb) = 0;

  virtual ShardStats stats() = 0;
};

class StorageEngine {
 public:
  virtual ~StorageEngine() = default;

  // Opens (creating if absent) the log of one shard incarnation. Opening runs recovery.
  // Returns the same object while it stays open.
  virtual Result<std::shared_ptr<ShardLog>> open_shard(const ShardRef& ref,
                                                       const StreamSpec& spec) = 0;

  // Stops serving the shard (pending appends complete first). Data stays on disk.
  virtual void close_shard(const ShardRef& ref) = 0;

  // Stops all background work; pending appends complete or fail before it returns.
  virtual void shutdown() = 0;
};

}  // namespace sluice
