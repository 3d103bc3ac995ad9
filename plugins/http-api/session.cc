// One HTTP connection of http-api (ws_session.cc has the WebSocket ones): Session<Stream>,
// which reads requests, keeps the connection's phase for eviction (server_impl.h) and
// writes the answers, and ConnExchange, the Exchange the router answers a request through.
// Beast's HTTP parser and writer are used here; the acceptor, eviction and teardown are in
// server.cc. Thread model and lifetime rules: server.h.
//
// TLS (tls.cert_file set, docs/security.md "TLS"): Session is a template over its stream,
// beast::tcp_stream or beast::ssl_stream over one. A plain listener instantiates only the
// former, so it pays nothing for TLS; a TLS listener serves nothing but TLS: the handshake
// comes first, bounded by http.request_timeout_ms, and a client that fails it is closed.
#include <algorithm>
#include <atomic>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include "gate.h"
#include "http_types.h"
#include "metrics.h"
#include "problem.h"
#include "request_body.h"
#include "router.h"
#include "server_impl.h"
#include "subscribe.h"
#include "tls.h"
#include "ws_session.h"

namespace sluice::http_api {

namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = net::ssl;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

namespace {

constexpr std::size_t kDrainLimit = 4u << 20;  // bytes read and dropped on a lingering close
constexpr std::size_t kReadChunk = 64 * 1024;  // socket read size (Beast reads up to the free capacity)
constexpr std::chrono::milliseconds kDrainTime{2000};

// 413 for a body past a route's own limit (Router::body_limit); `got` says how much came.
Error too_large(const Router::BodyLimit& l, const std::string& got) {
  return Error(Errc::body_too_large, "request body of " + got + " exceeds " + l.setting + " (" +
                                         std::to_string(l.bytes) + " bytes)");
}

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

  // The acceptor's thread, before run() (nothing else touches the session yet): takes what
  // came with the connection, without blocking, and puts the connection in the phase its
  // first read would, so that eviction judges it as if that read had already run. Each io
  // thread runs only its own connections (server.h), so in a burst the acceptor takes many
  // connections before a session's first read runs; without this, an honest request that
  // came with its connection looked new and could be evicted for a newer one. A whole
  // request makes it busy, part of one reading; nothing leaves it new. Plain HTTP only (a
  // TLS connection's first bytes are its handshake).
  void prime() {
    if constexpr (!kTls) {
      auto& sock = lowest().socket();
      beast::error_code ec;
      sock.non_blocking(true, ec);
      if (ec) return;
      const std::size_t n = sock.read_some(buffer_.prepare(kReadChunk), ec);
      beast::error_code ignored;
      sock.non_blocking(false, ignored);
      if (ec || n == 0) return;  // nothing yet, EOF or an error: the first read finds out
      buffer_.commit(n);
      primed_ = true;
      set_phase(arrived_whole() ? kBusy : kReading);
    }
  }

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

  // prime(): does the buffer hold one whole request? Only the header is parsed (by a
  // throwaway parser); a body is whole when Content-Length bytes follow it. A chunked body
  // or a header it cannot parse counts as not whole (a malformed one is answered as soon as
  // the session runs).
  bool arrived_whole() const {
    http::request_parser<http::empty_body> p;
    p.eager(false);
    p.header_limit(impl_.cfg.max_header_bytes);
    beast::error_code ec;
    const std::size_t used = p.put(buffer_.data(), ec);
    if (ec || !p.is_header_done() || p.chunked()) return false;
    return p.content_length().value_or(0) <= buffer_.size() - used;
  }

