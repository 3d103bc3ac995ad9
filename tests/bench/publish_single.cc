// sluice-bench's default run (publish_bench.cc describes it): the disk reference, then one
// node, its own or --url, and its publish phases one after the other; the low load and the
// WebSocket delivery latency; then the results.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "bench_process.h"
#include "disk_reference.h"
#include "json_phase.h"
#include "low_load.h"
#include "publish_bench.h"
#include "publish_load.h"
#include "ws_latency.h"

namespace sluice_bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct HttpTarget {
  std::string host;
  int port;
};

HttpTarget parse_url(const std::string& url) {
  auto rest = url.substr(url.find("://") + 3);
  auto colon = rest.find(':');
  return {rest.substr(0, colon), std::stoi(rest.substr(colon + 1))};
}

// The node the phases publish to.
struct Node {
  int port = 0;
  pid_t child = -1;  // the sluiced this program started; -1 with --url
  std::vector<pid_t> pids() const { return child > 0 ? std::vector<pid_t>{child} : std::vector<pid_t>{}; }
};

// Starts a sluiced of its own, or waits until the one at --url (on loopback) is ready.
Node start_or_reach_node(const Options& o) {
  Node n;
  if (o.url.empty()) {
    const int http_port = free_port(), raft = free_port(), rpc = free_port();
    n.port = http_port;
    progress("starting sluiced on port %d (log %s/sluiced.log)", http_port, o.dir.c_str());
    n.child = spawn_sluiced(o.sluiced, o.dir + "/sluiced.log",
                            {"data.dir=" + o.dir + "/data", "http.port=" + std::to_string(http_port),
                             "raft.address=127.0.0.1:" + std::to_string(raft),
                             "metadata.rpc_address=127.0.0.1:" + std::to_string(rpc), "http.threads=2",
                             "transport.address=127.0.0.1:" + std::to_string(free_port())});
    wait_ready("sluiced", n.child, n.port, o.dir + "/sluiced.log", 60);
    return n;
  }
  const HttpTarget t = parse_url(o.url);
  if (t.host != "127.0.0.1" && t.host != "localhost") fail("--url must be on loopback (127.0.0.1)");
  n.port = t.port;
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (http(n.port, "GET", "/readyz") != 200) {
    if (Clock::now() > deadline) fail("node at " + o.url + " did not become ready");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return n;
}

// One publish phase, on a stream of its own.
struct PhaseSpec {
  const char* title = "";
  const char* stream = "";
  bool keyed = false;       // connection c publishes with key "producer-<c>"; else keyless
  bool idempotent = false;  // producer_id and sequence on every request
  bool fetch = false;       // one consumer per shard fetching at the tail meanwhile
  bool json = false;        // JSON publishes instead of binary batches
};

PhaseResult run_phase(const Options& o, const Node& node, const PhaseSpec& p) {
  create_stream(node.port, p.stream, o.shards, 0);
  std::vector<Conn> conns;
  for (int c = 0; c < o.connections; ++c) {
    const std::string key = "producer-" + std::to_string(c);
    conns.push_back({node.port, kStreamsPath + p.stream + "/records?ack=" + o.ack,
                     p.json ? json_body(o.batch_records, o.record_bytes)
                            : binary_body(o.batch_records, o.record_bytes, p.keyed ? &key : nullptr),
                     o.batch_records, p.json ? kJsonMedia : kBatchMedia});
  }
  std::printf("%s ...\n", p.title);
  std::fflush(stdout);
  const TailFetch fetch{p.fetch ? node.port : 0, p.stream, o.shards};
  return summarize(p.title, {run_slice(p.title, conns, p.idempotent, node.pids(), o.seconds, fetch)},
                   o.record_bytes);
}

struct Phases {
  PhaseResult plain, js, keyed, idem, fetched;
};

// Keyless records, sticky shard per request (issue 2), also as JSON (issue 12); keyed and
// idempotent (issue 3): each connection a producer with its own key, so each request is
// one batch on one shard, with and without producer_id/sequence, side by side.
Phases run_phases(const Options& o, const Node& node) {
  Phases r;
  r.plain = run_phase(o, node, {.title = "[2/6] keyless, sticky shards", .stream = "pub"});
  if (o.json)
    r.js = run_phase(o, node, {.title = "[3/6] the same keyless load as JSON publishes", .stream = "pub-json",
                               .json = true});
  if (o.idempotence) {
    r.keyed = run_phase(o, node, {.title = "[4/6] one key per connection", .stream = "pub-keyed", .keyed = true});
    r.idem = run_phase(o, node, {.title = "[5/6] the same, idempotent producers", .stream = "pub-idem",
                                 .keyed = true, .idempotent = true});
  }
  if (o.fetch)
    r.fetched = run_phase(o, node, {.title = "[6/6] keyless, with one consumer per shard fetching at the tail",
                                    .stream = "pub-fetch", .fetch = true});
  return r;
}

// Low load: one connection, one record per request, against the disk's smallest
// durable write (4 KiB + fdatasync), alternating in one-second slices (low_load.h).
LowLoadResult run_low_phase(const Options& o, const Node& node) {
  create_stream(node.port, "pub-one", o.shards, 0);
  std::printf("[low load] 1 connection, 1 record per request, alternating with 4 KiB + fdatasync ...\n");
  std::fflush(stdout);
  const auto low = run_low_load(node.port, kStreamsPath + "pub-one/records?ack=" + o.ack,
                                binary_body(1, o.record_bytes, nullptr), kBatchMedia, o.dir,
                                std::min(o.seconds, 10), node.pids());
  if (low.errors) progress("[low load]: %llu failed requests, the first: %s",
                           static_cast<unsigned long long>(low.errors), low.first_error.c_str());
  return low;
}

WsLatencyResult run_websocket_phase(const Options& o, const Node& node) {
  // One shard, so the one subscriber sees every record.
  std::string out;
  const int st =
      http(node.port, "POST", "/v1/tenants/bench/namespaces/b/streams", R"({"name":"pub-ws","shards":1})", &out);
  if (st != 201 && st != 409) fail("create stream pub-ws: " + std::to_string(st) + " " + out);
  std::printf("[websocket] 1 subscriber, 1 publisher of 1 record per request (JSON, ack %s) ...\n", o.ack.c_str());
  std::fflush(stdout);
  const auto wsl = run_ws_latency(node.port, kStreamsPath + "pub-ws/shards/0",
                                  kStreamsPath + "pub-ws/records?ack=" + o.ack, std::min(o.seconds, 5));
  if (wsl.errors || !wsl.first_error.empty())
    progress("[websocket]: %llu failed publishes; %s", static_cast<unsigned long long>(wsl.errors),
             wsl.first_error.c_str());
  return wsl;
}

void print_results(const Options& o, const DiskReference& disk, const Phases& ph) {
  std::printf("\nresults (%d-byte records, %d records/request, ack %s, %d connections)\n", o.record_bytes,
              o.batch_records, o.ack.c_str(), o.connections);
  print_result("keyless", ph.plain);
  if (o.json) {
    print_result("keyless, JSON", ph.js);
    print_json_vs_binary({ph.plain.rps, ph.plain.mbps, ph.plain.p50, ph.plain.p99, ph.plain.cpu_us},
                         {ph.js.rps, ph.js.mbps, ph.js.p50, ph.js.p99, ph.js.cpu_us});
  }
  print_disk_results(disk, o.chunk);
  std::printf("  publish / sequential   %.2f  (target >= 0.60; against the buffered dd alone %.2f)\n",
              disk.dd_mbps > 0 ? ph.plain.mbps / disk.dd_mbps : 0,
              disk.buffered_mbps > 0 ? ph.plain.mbps / disk.buffered_mbps : 0);
  if (ph.plain.cpu_us >= 0)
    std::printf("  server CPU per record  %.2f us  (target <= 3)\n", ph.plain.cpu_us);
  if (o.idempotence) {
    print_result("keyed", ph.keyed);
    print_result("keyed, idempotent", ph.idem);
    std::printf("  idempotent / plain     %.2f  (design goal >= 0.90)\n",
                ph.keyed.rps > 0 ? ph.idem.rps / ph.keyed.rps : 0);
  }
  if (o.fetch) print_result("keyless + tail fetch", ph.fetched);
}

void print_low_results(const LowLoadResult& low) {
  std::printf("  %-22s %9.0f rec/s  p50 %6.2f ms  p99 %6.2f ms  p999 %6.2f ms  failed %llu", "1 record per request",
              low.rps, low.p50, low.p99, low.p999, static_cast<unsigned long long>(low.errors));
  if (low.cpu_us >= 0) std::printf("  server CPU %.2f us/record", low.cpu_us);
  std::printf("\n  disk, 4 KiB + fdatasync p50 %.2f ms, p99 %.2f ms (in the same slices); low-load p99 / that %.2f"
              "  (target <= 1.5)\n",
              low.probe_p50, low.probe_p99, low.probe_p99 > 0 ? low.p99 / low.probe_p99 : 0);
}

void print_websocket_results(const WsLatencyResult& wsl) {
  std::printf("  websocket delivery     p50 %6.2f ms  p99 %6.2f ms  max %6.2f ms  (%llu of %llu published records "
              "received; publish sent -> frame received)\n",
              wsl.p50, wsl.p99, wsl.max, static_cast<unsigned long long>(wsl.delivered),
              static_cast<unsigned long long>(wsl.published));
}

}  // namespace

int run_publish(const Options& o) {
  std::printf("sluice-bench: %d connections, %d-byte records, %d records/request, ack %s, %d s\n",
              o.connections, o.record_bytes, o.batch_records, o.ack.c_str(), o.seconds);
  const DiskReference disk = measure_disk(o, 6, false);
  const Node node = start_or_reach_node(o);
  ensure_namespace(node.port);
  const Phases phases = run_phases(o, node);
  const LowLoadResult low = run_low_phase(o, node);
  WsLatencyResult wsl;
  if (o.websocket) wsl = run_websocket_phase(o, node);
  print_results(o, disk, phases);
  print_low_results(low);
  if (o.websocket) print_websocket_results(wsl);
  if (node.child > 0) {
    progress("stopping sluiced");
    stop_children();
    std::error_code ec;
    fs::remove_all(o.dir + "/data", ec);
  }
  return 0;
}

}  // namespace sluice_bench
