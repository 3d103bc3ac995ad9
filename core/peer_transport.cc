// The core's peer transport: see peer_transport.h for the wire format and
// docs/replication.md "Peer transport" for the rules.
//
// Everything below Impl runs on the one I/O thread, except handle/unhandle (under hmu_),
// request/stop (which post to it) and responders (which post to it).
#include "peer_transport.h"

#include <pthread.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "sluice/log.h"

namespace asio = boost::asio;
namespace ssl = asio::ssl;
using asio::ip::tcp;

namespace sluice::core {

using namespace peerwire;

namespace {
// What one connection may hold queued for a peer that does not read (several maximal frames).
constexpr std::size_t kMaxQueuedBytes = std::size_t{256} << 20;
// Incoming connections from one address that have not finished their hello (TLS handshake
// included) at once. Each lives at most setup_timeout; without a bound, anyone who can
// reach the port could hold descriptors and memory without end. Peers open one connection
// each, so only a burst of reconnects comes near it (loopback clusters share one address).
constexpr std::size_t kMaxPendingPerAddress = 64;

std::string type_name(PeerMessageType t) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%04x", t);
  return buf;
}

bool split_address(const std::string& addr, std::string& host, std::string& port) {
  const auto colon = addr.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == addr.size()) return false;
  host = addr.substr(0, colon);
  port = addr.substr(colon + 1);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return true;
}

// Asio takes OpenSSL's error off its queue into the error_code: a private key that does not
// match the certificate already loaded.
bool key_mismatch(const boost::system::error_code& ec) {
  if (!ec || ec.category() != boost::asio::error::get_ssl_category()) return false;
  const auto e = static_cast<unsigned long>(ec.value());
  return ERR_GET_LIB(e) == ERR_LIB_X509 && ERR_GET_REASON(e) == X509_R_KEY_VALUES_MISMATCH;
}

// OpenSSL's reason for the last failure (its error queue), or Asio's message.
// Bytes a peer sent, fit for a log line: at most 80, anything but printable ASCII as \xNN
// (an unauthenticated client must not write lines or control characters into the log).
std::string printable(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size() && i < 80; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  if (s.size() > 80) out += "...";
  return out;
}

std::string ssl_reason(const boost::system::error_code& ec) {
  std::string r = ec.message();
  if (unsigned long e = ERR_peek_last_error(); e != 0) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    r = buf;
  }
  ERR_clear_error();
  return r;
}

// transport.tls.*: one context for both directions; each side verifies the other.
Result<std::shared_ptr<ssl::context>> make_tls_context(const PeerTransportOptions& o) {
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls);
  boost::system::error_code ec;
  auto bad = [&](const char* key, const std::string& file) {
    return Error(Errc::invalid_argument, std::string(key) + " '" + file + "': " + ssl_reason(ec));
  };
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                       ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1,
                   ec);
  ctx->use_certificate_chain_file(o.tls_cert_file, ec);
  if (ec) return bad("transport.tls.cert_file", o.tls_cert_file);
  ctx->use_private_key_file(o.tls_key_file, ssl::context::pem, ec);
  if ((ec && key_mismatch(ec)) ||
      (!ec && SSL_CTX_check_private_key(ctx->native_handle()) != 1))
    return Error(Errc::invalid_argument, "transport.tls.key_file '" + o.tls_key_file +
                                             "' does not match the certificate in transport.tls.cert_file '" +
                                             o.tls_cert_file + "' (" + ssl_reason(ec) + ")");
  if (ec) return bad("transport.tls.key_file", o.tls_key_file);
  ctx->load_verify_file(o.tls_ca_file, ec);
  if (ec) return bad("transport.tls.ca_file", o.tls_ca_file);
  // This node's own certificate must name this node when it names any (or always, with
  // transport.tls.require_node_id): peers would refuse it otherwise, so it is refused here,
  // at the start or the reload, where the operator sees why.
  auto own = certificate_node_ids(SSL_CTX_get0_certificate(ctx->native_handle()));
  if (!own) return Error(Errc::invalid_argument, "transport.tls.cert_file '" + o.tls_cert_file + "': " + own.error().message);
  if (o.self.value() != 0 && (!own->empty() || o.tls_require_node_id) &&
      std::find(own->begin(), own->end(), o.self.value()) == own->end()) {
    std::string named;
    for (auto id : *own) named += (named.empty() ? "" : ", ") + std::to_string(id);
    return Error(Errc::invalid_argument,
                 "transport.tls.cert_file '" + o.tls_cert_file + "' " +
                     (own->empty() ? std::string("names no node (a URI subjectAltName sluice:node:<id>), and "
                                                 "transport.tls.require_node_id is set")
                                   : "names node " + named) +
                     ", but this is node " + std::to_string(o.self.value()) + " (node.id)");
  }
  ctx->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert, ec);
  static const unsigned char kSid[] = "sluice-peer";
  SSL_CTX_set_session_id_context(ctx->native_handle(), kSid, sizeof kSid - 1);
  return ctx;
}

}  // namespace

