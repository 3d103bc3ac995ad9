// sluice-raft-bench: stream creates per second through a 3-member raft-meta group, and
// libraft's raw apply rate for small entries on the same machine in the same run, with
// their ratio. A program, not a test (see docs/benchmarks.md).
//
//   raft-meta   three RaftMetaStores in this process, each with its own host, data directory,
//               raft and controller-RPC ports on 127.0.0.1; member 1 bootstraps, 2 and 3 join
//               through `metadata.join`. Real loopback TCP (the cluster-id transport) and the
//               real uv io (fdatasync on each member's disk). create_stream (1 shard, unique
//               names) on the leader with 1 and --clients threads, then on a follower (which
//               forwards over the controller RPC) with --clients threads.
//   libraft     three bare RaftNodes (raft_node.h) with a no-op state machine, same transport
//               (a fixed cluster id), same io, same options, bootstrap on node 1 and add_voter
//               for 2 and 3; 64-byte entries with the same concurrency (apply blocks per call,
//               so concurrency = threads).
//
// Latency is measured around each call; throughput is calls / wall time of the phase. The
// phases alternate (store, raw, store, raw, follower) so that a slow stretch of the disk hits
// both sides of a ratio alike.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "command.h"
#include "raft_meta_store.h"
#include "raft_node.h"
#include "sluice/host.h"
#include "sluice/log.h"

using Clock = std::chrono::steady_clock;
using namespace sluice;
using namespace std::chrono_literals;

namespace {

constexpr auto kWait = 60s;  // leadership, joins, readiness
constexpr const char* kRawClusterId = "7d1f5a52-3c4e-4b8a-9f6d-2e0c1b9a8d47";
constexpr std::size_t kRawEntryBytes = 64;

struct Options {
  int creates = 2000;  // at 1 client; the concurrent phases do twice as many
  int clients = 16;
  bool verbose = false;
};

// --- temp directory, removed at exit (also on SIGINT/SIGTERM) --------------------------------

char g_tmp[256] = {0};

void remove_tmp() {
  if (!g_tmp[0]) return;
  std::error_code ec;
  std::filesystem::remove_all(g_tmp, ec);
  g_tmp[0] = 0;
}

extern "C" void on_signal(int sig) {
  // Async-signal-safe: fork/execve/waitpid/_exit only.
  if (g_tmp[0]) {
    pid_t p = fork();
    if (p == 0) {
      char rm[] = "/bin/rm", rf[] = "-rf";
      char* args[] = {rm, rf, g_tmp, nullptr};
      char* env[] = {nullptr};
      execve(rm, args, env);
      _exit(127);
    }
    if (p > 0) waitpid(p, nullptr, 0);
  }
  _exit(128 + sig);
}

struct TmpDir {
  std::string path;
  TmpDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "sluice-raft-bench-XXXXXX").string();
    if (tmpl.size() >= sizeof(g_tmp) || !mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path = tmpl;
    std::memcpy(g_tmp, tmpl.c_str(), tmpl.size() + 1);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
  }
  ~TmpDir() { remove_tmp(); }
};

// --- hosts ---------------------------------------------------------------------------------

