// The cluster transport's vtable (init, listen, connect, close) and its public functions;
// the connections it sets up run in cluster_transport_connection.cc. Contract:
// cluster_transport.h.
#include "cluster_transport.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdio>
#include <cstring>
#include <new>
#include <utility>

#include "cluster_auth.h"
#include "cluster_transport_state.h"

namespace sluice::raft_meta {

namespace cluster_transport_detail {

void Transport::log_limited(LogLevel level, const std::string& key, const std::string& msg) {
  if (opts.log_repeat_interval_ms == 0) {
    log(level, msg);
    return;
  }
  std::uint64_t now = uv_now(loop);
  // Keys carry peer-supplied text (ids): keep the map bounded whatever peers send. A
  // dropped entry only loses its count of suppressed lines.
  if (repeats.size() >= 1024) {
    for (auto it = repeats.begin(); it != repeats.end();) {
      if (now - it->second.last_ms >= opts.log_repeat_interval_ms)
        it = repeats.erase(it);
      else
        ++it;
    }
    if (repeats.size() >= 1024) repeats.clear();
  }
  auto [it, fresh] = repeats.try_emplace(key);
  if (!fresh && now - it->second.last_ms < opts.log_repeat_interval_ms) {
    it->second.suppressed++;
    return;
  }
  std::string line = msg;
  if (it->second.suppressed > 0)
    line += " (" + std::to_string(it->second.suppressed) + " similar suppressed)";
  it->second.last_ms = now;
  it->second.suppressed = 0;
  log(level, line);
}


}  // namespace cluster_transport_detail

namespace {

using namespace cluster_transport_detail;

// IPv4 "a.b.c.d:port"; no port means 8080, as libraft's own transport does.
bool parse_ipv4(const std::string& address, struct sockaddr_in* out) {
  std::string host = address;
  int port = 8080;
  auto colon = address.rfind(':');
  if (colon != std::string::npos) {
    host = address.substr(0, colon);
    std::string p = address.substr(colon + 1);
    if (p.empty() || p.size() > 5) return false;
    port = 0;
    for (char c : p) {
      if (c < '0' || c > '9') return false;
      port = port * 10 + (c - '0');
    }
    if (port > 65535) return false;
  }
  return uv_ip4_addr(host.c_str(), port, out) == 0;  // dotted quad only (inet_pton)
}

Transport* impl_of(struct raft_uv_transport* t) { return static_cast<Transport*>(t->impl); }

void set_errmsg(struct raft_uv_transport* t, const std::string& msg) {
  std::snprintf(t->errmsg, sizeof t->errmsg, "%s", msg.c_str());
}

// --- the vtable ---

int tr_init(struct raft_uv_transport* transport, raft_id id, const char* address) {
  Transport* t = impl_of(transport);
  if (id == 0 || address == nullptr) {
    set_errmsg(transport, "raft server id 0 or no address");
    return RAFT_INVALID;
  }
  std::string a = address;
  struct sockaddr_in sa;
  if (a.size() > kMaxHandshakeAddressLen || !is_printable_ascii(a) || !parse_ipv4(a, &sa)) {
    set_errmsg(transport, "raft address " + printable(a) + " is not an IPv4 a.b.c.d:port");
    return RAFT_INVALID;
  }
  t->id = id;
  t->address = a;
  return 0;
}

int tr_listen(struct raft_uv_transport* transport, raft_uv_accept_cb cb) {
  Transport* t = impl_of(transport);
  if (t->closing || t->listener_open) {
    set_errmsg(transport, "raft transport closing or already listening");
    return RAFT_INVALID;
  }
  struct sockaddr_in sa;
  if (!parse_ipv4(t->address, &sa)) {
    set_errmsg(transport, "raft address " + printable(t->address) + " is not an IPv4 a.b.c.d:port");
    return RAFT_INVALID;
  }
  t->accept_cb = cb;
  uv_tcp_init(t->loop, &t->listener);
  t->listener.data = t;
  t->listener_open = true;  // closed by transport->close, even when bind fails
  int rv = uv_tcp_bind(&t->listener, reinterpret_cast<const struct sockaddr*>(&sa), 0);
  if (rv == 0) rv = uv_listen(reinterpret_cast<uv_stream_t*>(&t->listener), 128, on_connection);
  if (rv != 0) {
    set_errmsg(transport, "listen on " + t->address + ": " + uv_strerror(rv));
    return RAFT_IOERR;
  }
  return 0;
}

int tr_connect(struct raft_uv_transport* transport, struct raft_uv_connect* req, raft_id id,
               const char* address, raft_uv_connect_cb cb) {
  Transport* t = impl_of(transport);
  req->cb = cb;
  if (t->closing) {
    set_errmsg(transport, "raft transport is closing");
    return RAFT_CANCELED;
  }
  std::string target = address ? address : "";
  struct sockaddr_in sa;
  if (!parse_ipv4(target, &sa)) {
    set_errmsg(transport, "raft address " + printable(target) + " is not an IPv4 a.b.c.d:port");
    return RAFT_NOCONNECTION;
  }
  std::string local = t->cluster_id ? t->cluster_id() : std::string();
  if (local.empty()) {
    std::string msg = "not connecting to raft server " + std::to_string(id) + " at " +
                      printable(target) + ": this member's cluster id is not known yet";
    t->log_limited(LogLevel::warn, "unknown-local|out|" + target, msg);
    set_errmsg(transport, msg);
    return RAFT_NOCONNECTION;
  }
  if (local.size() > kMaxHandshakeClusterIdLen) {
    std::string msg = "not connecting to raft server " + std::to_string(id) +
                      ": this member's cluster id is longer than " +
                      std::to_string(kMaxHandshakeClusterIdLen) + " bytes";
    t->log_limited(LogLevel::error, "long-local", msg);
    set_errmsg(transport, msg);
    return RAFT_NOCONNECTION;
  }
  AuthNonce nonce{};
  if (!t->opts.secret.empty() && !random_nonce(nonce)) {
    t->log_limited(LogLevel::error, "no-random", "not connecting to raft server " +
                                                     std::to_string(id) +
                                                     ": no randomness for the handshake's nonce");
    set_errmsg(transport, "no randomness for the handshake's nonce");
    return RAFT_NOCONNECTION;
  }
  auto* h = new (std::nothrow) Handshake();
  auto* tcp = static_cast<uv_tcp_t*>(raft_malloc(sizeof(uv_tcp_t)));
  if (!h || !tcp) {
    delete h;
    raft_free(tcp);
    set_errmsg(transport, "out of memory");
    return RAFT_NOMEM;
  }
  h->t = t;
  h->side = Handshake::Side::outgoing;
  h->tcp = tcp;
  h->req = req;
  h->cb = cb;
  h->target_id = id;
  h->target_address = target;
  h->peer = target;
  h->local_cluster_id = local;
  if (!t->opts.secret.empty()) {
    h->connector_nonce = nonce;
    h->out = encode_cluster_hello(local, t->id, t->address, &h->connector_nonce);
    h->answer = AnswerReader(2);
  } else {
    h->out = encode_cluster_hello(local, t->id, t->address);
  }
  uv_tcp_init(t->loop, h->tcp);
  uv_timer_init(t->loop, &h->timer);
  h->tcp->data = h;
  h->timer.data = h;
  h->open_handles = 2;
  h->pos = t->live.insert(t->live.end(), h);
  h->connect_req.data = h;
  int rv = uv_tcp_connect(&h->connect_req, h->tcp, reinterpret_cast<const struct sockaddr*>(&sa),
                          on_connected);
  if (rv != 0) {
    set_errmsg(transport, "connect to " + target + ": " + uv_strerror(rv));
    h->report = false;  // failing synchronously: no callback owed
    fail(h, RAFT_NOCONNECTION);
    return RAFT_NOCONNECTION;
  }
  uv_timer_start(&h->timer, on_timeout, t->opts.handshake_timeout_ms, 0);
  return 0;
}

void on_listener_closed(uv_handle_t* handle) {
  auto* t = static_cast<Transport*>(handle->data);
  t->listener_open = false;
  t->maybe_fire_close();
}

void tr_close(struct raft_uv_transport* transport, raft_uv_transport_close_cb cb) {
  Transport* t = impl_of(transport);
  if (t->closing) return;
  t->closing = true;
  t->close_cb = cb;
  if (t->listener_open && !uv_is_closing(reinterpret_cast<uv_handle_t*>(&t->listener)))
    uv_close(reinterpret_cast<uv_handle_t*>(&t->listener), on_listener_closed);
  // Abort every handshake in flight; pending connect callbacks get RAFT_CANCELED once the
  // handles are closed (finish). Handshakes already handed over only wait for their timer.
  std::list<Handshake*> snapshot = t->live;
  for (Handshake* h : snapshot) {
    if (!h->handed_over) {
      if (!h->aborting) h->status = RAFT_CANCELED;
      h->aborting = true;
      close_handles(h);
    }
  }
  t->maybe_fire_close();
}



}  // namespace

int cluster_transport_init(struct raft_uv_transport* transport, uv_loop_t* loop,
                           std::function<std::string()> cluster_id,
                           std::function<void(LogLevel, const std::string&)> log,
                           ClusterTransportOptions options) {
  void* data = transport->data;
  std::memset(transport, 0, sizeof *transport);
  transport->data = data;
  auto* t = new (std::nothrow) Transport();
  if (!t) {
    set_errmsg(transport, "out of memory");
    return RAFT_NOMEM;
  }
  t->transport = transport;
  t->loop = loop;
  t->cluster_id = std::move(cluster_id);
  t->log_fn = std::move(log);
  t->opts = options;
  if (t->opts.handshake_timeout_ms == 0) t->opts.handshake_timeout_ms = kDefaultHandshakeTimeoutMs;
  transport->impl = t;
  transport->init = tr_init;
  transport->listen = tr_listen;
  transport->connect = tr_connect;
  transport->close = tr_close;
  return 0;
}

void cluster_transport_close(struct raft_uv_transport* transport) {
  Transport* t = impl_of(transport);
  if (!t) return;
  transport->impl = nullptr;
  if (t->listener_open || !t->live.empty()) {
    t->log(LogLevel::error,
           "cluster_transport_close with uv handles still open (transport->close not "
           "completed): leaking the transport state");
    return;
  }
  delete t;
}

std::uint16_t cluster_transport_listen_port(const struct raft_uv_transport* transport) {
  auto* t = static_cast<const Transport*>(transport->impl);
  if (!t || !t->listener_open) return 0;
  struct sockaddr_storage ss{};
  int len = sizeof ss;
  if (uv_tcp_getsockname(&t->listener, reinterpret_cast<struct sockaddr*>(&ss), &len) != 0 ||
      ss.ss_family != AF_INET)
    return 0;
  return ntohs(reinterpret_cast<struct sockaddr_in*>(&ss)->sin_port);
}

}  // namespace sluice::raft_meta
