// The publish loads of sluice-bench's throughput runs (publish_single.cc,
// publish_replicated.cc): connections that each publish one body in a loop for some
// seconds (a slice), the figures of one or more slices of the same load taken together,
// and the results line that prints them.
//
// Thread-safety: call from the main thread; run_slice starts and joins its own threads.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "json_phase.h"

namespace sluice_bench {

// Where the benchmark's streams live: tenant "bench", namespace "b".
inline const std::string kStreamsPath = "/v1/tenants/bench/namespaces/b/streams/";

// Creates the tenant and the namespace (their answers are not checked: they may exist).
void ensure_namespace(int port);

// Creates `stream` with `shards` shards (and `replication_factor` when > 0); fail()s unless
// it was created or already there.
void create_stream(int port, const std::string& stream, int shards, int replication_factor);

// One publishing connection: where it goes and what it sends.
struct Conn {
  int port = 0;
  std::string path;  // without producer_id/sequence
  std::string body;
  int records = 0;   // records per request (in `body`)
  const char* media = kBatchMedia;
};

// Consumers at the tail while a slice runs: one per shard of `stream` (port 0: none).
struct TailFetch {
  int port = 0;
  std::string stream;
  int shards = 0;
};

// What one slice of a load measured.
struct Slice {
  std::uint64_t records = 0, errors = 0, fetched = 0, fetch_errors = 0;
  double secs = 0, cpu_s = -1;  // cpu_s: server CPU seconds (-1: no pids)
  double client_cpu_s = 0;      // this program's CPU seconds (the load generator)
  bool fetching = false;
  std::vector<double> lat;  // µs per acknowledged request
  std::string first_error;
};

// The figures of a load, as the results lines print them.
struct PhaseResult {
  double rps = 0, mbps = 0, p50 = 0, p99 = 0, p999 = 0;
  std::uint64_t errors = 0;
  double cpu_us = -1;    // server CPU (user + system, every server process) per record
  double client_cpu_us = -1;  // this program's CPU per record (clients, and any fetchers)
  double cores = 0;      // server + client CPU seconds per second: how busy the machine was
  double fetch_rps = -1; // records/s fetched by the tail consumers (if any)
  std::uint64_t fetch_errors = 0;
};

// One timed load: every connection publishes until `seconds` are over (a line on stdout
// each second); `pids` are the server processes whose CPU time counts; `idempotent`: with
// producer_id (the connection's number + 1) and sequence; `fetch`: tail consumers meanwhile.
Slice run_slice(const char* title, const std::vector<Conn>& conns, bool idempotent,
                const std::vector<pid_t>& pids, int seconds, const TailFetch& fetch = {});

// The figures of one or more slices of the same load, taken together; logs the first
// failure if any request failed.
PhaseResult summarize(const char* title, const std::vector<Slice>& slices, int record_bytes);

// The results line of a load (and its fetch line, if it fetched).
void print_result(const char* name, const PhaseResult& r);

}  // namespace sluice_bench
