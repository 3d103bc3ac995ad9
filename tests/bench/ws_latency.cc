#include "ws_latency.h"

#include <Poco/Buffer.h>
#include <Poco/Net/HTTPClientSession.h>
#include <Poco/Net/HTTPRequest.h>
#include <Poco/Net/HTTPResponse.h>
#include <Poco/Net/WebSocket.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench_process.h"

namespace sluice_bench {

namespace {
using Clock = std::chrono::steady_clock;
namespace pn = Poco::Net;

// Every "value":"<digits>" in a JSON frame (our own values are decimal sequence numbers).
template <class F>
void each_value(const char* p, std::size_t n, F f) {
  const std::string_view text(p, n);
  const std::string_view key = "\"value\":\"";
  for (auto at = text.find(key); at != std::string_view::npos; at = text.find(key, at + 1)) {
    std::uint64_t v = 0;
    std::size_t i = at + key.size();
    bool any = false;
    for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i, any = true) v = v * 10 + (text[i] - '0');
    if (any) f(v);
  }
}
}  // namespace

WsLatencyResult run_ws_latency(int port, const std::string& shard_path, const std::string& publish_path,
                               int seconds) {
  WsLatencyResult r;
  constexpr std::size_t kMax = 200000;  // publishes at most (and the send-time table's size)
  std::vector<std::atomic<std::int64_t>> sent_ns(kMax);
  std::vector<double> lat;
  std::mutex lat_mu;
  std::atomic<bool> stop{false};
  std::atomic<bool> subscribed{false};
  std::string sub_error;

  std::thread sub([&] {
    try {
      pn::HTTPClientSession s("127.0.0.1", static_cast<Poco::UInt16>(port));
      pn::HTTPRequest req(pn::HTTPRequest::HTTP_GET, shard_path + "/subscribe?format=json&credit=1000&offset=0",
                          pn::HTTPMessage::HTTP_1_1);
      pn::HTTPResponse res;
      pn::WebSocket ws(s, req, res);
      ws.setReceiveTimeout(Poco::Timespan(30, 0));
      subscribed = true;
      Poco::Buffer<char> buf(0);
      std::uint64_t since_credit = 0;
      while (!stop.load()) {
        if (!ws.poll(Poco::Timespan(0, 200000), pn::Socket::SELECT_READ)) continue;
        int flags = 0;
        buf.resize(0);
        const int n = ws.receiveFrame(buf, flags);
        const auto now = Clock::now().time_since_epoch().count();
        const int op = flags & pn::WebSocket::FRAME_OP_BITMASK;
        if (op == pn::WebSocket::FRAME_OP_PING) {
          ws.sendFrame(buf.begin(), n,
                       static_cast<int>(pn::WebSocket::FRAME_FLAG_FIN) | static_cast<int>(pn::WebSocket::FRAME_OP_PONG));
          continue;
        }
        if (op == pn::WebSocket::FRAME_OP_CLOSE || (n == 0 && flags == 0)) {
          sub_error = "the server closed the subscription";
          return;
        }
        if (op != pn::WebSocket::FRAME_OP_TEXT) continue;
        std::uint64_t got = 0;
        std::vector<double> batch;
        each_value(buf.begin(), static_cast<std::size_t>(n), [&](std::uint64_t v) {
          ++got;
          if (v < kMax) {
            const auto t0 = sent_ns[v].load();
            if (t0 > 0) batch.push_back(static_cast<double>(now - t0) / 1e6);
          }
        });
        {
          std::lock_guard lk(lat_mu);
          lat.insert(lat.end(), batch.begin(), batch.end());
        }
        since_credit += got;
        if (since_credit >= 500) {  // keep the credit ahead of the publisher
          const std::string c = "{\"credit\":" + std::to_string(since_credit) + "}";
          ws.sendFrame(c.data(), static_cast<int>(c.size()));
          since_credit = 0;
        }
      }
      ws.shutdown();
    } catch (const std::exception& e) {
      sub_error = e.what();
    }
  });
  const auto sub_deadline = Clock::now() + std::chrono::seconds(30);
  while (!subscribed && sub_error.empty() && Clock::now() < sub_deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));

  pn::HTTPClientSession s("127.0.0.1", static_cast<Poco::UInt16>(port));
  s.setKeepAlive(true);
  s.setTimeout(Poco::Timespan(30, 0));
  const auto end = Clock::now() + std::chrono::seconds(seconds);
  std::uint64_t seq = 0;
  while (subscribed && Clock::now() < end && seq < kMax) {
    const std::string body = "{\"records\":[{\"value\":\"" + std::to_string(seq) + "\"}]}";
    sent_ns[seq].store(Clock::now().time_since_epoch().count());
    std::string out;
    int st = 0;
    try {
      st = call(s, "POST", publish_path, body, "application/json", &out);
    } catch (const std::exception& e) {
      out = e.what();
      s.reset();
    }
    if (st == 200) {
      ++seq;
    } else {
      sent_ns[seq].store(0);
      if (r.errors++ == 0) r.first_error = std::to_string(st) + " " + out.substr(0, 300);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  r.published = seq;
  // Let the last records arrive (bounded), then stop the subscriber.
  const auto drain = Clock::now() + std::chrono::seconds(10);
  while (Clock::now() < drain) {
    {
      std::lock_guard lk(lat_mu);
      if (lat.size() >= seq) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  stop = true;
  sub.join();
  if (!sub_error.empty() && r.first_error.empty()) r.first_error = "subscriber: " + sub_error;
  r.delivered = lat.size();
  r.p50 = percentile(lat, 0.50);
  r.p99 = percentile(lat, 0.99);
  r.max = percentile(lat, 1.0);
  return r;
}

}  // namespace sluice_bench
