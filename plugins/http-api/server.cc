// The Beast translation unit of http-api's connections (ws_session.cc has the WebSocket
// ones): the acceptor, timers and the io/admin thread pools. Everything about routes and JSON
// lives in Beast-free files.
//
// TLS (tls.cert_file set, docs/security.md "TLS"): Session is a template over its stream,
// beast::tcp_stream or beast::ssl_stream over one. A plain listener instantiates only the
// former, so it pays nothing for TLS; a TLS listener serves nothing but TLS: the handshake
// comes first, bounded by http.request_timeout_ms, and a client that fails it is closed.
#include "server.h"

#include <pthread.h>
#include <algorithm>
#include <atomic>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include "gate.h"
#include "http_types.h"
#include "metrics.h"
#include "problem.h"
#include "request_body.h"
#include "router.h"
#include "subscribe.h"
#include "tls.h"
#include "ws_session.h"

namespace sluice::http_api {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
namespace ssl = net::ssl;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

namespace {

constexpr std::size_t kDrainLimit = 4u << 20;  // bytes read and dropped on a lingering close
constexpr std::size_t kReadChunk = 64 * 1024;  // socket read size (Beast reads up to the free capacity)
constexpr std::chrono::milliseconds kDrainTime{2000};

class SessionBase;

}  // namespace

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

  std::optional<net::io_context> ioc;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
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
  WsContext ws_context() {
    return WsContext{node, &cfg, &metrics, gate, [gate = gate, pool = &*pool](std::function<void()> fn) {
                       std::lock_guard lk(gate->mu);  // the pool lives while the gate is open
                       if (gate->open) net::post(*pool, std::move(fn));
                     }};
  }
};

namespace {

// What the server and the Exchange need of a connection, whatever its stream.
class SessionBase : public std::enable_shared_from_this<SessionBase> {
 public:
  // Where a connection is, for eviction at http.max_connections (evict_one()):
  //  - kNew: accepted, not yet a byte of its first request read (or its TLS handshake
  //    unfinished). Evicted last, and the newest first: an honest client's request
  //    arrives with its first read and is parsed in that same turn, but a burst of accepts
  //    can run before that read does (a CI run evicted an honest request so), and the
  //    connection accepted longest ago is the one whose read comes next;
  //  - kWaiting: idle between requests. Evicted first: reconnecting costs its client least;
  //  - kReading: a request begun and not whole yet (a slow-loris looks like this);
  //  - kBusy (a request in progress) and kClosing are never evicted.
  enum Phase : int { kNew, kWaiting, kReading, kBusy, kClosing };
  // Eviction order: lower first, then oldest in its phase (newest among kNew).
  static int eviction_rank(int p) { return p == kWaiting ? 0 : p == kReading ? 1 : p == kNew ? 2 : -1; }

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
    while (eviction_rank(expected) >= 0)
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
  static std::int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  // False if the connection was chosen for eviction meanwhile (it stays closing).
  bool set_phase(int p) {
    int cur = phase();
    do {
      if (cur == kClosing) return false;
    } while (!phase_.compare_exchange_weak(cur, p));
    phase_since_.store(now_ns(), std::memory_order_relaxed);
    return true;
  }

  HttpServer::Impl& impl_;
  std::atomic<int> phase_{kNew};
  std::atomic<std::int64_t> phase_since_{now_ns()};
};

// Stream: beast::tcp_stream (plain HTTP) or TlsStream (HTTPS).
template <class Stream>
class Session final : public SessionBase {
 public:
  static constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;

  // `tls` is the context of a TLS listener (null for plain): the session keeps it alive.
  Session(tcp::socket&& s, HttpServer::Impl& impl, std::shared_ptr<ssl::context> tls)
      : SessionBase(impl), tls_(std::move(tls)), stream_(make_stream(std::move(s), tls_.get())) {
    // Beast reads at most the buffer's free capacity (at least 512 bytes): without room a
    // 64 KiB body took 128 reads, each with its own epoll and timer calls.
    buffer_.reserve(kReadChunk);
  }

  void evicted() override {
    impl_.metrics.connection_evicted();
    hard_close();
  }

  net::any_io_executor executor() override { return stream_.get_executor(); }

  void run() {
    net::dispatch(stream_.get_executor(), [self = self()] {
      if constexpr (kTls)
        self->handshake();
      else
        self->do_read();
    });
  }

