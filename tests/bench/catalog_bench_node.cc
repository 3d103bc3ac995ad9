// sluice-catalog-bench --tombstones N (catalog_bench_node.h).
#include "catalog_bench_node.h"
#include "bench_process.h"

#include <Poco/Net/HTTPClientSession.h>
#include <Poco/Net/HTTPRequest.h>
#include <Poco/Net/HTTPResponse.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

namespace sluice::bench {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

using sluice_bench::free_port;

namespace {

constexpr double kPairsTarget = 500;             // pairs/s with 16 clients (issue 12)
constexpr double kTombstoneStartTarget = 1.0;    // s for 100,000 tombstones (issue 12)
constexpr long kTombstoneTargetCount = 100000;

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  const std::size_t i = std::min(v.size() - 1, static_cast<std::size_t>(p * v.size()));
  std::nth_element(v.begin(), v.begin() + i, v.end());
  return v[i];
}

int call(Poco::Net::HTTPClientSession& s, const std::string& method, const std::string& path,
         const std::string& body, std::string* out = nullptr) {
  return sluice_bench::call(s, method, path, body, "application/json", out);
}

// One request on a fresh connection; 0 when it could not be made.
int http(int port, const std::string& method, const std::string& path, const std::string& body = "",
         std::string* out = nullptr) {
  try {
    Poco::Net::HTTPClientSession s("127.0.0.1", static_cast<Poco::UInt16>(port));
    s.setTimeout(Poco::Timespan(60, 0));
    return call(s, method, path, body, out);
  } catch (...) {
    return 0;
  }
}

struct Node {
  std::string sluiced, dir;
  int http_port = 0, raft_port = 0, rpc_port = 0, transport_port = 0;
  pid_t pid = -1;
  int starts = 0;

