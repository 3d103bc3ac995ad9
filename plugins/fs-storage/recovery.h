// Recovery of one shard's log directory at open_shard (README.md "Recovery rules").
//
//   for each segment, oldest first:
//     sealed (not last): every batch must check (verify_on_start=all, or its .idx is
//       missing/invalid) and offsets must be contiguous; otherwise Errc::corrupt_data
//       "corrupt batch in <file> at byte <pos>: <reason>".
//     active (last): scanned fully. An invalid batch at P is a TORN TAIL if no sequenced
//       batch follows (passes check_batch, shard's incarnation, base offset >= the offset
//       expected at P; not searched inside P's own declared extent when that lies within
//       the file), or if one follows but [P, it) holds an all-zero aligned sector (a torn
//       group commit): the file is truncated at P (ftruncate + fdatasync) and a warning
//       says "truncated torn tail ... never acknowledged". Otherwise it is corruption.
//   producer state: the snapshot (producers.h) if it is valid and its end lies within the
//     recovered log, plus every scanned batch at or above its end. verify_on_start=tail
//     trusts a sealed segment's .idx only if the snapshot covers that segment. Without a
//     valid snapshot, every batch is scanned and a new snapshot is written.
//   storage.repair=true: instead of failing, the log is cut at the first corrupt batch
//   (later segments deleted) and an ERROR line says how many bytes/segments went.
//   verify_on_start=checkpoint (recovery_point.h; docs/architecture.md "Restart"): sealed segments
//     as for tail; the segment of a valid recovery point is walked by batch headers only
//     (no CRC) below the point's position and checked as above beyond it. With `clean` (the
//     engine took a clean-shutdown marker) and the point at the end of the active segment,
//     whose .idx and the producer snapshot end there too, nothing is read. A recovery point
//     that is torn, corrupt, or names a segment that is gone or shorter than its position is
//     ignored (a full check, with a WARN line).
//   a restart marker (log_restart.h), first of all: the log was being started over at
//     the marker's offset; everything below it is removed before the scan
//     (RecoveredLog::restarted_at; the caller finishes the restart). A corrupt marker is
//     corrupt_data.
//
// Thread: runs on the open_shard caller, before the shard is visible to anyone.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "background_verify.h"
#include "file_system.h"
#include "options.h"
#include "producers.h"
#include "segment.h"
#include "sluice/host.h"
#include "sluice/types.h"

namespace sluice::fs_storage {

// "corrupt batch in <file> at byte <pos>: <reason>", the message of a corrupt batch wherever
// it is found (recovery, background verification).
std::string corrupt_batch_message(const std::string& file, std::uint64_t pos, const std::string& reason);

struct RecoveredLog {
  std::vector<std::shared_ptr<Segment>> segments;  // never empty; last is active
  std::uint64_t next_offset = 0;                   // = high watermark after recovery
  ProducerTable producers;                         // idempotent-producer state at next_offset
  std::uint64_t snapshot_end = 0;                  // end of the valid producer snapshot on disk
  // A restart marker was found and the log rolled forward to start here: the caller must
  // finish the restart (finish_restart, log_restart.h) before the log is used.
  std::optional<Offset> restarted_at;
  // What this recovery did not CRC-check (a sealed segment trusted through its .idx, the
  // active segment below its recovery point or after a clean shutdown): the caller hands it
  // to background verification (background_verify.h). Empty with verify_on_start=all.
  std::vector<UnverifiedRange> unverified;
  // The active segment held bytes beyond its recovery point after an unclean stop: what a
  // killed process wrote but never synced, still in the page cache. Recovery fdatasyncs
  // the segment before it is used (a power cut must not take back what is served and
  // answered as duplicates from now on), and the caller syncs the directory chain too.
  // False with storage.fsync = never (nothing is promised then), and after a clean close in
  // checkpoint mode (the recovery point covers the end).
  bool kept_unsynced_tail = false;
};

// `clean`: the fast path after a clean shutdown (checkpoint mode). A kept tail is synced
// whatever the last stop was (kept_unsynced_tail).
Result<RecoveredLog> recover_log(FileSystem& fs, PluginHost& host, const Options& opts,
                                 const std::string& log_dir, Incarnation incarnation,
                                 bool clean = false);

}  // namespace sluice::fs_storage
