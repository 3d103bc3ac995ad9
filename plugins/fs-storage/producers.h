// Idempotent-producer state of one shard incarnation (storage.h ShardLog::append).
//
// Per producer id: the next expected sequence and the last kRecentBatches batches
// (sequence -> base offset, record count). Sequences of one producer are consecutive, so
// batch `seq` lives in slot seq % kRecentBatches: a lookup is one hash-map find and one
// array index, no per-record work.
//
// Durability: the table is rebuilt at open from a snapshot plus the batches after it.
// The snapshot (<shard>/log/producers.snapshot) is written when a segment is sealed, at
// that segment boundary, and at open when none is valid; retention never deletes a segment
// above the snapshot's end, so producer state is never forgotten with the data.
//
// Snapshot file, little-endian:
//   0 u32 magic "SLPS"  4 u32 version 1  8 u64 end_offset  16 u32 producer_count
//   20 producers: u64 id | u64 next_seq | u8 n | n * (u64 seq | u64 base | u32 count)
//                 (oldest first)
//   .. u32 crc32c of everything before it
// The snapshot describes every batch with base offset < end_offset.
//
// Thread-safety: none; the owner guards it (ShardLogImpl: mu_ for the append-side table,
// the flusher alone for the written-side table).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

#include "file_system.h"
#include "sluice/error.h"

namespace sluice::fs_storage {

inline constexpr std::uint32_t kRecentBatches = 5;

class ProducerTable {
 public:
  struct Batch {
    std::uint64_t seq = 0;
    std::uint64_t base = 0;
    std::uint32_t count = 0;
  };
  struct State {
    std::uint64_t next_seq = 0;
    std::uint32_t n = 0;  // valid recent batches: seqs [next_seq - n, next_seq)
    std::array<Batch, kRecentBatches> recent{};
  };

  enum class Verdict { append, duplicate, gap };
  struct Check {
    Verdict verdict;
    Batch original;              // duplicate
    std::uint64_t expected = 0;  // the next expected sequence
  };

  Check check(std::uint64_t id, std::uint64_t seq) const;
  // Records batch `seq` of producer `id` as the newest (a non-consecutive seq restarts the
  // recent window; recovery of a consistent log never does that).
  void record(std::uint64_t id, std::uint64_t seq, std::uint64_t base, std::uint32_t count);

  std::size_t size() const { return map_.size(); }
  const std::unordered_map<std::uint64_t, State>& producers() const { return map_; }

  std::string encode_snapshot(std::uint64_t end_offset) const;
  // Errc::corrupt_data with the reason if malformed; `end_offset` receives the end.
  static Result<ProducerTable> decode_snapshot(std::string_view bytes, std::uint64_t* end_offset);

 private:
  std::unordered_map<std::uint64_t, State> map_;
};

inline constexpr std::string_view kProducerSnapshotName = "producers.snapshot";

// <path>.tmp, fdatasync, rename over <path>. The caller fsyncs the directory.
Result<void> write_producer_snapshot(FileSystem& fs, const std::string& path,
                                     const ProducerTable& t, std::uint64_t end_offset);

}  // namespace sluice::fs_storage
