// Phase 1 of sluice-bench's throughput runs (publish_single.cc, publish_replicated.cc): the
// disk as the reference the publish figures are compared with (docs/benchmarks.md).
#pragma once

#include "publish_bench.h"

namespace sluice_bench {

struct DiskReference {
  double sync_mbps = 0, sync_p50_us = 0;  // --chunk-byte writes, each followed by fdatasync
  double buffered_mbps = 0, direct_mbps = 0;  // 1 MiB sequential writes, like dd
  double dd_mbps = 0;                         // the faster of those two: the reference
  // The replicated run only: what the disk syncs with one file per shard (one broker) and
  // one per shard replica.
  int single_files = 0, rep_files = 0;
  double sync_single_mbps = 0, sync_rep_mbps = 0;
};

// Prints "[1/<nphases>] disk reference ..." and the figures as they are measured, in
// o.dir; `sync_ceiling`: also the concurrent-sync figures of the replicated run.
DiskReference measure_disk(const Options& o, int nphases, bool sync_ceiling);

// The two disk lines of the results, the same in both runs.
void print_disk_results(const DiskReference& d, int chunk);

}  // namespace sluice_bench