// tests/support/test_host.h adapted: a node id per member, a data directory given by the
// caller (under the run's temp dir), and only WARN/ERROR echoed (INFO too with --verbose).
class MemberHost final : public PluginHost {
 public:
  MemberHost(std::uint32_t id, std::string dir, std::map<std::string, std::string> config, bool verbose)
      : id_(id), dir_(std::move(dir)), config_(std::move(config)), verbose_(verbose) {
    std::filesystem::create_directories(dir_);
  }
  std::string config_string(std::string_view key, std::string_view def) const override {
    auto it = config_.find(std::string(key));
    return it == config_.end() ? std::string(def) : it->second;
  }
  std::int64_t config_int(std::string_view key, std::int64_t def) const override {
    auto it = config_.find(std::string(key));
    return it == config_.end() ? def : std::stoll(it->second);
  }
  bool config_bool(std::string_view key, bool def) const override {
    auto it = config_.find(std::string(key));
    return it == config_.end() ? def : (it->second == "true" || it->second == "1");
  }
  bool config_has(std::string_view key) const override { return config_.count(std::string(key)) > 0; }
  NodeId node_id() const override { return NodeId{id_}; }
  std::string directory_id() const override {
    char buf[40];
    std::snprintf(buf, sizeof buf, "00000000-0000-4000-8000-%012u", id_);
    return buf;
  }
  std::string data_dir() const override { return dir_; }
  Result<void> adopt_cluster_id(const std::string& id) override {
    std::lock_guard lk(mu_);
    if (!cluster_id_.empty() && cluster_id_ != id)
      return Error(Errc::cluster_id_mismatch, "have " + cluster_id_ + ", offered " + id);
    cluster_id_ = id;
    return {};
  }
  std::string cluster_id() const override {
    std::lock_guard lk(mu_);
    return cluster_id_;
  }
  void log(LogLevel level, std::string_view component, std::string_view message) override {
    if (verbose_ || level >= LogLevel::warn)
      log_line(level, std::string(component) + "/" + std::to_string(id_), message);
  }

 private:
  std::uint32_t id_;
  std::string dir_;
  std::map<std::string, std::string> config_;
  bool verbose_;
  mutable std::mutex mu_;
  std::string cluster_id_;
};

// Free loopback ports: bind port 0 (all sockets open at once, so they differ), read, close.
std::vector<int> free_ports(int n) {
  std::vector<int> fds, ports;
  for (int i = 0; i < n; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof a;
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw std::runtime_error(std::string("cannot pick a free port: ") + std::strerror(errno));
    fds.push_back(fd);
    ports.push_back(ntohs(a.sin_port));
  }
  for (int fd : fds) ::close(fd);
  return ports;
}

std::string loopback(int port) { return "127.0.0.1:" + std::to_string(port); }

// Polls `ready` every 10 ms for at most kWait.
bool poll_until(const std::function<bool()>& ready) {
  const auto deadline = Clock::now() + kWait;
  while (Clock::now() < deadline) {
    if (ready()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return ready();
}

// --- measurement ---------------------------------------------------------------------------

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::size_t i = std::min(v.size() - 1, static_cast<std::size_t>(p * v.size()));
  std::nth_element(v.begin(), v.begin() + i, v.end());
  return v[i];
}

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

struct Phase {
  double per_s = 0, p50 = 0, p99 = 0, secs = 0;
  double cpu = 0;  // process CPU time during the phase / wall time (1.0 = one core busy)
  std::uint64_t ok = 0, errors = 0;
  std::string first_error;
};

// `threads` threads split `total` calls of op(thread, i); op returns an error text or nothing.
Phase run_phase(int threads, int total, const std::function<std::optional<std::string>(int, int)>& op) {
  std::mutex mu;
  std::vector<double> lat;
  std::atomic<std::uint64_t> ok{0}, errors{0};
  std::string first_error;
  std::promise<void> go;
  std::shared_future<void> gate = go.get_future().share();
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    const int n = total / threads + (t < total % threads ? 1 : 0);
    ts.emplace_back([&, t, n] {
      std::vector<double> mine;
      mine.reserve(n);
      gate.wait();
      for (int i = 0; i < n; ++i) {
        const auto b = Clock::now();
        auto err = op(t, i);
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - b).count();
        if (!err) {
          mine.push_back(ms);
          ok.fetch_add(1);
        } else {
          errors.fetch_add(1);
          std::lock_guard lk(mu);
          if (first_error.empty()) first_error = *err;
        }
      }
      std::lock_guard lk(mu);
      lat.insert(lat.end(), mine.begin(), mine.end());
    });
  }
  const auto t0 = Clock::now();
  const double c0 = cpu_seconds();
  go.set_value();
  for (auto& t : ts) t.join();
  Phase p;
  p.secs = std::chrono::duration<double>(Clock::now() - t0).count();
  p.cpu = (cpu_seconds() - c0) / p.secs;
  p.ok = ok.load();
  p.errors = errors.load();
  p.per_s = p.ok / p.secs;
  p.p50 = pct(lat, 0.5);
  p.p99 = pct(lat, 0.99);
  p.first_error = first_error;
  return p;
}