  // fork + exec, then poll /readyz every 5 ms: the seconds from fork to the first 200.
  double start() {
    const std::string log = dir + "/sluiced-" + std::to_string(starts++) + ".log";
    std::vector<std::string> args{"sluiced",
                                  "--set", "data.dir=" + dir + "/data",
                                  "--set", "http.port=" + std::to_string(http_port),
                                  "--set", "raft.address=127.0.0.1:" + std::to_string(raft_port),
                                  "--set", "metadata.rpc_address=127.0.0.1:" + std::to_string(rpc_port),
                                  "--set", "transport.address=127.0.0.1:" + std::to_string(transport_port)};
    const auto t0 = Clock::now();
    pid = ::fork();
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(sluiced.c_str(), argv.data());
      ::_exit(127);
    }
    while (http(http_port, "GET", "/readyz") != 200) {
      if (::waitpid(pid, nullptr, WNOHANG) == pid) {
        std::fprintf(stderr, "sluiced exited during start; see %s\n", log.c_str());
        pid = -1;
        return -1;
      }
      if (Clock::now() - t0 > std::chrono::minutes(10)) {
        std::fprintf(stderr, "sluiced not ready after 10 minutes; see %s\n", log.c_str());
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }

  // SIGTERM, SIGKILL after 60 s.
  void stop() {
    if (pid <= 0) return;
    ::kill(pid, SIGTERM);
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    while (::waitpid(pid, nullptr, WNOHANG) == 0) {
      if (Clock::now() > deadline) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    pid = -1;
  }
};

struct PairsResult {
  double pairs_per_s = 0, create_p50 = 0, create_p99 = 0, delete_p50 = 0, delete_p99 = 0;
  long errors = 0;
  std::string first_error;
};

// `clients` threads, each with one keep-alive connection, POST + DELETE unique names until
// `total` pairs are done.
PairsResult run_pairs(int port, int clients, long total) {
  std::atomic<long> next{0}, errors{0};
  std::mutex mu;
  std::vector<double> creates, deletes;
  std::string first_error;
  std::vector<std::thread> ts;
  const std::string base = "/v1/tenants/bench/namespaces/b/streams";
  const auto t0 = Clock::now();
  for (int c = 0; c < clients; ++c) {
    ts.emplace_back([&] {
      std::vector<double> cr, de;
      Poco::Net::HTTPClientSession s("127.0.0.1", static_cast<Poco::UInt16>(port));
      s.setTimeout(Poco::Timespan(60, 0));
      s.setKeepAlive(true);
      for (long i; (i = next.fetch_add(1)) < total;) {
        const std::string name = "s" + std::to_string(i);
        std::string out;
        auto fail = [&](const std::string& what) {
          errors.fetch_add(1);
          std::lock_guard lk(mu);
          if (first_error.empty()) first_error = what;
        };
        try {
          auto b = Clock::now();
          int st = call(s, "POST", base, R"({"name":")" + name + R"(","shards":1})", &out);
          if (st != 201) {
            fail("create " + name + ": " + std::to_string(st) + " " + out);
            continue;
          }
          auto m = Clock::now();
          cr.push_back(std::chrono::duration<double, std::milli>(m - b).count());
          st = call(s, "DELETE", base + "/" + name, "", &out);
          if (st != 200 && st != 204) {
            fail("delete " + name + ": " + std::to_string(st) + " " + out);
            continue;
          }
          de.push_back(std::chrono::duration<double, std::milli>(Clock::now() - m).count());
        } catch (const std::exception& e) {
          fail(std::string("HTTP: ") + e.what());
          s.reset();
        }
      }
      std::lock_guard lk(mu);
      creates.insert(creates.end(), cr.begin(), cr.end());
      deletes.insert(deletes.end(), de.begin(), de.end());
    });
  }
  for (auto& t : ts) t.join();
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  PairsResult r;
  r.pairs_per_s = static_cast<double>(deletes.size()) / secs;
  r.create_p50 = pct(creates, 0.5);
  r.create_p99 = pct(creates, 0.99);
  r.delete_p50 = pct(deletes, 0.5);
  r.delete_p99 = pct(deletes, 0.99);
  r.errors = errors.load();
  r.first_error = first_error;
  return r;
}

const char* verdict(bool met) { return met ? "met" : "MISSED"; }

}  // namespace

int run_node_bench(const NodeBenchOptions& opt) {
  NodeBenchOptions o = opt;
  if (o.sluiced.empty()) o.sluiced = (fs::read_symlink("/proc/self/exe").parent_path() / "sluiced").string();
  bool made_dir = false;
  if (o.dir.empty()) {
    char tmpl[] = "/tmp/sluice-catbench-XXXXXX";
    if (!::mkdtemp(tmpl)) return 1;
    o.dir = tmpl;
    made_dir = true;
  }
  fs::create_directories(o.dir);
  Node n{o.sluiced, o.dir, free_port(), free_port(), free_port(), free_port()};
  std::printf("sluice-catalog-bench --tombstones %ld: embedded node (%s, data in %s), %d HTTP clients\n",
              o.tombstones, o.sluiced.c_str(), o.dir.c_str(), o.clients);
  std::fflush(stdout);
  int status = 0;
  auto finish = [&] {
    n.stop();
    if (made_dir && !o.keep) fs::remove_all(o.dir);
    return status;
  };

  const double empty_start = n.start();
  if (empty_start < 0) return status = 1, finish();
  std::printf("  start, empty catalog:                %7.3f s to /readyz\n", empty_start);
  http(n.http_port, "POST", "/v1/tenants", R"({"name":"bench"})");
  http(n.http_port, "POST", "/v1/tenants/bench/namespaces", R"({"name":"b"})");

  const PairsResult p = run_pairs(n.http_port, o.clients, o.tombstones);
  std::printf("  create + delete pairs, %2d clients:   %7.0f pairs/s   create p50 %.1f p99 %.1f ms, "
              "delete p50 %.1f p99 %.1f ms, %ld errors   target >= %.0f pairs/s: %s\n",
              o.clients, p.pairs_per_s, p.create_p50, p.create_p99, p.delete_p50, p.delete_p99, p.errors,
              kPairsTarget, verdict(p.pairs_per_s >= kPairsTarget));
  if (p.errors) {
    std::printf("  first error: %s\n", p.first_error.c_str());
    status = 1;
  }
  std::fflush(stdout);

  n.stop();
  // The target is for 100,000 tombstones; a smaller N is held to its share of the second
  // (printed so a quick run is not mistaken for the real figure).
  const double budget = kTombstoneStartTarget * std::max(1.0, static_cast<double>(o.tombstones) / kTombstoneTargetCount);
  for (int round = 1; round <= 2; ++round) {
    const double t = n.start();
    if (t < 0) return status = 1, finish();
    std::printf("  start %d with %ld tombstones:      %7.3f s to /readyz   target <= %.1f s%s: %s\n", round,
                o.tombstones, t, budget,
                o.tombstones == kTombstoneTargetCount ? "" : " (the target is for 100,000)",
                verdict(t <= budget));
    std::fflush(stdout);
    if (round == 1) {
      std::string out;
      const int st = http(n.http_port, "GET", "/v1/tombstones", "", &out);
      long count = 0;
      for (std::size_t at = 0; (at = out.find("\"deleted_up_to\"", at)) != std::string::npos; ++at) ++count;
      const long expect = o.tombstones - p.errors;
      if (st != 200 || count < expect) {
        std::printf("  CHECK FAILED: GET /v1/tombstones answered %d with %ld tombstones, expected %ld\n", st,
                    count, expect);
        status = 1;
      }
    }
    if (round == 1) n.stop();
  }
  return finish();
}

}  // namespace sluice::bench
