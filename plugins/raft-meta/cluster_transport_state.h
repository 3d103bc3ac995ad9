// Internal to the cluster transport (cluster_transport.h): the state of one transport and of
// each connection it is setting up, shared by the vtable (cluster_transport.cc) and the
// per-connection state machine (cluster_transport_connection.cc). Not an interface: nothing
// outside those two files includes it. The frames and the cluster-id rules are pure, in
// cluster_handshake.h.
//
// A Handshake, either side (every arrow may also go to "aborting" on an error, a malformed
// frame, the timeout or transport->close; handles then close and `finish` reports):
//
//   incoming:  accepted --read hello--> judged --write answer--> ok: handed over to libraft
//                                                              \-> refused: closed
//              (hello2, this member holds the secret: after the answer, --read proof-->
//               right: handed over; wrong: closed)
//   outgoing:  connecting --connected--> hello written + answer read --> ok: handed over
//                                                                    \-> refused: closed
//              (answer2 with auth: its proof checked, then --write proof--> handed over)
//   aborting --all handles closed--> finish: connect callback (outgoing, unless handed over
//                                     or failed synchronously), delete, maybe close_cb
//
// Threading: the loop's thread only, like everything in the transport.
#pragma once

#include <uv.h>

#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <string>

#include "cluster_handshake.h"
#include "cluster_transport.h"

extern "C" {
#include <raft.h>
}

namespace sluice::raft_meta::cluster_transport_detail {

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

  std::string peer;  // "ip:port" of the other end, for log lines

  // incoming: the hello being read, and the status answered
  HelloReader hello;
  HandshakeStatus sent_status = HandshakeStatus::ok;
  bool awaiting_proof = false;  // answered a hello2 with auth 1: the connector's proof next
  AuthNonce acceptor_nonce{};
  ProofReader proof;

  // outgoing
  struct raft_uv_connect* req = nullptr;
  raft_uv_connect_cb cb = nullptr;
  bool report = true;  // false when connect() failed synchronously (no callback owed)
  raft_id target_id = 0;
  std::string target_address;
  std::string local_cluster_id;  // what we sent
  AnswerReader answer;
  AuthNonce connector_nonce{};  // sent in a hello2
  bool proof_pending = false;   // the answer2 was checked: our proof goes out after the hello
  uv_write_t proof_req{};
  std::string proof_out;
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
  void log_limited(LogLevel level, const std::string& key, const std::string& msg);

  void maybe_fire_close() {
    if (!closing || close_fired || in_callback > 0 || listener_open || !live.empty()) return;
    close_fired = true;
    raft_uv_transport_close_cb cb = close_cb;
    if (cb) cb(transport);  // may release this object: nothing after this
  }
};

// The connection state machine (cluster_transport_connection.cc).
void on_connection(uv_stream_t* listener, int status);  // the listener's callback
void on_connected(uv_connect_t* creq, int status);       // an outgoing TCP connect completed
void on_timeout(uv_timer_t* timer);                      // a handshake's deadline
// Starts closing the handshake's handles (idempotent); `finish` runs when they are closed.
void close_handles(Handshake* h);
// Fails the handshake: closes its handles; the connect callback (outgoing) runs once they
// are closed. Idempotent.
void fail(Handshake* h, int status);

}  // namespace sluice::raft_meta::cluster_transport_detail
