#include "cluster_transport.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <list>
#include <map>
#include <new>
#include <utility>

extern "C" {
#include <raft.h>
}

namespace sluice::raft_meta {

namespace {

constexpr std::size_t kMagicLen = 8;
// magic | u32 id len | id | u64 server id | u32 addr len | addr
constexpr std::size_t kHelloFixed = kMagicLen + 4;  // read first: magic and id length
constexpr std::size_t kMaxHello =
    kMagicLen + 4 + kMaxHandshakeClusterIdLen + 8 + 4 + kMaxHandshakeAddressLen;
// magic | u32 status | u32 id len | id
constexpr std::size_t kAnswerFixed = kMagicLen + 4 + 4;
constexpr std::size_t kMaxAnswer = kAnswerFixed + kMaxHandshakeClusterIdLen;

void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; i++) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; i++) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
std::uint32_t get_u32(const char* p) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}
std::uint64_t get_u64(const char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

// For log lines: ids and addresses come from the network.
std::string printable(std::string_view s) {
  if (s.empty()) return "(none)";
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

bool is_printable_ascii(std::string_view s) {
  for (unsigned char c : s)
    if (c < 0x21 || c >= 0x7f) return false;
  return true;
}

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

std::string peer_name(uv_tcp_t* tcp) {
  struct sockaddr_storage ss{};
  int len = sizeof ss;
  if (uv_tcp_getpeername(tcp, reinterpret_cast<struct sockaddr*>(&ss), &len) != 0 ||
      ss.ss_family != AF_INET)
    return "unknown peer";
  auto* in = reinterpret_cast<struct sockaddr_in*>(&ss);
  char ip[INET_ADDRSTRLEN] = {0};
  uv_ip4_name(in, ip, sizeof ip);
  return std::string(ip) + ":" + std::to_string(ntohs(in->sin_port));
}

std::string host_part(const std::string& hostport) {
  auto colon = hostport.rfind(':');
  return colon == std::string::npos ? hostport : hostport.substr(0, colon);
}

struct Transport;

// One connection being set up, in either direction. Lives (in Transport::live) until every
// handle it owns is closed: the timer always, the TCP handle unless it was handed to libraft.
struct Handshake {
  enum class Side { incoming, outgoing };

  Transport* t = nullptr;
  Side side = Side::incoming;
  uv_tcp_t* tcp = nullptr;  // raft_malloc'ed (libraft frees streams it owns with raft_free)
  uv_timer_t timer{};
  uv_connect_t connect_req{};
  uv_write_t write_req{};
  std::string out;  // the frame being written; alive until the write callback
  std::list<Handshake*>::iterator pos;

  int open_handles = 0;
  bool tcp_closing = false;
  bool timer_closing = false;
  bool aborting = false;   // failing or cancelled: waiting for handles to close
  bool handed_over = false;
  bool connected = false;  // outgoing: TCP connect completed
  bool writing = false;
  bool written = false;
  bool read_done = false;
  int status = 0;  // outgoing: reported to the connect callback on failure

  // Read state: exactly `need` bytes are expected so far.
  std::array<char, kMaxHello> in{};
  std::size_t have = 0;
  std::size_t need = 0;

  std::string peer;  // "ip:port" of the other end, for log lines

  // incoming: the hello
  std::string peer_cluster_id;
  std::uint64_t peer_server_id = 0;
  std::string peer_address;

  // outgoing
  struct raft_uv_connect* req = nullptr;
  raft_uv_connect_cb cb = nullptr;
  bool report = true;  // false when connect() failed synchronously (no callback owed)
  raft_id target_id = 0;
  std::string target_address;
  std::string local_cluster_id;  // what we sent
  HandshakeStatus answer_status = HandshakeStatus::ok;
  std::string answer_cluster_id;
};

struct Transport {
  struct raft_uv_transport* transport = nullptr;
  uv_loop_t* loop = nullptr;
  std::function<std::string()> cluster_id;
  std::function<void(LogLevel, const std::string&)> log_fn;
  ClusterTransportOptions opts;

  raft_id id = 0;
  std::string address;

  uv_tcp_t listener{};
  bool listener_open = false;  // initialized and not yet closed
  raft_uv_accept_cb accept_cb = nullptr;

  std::list<Handshake*> live;
  bool closing = false;
  bool close_fired = false;
  raft_uv_transport_close_cb close_cb = nullptr;
  int in_callback = 0;  // > 0 while a user callback runs: never fire close_cb from inside

  struct Repeat {
    std::uint64_t last_ms = 0;
    unsigned suppressed = 0;
  };
  std::map<std::string, Repeat> repeats;

  void log(LogLevel level, const std::string& msg) {
    if (log_fn) log_fn(level, msg);
  }

  // Logs unless the same `key` was logged within the repeat interval.
  void log_limited(LogLevel level, const std::string& key, const std::string& msg) {
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

  void maybe_fire_close() {
    if (!closing || close_fired || in_callback > 0 || listener_open || !live.empty()) return;
    close_fired = true;
    raft_uv_transport_close_cb cb = close_cb;
    if (cb) cb(transport);  // may release this object: nothing after this
  }
};

Transport* impl_of(struct raft_uv_transport* t) { return static_cast<Transport*>(t->impl); }

void set_errmsg(struct raft_uv_transport* t, const std::string& msg) {
  std::snprintf(t->errmsg, sizeof t->errmsg, "%s", msg.c_str());
}

// --- handshake lifecycle ---

void on_handle_closed(uv_handle_t* handle);

void close_handles(Handshake* h) {
  if (h->tcp && !h->tcp_closing) {
    h->tcp_closing = true;
    uv_close(reinterpret_cast<uv_handle_t*>(h->tcp), on_handle_closed);
  }
  if (!h->timer_closing) {
    h->timer_closing = true;
    uv_close(reinterpret_cast<uv_handle_t*>(&h->timer), on_handle_closed);
  }
}

// Every handle is closed: report (outgoing failures), release, maybe finish closing.
void finish(Handshake* h) {
  Transport* t = h->t;
  t->live.erase(h->pos);
  bool call = h->side == Handshake::Side::outgoing && !h->handed_over && h->report;
  struct raft_uv_connect* req = h->req;
  raft_uv_connect_cb cb = h->cb;
  // Like the stock transport: once the transport is closing, every pending connect request
  // ends with RAFT_CANCELED (libraft's client expects nothing else then).
  int status = t->closing ? RAFT_CANCELED : (h->status != 0 ? h->status : RAFT_NOCONNECTION);
  delete h;
  if (call && cb) {
    t->in_callback++;
    cb(req, nullptr, status);
    t->in_callback--;
  }
  t->maybe_fire_close();
}

void on_handle_closed(uv_handle_t* handle) {
  auto* h = static_cast<Handshake*>(handle->data);
  if (handle == reinterpret_cast<uv_handle_t*>(h->tcp)) {
    raft_free(h->tcp);
    h->tcp = nullptr;
  }
  if (--h->open_handles == 0) finish(h);
}

// Fails the handshake: closes its handles; the connect callback (outgoing) runs once they
// are closed. Idempotent.
void fail(Handshake* h, int status) {
  if (h->aborting || h->handed_over) return;
  h->aborting = true;
  h->status = status;
  close_handles(h);
}

std::string describe(const Handshake* h) {
  if (h->side == Handshake::Side::outgoing)
    return "outgoing to raft server " + std::to_string(h->target_id) + " at " +
           printable(h->target_address);
  std::string d = "incoming from " + h->peer;
  if (h->peer_server_id != 0)
    d += ", raft server " + std::to_string(h->peer_server_id) + " at " + printable(h->peer_address);
  return d;
}

void malformed(Handshake* h, const std::string& reason) {
  Transport* t = h->t;
  std::string what = h->side == Handshake::Side::incoming ? "closing raft connection from "
                                                           : "closing raft connection to ";
  std::string who = h->side == Handshake::Side::incoming
                        ? h->peer
                        : "raft server " + std::to_string(h->target_id) + " at " +
                              printable(h->target_address);
  t->log_limited(LogLevel::warn, "malformed|" + host_part(h->peer),  // any reason, per host
                 what + who + ": malformed handshake: " + reason);
  // libraft's client only retries on any failure; report it as the stock transport would.
  fail(h, h->side == Handshake::Side::incoming ? RAFT_MALFORMED : RAFT_NOCONNECTION);
}

void log_mismatch(Handshake* h, const std::string& theirs, const std::string& ours) {
  h->t->log_limited(LogLevel::warn,
                    std::string("mismatch|") +
                        (h->side == Handshake::Side::incoming ? "in|" : "out|") +
                        host_part(h->peer) + "|" + theirs + "|" + ours,
                    "refused raft connection: peer cluster id " + printable(theirs) +
                        ", this member's cluster id " + printable(ours) + " (" + describe(h) +
                        ")");
}

// True if bytes beyond the handshake are already waiting on the socket.
bool surplus_waiting(Handshake* h) {
  uv_os_fd_t fd;
  if (uv_fileno(reinterpret_cast<uv_handle_t*>(h->tcp), &fd) != 0) return false;
  char c;
  ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n > 0;
}

void on_timeout(uv_timer_t* timer) {
  auto* h = static_cast<Handshake*>(timer->data);
  if (h->aborting || h->handed_over) return;
  std::string msg = "raft connection handshake timed out after " +
                    std::to_string(h->t->opts.handshake_timeout_ms) + " ms (" + describe(h) +
                    ", " + std::to_string(h->have) + " handshake bytes received)";
  if (h->side == Handshake::Side::outgoing && !h->connected) {
    h->t->log(LogLevel::debug, "connect " + describe(h) + ": timed out");
  } else {
    h->t->log_limited(LogLevel::warn, "timeout|" + host_part(h->peer), msg);
  }
  fail(h, RAFT_NOCONNECTION);
}

void on_alloc(uv_handle_t* handle, size_t /*suggested*/, uv_buf_t* buf) {
  auto* h = static_cast<Handshake*>(handle->data);
  // Exactly the bytes still expected: nothing after the handshake is ever consumed.
  buf->base = h->in.data() + h->have;
  buf->len = h->need - h->have;
}

// Handing the stream over: it is libraft's from here; our timer still has to close.
uv_stream_t* detach_stream(Handshake* h) {
  h->handed_over = true;
  uv_timer_stop(&h->timer);
  auto* stream = reinterpret_cast<uv_stream_t*>(h->tcp);
  stream->data = nullptr;
  h->tcp = nullptr;
  h->open_handles--;
  if (!h->timer_closing) {
    h->timer_closing = true;
    uv_close(reinterpret_cast<uv_handle_t*>(&h->timer), on_handle_closed);
  }
  return stream;
}

// --- incoming ---

void incoming_hand_over(Handshake* h) {
  Transport* t = h->t;
  std::string address = h->peer_address;
  raft_id id = h->peer_server_id;
  t->log(LogLevel::debug, "accepted raft connection (" + describe(h) + ")");
  uv_stream_t* stream = detach_stream(h);  // h stays alive until its timer has closed
  t->in_callback++;
  t->accept_cb(t->transport, id, address.c_str(), stream);
  t->in_callback--;
  t->maybe_fire_close();
}

void on_answer_written(uv_write_t* w, int status) {
  auto* h = static_cast<Handshake*>(w->data);
  h->writing = false;
  h->written = status == 0;
  if (h->aborting) return;  // closing: the handle close callback finishes
  if (status != 0) {
    h->t->log(LogLevel::debug, "raft connection (" + describe(h) +
                                   "): writing the handshake answer: " + uv_strerror(status));
    fail(h, RAFT_NOCONNECTION);
    return;
  }
  if (h->answer_status != HandshakeStatus::ok) {
    fail(h, RAFT_NOCONNECTION);  // refused: close once the answer is out
    return;
  }
  incoming_hand_over(h);
}

void send_answer(Handshake* h, HandshakeStatus status, const std::string& local) {
  h->answer_status = status;
  h->out = encode_cluster_answer(status, local);
  uv_buf_t buf = uv_buf_init(h->out.data(), static_cast<unsigned>(h->out.size()));
  h->write_req.data = h;
  int rv = uv_write(&h->write_req, reinterpret_cast<uv_stream_t*>(h->tcp), &buf, 1,
                    on_answer_written);
  if (rv != 0) {
    h->t->log(LogLevel::debug,
              "raft connection (" + describe(h) + "): writing the handshake answer: " + uv_strerror(rv));
    fail(h, RAFT_NOCONNECTION);
    return;
  }
  h->writing = true;
}

// The whole hello has been read.
void incoming_complete(Handshake* h) {
  Transport* t = h->t;
  uv_read_stop(reinterpret_cast<uv_stream_t*>(h->tcp));
  h->read_done = true;
  if (surplus_waiting(h)) {
    malformed(h, "bytes after the hello before the answer (server id " +
                     std::to_string(h->peer_server_id) + ")");
    return;
  }
  std::string local = t->cluster_id ? t->cluster_id() : std::string();
  if (local.empty()) {
    t->log_limited(LogLevel::warn, "unknown-local|in|" + host_part(h->peer),
                   "refused raft connection (" + describe(h) + ", peer cluster id " +
                       printable(h->peer_cluster_id) +
                       "): this member's cluster id is not known yet");
    send_answer(h, HandshakeStatus::cluster_id_unknown, local);
    return;
  }
  if (local.size() > kMaxHandshakeClusterIdLen) {
    t->log_limited(LogLevel::error, "long-local",
                   "refused raft connection (" + describe(h) + "): this member's cluster id is "
                   "longer than " + std::to_string(kMaxHandshakeClusterIdLen) + " bytes");
    fail(h, RAFT_NOCONNECTION);
    return;
  }
  if (h->peer_cluster_id != local) {
    log_mismatch(h, h->peer_cluster_id, local);
    send_answer(h, HandshakeStatus::cluster_id_mismatch, local);
    return;
  }
  send_answer(h, HandshakeStatus::ok, local);
}

void on_incoming_read(uv_stream_t* stream, ssize_t nread, const uv_buf_t* /*buf*/) {
  auto* h = static_cast<Handshake*>(stream->data);
  if (h->aborting || h->read_done) return;
  if (nread == 0) return;
  if (nread < 0) {
    if (nread == UV_EOF) {
      malformed(h, h->have == 0 ? std::string("connection closed before any handshake byte")
                                : "truncated: connection closed after " + std::to_string(h->have) +
                                      " of at least " + std::to_string(h->need) + " bytes");
    } else {
      h->t->log_limited(LogLevel::warn, "readerr|" + host_part(h->peer),
                        "closing raft connection from " + h->peer +
                            ": read error during the handshake: " + uv_strerror(static_cast<int>(nread)));
      fail(h, RAFT_NOCONNECTION);
    }
    return;
  }
  std::size_t before = h->have;
  h->have += static_cast<std::size_t>(nread);
  // The magic is checked as soon as its bytes arrive.
  if (before < kMagicLen) {
    std::size_t upto = std::min(h->have, kMagicLen);
    if (std::memcmp(h->in.data() + before, kClusterHandshakeMagic.data() + before, upto - before) != 0) {
      malformed(h, "bad magic (not a Sluice raft hello)");
      return;
    }
  }
  if (h->have < h->need) return;

  if (h->need == kHelloFixed) {
    std::uint32_t id_len = get_u32(h->in.data() + kMagicLen);
    if (id_len > kMaxHandshakeClusterIdLen) {
      malformed(h, "cluster id length " + std::to_string(id_len) + " exceeds " +
                       std::to_string(kMaxHandshakeClusterIdLen));
      return;
    }
    h->need = kHelloFixed + id_len + 8 + 4;
    return;
  }
  std::uint32_t id_len = get_u32(h->in.data() + kMagicLen);
  std::size_t after_id = kHelloFixed + id_len;
  if (h->need == after_id + 12) {
    std::uint64_t server_id = get_u64(h->in.data() + after_id);
    std::uint32_t addr_len = get_u32(h->in.data() + after_id + 8);
    if (server_id == 0) {
      malformed(h, "server id 0");
      return;
    }
    if (addr_len == 0 || addr_len > kMaxHandshakeAddressLen) {
      malformed(h, "address length " + std::to_string(addr_len) + " not in 1.." +
                       std::to_string(kMaxHandshakeAddressLen));
      return;
    }
    h->peer_cluster_id.assign(h->in.data() + kHelloFixed, id_len);
    h->peer_server_id = server_id;
    h->need = after_id + 12 + addr_len;
    return;
  }
  h->peer_address.assign(h->in.data() + after_id + 12, h->need - (after_id + 12));
  if (!is_printable_ascii(h->peer_address)) {
    std::string shown = printable(h->peer_address);
    h->peer_address.clear();
    malformed(h, "address " + shown + " is not printable ASCII");
    return;
  }
  incoming_complete(h);
}

void on_connection(uv_stream_t* listener, int status) {
  auto* t = static_cast<Transport*>(listener->data);
  if (t->closing) return;
  if (status < 0) {
    t->log(LogLevel::warn, std::string("raft listener: ") + uv_strerror(status));
    return;
  }
  auto* h = new (std::nothrow) Handshake();
  auto* tcp = static_cast<uv_tcp_t*>(raft_malloc(sizeof(uv_tcp_t)));
  if (!h || !tcp) {
    delete h;
    raft_free(tcp);
    t->log(LogLevel::warn, "raft listener: out of memory accepting a connection");
    return;
  }
  h->t = t;
  h->side = Handshake::Side::incoming;
  h->tcp = tcp;
  h->need = kHelloFixed;
  uv_tcp_init(t->loop, h->tcp);
  uv_timer_init(t->loop, &h->timer);
  h->tcp->data = h;
  h->timer.data = h;
  h->open_handles = 2;
  h->pos = t->live.insert(t->live.end(), h);
  int rv = uv_accept(listener, reinterpret_cast<uv_stream_t*>(h->tcp));
  if (rv != 0) {
    t->log(LogLevel::warn, std::string("raft listener: accept: ") + uv_strerror(rv));
    fail(h, RAFT_NOCONNECTION);
    return;
  }
  h->peer = peer_name(h->tcp);
  uv_tcp_nodelay(h->tcp, 1);
  uv_timer_start(&h->timer, on_timeout, t->opts.handshake_timeout_ms, 0);
  rv = uv_read_start(reinterpret_cast<uv_stream_t*>(h->tcp), on_alloc, on_incoming_read);
  if (rv != 0) {
    t->log(LogLevel::warn, "raft connection from " + h->peer + ": read: " + uv_strerror(rv));
    fail(h, RAFT_NOCONNECTION);
  }
}

// --- outgoing ---

void outgoing_hand_over(Handshake* h) {
  Transport* t = h->t;
  struct raft_uv_connect* req = h->req;
  raft_uv_connect_cb cb = h->cb;
  t->log(LogLevel::debug, "raft connection established (" + describe(h) + ")");
  uv_stream_t* stream = detach_stream(h);
  t->in_callback++;
  cb(req, stream, 0);
  t->in_callback--;
  t->maybe_fire_close();
}

void outgoing_complete(Handshake* h) {
  Transport* t = h->t;
  uv_read_stop(reinterpret_cast<uv_stream_t*>(h->tcp));
  h->read_done = true;
  if (surplus_waiting(h)) {
    malformed(h, "bytes after the answer");
    return;
  }
  const std::string& ours = h->local_cluster_id;
  switch (h->answer_status) {
    case HandshakeStatus::ok:
      if (h->answer_cluster_id != ours) {  // a peer that says ok to another id: refuse too
        log_mismatch(h, h->answer_cluster_id, ours);
        fail(h, RAFT_NOCONNECTION);
        return;
      }
      if (h->written) outgoing_hand_over(h);  // else on_hello_written hands over
      return;
    case HandshakeStatus::cluster_id_mismatch:
      log_mismatch(h, h->answer_cluster_id, ours);
      fail(h, RAFT_NOCONNECTION);
      return;
    case HandshakeStatus::cluster_id_unknown:
      t->log_limited(LogLevel::warn, "unknown-peer|" + h->target_address,
                     "refused raft connection (" + describe(h) +
                         "): the peer does not know its cluster id yet (this member's cluster id " +
                         printable(ours) + ")");
      fail(h, RAFT_NOCONNECTION);
      return;
  }
}

void on_outgoing_read(uv_stream_t* stream, ssize_t nread, const uv_buf_t* /*buf*/) {
  auto* h = static_cast<Handshake*>(stream->data);
  if (h->aborting || h->read_done) return;
  if (nread == 0) return;
  if (nread < 0) {
    if (nread == UV_EOF) {
      malformed(h, h->have == 0 ? std::string("connection closed before any answer byte")
                                : "truncated answer: connection closed after " +
                                      std::to_string(h->have) + " bytes");
    } else {
      h->t->log(LogLevel::debug, "raft connection (" + describe(h) +
                                     "): read error during the handshake: " +
                                     uv_strerror(static_cast<int>(nread)));
      fail(h, RAFT_NOCONNECTION);
    }
    return;
  }
  std::size_t before = h->have;
  h->have += static_cast<std::size_t>(nread);
  if (before < kMagicLen) {
    std::size_t upto = std::min(h->have, kMagicLen);
    if (std::memcmp(h->in.data() + before, kClusterHandshakeMagic.data() + before, upto - before) != 0) {
      malformed(h, "bad magic in the answer");
      return;
    }
  }
  if (h->have < h->need) return;
  if (h->need == kAnswerFixed) {
    std::uint32_t status = get_u32(h->in.data() + kMagicLen);
    std::uint32_t len = get_u32(h->in.data() + kMagicLen + 4);
    if (status > static_cast<std::uint32_t>(HandshakeStatus::cluster_id_unknown)) {
      malformed(h, "unknown answer status " + std::to_string(status));
      return;
    }
    if (len > kMaxHandshakeClusterIdLen) {
      malformed(h, "answer cluster id length " + std::to_string(len) + " exceeds " +
                       std::to_string(kMaxHandshakeClusterIdLen));
      return;
    }
    h->answer_status = static_cast<HandshakeStatus>(status);
    h->need = kAnswerFixed + len;
    if (len > 0) return;
  }
  h->answer_cluster_id.assign(h->in.data() + kAnswerFixed, h->need - kAnswerFixed);
  outgoing_complete(h);
}

void on_hello_written(uv_write_t* w, int status) {
  auto* h = static_cast<Handshake*>(w->data);
  h->writing = false;
  h->written = status == 0;
  if (h->aborting) return;
  if (status != 0) {
    h->t->log(LogLevel::debug, "raft connection (" + describe(h) + "): writing the hello: " +
                                   uv_strerror(status));
    fail(h, RAFT_NOCONNECTION);
    return;
  }
  if (h->read_done) outgoing_hand_over(h);  // the OK answer arrived before this callback
}

void on_connected(uv_connect_t* creq, int status) {
  auto* h = static_cast<Handshake*>(creq->data);
  if (h->aborting) return;  // cancelled by close (UV_ECANCELED) or already failing
  if (status != 0) {
    h->t->log(LogLevel::debug, "connect " + describe(h) + ": " + uv_strerror(status));
    fail(h, RAFT_NOCONNECTION);
    return;
  }
  h->connected = true;
  h->peer = peer_name(h->tcp);
  uv_tcp_nodelay(h->tcp, 1);
  uv_buf_t buf = uv_buf_init(h->out.data(), static_cast<unsigned>(h->out.size()));
  h->write_req.data = h;
  int rv = uv_write(&h->write_req, reinterpret_cast<uv_stream_t*>(h->tcp), &buf, 1, on_hello_written);
  if (rv != 0) {
    h->t->log(LogLevel::debug, "raft connection (" + describe(h) + "): writing the hello: " + uv_strerror(rv));
    fail(h, RAFT_NOCONNECTION);
    return;
  }
  h->writing = true;
  rv = uv_read_start(reinterpret_cast<uv_stream_t*>(h->tcp), on_alloc, on_outgoing_read);
  if (rv != 0) {
    h->t->log(LogLevel::debug, "raft connection (" + describe(h) + "): read: " + uv_strerror(rv));
    fail(h, RAFT_NOCONNECTION);
  }
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
  h->out = encode_cluster_hello(local, t->id, t->address);
  h->need = kAnswerFixed;
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

std::string encode_cluster_hello(std::string_view cluster_id, std::uint64_t server_id,
                                 std::string_view address) {
  std::string out(kClusterHandshakeMagic);
  put_u32(out, static_cast<std::uint32_t>(cluster_id.size()));
  out.append(cluster_id);
  put_u64(out, server_id);
  put_u32(out, static_cast<std::uint32_t>(address.size()));
  out.append(address);
  return out;
}

std::string encode_cluster_answer(HandshakeStatus status, std::string_view cluster_id) {
  std::string out(kClusterHandshakeMagic);
  put_u32(out, static_cast<std::uint32_t>(status));
  put_u32(out, static_cast<std::uint32_t>(cluster_id.size()));
  out.append(cluster_id);
  return out;
}

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
