// sluice-bench: publish throughput and ack latency, with the disk as the reference.
//
// It is a program, not a test: it prints figures. In one run it
//   1. measures the disk: sequential writes of --chunk bytes, each followed by fdatasync,
//      in the node's data directory (what a durable log can get from this disk);
//   2. starts a sluiced of its own (or uses --url), creates a stream, and publishes
//      --record-bytes records with ack leader over the binary batch API from
//      --connections concurrent connections for --seconds;
//   3. prints records/s, MB/s, ack latency p50/p99/p999 and the ratio to the disk figure;
//   4. unless --no-idempotence: the same load with one key per connection, without and
//      then with idempotent producers (producer_id + sequence), and their ratio.
// Design goals: at 1 KiB records, at least half the disk's fdatasync bandwidth (issue 2);
// idempotence costs at most 10% of the throughput (issue 3).
#include <Poco/Net/HTTPClientSession.h>
#include <Poco/Net/HTTPRequest.h>
#include <Poco/Net/HTTPResponse.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  std::string url;
  std::string sluiced;
  int connections = 8;
  int seconds = 10;
  int record_bytes = 1024;
  int batch_records = 64;
  int shards = 4;
  int chunk = 0;  // disk reference chunk; default = one request's payload
  std::string dir;
  std::string ack = "leader";
  bool idempotence = true;
};

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
  --no-idempotence    skip the idempotent-producer comparison
)");
}

int free_port() {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  int p = ntohs(a.sin_port);
  ::close(s);
  return p;
}

double percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::size_t i = std::min(v.size() - 1, static_cast<std::size_t>(p * v.size()));
  std::nth_element(v.begin(), v.begin() + i, v.end());
  return v[i];
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

int call(Poco::Net::HTTPClientSession& s, const std::string& method, const std::string& path,
         const std::string& body, const std::string& ctype, std::string* out = nullptr) {
  Poco::Net::HTTPRequest req(method, path, Poco::Net::HTTPMessage::HTTP_1_1);
  req.setKeepAlive(true);
  req.setContentType(ctype);
  req.setContentLength(static_cast<std::streamsize>(body.size()));
  s.sendRequest(req).write(body.data(), static_cast<std::streamsize>(body.size()));
  Poco::Net::HTTPResponse res;
  std::istream& is = s.receiveResponse(res);
  std::ostringstream ss;
  ss << is.rdbuf();
  if (out) *out = ss.str();
  return res.getStatus();
}

}  // namespace