Result<std::vector<std::uint32_t>> certificate_node_ids(X509* cert) {
  std::vector<std::uint32_t> out;
  if (!cert) return out;
  // crit: -1 no such extension, -2 more than one; NULL with an extension present: it does
  // not decode. Either of the latter would otherwise read as "names no node" (fail open).
  int crit = -1;
  auto* names = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, &crit, nullptr));
  if (!names) {
    if (crit == -1) return out;
    return Error(Errc::invalid_argument, crit == -2 ? "the certificate has more than one subjectAltName extension"
                                                    : "the certificate's subjectAltName extension does not decode");
  }
  static constexpr std::string_view kScheme = "sluice:";
  static constexpr std::string_view kPrefix = "sluice:node:";
  // The scheme is case-insensitive (RFC 3986 3.1). Any other sluice: URI is an error, not
  // "no name": a certificate meant to name its node must not fail open on a typo.
  auto is_sluice = [](std::string_view uri) {
    if (uri.size() < kScheme.size()) return false;
    for (std::size_t i = 0; i < kScheme.size(); ++i) {
      const char c = uri[i];
      const char l = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
      if (l != kScheme[i]) return false;
    }
    return true;
  };
  std::optional<Error> bad;
  for (int i = 0; i < sk_GENERAL_NAME_num(names) && !bad; ++i) {
    const GENERAL_NAME* n = sk_GENERAL_NAME_value(names, i);
    if (n->type != GEN_URI) continue;
    const std::string_view uri(reinterpret_cast<const char*>(ASN1_STRING_get0_data(n->d.uniformResourceIdentifier)),
                               static_cast<std::size_t>(ASN1_STRING_length(n->d.uniformResourceIdentifier)));
    if (!is_sluice(uri)) continue;
    if (uri.substr(kScheme.size(), kPrefix.size() - kScheme.size()) != kPrefix.substr(kScheme.size())) {
      bad = Error(Errc::invalid_argument, "the certificate names '" + printable(std::string(uri)) +
                                              "': a sluice: name must be sluice:node:<id>");
      break;
    }
    const std::string_view digits = uri.substr(kPrefix.size());
    std::uint64_t id = 0;
    bool ok = !digits.empty() && digits.size() <= 10;
    for (char ch : digits) {
      if (ch < '0' || ch > '9') ok = false;
      id = id * 10 + static_cast<unsigned>(ch - '0');
    }
    if (!ok || id == 0 || id > 0xffffffffu)
      bad = Error(Errc::invalid_argument, "the certificate names node '" + printable(std::string(digits)) +
                                              "' (" + printable(std::string(uri)) +
                                              "): not a node id from 1 to 4294967295");
    else
      out.push_back(static_cast<std::uint32_t>(id));
  }
  GENERAL_NAMES_free(names);
  if (bad) return *bad;
  return out;
}

namespace {

// transport.failpoint_file: "drop N" / "delay N MS" (test-only).
struct Failpoints {
  struct Rule {
    bool drop = false;
    int delay_ms = 0;
  };
  std::string path;
  bool have_stat = false;
  struct timespec mtime {};
  off_t size = -1;
  std::map<NodeId, Rule> rules;

  Rule check(NodeId dest, const std::function<void(LogLevel, const std::string&)>& log) {
    if (path.empty()) return {};
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      if (have_stat) rules.clear();
      have_stat = false;
    } else if (!have_stat || st.st_mtim.tv_sec != mtime.tv_sec || st.st_mtim.tv_nsec != mtime.tv_nsec ||
               st.st_size != size) {
      have_stat = true;
      mtime = st.st_mtim;
      size = st.st_size;
      reload(log);
    }
    auto it = rules.find(dest);
    return it == rules.end() ? Rule{} : it->second;
  }

  void reload(const std::function<void(LogLevel, const std::string&)>& log) {
    rules.clear();
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream ls(line);
      std::string verb;
      std::uint32_t node = 0;
      if (!(ls >> verb) || verb.starts_with("#")) continue;
      if (verb == "drop" && ls >> node) {
        rules[NodeId{node}].drop = true;
      } else if (verb == "delay" && ls >> node) {
        int ms = 0;
        if (ls >> ms) rules[NodeId{node}].delay_ms = ms;
      } else {
        log(LogLevel::warn, "failpoint file " + path + ": ignoring line '" + line + "'");
      }
    }
    log(LogLevel::warn, "failpoint file " + path + " (test-only) loaded: " + std::to_string(rules.size()) +
                            " rule(s)");
  }
};

}  // namespace

// ---------------------------------------------------------------------------------------
// Impl

struct Conn;

struct AsioPeerTransport::Impl : std::enable_shared_from_this<Impl> {
  PeerTransportOptions opts;
  std::shared_ptr<PeerDirectory> dir;
  asio::io_context io{1};
  asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
  tcp::acceptor acceptor{io};
  std::thread thread;
  std::uint16_t bound_port = 0;
  std::atomic<bool> stopped{false};
  std::atomic<bool> starting{false};  // opts.handlers_registered_later, until handlers_registered()
  std::atomic<std::uint64_t> accepted{0};
  asio::steady_timer accept_backoff{io};
  std::atomic<std::thread::id> io_thread{};

  struct HandlerEntry {
    PeerHandler fn;
    int running = 0;
  };
  std::mutex hmu;
  std::condition_variable hcv;
  std::map<PeerMessageType, std::shared_ptr<HandlerEntry>> handlers;

  // The identity each outgoing connection's peer gave in its hello (for probe_peer).
  std::mutex hello_mu;
  std::map<NodeId, Hello> hellos;

  // I/O thread only.
  std::map<NodeId, std::shared_ptr<Conn>> outgoing;
  // A peer whose last connection failed before its hello (refused, no route, TLS or cluster
  // id refused): no new connection before `until`, and requests meanwhile fail at once with
  // the last reason (transient: nothing was sent), so a dead or misconfigured peer costs
  // each call nothing instead of a connect, a handshake and a log line. The pause doubles
  // from 50 ms to 2 s; a hello resets it.
  struct Backoff {
    std::string address;  // the pause holds for this address only (a moved peer is tried at once)
    std::chrono::steady_clock::time_point until;
    std::chrono::milliseconds pause{0};
    Error last{Errc::unavailable, ""};
  };
  std::map<NodeId, Backoff> backoff;
  std::set<std::shared_ptr<Conn>> conns;
  std::uint64_t refused_pending = 0;  // accepts refused at kMaxPendingPerAddress
  std::chrono::steady_clock::time_point last_pending_warning{};
  std::uint64_t next_id = 1;
  Failpoints failpoints;

  // transport.tls.*: the context new connections take (null: plain TCP).
  mutable std::mutex tls_mu;
  std::shared_ptr<ssl::context> tls;
  std::shared_ptr<ssl::context> tls_context() const {
    std::lock_guard lk(tls_mu);
    return tls;
  }

  void log(LogLevel level, const std::string& msg) { opts.log(level, msg); }
  // Runs a request's callback; one that throws is logged, and whatever the caller was doing
  // (the other callbacks of a closing connection, re-arming the read) carries on.
  void deliver(PeerCallback& cb, Result<std::string> r) {
    try {
      cb(std::move(r));
    } catch (const std::exception& e) {
      log(LogLevel::error, std::string("a peer request's callback threw: ") + e.what());
    } catch (...) {
      log(LogLevel::error, "a peer request's callback threw");
    }
  }
  Hello own_hello() const { return Hello{opts.self, opts.cluster_id, opts.directory_id}; }

  void accept();
  void do_request(NodeId peer, PeerMessageType type, std::string payload, std::chrono::milliseconds timeout,
                  PeerCallback cb);
  void serve(const std::shared_ptr<Conn>& c, const Header& h, std::string payload);
  void shutdown_io();
};

