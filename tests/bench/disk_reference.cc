#include "disk_reference.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "bench_measure.h"
#include "bench_process.h"

namespace sluice_bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Sequential chunk writes, each followed by fdatasync: the bandwidth a durable log gets.
double disk_sync_bandwidth(const std::string& dir, int chunk, int seconds, double* p50_us) {
  const std::string path = dir + "/disk-probe.bin";
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    std::perror("open disk probe");
    std::exit(1);
  }
  std::string buf(chunk, 'd');
  std::vector<double> lat;
  std::uint64_t bytes = 0;
  const auto end = Clock::now() + std::chrono::seconds(seconds);
  while (Clock::now() < end) {
    const auto t0 = Clock::now();
    if (::write(fd, buf.data(), buf.size()) != static_cast<ssize_t>(buf.size()) || ::fdatasync(fd) != 0) {
      std::perror("disk probe write");
      std::exit(1);
    }
    lat.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    bytes += buf.size();
  }
  ::close(fd);
  fs::remove(path);
  *p50_us = percentile(lat, 0.5);
  return bytes / 1e6 / seconds;
}

}  // namespace

DiskReference measure_disk(const Options& o, int nphases, bool sync_ceiling) {
  DiskReference d;
  std::printf("[1/%d] disk reference: %d-byte sequential writes + fdatasync in %s ...\n", nphases, o.chunk,
              o.dir.c_str());
  std::fflush(stdout);
  progress("phase 1: disk reference (%d s)", o.seconds);
  d.sync_mbps = disk_sync_bandwidth(o.dir, o.chunk, o.seconds, &d.sync_p50_us);
  std::printf("      disk: %.1f MB/s (fdatasync p50 %.0f us)\n", d.sync_mbps, d.sync_p50_us);
  // The honest reference: the disk's sequential bandwidth, the faster of dd bs=1M
  // conv=fdatasync and the same with oflag=direct (the buffered one can be held back by new
  // page-cache pages on a VM: docs/benchmarks.md "Keyed publishing: the page cache").
  d.buffered_mbps = dd_bandwidth(o.dir, std::min(o.seconds, 5));
  d.direct_mbps = dd_bandwidth(o.dir, std::min(o.seconds, 5), 8192, true);
  d.dd_mbps = std::max(d.buffered_mbps, d.direct_mbps);
  std::printf("      disk, sequential (1 MiB writes, one fdatasync at the end, like dd conv=fdatasync): "
              "%.1f MB/s; with O_DIRECT (like dd oflag=direct): %.1f MB/s\n", d.buffered_mbps, d.direct_mbps);
  // The replicated run: what the disk can sync in each side's own pattern, one file per
  // shard (one broker) and one per shard replica (all brokers share this disk).
  d.single_files = o.shards;
  d.rep_files = o.shards * std::max(o.replication_factor, 1);
  if (sync_ceiling) {
    progress("phase 1: the disk's sync ceiling with %d and with %d files", d.single_files, d.rep_files);
    d.sync_single_mbps = concurrent_sync_bandwidth(o.dir, d.single_files, o.chunk, std::min(o.seconds, 5));
    d.sync_rep_mbps = concurrent_sync_bandwidth(o.dir, d.rep_files, o.chunk, std::min(o.seconds, 5));
    std::printf("      disk, %d files each appending %d-byte writes + fdatasync: %.1f MB/s; %d files: %.1f MB/s\n",
                d.single_files, o.chunk, d.sync_single_mbps, d.rep_files, d.sync_rep_mbps);
  }
  return d;
}

void print_disk_results(const DiskReference& d, int chunk) {
  std::printf("  disk, sequential       %.1f MB/s (the faster of dd bs=1M conv=fdatasync, %.1f, and oflag=direct, %.1f)\n",
              d.dd_mbps, d.buffered_mbps, d.direct_mbps);
  std::printf("  disk, fdatasync each   %.1f MB/s (%d-byte writes)\n", d.sync_mbps, chunk);
}

}  // namespace sluice_bench