void print(const std::string& what, const char* unit, const Phase& p) {
  std::printf("  %-38s %8.0f %-9s p50 %6.2f ms p99 %6.2f ms  cpu %3.0f%%  (%llu in %.2f s, %llu errors)\n",
              what.c_str(), p.per_s, unit, p.p50, p.p99, 100 * p.cpu, static_cast<unsigned long long>(p.ok),
              p.secs, static_cast<unsigned long long>(p.errors));
  if (p.errors) std::printf("    first error: %s\n", p.first_error.c_str());
  std::fflush(stdout);
}

// --- the raft-meta group -------------------------------------------------------------------

// A member's role as its own status() reports it ("leader", "follower", ...; cheap, unlike
// local_member_status()), or "" while not ready.
std::string role_of(raft_meta::RaftMetaStore& s) {
  auto st = s.status();
  return st.ready ? st.detail : std::string();
}

struct Member {
  std::uint32_t id = 0;
  std::unique_ptr<MemberHost> host;
  std::unique_ptr<raft_meta::RaftMetaStore> store;
};

struct StoreGroup {
  std::vector<Member> m;
  ~StoreGroup() {
    for (auto it = m.rbegin(); it != m.rend(); ++it)
      if (it->store) it->store->stop();
  }
  // The member whose own view is `role` (polled; nullptr after kWait).
  Member* find(const std::string& role) {
    Member* found = nullptr;
    poll_until([&] {
      for (auto& x : m)
        if (role_of(*x.store) == role) {
          found = &x;
          return true;
        }
      return false;
    });
    return found;
  }
};

bool start_store_group(StoreGroup& g, const std::string& tmp, bool verbose) {
  const auto ports = free_ports(6);  // raft 1..3, rpc 1..3
  for (std::uint32_t id = 1; id <= 3; ++id) {
    std::map<std::string, std::string> cfg{
        {"raft.address", loopback(ports[id - 1])},
        {"metadata.rpc_address", loopback(ports[3 + id - 1])},
        {"metadata.start_timeout_ms", std::to_string(std::chrono::milliseconds(kWait).count())},
    };
    if (id > 1) cfg["metadata.join"] = loopback(ports[3]);
    Member mem;
    mem.id = id;
    mem.host = std::make_unique<MemberHost>(id, tmp + "/store-" + std::to_string(id), cfg, verbose);
    mem.store = std::make_unique<raft_meta::RaftMetaStore>(*mem.host);
    const auto t0 = Clock::now();
    // start() blocks until this member is ready (member 1: leader with a cluster id; 2 and 3:
    // recorded, added and promoted to voter by the leader, catalog applied).
    if (auto r = mem.store->start(); !r) {
      std::fprintf(stderr, "raft-meta member %u failed to start: %s\n", id, r.error().to_string().c_str());
      g.m.push_back(std::move(mem));
      return false;
    }
    std::printf("  member %u ready in %.2f s (raft %s, rpc %s)\n", id,
                std::chrono::duration<double>(Clock::now() - t0).count(), loopback(ports[id - 1]).c_str(),
                loopback(ports[3 + id - 1]).c_str());
    g.m.push_back(std::move(mem));
  }
  // Every member ready and agreeing on one leader.
  return poll_until([&] {
    int leaders = 0, followers = 0;
    for (auto& x : g.m) {
      const auto role = role_of(*x.store);
      leaders += role == "leader";
      followers += role == "follower";
    }
    return leaders == 1 && followers == 2;
  });
}

// --- the bare libraft group ----------------------------------------------------------------

class NullFsm final : public raft_meta::RaftStateMachine {
 public:
  raft_meta::ApplyResult apply(std::uint64_t, std::string_view) override { return {}; }
  std::string snapshot() override { return "sluice-raft-bench null state machine"; }
  Result<void> restore(std::string_view) override { return {}; }
};

struct RawGroup {
  NullFsm fsm[3];
  std::vector<std::unique_ptr<raft_meta::RaftNode>> nodes;
  std::vector<std::string> addr;
  ~RawGroup() {
    for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) (*it)->stop();
  }
  raft_meta::RaftNode* leader() {
    raft_meta::RaftNode* found = nullptr;
    poll_until([&] {
      for (auto& n : nodes)
        if (n->role() == raft_meta::RaftRole::leader) {
          found = n.get();
          return true;
        }
      return false;
    });
    return found;
  }
};

