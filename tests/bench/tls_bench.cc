// sluice-bench --tls: publish throughput over HTTPS against plain HTTP (issue 14, "TLS";
// docs/benchmarks.md). The run
//   1. generates a CA and a server certificate with `openssl` in --dir;
//   2. starts two sluiced of its own on loopback, one with a plain listener and one with
//      tls.cert_file/tls.key_file (HTTPS only), each with a --shards stream;
//   3. runs the same load on both (--connections keep-alive connections, each a producer
//      with its own key, --batch records of --record-bytes per request, ack leader),
//      alternating in --rounds slices of --seconds/--rounds so that the disk and the
//      machine's other tenants weigh on both alike;
//   4. prints each round's figures and ratio, then both totals and the ratio HTTPS / HTTP.
// The load's client is the same for both, written on OpenSSL and sockets directly: each
// request (header and body) goes out in one write (over TLS one SSL_write, i.e. 16 KiB
// records). Poco's streams write 4 KiB at a time, which over TLS means 4 KiB records, four
// times the records per request a usual client sends. The client verifies the node's
// certificate against the CA; a connection's handshake happens once (keep-alive).
#include <Poco/Net/Context.h>
#include <Poco/Net/HTTPClientSession.h>
#include <Poco/Net/HTTPSClientSession.h>
#include <Poco/Net/RejectCertificateHandler.h>
#include <Poco/Net/SSLManager.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <strings.h>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench_measure.h"
#include "bench_process.h"
#include "json_phase.h"

