// ConsumerGroup: one consumer group of one shard incarnation (storage.h "consumer groups").
//
// On disk, <shard dir>/groups/<group>/:
//   journal         append-only records, each  u32 payload_len | u32 crc32c(type..payload)
//                   | u8 type | payload   (little-endian):
//                     1 DELIVER  u32 n, n * (u64 offset, u32 delivery)   written, not synced
//                     2 ACK      u32 n, n * u64 offset                   fdatasync'ed per call
//                     3 DEAD     u64 offset                              fdatasync'ed per move
//                     4 REPLAYED u64 from, u64 to (dead-letter offsets)  fdatasync'ed per call
//                   A record that fails its CRC or is cut short ends the journal (torn tail
//                   of unsynced DELIVER records): it is truncated there at open.
//   dead-letters/   a segment log (the shard log code: ShardLogImpl + recover_log), one
//                   record per batch: the original key, value and headers plus
//                   `sluice-original-offset` and `sluice-deliveries`.
//
// In memory: committed (every offset below is acked or dead-lettered), outstanding
// (offset -> delivery count, deadline), done (acked/dead-lettered offsets above committed),
// cursor (next never-delivered offset), replayed dead-letter ranges.
//
// Recovery replays the journal: delivered-but-not-done offsets are outstanding with their
// recorded delivery count and an expired deadline (redelivered by the next fetch); the
// cursor is one past the highest delivered offset. A DELIVER record lost in a crash only
// makes a record look new again (delivered again as delivery 1): never skipped.
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
std::int64_t steady_now_ms();

inline constexpr std::string_view kOriginalOffsetHeader = "sluice-original-offset";
inline constexpr std::string_view kDeliveriesHeader = "sluice-deliveries";

class ConsumerGroup {
 public:
  // Opens (create = true: creating) the group directory and replays its journal.
  static Result<std::unique_ptr<ConsumerGroup>> open(const std::string& name,
                                                     const std::string& dir, ShardLogImpl& shard,
                                                     const Options& opts,
                                                     std::shared_ptr<FileSystem> fs,
                                                     PluginHost& host, FlushPool& pool,
                                                     GroupClock clock);
  ~ConsumerGroup();

  Result<GroupDelivery> fetch(std::uint32_t max_records, const GroupOptions& opts);
  Result<void> ack(const std::vector<Offset>& offsets);
  Result<void> nack(const std::vector<Offset>& offsets);
  GroupPosition position();
  Result<FetchResult> dead_letters(Offset from, std::uint32_t max_records, std::size_t max_bytes);
  Result<std::uint64_t> replay(Offset from, Offset to);
  void close();

 private:
  struct Outstanding {
    std::uint32_t deliveries;
    std::int64_t deadline_ms;
  };
  ConsumerGroup(std::string name, std::string dir, ShardLogImpl& shard,
                std::shared_ptr<FileSystem> fs, PluginHost& host, GroupClock clock);

  Result<void> replay_journal();
  Result<void> append_journal(std::uint8_t type, const std::string& payload, bool sync);
  Result<void> check_outstanding(const std::vector<Offset>& offsets, const char* verb);
  void mark_done(std::uint64_t offset);
  void skip_below(std::uint64_t log_start);
  // The stored batch holding `offset` (read from the shard), cached in `cache` by base.
  Result<const std::string*> batch_for(std::uint64_t offset, std::map<std::uint64_t, std::string>& cache);
  Result<void> dead_letter(std::uint64_t offset, std::uint32_t deliveries,
                           std::map<std::uint64_t, std::string>& cache);
  bool replayed(std::uint64_t dl_offset) const;

  const std::string name_;
  const std::string dir_;
  ShardLogImpl& shard_;
  const std::shared_ptr<FileSystem> fs_;
  PluginHost& host_;
  const GroupClock clock_;

  std::mutex mu_;
  std::unique_ptr<File> journal_;
  std::uint64_t journal_size_ = 0;
  std::shared_ptr<ShardLogImpl> dead_;  // the dead-letter log

  std::uint64_t committed_ = 0;
  std::uint64_t cursor_ = 0;
  std::map<std::uint64_t, Outstanding> outstanding_;
  std::set<std::uint64_t> done_;                            // above committed_
  std::map<std::uint64_t, std::uint64_t> replayed_;         // dead-letter [from, to) ranges
};

}  // namespace sluice::fs_storage
