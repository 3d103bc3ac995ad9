// Measurements sluice-bench takes beside its loads (docs/benchmarks.md): the disk's
// sequential bandwidth (the honest reference: the physical limit, not a slower proxy), the
// server's CPU time from /proc, and consumers fetching at the tail while producers publish.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <Poco/Net/HTTPClientSession.h>
#include <Poco/Net/HTTPRequest.h>
#include <Poco/Net/HTTPResponse.h>

#include <algorithm>
#include <cerrno>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace sluice_bench {

// `dd bs=1M conv=fdatasync`: 1 MiB sequential writes into one new file for about `seconds`
// (at most `max_mib`), then one fdatasync; MB/s over the whole time, the sync included.
// `direct`: the same with O_DIRECT (`dd oflag=direct conv=fdatasync`), which skips the page
// cache. On a VM whose host backs guest memory on first touch, the buffered figure can be
// well below the disk's (docs/benchmarks.md "Keyed publishing: the page cache").
inline double dd_bandwidth(const std::string& dir, int seconds, int max_mib = 8192, bool direct = false) {
  const std::string path = dir + "/dd-probe.bin";
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | (direct ? O_DIRECT : 0), 0644);
  if (fd < 0 && direct && errno == EINVAL) return 0;  // no O_DIRECT here (tmpfs): no figure
  if (fd < 0) {
    std::perror(("open " + path).c_str());
    std::exit(1);
  }
  struct Aligned {  // O_DIRECT wants the buffer aligned to the logical block size
    char* p = static_cast<char*>(std::aligned_alloc(4096, 1 << 20));
    ~Aligned() { std::free(p); }
  } buf;
  std::memset(buf.p, 'd', 1 << 20);
  const std::string_view block(buf.p, 1 << 20);
  std::uint64_t bytes = 0;
  const auto t0 = std::chrono::steady_clock::now();
  const auto until = t0 + std::chrono::seconds(seconds);
  for (int i = 0; i < max_mib && std::chrono::steady_clock::now() < until; ++i) {
    if (::write(fd, block.data(), block.size()) != static_cast<ssize_t>(block.size())) {
      std::perror("dd probe write");
      std::exit(1);
    }
    bytes += block.size();
  }
  if (::fdatasync(fd) != 0) {
    std::perror("dd probe fdatasync");
    std::exit(1);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::close(fd);
  ::unlink(path.c_str());
  return bytes / 1e6 / secs;
}

// What the disk can make durable in a log's own pattern: `writers` threads, each appending
// `chunk`-byte writes to a file of its own and fdatasyncing after every write, for about
// `seconds`; the aggregate MB/s. A broker writes one file per shard replica and syncs each
// after every group, so with `writers` = the files a load keeps syncing at once this is the
// disk's ceiling for that load (docs/benchmarks.md "The disk's ceiling for replication").
inline double concurrent_sync_bandwidth(const std::string& dir, int writers, int chunk, int seconds) {
  std::atomic<std::uint64_t> bytes{0};
  std::atomic<bool> failed{false};
  const auto t0 = std::chrono::steady_clock::now();
  const auto until = t0 + std::chrono::seconds(seconds);
  std::vector<std::thread> threads;
  for (int w = 0; w < writers; ++w)
    threads.emplace_back([&, w] {
      const std::string path = dir + "/sync-probe-" + std::to_string(w) + ".bin";
      int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0) {
        failed = true;
        return;
      }
      const std::string buf(static_cast<std::size_t>(chunk), 's');
      while (std::chrono::steady_clock::now() < until) {
        if (::write(fd, buf.data(), buf.size()) != static_cast<ssize_t>(buf.size()) || ::fdatasync(fd) != 0) {
          failed = true;
          break;
        }
        bytes.fetch_add(buf.size(), std::memory_order_relaxed);
      }
      ::close(fd);
      ::unlink(path.c_str());
    });
  for (auto& t : threads) t.join();
  if (failed) {
    std::perror("concurrent sync probe");
    std::exit(1);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<double>(bytes.load()) / 1e6 / secs;
}

// User + system CPU seconds a process has used so far (/proc/<pid>/stat fields 14 and 15);
// -1 if it cannot be read.
inline double cpu_seconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = all.rfind(')');  // the command name may hold spaces
  if (close == std::string::npos) return -1;
  std::istringstream rest(all.substr(close + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::strtoull(field.c_str(), nullptr, 10);
    if (i == 15) stime = std::strtoull(field.c_str(), nullptr, 10);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

inline double cpu_seconds(const std::vector<pid_t>& pids) {
  double sum = 0;
  for (pid_t p : pids) {
    const double s = cpu_seconds(p);
    if (s < 0) return -1;
    sum += s;
  }
  return sum;
}

// Consumers at the tail: one thread per shard fetching (JSON, long polls) from offset 0 of
// a fresh stream while it is published to, until `stop`. Counts records by next_offset.
class TailFetchers {
 public:
  TailFetchers(int port, const std::string& shards_path, int shards, std::atomic<bool>& stop)
      : stop_(stop) {
    for (int s = 0; s < shards; ++s)
      threads_.emplace_back([this, port, s, path = shards_path + std::to_string(s) + "/records"] {
        run(port, path);
      });
  }
  ~TailFetchers() { join(); }
  void join() {
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }
  std::uint64_t records() const { return records_.load(); }
  std::uint64_t errors() const { return errors_.load(); }

 private:
  void run(int port, const std::string& path) {
    Poco::Net::HTTPClientSession s("127.0.0.1", port);
    s.setKeepAlive(true);
    s.setTimeout(Poco::Timespan(30, 0));
    std::uint64_t offset = 0;
    while (!stop_.load(std::memory_order_relaxed)) {
      try {
        Poco::Net::HTTPRequest req(Poco::Net::HTTPRequest::HTTP_GET,
                                   path + "?offset=" + std::to_string(offset) + "&max=1000&wait_ms=200",
                                   Poco::Net::HTTPMessage::HTTP_1_1);
        s.sendRequest(req);
        Poco::Net::HTTPResponse resp;
        std::istream& body = s.receiveResponse(resp);
        std::string out((std::istreambuf_iterator<char>(body)), std::istreambuf_iterator<char>());
        const auto at = out.find("\"next_offset\":");
        if (resp.getStatus() != 200 || at == std::string::npos) {
          errors_.fetch_add(1);
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
          continue;
        }
        const std::uint64_t next = std::strtoull(out.c_str() + at + 14, nullptr, 10);
        if (next > offset) records_.fetch_add(next - offset, std::memory_order_relaxed);
        offset = std::max(offset, next);
      } catch (const std::exception&) {
        errors_.fetch_add(1);
        s.reset();
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
  }

  std::atomic<bool>& stop_;
  std::atomic<std::uint64_t> records_{0}, errors_{0};
  std::vector<std::thread> threads_;
};

}  // namespace sluice_bench