namespace sluice_bench {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct TlsOptions {
  int connections = 8, seconds = 10, rounds = 5, record_bytes = 1024, batch = 64, shards = 4;
  std::string dir, sluiced;
};

void usage() {
  std::printf(R"(Usage: sluice-bench --tls [options]
Publish throughput over HTTPS against plain HTTP, two sluiced of its own, alternating rounds.
  --connections N     concurrent publishing connections (default 8)
  --seconds S         measured duration of each load, over all rounds (default 10)
  --rounds N          alternating slices of --seconds/N each (default 5)
  --record-bytes B    value size (default 1024)
  --batch N           records per request (default 64)
  --shards N          shards of each benchmark stream (default 4)
  --dir DIR           data, certificates and logs (default: a temp dir)
  --sluiced PATH      sluiced binary (default: next to this program)
  --node-set KEY=VAL  a configuration key for both sluiced (e.g. storage.fsync=never to
                      see the CPU cost of TLS instead of the disk's bound)
)");
}

Poco::Net::Context::Ptr g_ctx;

std::unique_ptr<Poco::Net::HTTPClientSession> session(bool tls, int port) {
  std::unique_ptr<Poco::Net::HTTPClientSession> s;
  if (tls)
    s = std::make_unique<Poco::Net::HTTPSClientSession>("127.0.0.1", port, g_ctx);
  else
    s = std::make_unique<Poco::Net::HTTPClientSession>("127.0.0.1", port);
  s->setKeepAlive(true);
  s->setTimeout(Poco::Timespan(30, 0));
  return s;
}

int request(bool tls, int port, const std::string& method, const std::string& path, const std::string& body,
            std::string* out = nullptr) {
  try {
    auto s = session(tls, port);
    return call(*s, method, path, body, "application/json", out);
  } catch (const std::exception& e) {
    if (out) *out = e.what();
    return 0;
  }
}

void run_openssl(const std::string& dir, const std::string& args) {
  const std::string cmd = "cd '" + dir + "' && openssl " + args + " >/dev/null 2>>openssl.log";
  if (std::system(cmd.c_str()) != 0) fail("openssl failed: " + args + " (see " + dir + "/openssl.log)");
}

// ca.pem, server.pem, server.key in dir (P-256, two days, for 127.0.0.1).
void make_certificates(const std::string& dir) {
  const std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  run_openssl(dir, "req -x509 " + ec + " -keyout ca.key -out ca.pem -days 2 -subj /CN=sluice-bench-ca");
  {
    FILE* f = std::fopen((dir + "/server.ext").c_str(), "w");
    if (!f) fail("cannot write " + dir + "/server.ext");
    std::fputs("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n", f);
    std::fclose(f);
  }
  run_openssl(dir, "req " + ec + " -keyout server.key -out server.csr -subj /CN=127.0.0.1");
  run_openssl(dir, "x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 "
                   "-extfile server.ext");
}

// One kept-alive HTTP/1.1 connection to 127.0.0.1:port, plain or TLS (ctx set); blocking,
// 30 s socket timeouts. Enough for our own answers (Content-Length bodies).
class RawConn {
 public:
  RawConn(int port, SSL_CTX* ctx) : port_(port), ctx_(ctx) {}
  ~RawConn() { close(); }
  RawConn(const RawConn&) = delete;
  RawConn& operator=(const RawConn&) = delete;

  // Sends `request` (header and body) and reads the answer: its status, 0 on a failure
  // (then *err says why and the connection is closed).
  int exchange(const std::string& request, std::string* err) {
    if (fd_ < 0 && !open(err)) return 0;
    if (!write_all(request.data(), request.size())) return fail("write failed", err);
    std::size_t head_end;
    while ((head_end = in_.find("\r\n\r\n")) == std::string::npos)
      if (!read_more()) return fail("connection closed before the answer's header", err);
    const int status = in_.compare(0, 9, "HTTP/1.1 ") == 0 ? std::atoi(in_.c_str() + 9) : 0;
    std::size_t length = 0;
    for (std::size_t at = 0; at < head_end;) {
      const std::size_t eol = in_.find("\r\n", at);
      if (eol - at > 15 && strncasecmp(in_.c_str() + at, "content-length:", 15) == 0)
        length = std::strtoull(in_.c_str() + at + 15, nullptr, 10);
      at = eol + 2;
    }
    const std::size_t total = head_end + 4 + length;
    while (in_.size() < total)
      if (!read_more()) return fail("connection closed in the answer's body", err);
    if (status != 200 && err) *err = in_.substr(0, std::min<std::size_t>(total, 300));
    in_.erase(0, total);
    return status;
  }

 private:
  bool open(std::string* err) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port_));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    timeval tv{30, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return fail("connect failed", err) != 0;
    if (ctx_) {
      ssl_ = SSL_new(ctx_);
      SSL_set_fd(ssl_, fd_);
      SSL_set1_host(ssl_, "127.0.0.1");
      if (SSL_connect(ssl_) != 1) {
        char buf[256];
        ERR_error_string_n(ERR_get_error(), buf, sizeof buf);
        return fail(std::string("TLS handshake failed: ") + buf, err) != 0;
      }
    }
    return true;
  }
  int fail(const std::string& why, std::string* err) {
    if (err) *err = why;
    close();
    return 0;
  }
  void close() {
    if (ssl_) SSL_free(ssl_);
    ssl_ = nullptr;
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    in_.clear();
    ERR_clear_error();
  }
  bool write_all(const char* p, std::size_t n) {
    if (ssl_) return SSL_write(ssl_, p, static_cast<int>(n)) == static_cast<int>(n);  // blocking: all or error
    while (n > 0) {
      const ssize_t w = ::send(fd_, p, n, MSG_NOSIGNAL);
      if (w <= 0) return false;
      p += w;
      n -= static_cast<std::size_t>(w);
    }
    return true;
  }
  bool read_more() {
    char buf[16384];
    const int n = ssl_ ? SSL_read(ssl_, buf, sizeof buf) : static_cast<int>(::recv(fd_, buf, sizeof buf, 0));
    if (n <= 0) return false;
    in_.append(buf, static_cast<std::size_t>(n));
    return true;
  }

  int port_;
  SSL_CTX* ctx_;
  int fd_ = -1;
  SSL* ssl_ = nullptr;
  std::string in_;
};

SSL_CTX* g_raw_ctx = nullptr;  // the load's TLS client context (verifies against ca.pem)

struct Node {
  bool tls = false;
  int port = 0;
  pid_t pid = -1;
  std::string dir;
};

