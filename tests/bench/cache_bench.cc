// sluice-bench --cache: cache puts and gets per second, against Redis SET.
//
// In one run it
//   1. starts a sluiced of its own (storage.fsync=always, the default) and creates a cache;
//   2. for 1 and for 16 clients (one keep-alive connection each): PUTs of --value-bytes
//      values to keys drawn from --keys keys for --seconds, then GETs of those keys for
//      --seconds; each figure is completed requests per second (every answer must be 200);
//   3. if redis-server is on the PATH (or --redis-server PATH): starts one on a loopback
//      port in a temp dir with appendonly yes, appendfsync always, no RDB snapshots, and
//      runs the same PUT load as SET (one RESP connection per client), then prints the
//      ratio cache puts / Redis SETs per client count.
// Figures go to stdout, progress to stderr. Everything it starts is stopped at the end.
#include "cache_bench.h"

#include <Poco/Net/HTTPClientSession.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench_process.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace sluice_bench {
namespace {

struct CacheOptions {
  int seconds = 5;
  int value_bytes = 100;
  int keys = 10000;
  int shards = 4;
  std::string dir, sluiced, redis = "redis-server";
};

struct Rate {
  double per_s = 0;
  std::uint64_t errors = 0;
  std::string first_error;
};

// `op(session_or_fd, rng)` returns true on success; runs `clients` threads for `seconds`.
template <class Conn, class Open, class Op>
Rate load(int clients, int seconds, Open open, Op op) {
  std::atomic<std::uint64_t> done{0}, errors{0};
  std::string first_error;
  std::mutex mu;
  std::atomic<bool> go{false}, stop{false};
  std::vector<std::thread> ts;
  for (int c = 0; c < clients; ++c) {
    ts.emplace_back([&, c] {
      Conn conn = open();
      std::mt19937_64 rng(c * 7919 + 1);
      while (!go.load()) std::this_thread::yield();
      std::uint64_t n = 0;
      while (!stop.load()) {
        std::string err;
        if (op(conn, rng, err)) {
          ++n;
        } else {
          if (errors++ == 0) {
            std::lock_guard lk(mu);
            first_error = err;
          }
          if (errors.load() > 100) break;
        }
      }
      done += n;
    });
  }
  const auto t0 = Clock::now();
  go = true;
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  stop = true;
  for (auto& t : ts) t.join();
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  return {done.load() / secs, errors.load(), first_error};
}

// CPU seconds (user + system) the process has used so far; 0 if unreadable.
double cpu_seconds(pid_t pid) {
  FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
  if (!f) return 0;
  char buf[2048];
  const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = 0;
  const char* p = std::strrchr(buf, ')');  // the command name may hold spaces
  if (!p) return 0;
  unsigned long long ut = 0, st = 0;
  // Fields after ')': state(3) ... utime(14) stime(15).
  if (std::sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2) return 0;
  return static_cast<double>(ut + st) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

std::string key_of(std::mt19937_64& rng, int keys) { return "key-" + std::to_string(rng() % keys); }

// A minimal RESP client: SET key value, expecting +OK.
int redis_connect(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

bool redis_set(int fd, const std::string& key, const std::string& value, std::string& err) {
  if (fd < 0) {
    err = "not connected";
    return false;
  }
  std::string cmd = "*3\r\n$3\r\nSET\r\n$" + std::to_string(key.size()) + "\r\n" + key + "\r\n$" +
                    std::to_string(value.size()) + "\r\n" + value + "\r\n";
  if (::send(fd, cmd.data(), cmd.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(cmd.size())) {
    err = "send failed";
    return false;
  }
  char buf[64];
  std::size_t got = 0;
  while (got < 5) {
    const ssize_t n = ::recv(fd, buf + got, sizeof buf - got, 0);
    if (n <= 0) {
      err = "recv failed";
      return false;
    }
    got += static_cast<std::size_t>(n);
  }
  if (std::string(buf, 5) != "+OK\r\n") {
    err = "unexpected reply: " + std::string(buf, got);
    return false;
  }
  return true;
}

std::string which(const std::string& prog) {
  if (prog.find('/') != std::string::npos) return fs::exists(prog) ? prog : "";
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "";
  for (std::size_t at = 0; at <= p.size();) {
    auto colon = p.find(':', at);
    if (colon == std::string::npos) colon = p.size();
    const std::string cand = p.substr(at, colon - at) + "/" + prog;
    if (!p.substr(at, colon - at).empty() && ::access(cand.c_str(), X_OK) == 0) return cand;
    at = colon + 1;
  }
  return "";
}

void usage() {
  std::puts(R"(Usage: sluice-bench --cache [options]
  --seconds S         measured duration of each phase (default 5)
  --value-bytes B     value size (default 100)
  --keys N            distinct keys the load draws from (default 10000)
  --shards N          cache.shards of the node (default 4)
  --dir DIR           where the node's and Redis's data live (default: a temp dir)
  --sluiced PATH      sluiced binary (default: next to this program)
  --redis-server P    redis-server binary (default: redis-server on the PATH; none: skipped)
  --node-set KEY=VAL  a configuration key for the sluiced it starts (repeatable)
Puts and gets per second with 1 and 16 clients; Redis SET under appendfsync always with
the same clients and values, and the ratio.)");
}

}  // namespace

int run_cache_bench(int argc, char** argv) {
  CacheOptions o;
  o.sluiced = (fs::path(fs::canonical("/proc/self/exe")).parent_path() / "sluiced").string();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) fail(a + " needs a value");
      return argv[++i];
    };
    if (a == "--cache") continue;
    if (a == "--seconds") o.seconds = std::stoi(val());
    else if (a == "--value-bytes") o.value_bytes = std::stoi(val());
    else if (a == "--keys") o.keys = std::stoi(val());
    else if (a == "--shards") o.shards = std::stoi(val());
    else if (a == "--dir") o.dir = val();
    else if (a == "--sluiced") o.sluiced = val();
    else if (a == "--redis-server") o.redis = val();
    else if (a == "--node-set") node_settings().push_back(val());
    else if (a == "--help" || a == "-h") {
      usage();
      return 0;
    } else {
      std::fprintf(stderr, "sluice-bench --cache: unknown option '%s'\n", a.c_str());
      usage();
      return 2;
    }
  }
  if (o.seconds < 1 || o.value_bytes < 0 || o.keys < 1) fail("--seconds, --keys must be positive");
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  bool own_dir = o.dir.empty();
  if (own_dir) {
    char tmpl[] = "/tmp/sluice-cache-bench-XXXXXX";
    if (!::mkdtemp(tmpl)) fail("mkdtemp failed");
    o.dir = tmpl;
  }
  const int port = free_port(), raft = free_port(), rpc = free_port();
  progress("starting sluiced on port %d (log %s/sluiced.log)", port, o.dir.c_str());
  const pid_t child = spawn_sluiced(o.sluiced, o.dir + "/sluiced.log",
                                    {"data.dir=" + o.dir + "/data", "http.port=" + std::to_string(port),
                                     "raft.address=127.0.0.1:" + std::to_string(raft),
                                     "metadata.rpc_address=127.0.0.1:" + std::to_string(rpc),
                                     "transport.address=127.0.0.1:" + std::to_string(free_port()),
                                     "cache.shards=" + std::to_string(o.shards)});
  wait_ready("sluiced", child, port, o.dir + "/sluiced.log", 60);
  http(port, "POST", "/v1/tenants", R"({"name":"bench"})");
  http(port, "POST", "/v1/tenants/bench/namespaces", R"({"name":"b"})");
  std::string out;
  if (http(port, "POST", "/v1/tenants/bench/namespaces/b/caches", R"({"name":"c"})", &out) != 201)
    fail("cache create failed: " + out);
  const std::string base = "/v1/tenants/bench/namespaces/b/caches/c/keys/";
  const std::string value(static_cast<std::size_t>(o.value_bytes), 'v');
  auto open_http = [port] { return std::make_unique<Poco::Net::HTTPClientSession>("127.0.0.1", port); };
  using Http = std::unique_ptr<Poco::Net::HTTPClientSession>;
  auto put = [&](Http& s, std::mt19937_64& rng, std::string& err) {
    std::string body;
    const int st = call(*s, "PUT", base + key_of(rng, o.keys), value, "application/octet-stream", &body);
    if (st != 200) err = std::to_string(st) + " " + body;
    return st == 200;
  };
  auto get = [&](Http& s, std::mt19937_64& rng, std::string& err) {
    std::string body;
    const int st = call(*s, "GET", base + key_of(rng, o.keys), "", "", &body);
    if (st != 200 && st != 404) err = std::to_string(st) + " " + body;
    return st == 200 || st == 404;  // a key the put phase never drew
  };
  // Every key once, so the get phases find values.
  {
    Http s = open_http();
    for (int k = 0; k < o.keys; ++k) {
      std::string body;
      if (call(*s, "PUT", base + "key-" + std::to_string(k), value, "application/octet-stream", &body) != 200)
        fail("fill failed: " + body);
    }
  }
  const int counts[] = {1, 16};
  double puts[2] = {0, 0}, sets[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    progress("cache puts, %d client(s), %d s", counts[i], o.seconds);
    double cpu0 = cpu_seconds(child);
    Rate p = load<Http>(counts[i], o.seconds, open_http, put);
    const double put_cpu = cpu_seconds(child) - cpu0;
    progress("cache gets, %d client(s), %d s", counts[i], o.seconds);
    cpu0 = cpu_seconds(child);
    Rate g = load<Http>(counts[i], o.seconds, open_http, get);
    const double get_cpu = cpu_seconds(child) - cpu0;
    if (p.errors || g.errors)
      fail("errors: " + std::to_string(p.errors + g.errors) + ", first: " + p.first_error + g.first_error);
    puts[i] = p.per_s;
    std::printf("cache puts/s  %2d client(s): %10.0f   (%d-byte values, %d keys, cache.shards %d, ack leader; "
                "sluiced CPU %.0f us/put)\n",
                counts[i], p.per_s, o.value_bytes, o.keys, o.shards, put_cpu * 1e6 / std::max(1.0, p.per_s * o.seconds));
    std::printf("cache gets/s  %2d client(s): %10.0f   (sluiced CPU %.0f us/get)\n", counts[i], g.per_s,
                get_cpu * 1e6 / std::max(1.0, g.per_s * o.seconds));
  }
  stop_children();
  const std::string redis = o.redis == "none" ? "" : which(o.redis);
  if (redis.empty()) {
    std::printf("%s\n", o.redis == "none" ? "no Redis comparison (--redis-server none)"
                                          : "redis-server not found: no Redis comparison (install it, or --redis-server PATH)");
  } else {
    const int rport = free_port();
    const std::string rdir = o.dir + "/redis";
    fs::create_directories(rdir);
    progress("starting %s on port %d (appendfsync always, dir %s)", redis.c_str(), rport, rdir.c_str());
    const pid_t rpid = fork();
    if (rpid == 0) {
      ::setpgid(0, 0);
      const std::string ps = std::to_string(rport);
      execl(redis.c_str(), redis.c_str(), "--port", ps.c_str(), "--bind", "127.0.0.1", "--dir", rdir.c_str(),
            "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--daemonize", "no",
            "--logfile", (rdir + "/redis.log").c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    int fd = -1;
    for (int t = 0; t < 200 && fd < 0; ++t) {
      fd = redis_connect(rport);
      if (fd < 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (fd < 0) {
      ::kill(rpid, SIGKILL);
      fail("redis-server did not accept connections");
    }
    ::close(fd);
    auto open_redis = [rport] { return redis_connect(rport); };
    auto set = [&](int& f, std::mt19937_64& rng, std::string& err) { return redis_set(f, key_of(rng, o.keys), value, err); };
    for (int i = 0; i < 2; ++i) {
      progress("redis SET, %d client(s), %d s", counts[i], o.seconds);
      Rate r = load<int>(counts[i], o.seconds, open_redis, set);
      if (r.errors) {
        ::kill(rpid, SIGKILL);
        fail("redis errors: " + r.first_error);
      }
      sets[i] = r.per_s;
      std::printf("redis SET/s   %2d client(s): %10.0f   (appendonly yes, appendfsync always)\n", counts[i], r.per_s);
    }
    ::kill(rpid, SIGTERM);
    ::waitpid(rpid, nullptr, 0);
    for (int i = 0; i < 2; ++i)
      std::printf("ratio cache puts / redis SET, %2d client(s): %.2f\n", counts[i], puts[i] / sets[i]);
  }
  if (own_dir) fs::remove_all(o.dir);
  return 0;
}

}  // namespace sluice_bench