struct Conn : std::enable_shared_from_this<Conn> {
  using Impl = AsioPeerTransport::Impl;
  struct Pending {
    PeerCallback cb;
    std::unique_ptr<asio::steady_timer> timer;
    PeerMessageType type = 0;
    bool sent = false;
  };

  Conn(Impl& t, bool out, NodeId target, std::string address)
      : t(t), sock(t.io), hello_timer(t.io), outgoing(out), target(target), address(std::move(address)) {}

  Impl& t;
  tcp::socket sock;
  // transport.tls.*: the TLS layer over sock, and the context it uses (kept alive with it).
  std::shared_ptr<ssl::context> tls_ctx;
  std::unique_ptr<ssl::stream<tcp::socket&>> tls;
  asio::steady_timer hello_timer;
  bool outgoing;
  NodeId target;         // outgoing: the node we meant to reach
  std::string address;   // outgoing: where; incoming: the remote endpoint
  std::string remote_ip;  // incoming: the remote address alone (kMaxPendingPerAddress)
  // TLS: the node ids the peer's certificate names (certificate_node_ids); its hello must
  // claim one of them, or, with none, any id unless transport.tls.require_node_id.
  std::vector<std::uint32_t> cert_nodes;
  enum class State { connecting, hello_wait, ready, closed } state = State::connecting;
  PeerIdentity peer;
  unsigned char hdr[kHeaderBytes];
  std::string body;
  std::deque<OutFrame> wq;  // a frame's header and payload go out as two buffers (no copy)
  // Bytes in wq and unsent: a peer that stops reading holds at most kMaxQueuedBytes of this
  // node's memory (further requests fail at once, transient).
  std::size_t queued = 0;
  bool writing = false;
  // Incoming: answers past kMaxQueuedBytes stop the reading of requests (pause_wanted: at
  // the next request read; read_stopped: no read is in flight) until they drain to half.
  bool pause_wanted = false;
  bool read_stopped = false;
  bool replaced = false;  // closed because the peer's address changed: no backoff for that
  std::map<std::uint64_t, Pending> pending;        // outgoing requests awaiting an answer
  std::deque<std::pair<std::uint64_t, OutFrame>> unsent;  // queued until the hello

  // "peer N", or "the peer" for a probe (target 0: whoever answers at the address).
  std::string peer_name() const { return target.value() ? "peer " + std::to_string(target.value()) : "the peer"; }

  std::string who() const {
    std::string s = outgoing ? "connection to " + peer_name() + " at " + address
                             : "connection from " + address;
    if (state == State::ready || (!outgoing && peer.node.value() != 0))
      s += " (node " + std::to_string(peer.node.value()) + ")";
    return s;
  }

  void begin() {
    state = State::hello_wait;
    boost::system::error_code ec;
    sock.set_option(tcp::no_delay(true), ec);
    // A peer that vanished without a FIN (power loss, partition) is noticed in about 30 s
    // rather than the kernel's two hours: its requests then fail unavailable, not only timeout.
    sock.set_option(asio::socket_base::keep_alive(true), ec);
    const int idle = 15, interval = 5, count = 3;
    ::setsockopt(sock.native_handle(), IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    ::setsockopt(sock.native_handle(), IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
    ::setsockopt(sock.native_handle(), IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
    // Keepalive probes only an idle connection. With requests in flight (unacknowledged
    // bytes) the kernel would retransmit for about 15 minutes (tcp_retries2) before giving
    // up; this bounds that to 30 s as well.
    const unsigned user_timeout_ms = 30000;
    ::setsockopt(sock.native_handle(), IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof user_timeout_ms);
    if (!outgoing) arm_setup_timer();  // an outgoing one armed it before connecting
    tls_ctx = t.tls_context();
    if (!tls_ctx) return start_hello();
    // TLS first, within the setup timeout: both sides verify the other's certificate.
    tls = std::make_unique<ssl::stream<tcp::socket&>>(sock, *tls_ctx);
    tls->async_handshake(outgoing ? ssl::stream_base::client : ssl::stream_base::server,
                         [self = shared_from_this()](const boost::system::error_code& ec) {
                           if (self->state == State::closed) return;
                           if (ec) {
                             const std::string why = "TLS handshake failed: " + ssl_reason(ec);
                             self->close(LogLevel::warn, "refused: " + why, self->lost(why));
                             return;
                           }
                           X509* cert = SSL_get1_peer_certificate(self->tls->native_handle());
                           auto ids = certificate_node_ids(cert);
                           X509_free(cert);
                           if (!ids) {
                             const std::string why = "the peer's certificate: " + ids.error().message;
                             self->close(LogLevel::error, "refused: " + why, self->lost(why));
                             return;
                           }
                           self->cert_nodes = std::move(ids).value();
                           self->start_hello();
                         });
  }

  void start_hello() {
    enqueue(make_frame(Header{0, kHelloType, 0, 0}, encode_hello(t.own_hello())));
    read_header();
  }

  // The socket, or the TLS stream over it: the same frames either way (a frame's header
  // and payload go out as two buffers; over TLS they are encrypted, a copy TLS cannot avoid).
  template <class Buffers, class Handler>
  void io_write(const Buffers& b, Handler&& h) {
    if (tls)
      asio::async_write(*tls, b, std::forward<Handler>(h));
    else
      asio::async_write(sock, b, std::forward<Handler>(h));
  }
  template <class Buffers, class Handler>
  void io_read(const Buffers& b, Handler&& h) {
    if (tls)
      asio::async_read(*tls, b, std::forward<Handler>(h));
    else
      asio::async_read(sock, b, std::forward<Handler>(h));
  }

  // Connecting and the hello must be done within setup_timeout, or the connection closes
  // (a peer behind a black hole does not hold its requests' successors for minutes).
  void arm_setup_timer() {
    hello_timer.expires_after(t.opts.setup_timeout);
    hello_timer.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec || (self->state != State::hello_wait && self->state != State::connecting)) return;
      const std::string within = " within " + std::to_string(self->t.opts.setup_timeout.count()) + " ms";
      const std::string what = (self->state == State::connecting ? "not connected" : "no hello") + within;
      self->close(LogLevel::warn, what,
                  Error(Errc::unavailable, self->peer_name() + " at " +
                                               self->address + ": " + what));
    });
  }

