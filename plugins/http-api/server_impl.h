// Private to http-api's connection code (server.cc and session.cc): HttpServer::Impl, the
// state the acceptor and the sessions share, and SessionBase, what the server and the
// Exchange need of a connection whatever its stream. Thread model and lifetime rules:
// server.h. Beast stays out of this header (session.cc has it); Asio is needed for the
// io_context, acceptor and pools Impl holds.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>

#include "gate.h"
#include "http_types.h"
#include "metrics.h"
#include "router.h"
#include "server.h"
#include "subscribe.h"
#include "tls.h"

namespace sluice::http_api {

namespace net = boost::asio;
using tcp = net::ip::tcp;

class SessionBase;
struct WsContext;  // ws_session.h

struct HttpServer::Impl {
  HttpConfig cfg;
  PluginHost* host;
  Node* node = nullptr;
  // Declared before the io_context: sessions destroyed with it still count connections.
  HttpMetrics metrics;
  std::unique_ptr<TokenStore> tokens;  // auth.enabled only
  std::mutex reload_mu;                // reload() is not concurrent with itself
  std::unique_ptr<Router> router;
  std::shared_ptr<Gate> gate = std::make_shared<Gate>();

  // Sessions waiting for the router's answer. No pending I/O holds them, and Exchanges
  // hold them only weakly (so a late Node callback never keeps a socket alive past the
  // io_context).
  std::mutex parked_mu;
  std::unordered_map<SessionBase*, std::shared_ptr<SessionBase>> parked;

  // One io_context per io thread (server.h "Thread model"); a connection stays on the one
  // it was accepted into, chosen round robin.
  std::vector<std::unique_ptr<net::io_context>> iocs;
  std::vector<net::executor_work_guard<net::io_context::executor_type>> work;
  std::size_t next_ioc = 0;  // the acceptor's strand only
  std::optional<net::thread_pool> pool;
  std::optional<tcp::acceptor> acceptor;
  std::optional<net::steady_timer> accept_backoff;
  std::vector<std::thread> threads;
  std::atomic<std::uint16_t> port{0};

  std::mutex state_mu;
  bool started = false;
  bool stopped = false;

  void log(LogLevel lvl, const std::string& msg) {
    if (host) host->log(lvl, "http-api", msg);
  }
  void park(std::shared_ptr<SessionBase> s) {
    std::lock_guard lk(parked_mu);
    SessionBase* p = s.get();
    parked.emplace(p, std::move(s));
  }
  void unpark(SessionBase* s) {
    std::shared_ptr<SessionBase> keep;  // released outside the lock
    std::lock_guard lk(parked_mu);
    if (auto it = parked.find(s); it != parked.end()) {
      keep = std::move(it->second);
      parked.erase(it);
    }
  }
  // Every open session, for http.max_connections. A session registers in its constructor
  // and leaves in its destructor.
  std::mutex conns_mu;
  std::unordered_set<SessionBase*> conns;
  std::atomic<std::int64_t> last_limit_log_ns{0};
  // tls.cert_file set: the context new connections take (reload_certificates() swaps it).
  std::unique_ptr<TlsContextHolder> tls;
  std::atomic<std::int64_t> last_tls_log_ns{0};

  void do_accept();
  bool evict_one();
  void refuse(tcp::socket s);
  void log_limit(const std::string& msg) { log_rate_limited(last_limit_log_ns, msg, true); }
  void log_tls(const std::string& msg) { log_rate_limited(last_tls_log_ns, msg, false); }
  void log_rate_limited(std::atomic<std::int64_t>& last, const std::string& msg, bool limit_counters);
  void teardown();
  // session.cc: the new connection's Session (over TLS on a TLS listener), started.
  void start_session(tcp::socket&& s);
  WsContext ws_context();  // session.cc
};

// What the server and the Exchange need of a connection, whatever its stream.
class SessionBase : public std::enable_shared_from_this<SessionBase> {
 public:
  // Where a connection is, for eviction at http.max_connections (evict_one()):
  //  - kNew: accepted, not yet a byte of its first request read (or its TLS handshake
  //    unfinished). Within kNewGrace of entering the phase it is evicted last, and the
  //    newest first: an honest client's request or handshake is on its way, a burst of
  //    accepts can run before its first read does (a CI run evicted an honest request so),
  //    and the connection accepted longest ago is the one whose read comes next. Silent
  //    for longer than that, it is evicted right after the idle ones, oldest first: a
  //    flood of silent connections (or TLS ones that never finish a handshake) must not
  //    outlast honest clients that are still handshaking or sending;
  //  - kWaiting: idle between requests. Evicted first: reconnecting costs its client least;
  //  - kReading: a request begun and not whole yet (a slow-loris looks like this, and so
  //    does an honest request larger than one read);
  //  - kBusy (a request in progress) and kClosing are never evicted.
  enum Phase : int { kNew, kWaiting, kReading, kBusy, kClosing };
  static constexpr std::int64_t kNewGraceNs = 1'000'000'000;
  // Eviction order, lower first (-1: never); within a rank the oldest in its phase goes,
  // except within kFreshNew, where the newest goes.
  static constexpr int kFreshNew = 3;
  static int eviction_rank(int p, std::int64_t since, std::int64_t now) {
    switch (p) {
      case kWaiting: return 0;
      case kNew: return now - since >= kNewGraceNs ? 1 : kFreshNew;
      case kReading: return 2;
      default: return -1;
    }
  }
  static bool evictable(int p) { return p == kWaiting || p == kNew || p == kReading; }
  static std::int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  explicit SessionBase(HttpServer::Impl& impl) : impl_(impl) {
    impl_.metrics.connection_opened();
    std::lock_guard lk(impl_.conns_mu);
    impl_.conns.insert(this);
  }
  virtual ~SessionBase() {
    {
      std::lock_guard lk(impl_.conns_mu);
      impl_.conns.erase(this);
    }
    impl_.metrics.connection_closed();
  }

  // Under impl.conns_mu (eviction's choice).
  int phase() const { return phase_.load(std::memory_order_relaxed); }
  std::int64_t phase_since() const { return phase_since_.load(std::memory_order_relaxed); }
  bool mark_evicting() {
    int expected = phase();
    while (evictable(expected))
      if (phase_.compare_exchange_weak(expected, kClosing)) return true;
    return false;
  }
  // Strand only: closes a connection chosen for eviction; its pending read then fails.
  virtual void evicted() = 0;
  virtual net::any_io_executor executor() = 0;
  // Strand only: sends the router's answer, then reads the next request or closes.
  virtual void answer(HttpResponse r, const std::string& route) = 0;
  // Strand only: the router accepted a subscription; the stream leaves this session for a
  // WebSocket one (ws_session.cc), which completes the handshake with the kept request.
  virtual void upgrade(Subscription sub, const std::string& route) = 0;

 protected:
  // False if the connection was chosen for eviction meanwhile (it stays closing). Setting
  // the phase it is already in keeps its start: a new connection's first do_read() must
  // not make it look newer than the connections accepted after it whose sessions have not
  // run yet, or eviction's "newest kNew first" picks the one whose request is on its way.
  bool set_phase(int p) {
    int cur = phase();
    do {
      if (cur == kClosing) return false;
      if (cur == p) return true;
    } while (!phase_.compare_exchange_weak(cur, p));
    phase_since_.store(now_ns(), std::memory_order_relaxed);
    return true;
  }

  HttpServer::Impl& impl_;
  std::atomic<int> phase_{kNew};
  std::atomic<std::int64_t> phase_since_{now_ns()};
};

}  // namespace sluice::http_api
