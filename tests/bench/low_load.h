// The low-load phase of sluice-bench (issue 12: "one record per request, p99 at most 1.5x
// the disk's 4 KiB fdatasync p99"). The reference and the load alternate in one-second
// slices, so both see the same disk: on these VMs the reference's own p99 moves by a factor
// of five between runs (docs/benchmarks.md "Low load: where the p99 goes").
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace sluice_bench {

struct LowLoadResult {
  double rps = 0;                    // requests (= records) per second over the load slices
  double p50 = 0, p99 = 0, p999 = 0; // ms, one-record requests
  double probe_p50 = 0, probe_p99 = 0;  // ms, 4 KiB write + fdatasync in `dir`
  double cpu_us = -1;                // server CPU per record over the load slices
  std::uint64_t errors = 0;
  std::string first_error;
};

// `seconds` slices of each, alternating: the probe (a 4 KiB write + fdatasync to a file in
// `dir`), then one connection POSTing `body` (one record) to 127.0.0.1:`port` `path`.
LowLoadResult run_low_load(int port, const std::string& path, const std::string& body,
                           const std::string& media, const std::string& dir, int seconds,
                           const std::vector<pid_t>& server_pids);

}  // namespace sluice_bench