  // A frame after the hello, through the failpoints (test-only) for its destination.
  void send(OutFrame frame) {
    const NodeId dest = outgoing ? target : peer.node;
    auto rule = t.failpoints.check(dest, [this](LogLevel l, const std::string& m) { t.log(l, m); });
    if (rule.drop) return;
    if (rule.delay_ms > 0) {
      auto timer = std::make_shared<asio::steady_timer>(t.io, std::chrono::milliseconds(rule.delay_ms));
      timer->async_wait([self = shared_from_this(), timer, f = std::move(frame)](const boost::system::error_code&) mutable {
        if (self->state == State::ready) self->enqueue(std::move(f));
      });
      return;
    }
    enqueue(std::move(frame));
  }

  void enqueue(OutFrame frame) {
    if (state == State::closed) return;
    queued += kHeaderBytes + frame.payload.size();
    wq.push_back(std::move(frame));
    if (!writing) write_next();
  }

  void write_next() {
    while (!wq.empty() && wq.front().dropped) wq.pop_front();
    if (wq.empty()) {
      writing = false;
      return;
    }
    writing = true;
    const auto& f = wq.front();
    const std::array<asio::const_buffer, 2> bufs{asio::buffer(f.header), asio::buffer(f.payload)};
    io_write(bufs,
                      [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
                        self->writing = false;
                        if (self->state == State::closed) return;
                        if (ec) {
                          self->close(LogLevel::warn, "write failed: " + ec.message(),
                                      self->lost("the connection failed: " + ec.message()));
                          return;
                        }
                        self->queued -= kHeaderBytes + self->wq.front().payload.size();
                        self->wq.pop_front();
                        if (self->queued <= kMaxQueuedBytes / 2) {
                          self->pause_wanted = false;
                          if (self->read_stopped) {
                            self->read_stopped = false;
                            self->read_header();
                          }
                        }
                        if (!self->wq.empty()) self->write_next();
                      });
  }

  // A request that timed out: its frame is not sent if it is still queued (the one being
  // written, if it is that one, goes out whole).
  void forget_frame(std::uint64_t id) {
    for (auto it = unsent.begin(); it != unsent.end(); ++it)
      if (it->first == id) {
        queued -= kHeaderBytes + it->second.payload.size();
        unsent.erase(it);
        return;
      }
    // Marked, not erased: erasing from a deque may move the frame being written, whose
    // buffers the write holds.
    for (auto it = wq.begin() + (writing && !wq.empty() ? 1 : 0); it != wq.end(); ++it)
      if (it->request == id && !it->dropped) {
        queued -= kHeaderBytes + it->payload.size();
        it->dropped = true;
        it->payload = std::string();
        return;
      }
  }

  Error lost(const std::string& why) const {
    return Error(Errc::unavailable, peer_name() + " at " + address + ": " + why);
  }

  void read_header() {
    io_read(asio::buffer(hdr, kHeaderBytes),
                     [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
                       self->on_header(ec, n);
                     });
  }

  void on_header(const boost::system::error_code& ec, std::size_t n) {
    if (state == State::closed) return;
    if (ec) {
      if (ec == asio::error::eof && n > 0)
        close(LogLevel::warn, "truncated frame: the peer closed after " + std::to_string(n) + " of " +
                                  std::to_string(kHeaderBytes) + " header bytes",
              lost("the connection was closed"));
      else
        close(ec == asio::error::eof ? LogLevel::info : LogLevel::warn,
              ec == asio::error::eof ? "closed by the peer" : "read failed: " + ec.message(),
              lost("the connection was closed"));
      return;
    }
    auto h = decode_header(hdr);
    if (!h) {
      close(LogLevel::warn, "malformed frame: " + h.error().message, lost("it sent a malformed frame"));
      return;
    }
    if (state == State::hello_wait && h->payload_len > kMaxHelloBytes) {
      close(LogLevel::warn,
            "malformed frame: the first frame claims " + std::to_string(h->payload_len) + " bytes, more than a hello (" +
                std::to_string(kMaxHelloBytes) + ")",
            lost("it sent a malformed frame"));
      return;
    }
    body.clear();
    if (h->payload_len == 0) {
      on_frame(*h);
      return;
    }
    read_body(*h, 0);
  }

  // The payload, into a buffer that grows with the bytes that came (1 MiB, then doubling):
  // a header alone claiming 64 MiB does not make this node allocate and zero 64 MiB.
  void read_body(const Header& h, std::size_t have) {
    constexpr std::size_t kFirstChunk = std::size_t{1} << 20;
    const std::size_t want = std::min<std::size_t>(h.payload_len, std::max(have * 2, kFirstChunk));
    body.resize(want);
    io_read(asio::buffer(body.data() + have, want - have),
            [self = shared_from_this(), h, have, want](const boost::system::error_code& ec, std::size_t n) {
              if (self->state == State::closed) return;
              if (ec) {
                self->close(LogLevel::warn,
                            "truncated frame: " + std::to_string(have + n) + " of " + std::to_string(h.payload_len) +
                                " payload bytes, then " + ec.message(),
                            self->lost("the connection was closed"));
                return;
              }
              if (want < h.payload_len) return self->read_body(h, want);
              self->on_frame(h);
            });
  }