Node start_node(const TlsOptions& o, bool tls) {
  Node n;
  n.tls = tls;
  n.dir = o.dir + (tls ? "/https" : "/http");
  std::error_code ec;
  fs::remove_all(n.dir, ec);
  fs::create_directories(n.dir);
  n.port = free_port();
  std::vector<std::string> set{"data.dir=" + n.dir + "/data", "http.port=" + std::to_string(n.port),
                               "raft.address=127.0.0.1:" + std::to_string(free_port()),
                               "metadata.rpc_address=127.0.0.1:" + std::to_string(free_port()),
                               "transport.address=127.0.0.1:" + std::to_string(free_port()), "http.threads=2"};
  if (tls) {
    set.push_back("tls.cert_file=" + o.dir + "/server.pem");
    set.push_back("tls.key_file=" + o.dir + "/server.key");
  }
  progress("starting sluiced (%s) on port %d (log %s/sluiced.log)", tls ? "HTTPS" : "HTTP", n.port, n.dir.c_str());
  n.pid = spawn_sluiced(o.sluiced, n.dir + "/sluiced.log", set);
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (request(tls, n.port, "GET", "/readyz", "") != 200) {
    int status = 0;
    if (::waitpid(n.pid, &status, WNOHANG) == n.pid) {
      forget_child(n.pid);
      fail("sluiced exited; log: " + n.dir + "/sluiced.log");
    }
    if (Clock::now() > deadline) fail("sluiced not ready after 60 s; log: " + n.dir + "/sluiced.log");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  request(tls, n.port, "POST", "/v1/tenants", R"({"name":"bench"})");
  request(tls, n.port, "POST", "/v1/tenants/bench/namespaces", R"({"name":"b"})");
  std::string out;
  const int st = request(tls, n.port, "POST", "/v1/tenants/bench/namespaces/b/streams",
                         R"({"name":"tls","shards":)" + std::to_string(o.shards) + "}", &out);
  if (st != 201 && st != 409) fail("create stream: " + std::to_string(st) + " " + out);
  return n;
}

struct Slice {
  std::uint64_t records = 0, errors = 0;
  double secs = 0, cpu_s = -1;
  std::vector<double> lat;  // µs per acknowledged request
  std::string first_error;
};

// One timed load on `n`: connection c publishes its own key's batch in a loop.
Slice run_slice(const TlsOptions& o, const Node& n, int seconds) {
  const std::string path = "/v1/tenants/bench/namespaces/b/streams/tls/records?ack=leader";
  std::vector<std::string> requests;  // header and body, sent in one write
  for (int c = 0; c < o.connections; ++c) {
    const std::string key = "producer-" + std::to_string(c);
    const std::string body = binary_body(o.batch, o.record_bytes, &key);
    requests.push_back("POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: " + kBatchMedia +
                       "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
  }
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> records{0}, errors{0};
  std::mutex mu;
  Slice r;
  const double cpu0 = cpu_seconds(n.pid);
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < o.connections; ++c) {
    threads.emplace_back([&, c] {
      std::vector<double> lat;
      lat.reserve(1 << 15);
      RawConn conn(n.port, n.tls ? g_raw_ctx : nullptr);
      while (!stop.load(std::memory_order_relaxed)) {
        const auto a = Clock::now();
        std::string out;
        const int st = conn.exchange(requests[c], &out);
        if (st == 200) {
          lat.push_back(std::chrono::duration<double, std::micro>(Clock::now() - a).count());
          records.fetch_add(o.batch, std::memory_order_relaxed);
        } else {
          if (errors.fetch_add(1) == 0) {
            std::lock_guard lk(mu);
            r.first_error = std::to_string(st) + " " + out.substr(0, 300);
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(10));  // no hot loop on errors
        }
      }
      std::lock_guard lk(mu);
      r.lat.insert(r.lat.end(), lat.begin(), lat.end());
    });
  }
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  stop = true;
  for (auto& t : threads) t.join();
  r.secs = std::chrono::duration<double>(Clock::now() - t0).count();
  const double cpu1 = cpu_seconds(n.pid);
  if (cpu0 >= 0 && cpu1 >= 0) r.cpu_s = cpu1 - cpu0;
  r.records = records.load();
  r.errors = errors.load();
  if (r.errors) progress("%s: %llu failed requests, the first: %s", n.tls ? "HTTPS" : "HTTP",
                         static_cast<unsigned long long>(r.errors), r.first_error.c_str());
  return r;
}

void print_total(const char* name, std::vector<Slice>& slices, int record_bytes, double* rps_out) {
  double secs = 0, cpu = 0;
  bool cpu_known = true;
  std::uint64_t records = 0, errors = 0;
  std::vector<double> lat;
  for (auto& s : slices) {
    secs += s.secs;
    records += s.records;
    errors += s.errors;
    cpu_known &= s.cpu_s >= 0;
    cpu += s.cpu_s;
    lat.insert(lat.end(), s.lat.begin(), s.lat.end());
  }
  const double rps = secs > 0 ? records / secs : 0;
  *rps_out = rps;
  std::printf("  %-6s %9.0f rec/s %7.1f MB/s  p50 %6.2f ms  p99 %6.2f ms  failed %llu", name, rps,
              rps * record_bytes / 1e6, percentile(lat, 0.5) / 1000, percentile(lat, 0.99) / 1000,
              static_cast<unsigned long long>(errors));
  if (cpu_known && records > 0) std::printf("  server CPU %.2f us/record", cpu * 1e6 / records);
  std::printf("\n");
}

}  // namespace

