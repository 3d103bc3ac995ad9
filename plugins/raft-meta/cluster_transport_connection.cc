// The per-connection state machine of the cluster transport: accepting and connecting,
// writing and reading the handshake (cluster_handshake.h), then handing the stream to
// libraft or closing it. States: cluster_transport_state.h. Contract: cluster_transport.h.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <new>
#include <string>

#include "cluster_auth.h"
#include "cluster_transport_state.h"

namespace sluice::raft_meta::cluster_transport_detail {

namespace {

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

}  // namespace

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
  if (h->hello.server_id() != 0)
    d += ", raft server " + std::to_string(h->hello.server_id()) + " at " +
         printable(h->hello.address());
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
                    ", " + std::to_string(h->side == Handshake::Side::incoming ? h->hello.have()
                                                                        : h->answer.have()) +
                    " handshake bytes received)";
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
  if (h->side == Handshake::Side::incoming && h->awaiting_proof) {
    buf->base = h->proof.next();
    buf->len = h->proof.want();
  } else if (h->side == Handshake::Side::incoming) {
    buf->base = h->hello.next();
    buf->len = h->hello.want();
  } else {
    buf->base = h->answer.next();
    buf->len = h->answer.want();
  }
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
  std::string address = h->hello.address();
  raft_id id = h->hello.server_id();
  t->log(LogLevel::debug, "accepted raft connection (" + describe(h) + ")");
  uv_stream_t* stream = detach_stream(h);  // h stays alive until its timer has closed
  t->in_callback++;
  t->accept_cb(t->transport, id, address.c_str(), stream);
  t->in_callback--;
  t->maybe_fire_close();
}

void on_incoming_read(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf);

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
  if (h->sent_status != HandshakeStatus::ok) {
    fail(h, RAFT_NOCONNECTION);  // refused: close once the answer is out
    return;
  }
  if (h->awaiting_proof) {
    // The connector's proof of the secret comes next; nothing is handed over before it.
    h->read_done = false;
    int rv = uv_read_start(reinterpret_cast<uv_stream_t*>(h->tcp), on_alloc, on_incoming_read);
    if (rv != 0) {
      h->t->log(LogLevel::debug, "raft connection (" + describe(h) + "): read: " + uv_strerror(rv));
      fail(h, RAFT_NOCONNECTION);
    }
    return;
  }
  incoming_hand_over(h);
}

void send_answer(Handshake* h, HandshakeStatus status, const std::string& local) {
  h->sent_status = status;
  if (h->hello.version() == 2) {
    // A hello2 gets an answer2: with the secret and an ok, this member's nonce and proof.
    const std::string& secret = h->t->opts.secret;
    if (status == HandshakeStatus::ok && !secret.empty()) {
      AnswerAuth auth;
      const AuthNonce& nc = h->hello.nonce();
      if (!random_nonce(auth.nonce) ||
          !auth_proof(secret, ProofSide::acceptor,
                      ProofInput{local, h->hello.server_id(), h->hello.address(), h->t->id,
                                 h->t->address, &nc, &auth.nonce},
                      auth.proof)) {
        h->t->log_limited(LogLevel::error, "no-random", "refused raft connection (" + describe(h) +
                                                            "): no randomness or HMAC failed");
        fail(h, RAFT_NOCONNECTION);
        return;
      }
      h->acceptor_nonce = auth.nonce;
      h->awaiting_proof = true;
      h->out = encode_cluster_answer_v2(status, local, &auth);
    } else {
      h->out = encode_cluster_answer_v2(status, local, nullptr);
    }
  } else {
    h->out = encode_cluster_answer(status, local);
  }
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
                     std::to_string(h->hello.server_id()) + ")");
    return;
  }
  std::string local = t->cluster_id ? t->cluster_id() : std::string();
  switch (judge_hello(local, h->hello.cluster_id())) {
    case HelloVerdict::local_unknown:
      t->log_limited(LogLevel::warn, "unknown-local|in|" + host_part(h->peer),
                     "refused raft connection (" + describe(h) + ", peer cluster id " +
                         printable(h->hello.cluster_id()) +
                         "): this member's cluster id is not known yet");
      send_answer(h, HandshakeStatus::cluster_id_unknown, local);
      return;
    case HelloVerdict::local_too_long:
      t->log_limited(LogLevel::error, "long-local",
                     "refused raft connection (" + describe(h) + "): this member's cluster id is "
                     "longer than " + std::to_string(kMaxHandshakeClusterIdLen) + " bytes");
      fail(h, RAFT_NOCONNECTION);
      return;
    case HelloVerdict::mismatch:
      log_mismatch(h, h->hello.cluster_id(), local);
      send_answer(h, HandshakeStatus::cluster_id_mismatch, local);
      return;
    case HelloVerdict::accept:
      if (h->hello.version() == 1 && t->opts.require_auth) {
        t->log_limited(LogLevel::warn, "auth-required|in|" + host_part(h->peer),
                       "refused raft connection (" + describe(h) +
                           "): the peer did not prove the cluster secret (it has no "
                           "raft.cluster_secret_file) and this member sets raft.require_auth");
        send_answer(h, HandshakeStatus::auth_required, local);
        return;
      }
      send_answer(h, HandshakeStatus::ok, local);
      return;
  }
}

