// sluice-bench: publish throughput and ack latency, with the disk as the reference.
//
// It is a program, not a test: it prints figures. In one run it
//   1. measures the disk: sequential writes of --chunk bytes, each followed by fdatasync,
//      in the node's data directory (what a durable log can get from this disk), and its
//      sequential bandwidth (1 MiB writes, buffered and O_DIRECT; the faster is the
//      reference for the ratios);
//   2. starts a sluiced of its own (or uses --url), creates a stream, and publishes
//      --record-bytes records with ack leader over the binary batch API from
//      --connections concurrent connections for --seconds;
//   3. prints records/s, MB/s, ack latency p50/p99/p999 and the ratio to the disk figure;
//   4. unless --no-json: the keyless load as JSON publishes and the ratio JSON / binary;
//   5. unless --no-idempotence: the same load with one key per connection, without and
//      then with idempotent producers (producer_id + sequence), and their ratio.
// With --brokers N --replication-factor R (issue 10) the run is instead
//   1. the disk reference, as above;
//   2. one broker of its own, a stream with replication factor 1, ack leader;
//   3. N brokers of its own on loopback (a raft-meta cluster: broker 1 is the one
//      controller, brokers 2..N join it as broker-only nodes, metadata.controllers), a
//      stream with replication factor R, ack quorum, each connection publishing to the
//      LEADER of its shard (GET .../shards, GET /v1/brokers);
//   4. the two loads alternate in --rounds slices (both sets of processes stay up), so
//      drift of the disk or the machine hits both sides;
//   5. each round's figures and ratio, then both totals and the ratio replicated / single.
// Both loads have the same shape: connection c publishes to shard c % shards, every
// request one key that hashes to that shard (binary records carry no explicit shard).
// Design goals: at 1 KiB records, at least half the disk's fdatasync bandwidth (issue 2);
// idempotence costs at most 10% of the throughput (issue 3); replicated (RF 3, quorum)
// at least half the single-broker throughput (issue 10).
#include <Poco/Net/HTTPClientSession.h>
#include <Poco/Net/HTTPRequest.h>
#include <Poco/Net/HTTPResponse.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_measure.h"
#include "bench_process.h"
#include "publish_bench.h"
#include "json_phase.h"
#include "low_load.h"
#include "cache_bench.h"
#include "ws_latency.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace sluice_bench;

namespace {

void usage() {
  std::puts(R"(Usage: sluice-bench [options]

  --connections N     concurrent publishing connections (default 8)
  --seconds S         measured duration per phase (default 10)
  --record-bytes B    value size (default 1024)
  --batch N           records per request (default 64)
  --shards N          shards of the benchmark stream (default 4)
  --ack MODE          none or leader (default leader)
  --dir DIR           where the node's data and the disk probe live (default: a temp dir)
  --url URL           publish to a running node instead of starting one
  --sluiced PATH      sluiced binary (default: next to this program)
  --node-set KEY=VAL  a configuration key for every sluiced this program starts (the
                      single and the replicated runs alike); repeatable
  --no-json           skip the JSON phase: the keyless load as JSON publishes (values as
                      plain strings), printed beside it with the ratio JSON / binary
  --no-idempotence    skip the idempotent-producer comparison
  --no-websocket      skip the WebSocket phase: one subscriber on a one-shard stream while
                      one connection publishes one record at a time; prints the delivery
                      latency (publish sent -> frame received) p50/p99
  --no-fetch          skip the phase with consumers fetching at the tail while producers
                      publish (its fetch records/s is printed beside the publish figure)
  --brokers N         replicated run (issue 10), after the disk reference: the load
                      against one broker of its own (replication factor 1, ack leader),
                      then N brokers of its own on loopback (raft-meta: broker 1 is the
                      controller, 2..N join it) with ack quorum to each shard's leader;
                      prints both and the ratio replicated / single, beside what the
                      disk can sync with one file per shard and one per shard replica
                      (the ceiling that puts on the ratio). Replaces the
                      keyless/JSON/keyed/idempotent phases (ignores --ack, --url)
  --replication-factor R   replication factor of the replicated stream (default: N)
  --rounds N          the replicated run alternates its two loads (one broker, N brokers)
                      in N slices of --seconds/N each (default 5), so that the disk's and
                      the machine's drift hits both sides of the ratio; prints each
                      round's figures and ratio, then the totals
  --failover [N]      failover time (issue 11) instead of throughput: one controller and
                      three brokers of its own, a stream with replication factor 3; N times
                      (default 20) SIGKILL the shard's leader and time the kill to the
                      first acknowledged ack=quorum publish (sent to a surviving broker,
                      which forwards it), then restart it and wait until it is in sync
                      again; prints p50 and max
  --session-timeout-ms MS  broker.session_timeout_ms of that run (default 3000)
  --tls               publish throughput over HTTPS against plain HTTP, two sluiced of its
                      own, alternating rounds (sluice-bench --tls --help)
  --restart GB        restart time to /readyz after a clean stop and after SIGKILL of a
                      node holding GB GiB instead (issue 12; sluice-bench --restart 1 --help)
  --cache             cache puts and gets per second (1 and 16 clients) and Redis SET under
                      appendfsync always, with the ratio (issue 13; sluice-bench --cache --help)

Everything it starts is stopped at the end, also on failure or Ctrl-C (SIGTERM, then
SIGKILL after 20 s; 10 s on a signal). Progress goes to stderr, figures to stdout.
)");
}

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

struct HttpTarget {
  std::string host;
  int port;
};

HttpTarget parse_url(const std::string& url) {
  auto rest = url.substr(url.find("://") + 3);
  auto colon = rest.find(':');
  return {rest.substr(0, colon), std::stoi(rest.substr(colon + 1))};
}

}  // namespace