  void on_frame(const Header& h) {
    if (state == State::hello_wait) {
      if (h.type != kHelloType || h.flags != 0) {
        close(LogLevel::warn, "malformed frame: the first frame is not a hello (type " + type_name(h.type) + ")",
              lost("it did not start with a hello"));
        return;
      }
      auto hello = decode_hello(body);
      if (!hello) {
        close(LogLevel::warn, hello.error().message, lost(hello.error().message));
        return;
      }
      if (hello->cluster_id != t.opts.cluster_id) {
        const std::string msg = "peer node " + std::to_string(hello->node.value()) + " at " + address +
                                " belongs to cluster " + printable(hello->cluster_id) + ", this node (" +
                                std::to_string(t.opts.self.value()) + ") to cluster " + t.opts.cluster_id;
        close(LogLevel::error, "refused: cluster id mismatch: " + msg, Error(Errc::cluster_id_mismatch, msg));
        return;
      }
      // An incoming hello must not name this node's own id with another directory: two
      // nodes configured with the same node.id would otherwise take each other's calls and
      // replication progress (review). (Node 0 is a probe, `sluiced probe-peer`: it may
      // only ping.)
      if (!outgoing && hello->node == t.opts.self && hello->directory_id != t.opts.directory_id) {
        const std::string msg = "the peer at " + address + " says it is node " + std::to_string(hello->node.value()) +
                                ", this node's id, with directory.id " + printable(hello->directory_id) +
                                ": two nodes have the same node.id";
        close(LogLevel::error, "refused: " + msg, Error(Errc::conflict, msg));
        return;
      }
      // A certificate names the nodes it may speak for (docs/security.md "A node's id in its
      // certificate"): without the check, any holder of a certificate the CA signed could
      // claim another node's id, fence its leaderships or report progress in its name. A
      // probe (node 0) may only ping, so it needs no name.
      if (tls && hello->node.value() != 0 &&
          (!cert_nodes.empty() || t.opts.tls_require_node_id) &&
          std::find(cert_nodes.begin(), cert_nodes.end(), hello->node.value()) == cert_nodes.end()) {
        std::string named;
        for (auto id : cert_nodes) named += (named.empty() ? "" : ", ") + std::to_string(id);
        const std::string msg =
            "the peer at " + address + " says it is node " + std::to_string(hello->node.value()) +
            (cert_nodes.empty() ? ", but its certificate names no node (a URI subjectAltName sluice:node:<id>), "
                                  "and transport.tls.require_node_id is set"
                                : ", but its certificate names node " + named);
        close(LogLevel::error, "refused: " + msg, Error(Errc::unauthorized, msg));
        return;
      }
      if (outgoing && target.value() != 0 && hello->node != target) {
        const std::string msg = "the address " + address + " of peer " + std::to_string(target.value()) +
                                " is served by node " + std::to_string(hello->node.value());
        close(LogLevel::error, "refused: " + msg, Error(Errc::unavailable, msg));
        return;
      }
      peer = PeerIdentity{hello->node, hello->directory_id};
      if (outgoing) {
        std::lock_guard lk(t.hello_mu);
        t.hellos[target] = *hello;
      }
      state = State::ready;
      hello_timer.cancel();
      if (outgoing) t.backoff.erase(target);
      while (!unsent.empty()) {
        auto [id, frame] = std::move(unsent.front());
        unsent.pop_front();
        queued -= kHeaderBytes + frame.payload.size();
        if (auto it = pending.find(id); it != pending.end()) {
          it->second.sent = true;
          send(std::move(frame));
        }
      }
      read_header();
      return;
    }
    if (h.type == kHelloType) {
      close(LogLevel::warn, "malformed frame: a second hello", lost("it sent a second hello"));
      return;
    }
    if (h.flags & kFlagResponse) {
      auto it = pending.find(h.request_id);
      if (it != pending.end()) {  // else it timed out: the answer comes too late
        auto p = std::move(it->second);
        pending.erase(it);
        p.timer->cancel();
        if (h.flags & kFlagError)
          t.deliver(p.cb, decode_error(body));
        else
          t.deliver(p.cb, std::move(body));
      }
    } else if (outgoing) {
      // Requests come on the connections peers open to this node; this node's own
      // connections carry only its requests' answers. One there would be served with no
      // backpressure (reading an outgoing connection cannot stop: its answers come on it).
      close(LogLevel::warn, "protocol error: a request on a connection this node opened",
            lost("it sent a request on this node's connection"));
      return;
    } else {
      t.serve(shared_from_this(), h, std::move(body));
    }
    if (state == State::closed) return;
    // Backpressure: a peer whose answers are not going out (it does not read them, or the
    // link is slow) gets no more requests read until they drain below half the cap, so its
    // answers cannot grow this node's memory without end (review). Closing instead cut off
    // healthy followers catching up on many shards at once.
    if (!outgoing && (pause_wanted || queued > kMaxQueuedBytes)) {
      read_stopped = true;
      return;
    }
    read_header();
  }

  // Closes the connection once; every pending request fails with `why` (uncertain when it
  // had been sent, unless `why` is a refusal that proves nothing was exchanged).
  void close(LogLevel level, const std::string& reason, const Error& why) {
    if (state == State::closed) return;
    const auto was = state;
    state = State::closed;
    t.log(level, who() + ": " + reason + (was == State::ready || was == State::hello_wait ? "; closed" : ""));
    boost::system::error_code ec;
    sock.shutdown(tcp::socket::shutdown_both, ec);
    sock.close(ec);
    hello_timer.cancel();
    auto self = shared_from_this();
    t.conns.erase(self);
    if (outgoing) {
      auto it = t.outgoing.find(target);
      if (it != t.outgoing.end() && it->second == self) t.outgoing.erase(it);
      if (was != State::ready && target.value() != 0 && !t.stopped && !replaced) {
        auto& b = t.backoff[target];
        if (b.address != address) b = Impl::Backoff{address, {}, std::chrono::milliseconds(0), why};
        b.pause = std::min(std::max(b.pause * 2, std::chrono::milliseconds(50)), std::chrono::milliseconds(2000));
        b.until = std::chrono::steady_clock::now() + b.pause;
        b.last = why;
      }
    }
    auto pend = std::move(pending);
    pending.clear();
    unsent.clear();
    wq.clear();
    queued = 0;
    for (auto& [id, p] : pend) {
      p.timer->cancel();
      Error e = why;
      if (why.code == Errc::unavailable) e.outcome = p.sent ? Outcome::uncertain : Outcome::transient;
      t.deliver(p.cb, std::move(e));
    }
  }
};