// The connector's proof has been read (after an answer2 with auth 1).
void incoming_proof_complete(Handshake* h) {
  Transport* t = h->t;
  uv_read_stop(reinterpret_cast<uv_stream_t*>(h->tcp));
  h->read_done = true;
  const std::string local = t->cluster_id ? t->cluster_id() : std::string();
  const AuthNonce& nc = h->hello.nonce();
  AuthProof expected{};
  const bool computed =
      auth_proof(t->opts.secret, ProofSide::connector,
                 ProofInput{local, h->hello.server_id(), h->hello.address(), t->id, t->address,
                            &nc, &h->acceptor_nonce},
                 expected);
  if (!computed || !proof_equal(expected, h->proof.proof())) {
    t->log_limited(LogLevel::warn, "auth-wrong|in|" + host_part(h->peer),
                   "refused raft connection (" + describe(h) +
                       "): the peer did not prove the cluster secret (its proof is wrong: "
                       "another raft.cluster_secret_file?)");
    fail(h, RAFT_NOCONNECTION);
    return;
  }
  // Bytes after the proof are libraft's: the connector hands over once it is written.
  incoming_hand_over(h);
}

void on_incoming_read(uv_stream_t* stream, ssize_t nread, const uv_buf_t* /*buf*/) {
  auto* h = static_cast<Handshake*>(stream->data);
  if (h->aborting || h->read_done) return;
  if (nread == 0) return;
  if (h->awaiting_proof) {
    if (nread < 0) {
      // A connector that found this member's proof wrong just closes.
      h->t->log_limited(LogLevel::warn, "auth-closed|in|" + host_part(h->peer),
                        "refused raft connection (" + describe(h) +
                            "): the peer closed it instead of proving the cluster secret (" +
                            std::to_string(h->proof.have()) + " of " +
                            std::to_string(kAuthProofLen) +
                            " proof bytes; it holds another raft.cluster_secret_file?)");
      fail(h, RAFT_NOCONNECTION);
      return;
    }
    if (h->proof.received(static_cast<std::size_t>(nread)) == ReadProgress::complete)
      incoming_proof_complete(h);
    return;
  }
  if (nread < 0) {
    if (nread == UV_EOF) {
      malformed(h, h->hello.have() == 0
                       ? std::string("connection closed before any handshake byte")
                       : "truncated: connection closed after " + std::to_string(h->hello.have()) +
                             " of at least " + std::to_string(h->hello.need()) + " bytes");
    } else {
      h->t->log_limited(LogLevel::warn, "readerr|" + host_part(h->peer),
                        "closing raft connection from " + h->peer +
                            ": read error during the handshake: " + uv_strerror(static_cast<int>(nread)));
      fail(h, RAFT_NOCONNECTION);
    }
    return;
  }
  switch (h->hello.received(static_cast<std::size_t>(nread))) {
    case ReadProgress::more:
      return;
    case ReadProgress::malformed:
      malformed(h, h->hello.reason());
      return;
    case ReadProgress::complete:
      incoming_complete(h);
      return;
  }
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

void outgoing_hand_over(Handshake* h);

void on_proof_written(uv_write_t* w, int status) {
  auto* h = static_cast<Handshake*>(w->data);
  h->writing = false;
  if (h->aborting) return;
  if (status != 0) {
    h->t->log(LogLevel::debug, "raft connection (" + describe(h) + "): writing the proof: " +
                                   uv_strerror(status));
    fail(h, RAFT_NOCONNECTION);
    return;
  }
  outgoing_hand_over(h);
}

// The acceptor proved the secret: prove it back, then hand the stream over.
void write_proof(Handshake* h) {
  Transport* t = h->t;
  AuthProof p{};
  if (!auth_proof(t->opts.secret, ProofSide::connector,
                  ProofInput{h->local_cluster_id, t->id, t->address, h->target_id,
                             h->target_address, &h->connector_nonce, &h->answer.auth().nonce},
                  p)) {
    t->log(LogLevel::error, "raft connection (" + describe(h) + "): HMAC failed");
    fail(h, RAFT_NOCONNECTION);
    return;
  }
  h->proof_pending = false;
  h->proof_out.assign(reinterpret_cast<const char*>(p.data()), p.size());
  uv_buf_t buf = uv_buf_init(h->proof_out.data(), static_cast<unsigned>(h->proof_out.size()));
  h->proof_req.data = h;
  int rv = uv_write(&h->proof_req, reinterpret_cast<uv_stream_t*>(h->tcp), &buf, 1,
                    on_proof_written);
  if (rv != 0) {
    t->log(LogLevel::debug, "raft connection (" + describe(h) + "): writing the proof: " +
                                uv_strerror(rv));
    fail(h, RAFT_NOCONNECTION);
    return;
  }
  h->writing = true;
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
  switch (judge_answer(h->answer.status(), h->answer.cluster_id(), ours)) {
    case AnswerVerdict::accept:
      if (h->answer.version() == 2 && h->answer.authenticated()) {
        // The proof must name the server this member dialled: one relayed from another
        // member names that one.
        AuthProof expected{};
        const bool computed = auth_proof(
            t->opts.secret, ProofSide::acceptor,
            ProofInput{ours, t->id, t->address, h->target_id, h->target_address,
                       &h->connector_nonce, &h->answer.auth().nonce},
            expected);
        if (!computed || !proof_equal(expected, h->answer.auth().proof)) {
          t->log_limited(LogLevel::warn, "auth-wrong|out|" + h->target_address,
                         "refused raft connection (" + describe(h) +
                             "): the peer did not prove the cluster secret (its proof is "
                             "wrong: another raft.cluster_secret_file?)");
          fail(h, RAFT_NOCONNECTION);
          return;
        }
        h->proof_pending = true;
        if (h->written) write_proof(h);  // else on_hello_written writes it
        return;
      }
      if (t->opts.require_auth) {
        t->log_limited(LogLevel::warn, "auth-none|out|" + h->target_address,
                       "refused raft connection (" + describe(h) +
                           "): the peer holds no cluster secret and this member sets "
                           "raft.require_auth");
        fail(h, RAFT_NOCONNECTION);
        return;
      }
      if (h->written) outgoing_hand_over(h);  // else on_hello_written hands over
      return;
    case AnswerVerdict::auth_required:
      t->log_limited(LogLevel::warn, "auth-required|out|" + h->target_address,
                     "refused raft connection (" + describe(h) +
                         "): the peer requires the cluster secret and this member has no "
                         "raft.cluster_secret_file");
      fail(h, RAFT_NOCONNECTION);
      return;
    case AnswerVerdict::mismatch:
      log_mismatch(h, h->answer.cluster_id(), ours);
      fail(h, RAFT_NOCONNECTION);
      return;
    case AnswerVerdict::peer_unknown:
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
      malformed(h, h->answer.have() == 0 ? std::string("connection closed before any answer byte")
                                         : "truncated answer: connection closed after " +
                                               std::to_string(h->answer.have()) + " bytes");
    } else {
      h->t->log(LogLevel::debug, "raft connection (" + describe(h) +
                                     "): read error during the handshake: " +
                                     uv_strerror(static_cast<int>(nread)));
      fail(h, RAFT_NOCONNECTION);
    }
    return;
  }
  switch (h->answer.received(static_cast<std::size_t>(nread))) {
    case ReadProgress::more:
      return;
    case ReadProgress::malformed:
      malformed(h, h->answer.reason());
      return;
    case ReadProgress::complete:
      outgoing_complete(h);
      return;
  }
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
  if (!h->read_done) return;
  // The OK answer arrived before this callback.
  if (h->proof_pending)
    write_proof(h);
  else
    outgoing_hand_over(h);
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

}  // namespace sluice::raft_meta::cluster_transport_detail