  // Waits up to http.idle_timeout_ms for the next request's first bytes, then gives the
  // whole request http.request_timeout_ms.
  void do_read() {
    if (primed_) {  // the first request's bytes came with the connection: parse them now
      primed_ = false;
      return begin_request();
    }
    // Pipelined: the next request's bytes are already here, so it is reading, not idle
    // (evicted first), while begin_request() parses it.
    if (buffer_.size() > 0) return set_phase(kReading) ? begin_request() : hard_close();
    if (!set_phase(requests_ == 0 ? kNew : kWaiting)) return hard_close();
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
    route_limit_.reset();
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
    // A body is still to come: a request its header alone refuses (401, 403) is answered
    // now and the connection closed, so no body is read (or invited) for it.
    if (!parser_->is_done()) {
      HttpRequest head;
      head.method = std::string(req.method_string());
      head.target = std::string(req.target());
      head.authorization = std::string(req[http::field::authorization]);
      if (auto refusal = impl_.router->refusal_before_body(head)) {
        version_ = req.version();
        refusal->close = true;
        impl_.metrics.request_done("refused_before_body", refusal->status);
        return send(std::move(*refusal));
      }
      // A route with a lower limit of its own (a cache value): a larger body is refused
      // before it is read or invited, not buffered up to http.max_body_bytes first (review).
      if ((route_limit_ = impl_.router->body_limit(head))) {
        const auto len = parser_->content_length();
        if (len && *len > route_limit_->bytes) {
          version_ = req.version();
          HttpResponse r = problem(too_large(*route_limit_, std::to_string(*len) + " bytes"));
          r.close = true;
          impl_.metrics.request_done("refused_before_body", r.status);
          return send(std::move(r));
        }
        parser_->body_limit(route_limit_->bytes);
      }
    }
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
  bool primed_ = false;  // prime() read the first request's bytes; do_read() parses them
  std::optional<http::request_parser<RequestBody>> parser_;  // request_body.h
  std::optional<Router::BodyLimit> route_limit_;  // this request's route's, if lower
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
      : impl_(impl), gate_(impl.gate), session_(std::move(s)), req_(std::move(req)),
        home_(std::this_thread::get_id()) {}  // made on the connection's strand

  const HttpRequest& request() const override { return req_; }
  void set_route(std::string route) override { route_ = std::move(route); }
  void set_authorization(std::function<bool()> still_allowed) override { authorized_ = std::move(still_allowed); }

  void respond(HttpResponse r) override {
    if (responded_.exchange(true)) return;
    on_session([r = std::move(r), route = route_](SessionBase& s) mutable {
      s.answer(std::move(r), route);
    });
  }
  bool only_request_in_flight() const override { return impl_.metrics.in_flight() == 1; }
  // The connection's io thread, the one thread that runs its io_context (docs/architecture.md
  // "HTTP io threads"): any handler there excludes every other handler of the connection,
  // so it may act as the strand. Decided without touching the session: a storage thread
  // that asks must not take a reference, since dropping the last one there would destroy
  // the session against an io_context that stop() may already have destroyed.
  bool on_strand() const override { return std::this_thread::get_id() == home_; }
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
    sub.still_authorized = authorized_;  // set on the strand before the handler ran
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
  const std::thread::id home_;
  std::string route_ = "unmatched";
  std::function<bool()> authorized_;  // set_authorization()
  std::atomic<bool> responded_{false};
};

template <class Stream>
void Session<Stream>::on_read(beast::error_code ec, std::size_t n) {
  impl_.metrics.add_bytes_in(n);
  if (ec == http::error::end_of_stream || ec == http::error::partial_message) return hard_close();
  if (ec == http::error::body_limit && route_limit_)
    return fail_request(too_large(*route_limit_, "more"));
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
  r.host = std::string(req[http::field::host]);
  r.websocket = is_websocket_upgrade(req);
  if (r.websocket) {
    r.origin = std::string(req[http::field::origin]);
    upgrade_req_.emplace(std::move(req.base()));
  }  // headers only: an upgrade has no body
  parser_.reset();

  auto ex = std::make_shared<ConnExchange>(impl_, weak_from_this(), std::move(r));
  impl_.park(shared_from_this());
  lowest().expires_never();
  impl_.metrics.inc_in_flight();
  impl_.router->handle(ex);
}

}  // namespace

void HttpServer::Impl::start_session(tcp::socket&& s) {
  if (tls) {
    std::make_shared<Session<TlsStream>>(std::move(s), *this, tls->current())->run();
  } else {
    auto session = std::make_shared<Session<beast::tcp_stream>>(std::move(s), *this, nullptr);
    session->prime();
    session->run();
  }
}

WsContext HttpServer::Impl::ws_context() {
  return WsContext{node, &cfg, &metrics, gate, [gate = gate, pool = &*pool](std::function<void()> fn) {
                     std::lock_guard lk(gate->mu);  // the pool lives while the gate is open
                     if (gate->open) net::post(*pool, std::move(fn));
                   }};
}

}  // namespace sluice::http_api
