// Shared helpers for fs-storage tests: batch building, synchronous append, polling, and
// reading a whole shard back.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine.h"
#include "fault_file_system.h"
#include "sluice/record_batch.h"
#include "sluice/storage.h"
#include "test_host.h"

namespace sluice::fs_storage::testing {

// Resident pages of [from, to) of the file (to clamped to its size; mincore over a
// read-only mapping, which faults nothing in), and the pages counted.
std::pair<std::size_t, std::size_t> resident_pages(const std::string& path, std::uint64_t from = 0,
                                                   std::uint64_t to = UINT64_MAX);

// A batch of `records` records whose values are "<tag>#<i>", timestamps `ts`.
std::string make_batch(const std::string& tag, std::uint32_t records, std::int64_t ts = 1000,
                       std::size_t value_pad = 0);

ShardRef test_ref(std::uint32_t shard = 0, std::uint64_t incarnation = 0);

// The record values of an encoded batch, in order.
std::vector<std::string> batch_values(const std::string& batch);

// Offset -> value of every acknowledged record (filled from append callbacks under `mu`).
struct AckedRecords {
  std::mutex mu;
  std::map<std::uint64_t, std::string> by_offset;
};

// Appends `batches` while `fs` parks every sync, waits until a sync is parked, crashes `fs`
// (seed, opt), lets the syncs go and waits for every callback; what a callback acknowledged
// goes into `acked`. The power-cut step of the crash tests.
void append_then_power_cut(ShardLog& shard, FaultFileSystem& fs, std::vector<std::string> batches,
                           AckedRecords& acked, std::uint64_t seed, CrashOptions opt);

// Appends and waits for the callback (30 s cap; fails the test on timeout).
Result<AppendResult> append_wait(ShardLog& shard, std::string batch, AckMode ack = AckMode::leader);

// Polls `pred` every millisecond for up to `timeout`; true once it holds.
bool eventually(const std::function<bool()>& pred,
                std::chrono::milliseconds timeout = std::chrono::seconds(30));

// Every record value from `from` up to the high watermark, keyed by offset. Fails the
// test on a read error.
std::map<std::uint64_t, std::string> read_all(ShardLog& shard, std::uint64_t from = 0);

// Flips bits of the byte at `pos` of `path` (fails the test if the file cannot be opened).
void flip_byte(const std::string& path, std::uint64_t pos);

// Path of segment `base` of the shard in `engine`'s layout.
std::string segment_path(FsStorageEngine& engine, const ShardRef& ref, std::uint64_t base);

}  // namespace sluice::fs_storage::testing