  void answer(HttpResponse r, const std::string& route) override {
    impl_.unpark(this);
    impl_.metrics.dec_in_flight();
    impl_.metrics.request_done(route, r.status);
    send(std::move(r));
  }

  void upgrade(Subscription sub, const std::string& route) override {
    impl_.unpark(this);
    impl_.metrics.dec_in_flight();
    impl_.metrics.request_done(route, 101);
    if (!upgrade_req_) return hard_close();
    if constexpr (kTls)
      start_websocket(std::move(stream_), std::move(*upgrade_req_), std::move(sub), impl_.ws_context(), tls_);
    else
      start_websocket(beast::tcp_stream(stream_.release_socket()), std::move(*upgrade_req_), std::move(sub),
                      impl_.ws_context());
    upgrade_req_.reset();
  }

 private:
  static Stream make_stream(tcp::socket&& s, ssl::context* tls) {
    if constexpr (kTls)
      return Stream(std::move(s), *tls);
    else
      return Stream(std::move(s));
  }
  std::shared_ptr<Session> self() { return std::static_pointer_cast<Session>(shared_from_this()); }
  beast::tcp_stream& lowest() { return beast::get_lowest_layer(stream_); }

  // TLS only: the handshake must complete within http.request_timeout_ms (a client that
  // connects and stays silent is a slow-loris too); until then the connection is new, and
  // evictable (last). Anything but TLS (plain HTTP, say) fails it and is closed.
  void handshake() {
    if (!set_phase(kNew)) return hard_close();
    lowest().expires_after(impl_.cfg.request_timeout);
    if constexpr (kTls) {
      stream_.async_handshake(ssl::stream_base::server,
                              beast::bind_front_handler(&Session::on_handshake, self()));
    }
  }
  void on_handshake(beast::error_code ec) {
    if (!ec) return do_read();
    if (phase() == kClosing) return hard_close();  // evicted (counted as such)
    impl_.metrics.tls_handshake_failed();
    beast::error_code ignored;
    const auto peer = lowest().socket().remote_endpoint(ignored);
    const std::string from = ignored ? std::string("a client") : peer.address().to_string();
    if (ec == beast::error::timeout) {
      impl_.metrics.request_timed_out();
      impl_.log_tls("closed " + from + " whose TLS handshake did not complete within http.request_timeout_ms (" +
                    std::to_string(impl_.cfg.request_timeout.count()) + " ms)");
    } else {
      impl_.log_tls("TLS handshake with " + from + " failed, connection closed: " + ec.message());
    }
    hard_close();
  }

  // Waits up to http.idle_timeout_ms for the next request's first bytes, then gives the
  // whole request http.request_timeout_ms.
  void do_read() {
    if (!set_phase(requests_ == 0 ? kNew : kWaiting)) return hard_close();
    if (buffer_.size() > 0) return begin_request();  // pipelined: already here
    lowest().expires_after(impl_.cfg.idle_timeout);
    stream_.async_read_some(buffer_.prepare(kReadChunk),
                            [self = self()](beast::error_code ec, std::size_t n) {
                              if (ec) return self->hard_close();  // idle timeout, EOF, reset, evicted
                              self->buffer_.commit(n);
                              self->begin_request();
                            });
  }

  void begin_request() {
    if (phase() == kClosing) return hard_close();  // evicted
    parser_.emplace();
    parser_->body_limit(impl_.cfg.max_body_bytes);
    parser_->header_limit(impl_.cfg.max_header_bytes);
    lowest().expires_after(impl_.cfg.request_timeout);
    // What is already buffered (usually the whole request, which came with the first read)
    // is parsed here, in this turn: no trip through the executor per parsing step, and no
    // moment in kReading for eviction to catch an honest request in.
    parser_->eager(true);
    beast::error_code ec;
    std::size_t used = 0;
    while (!parser_->is_done() && buffer_.size() > 0) {
      const std::size_t n = parser_->put(buffer_.data(), ec);
      buffer_.consume(n);
      used += n;
      if (ec || n == 0) break;
    }
    if (ec == http::error::need_more) ec = {};
    if (ec || parser_->is_done()) return on_read(ec, used);  // kNew or kWaiting to kBusy
    if (!set_phase(kReading)) return hard_close();
    impl_.metrics.add_bytes_in(used);
    // The rest is still to come. Header first: the body limit trips here when
    // Content-Length is too large, and a client that sent "Expect: 100-continue" (curl does
    // for larger bodies) is told to go on instead of waiting for its own timeout.
    http::async_read_header(stream_, buffer_, *parser_,
                            beast::bind_front_handler(&Session::on_header, self()));
  }