int run_tls_bench(int argc, char** argv) {
  TlsOptions o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "sluice-bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--tls") continue;
    if (a == "--connections") o.connections = std::stoi(val());
    else if (a == "--seconds") o.seconds = std::stoi(val());
    else if (a == "--rounds") o.rounds = std::stoi(val());
    else if (a == "--record-bytes") o.record_bytes = std::stoi(val());
    else if (a == "--batch") o.batch = std::stoi(val());
    else if (a == "--shards") o.shards = std::stoi(val());
    else if (a == "--dir") o.dir = val();
    else if (a == "--sluiced") o.sluiced = val();
    else if (a == "--node-set") node_settings().push_back(val());
    else if (a == "-h" || a == "--help") { usage(); return 0; }
    else {
      std::fprintf(stderr, "sluice-bench --tls: unknown option %s\n", a.c_str());
      usage();
      return 2;
    }
  }
  if (o.connections < 1 || o.connections > 256 || o.seconds < 1 || o.seconds > 3600 || o.rounds < 1 ||
      o.rounds > o.seconds || o.batch < 1 || o.record_bytes < 0 || o.shards < 1 || o.shards > 256) {
    std::fprintf(stderr, "sluice-bench --tls: out of range (connections 1..256, seconds 1..3600, rounds "
                         "1..seconds, shards 1..256)\n");
    return 2;
  }
  if (o.sluiced.empty()) o.sluiced = (fs::canonical("/proc/self/exe").parent_path() / "sluiced").string();
  if (o.dir.empty()) {
    char tmpl[] = "/tmp/sluice-bench-tls-XXXXXX";
    if (!::mkdtemp(tmpl)) fail("mkdtemp failed");
    o.dir = tmpl;
  }
  fs::create_directories(o.dir);
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);

  std::printf("sluice-bench --tls: %d connections, %d-byte records, %d records/request, %d shards, ack leader, "
              "%d s per load in %d alternating rounds\n",
              o.connections, o.record_bytes, o.batch, o.shards, o.seconds, o.rounds);
  make_certificates(o.dir);
  Poco::Net::initializeSSL();
  Poco::Net::Context::Params p;
  p.caLocation = o.dir + "/ca.pem";
  p.verificationMode = Poco::Net::Context::VERIFY_RELAXED;
  g_ctx = new Poco::Net::Context(Poco::Net::Context::TLS_CLIENT_USE, p);
  Poco::Net::SSLManager::instance().initializeClient(nullptr, new Poco::Net::RejectCertificateHandler(false), g_ctx);
  g_raw_ctx = SSL_CTX_new(TLS_client_method());
  SSL_CTX_set_min_proto_version(g_raw_ctx, TLS1_2_VERSION);
  if (SSL_CTX_load_verify_locations(g_raw_ctx, (o.dir + "/ca.pem").c_str(), nullptr) != 1) fail("cannot load ca.pem");
  SSL_CTX_set_verify(g_raw_ctx, SSL_VERIFY_PEER, nullptr);

  const Node plain = start_node(o, false);
  const Node tls = start_node(o, true);
  const int slice = o.seconds / o.rounds;
  std::vector<Slice> ps, ts;
  for (int r = 1; r <= o.rounds; ++r) {
    progress("round %d/%d: HTTP, %d s", r, o.rounds, slice);
    ps.push_back(run_slice(o, plain, slice));
    progress("round %d/%d: HTTPS, %d s", r, o.rounds, slice);
    ts.push_back(run_slice(o, tls, slice));
    const double a = ps.back().records / ps.back().secs, b = ts.back().records / ts.back().secs;
    std::printf("  round %2d: HTTP %9.0f rec/s, HTTPS %9.0f rec/s, ratio %.2f\n", r, a, b, a > 0 ? b / a : 0);
    std::fflush(stdout);
  }
  std::printf("\nresults (%d s of each load in %d rounds)\n", slice * o.rounds, o.rounds);
  double plain_rps = 0, tls_rps = 0;
  print_total("HTTP", ps, o.record_bytes, &plain_rps);
  print_total("HTTPS", ts, o.record_bytes, &tls_rps);
  std::printf("  HTTPS / HTTP  %.2f  (target >= 0.80)\n", plain_rps > 0 ? tls_rps / plain_rps : 0);
  progress("stopping both sluiced");
  stop_children();
  std::error_code ec;
  fs::remove_all(plain.dir + "/data", ec);
  fs::remove_all(tls.dir + "/data", ec);
  return 0;
}

}  // namespace sluice_bench