void AsioPeerTransport::Impl::accept() {
  acceptor.async_accept([self = shared_from_this()](const boost::system::error_code& ec, tcp::socket sock) {
    if (self->stopped || !self->acceptor.is_open()) return;
    if (!ec) {
      boost::system::error_code e2;
      auto ep = sock.remote_endpoint(e2);
      const std::string ip = e2 ? "?" : ep.address().to_string();
      std::string remote = e2 ? "?" : ip + ":" + std::to_string(ep.port());
      ++self->accepted;
      std::size_t pending = 0;
      for (const auto& other : self->conns)
        if (!other->outgoing && other->state != Conn::State::ready && other->state != Conn::State::closed &&
            other->remote_ip == ip)
          ++pending;
      if (pending >= kMaxPendingPerAddress) {
        ++self->refused_pending;
        const auto now = std::chrono::steady_clock::now();
        if (now - self->last_pending_warning >= std::chrono::seconds(10)) {
          self->last_pending_warning = now;
          self->log(LogLevel::warn, "refused a connection from " + remote + ": " + std::to_string(pending) +
                                        " connections from " + ip + " have not finished their hello (at most " +
                                        std::to_string(kMaxPendingPerAddress) + "; " +
                                        std::to_string(self->refused_pending) + " refused so far)");
        }
        boost::system::error_code ignored;
        sock.close(ignored);
        return self->accept();
      }
      auto c = std::make_shared<Conn>(*self, false, NodeId{0}, remote);
      c->remote_ip = ip;
      c->sock = std::move(sock);
      self->conns.insert(c);
      c->begin();
    } else {
      // Out of descriptors, say: accepting again at once fails again at once, a busy loop
      // on the transport's one I/O thread. Wait a little first (review).
      self->log(LogLevel::warn, "accept failed: " + ec.message() + "; accepting again in 100 ms");
      self->accept_backoff.expires_after(std::chrono::milliseconds(100));
      self->accept_backoff.async_wait([self](const boost::system::error_code& e) {
        if (!e && !self->stopped) self->accept();
      });
      return;
    }
    self->accept();
  });
}

void AsioPeerTransport::Impl::do_request(NodeId peer, PeerMessageType type, std::string payload,
                                         std::chrono::milliseconds timeout, PeerCallback cb) {
  if (stopped) {
    cb(Error(Errc::unavailable, "the peer transport is stopping", Outcome::transient));
    return;
  }
  if (type == kHelloType) {
    cb(Error(Errc::invalid_argument, "peer message type 0x0000 is the hello; it cannot be requested"));
    return;
  }
  if (payload.size() + kHeaderBytes > kMaxPeerFrameBytes) {
    cb(Error(Errc::invalid_argument, "a peer request of " + std::to_string(payload.size()) +
                                         " bytes is larger than the frame limit of " +
                                         std::to_string(kMaxPeerFrameBytes) + " bytes"));
    return;
  }
  auto addr = dir->lookup(peer);
  if (!addr) {
    cb(Error(Errc::unavailable,
             "peer " + std::to_string(peer.value()) +
                 " is unknown: no peer address for it in the catalog or in transport.peers",
             Outcome::transient));
    return;
  }
  if (!outgoing.count(peer))
    if (auto b = backoff.find(peer); b != backoff.end() && b->second.address == *addr) {
      const auto now = std::chrono::steady_clock::now();
      if (now < b->second.until) {
        Error e = b->second.last;
        e.outcome = Outcome::transient;  // nothing was sent
        e.message += " (the next attempt to connect is in " +
                     std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(b->second.until - now).count() + 1) +
                     " ms)";
        deliver(cb, std::move(e));
        return;
      }
    }
  std::shared_ptr<Conn> c;
  if (auto it = outgoing.find(peer); it != outgoing.end()) {
    c = it->second;
    if (c->address != *addr) {
      c->replaced = true;
      c->close(LogLevel::info, "the peer's address changed to " + *addr, c->lost("its address changed"));
      c.reset();
    }
  }
  if (!c) {
    c = std::make_shared<Conn>(*this, true, peer, *addr);
    outgoing[peer] = c;
    conns.insert(c);
    c->arm_setup_timer();
    std::string host, port;
    if (!split_address(*addr, host, port)) {
      auto keep = c;
      asio::post(io, [keep] {
        keep->close(LogLevel::warn, "bad peer address (want host:port)",
                    Error(Errc::unavailable, keep->peer_name() + " has a bad address '" +
                                                 keep->address + "' (want host:port)", Outcome::transient));
      });
    } else {
      auto resolver = std::make_shared<tcp::resolver>(io);
      resolver->async_resolve(
          host, port, [c, resolver](const boost::system::error_code& ec, tcp::resolver::results_type eps) {
            if (c->state == Conn::State::closed) return;
            if (ec) {
              c->close(LogLevel::warn, "cannot resolve: " + ec.message(),
                       Error(Errc::unavailable, "cannot resolve " + c->peer_name() +
                                                    " at " + c->address + ": " + ec.message()));
              return;
            }
            asio::async_connect(c->sock, eps, [c](const boost::system::error_code& ec, const tcp::endpoint&) {
              if (c->state == Conn::State::closed) return;
              if (ec) {
                c->close(LogLevel::info, "cannot connect: " + ec.message(),
                         Error(Errc::unavailable, "cannot connect to " + c->peer_name() +
                                                      " at " + c->address + ": " + ec.message()));
                return;
              }
              c->begin();
            });
          });
    }
  }
  if (c->queued > 0 && c->queued + kHeaderBytes + payload.size() > kMaxQueuedBytes) {
    deliver(cb, Error(Errc::unavailable,
                      c->peer_name() + " at " + c->address + " is not taking requests: " +
                          std::to_string(c->queued >> 20) + " MiB are queued for it",
                      Outcome::transient));
    return;
  }
  const std::uint64_t id = next_id++;
  Conn::Pending p;
  p.cb = std::move(cb);
  p.type = type;
  p.timer = std::make_unique<asio::steady_timer>(io, timeout);
  p.timer->async_wait([w = std::weak_ptr<Conn>(c), id, timeout, peer, type](const boost::system::error_code& ec) {
    if (ec) return;
    auto c = w.lock();
    if (!c) return;
    auto it = c->pending.find(id);
    if (it == c->pending.end()) return;
    auto pp = std::move(it->second);
    c->pending.erase(it);
    c->forget_frame(id);
    c->t.deliver(pp.cb, Error(Errc::timeout, "peer " + std::to_string(peer.value()) + " did not answer a request of type " +
                                   type_name(type) + " within " + std::to_string(timeout.count()) + " ms"));
  });
  OutFrame frame = make_frame(Header{0, type, id, 0}, std::move(payload));
  frame.request = id;
  if (c->state == Conn::State::ready) {
    p.sent = true;
    c->pending.emplace(id, std::move(p));
    c->send(std::move(frame));
  } else {
    c->pending.emplace(id, std::move(p));
    c->queued += kHeaderBytes + frame.payload.size();
    c->unsent.emplace_back(id, std::move(frame));
  }
}

