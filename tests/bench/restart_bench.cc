// sluice-bench --restart GB: restart time of a node holding GB GiB (issue 12, "Restart").
//
// It is a program, not a test: it prints figures. In one run it
//   1. checks the free space of --dir (GB * 1.1 + 1 GiB needed) and starts a sluiced of its own
//      with storage.verify_on_start=--verify (default checkpoint; docs/architecture.md "Restart");
//   2. fills it with GB GiB: --record-bytes records (default 1 KiB), --batch per binary request
//      (default 64), ack=leader, --streams streams of --shards shards each, from
//      --connections connections; a progress line on stderr about every 2 s;
//   3. stops it cleanly (SIGTERM, waits for the exit) and times start -> GET /readyz 200;
//      With a fast start mode it then waits for the log's "background verification done"
//      line and prints how long after /readyz it came;
//   4. publishes for --seconds more, SIGKILLs it (the page cache keeps what was written,
//      unless --drop-caches empties it before each start), and times start -> /readyz again; then checks that every acknowledged record is
//      there (sum of the shards' high watermarks >= records acknowledged);
//   5. prints both figures next to the 2 s target (docs/benchmarks.md "Restart") and removes
//      the node's data.
// Figures go to stdout, progress to stderr.
#include <Poco/Net/HTTPClientSession.h>
#include <Poco/Net/HTTPRequest.h>
#include <Poco/Net/HTTPResponse.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_process.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

using sluice_bench::call;
using sluice_bench::free_port;
using sluice_bench::http;
using sluice_bench::progress;

namespace {

struct RestartOptions {
  double gib = 1;
  int connections = 4;
  int record_bytes = 1024;
  int batch = 64;
  int shards = 4;
  int streams = 2;
  int seconds = 5;  // publishing after the clean restart, before the SIGKILL
  std::string verify = "checkpoint";  // storage.verify_on_start of the node
  bool drop_caches = false;  // empty the page cache before each start (as after a power cut)
  std::string dir, sluiced;
};

pid_t g_child = -1;

[[noreturn]] void die(const std::string& msg) {
  progress("FAILED: %s", msg.c_str());
  if (g_child > 0) {
    ::kill(g_child, SIGKILL);
    ::waitpid(g_child, nullptr, 0);
  }
  std::exit(1);
}

// sync + echo 3 > /proc/sys/vm/drop_caches: the start then reads from the disk, not memory.
void drop_page_cache() {
  ::sync();
  const int fd = ::open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
  if (fd < 0 || ::write(fd, "3", 1) != 1) die("--drop-caches: cannot write /proc/sys/vm/drop_caches (needs root)");
  ::close(fd);
}

// Seconds until `needle` appears in `log` beyond byte `from` (polled every 100 ms), or a
// negative value after `timeout_s`.
double time_to_log_line(const std::string& log, std::uintmax_t from, const std::string& needle, double timeout_s) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    std::error_code ec;
    const auto size = fs::file_size(log, ec);
    if (!ec && size > from) {
      std::FILE* f = std::fopen(log.c_str(), "rb");
      if (f) {
        std::string tail(size - from, '\0');
        std::fseek(f, static_cast<long>(from), SEEK_SET);
        tail.resize(std::fread(tail.data(), 1, tail.size(), f));
        std::fclose(f);
        if (tail.find(needle) != std::string::npos)
          return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      }
    }
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_s) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

extern "C" void on_restart_signal(int) {
  if (g_child > 0) ::kill(g_child, SIGKILL);
  _exit(130);
}

struct Node {
  int http = 0, raft = 0, rpc = 0;
  std::string dir, log, sluiced, verify;
};