bool start_raw_group(RawGroup& g, const std::string& tmp, bool verbose) {
  const auto ports = free_ports(3);
  for (std::uint64_t id = 1; id <= 3; ++id) {
    raft_meta::RaftNodeOptions o;  // the store's defaults: thresholds, timeouts
    o.id = id;
    o.address = loopback(ports[id - 1]);
    o.dir = tmp + "/raw-" + std::to_string(id);
    std::filesystem::create_directories(o.dir);
    o.bootstrap = id == 1;
    o.cluster_id = [] { return std::string(kRawClusterId); };
    o.log = [id, verbose](LogLevel l, const std::string& msg) {
      if (verbose || l >= LogLevel::warn) log_line(l, "raw/" + std::to_string(id), msg);
    };
    g.addr.push_back(o.address);
    g.nodes.push_back(std::make_unique<raft_meta::RaftNode>(std::move(o), g.fsm[id - 1]));
    if (auto r = g.nodes.back()->start(); !r) {
      std::fprintf(stderr, "raw node %llu failed to start: %s\n", static_cast<unsigned long long>(id),
                   r.error().to_string().c_str());
      return false;
    }
  }
  auto* n1 = g.nodes[0].get();
  if (!poll_until([&] { return n1->role() == raft_meta::RaftRole::leader; })) {
    std::fprintf(stderr, "raw node 1 did not become leader within %lld s\n",
                 static_cast<long long>(kWait.count()));
    return false;
  }
  for (std::uint64_t id = 2; id <= 3; ++id) {
    if (auto r = n1->add_voter(id, g.addr[id - 1], kWait); !r) {
      std::fprintf(stderr, "raw add_voter(%llu) failed: %s\n", static_cast<unsigned long long>(id),
                   r.error().to_string().c_str());
      return false;
    }
  }
  if (auto r = n1->barrier(kWait); !r) {
    std::fprintf(stderr, "raw barrier failed: %s\n", r.error().to_string().c_str());
    return false;
  }
  return poll_until([&] {
    for (std::size_t i = 1; i < g.nodes.size(); ++i)
      if (g.nodes[i]->role() != raft_meta::RaftRole::follower || g.nodes[i]->leader_id() != 1) return false;
    return true;
  });
}

// --- phases --------------------------------------------------------------------------------

Phase store_phase(raft_meta::RaftMetaStore& s, int threads, int total, const std::string& tag) {
  return run_phase(threads, total, [&](int t, int i) -> std::optional<std::string> {
    StreamSpec spec;
    spec.shards = 1;
    auto r = s.create_stream({"bench", "b", tag + "-" + std::to_string(t) + "-" + std::to_string(i)}, spec);
    if (r) return std::nullopt;
    return r.error().to_string();
  });
}

Phase raw_phase(raft_meta::RaftNode& n, int threads, int total, const std::string& tag) {
  return run_phase(threads, total, [&](int t, int i) -> std::optional<std::string> {
    std::string e = tag + "-" + std::to_string(t) + "-" + std::to_string(i) + " ";
    e.resize(kRawEntryBytes, 'x');  // a multiple of 8: RaftNode::apply adds no padding
    auto r = n.apply(e, 10s);       // the store's metadata.timeout_ms default
    if (r) return std::nullopt;
    return r.error().to_string();
  });
}

void usage(FILE* f) {
  std::fputs(
      "Usage: sluice-raft-bench [--creates N] [--clients C] [--quick] [--verbose]\n"
      "\n"
      "Stream creates per second through a 3-member raft-meta group (three RaftMetaStores in\n"
      "this process, loopback TCP, fdatasync on disk) and, in the same run, libraft's raw apply\n"
      "rate for 64-byte entries on three bare RaftNodes with a no-op state machine.\n"
      "\n"
      "  --creates N   calls at 1 client (default 2000); the C-client phases make 2N\n"
      "  --clients C   concurrency of the concurrent phases (default 16)\n"
      "  --quick       a short run: --creates 200\n"
      "  --verbose     echo the members' INFO log lines (default: WARN and ERROR only)\n"
      "  --help        this text\n"
      "\n"
      "Data directories go to a temp dir ($TMPDIR or /tmp) removed at exit.\n",
      f);
}

