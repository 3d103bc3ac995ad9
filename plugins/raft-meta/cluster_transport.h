// A libraft `raft_uv_transport` (libraft 0.15, plain TCP over libuv) on which every
// connection between members presents the cluster id before anything else. A member of
// another cluster, or a member that does not know its cluster id yet, never gets a stream
// to or from this one: both sides log the refusal at WARN naming both ids.
//
// It replaces raft_uv_tcp_init / raft_uv_tcp_close one for one:
//
//   raft_uv_tcp_init(&transport, &loop)   ->  cluster_transport_init(&transport, &loop, id, log)
//   raft_uv_tcp_close(&transport)         ->  cluster_transport_close(&transport)
//
// with the same semantics: `init` fills in the vtable (keeping `transport->data`, which
// raft_uv_init owns), `transport->close` (called by the uv io when raft closes) stops the
// listener, aborts every handshake in flight (pending connect callbacks get RAFT_CANCELED)
// and calls its callback only once every uv handle of the transport is closed;
// cluster_transport_close only releases memory, after that callback (or when the
// transport never listened nor connected).
//
// Addresses are IPv4 "a.b.c.d:port" (no port: 8080, like the stock transport); the listener
// binds the address given to raft_init.
//
// The connecting side writes a hello (cluster id, its raft server id and address) once
// connected, and nothing else until it has read the answer; the accepting side reads exactly
// the hello (malformed, truncated or oversized -> WARN naming the reason and the peer,
// connection closed), compares cluster ids and writes an answer (a status and its own
// cluster id). The frames, their limits and the cluster-id rules are in cluster_handshake.h.
//
// status 0 = ok, 1 = cluster id mismatch, 2 = the accepting member does not know its cluster
// id yet. Only on 0 does either side hand the stream to libraft: the acceptor calls
// accept_cb(transport, server id, address, stream) once the answer is written, the connector
// calls connect_cb(req, stream, 0) once it has read an OK answer whose id equals its own.
// Otherwise both sides close; a mismatch is logged on both sides at WARN as
// "refused raft connection: peer cluster id <theirs>, this member's cluster id <ours> (...)".
// Each side reads the handshake with buffers sized to exactly the bytes still expected and
// stops reading when it is complete, so nothing that follows is consumed; bytes already
// waiting beyond the handshake at that point are a protocol violation (neither side sends
// anything more before the other has what it needs) and close the connection as malformed.
// A handshake (TCP connect included) that does not complete within
// `handshake_timeout_ms` (default 5 s) is closed.
//
// The local cluster id is read through `cluster_id()` each time a connection is made or an
// incoming hello has been read, so it may be learned after the transport is created. While
// it is empty every connection is refused both ways: `connect` fails at once
// (RAFT_NOCONNECTION; libraft retries later) and incoming hellos are answered with status 2.
//
// Threading: everything -- the vtable functions, `cluster_id()`, `log()`, the accept and
// connect callbacks -- runs on the thread running `loop`. Nothing is thread-safe.
//
// With a cluster secret (docs/security.md "Raft members"), the connector says hello version
// 2 with a nonce; an acceptor with the secret answers with its own nonce and a proof, checks
// the connector's proof, and only then hands the stream over. A wrong proof either way is
// refused at WARN ("... did not prove the cluster secret"). With `require_auth`, a peer
// without the secret is refused both ways (status 3 to a version-1 hello).
//
// Logging: refusals and malformed handshakes are WARN; plain TCP failures (peer down) are
// DEBUG, as libraft retries every second (so does a refused peer: one refusal a second per
// peer). A WARN repeated within `log_repeat_interval_ms` for the same peer host and kind
// (refusals: and the same pair of ids; malformed handshakes: any reason) is counted instead
// of logged, and the next one logged says how many were suppressed.
#pragma once

#include <uv.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "cluster_handshake.h"
#include "sluice/host.h"

extern "C" {
#include <raft/uv.h>
}

namespace sluice::raft_meta {

inline constexpr unsigned kDefaultHandshakeTimeoutMs = 5000;

struct ClusterTransportOptions {
  unsigned handshake_timeout_ms = kDefaultHandshakeTimeoutMs;
  unsigned log_repeat_interval_ms = 10000;  // 0: log every refusal
  // raft.cluster_secret_file's secret (cluster_auth.h); empty: this member holds none, says
  // hello version 1, and answers a hello2 with auth 0.
  std::string secret;
  // raft.require_auth: refuse every connection, either way, that did not prove the secret.
  // Needs a secret.
  bool require_auth = false;
};

// Fills in `t` (keeping t->data) for use with raft_uv_init. 0 or RAFT_NOMEM.
int cluster_transport_init(struct raft_uv_transport* t, uv_loop_t* loop,
                           std::function<std::string()> cluster_id,
                           std::function<void(LogLevel, const std::string&)> log,
                           ClusterTransportOptions options = {});

// Releases what cluster_transport_init allocated. Call it after the transport's close
// callback has fired (from inside that callback is fine) or if it never listened nor
// connected, and never from inside an accept or connect callback. Called with uv handles
// still open, it logs an error and leaks the state rather than freeing memory libuv uses.
void cluster_transport_close(struct raft_uv_transport* t);

// The port the listener is bound to (useful with port 0), or 0 when not listening.
std::uint16_t cluster_transport_listen_port(const struct raft_uv_transport* t);

}  // namespace sluice::raft_meta
