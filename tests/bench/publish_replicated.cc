// sluice-bench --brokers N (issue 10; publish_bench.cc describes the run): one broker with
// RF 1 against N brokers with RF R. Both sets run side by side; their loads alternate in
// --rounds slices (after phase 3).
#include <Poco/Net/HTTPClientSession.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bench_process.h"
#include "disk_reference.h"
#include "json_phase.h"
#include "publish_bench.h"
#include "publish_load.h"

namespace sluice_bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// The same shape for both issue-10 loads: connection c -> shard c % shards, one key
// hashing there; port_of[shard] is where that shard is published (its leader).
std::vector<Conn> shard_conns(const Options& o, const std::string& stream, const std::string& ack,
                              const std::vector<int>& port_of) {
  std::vector<Conn> conns;
  for (int c = 0; c < o.connections; ++c) {
    const int shard = c % o.shards;
    const std::string key = key_for_shard(c, shard, o.shards);
    conns.push_back({port_of[shard], kStreamsPath + stream + "/records?ack=" + ack,
                     binary_body(o.batch_records, o.record_bytes, &key), o.batch_records});
  }
  return conns;
}

// One side of the comparison: its connections and the server processes whose CPU counts.
struct Side {
  std::vector<Conn> conns;
  std::vector<pid_t> pids;
};

// Phase 2: the single-broker reference (default roles: its own one-member raft-meta), in d.
Side start_single(const Options& o, const std::string& d) {
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
  ensure_namespace(http_port);
  create_stream(http_port, "single", o.shards, 1);
  return {shard_conns(o, "single", "leader", std::vector<int>(o.shards, http_port)), {pid}};
}

struct Broker {
  int id, http, raft, rpc, peer;
  std::string dir;
  pid_t pid;
};

// Phase 3: N brokers. Metadata: raft-meta, broker 1 its only controller (default roles),
// brokers 2..N broker-only nodes with metadata.controllers = broker 1's metadata RPC.
// Returns once every one answers /readyz.
std::vector<Broker> start_brokers(const Options& o) {
  const int n = o.brokers;
  std::vector<Broker> bs;
  std::string peers;
  for (int i = 1; i <= n; ++i) {
    Broker b{i, free_port(), free_port(), free_port(), free_port(), o.dir + "/broker-" + std::to_string(i), -1};
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
  return bs;
}

// Waits until n brokers are registered and live; broker id -> HTTP port, from GET /v1/brokers.
std::map<long long, int> wait_brokers_live(int p1, int n) {
  progress("phase 3: waiting until %d brokers are registered and live (GET /v1/brokers)", n);
  std::map<long long, int> http_of;
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
        return http_of;
      }
    }
    if (Clock::now() > deadline) fail("not all " + std::to_string(n) + " brokers registered in 60 s: " + out);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

