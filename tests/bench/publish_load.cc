#include "publish_load.h"

#include <Poco/Net/HTTPClientSession.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <thread>

#include "bench_measure.h"
#include "bench_process.h"

namespace sluice_bench {
namespace {

using Clock = std::chrono::steady_clock;

// What the connections of one slice share with it.
struct SliceShared {
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> records{0}, errors{0};
  std::mutex lat_mu;  // guards the slice's lat and first_error
};

// Connection number `c` publishes its body, one request at a time, until sh.stop; its
// latencies go into r.lat at the end, the slice's first failure into r.first_error.
void publish_until_stopped(const Conn& cn, std::size_t c, bool idempotent, SliceShared& sh, Slice& r) {
  std::vector<double> lat;
  lat.reserve(1 << 16);
  Poco::Net::HTTPClientSession s("127.0.0.1", cn.port);
  s.setKeepAlive(true);
  s.setTimeout(Poco::Timespan(30, 0));
  std::uint64_t seq = 0;
  while (!sh.stop.load(std::memory_order_relaxed)) {
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
      sh.records.fetch_add(cn.records, std::memory_order_relaxed);
    } else {
      if (sh.errors.fetch_add(1, std::memory_order_relaxed) == 0) {
        std::lock_guard lk(sh.lat_mu);
        r.first_error = std::to_string(st) + " " + out.substr(0, 300);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // no hot loop on errors
    }
  }
  std::lock_guard lk(sh.lat_mu);
  r.lat.insert(r.lat.end(), lat.begin(), lat.end());
}

}  // namespace

void ensure_namespace(int port) {
  http(port, "POST", "/v1/tenants", R"({"name":"bench"})");
  http(port, "POST", "/v1/tenants/bench/namespaces", R"({"name":"b"})");
}

void create_stream(int port, const std::string& stream, int shards, int replication_factor) {
  std::string out;
  std::string spec = R"({"name":")" + stream + R"(","shards":)" + std::to_string(shards);
  if (replication_factor > 0) spec += R"(,"replication_factor":)" + std::to_string(replication_factor);
  spec += "}";
  int st = http(port, "POST", "/v1/tenants/bench/namespaces/b/streams", spec, &out);
  if (st != 201 && st != 409) fail("create stream " + stream + ": " + std::to_string(st) + " " + out);
}

Slice run_slice(const char* title, const std::vector<Conn>& conns, bool idempotent,
                const std::vector<pid_t>& pids, int seconds, const TailFetch& fetch) {
  progress("%s: %zu connections, %d s", title, conns.size(), seconds);
  SliceShared sh;
  const double cpu0 = pids.empty() ? -1 : cpu_seconds(pids);
  const double client0 = cpu_seconds(::getpid());
  std::unique_ptr<TailFetchers> fetchers;
  if (fetch.port > 0)
    fetchers = std::make_unique<TailFetchers>(fetch.port, kStreamsPath + fetch.stream + "/shards/", fetch.shards,
                                              sh.stop);
  Slice r;
  std::vector<std::thread> threads;
  const auto t_start = Clock::now();
  for (std::size_t c = 0; c < conns.size(); ++c)
    threads.emplace_back([&, c] { publish_until_stopped(conns[c], c, idempotent, sh, r); });
  for (int sec = 1; sec <= seconds; ++sec) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    std::printf("      %2d s: %llu records\n", sec, static_cast<unsigned long long>(sh.records.load()));
    std::fflush(stdout);
  }
  sh.stop = true;
  for (auto& t : threads) t.join();
  if (fetchers) fetchers->join();
  r.secs = std::chrono::duration<double>(Clock::now() - t_start).count();
  const double cpu1 = pids.empty() ? -1 : cpu_seconds(pids);
  if (cpu0 >= 0 && cpu1 >= 0) r.cpu_s = cpu1 - cpu0;
  r.client_cpu_s = cpu_seconds(::getpid()) - client0;
  if (fetchers) {
    r.fetching = true;
    r.fetched = fetchers->records();
    r.fetch_errors = fetchers->errors();
  }
  r.records = sh.records.load();
  r.errors = sh.errors.load();
  return r;
}

PhaseResult summarize(const char* title, const std::vector<Slice>& slices, int record_bytes) {
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
  r.mbps = r.rps * record_bytes / 1e6;
  r.p50 = percentile(lat, 0.50) / 1000;
  r.p99 = percentile(lat, 0.99) / 1000;
  r.p999 = percentile(lat, 0.999) / 1000;
  if (r.errors) progress("%s: %llu failed requests, the first: %s", title,
                         static_cast<unsigned long long>(r.errors), first_error.c_str());
  return r;
}

void print_result(const char* name, const PhaseResult& r) {
  std::printf("  %-22s %9.0f rec/s %7.1f MB/s  p50 %6.2f ms  p99 %6.2f ms  p999 %6.2f ms  failed %llu",
              name, r.rps, r.mbps, r.p50, r.p99, r.p999, static_cast<unsigned long long>(r.errors));
  if (r.cpu_us >= 0) std::printf("  server CPU %.2f us/record", r.cpu_us);
  if (r.client_cpu_us >= 0) std::printf("  client CPU %.2f us/record  cores busy %.2f", r.client_cpu_us, r.cores);
  std::printf("\n");
  if (r.fetch_rps >= 0)
    std::printf("  %-22s %9.0f rec/s fetched at the tail beside it (fetch / publish %.2f, failed %llu)\n", "",
                r.fetch_rps, r.rps > 0 ? r.fetch_rps / r.rps : 0, static_cast<unsigned long long>(r.fetch_errors));
}

}  // namespace sluice_bench
