// fs-storage configuration, read once from PluginHost::config_* (README.md lists keys).
//
// Errors: from_host() throws std::invalid_argument for a value that does not parse or is
// out of range; that is a configuration boundary (error.h), and plugin.cc turns it into a
// create() error.
#pragma once

#include <cstdint>
#include <string>

#include "sluice/host.h"

namespace sluice::fs_storage {

enum class FsyncPolicy {
  always,  // every group is fdatasync'ed before its acks (default)
  never,   // benchmarks only: acks and visibility do NOT imply durability
};
enum class VerifyOnStart {
  all,   // CRC-verify every batch of every segment (the unit tests' default)
  tail,  // verify the active segment; sealed segments trust a valid .idx
  // as tail, and the active segment is verified only beyond its recovery point; after a
  // clean shutdown nothing is read (docs/architecture.md "Restart")
  checkpoint,
};

struct Options {
  std::string dir;                                   // storage.dir
  std::uint64_t segment_bytes = 64ull << 20;         // storage.segment_bytes
  std::uint64_t index_interval_bytes = 4096;         // storage.index_interval_bytes
  FsyncPolicy fsync = FsyncPolicy::always;           // storage.fsync
  // The struct's defaults are the unit tests'; a node's come from from_host (checkpoint,
  // background verification on and two flushers: docs/configuration.md).
  VerifyOnStart verify_on_start = VerifyOnStart::all;  // storage.verify_on_start
  bool verify_in_background = false;                 // storage.verify_in_background
  std::uint64_t verify_bytes_per_sec = 128ull << 20;  // storage.verify_mb_per_sec (0: unlimited)
  bool repair = false;                               // storage.repair (implies verify_on_start=all)
  std::int64_t retention_interval_ms = 30000;        // storage.retention_interval_ms (<=0: off)
  unsigned flush_threads = 1;                        // storage.flush_threads (1..8; a node's: 2)
  // storage.preallocate_segments (a node's: true; only with fsync = always): a roll takes a
  // zero-filled spare file (docs/architecture.md "Preallocated segments").
  bool preallocate_segments = false;
  // storage.page_cache_window_bytes (a node's: 64 MiB; 0: off; only with fsync = always):
  // each shard keeps about this much of its newest log in the page cache and drops what lies
  // further back once synced (docs/architecture.md "Page-cache window").
  std::uint64_t page_cache_window_bytes = 0;
  std::uint64_t group_journal_compact_bytes = 1 << 20;  // storage.group_journal_compact_bytes
  // storage.group_max_outstanding: deliveries a group holds unacked per shard; beyond it a
  // fetch delivers only what is due again (docs/api.md "Consumer groups and dead letters").
  std::uint64_t group_max_outstanding = 100000;
  // Replicated shards (docs/replication.md, docs/configuration.md "replication.*").
  std::int64_t replication_max_lag_ms = 10000;       // replication.max_lag_ms
  std::int64_t replication_fetch_wait_ms = 500;      // replication.fetch_wait_ms
  std::int64_t replication_fetch_max_bytes = 4 << 20;  // replication.fetch_max_bytes
  std::int64_t replication_quorum_timeout_ms = 30000;  // replication.quorum_timeout_ms
  unsigned replication_workers = 2;                  // replication.workers

  static Options from_host(const PluginHost& host);
};

}  // namespace sluice::fs_storage