  void on_header(beast::error_code ec, std::size_t n) {
    if (ec) return on_read(ec, n);
    impl_.metrics.add_bytes_in(n);
    auto& req = parser_->get();
    if (beast::iequals(req[http::field::expect], "100-continue") && !parser_->is_done()) {
      auto cont = std::make_shared<http::response<http::empty_body>>(http::status::continue_,
                                                                      req.version());
      http::async_write(stream_, *cont,
                        [self = self(), cont](beast::error_code ec, std::size_t n) {
                          self->impl_.metrics.add_bytes_out(n);
                          if (ec) return self->hard_close();
                          self->read_body();
                        });
      return;
    }
    read_body();
  }

  void read_body() {
    http::async_read(stream_, buffer_, *parser_,
                     beast::bind_front_handler(&Session::on_read, self()));
  }

  void on_read(beast::error_code ec, std::size_t n);

  void fail_request(const Error& e) {
    HttpResponse r = problem(e);
    r.close = true;
    impl_.metrics.request_done("unmatched", r.status);
    send(std::move(r));
  }

  void send(HttpResponse r) {
    const bool close = r.close || !keep_alive_;
    auto res = std::make_shared<http::response<http::string_body>>(
        static_cast<http::status>(r.status), version_);
    res->set(http::field::server, "sluice");
    if (!r.content_type.empty()) res->set(http::field::content_type, r.content_type);
    for (auto& [k, v] : r.headers) res->set(k, v);
    res->body() = std::move(r.body);
    res->keep_alive(!close);
    res->prepare_payload();
    lowest().expires_after(impl_.cfg.idle_timeout);
    http::async_write(stream_, *res,
                      [self = self(), res, close](beast::error_code ec, std::size_t n) {
                        self->impl_.metrics.add_bytes_out(n);
                        if (ec) return self->hard_close();
                        if (close) return self->lingering_close();
                        self->do_read();
                      });
  }

  // Half-closes, then reads and drops what the client still sends (e.g. the rest of an
  // oversized body) for a bounded time, so our response is not lost to a TCP reset. Under
  // TLS too this is the TCP connection's: the answer carried its length, so the missing
  // close_notify truncates nothing, and what is drained is never decrypted.
  void lingering_close() {
    phase_.store(kClosing, std::memory_order_relaxed);
    beast::error_code ec;
    lowest().socket().shutdown(tcp::socket::shutdown_send, ec);
    if (ec) return hard_close();
    lowest().expires_after(std::min(impl_.cfg.idle_timeout, kDrainTime));
    drain();
  }
  void drain() {
    lowest().async_read_some(net::buffer(drain_buf_),
                            [self = self()](beast::error_code ec, std::size_t n) {
                              self->drained_ += n;
                              if (ec || self->drained_ > kDrainLimit) return self->hard_close();
                              self->drain();
                            });
  }
  void hard_close() {
    beast::error_code ec;
    lowest().socket().shutdown(tcp::socket::shutdown_both, ec);
    lowest().socket().close(ec);
  }

  std::shared_ptr<ssl::context> tls_;  // before stream_, which uses it
  Stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<RequestBody>> parser_;  // request_body.h
  std::optional<UpgradeRequest> upgrade_req_;  // a WebSocket upgrade's request, until upgrade()
  bool keep_alive_ = true;
  unsigned version_ = 11;
  std::uint64_t requests_ = 0;  // requests read whole on this connection
  std::size_t drained_ = 0;
  char drain_buf_[4096];
};

class ConnExchange final : public Exchange {
 public:
  ConnExchange(HttpServer::Impl& impl, std::weak_ptr<SessionBase> s, HttpRequest req)
      : impl_(impl), gate_(impl.gate), session_(std::move(s)), req_(std::move(req)) {}

  const HttpRequest& request() const override { return req_; }
  void set_route(std::string route) override { route_ = std::move(route); }

