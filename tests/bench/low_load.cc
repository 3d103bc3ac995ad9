#include "low_load.h"

#include <fcntl.h>
#include <unistd.h>

#include <Poco/Net/HTTPClientSession.h>
#include <Poco/Net/HTTPRequest.h>
#include <Poco/Net/HTTPResponse.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <istream>
#include <sstream>
#include <thread>

#include "bench_measure.h"
#include "bench_process.h"

namespace sluice_bench {
namespace {

using Clock = std::chrono::steady_clock;

double pct_ms(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))] / 1000;
}

}  // namespace

LowLoadResult run_low_load(int port, const std::string& path, const std::string& body,
                           const std::string& media, const std::string& dir, int seconds,
                           const std::vector<pid_t>& server_pids) {
  LowLoadResult r;
  const std::string probe_path = dir + "/low-load-probe.bin";
  const int fd = ::open(probe_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    std::perror(("open " + probe_path).c_str());
    std::exit(1);
  }
  const std::string block(4096, 's');
  std::vector<double> probe, lat;
  probe.reserve(1 << 16);
  lat.reserve(1 << 16);
  Poco::Net::HTTPClientSession s("127.0.0.1", static_cast<Poco::UInt16>(port));
  s.setKeepAlive(true);
  s.setTimeout(Poco::Timespan(30, 0));
  double load_secs = 0, cpu_secs = 0;
  for (int slice = 0; slice < seconds; ++slice) {
    // The reference: the smallest durable write, for one second (bounded in count too).
    auto until = Clock::now() + std::chrono::seconds(1);
    for (int n = 0; Clock::now() < until && n < 50000; ++n) {
      const auto t0 = Clock::now();
      if (::write(fd, block.data(), block.size()) != static_cast<ssize_t>(block.size()) ||
          ::fdatasync(fd) != 0) {
        std::perror("low-load probe write");
        std::exit(1);
      }
      probe.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    // The load: one record per request, one connection, for one second.
    const double cpu0 = server_pids.empty() ? -1 : cpu_seconds(server_pids);
    const auto l0 = Clock::now();
    until = l0 + std::chrono::seconds(1);
    for (int n = 0; Clock::now() < until && n < 50000; ++n) {
      const auto t0 = Clock::now();
      int status = 0;
      std::string out;
      try {
        status = call(s, "POST", path, body, media, &out);
      } catch (const std::exception& e) {
        out = e.what();
        s.reset();
      }
      if (status == 200) {
        lat.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      } else {
        if (r.errors++ == 0) r.first_error = std::to_string(status) + " " + out.substr(0, 300);
        std::this_thread::sleep_for(std::chrono::milliseconds(10));  // no hot loop on errors
      }
    }
    load_secs += std::chrono::duration<double>(Clock::now() - l0).count();
    const double cpu1 = server_pids.empty() ? -1 : cpu_seconds(server_pids);
    if (cpu0 >= 0 && cpu1 >= 0) cpu_secs += cpu1 - cpu0;
    std::printf("      %2d s: %zu requests, %zu probe writes\n", slice + 1, lat.size(), probe.size());
    std::fflush(stdout);
  }
  ::close(fd);
  ::unlink(probe_path.c_str());
  r.rps = load_secs > 0 ? static_cast<double>(lat.size()) / load_secs : 0;
  if (!server_pids.empty() && !lat.empty()) r.cpu_us = cpu_secs * 1e6 / static_cast<double>(lat.size());
  r.p50 = pct_ms(lat, 0.50);
  r.p99 = pct_ms(lat, 0.99);
  r.p999 = pct_ms(lat, 0.999);
  r.probe_p50 = pct_ms(probe, 0.50);
  r.probe_p99 = pct_ms(probe, 0.99);
  return r;
}

}  // namespace sluice_bench
