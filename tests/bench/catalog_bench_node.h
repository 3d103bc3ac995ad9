// sluice-catalog-bench --tombstones N: the catalog as a user meets it, through a real
// sluiced (the embedded default node: one process, raft-meta with one member) and real HTTP
// (docs/benchmarks.md "sluice-catalog-bench", issue 12 "Catalog").
#pragma once

#include <string>

namespace sluice::bench {

struct NodeBenchOptions {
  long tombstones = 10000;   // streams created and deleted before the timed restart
  int clients = 16;          // concurrent HTTP clients for the create + delete pairs
  std::string sluiced;       // default: next to this program
  std::string dir;           // default: a fresh directory under /tmp (removed at the end)
  bool keep = false;         // keep `dir` (to profile a start by hand)
};

// Phases, each printed with its target next to it:
//   1. start an empty node, time fork -> /readyz 200
//   2. `clients` clients each loop POST stream + DELETE stream over keep-alive HTTP until
//      `tombstones` pairs are done: pairs/s and p50/p99 of each call
//   3. stop (SIGTERM), start, time fork -> /readyz with that many tombstones (twice), and
//      check GET /v1/tombstones lists them all
// Returns the process exit status (1 on a failed call or check).
int run_node_bench(const NodeBenchOptions& o);

}  // namespace sluice::bench