  void respond(HttpResponse r) override {
    if (responded_.exchange(true)) return;
    on_session([r = std::move(r), route = route_](SessionBase& s) mutable {
      s.answer(std::move(r), route);
    });
  }
  bool only_request_in_flight() const override { return impl_.metrics.in_flight() == 1; }
  bool on_strand() const override {
    auto s = session_.lock();
    if (!s) return false;
    const auto ex = s->executor();
    const auto* strand = ex.target<net::strand<net::io_context::executor_type>>();
    return strand && strand->running_in_this_thread();
  }
  void respond_here(HttpResponse r) override {
    if (!on_strand()) return respond(std::move(r));
    if (responded_.exchange(true)) return;
    std::unique_lock lk(gate_->mu);
    if (!gate_->open) return;
    auto s = session_.lock();
    lk.unlock();  // the strand is running here: the session cannot be stopped under us
    if (s) s->answer(std::move(r), route_);
  }
  void upgrade(Subscription sub) override {
    if (responded_.exchange(true)) return;
    on_session([sub = std::move(sub), route = route_](SessionBase& s) mutable { s.upgrade(std::move(sub), route); });
  }
  void post(std::function<void()> fn) override {
    on_session([fn = std::move(fn)](SessionBase&) { fn(); });
  }
  void run_blocking(std::function<void()> fn) override {
    std::lock_guard lk(gate_->mu);
    if (!gate_->open) return;
    net::post(*impl_.pool, std::move(fn));
  }
  std::function<void()> start_timer(std::chrono::milliseconds d,
                                    std::function<void()> fn) override {
    auto s = session_.lock();
    if (!s) return {};
    auto t = std::make_shared<net::steady_timer>(s->executor());
    t->expires_after(d);
    t->async_wait([t, fn = std::move(fn)](beast::error_code ec) {
      if (!ec) fn();
    });
    // Weak: only the pending wait owns the timer, so whoever holds the cancel function
    // (possibly a storage thread, late) never destroys a timer.
    return [w = std::weak_ptr<net::steady_timer>(t)] {
      if (auto t = w.lock()) t->cancel();
    };
  }

 private:
  template <class F>
  void on_session(F f) {
    std::lock_guard lk(gate_->mu);  // after stop() the Impl may be gone: check first
    if (!gate_->open) return;
    auto s = session_.lock();
    if (!s) return;
    net::post(s->executor(), [s, f = std::move(f)]() mutable { f(*s); });
  }

  HttpServer::Impl& impl_;
  std::shared_ptr<Gate> gate_;
  std::weak_ptr<SessionBase> session_;
  HttpRequest req_;
  std::string route_ = "unmatched";
  std::atomic<bool> responded_{false};
};

template <class Stream>
void Session<Stream>::on_read(beast::error_code ec, std::size_t n) {
  impl_.metrics.add_bytes_in(n);
  if (ec == http::error::end_of_stream || ec == http::error::partial_message) return hard_close();
  if (ec == http::error::body_limit)
    return fail_request(Error(Errc::body_too_large,
                              "request body exceeds http.max_body_bytes (" +
                                  std::to_string(impl_.cfg.max_body_bytes) + " bytes)"));
  if (ec == http::error::header_limit)
    return fail_request(Error(Errc::malformed_body, "request headers exceed http.max_header_bytes (" +
                                                        std::to_string(impl_.cfg.max_header_bytes) +
                                                        " bytes)"));
  if (ec && ec.category() == http::make_error_code(http::error::bad_target).category())
    return fail_request(Error(Errc::malformed_body, "malformed HTTP request: " + ec.message()));
  if (ec == beast::error::timeout) {
    impl_.metrics.request_timed_out();
    impl_.log_limit("closed a connection whose request did not arrive whole within http.request_timeout_ms (" +
                    std::to_string(impl_.cfg.request_timeout.count()) + " ms)");
    return hard_close();
  }
  if (ec) return hard_close();  // reset, evicted, ...
  if (!set_phase(kBusy)) return hard_close();
  ++requests_;

  auto& req = parser_->get();
  keep_alive_ = req.keep_alive();
  version_ = req.version();
  HttpRequest r;
  r.method = std::string(req.method_string());
  r.target = std::string(req.target());
  r.content_type = std::string(req[http::field::content_type]);
  r.authorization = std::string(req[http::field::authorization]);
  r.body = std::move(req.body());
  r.websocket = is_websocket_upgrade(req);
  if (r.websocket) upgrade_req_.emplace(std::move(req.base()));  // headers only: an upgrade has no body
  parser_.reset();

  auto ex = std::make_shared<ConnExchange>(impl_, weak_from_this(), std::move(r));
  impl_.park(shared_from_this());
  lowest().expires_never();
  impl_.metrics.inc_in_flight();
  impl_.router->handle(ex);
}

}  // namespace

