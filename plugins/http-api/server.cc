// HttpServer (server.h) and the server side of http-api's connections: the acceptor,
// connection accounting and eviction at http.max_connections, the refusal when every
// connection is busy, rate-limited logging, teardown, and start/reload/stop. Impl and
// SessionBase are in server_impl.h; the connections themselves in session.cc (HTTP) and
// ws_session.cc (WebSocket). Asio alone: Beast stays in those two. Thread model and
// lifetime rules: server.h.
#include "server.h"

#include <pthread.h>
#include <algorithm>
#include <iterator>
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <boost/asio/buffer.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/system/error_code.hpp>

#include "problem.h"
#include "router.h"
#include "server_impl.h"
#include "tls.h"

namespace sluice::http_api {

using boost::system::error_code;

namespace {
constexpr std::size_t kMinClosingBound = 1024;
}  // namespace

void HttpServer::Impl::do_accept() {
  net::io_context& home = *iocs[next_ioc++ % iocs.size()];
  acceptor->async_accept(net::make_strand(home), [this](error_code ec, tcp::socket s) {
    if (ec == net::error::operation_aborted) return;
    if (ec) {
      // e.g. EMFILE: back off instead of spinning.
      log(LogLevel::warn, "accept failed: " + ec.message());
      accept_backoff->expires_after(std::chrono::milliseconds(100));
      accept_backoff->async_wait([this](error_code e) {
        if (!e) do_accept();
      });
      return;
    }
    error_code ignored;
    s.set_option(tcp::no_delay(true), ignored);  // small responses, often pipelined
    // WebSocket subscriptions count too, as connections that are never evicted. A
    // connection already closing (evicted and its close not yet run on its io thread, or
    // draining after its answer for up to 2 s) does not: it is on its way out, and counting
    // it would refuse a client for a slot that is being freed (a burst of closes can outrun
    // their io thread). But closing ones are bounded too, by the same limit: a client that
    // sends a request and never reads could otherwise pile up draining connections (each a
    // descriptor and a read buffer) at its connection rate. Beyond that a new connection is
    // closed at once, without even the 503. The bound is at least kMinClosingBound: with a
    // small limit, one burst's evictions alone outnumber it. Refused connections still
    // draining (refuse()) count as closing: a flood against a node whose every connection
    // is busy would otherwise pile them up, each a descriptor for up to 1 s.
    std::size_t open = static_cast<std::size_t>(std::max<std::int64_t>(0, metrics.ws_open()));
    std::size_t closing = static_cast<std::size_t>(std::max<std::int64_t>(0, metrics.refusing()));
    {
      std::lock_guard lk(conns_mu);
      for (const SessionBase* c : conns) {
        if (c->phase() == SessionBase::kClosing) ++closing;
        else ++open;
      }
    }
    if (closing >= std::max<std::size_t>(cfg.max_connections, kMinClosingBound)) {
      metrics.connection_refused();
      log_limit(std::to_string(closing) + " connections already closing (the bound: http.max_connections, "
                "at least " + std::to_string(kMinClosingBound) + "): closed a new one at once");
      s.close(ignored);
    } else if (open >= cfg.max_connections && !evict_one()) {
      refuse(std::move(s));
    } else {
      start_session(std::move(s));
    }
    do_accept();
  });
}

bool HttpServer::Impl::evict_one() {
  std::shared_ptr<SessionBase> victim;
  {
    std::lock_guard lk(conns_mu);
    const std::int64_t now = SessionBase::now_ns();
    // A choice that cannot be taken (its destructor is waiting for conns_mu, so lock() is
    // empty; or it left an evictable phase meanwhile) is passed over for the next best:
    // refusing the newcomer would turn it away for a slot that is being freed.
    SessionBase* skipped[4];
    std::size_t n_skipped = 0;
    while (!victim && n_skipped < std::size(skipped)) {
      SessionBase* best = nullptr;
      int best_rank = 0;
      std::int64_t best_since = 0;
      for (SessionBase* c : conns) {
        const std::int64_t since = c->phase_since();
        const int rank = SessionBase::eviction_rank(c->phase(), since, now);
        if (rank < 0 || std::find(skipped, skipped + n_skipped, c) != skipped + n_skipped) continue;
        const bool before = rank == SessionBase::kFreshNew ? since > best_since : since < best_since;
        if (!best || rank < best_rank || (rank == best_rank && before)) {
          best = c;
          best_rank = rank;
          best_since = since;
        }
      }
      if (!best) break;
      victim = best->weak_from_this().lock();
      if (victim && !victim->mark_evicting()) victim.reset();
      if (!victim) skipped[n_skipped++] = best;
    }
  }
  if (!victim) return false;
  log_limit("at http.max_connections (" + std::to_string(cfg.max_connections) +
            "): closing the connection idle or reading longest to admit a new one");
  net::post(victim->executor(), [victim] { victim->evicted(); });
  return true;
}

// Every connection has a request in progress: answer 503 and close, after reading (and
// dropping) for a moment what the client sent, so the answer is not lost to a reset.
// Under TLS the connection is closed at once: a 503 would need a handshake first, the very
// work the limit keeps off a busy node.
void HttpServer::Impl::refuse(tcp::socket s) {
  metrics.connection_refused();
  log_limit("at http.max_connections (" + std::to_string(cfg.max_connections) +
            ") with a request in progress on every connection: refused a new connection" +
            (tls ? " (closed: TLS)" : " with 503"));
  if (tls) {
    error_code ignored;
    s.close(ignored);
    return;
  }
  HttpResponse p = problem(Error(Errc::unavailable, "too many connections: every one of the " +
                                                        std::to_string(cfg.max_connections) +
                                                        " allowed (http.max_connections) has a request in progress"));
  // Counted in metrics.refusing() from here to its close (the destructor), so do_accept()
  // bounds how many linger. HttpMetrics outlives the io_contexts that may destroy it.
  struct Refused {
    Refused(tcp::socket s, HttpMetrics& m) : sock(std::move(s)), timer(sock.get_executor()), metrics(m) {
      metrics.refusing_opened();
    }
    Refused(const Refused&) = delete;
    Refused& operator=(const Refused&) = delete;
    ~Refused() { metrics.refusing_closed(); }
    tcp::socket sock;
    net::steady_timer timer;
    HttpMetrics& metrics;
    std::string out;
    char sink[1024];
  };
  auto r = std::make_shared<Refused>(std::move(s), metrics);
  r->out = "HTTP/1.1 " + std::to_string(p.status) + " Service Unavailable\r\nServer: sluice\r\nContent-Type: " +
           p.content_type + "\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: " +
           std::to_string(p.body.size()) + "\r\n\r\n" + p.body;
  net::async_write(r->sock, net::buffer(r->out), [r](error_code ec, std::size_t) {
    error_code ignored;
    if (ec) {
      r->sock.close(ignored);
      return;
    }
    r->sock.shutdown(tcp::socket::shutdown_send, ignored);
    r->timer.expires_after(std::chrono::seconds(1));
    r->timer.async_wait([r](error_code) {
      error_code ignored;
      r->sock.close(ignored);
    });
    auto drain = std::make_shared<std::function<void()>>();
    *drain = [r, drain] {
      r->sock.async_read_some(net::buffer(r->sink), [r, drain](error_code ec, std::size_t) {
        if (ec) {
          r->timer.cancel();
          *drain = nullptr;  // break the cycle
          return;
        }
        (*drain)();
      });
    };
    (*drain)();
  });
}

// Limit events and TLS handshake failures are logged at most once per 10 s each (a flood
// must not flood the log too).
void HttpServer::Impl::log_rate_limited(std::atomic<std::int64_t>& last_ns, const std::string& msg,
                                        bool limit_counters) {
  const auto now = std::chrono::steady_clock::now().time_since_epoch();
  const std::int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now).count();
  std::int64_t last = last_ns.load(std::memory_order_relaxed);
  if (last != 0 && now_ns - last < 10'000'000'000) return;
  if (!last_ns.compare_exchange_strong(last, now_ns)) return;
  log(LogLevel::warn, msg + (limit_counters ? " (sluice_http_connections_evicted_total, _refused_total and "
                                              "sluice_http_request_timeouts_total count every case)"
                                            : " (sluice_http_tls_handshake_failures_total counts every case)"));
}

void HttpServer::Impl::teardown() {
  {
    std::lock_guard lk(gate->mu);
    gate->open = false;
  }
  for (auto& c : iocs) c->stop();
  for (auto& t : threads) {
    if (t.get_id() == std::this_thread::get_id())
      t.detach();  // stop() from an io thread: cannot join ourselves
    else if (t.joinable())
      t.join();
  }
  threads.clear();
  if (pool) {
    pool->stop();
    pool->join();
  }
  if (router) router->stop();
  accept_backoff.reset();
  acceptor.reset();
  {
    std::unordered_map<SessionBase*, std::shared_ptr<SessionBase>> p;
    {
      std::lock_guard lk(parked_mu);
      p.swap(parked);
    }
  }
  // The pool first: its queued jobs may hold WebSocket sessions, whose sockets and timers
  // must be destroyed while their io_context still exists.
  pool.reset();
  work.clear();
  iocs.clear();  // destroys pending handlers and the sessions they hold
}

HttpServer::HttpServer(HttpConfig cfg, PluginHost* host) : impl_(std::make_unique<Impl>()) {
  impl_->cfg = std::move(cfg);
  impl_->host = host;
}

HttpServer::~HttpServer() { stop(); }

std::uint16_t HttpServer::port() const { return impl_->port.load(); }

Result<void> HttpServer::start(Node& node) {
  Impl& m = *impl_;
  std::lock_guard lk(m.state_mu);
  if (m.started || m.stopped) return Error(Errc::internal, "http-api: start() called twice");
  m.started = true;
  try {
    m.node = &node;
    if (m.cfg.auth_enabled) {
      m.tokens = std::make_unique<TokenStore>(m.cfg.tokens_file);
      auto n = m.tokens->reload();
      if (!n) {
        m.teardown();
        m.stopped = true;
        return Error(Errc::invalid_argument, "http-api: " + n.error().message);
      }
      m.log(LogLevel::info, "auth: " + std::to_string(*n) + " tokens from " + m.cfg.tokens_file);
    } else {
      m.log(LogLevel::warn, "auth.enabled = false: every client that reaches " + m.cfg.address +
                                " may do anything, including delete every tenant (docs/security.md)");
    }
    m.router = std::make_unique<Router>(node, m.metrics, m.cfg, m.tokens.get());
    if (m.cfg.tls.enabled()) {
      m.tls = std::make_unique<TlsContextHolder>(m.cfg.tls);
      if (auto r = m.tls->reload_certificates(); !r) {
        m.stopped = true;
        return Error(r.error().code, "http-api: " + r.error().message);
      }
    }
    // Concurrency hint 1: each is run by one thread (other threads still post to it).
    for (unsigned i = 0; i < m.cfg.threads; ++i) {
      m.iocs.push_back(std::make_unique<net::io_context>(1));
      m.work.push_back(net::make_work_guard(*m.iocs.back()));
    }
    m.pool.emplace(m.cfg.admin_threads);
    error_code ec;
    const auto addr = net::ip::make_address(m.cfg.address, ec);
    if (ec) {
      m.teardown();
      m.stopped = true;
      return Error(Errc::invalid_argument,
                   "http.address '" + m.cfg.address + "' is not an IP address");
    }
    const tcp::endpoint ep(addr, m.cfg.port);
    m.acceptor.emplace(net::make_strand(*m.iocs.front()));
    m.accept_backoff.emplace(m.acceptor->get_executor());
    auto fail = [&](const char* what) -> Result<void> {
      const std::string msg = std::string("http-api: cannot ") + what + " " + m.cfg.address +
                              ":" + std::to_string(m.cfg.port) + ": " + ec.message();
      m.teardown();
      m.stopped = true;
      return Error(Errc::unavailable, msg);
    };
    m.acceptor->open(ep.protocol(), ec);
    if (ec) return fail("open a socket for");
    m.acceptor->set_option(net::socket_base::reuse_address(true), ec);
    m.acceptor->bind(ep, ec);
    if (ec) return fail("bind");
    m.acceptor->listen(net::socket_base::max_listen_connections, ec);
    if (ec) return fail("listen on");
    m.port = m.acceptor->local_endpoint().port();
    m.do_accept();
    for (unsigned i = 0; i < m.cfg.threads; ++i) {
      m.threads.emplace_back([&m, &ioc = *m.iocs[i]] {
        pthread_setname_np(pthread_self(), "http-io");
        for (;;) {
          try {
            ioc.run();
            return;
          } catch (const std::exception& e) {
            m.log(LogLevel::error, std::string("io thread: unexpected exception: ") + e.what());
          }
        }
      });
    }
    m.log(LogLevel::info, std::string("listening on ") + (m.tls ? "https://" : "http://") + m.cfg.address + ":" +
                              std::to_string(m.port.load()) + " with " + std::to_string(m.cfg.threads) +
                              " io threads" +
                              (m.cfg.tls.client_ca_file.empty() ? "" : ", client certificates required"));
    return {};
  } catch (const std::exception& e) {
    m.teardown();
    m.stopped = true;
    return Error(Errc::internal, std::string("http-api: start failed: ") + e.what());
  }
}

Result<void> HttpServer::reload() {
  Impl& m = *impl_;
  std::lock_guard lk(m.reload_mu);
  // Each part reloads on its own: a bad tokens file does not hold back a new certificate.
  std::string failed;
  if (m.tokens) {
    if (auto n = m.tokens->reload(); !n)
      failed = n.error().message;  // the caller logs it (sluiced: "reload failed, ...")
    else
      m.log(LogLevel::info, "reload: " + std::to_string(*n) + " tokens from " + m.cfg.tokens_file);
  }
  if (m.tls) {
    if (auto r = reload_certificates(); !r) failed += (failed.empty() ? "" : "; ") + r.error().message;
  }
  if (!failed.empty()) return Error(Errc::invalid_argument, failed);
  return {};
}

Result<void> HttpServer::reload_certificates() {
  Impl& m = *impl_;
  if (!m.tls) return Error(Errc::invalid_argument, "http-api: TLS is off (tls.cert_file is not set)");
  auto r = m.tls->reload_certificates();
  if (!r) {
    m.log(LogLevel::error, "TLS reload failed, keeping the previous certificate: " + r.error().message);
    return r;
  }
  m.log(LogLevel::info, "TLS certificate and key reloaded from " + m.cfg.tls.cert_file);
  return {};
}

void HttpServer::stop() {
  Impl& m = *impl_;
  std::lock_guard lk(m.state_mu);
  if (m.stopped) return;
  m.stopped = true;
  if (!m.started) return;
  m.teardown();
  m.log(LogLevel::info, "stopped");
}

}  // namespace sluice::http_api