int run_restart_bench(int argc, char** argv);  // restart_bench.cc
namespace sluice_bench {
int run_tls_bench(int argc, char** argv);  // tls_bench.cc
}

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--restart") return run_restart_bench(argc, argv);
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--tls") return sluice_bench::run_tls_bench(argc, argv);
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--cache") return sluice_bench::run_cache_bench(argc, argv);
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) {
        usage();
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--connections") o.connections = std::stoi(val());
    else if (a == "--seconds") o.seconds = std::stoi(val());
    else if (a == "--record-bytes") o.record_bytes = std::stoi(val());
    else if (a == "--batch") o.batch_records = std::stoi(val());
    else if (a == "--shards") o.shards = std::stoi(val());
    else if (a == "--ack") o.ack = val();
    else if (a == "--dir") o.dir = val();
    else if (a == "--url") o.url = val();
    else if (a == "--sluiced") o.sluiced = val();
    else if (a == "--no-idempotence") o.idempotence = false;
    else if (a == "--no-fetch") o.fetch = false;
    else if (a == "--no-json") o.json = false;
    else if (a == "--no-websocket") o.websocket = false;
    else if (a == "--brokers") o.brokers = std::stoi(val());
    else if (a == "--replication-factor") o.replication_factor = std::stoi(val());
    else if (a == "--rounds") o.rounds = std::stoi(val());
    else if (a == "--failover") {
      o.failover_kills = 20;
      if (i + 1 < argc && argv[i + 1][0] != '-') o.failover_kills = std::stoi(argv[++i]);
    }
    else if (a == "--session-timeout-ms") o.session_timeout_ms = std::stoi(val());
    else if (a == "--node-set") node_settings().push_back(val());
    else if (a == "-h" || a == "--help") { usage(); return 0; }
    else { usage(); return 2; }
  }
  bool rf_given = false;
  for (int i = 1; i < argc; ++i) rf_given |= std::string(argv[i]) == "--replication-factor";
  if (o.brokers > 0 && !rf_given) o.replication_factor = o.brokers;
  bool rounds_given = false;
  for (int i = 1; i < argc; ++i) rounds_given |= std::string(argv[i]) == "--rounds";
  if (!rounds_given) o.rounds = std::min(o.rounds, o.seconds);
  if (o.brokers < 0 || o.brokers > 16 || o.replication_factor < 1 ||
      (o.brokers > 0 && o.replication_factor > o.brokers) || o.connections < 1 || o.connections > 256 ||
      o.seconds < 1 || o.seconds > 3600 || o.shards < 1 || o.shards > 256 || o.batch_records < 1 ||
      o.record_bytes < 0 || o.rounds < 1 || (o.brokers > 0 && o.rounds > o.seconds)) {
    std::fprintf(stderr, "sluice-bench: out of range (brokers 1..16, 1 <= replication factor <= brokers, "
                         "connections 1..256, seconds 1..3600, shards 1..256, rounds 1..seconds)\n");
    return 2;
  }
  if (o.dir.empty()) {
    std::string t = (fs::temp_directory_path() / "sluice-bench-XXXXXX").string();
    if (!mkdtemp(t.data())) return 1;
    o.dir = t;
  }
  fs::create_directories(o.dir);
  ::signal(SIGINT, on_signal);
  ::signal(SIGTERM, on_signal);
  ::signal(SIGPIPE, SIG_IGN);
  if (o.sluiced.empty())
    o.sluiced = (fs::read_symlink("/proc/self/exe").parent_path() / "sluiced").string();
  const int payload = o.batch_records * (8 + o.record_bytes);
  if (o.chunk == 0) o.chunk = payload;
  if (o.failover_kills > 0) {
    if (o.failover_kills > 1000 || o.session_timeout_ms < 100) {
      std::fprintf(stderr, "sluice-bench: --failover takes 1..1000 kills and --session-timeout-ms >= 100\n");
      return 2;
    }
    return run_failover(o);
  }

  const bool replicated = o.brokers > 0;
  const int nphases = replicated ? 3 : 6;
  if (replicated)
    std::printf("sluice-bench: %d connections, %d-byte records, %d records/request, %d shards, %d s; "
                "%d brokers, replication factor %d, ack quorum vs 1 broker, replication factor 1, ack leader\n",
                o.connections, o.record_bytes, o.batch_records, o.shards, o.seconds, o.brokers,
                o.replication_factor);
  else
    std::printf("sluice-bench: %d connections, %d-byte records, %d records/request, ack %s, %d s\n",
                o.connections, o.record_bytes, o.batch_records, o.ack.c_str(), o.seconds);
  std::printf("[1/%d] disk reference: %d-byte sequential writes + fdatasync in %s ...\n", nphases, o.chunk,
              o.dir.c_str());
  std::fflush(stdout);
  progress("phase 1: disk reference (%d s)", o.seconds);
  double disk_p50 = 0;
  const double disk_mbps = disk_sync_bandwidth(o.dir, o.chunk, o.seconds, &disk_p50);
  std::printf("      disk: %.1f MB/s (fdatasync p50 %.0f us)\n", disk_mbps, disk_p50);
  // The honest reference: the disk's sequential bandwidth, the faster of dd bs=1M
  // conv=fdatasync and the same with oflag=direct (the buffered one can be held back by new
  // page-cache pages on a VM: docs/benchmarks.md "Keyed publishing: the page cache").
  const double buffered_mbps = sluice_bench::dd_bandwidth(o.dir, std::min(o.seconds, 5));
  const double direct_mbps = sluice_bench::dd_bandwidth(o.dir, std::min(o.seconds, 5), 8192, true);
  const double dd_mbps = std::max(buffered_mbps, direct_mbps);
  std::printf("      disk, sequential (1 MiB writes, one fdatasync at the end, like dd conv=fdatasync): "
              "%.1f MB/s; with O_DIRECT (like dd oflag=direct): %.1f MB/s\n", buffered_mbps, direct_mbps);
  // The replicated run: what the disk can sync in each side's own pattern, one file per
  // shard (one broker) and one per shard replica (all brokers share this disk).
  double sync_single_mbps = 0, sync_rep_mbps = 0;
  const int single_files = o.shards, rep_files = o.shards * std::max(o.replication_factor, 1);
  if (replicated) {
    progress("phase 1: the disk's sync ceiling with %d and with %d files", single_files, rep_files);
    sync_single_mbps = sluice_bench::concurrent_sync_bandwidth(o.dir, single_files, o.chunk, std::min(o.seconds, 5));
    sync_rep_mbps = sluice_bench::concurrent_sync_bandwidth(o.dir, rep_files, o.chunk, std::min(o.seconds, 5));
    std::printf("      disk, %d files each appending %d-byte writes + fdatasync: %.1f MB/s; %d files: %.1f MB/s\n",
                single_files, o.chunk, sync_single_mbps, rep_files, sync_rep_mbps);
  }

  // Keyless records, sticky shard per request (issue 2), also as JSON (issue 12); keyed and
  // idempotent (issue 3): each connection a producer with its own key, so each request is
  // one batch on one shard, with and without producer_id/sequence, side by side.
  auto make_body = [&](const std::string* key) {
    return sluice_bench::binary_body(o.batch_records, o.record_bytes, key);
  };
  struct PhaseResult {
    double rps = 0, mbps = 0, p50 = 0, p99 = 0, p999 = 0;
    std::uint64_t errors = 0;
    double cpu_us = -1;    // server CPU (user + system, every server process) per record
    double client_cpu_us = -1;  // this program's CPU per record (clients, and any fetchers)
    double cores = 0;      // server + client CPU seconds per second: how busy the machine was
    double fetch_rps = -1; // records/s fetched by the tail consumers (if any)
    std::uint64_t fetch_errors = 0;
  };
  // One publishing connection: where it goes and what it sends.
  struct Conn {
    int port = 0;
    std::string path;  // without producer_id/sequence
    std::string body;
    int records = 0;   // records per request (0: --batch)
    const char* media = sluice_bench::kBatchMedia;
  };
  auto create_stream = [&](int port, const std::string& stream, int rf) {
    std::string out;
    std::string spec = R"({"name":")" + stream + R"(","shards":)" + std::to_string(o.shards);
    if (rf > 0) spec += R"(,"replication_factor":)" + std::to_string(rf);
    spec += "}";
    int st = http(port, "POST", "/v1/tenants/bench/namespaces/b/streams", spec, &out);
    if (st != 201 && st != 409) fail("create stream " + stream + ": " + std::to_string(st) + " " + out);
  };
  auto ensure_ns = [&](int port) {
    http(port, "POST", "/v1/tenants", R"({"name":"bench"})");
    http(port, "POST", "/v1/tenants/bench/namespaces", R"({"name":"b"})");
  };
  // One timed load: `pids` are the server processes whose CPU time counts;
  // `fetch_port`/`fetch_stream`: run tail consumers (one per shard) on that stream meanwhile.
  struct Slice {
    std::uint64_t records = 0, errors = 0, fetched = 0, fetch_errors = 0;
    double secs = 0, cpu_s = -1;  // cpu_s: server CPU seconds (-1: no pids)
    double client_cpu_s = 0;      // this program's CPU seconds (the load generator)
    bool fetching = false;
    std::vector<double> lat;  // µs per acknowledged request
    std::string first_error;
  };
  auto run_slice = [&](const char* title, const std::vector<Conn>& conns, bool idempotent,
                       const std::vector<pid_t>& pids, int seconds, int fetch_port = 0,
                       const std::string& fetch_stream = "") {
    progress("%s: %zu connections, %d s", title, conns.size(), seconds);
    std::atomic<bool> stop{false};
    const double cpu0 = pids.empty() ? -1 : sluice_bench::cpu_seconds(pids);
    const double client0 = sluice_bench::cpu_seconds(::getpid());
    std::unique_ptr<sluice_bench::TailFetchers> fetchers;
    if (fetch_port > 0)
      fetchers = std::make_unique<sluice_bench::TailFetchers>(
          fetch_port, "/v1/tenants/bench/namespaces/b/streams/" + fetch_stream + "/shards/", o.shards, stop);
    std::atomic<std::uint64_t> records{0}, errors{0};
    std::mutex lat_mu;
    Slice r;
    std::vector<std::thread> threads;
    const auto t_start = Clock::now();
    for (std::size_t c = 0; c < conns.size(); ++c) {
      threads.emplace_back([&, c] {
        const Conn& cn = conns[c];
        std::vector<double> lat;
        lat.reserve(1 << 16);
        Poco::Net::HTTPClientSession s("127.0.0.1", cn.port);
        s.setKeepAlive(true);
        s.setTimeout(Poco::Timespan(30, 0));
        std::uint64_t seq = 0;
        while (!stop.load(std::memory_order_relaxed)) {
          const std::string p = idempotent ? cn.path + "&producer_id=" + std::to_string(c + 1) +
                                                 "&sequence=" + std::to_string(seq)
                                           : cn.path;
          const auto t0 = Clock::now();
          int st = 0;
          std::string out;
          try {
            st = call(s, "POST", p, cn.body, cn.media, &out);
          } catch (const std::exception& e) {
            out = e.what();
            s.reset();
          }
          if (st == 200) {
            ++seq;
            lat.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
            records.fetch_add(cn.records ? cn.records : o.batch_records, std::memory_order_relaxed);
          } else {
            if (errors.fetch_add(1, std::memory_order_relaxed) == 0) {
              std::lock_guard lk(lat_mu);
              r.first_error = std::to_string(st) + " " + out.substr(0, 300);
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(10));  // no hot loop on errors
          }
        }
        std::lock_guard lk(lat_mu);
        r.lat.insert(r.lat.end(), lat.begin(), lat.end());
      });
    }
    for (int sec = 1; sec <= seconds; ++sec) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      std::printf("      %2d s: %llu records\n", sec, static_cast<unsigned long long>(records.load()));
      std::fflush(stdout);
    }
    stop = true;
    for (auto& t : threads) t.join();
    if (fetchers) fetchers->join();
    r.secs = std::chrono::duration<double>(Clock::now() - t_start).count();
    const double cpu1 = pids.empty() ? -1 : sluice_bench::cpu_seconds(pids);
    if (cpu0 >= 0 && cpu1 >= 0) r.cpu_s = cpu1 - cpu0;
    r.client_cpu_s = sluice_bench::cpu_seconds(::getpid()) - client0;
    if (fetchers) {
      r.fetching = true;
      r.fetched = fetchers->records();
      r.fetch_errors = fetchers->errors();
    }
    r.records = records.load();
    r.errors = errors.load();
    return r;
  };
  // The figures of one or more slices of the same load, taken together.
  auto summarize = [&](const char* title, const std::vector<Slice>& slices) {
    PhaseResult r;
    double secs = 0, cpu_s = 0, client_cpu_s = 0;
    bool cpu_known = true, fetching = false;
    std::uint64_t records = 0, fetched = 0;
    std::vector<double> lat;
    std::string first_error;
    for (const Slice& sl : slices) {
      secs += sl.secs;
      records += sl.records;
      r.errors += sl.errors;
      cpu_known &= sl.cpu_s >= 0;
      cpu_s += sl.cpu_s;
      client_cpu_s += sl.client_cpu_s;
      fetching |= sl.fetching;
      fetched += sl.fetched;
      r.fetch_errors += sl.fetch_errors;
      lat.insert(lat.end(), sl.lat.begin(), sl.lat.end());
      if (first_error.empty()) first_error = sl.first_error;
    }
    if (cpu_known && records > 0) r.cpu_us = cpu_s * 1e6 / records;
    if (records > 0) r.client_cpu_us = client_cpu_s * 1e6 / records;
    if (secs > 0) r.cores = ((cpu_known ? cpu_s : 0) + client_cpu_s) / secs;
    if (fetching) r.fetch_rps = fetched / secs;
    r.rps = records / secs;
    r.mbps = r.rps * o.record_bytes / 1e6;
    r.p50 = percentile(lat, 0.50) / 1000;
    r.p99 = percentile(lat, 0.99) / 1000;
    r.p999 = percentile(lat, 0.999) / 1000;
    if (r.errors) progress("%s: %llu failed requests, the first: %s", title,
                           static_cast<unsigned long long>(r.errors), first_error.c_str());
    return r;
  };
  auto run_load = [&](const char* title, const std::vector<Conn>& conns, bool idempotent,
                      const std::vector<pid_t>& pids = {}, int fetch_port = 0,
                      const std::string& fetch_stream = "") {
    std::printf("%s ...\n", title);
    std::fflush(stdout);
    return summarize(title, {run_slice(title, conns, idempotent, pids, o.seconds, fetch_port, fetch_stream)});
  };
  auto print = [&](const char* name, const PhaseResult& r) {
    std::printf("  %-22s %9.0f rec/s %7.1f MB/s  p50 %6.2f ms  p99 %6.2f ms  p999 %6.2f ms  failed %llu",
                name, r.rps, r.mbps, r.p50, r.p99, r.p999, static_cast<unsigned long long>(r.errors));
    if (r.cpu_us >= 0) std::printf("  server CPU %.2f us/record", r.cpu_us);
    if (r.client_cpu_us >= 0) std::printf("  client CPU %.2f us/record  cores busy %.2f", r.client_cpu_us, r.cores);
    std::printf("\n");
    if (r.fetch_rps >= 0)
      std::printf("  %-22s %9.0f rec/s fetched at the tail beside it (fetch / publish %.2f, failed %llu)\n", "",
                  r.fetch_rps, r.rps > 0 ? r.fetch_rps / r.rps : 0, static_cast<unsigned long long>(r.fetch_errors));
  };
  const std::string streams_path = "/v1/tenants/bench/namespaces/b/streams/";
  // The same shape for both issue-10 loads: connection c -> shard c % shards, one key
  // hashing there; port_of(shard) is where that shard is published (its leader).
  auto shard_conns = [&](const std::string& stream, const std::string& ack, const std::vector<int>& port_of) {
    std::vector<Conn> conns;
    for (int c = 0; c < o.connections; ++c) {
      const int shard = c % o.shards;
      const std::string key = key_for_shard(c, shard, o.shards);
      conns.push_back({port_of[shard], streams_path + stream + "/records?ack=" + ack, make_body(&key)});
    }
    return conns;
  };

  if (!replicated) {
    pid_t child = -1;
    int port = 0;
    if (o.url.empty()) {
      const int http_port = free_port(), raft = free_port(), rpc = free_port();
      o.url = "http://127.0.0.1:" + std::to_string(http_port);
      port = http_port;
      progress("starting sluiced on port %d (log %s/sluiced.log)", http_port, o.dir.c_str());
      child = spawn_sluiced(o.sluiced, o.dir + "/sluiced.log",
                            {"data.dir=" + o.dir + "/data", "http.port=" + std::to_string(http_port),
                             "raft.address=127.0.0.1:" + std::to_string(raft),
                             "metadata.rpc_address=127.0.0.1:" + std::to_string(rpc), "http.threads=2",
                               "transport.address=127.0.0.1:" + std::to_string(free_port())});
      wait_ready("sluiced", child, port, o.dir + "/sluiced.log", 60);
    } else {
      const HttpTarget t = parse_url(o.url);
      if (t.host != "127.0.0.1" && t.host != "localhost") fail("--url must be on loopback (127.0.0.1)");
      port = t.port;
      const auto deadline = Clock::now() + std::chrono::seconds(60);
      while (http(port, "GET", "/readyz") != 200) {
        if (Clock::now() > deadline) fail("node at " + o.url + " did not become ready");
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
    ensure_ns(port);
    const std::vector<pid_t> pids = child > 0 ? std::vector<pid_t>{child} : std::vector<pid_t>{};
    auto phase = [&](const char* title, const std::string& stream, bool keyed, bool idempotent,
                     bool fetch = false, bool json = false) {
      create_stream(port, stream, 0);
      std::vector<Conn> conns;
      for (int c = 0; c < o.connections; ++c) {
        const std::string key = "producer-" + std::to_string(c);
        conns.push_back({port, streams_path + stream + "/records?ack=" + o.ack,
                         json ? sluice_bench::json_body(o.batch_records, o.record_bytes) : make_body(keyed ? &key : nullptr),
                         0, json ? sluice_bench::kJsonMedia : sluice_bench::kBatchMedia});
      }
      return run_load(title, conns, idempotent, pids, fetch ? port : 0, stream);
    };
    const PhaseResult plain = phase("[2/6] keyless, sticky shards", "pub", false, false);
    PhaseResult js, keyed, idem, fetched;
    if (o.json) js = phase("[3/6] the same keyless load as JSON publishes", "pub-json", false, false, false, true);
    if (o.idempotence) {
      keyed = phase("[4/6] one key per connection", "pub-keyed", true, false);
      idem = phase("[5/6] the same, idempotent producers", "pub-idem", true, true);
    }
    if (o.fetch)
      fetched = phase("[6/6] keyless, with one consumer per shard fetching at the tail", "pub-fetch", false,
                      false, true);
    // Low load: one connection, one record per request, against the disk's smallest
    // durable write (4 KiB + fdatasync), alternating in one-second slices (low_load.h).
    create_stream(port, "pub-one", 0);
    std::printf("[low load] 1 connection, 1 record per request, alternating with 4 KiB + fdatasync ...\n");
    std::fflush(stdout);
    const auto low = sluice_bench::run_low_load(
        port, streams_path + "pub-one/records?ack=" + o.ack, sluice_bench::binary_body(1, o.record_bytes, nullptr),
        sluice_bench::kBatchMedia, o.dir, std::min(o.seconds, 10), pids);
    if (low.errors) progress("[low load]: %llu failed requests, the first: %s",
                             static_cast<unsigned long long>(low.errors), low.first_error.c_str());
    sluice_bench::WsLatencyResult wsl;
    if (o.websocket) {
      // One shard, so the one subscriber sees every record.
      std::string out;
      const int st = http(port, "POST", "/v1/tenants/bench/namespaces/b/streams", R"({"name":"pub-ws","shards":1})", &out);
      if (st != 201 && st != 409) fail("create stream pub-ws: " + std::to_string(st) + " " + out);
      std::printf("[websocket] 1 subscriber, 1 publisher of 1 record per request (JSON, ack %s) ...\n", o.ack.c_str());
      std::fflush(stdout);
      wsl = sluice_bench::run_ws_latency(port, streams_path + "pub-ws/shards/0",
                                         streams_path + "pub-ws/records?ack=" + o.ack, std::min(o.seconds, 5));
      if (wsl.errors || !wsl.first_error.empty())
        progress("[websocket]: %llu failed publishes; %s", static_cast<unsigned long long>(wsl.errors),
                 wsl.first_error.c_str());
    }
    std::printf("\nresults (%d-byte records, %d records/request, ack %s, %d connections)\n", o.record_bytes,
                o.batch_records, o.ack.c_str(), o.connections);
    print("keyless", plain);
    if (o.json) {
      print("keyless, JSON", js);
      sluice_bench::print_json_vs_binary({plain.rps, plain.mbps, plain.p50, plain.p99, plain.cpu_us},
                                         {js.rps, js.mbps, js.p50, js.p99, js.cpu_us});
    }
    std::printf("  disk, sequential       %.1f MB/s (the faster of dd bs=1M conv=fdatasync, %.1f, and oflag=direct, %.1f)\n",
                dd_mbps, buffered_mbps, direct_mbps);
    std::printf("  disk, fdatasync each   %.1f MB/s (%d-byte writes)\n", disk_mbps, o.chunk);
    std::printf("  publish / sequential   %.2f  (target >= 0.60; against the buffered dd alone %.2f)\n",
                dd_mbps > 0 ? plain.mbps / dd_mbps : 0, buffered_mbps > 0 ? plain.mbps / buffered_mbps : 0);
    if (plain.cpu_us >= 0)
      std::printf("  server CPU per record  %.2f us  (target <= 3)\n", plain.cpu_us);
    if (o.idempotence) {
      print("keyed", keyed);
      print("keyed, idempotent", idem);
      std::printf("  idempotent / plain     %.2f  (design goal >= 0.90)\n", keyed.rps > 0 ? idem.rps / keyed.rps : 0);
    }
    if (o.fetch) print("keyless + tail fetch", fetched);
    std::printf("  %-22s %9.0f rec/s  p50 %6.2f ms  p99 %6.2f ms  p999 %6.2f ms  failed %llu", "1 record per request",
                low.rps, low.p50, low.p99, low.p999, static_cast<unsigned long long>(low.errors));
    if (low.cpu_us >= 0) std::printf("  server CPU %.2f us/record", low.cpu_us);
    std::printf("\n  disk, 4 KiB + fdatasync p50 %.2f ms, p99 %.2f ms (in the same slices); low-load p99 / that %.2f"
                "  (target <= 1.5)\n",
                low.probe_p50, low.probe_p99, low.probe_p99 > 0 ? low.p99 / low.probe_p99 : 0);
    if (o.websocket)
      std::printf("  websocket delivery     p50 %6.2f ms  p99 %6.2f ms  max %6.2f ms  (%llu of %llu published records "
                  "received; publish sent -> frame received)\n",
                  wsl.p50, wsl.p99, wsl.max, static_cast<unsigned long long>(wsl.delivered),
                  static_cast<unsigned long long>(wsl.published));
    if (child > 0) {
      progress("stopping sluiced");
      stop_children();
      std::error_code ec;
      fs::remove_all(o.dir + "/data", ec);
    }
    return 0;
  }

  // --- issue 10: one broker with RF 1 against N brokers with RF R ----------------------
  // Both sets run side by side; their loads alternate in --rounds slices (after phase 3).
  // Phase 2: the single-broker reference (default roles: its own one-member raft-meta).
  const std::string single_dir = o.dir + "/single";
  pid_t single_pid = -1;
  std::vector<Conn> single_conns;
  {
    const std::string& d = single_dir;
    std::error_code ec;
    fs::remove_all(d, ec);
    fs::create_directories(d);
    const int http_port = free_port(), raft = free_port(), rpc = free_port();
    progress("phase 2: starting 1 broker on port %d (log %s/sluiced.log)", http_port, d.c_str());
    pid_t pid = spawn_sluiced(o.sluiced, d + "/sluiced.log",
                              {"data.dir=" + d + "/data", "http.port=" + std::to_string(http_port),
                               "raft.address=127.0.0.1:" + std::to_string(raft),
                               "metadata.rpc_address=127.0.0.1:" + std::to_string(rpc), "http.threads=2",
                               "transport.address=127.0.0.1:" + std::to_string(free_port())});
    wait_ready("sluiced (single)", pid, http_port, d + "/sluiced.log", 60);
    ensure_ns(http_port);
    create_stream(http_port, "single", 1);
    single_pid = pid;
    single_conns = shard_conns("single", "leader", std::vector<int>(o.shards, http_port));
  }

  // Phase 3: N brokers. Metadata: raft-meta, broker 1 its only controller (default roles),
  // brokers 2..N broker-only nodes with metadata.controllers = broker 1's metadata RPC.
  PhaseResult single, rep;
  {
    const int n = o.brokers;
    struct B {
      int id, http, raft, rpc, peer;
      std::string dir;
      pid_t pid;
    };
    std::vector<B> bs;
    std::string peers;
    for (int i = 1; i <= n; ++i) {
      B b{i, free_port(), free_port(), free_port(), free_port(), o.dir + "/broker-" + std::to_string(i), -1};
      std::error_code ec;
      fs::remove_all(b.dir, ec);
      fs::create_directories(b.dir);
      peers += (peers.empty() ? "" : ",") + std::to_string(i) + "=127.0.0.1:" + std::to_string(b.peer);
      bs.push_back(b);
    }
    for (auto& b : bs) {
      std::vector<std::string> set{"node.id=" + std::to_string(b.id), "data.dir=" + b.dir + "/data",
                                   "http.port=" + std::to_string(b.http),
                                   "raft.address=127.0.0.1:" + std::to_string(b.raft),
                                   "metadata.rpc_address=127.0.0.1:" + std::to_string(b.rpc),
                                   "transport.address=127.0.0.1:" + std::to_string(b.peer),
                                   "transport.peers=" + peers, "http.threads=2",
                                   "metadata.timeout_ms=15000", "metadata.start_timeout_ms=60000"};
      if (b.id != 1) {
        set.push_back("node.roles=broker");
        set.push_back("metadata.controllers=127.0.0.1:" + std::to_string(bs[0].rpc));
      }
      progress("phase 3: starting broker %d/%d (http %d, transport %d, log %s/sluiced.log)", b.id, n, b.http,
               b.peer, b.dir.c_str());
      b.pid = spawn_sluiced(o.sluiced, b.dir + "/sluiced.log", set);
      if (b.id == 1) wait_ready("broker 1", b.pid, b.http, b.dir + "/sluiced.log", 60);
    }
    for (auto& b : bs)
      wait_ready(("broker " + std::to_string(b.id)).c_str(), b.pid, b.http, b.dir + "/sluiced.log", 60);
    const int p1 = bs[0].http;
    progress("phase 3: waiting until %d brokers are registered and live (GET /v1/brokers)", n);
    std::map<long long, int> http_of;  // broker id -> HTTP port, from GET /v1/brokers
    {
      const auto deadline = Clock::now() + std::chrono::seconds(60);
      for (;;) {
        std::string out;
        if (http(p1, "GET", "/v1/brokers", "", &out) == 200) {
          const auto ids = ints_of(out, "id");
          const auto addrs = strings_of(out, "address");
          int live = 0;
          for (auto at = out.find("\"live\":true"); at != std::string::npos; at = out.find("\"live\":true", at + 1))
            ++live;
          if (static_cast<int>(ids.size()) == n && static_cast<int>(addrs.size()) == n && live == n) {
            for (int i = 0; i < n; ++i) {
              const auto colon = addrs[i].rfind(':');
              http_of[ids[i]] = colon == std::string::npos ? 0 : std::atoi(addrs[i].c_str() + colon + 1);
            }
            progress("phase 3: brokers: %s", out.c_str());
            break;
          }
        }
        if (Clock::now() > deadline) fail("not all " + std::to_string(n) + " brokers registered in 60 s: " + out);
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
    }
    ensure_ns(p1);
    create_stream(p1, "rep", o.replication_factor);
    // Leaders, then a first quorum publish through each of them (every replica has joined).
    progress("phase 3: waiting for the leaders of %d shards and a first quorum ack on each", o.shards);
    std::vector<int> port_of(o.shards, 0);
    {
      const auto deadline = Clock::now() + std::chrono::seconds(60);
      std::string out;
      for (;;) {
        if (http(p1, "GET", streams_path + "rep/shards", "", &out) == 200) {
          const auto leaders = ints_of(out, "leader");
          if (static_cast<int>(leaders.size()) == o.shards &&
              std::all_of(leaders.begin(), leaders.end(), [&](long long l) { return http_of.count(l) && http_of[l] > 0; })) {
            // Each shard object has "shard" then "leader"; index by "shard" when it is there.
            const auto ids = ints_of(out, "shard");
            for (int s = 0; s < o.shards; ++s) {
              const long long idx = ids.size() == leaders.size() ? ids[s] : s;
              if (idx >= 0 && idx < o.shards) port_of[idx] = http_of[leaders[s]];
            }
            if (std::all_of(port_of.begin(), port_of.end(), [](int p) { return p > 0; })) break;
          }
        }
        if (Clock::now() > deadline) fail("shards without a known leader after 60 s: " + out);
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
      std::string lead;
      for (int s = 0; s < o.shards; ++s) lead += " " + std::to_string(s) + "->" + std::to_string(ints_of(out, "leader")[s]);
      progress("phase 3: shard -> leader:%s", lead.c_str());
      for (int s = 0; s < o.shards; ++s) {
        const std::string key = key_for_shard(0, s, o.shards);
        const std::string body = make_body(&key);
        for (;;) {
          std::string r;
          int st = 0;
          try {
            Poco::Net::HTTPClientSession ss("127.0.0.1", port_of[s]);
            ss.setTimeout(Poco::Timespan(30, 0));
            st = call(ss, "POST", streams_path + "rep/records?ack=quorum", body, "application/vnd.sluice.batch", &r);
          } catch (...) {
          }
          if (st == 200) break;
          if (Clock::now() > deadline) fail("no quorum ack on shard " + std::to_string(s) + ": " + std::to_string(st) + " " + r);
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
      }
    }
    const std::string title = "[3/3] " + std::to_string(n) + " brokers, replication factor " +
                              std::to_string(o.replication_factor) + ", ack quorum, to each shard's leader";
    std::vector<pid_t> pids;
    for (const auto& b : bs) pids.push_back(b.pid);
    const auto rep_conns = shard_conns("rep", "quorum", port_of);
    const char* single_title = "[2/3] 1 broker, replication factor 1, ack leader";
    const int slice = o.seconds / o.rounds;
    std::vector<Slice> singles, reps;
    std::vector<std::string> round_lines;
    for (int r = 1; r <= o.rounds; ++r) {
      std::printf("round %d/%d: %s ...\n", r, o.rounds, single_title);
      std::fflush(stdout);
      singles.push_back(run_slice(single_title, single_conns, false, {single_pid}, slice));
      std::printf("round %d/%d: %s ...\n", r, o.rounds, title.c_str());
      std::fflush(stdout);
      reps.push_back(run_slice(title.c_str(), rep_conns, false, pids, slice));
      const double a = singles.back().records / singles.back().secs, b = reps.back().records / reps.back().secs;
      char line[160];
      std::snprintf(line, sizeof line, "  round %2d: 1 broker %9.0f rec/s, %d brokers %9.0f rec/s, ratio %.2f", r, a,
                    n, b, a > 0 ? b / a : 0);
      round_lines.push_back(line);
    }
    single = summarize(single_title, singles);
    rep = summarize(title.c_str(), reps);
    std::printf("\nrounds (%d s of each load per round, alternating)\n", slice);
    for (const auto& l : round_lines) std::printf("%s\n", l.c_str());
    progress("stopping the single broker and %d brokers", n);
    stop_children();
    std::error_code ec;
    fs::remove_all(single_dir + "/data", ec);
    for (auto& b : bs) fs::remove_all(b.dir + "/data", ec);
  }

  std::printf("\nresults (%d-byte records, %d records/request, %d connections, %d shards, %d s each in %d rounds)\n",
              o.record_bytes, o.batch_records, o.connections, o.shards, (o.seconds / o.rounds) * o.rounds, o.rounds);
  print("1 broker, RF 1, leader", single);
  const std::string name = std::to_string(o.brokers) + " brokers, RF " + std::to_string(o.replication_factor) + ", quorum";
  print(name.c_str(), rep);
  std::printf("  disk, sequential       %.1f MB/s (the faster of dd bs=1M conv=fdatasync, %.1f, and oflag=direct, %.1f)\n",
              dd_mbps, buffered_mbps, direct_mbps);
  std::printf("  disk, fdatasync each   %.1f MB/s (%d-byte writes)\n", disk_mbps, o.chunk);
  std::printf("  single / sequential    %.2f\n", dd_mbps > 0 ? single.mbps / dd_mbps : 0);
  // All replicas share this machine's one disk: RF copies of every byte.
  std::printf("  replicated x RF / sequential %.2f  (the disk's share the replicas use)\n",
              dd_mbps > 0 ? rep.mbps * o.replication_factor / dd_mbps : 0);
  std::printf("  disk, %2d files synced  %.1f MB/s (each appending %d-byte writes + fdatasync: one file per shard)\n",
              single_files, sync_single_mbps, o.chunk);
  std::printf("  disk, %2d files synced  %.1f MB/s (the same, one file per shard replica)\n", rep_files, sync_rep_mbps);
  std::printf("  single / %d-file sync   %.2f\n", single_files, sync_single_mbps > 0 ? single.mbps / sync_single_mbps : 0);
  std::printf("  replicated x RF / %d-file sync %.2f  (1.00: the replicas sync all the disk can in their pattern)\n",
              rep_files, sync_rep_mbps > 0 ? rep.mbps * o.replication_factor / sync_rep_mbps : 0);
  // If the replicas used the whole of that, the ratio could reach this and no more.
  std::printf("  disk's ceiling on replicated / single %.2f  (%d-file sync / RF / single)\n",
              single.mbps > 0 ? sync_rep_mbps / o.replication_factor / single.mbps : 0, rep_files);
  std::printf("  replicated / single    %.2f  (design goal >= 0.50)\n", single.rps > 0 ? rep.rps / single.rps : 0);
  return 0;
}