void start(const Node& n) {
  std::vector<std::string> args{"sluiced",
                                "--set", "data.dir=" + n.dir + "/data",
                                "--set", "http.port=" + std::to_string(n.http),
                                "--set", "raft.address=127.0.0.1:" + std::to_string(n.raft),
                                "--set", "metadata.rpc_address=127.0.0.1:" + std::to_string(n.rpc),
                                "--set", "http.threads=2",
                                "--set", "storage.verify_on_start=" + n.verify};
  const pid_t pid = fork();
  if (pid < 0) die("fork failed");
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    const int fd = ::open(n.log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(n.sluiced.c_str(), argv.data());
    _exit(127);
  }
  g_child = pid;
}

// Seconds from now until GET /readyz answers 200 (polled every 5 ms).
double time_to_ready(const Node& n, int timeout_s) {
  const auto t0 = Clock::now();
  for (;;) {
    if (http(n.http, "GET", "/readyz") == 200)
      return std::chrono::duration<double>(Clock::now() - t0).count();
    int status = 0;
    if (::waitpid(g_child, &status, WNOHANG) == g_child) {
      g_child = -1;
      die("sluiced exited (status " + std::to_string(status) + "); log: " + n.log);
    }
    if (Clock::now() - t0 > std::chrono::seconds(timeout_s)) die("not ready in time; log: " + n.log);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void stop(int sig) {
  ::kill(g_child, sig);
  ::waitpid(g_child, nullptr, 0);
  g_child = -1;
}

std::string stream_name(int i) { return "restart-" + std::to_string(i); }
const std::string kStreams = "/v1/tenants/bench/namespaces/b/streams/";

// Publishes until `bytes` of record values are acknowledged or `seconds` have passed (0:
// no limit); answers the records acknowledged.
std::uint64_t publish(const Node& n, const RestartOptions& o, std::uint64_t bytes, int seconds) {
  std::string body;
  for (int i = 0; i < o.batch; ++i) {
    const std::uint32_t kl = 0xffffffffu, vl = static_cast<std::uint32_t>(o.record_bytes);
    body.append(reinterpret_cast<const char*>(&kl), 4).append(reinterpret_cast<const char*>(&vl), 4);
    body.append(o.record_bytes, static_cast<char>('a' + i % 26));
  }
  const std::uint64_t target_records = bytes / o.record_bytes;
  std::atomic<std::uint64_t> records{0};
  std::atomic<bool> stop_now{false};
  std::atomic<int> errors{0};
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < o.connections; ++c)
    threads.emplace_back([&, c] {
      Poco::Net::HTTPClientSession s("127.0.0.1", n.http);
      s.setKeepAlive(true);
      s.setTimeout(Poco::Timespan(60, 0));
      const std::string path = kStreams + stream_name(c % o.streams) + "/records?ack=leader";
      while (!stop_now.load()) {
        int st = 0;
        try {
          st = call(s, "POST", path, body, "application/vnd.sluice.batch");
        } catch (...) {
          s.reset();
        }
        if (st == 200) {
          if (records.fetch_add(o.batch) + o.batch >= target_records && target_records) stop_now = true;
        } else if (errors.fetch_add(1) > 100) {
          stop_now = true;
        }
      }
    });
  auto last = Clock::now();
  while (!stop_now.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const double el = std::chrono::duration<double>(Clock::now() - t0).count();
    if (seconds > 0 && el >= seconds) stop_now = true;
    if (Clock::now() - last >= std::chrono::seconds(2)) {
      last = Clock::now();
      const double gib = double(records.load()) * o.record_bytes / (1 << 30);
      if (bytes) progress("fill: %.2f GiB of %.2f, %.0f MB/s", gib, double(bytes) / (1 << 30),
                     double(records.load()) * o.record_bytes / 1e6 / el);
      else progress("publishing: %.2f GiB, %.0f MB/s", gib, double(records.load()) * o.record_bytes / 1e6 / el);
    }
  }
  for (auto& t : threads) t.join();
  if (errors.load() > 100) die("more than 100 failed publishes; log: " + n.log);
  return records.load();
}

// Sum over all streams of the shards' high watermarks.
std::uint64_t stored_records(const Node& n, const RestartOptions& o) {
  std::uint64_t sum = 0;
  for (int i = 0; i < o.streams; ++i) {
    std::string out;
    if (http(n.http, "GET", kStreams + stream_name(i) + "/shards", "", &out) != 200) die("GET shards: " + out);
    const std::string pat = "\"high_watermark\":";
    for (auto at = out.find(pat); at != std::string::npos; at = out.find(pat, at + 1))
      sum += std::strtoull(out.c_str() + at + pat.size(), nullptr, 10);
  }
  return sum;
}

}  // namespace