// Shard -> the HTTP port of its leader, once every shard of "rep" has a known one.
std::vector<int> leader_ports(const Options& o, int p1, const std::map<long long, int>& http_of,
                              Clock::time_point deadline) {
  std::vector<int> port_of(o.shards, 0);
  std::string out;
  for (;;) {
    if (http(p1, "GET", kStreamsPath + "rep/shards", "", &out) == 200) {
      const auto leaders = ints_of(out, "leader");
      if (static_cast<int>(leaders.size()) == o.shards &&
          std::all_of(leaders.begin(), leaders.end(), [&](long long l) { return http_of.count(l) && http_of.at(l) > 0; })) {
        // Each shard object has "shard" then "leader"; index by "shard" when it is there.
        const auto ids = ints_of(out, "shard");
        for (int s = 0; s < o.shards; ++s) {
          const long long idx = ids.size() == leaders.size() ? ids[s] : s;
          if (idx >= 0 && idx < o.shards) port_of[idx] = http_of.at(leaders[s]);
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
  return port_of;
}

// One quorum publish through each shard's leader, retried until acknowledged (every
// replica has joined).
void first_quorum_acks(const Options& o, const std::vector<int>& port_of, Clock::time_point deadline) {
  for (int s = 0; s < o.shards; ++s) {
    const std::string key = key_for_shard(0, s, o.shards);
    const std::string body = binary_body(o.batch_records, o.record_bytes, &key);
    for (;;) {
      std::string r;
      int st = 0;
      try {
        Poco::Net::HTTPClientSession ss("127.0.0.1", port_of[s]);
        ss.setTimeout(Poco::Timespan(30, 0));
        st = call(ss, "POST", kStreamsPath + "rep/records?ack=quorum", body, "application/vnd.sluice.batch", &r);
      } catch (...) {
      }
      if (st == 200) break;
      if (Clock::now() > deadline) fail("no quorum ack on shard " + std::to_string(s) + ": " + std::to_string(st) + " " + r);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
}

// The N brokers' side: stream "rep" with --replication-factor, ack quorum to each leader.
Side prepare_replicated(const Options& o, const std::vector<Broker>& bs) {
  const int p1 = bs[0].http;
  const std::map<long long, int> http_of = wait_brokers_live(p1, o.brokers);
  ensure_namespace(p1);
  create_stream(p1, "rep", o.shards, o.replication_factor);
  // Leaders, then a first quorum publish through each of them (every replica has joined).
  progress("phase 3: waiting for the leaders of %d shards and a first quorum ack on each", o.shards);
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  const std::vector<int> port_of = leader_ports(o, p1, http_of, deadline);
  first_quorum_acks(o, port_of, deadline);
  Side rep;
  for (const auto& b : bs) rep.pids.push_back(b.pid);
  rep.conns = shard_conns(o, "rep", "quorum", port_of);
  return rep;
}

// The two loads alternate in --rounds slices; each round's line, then both totals.
std::pair<PhaseResult, PhaseResult> run_rounds(const Options& o, const Side& single, const Side& rep) {
  const int n = o.brokers;
  const std::string title = "[3/3] " + std::to_string(n) + " brokers, replication factor " +
                            std::to_string(o.replication_factor) + ", ack quorum, to each shard's leader";
  const char* single_title = "[2/3] 1 broker, replication factor 1, ack leader";
  const int slice = o.seconds / o.rounds;
  std::vector<Slice> singles, reps;
  std::vector<std::string> round_lines;
  for (int r = 1; r <= o.rounds; ++r) {
    std::printf("round %d/%d: %s ...\n", r, o.rounds, single_title);
    std::fflush(stdout);
    singles.push_back(run_slice(single_title, single.conns, false, single.pids, slice));
    std::printf("round %d/%d: %s ...\n", r, o.rounds, title.c_str());
    std::fflush(stdout);
    reps.push_back(run_slice(title.c_str(), rep.conns, false, rep.pids, slice));
    const double a = singles.back().records / singles.back().secs, b = reps.back().records / reps.back().secs;
    char line[160];
    std::snprintf(line, sizeof line, "  round %2d: 1 broker %9.0f rec/s, %d brokers %9.0f rec/s, ratio %.2f", r, a,
                  n, b, a > 0 ? b / a : 0);
    round_lines.push_back(line);
  }
  std::pair<PhaseResult, PhaseResult> totals{summarize(single_title, singles, o.record_bytes),
                                             summarize(title.c_str(), reps, o.record_bytes)};
  std::printf("\nrounds (%d s of each load per round, alternating)\n", slice);
  for (const auto& l : round_lines) std::printf("%s\n", l.c_str());
  return totals;
}

void print_results(const Options& o, const DiskReference& disk, const PhaseResult& single, const PhaseResult& rep) {
  std::printf("\nresults (%d-byte records, %d records/request, %d connections, %d shards, %d s each in %d rounds)\n",
              o.record_bytes, o.batch_records, o.connections, o.shards, (o.seconds / o.rounds) * o.rounds, o.rounds);
  print_result("1 broker, RF 1, leader", single);
  const std::string name = std::to_string(o.brokers) + " brokers, RF " + std::to_string(o.replication_factor) + ", quorum";
  print_result(name.c_str(), rep);
  print_disk_results(disk, o.chunk);
  std::printf("  single / sequential    %.2f\n", disk.dd_mbps > 0 ? single.mbps / disk.dd_mbps : 0);
  // All replicas share this machine's one disk: RF copies of every byte.
  std::printf("  replicated x RF / sequential %.2f  (the disk's share the replicas use)\n",
              disk.dd_mbps > 0 ? rep.mbps * o.replication_factor / disk.dd_mbps : 0);
  std::printf("  disk, %2d files synced  %.1f MB/s (each appending %d-byte writes + fdatasync: one file per shard)\n",
              disk.single_files, disk.sync_single_mbps, o.chunk);
  std::printf("  disk, %2d files synced  %.1f MB/s (the same, one file per shard replica)\n", disk.rep_files,
              disk.sync_rep_mbps);
  std::printf("  single / %d-file sync   %.2f\n", disk.single_files,
              disk.sync_single_mbps > 0 ? single.mbps / disk.sync_single_mbps : 0);
  std::printf("  replicated x RF / %d-file sync %.2f  (1.00: the replicas sync all the disk can in their pattern)\n",
              disk.rep_files, disk.sync_rep_mbps > 0 ? rep.mbps * o.replication_factor / disk.sync_rep_mbps : 0);
  // If the replicas used the whole of that, the ratio could reach this and no more.
  std::printf("  disk's ceiling on replicated / single %.2f  (%d-file sync / RF / single)\n",
              single.mbps > 0 ? disk.sync_rep_mbps / o.replication_factor / single.mbps : 0, disk.rep_files);
  std::printf("  replicated / single    %.2f  (design goal >= 0.50)\n", single.rps > 0 ? rep.rps / single.rps : 0);
}

}  // namespace

int run_replicated(const Options& o) {
  std::printf("sluice-bench: %d connections, %d-byte records, %d records/request, %d shards, %d s; "
              "%d brokers, replication factor %d, ack quorum vs 1 broker, replication factor 1, ack leader\n",
              o.connections, o.record_bytes, o.batch_records, o.shards, o.seconds, o.brokers,
              o.replication_factor);
  const DiskReference disk = measure_disk(o, 3, true);
  const std::string single_dir = o.dir + "/single";
  const Side single = start_single(o, single_dir);
  const std::vector<Broker> bs = start_brokers(o);
  const Side rep = prepare_replicated(o, bs);
  const auto [single_total, rep_total] = run_rounds(o, single, rep);
  progress("stopping the single broker and %d brokers", o.brokers);
  stop_children();
  std::error_code ec;
  fs::remove_all(single_dir + "/data", ec);
  for (auto& b : bs) fs::remove_all(b.dir + "/data", ec);
  print_results(o, disk, single_total, rep_total);
  return 0;
}

}  // namespace sluice_bench
