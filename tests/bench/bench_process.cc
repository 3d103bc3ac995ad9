// Processes and HTTP for the benchmark programs (bench_process.h).
#include "bench_process.h"

#include <Poco/Net/HTTPRequest.h>
#include <Poco/Net/HTTPResponse.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <deque>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

namespace sluice_bench {

using Clock = std::chrono::steady_clock;

int free_port() {
  // A port is released before its user binds it, so the kernel may hand the same one out
  // again: never return a port twice in one run (two of a broker's listeners would clash).
  static std::mutex mu;
  static std::set<int> given;
  std::lock_guard lk(mu);
  for (int attempt = 0;; ++attempt) {
    int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
    const int p = ntohs(a.sin_port);
    ::close(s);
    if (given.insert(p).second || attempt >= 100) return p;
  }
}

// Every process this program started; stopped at the end, on failure and on SIGINT/SIGTERM.
namespace {
constexpr int kMaxChildren = 64;
pid_t g_children[kMaxChildren];
std::atomic<int> g_nchildren{0};
}  // namespace

void progress(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::fputs("sluice-bench: ", stderr);
  std::vfprintf(stderr, fmt, ap);
  std::fputc('\n', stderr);
  va_end(ap);
}

// SIGTERM to every live child, SIGKILL to those still there after timeout_s; reaps all.
void stop_children(int timeout_s) {
  const int n = g_nchildren.load();
  std::vector<pid_t> alive;
  for (int i = 0; i < n; ++i)
    if (g_children[i] > 0) alive.push_back(g_children[i]);
  for (pid_t p : alive) ::kill(p, SIGTERM);
  const auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
  while (!alive.empty() && Clock::now() < deadline) {
    std::erase_if(alive, [](pid_t p) { return ::waitpid(p, nullptr, WNOHANG) != 0; });
    if (!alive.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (pid_t p : alive) {
    progress("pid %d ignored SIGTERM for %d s: SIGKILL", static_cast<int>(p), timeout_s);
    ::kill(p, SIGKILL);
    ::waitpid(p, nullptr, 0);
  }
  for (int i = 0; i < n; ++i) g_children[i] = 0;
}

void forget_child(pid_t pid) {
  for (int i = 0; i < g_nchildren.load(); ++i)
    if (g_children[i] == pid) g_children[i] = 0;
}

[[noreturn]] void fail(const std::string& msg) {
  progress("FAILED: %s", msg.c_str());
  stop_children();
  std::exit(1);
}

// Ctrl-C / SIGTERM: SIGTERM to every child, SIGKILL to those left after 10 s (only
// async-signal-safe calls: kill, waitpid, nanosleep).
extern "C" void on_signal(int) {
  const int n = g_nchildren.load();
  for (int i = 0; i < n; ++i)
    if (g_children[i] > 0) ::kill(g_children[i], SIGTERM);
  for (int round = 0; round < 200; ++round) {
    bool left = false;
    for (int i = 0; i < n; ++i)
      if (g_children[i] > 0) {
        if (::waitpid(g_children[i], nullptr, WNOHANG) != 0) g_children[i] = 0;
        else left = true;
      }
    if (!left) _exit(130);
    timespec ts{0, 50 * 1000 * 1000};
    ::nanosleep(&ts, nullptr);
  }
  for (int i = 0; i < n; ++i)
    if (g_children[i] > 0) ::kill(g_children[i], SIGKILL);
  _exit(130);
}

// --node-set KEY=VALUE: given to every sluiced this program starts, after its own settings.
std::vector<std::string>& node_settings() {
  static std::vector<std::string> settings;
  return settings;
}

// Starts sluiced with --set key=value for each setting, output to log.
pid_t spawn_sluiced(const std::string& sluiced, const std::string& log,
                    const std::vector<std::string>& settings) {
  if (g_nchildren.load() >= kMaxChildren) fail("too many processes");
  std::vector<std::string> args{"sluiced"};
  auto add = [&](const std::vector<std::string>& list) {
    for (const auto& kv : list) {
      args.push_back("--set");
      args.push_back(kv);
    }
  };
  add(settings);
  add(node_settings());
  pid_t pid = fork();
  if (pid < 0) fail("fork failed");
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the benchmark
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(sluiced.c_str(), argv.data());
    _exit(127);
  }
  g_children[g_nchildren.fetch_add(1)] = pid;
  return pid;
}

double percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::size_t i = std::min(v.size() - 1, static_cast<std::size_t>(p * v.size()));
  std::nth_element(v.begin(), v.begin() + i, v.end());
  return v[i];
}

int call(Poco::Net::HTTPClientSession& s, const std::string& method, const std::string& path,
         const std::string& body, const std::string& ctype, std::string* out) {
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

// One request on a fresh connection; 0 when it could not be made (refused, timed out).
int http(int port, const std::string& method, const std::string& path, const std::string& body,
         std::string* out) {
  try {
    Poco::Net::HTTPClientSession s("127.0.0.1", port);
    s.setTimeout(Poco::Timespan(30, 0));
    return call(s, method, path, body, "application/json", out);
  } catch (...) {
    return 0;
  }
}

// Every integer value of "key": in a JSON text, in order (enough for our own answers).
std::vector<long long> ints_of(const std::string& j, const std::string& key) {
  std::vector<long long> v;
  const std::string pat = "\"" + key + "\":";
  for (auto at = j.find(pat); at != std::string::npos; at = j.find(pat, at + 1))
    v.push_back(std::atoll(j.c_str() + at + pat.size()));
  return v;
}
std::vector<std::string> strings_of(const std::string& j, const std::string& key) {
  std::vector<std::string> v;
  const std::string pat = "\"" + key + "\":\"";
  for (auto at = j.find(pat); at != std::string::npos; at = j.find(pat, at + 1)) {
    const auto b = at + pat.size();
    v.push_back(j.substr(b, j.find('"', b) - b));
  }
  return v;
}

namespace {
// FNV-1a 64, as sdk/include/sluice/hash.h (the key partitioner: fnv1a64(key) % shards).
std::uint64_t fnv1a64(std::string_view s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}
}  // namespace

std::string key_for_shard(int conn, int shard, int shards) {
  for (int j = 0;; ++j) {
    std::string k = "producer-" + std::to_string(conn) + "-" + std::to_string(j);
    if (static_cast<int>(fnv1a64(k) % static_cast<std::uint64_t>(shards)) == shard) return k;
  }
}

namespace {
// The last `lines` lines of a log, for a failure message (the log may live in a temp dir).
std::string log_tail(const std::string& path, std::size_t lines) {
  std::ifstream in(path);
  std::deque<std::string> tail;
  for (std::string l; std::getline(in, l);) {
    tail.push_back(std::move(l));
    if (tail.size() > lines) tail.pop_front();
  }
  std::string out;
  for (const auto& l : tail) out += "\n  | " + l;
  return out;
}
}  // namespace

// Polls GET /readyz until 200; fails if the process exits or after timeout_s.
void wait_ready(const char* name, pid_t pid, int port, const std::string& log, int timeout_s) {
  const auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
  for (;;) {
    if (http(port, "GET", "/readyz") == 200) return;
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      forget_child(pid);
      fail(std::string(name) + " exited (status " + std::to_string(status) + "); log: " + log + log_tail(log, 15));
    }
    if (Clock::now() > deadline)
      fail(std::string(name) + " not ready after " + std::to_string(timeout_s) + " s; log: " + log +
           log_tail(log, 15));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}


}  // namespace sluice_bench