int run_restart_bench(int argc, char** argv) {
  RestartOptions o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--restart") o.gib = std::stod(val());
    else if (a == "--connections") o.connections = std::stoi(val());
    else if (a == "--record-bytes") o.record_bytes = std::stoi(val());
    else if (a == "--batch") o.batch = std::stoi(val());
    else if (a == "--shards") o.shards = std::stoi(val());
    else if (a == "--streams") o.streams = std::stoi(val());
    else if (a == "--seconds") o.seconds = std::stoi(val());
    else if (a == "--dir") o.dir = val();
    else if (a == "--verify") o.verify = val();
    else if (a == "--drop-caches") o.drop_caches = true;
    else if (a == "-h" || a == "--help") {
      std::printf("usage: sluice-bench --restart GB [options]   (GB GiB, default 1)\n"
                  "  --verify MODE       storage.verify_on_start of the node (default checkpoint)\n"
                  "  --drop-caches       empty the page cache before each start (root), as after a power cut\n"
                  "  --streams N         streams (default 2), --shards N shards each (default 4)\n"
                  "  --connections N     publishing connections (default 4)\n"
                  "  --record-bytes B    value size (default 1024), --batch N per request (default 64)\n"
                  "  --seconds S         publishing after the clean restart, before SIGKILL (default 5)\n"
                  "  --dir DIR           data directory (default: a temp dir; needs GB*1.1+1 GiB free)\n"
                  "  --sluiced PATH      sluiced binary (default: next to this program)\n");
      return 0;
    }
    else if (a == "--sluiced") o.sluiced = val();
    else die("--restart does not take " + a);
  }
  if (o.gib <= 0 || o.gib > 1024 || o.connections < 1 || o.streams < 1 || o.shards < 1 || o.batch < 1 ||
      o.record_bytes < 1 || o.seconds < 1)
    die("out of range (--restart GiB in (0, 1024], the rest >= 1)");
  if (o.dir.empty()) {
    std::string t = (fs::temp_directory_path() / "sluice-restart-XXXXXX").string();
    if (!mkdtemp(t.data())) die("mkdtemp failed");
    o.dir = t;
  }
  fs::create_directories(o.dir);
  if (o.sluiced.empty()) o.sluiced = (fs::read_symlink("/proc/self/exe").parent_path() / "sluiced").string();
  const std::uint64_t bytes = static_cast<std::uint64_t>(o.gib * double(1ull << 30));
  struct statvfs sv {};
  if (::statvfs(o.dir.c_str(), &sv) != 0) die("statvfs " + o.dir);
  const double free_gib = double(sv.f_bavail) * sv.f_frsize / (1ull << 30);
  if (free_gib < o.gib * 1.1 + 1)
    die("only " + std::to_string(free_gib) + " GiB free in " + o.dir + ": --restart " + std::to_string(o.gib) +
        " needs " + std::to_string(o.gib * 1.1 + 1));
  ::signal(SIGINT, on_restart_signal);
  ::signal(SIGTERM, on_restart_signal);
  ::signal(SIGPIPE, SIG_IGN);

  Node n{free_port(), free_port(), free_port(), o.dir, o.dir + "/sluiced.log", o.sluiced, o.verify};
  std::printf("sluice-bench --restart: %.2f GiB, %d streams x %d shards, %d-byte records, %d per request, "
              "ack leader, %d connections, storage.verify_on_start=%s, data in %s (%.0f GiB free)\n",
              o.gib, o.streams, o.shards, o.record_bytes, o.batch, o.connections, o.verify.c_str(), o.dir.c_str(),
              free_gib);
  std::fflush(stdout);
  start(n);
  (void)time_to_ready(n, 120);
  http(n.http, "POST", "/v1/tenants", R"({"name":"bench"})");
  http(n.http, "POST", "/v1/tenants/bench/namespaces", R"({"name":"b"})");
  for (int i = 0; i < o.streams; ++i) {
    std::string out;
    const int st = http(n.http, "POST", "/v1/tenants/bench/namespaces/b/streams",
                        R"({"name":")" + stream_name(i) + R"(","shards":)" + std::to_string(o.shards) + "}", &out);
    if (st != 201 && st != 409) die("create stream: " + std::to_string(st) + " " + out);
  }
  progress("filling %.2f GiB", o.gib);
  const auto f0 = Clock::now();
  std::uint64_t acked = publish(n, o, bytes, 0);
  const double fill_s = std::chrono::duration<double>(Clock::now() - f0).count();
  std::printf("  filled: %.2f GiB of record values in %.0f s\n", double(acked) * o.record_bytes / (1 << 30), fill_s);

  progress("clean stop (SIGTERM)");
  const auto s0 = Clock::now();
  stop(SIGTERM);
  const double stop_s = std::chrono::duration<double>(Clock::now() - s0).count();
  if (o.drop_caches) drop_page_cache();
  std::error_code lec;
  const std::uintmax_t log_from = fs::file_size(n.log, lec);
  start(n);
  const double clean_s = time_to_ready(n, 600);
  std::printf("  clean stop took %.2f s; start -> /readyz after a clean stop: %.2f s%s\n", stop_s, clean_s,
              o.drop_caches ? " (page cache dropped)" : "");
  std::fflush(stdout);
  if (o.verify != "all") {
    // What the fast start skipped is CRC-checked in the background (storage.verify_in_background,
    // at storage.verify_mb_per_sec, default 128 MiB/s).
    progress("waiting for the background verification");
    const double v = time_to_log_line(n.log, lec ? 0 : log_from, "background verification done",
                                      o.gib * 1024 / 16 + 120);
    if (v < 0)
      std::printf("  background verification: not done within %.0f s\n", o.gib * 1024 / 16 + 120);
    else
      std::printf("  background verification of what the start skipped: done %.1f s after /readyz\n", v);
    std::fflush(stdout);
  }

  progress("publishing %d s more, then SIGKILL", o.seconds);
  acked += publish(n, o, 0, o.seconds);
  stop(SIGKILL);
  if (o.drop_caches) drop_page_cache();  // SIGKILL keeps the page cache; a power cut does not
  start(n);
  const double kill_s = time_to_ready(n, 600);
  const std::uint64_t stored = stored_records(n, o);
  std::printf("  start -> /readyz after SIGKILL: %.2f s\n", kill_s);
  std::printf("  records acknowledged %llu, stored after the SIGKILL restart %llu: %s\n",
              static_cast<unsigned long long>(acked), static_cast<unsigned long long>(stored),
              stored >= acked ? "none lost" : "LOST RECORDS");
  stop(SIGTERM);

  std::printf("\nrestart (%.2f GiB, target: ready in <= 2 s)\n", o.gib);
  std::printf("  after a clean stop     %6.2f s  %s\n", clean_s, clean_s <= 2 ? "(met)" : "(MISSED)");
  std::printf("  after SIGKILL          %6.2f s  %s\n", kill_s, kill_s <= 2 ? "(met)" : "(MISSED)");
  std::error_code ec;
  fs::remove_all(o.dir + "/data", ec);
  return stored >= acked ? 0 : 1;
}
