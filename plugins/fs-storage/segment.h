// One segment: a .log file of record batches starting at `base`, its open File, and its
// in-memory sparse offset index.
//
// Ownership: a ShardLogImpl owns its segments through shared_ptr; a reader copies the
// shared_ptr so retention may unlink the files while the read finishes on the open fd.
//
// Thread-safety: two groups of fields.
//   * "published" fields (readable_size, next_offset, max_ts, index) are guarded by
//     the owning shard's segments mutex; readers look at them only under it.
//   * "writer" fields (write_pos, last_index_pos, pending_*) belong to the shard's flusher
//     (one thread at a time) and are published under the segments mutex after a sync.
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "file_system.h"
#include "sluice/error.h"

namespace sluice::fs_storage {

struct IndexEntry {
  std::uint32_t relative_offset;  // batch base_offset - segment base
  std::uint32_t position;         // byte position of the batch in the .log
};

// Sparse-index policy, shared by the writer and the recovery scan so both produce the
// same index: a batch at `pos` gets an entry when pos - last_entry_pos >= interval
// (last_entry_pos starts at 0, the segment start, which needs no entry).
inline bool wants_index_entry(std::uint64_t pos, std::uint64_t last_entry_pos,
                              std::uint64_t interval) {
  return pos > 0 && pos - last_entry_pos >= interval;
}

inline constexpr std::int64_t kNoTimestamp = std::numeric_limits<std::int64_t>::min();

class Segment {
 public:
  Segment(std::uint64_t base, std::string log_path, std::string index_path,
          std::unique_ptr<File> file)
      : next_offset(base), base_(base), log_path_(std::move(log_path)),
        index_path_(std::move(index_path)), file_(std::move(file)) {}

  std::uint64_t base() const { return base_; }
  const std::string& log_path() const { return log_path_; }
  const std::string& index_path() const { return index_path_; }
  File& file() { return *file_; }

  // Position to start scanning for `offset` (>= base): the greatest index entry at or
  // below it, else 0. Caller holds the segments mutex.
  std::uint64_t lookup(std::uint64_t offset) const;

  // --- published (segments mutex) ---
  std::uint64_t readable_size = 0;          // bytes that are durable and visible
  // Bytes written (synced or not): what a leader may ship to followers before its own
  // fdatasync finishes (docs/replication.md "Shipping before the leader's sync"). Equal to
  // readable_size except on the active segment between a write and its sync.
  std::uint64_t written_size = 0;
  std::uint64_t next_offset;                // offset after the last visible batch
  std::int64_t max_ts = kNoTimestamp;  // greatest max_timestamp of any visible batch (age
                                       // retention: a running max, never the last batch's)
  std::vector<IndexEntry> index;

  // --- writer (flusher) ---
  std::uint64_t write_pos = 0;       // end of written bytes (synced or not)
  std::uint64_t last_index_pos = 0;  // position of the last index entry (0 = start)
  std::uint64_t pending_next_offset = 0;
  std::int64_t pending_max_ts = kNoTimestamp;  // running max over everything written
  std::vector<IndexEntry> pending_index;  // entries written but not yet published
  // The file was a zero-filled spare (or recovery kept its zeros): writes overwrite
  // written blocks (docs/architecture.md "Preallocated segments").
  bool preallocated = false;
  // Preallocated: a durable recovery point names this segment and says nothing was written
  // at or beyond this byte (ShardLogImpl::reserve_through). 0: none yet; kUnreserved: writes
  // go on without one (no points are written, or one failed), and a start reads it whole.
  static constexpr std::uint64_t kUnreserved = ~std::uint64_t{0};
  std::uint64_t reserved_end = 0;
  // Since the writer took this segment (roll, or recovery): where it started, when, and how
  // many syncs it has done, for the group size and write rate that decide whether and how
  // fast a spare is made (shard_log_roll.cc).
  std::uint64_t writer_start_pos = 0;
  std::chrono::steady_clock::time_point writer_start = std::chrono::steady_clock::now();
  std::uint64_t writer_syncs = 0;
  // Bytes from the start already dropped from the page cache (ShardLogImpl::release_cache).
  std::uint64_t cache_dropped_to = 0;

 private:
  std::uint64_t base_;
  std::string log_path_;
  std::string index_path_;
  std::unique_ptr<File> file_;
};

// What an index file records about a sealed segment.
struct IndexFileContents {
  std::uint64_t base_offset = 0;
  std::uint64_t log_size = 0;
  std::uint64_t next_offset = 0;
  std::int64_t max_ts = kNoTimestamp;  // greatest batch max_timestamp in the segment (v2)
  std::vector<IndexEntry> entries;
};

std::string encode_index_file(const IndexFileContents& c);
// Errc::corrupt_data (with the reason) if the bytes are not a well-formed index.
Result<IndexFileContents> decode_index_file(std::string_view bytes);

// Writes <index>.tmp, fdatasyncs it and renames it over the index path. The index is a
// cache, so the directory is not fsynced: losing the rename only costs a rebuild.
Result<void> write_index_file(FileSystem& fs, const std::string& index_path,
                              const IndexFileContents& c);

// Reads an entire file into memory (recovery reads one segment at a time).
Result<std::string> read_whole_file(File& f);

}  // namespace sluice::fs_storage