void AsioPeerTransport::Impl::serve(const std::shared_ptr<Conn>& c, const Header& h, std::string payload) {
  std::shared_ptr<HandlerEntry> entry;
  {
    std::lock_guard lk(hmu);
    if (auto it = handlers.find(h.type); it != handlers.end()) {
      entry = it->second;
      ++entry->running;
    }
  }
  const std::uint64_t id = h.request_id;
  const PeerMessageType type = h.type;
  if (c->peer.node.value() == 0 && type != kPeerPing) {
    // A hello without a node id is a probe (probe_peer): it may ping, nothing else.
    c->send(make_frame(Header{kFlagResponse | kFlagError, type, id, 0},
                       encode_error(Error(Errc::invalid_argument, "a peer that says it is node 0 may only ping"))));
    if (entry) {
      std::lock_guard lk(hmu);
      --entry->running;
    }
    hcv.notify_all();
    return;
  }
  if (!entry) {
    // Starting: its handlers are not registered yet, and a definite not_supported would
    // make the caller give up on a call this node serves in a moment (review).
    const std::string node = "node " + std::to_string(opts.self.value());
    c->send(make_frame(Header{kFlagResponse | kFlagError, type, id, 0},
                       encode_error(starting ? Error(Errc::unavailable,
                                                     node + " is starting: no handler for peer message type " +
                                                         type_name(type) + " yet; retry",
                                                     Outcome::transient)
                                             : Error(Errc::not_supported,
                                                     node + " has no handler for peer message type " + type_name(type)))));
    return;
  }
  std::weak_ptr<Impl> wt = weak_from_this();
  std::weak_ptr<Conn> wc = c;
  PeerResponder respond([wt, wc, id, type](Result<std::string> answer) {
    auto t = wt.lock();
    if (!t) return;
    OutFrame frame;
    if (answer.ok()) {
      if (answer.value().size() + kHeaderBytes > kMaxPeerFrameBytes)
        answer = Error(Errc::internal, "the answer of " + std::to_string(answer.value().size()) +
                                           " bytes is larger than the peer frame limit");
    }
    if (answer.ok())
      frame = make_frame(Header{kFlagResponse, type, id, 0}, std::move(answer.value()));
    else
      frame = make_frame(Header{kFlagResponse | kFlagError, type, id, 0}, encode_error(answer.error()));
    asio::post(t->io, [wc, f = std::move(frame)]() mutable {
      auto c = wc.lock();
      if (!c || c->state != Conn::State::ready) return;
      c->send(std::move(f));
      if (!c->outgoing && c->queued > kMaxQueuedBytes) c->pause_wanted = true;  // see on_frame
    });
  });
  try {
    entry->fn(c->peer, std::move(payload), std::move(respond));
  } catch (const std::exception& e) {
    log(LogLevel::error, "the handler of peer message type " + type_name(type) + " threw: " + e.what());
  }
  {
    std::lock_guard lk(hmu);
    --entry->running;
  }
  hcv.notify_all();
}

void AsioPeerTransport::Impl::shutdown_io() {
  boost::system::error_code ec;
  acceptor.close(ec);
  accept_backoff.cancel();
  auto all = conns;
  for (auto& c : all)
    c->close(LogLevel::info, "the transport is stopping",
             Error(Errc::unavailable, "the peer transport is stopping", Outcome::transient));
}

// ---------------------------------------------------------------------------------------
// AsioPeerTransport

Result<std::unique_ptr<AsioPeerTransport>> AsioPeerTransport::start(PeerTransportOptions opts,
                                                                   std::shared_ptr<PeerDirectory> directory) {
  if (!opts.log) opts.log = [](LogLevel l, const std::string& m) { log_line(l, "transport", m); };
  auto impl = std::make_shared<Impl>();
  impl->opts = std::move(opts);
  impl->starting = impl->opts.handlers_registered_later;
  impl->dir = directory ? std::move(directory) : std::make_shared<PeerDirectory>();
  impl->failpoints.path = impl->opts.failpoint_file;
  const auto& o = impl->opts;
  const int tls_set = !o.tls_cert_file.empty() + !o.tls_key_file.empty() + !o.tls_ca_file.empty();
  if (tls_set != 0 && tls_set != 3)
    return Error(Errc::invalid_argument,
                 "transport.tls.cert_file, transport.tls.key_file and transport.tls.ca_file must be set together "
                 "(mutual TLS needs all three) or not at all");
  if (tls_set == 3) {
    auto ctx = make_tls_context(o);
    if (!ctx) return ctx.error();
    impl->tls = std::move(*ctx);
  }
  if (!impl->opts.listen_address.empty()) {
    std::string host, port;
    if (!split_address(impl->opts.listen_address, host, port))
      return Error(Errc::invalid_argument,
                   "transport.address '" + impl->opts.listen_address + "' is not host:port");
    boost::system::error_code ec;
    tcp::resolver resolver(impl->io);
    auto eps = resolver.resolve(host, port, tcp::resolver::passive, ec);
    if (ec || eps.empty())
      return Error(Errc::unavailable, "cannot resolve transport.address " + impl->opts.listen_address + ": " +
                                          (ec ? ec.message() : "no address"));
    const tcp::endpoint ep = *eps.begin();
    impl->acceptor.open(ep.protocol(), ec);
    if (!ec) impl->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) impl->acceptor.bind(ep, ec);
    if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec)
      return Error(Errc::unavailable,
                   "cannot listen on transport.address " + impl->opts.listen_address + ": " + ec.message());
    impl->bound_port = impl->acceptor.local_endpoint().port();
    impl->accept();
  }
  std::unique_ptr<AsioPeerTransport> t(new AsioPeerTransport(impl));
  // The core answers pings itself (sluiced probe-peer).
  (void)t->handle(kPeerPing, [](const PeerIdentity&, std::string, PeerResponder r) { r(std::string("pong")); });
  impl->thread = std::thread([impl = impl.get()] {
    pthread_setname_np(pthread_self(), "peer-io");
    impl->io_thread = std::this_thread::get_id();
    for (;;) {
      try {
        impl->io.run();
        return;
      } catch (const std::exception& e) {  // a callback threw: log it, keep serving
        impl->log(LogLevel::error, std::string("a peer callback threw: ") + e.what());
      }
    }
  });
  if (!impl->opts.listen_address.empty())
    impl->log(LogLevel::info, "listening on " + impl->opts.listen_address + " (port " +
                                  std::to_string(impl->bound_port) + "), node " +
                                  std::to_string(impl->opts.self.value()) + ", cluster " + impl->opts.cluster_id +
                                  (impl->tls ? ", mutual TLS" : ""));
  return t;
}