int run(const Options& o);

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto num = [&](const char* name) {
      if (i + 1 >= argc) throw std::invalid_argument(std::string(name) + " needs a value");
      int v = std::stoi(argv[++i]);
      if (v < 1) throw std::invalid_argument(std::string(name) + " must be at least 1");
      return v;
    };
    try {
      if (a == "--creates") o.creates = num("--creates");
      else if (a == "--clients") o.clients = num("--clients");
      else if (a == "--quick") o.creates = 200;
      else if (a == "--verbose") o.verbose = true;
      else if (a == "--help" || a == "-h") {
        usage(stdout);
        return 0;
      } else {
        usage(stderr);
        return 2;
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "sluice-raft-bench: %s\n", e.what());
      usage(stderr);
      return 2;
    }
  }
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice-raft-bench: %s\n", e.what());
    remove_tmp();
    return 1;
  }
}

namespace {

int run(const Options& o) {
  const int n1 = o.creates, nc = 2 * o.creates, c = o.clients;
  const std::string cs = std::to_string(c) + " client" + (c == 1 ? "" : "s");
  TmpDir tmp;
  std::printf("sluice-raft-bench: 3-member groups on loopback, %d calls at 1 client, %d at %d clients\n", n1, nc, c);
  std::printf("data in %s (removed at exit), %u hardware threads\n", tmp.path.c_str(),
              std::thread::hardware_concurrency());
  std::fflush(stdout);

  int rc = 0;
  {
    StoreGroup store;
    RawGroup raw;
    std::puts("starting raft-meta: member 1 bootstraps, 2 and 3 join through metadata.join");
    if (!start_store_group(store, tmp.path, o.verbose)) {
      std::fprintf(stderr, "the raft-meta group did not become ready within %lld s\n",
                   static_cast<long long>(kWait.count()));
      return 1;
    }
    std::puts("starting libraft reference: node 1 bootstraps, add_voter 2 and 3");
    if (!start_raw_group(raw, tmp.path, o.verbose)) {
      std::fprintf(stderr, "the libraft group did not become ready\n");
      return 1;
    }
    Member* lm = store.find("leader");
    auto* rleader = raw.leader();
    if (!lm || !rleader) {
      std::fprintf(stderr, "no leader within %lld s\n", static_cast<long long>(kWait.count()));
      return 1;
    }
    auto* leader = lm->store.get();
    if (auto r = leader->create_tenant("bench"); !r) {
      std::fprintf(stderr, "create_tenant: %s\n", r.error().to_string().c_str());
      return 1;
    }
    if (auto r = leader->create_namespace("bench", "b"); !r) {
      std::fprintf(stderr, "create_namespace: %s\n", r.error().to_string().c_str());
      return 1;
    }
    // Warm up (untimed): the first create, the first raw apply, and the follower's
    // forwarding connection (opened on its first forwarded call).
    Member* fm = store.find("follower");
    if (!fm) {
      std::fprintf(stderr, "no follower within %lld s\n", static_cast<long long>(kWait.count()));
      return 1;
    }
    auto* follower = fm->store.get();
    (void)store_phase(*leader, 1, 1, "warm-l");
    (void)store_phase(*follower, 1, 1, "warm-f");
    (void)raw_phase(*rleader, 1, 1, "warm");

    const auto leader_id = lm->id;
    const auto follower_id = fm->id;
    StreamSpec one;
    one.shards = 1;
    const std::size_t entry_bytes =
        raft_meta::encode_command(leader->stream_create_command({"bench", "b", "lc-15-4000"}, one)).size();
    std::printf("raft-meta, 3 members (leader %u), create_stream with 1 shard (entries of about %zu bytes)\n",
                leader_id, entry_bytes);
    std::printf("libraft reference, 3 bare RaftNodes (leader %llu), %zu-byte entries, no-op state machine\n",
                static_cast<unsigned long long>(rleader->leader_id()), kRawEntryBytes);
    std::puts("phases (alternating; cpu = this process's CPU time / wall time, 100% = one core):");
    std::fflush(stdout);

    Phase s1 = store_phase(*leader, 1, n1, "l1");
    print("raft-meta, leader, 1 client", "creates/s", s1);
    Phase r1 = raw_phase(*rleader, 1, n1, "r1");
    print("libraft raw, 1 client", "applies/s", r1);
    Phase sc = store_phase(*leader, c, nc, "lc");
    print("raft-meta, leader, " + cs, "creates/s", sc);
    Phase rcp = raw_phase(*rleader, c, nc, "rc");
    print("libraft raw, " + cs, "applies/s", rcp);
    Phase fc = store_phase(*follower, c, nc, "fc");
    print("raft-meta, via follower " + std::to_string(follower_id) + ", " + cs, "creates/s", fc);

    // Sanity: every create is in the catalog and the members agree (same applied index,
    // same state hash).
    std::uint64_t applied = 0;
    bool agree = poll_until([&] {
      std::uint64_t a0 = store.m[0].store->status().applied.value();
      for (auto& x : store.m)
        if (x.store->status().applied.value() != a0) return false;
      applied = a0;
      return true;
    });
    std::uint64_t h0 = store.m[0].store->state_hash();
    for (auto& x : store.m) agree = agree && x.store->state_hash() == h0;
    const std::uint64_t want = 2 + s1.ok + sc.ok + fc.ok;
    auto listed = leader->list_streams("bench", "b");
    const std::uint64_t have = listed ? listed->size() : 0;
    std::printf("check: %llu streams listed (expected %llu); members %s at applied index %llu\n",
                static_cast<unsigned long long>(have), static_cast<unsigned long long>(want),
                agree ? "agree (equal state hash)" : "DISAGREE", static_cast<unsigned long long>(applied));
    if (have != want || !agree) rc = 1;

    // Leadership must not have moved during the run, or the figures mix in an election.
    const bool moved = role_of(*leader) != "leader" ||
                       rleader->role() != raft_meta::RaftRole::leader;
    auto ratio = [](const Phase& a, const Phase& b) { return b.per_s > 0 ? a.per_s / b.per_s : 0.0; };
    std::puts("summary (creates/s over raw applies/s at the same concurrency)");
    std::printf("  %-38s %8.0f creates/s  %8.0f raw applies/s  ratio %.3f\n", "1 client", s1.per_s, r1.per_s,
                ratio(s1, r1));
    std::printf("  %-38s %8.0f creates/s  %8.0f raw applies/s  ratio %.3f\n", cs.c_str(), sc.per_s, rcp.per_s,
                ratio(sc, rcp));
    std::printf("  %-38s %8.0f creates/s  %8.0f raw applies/s  ratio %.3f\n", (cs + ", via follower").c_str(),
                fc.per_s, rcp.per_s, ratio(fc, rcp));
    std::puts(
        "  Both sides pay the same replication: leader append + fdatasync, AppendEntries over\n"
        "  loopback TCP, follower fdatasync, commit. The difference is the store's own work per\n"
        "  create: JSON encode of the command on the leader (and placement, which reads the\n"
        "  catalog under its lock), an entry of the size above instead of 64 bytes, then on every\n"
        "  member JSON decode and the SQLite apply (stream row, assignment row, change-log row\n"
        "  and its pruning), the watch delivery wake-up, and a catalog snapshot\n"
        "  (sqlite3_serialize) every 1024 entries. Via a follower each create adds an RPC hop (a\n"
        "  JSON frame over loopback to the leader and back, on a connection of its own).");
    const std::uint64_t errors = s1.errors + r1.errors + sc.errors + rcp.errors + fc.errors;
    if (errors) {
      std::printf("  %llu calls failed (see above)\n", static_cast<unsigned long long>(errors));
      rc = 1;
    }
    if (moved) {
      std::puts("  WARNING: leadership moved during the run; the figures include an election");
      rc = 1;
    }
    std::fflush(stdout);
  }
  return rc;
}

}  // namespace
