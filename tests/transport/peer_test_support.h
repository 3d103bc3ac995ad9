// Shared by the peer transport tests: nodes on loopback, a searchable log, one request's
// answer, and a client that speaks the frames by hand. Internal linkage (an anonymous
// namespace): each test file gets its own copy.
#pragma once

#include <gtest/gtest.h>

#include <boost/asio.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "peer_transport.h"

using namespace sluice;
using namespace sluice::core;
using namespace std::chrono_literals;

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

constexpr auto kWait = std::chrono::seconds(30);
constexpr PeerMessageType kEcho = 0x0100;
constexpr PeerMessageType kHold = 0x0101;

// A log sink the tests can search.
struct Log {
  std::mutex mu;
  std::vector<std::string> lines;
  void add(LogLevel, const std::string& m) {
    std::lock_guard lk(mu);
    lines.push_back(m);
  }
  bool has(const std::string& a, const std::string& b = "", const std::string& c = "") {
    std::lock_guard lk(mu);
    for (const auto& l : lines)
      if (l.find(a) != std::string::npos && l.find(b) != std::string::npos && l.find(c) != std::string::npos)
        return true;
    return false;
  }
  std::string all() {
    std::lock_guard lk(mu);
    std::string s;
    for (const auto& l : lines) s += l + "\n";
    return s;
  }
};

bool poll_until(const std::function<bool()>& cond, std::chrono::milliseconds limit = kWait) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!cond()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

struct TestNode {
  std::shared_ptr<PeerDirectory> dir = std::make_shared<PeerDirectory>();
  std::shared_ptr<Log> log = std::make_shared<Log>();
  std::unique_ptr<AsioPeerTransport> t;
  NodeId id;
  std::string cluster;

  TestNode(std::uint32_t node, std::string cluster_id = "cluster-a", std::string failpoints = "",
           std::chrono::milliseconds setup_timeout = 10s)
      : id(node), cluster(std::move(cluster_id)) {
    PeerTransportOptions o;
    o.setup_timeout = setup_timeout;
    o.self = id;
    o.cluster_id = cluster;
    o.directory_id = "dir-" + std::to_string(node);
    o.listen_address = "127.0.0.1:0";
    o.failpoint_file = std::move(failpoints);
    auto l = log;
    o.log = [l](LogLevel lv, const std::string& m) { l->add(lv, m); };
    auto r = AsioPeerTransport::start(o, dir);
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().to_string());
    t = std::move(r.value());
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(t->port()); }
  void knows(const TestNode& other) {
    auto s = PeerDirectory::parse_static(std::to_string(other.id.value()) + "=" + other.address());
    ASSERT_TRUE(s.ok());
    auto cur = std::map<NodeId, std::string>();
    dir->set_static(s.value());
  }
};

// One request's answer, with the thread its callback ran on.
struct Answer {
  std::promise<Result<std::string>> p;
  std::future<Result<std::string>> f = p.get_future();
  std::atomic<int> calls{0};
  std::thread::id thread;
  PeerCallback cb() {
    return [this](Result<std::string> r) {
      thread = std::this_thread::get_id();
      if (calls.fetch_add(1) == 0) p.set_value(std::move(r));
    };
  }
  Result<std::string> get() {
    if (f.wait_for(kWait) != std::future_status::ready) return Error(Errc::internal, "the test waited in vain");
    return f.get();
  }
};

void echo_handler(AsioPeerTransport& t) {
  ASSERT_TRUE(t.handle(kEcho, [](const PeerIdentity& from, std::string payload, PeerResponder r) {
                 r("from " + std::to_string(from.node.value()) + "/" + from.directory_id + ": " + payload);
               }).ok());
}

// A blocking client that speaks the frames by hand.
struct RawClient {
  asio::io_context io;
  tcp::socket s{io};
  explicit RawClient(std::uint16_t port) { s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port)); }
  void send(const std::string& bytes) { asio::write(s, asio::buffer(bytes)); }
  void hello(const std::string& cluster = "cluster-a", std::uint32_t node = 77) {
    send(peerwire::encode_frame(peerwire::Header{0, peerwire::kHelloType, 0, 0},
                                peerwire::encode_hello({NodeId{node}, cluster, "raw-dir"})));
  }
  // Reads until the peer closes; true if it did (EOF or reset) within the deadline.
  bool closed_by_peer() {
    s.non_blocking(true);
    char buf[4096];
    const auto end = std::chrono::steady_clock::now() + kWait;
    while (std::chrono::steady_clock::now() < end) {
      boost::system::error_code ec;
      s.read_some(asio::buffer(buf), ec);
      if (ec == asio::error::would_block) {
        std::this_thread::sleep_for(5ms);
        continue;
      }
      if (ec) return true;  // eof or reset
    }
    return false;
  }
};

}  // namespace