Result<void> AsioPeerTransport::reload_certificates() {
  if (!impl_->tls_context())
    return Error(Errc::invalid_argument, "transport: TLS is off (transport.tls.cert_file is not set)");
  auto ctx = make_tls_context(impl_->opts);
  if (!ctx) {
    impl_->log(LogLevel::error, "TLS reload failed, keeping the previous certificate: " + ctx.error().message);
    return ctx.error();
  }
  {
    std::lock_guard lk(impl_->tls_mu);
    impl_->tls = std::move(*ctx);
  }
  impl_->log(LogLevel::info, "TLS certificate and key reloaded from " + impl_->opts.tls_cert_file);
  return {};
}

AsioPeerTransport::~AsioPeerTransport() {
  stop();
  impl_->work.reset();
  if (impl_->thread.joinable()) impl_->thread.join();
}

std::optional<Hello> AsioPeerTransport::last_hello(NodeId peer) const {
  std::lock_guard lk(impl_->hello_mu);
  auto it = impl_->hellos.find(peer);
  if (it == impl_->hellos.end()) return std::nullopt;
  return it->second;
}

NodeId AsioPeerTransport::self() const { return impl_->opts.self; }
std::uint16_t AsioPeerTransport::port() const { return impl_->bound_port; }
std::uint64_t AsioPeerTransport::accepted_connections() const { return impl_->accepted.load(); }

void AsioPeerTransport::handlers_registered() { impl_->starting = false; }

void AsioPeerTransport::stop() {
  if (impl_->stopped.exchange(true)) return;
  if (!impl_->thread.joinable()) return;
  std::promise<void> done;
  asio::post(impl_->io, [impl = impl_.get(), &done] {
    impl->shutdown_io();
    done.set_value();
  });
  done.get_future().wait();
}

Result<void> AsioPeerTransport::handle(PeerMessageType type, PeerHandler handler) {
  if (type == kHelloType)
    return Error(Errc::invalid_argument, "peer message type 0x0000 is the hello; it cannot be handled");
  if (!handler) return Error(Errc::invalid_argument, "a peer handler must not be empty");
  std::lock_guard lk(impl_->hmu);
  auto [it, inserted] = impl_->handlers.try_emplace(type);
  if (!inserted)
    return Error(Errc::conflict, "peer message type " + type_name(type) + " already has a handler");
  it->second = std::make_shared<Impl::HandlerEntry>();
  it->second->fn = std::move(handler);
  return {};
}

void AsioPeerTransport::unhandle(PeerMessageType type) {
  std::unique_lock lk(impl_->hmu);
  auto it = impl_->handlers.find(type);
  if (it == impl_->handlers.end()) return;
  auto entry = it->second;
  impl_->handlers.erase(it);
  // From a handler (the I/O thread) waiting would never end: the SDK forbids it; do not hang.
  // (The running call keeps its entry alive; the handler is destroyed after it returns.)
  if (std::this_thread::get_id() == impl_->io_thread.load()) return;
  impl_->hcv.wait(lk, [&] { return entry->running == 0; });
  // Destroy the handler (and what it captured) outside the lock.
  auto fn = std::move(entry->fn);
  lk.unlock();
}

void AsioPeerTransport::request(NodeId peer, PeerMessageType type, std::string payload,
                                std::chrono::milliseconds timeout, PeerCallback cb) {
  if (!cb) cb = [](Result<std::string>) {};
  asio::post(impl_->io, [impl = impl_.get(), peer, type, p = std::move(payload), timeout,
                         cb = std::move(cb)]() mutable {
    impl->do_request(peer, type, std::move(p), timeout, std::move(cb));
  });
}

// ---------------------------------------------------------------------------------------
// probe-peer

Result<ProbeResult> probe_peer(const std::string& address, const Hello& self, std::chrono::milliseconds timeout) {
  auto dir = std::make_shared<PeerDirectory>();
  dir->set_static({{NodeId{0}, address}});  // node 0: whoever answers at the address
  PeerTransportOptions o;
  o.self = self.node;
  o.cluster_id = self.cluster_id;
  o.directory_id = self.directory_id;
  o.log = [](LogLevel l, const std::string& m) {
    if (l >= LogLevel::warn) log_line(l, "transport", m);
  };
  auto t = AsioPeerTransport::start(o, dir);
  if (!t) return t.error();
  std::promise<Result<std::string>> answer;
  (*t)->request(NodeId{0}, kPeerPing, "", timeout, [&answer](Result<std::string> r) { answer.set_value(std::move(r)); });
  auto r = answer.get_future().get();
  if (!r) return r.error();
  auto hello = (*t)->last_hello(NodeId{0});
  if (!hello) return Error(Errc::internal, "the ping was answered without a hello");
  return ProbeResult{PeerIdentity{hello->node, hello->directory_id}, hello->cluster_id};
}

}  // namespace sluice::core

namespace sluice::core {

Result<std::map<NodeId, std::string>> PeerDirectory::parse_static(const std::string& spec) {
  std::map<NodeId, std::string> out;
  std::size_t at = 0;
  while (at <= spec.size()) {
    auto comma = spec.find(',', at);
    if (comma == std::string::npos) comma = spec.size();
    std::string entry = spec.substr(at, comma - at);
    at = comma + 1;
    const auto b = entry.find_first_not_of(" \t"), e = entry.find_last_not_of(" \t");
    if (b == std::string::npos) continue;
    entry = entry.substr(b, e - b + 1);
    const auto eq = entry.find('=');
    std::uint64_t id = 0;
    bool ok = eq != std::string::npos && eq > 0 && eq + 1 < entry.size();
    if (ok) {
      for (std::size_t i = 0; i < eq; ++i) {
        if (entry[i] < '0' || entry[i] > '9' || id > 0x7fffffff) {
          ok = false;
          break;
        }
        id = id * 10 + static_cast<unsigned>(entry[i] - '0');
      }
    }
    if (!ok || id == 0 || id > 0x7fffffff || entry.find(':', eq) == std::string::npos)
      return Error(Errc::invalid_argument,
                   "transport.peers: bad entry '" + entry + "' (want NODE_ID=HOST:PORT, comma-separated)");
    out[NodeId{static_cast<std::uint32_t>(id)}] = entry.substr(eq + 1);
  }
  return out;
}

}  // namespace sluice::core