int main(int argc, char** argv) {
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
    else if (a == "-h" || a == "--help") { usage(); return 0; }
    else { usage(); return 2; }
  }
  if (o.dir.empty()) {
    std::string t = (fs::temp_directory_path() / "sluice-bench-XXXXXX").string();
    if (!mkdtemp(t.data())) return 1;
    o.dir = t;
  }
  if (o.sluiced.empty())
    o.sluiced = (fs::read_symlink("/proc/self/exe").parent_path() / "sluiced").string();
  const int payload = o.batch_records * (8 + o.record_bytes);
  if (o.chunk == 0) o.chunk = payload;

  std::printf("sluice-bench: %d connections, %d-byte records, %d records/request, ack %s, %d s\n",
              o.connections, o.record_bytes, o.batch_records, o.ack.c_str(), o.seconds);
  std::printf("[1/4] disk reference: %d-byte sequential writes + fdatasync in %s ...\n", o.chunk,
              o.dir.c_str());
  std::fflush(stdout);
  double disk_p50 = 0;
  const double disk_mbps = disk_sync_bandwidth(o.dir, o.chunk, o.seconds, &disk_p50);
  std::printf("      disk: %.1f MB/s (fdatasync p50 %.0f us)\n", disk_mbps, disk_p50);

  pid_t child = -1;
  if (o.url.empty()) {
    const int http = free_port(), raft = free_port(), rpc = free_port();
    o.url = "http://127.0.0.1:" + std::to_string(http);
    child = fork();
    if (child == 0) {
      const std::string log = o.dir + "/sluiced.log";
      int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      const std::string d = "data.dir=" + o.dir + "/data", h = "http.port=" + std::to_string(http),
                        r = "raft.address=127.0.0.1:" + std::to_string(raft),
                        m = "metadata.rpc_address=127.0.0.1:" + std::to_string(rpc);
      execl(o.sluiced.c_str(), "sluiced", "--set", d.c_str(), "--set", h.c_str(), "--set", r.c_str(),
            "--set", m.c_str(), "--set", "http.threads=2", nullptr);
      _exit(127);
    }
  }
  const HttpTarget target = parse_url(o.url);
  // Wait for readiness (polling; a fresh node elects itself within a few seconds).
  {
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    for (;;) {
      try {
        Poco::Net::HTTPClientSession s(target.host, target.port);
        if (call(s, "GET", "/readyz", "", "application/json") == 200) break;
      } catch (...) {
      }
      if (Clock::now() > deadline) {
        std::fprintf(stderr, "node at %s did not become ready\n", o.url.c_str());
        return 1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  {
    Poco::Net::HTTPClientSession s(target.host, target.port);
    call(s, "POST", "/v1/tenants", R"({"name":"bench"})", "application/json");
    call(s, "POST", "/v1/tenants/bench/namespaces", R"({"name":"b"})", "application/json");
  }

  // Phase 1 (the issue-2 figure): keyless records, sticky shard per request.
  // Phase 2 and 3 (idempotence, issue 3): each connection is a producer with its own key,
  // so each request is one batch on one shard; the same shape with and without
  // producer_id/sequence, side by side.
  auto make_body = [&](const std::string* key) {
    std::string body;
    for (int i = 0; i < o.batch_records; ++i) {
      std::uint32_t kl = key ? static_cast<std::uint32_t>(key->size()) : 0xffffffffu;
      std::uint32_t vl = static_cast<std::uint32_t>(o.record_bytes);
      body.append(reinterpret_cast<char*>(&kl), 4).append(reinterpret_cast<char*>(&vl), 4);
      if (key) body += *key;
      body.append(o.record_bytes, static_cast<char>('a' + i % 26));
    }
    return body;
  };
  struct PhaseResult {
    double rps = 0, mbps = 0, p50 = 0, p99 = 0, p999 = 0;
    std::uint64_t errors = 0;
  };
  auto run_phase = [&](const char* title, const std::string& stream, bool keyed, bool idempotent) {
    {
      Poco::Net::HTTPClientSession s(target.host, target.port);
      std::string out;
      int st = call(s, "POST", "/v1/tenants/bench/namespaces/b/streams",
                    R"({"name":")" + stream + R"(","shards":)" + std::to_string(o.shards) + "}",
                    "application/json", &out);
      if (st != 201 && st != 409) {
        std::fprintf(stderr, "create stream failed: %d %s\n", st, out.c_str());
        std::exit(1);
      }
    }
    std::printf("%s: publishing to %s ...\n", title, o.url.c_str());
    std::fflush(stdout);
    const std::string path = "/v1/tenants/bench/namespaces/b/streams/" + stream + "/records?ack=" + o.ack;
    std::atomic<bool> stop{false};
    std::atomic<std::uint64_t> records{0}, errors{0};
    std::mutex lat_mu;
    std::vector<double> lat_all;
    std::vector<std::thread> threads;
    const auto t_start = Clock::now();
    for (int c = 0; c < o.connections; ++c) {
      threads.emplace_back([&, c] {
        const std::string key = "producer-" + std::to_string(c);
        const std::string body = make_body(keyed ? &key : nullptr);
        std::vector<double> lat;
        lat.reserve(1 << 16);
        Poco::Net::HTTPClientSession s(target.host, target.port);
        s.setKeepAlive(true);
        std::uint64_t seq = 0;
        while (!stop.load(std::memory_order_relaxed)) {
          const std::string p = idempotent ? path + "&producer_id=" + std::to_string(c + 1) +
                                                 "&sequence=" + std::to_string(seq)
                                           : path;
          const auto t0 = Clock::now();
          int st = 0;
          try {
            st = call(s, "POST", p, body, "application/vnd.sluice.batch");
          } catch (...) {
            s.reset();
          }
          if (st == 200) {
            ++seq;
            lat.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
            records.fetch_add(o.batch_records, std::memory_order_relaxed);
          } else {
            errors.fetch_add(1, std::memory_order_relaxed);
          }
        }
        std::lock_guard lk(lat_mu);
        lat_all.insert(lat_all.end(), lat.begin(), lat.end());
      });
    }
    for (int s = 1; s <= o.seconds; ++s) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      std::printf("      %2d s: %llu records\n", s, static_cast<unsigned long long>(records.load()));
      std::fflush(stdout);
    }
    stop = true;
    for (auto& t : threads) t.join();
    const double secs = std::chrono::duration<double>(Clock::now() - t_start).count();
    PhaseResult r;
    r.rps = records.load() / secs;
    r.mbps = r.rps * o.record_bytes / 1e6;
    r.p50 = percentile(lat_all, 0.50) / 1000;
    r.p99 = percentile(lat_all, 0.99) / 1000;
    r.p999 = percentile(lat_all, 0.999) / 1000;
    r.errors = errors.load();
    return r;
  };
  auto print = [&](const char* name, const PhaseResult& r) {
    std::printf("  %-22s %9.0f rec/s %7.1f MB/s  p50 %6.2f ms  p99 %6.2f ms  p999 %6.2f ms  failed %llu\n",
                name, r.rps, r.mbps, r.p50, r.p99, r.p999, static_cast<unsigned long long>(r.errors));
  };

  const PhaseResult plain = run_phase("[2/4] keyless, sticky shards", "pub", false, false);
  PhaseResult keyed, idem;
  if (o.idempotence) {
    keyed = run_phase("[3/4] one key per connection", "pub-keyed", true, false);
    idem = run_phase("[4/4] the same, idempotent producers", "pub-idem", true, true);
  }
  std::printf("\nresults (%d-byte records, ack %s, %d connections)\n", o.record_bytes, o.ack.c_str(),
              o.connections);
  print("keyless", plain);
  std::printf("  disk fdatasync         %.1f MB/s\n", disk_mbps);
  std::printf("  ratio to disk          %.2f  (design goal >= 0.50)\n", disk_mbps > 0 ? plain.mbps / disk_mbps : 0);
  if (o.idempotence) {
    print("keyed", keyed);
    print("keyed, idempotent", idem);
    std::printf("  idempotent / plain     %.2f  (design goal >= 0.90)\n", keyed.rps > 0 ? idem.rps / keyed.rps : 0);
  }

  if (child > 0) {
    kill(child, SIGTERM);
    int status = 0;
    waitpid(child, &status, 0);
    std::error_code ec;
    fs::remove_all(o.dir + "/data", ec);
  }
  return 0;
}