void HttpServer::Impl::do_accept() {
  acceptor->async_accept(net::make_strand(*ioc), [this](beast::error_code ec, tcp::socket s) {
    if (ec == net::error::operation_aborted) return;
    if (ec) {
      // e.g. EMFILE: back off instead of spinning.
      log(LogLevel::warn, "accept failed: " + ec.message());
      accept_backoff->expires_after(std::chrono::milliseconds(100));
      accept_backoff->async_wait([this](beast::error_code e) {
        if (!e) do_accept();
      });
      return;
    }
    beast::error_code ignored;
    s.set_option(tcp::no_delay(true), ignored);  // small responses, often pipelined
    // WebSocket subscriptions count too, as connections that are never evicted.
    std::size_t open = static_cast<std::size_t>(std::max<std::int64_t>(0, metrics.ws_open()));
    {
      std::lock_guard lk(conns_mu);
      open += conns.size();
    }
    if (open >= cfg.max_connections && !evict_one()) {
      refuse(std::move(s));
    } else if (tls) {
      std::make_shared<Session<TlsStream>>(std::move(s), *this, tls->current())->run();
    } else {
      std::make_shared<Session<beast::tcp_stream>>(std::move(s), *this, nullptr)->run();
    }
    do_accept();
  });
}

bool HttpServer::Impl::evict_one() {
  std::shared_ptr<SessionBase> victim;
  {
    std::lock_guard lk(conns_mu);
    SessionBase* best = nullptr;
    int best_rank = 0;
    std::int64_t best_since = 0;
    for (SessionBase* c : conns) {
      const int rank = SessionBase::eviction_rank(c->phase());
      if (rank < 0) continue;
      const bool before = rank == SessionBase::eviction_rank(SessionBase::kNew)
                              ? c->phase_since() > best_since
                              : c->phase_since() < best_since;
      if (!best || rank < best_rank || (rank == best_rank && before)) {
        best = c;
        best_rank = rank;
        best_since = c->phase_since();
      }
    }
    // A session whose destructor is waiting for conns_mu has no owner left: lock() is empty.
    if (best) victim = best->weak_from_this().lock();
    if (victim && !victim->mark_evicting()) victim.reset();
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
    beast::error_code ignored;
    s.close(ignored);
    return;
  }
  HttpResponse p = problem(Error(Errc::unavailable, "too many connections: every one of the " +
                                                        std::to_string(cfg.max_connections) +
                                                        " allowed (http.max_connections) has a request in progress"));
  struct Refused {
    tcp::socket sock;
    net::steady_timer timer;
    std::string out;
    char sink[1024];
  };
  auto ex = s.get_executor();
  auto r = std::make_shared<Refused>(Refused{std::move(s), net::steady_timer(ex), {}, {}});
  r->out = "HTTP/1.1 " + std::to_string(p.status) + " Service Unavailable\r\nServer: sluice\r\nContent-Type: " +
           p.content_type + "\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: " +
           std::to_string(p.body.size()) + "\r\n\r\n" + p.body;
  net::async_write(r->sock, net::buffer(r->out), [r](beast::error_code ec, std::size_t) {
    beast::error_code ignored;
    if (ec) {
      r->sock.close(ignored);
      return;
    }
    r->sock.shutdown(tcp::socket::shutdown_send, ignored);
    r->timer.expires_after(std::chrono::seconds(1));
    r->timer.async_wait([r](beast::error_code) {
      beast::error_code ignored;
      r->sock.close(ignored);
    });
    auto drain = std::make_shared<std::function<void()>>();
    *drain = [r, drain] {
      r->sock.async_read_some(net::buffer(r->sink), [r, drain](beast::error_code ec, std::size_t) {
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
  if (ioc) ioc->stop();
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
  work.reset();
  ioc.reset();  // destroys pending handlers and the sessions they hold
  pool.reset();
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
    m.ioc.emplace(static_cast<int>(m.cfg.threads));
    m.work.emplace(m.ioc->get_executor());
    m.pool.emplace(m.cfg.admin_threads);
    beast::error_code ec;
    const auto addr = net::ip::make_address(m.cfg.address, ec);
    if (ec) {
      m.teardown();
      m.stopped = true;
      return Error(Errc::invalid_argument,
                   "http.address '" + m.cfg.address + "' is not an IP address");
    }
    const tcp::endpoint ep(addr, m.cfg.port);
    m.acceptor.emplace(net::make_strand(*m.ioc));
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
      m.threads.emplace_back([&m] {
        pthread_setname_np(pthread_self(), "http-io");
        for (;;) {
          try {
            m.ioc->run();
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
