// sluice-bench --failover (issue 11): the time from a leader's SIGKILL to the first publish
// acknowledged with ack=quorum (docs/benchmarks.md "Failover time").
#include <Poco/Net/HTTPClientSession.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "bench_process.h"
#include "publish_bench.h"

namespace sluice_bench {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// --failover: kill the leader of a replication-factor-3 shard N times; each time, the time
// from the SIGKILL to the first publish acknowledged with ack=quorum.
int run_failover(const Options& o) {
  struct B {
    int id, http, peer;
    std::string dir;
    pid_t pid = -1;
    int starts = 0;
  };
  const std::string base = o.dir + "/failover";
  std::error_code ec;
  fs::remove_all(base, ec);
  fs::create_directories(base + "/controller");
  const int c_http = free_port(), c_raft = free_port(), c_rpc = free_port();
  const std::string st = std::to_string(o.session_timeout_ms);
  progress("failover: starting the controller (node 100, log %s/controller/sluiced.log)", base.c_str());
  pid_t cpid = spawn_sluiced(o.sluiced, base + "/controller/sluiced.log",
                             {"node.id=100", "node.roles=controller", "data.dir=" + base + "/controller/data",
                              "http.port=" + std::to_string(c_http), "raft.address=127.0.0.1:" + std::to_string(c_raft),
                              "metadata.rpc_address=127.0.0.1:" + std::to_string(c_rpc),
                              "broker.session_timeout_ms=" + st});
  wait_ready("controller", cpid, c_http, base + "/controller/sluiced.log", 60);
  std::vector<B> bs;
  for (int i = 1; i <= 3; ++i) bs.push_back(B{i, free_port(), free_port(), base + "/broker-" + std::to_string(i)});
  auto start = [&](B& b) {
    fs::create_directories(b.dir);
    const std::string log = b.dir + "/sluiced-" + std::to_string(b.starts++) + ".log";
    b.pid = spawn_sluiced(o.sluiced, log,
                          {"node.id=" + std::to_string(b.id), "node.roles=broker", "data.dir=" + b.dir + "/data",
                           "http.port=" + std::to_string(b.http), "transport.address=127.0.0.1:" + std::to_string(b.peer),
                           "metadata.controllers=127.0.0.1:" + std::to_string(c_rpc), "http.threads=2",
                           "broker.session_timeout_ms=" + st, "replication.max_lag_ms=" + st,
                           "metadata.timeout_ms=15000"});
    wait_ready(("broker " + std::to_string(b.id)).c_str(), b.pid, b.http, log, 60);
  };
  for (auto& b : bs) start(b);
  http(c_http, "POST", "/v1/tenants", R"({"name":"bench"})");
  http(c_http, "POST", "/v1/tenants/bench/namespaces", R"({"name":"b"})");
  const std::string path = "/v1/tenants/bench/namespaces/b/streams/failover";
  {
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    std::string out;
    while (http(bs[0].http, "POST", "/v1/tenants/bench/namespaces/b/streams",
                R"({"name":"failover","shards":1,"replication_factor":3,"min_insync":2})", &out) != 201) {
      if (Clock::now() > deadline) fail("cannot create the stream: " + out);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
  const std::string record = R"({"records":[{"value":"x","shard":0}]})";
  // The shard's state as broker `port` sees it: leader and in-sync size.
  auto state = [&](int port, long long* leader, std::size_t* in_sync) {
    std::string out;
    if (http(port, "GET", path + "/shards", "", &out) != 200) return false;
    auto l = ints_of(out, "leader");
    if (l.empty()) return false;
    *leader = l[0];
    *in_sync = 0;
    const auto at = out.find("\"in_sync\":[");
    if (at == std::string::npos) return false;
    const auto end = out.find(']', at);
    for (auto b = out.find("\"broker\"", at); b != std::string::npos && b < end; b = out.find("\"broker\"", b + 1))
      ++*in_sync;
    return true;
  };
  auto wait_healthy = [&](const char* what) {
    const auto deadline = Clock::now() + std::chrono::seconds(120);
    for (;;) {
      long long leader = 0;
      std::size_t n = 0;
      if (state(bs[0].http, &leader, &n) && leader > 0 && n == 3 &&
          http(bs[leader - 1].http, "POST", path + "/records?ack=quorum", record) == 200)
        return leader;
      if (Clock::now() > deadline) fail(std::string("the shard did not become healthy ") + what);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  };
  std::vector<double> times_ms;
  for (int k = 1; k <= o.failover_kills; ++k) {
    const long long leader = wait_healthy("before a kill");
    B& victim = bs[leader - 1];
    ::kill(victim.pid, SIGKILL);
    const auto killed = Clock::now();
    ::waitpid(victim.pid, nullptr, 0);
    forget_child(victim.pid);
    // Publish through the surviving brokers, in turn, until one is acknowledged.
    int turn = 0;
    for (;;) {
      const B& via = bs[(leader + turn++) % 3];
      if (via.id != victim.id && http(via.http, "POST", path + "/records?ack=quorum", record) == 200) break;
      if (Clock::now() - killed > std::chrono::seconds(120)) fail("no quorum publish within 120 s of a kill");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - killed).count();
    times_ms.push_back(ms);
    std::printf("  kill %2d/%d: broker %lld killed, first quorum ack after %.0f ms\n", k, o.failover_kills, leader, ms);
    std::fflush(stdout);
    start(victim);
  }
  wait_healthy("after the last kill");
  stop_children();
  fs::remove_all(base, ec);
  std::vector<double> sorted = times_ms;
  std::sort(sorted.begin(), sorted.end());
  std::printf("\nfailover (SIGKILL of the leader to the first ack=quorum publish; %d kills, "
              "broker.session_timeout_ms %d, controller.interval_ms 500)\n",
              o.failover_kills, o.session_timeout_ms);
  std::printf("  p50 %.0f ms   max %.0f ms   min %.0f ms\n", percentile(sorted, 0.5), sorted.back(), sorted.front());
  std::printf("  p50 / session timeout  %.2f  (a broker is dead session_timeout after its LAST heartbeat, and\n"
              "                         heartbeats come every 2000 ms: expect between the timeout minus one heartbeat\n"
              "                         interval and the timeout plus one controller pass and one catalog round trip)\n",
              percentile(sorted, 0.5) / o.session_timeout_ms);
  return 0;
}

}  // namespace sluice_bench
