// The peer transport: request/response messaging between the brokers of one cluster
// (docs/replication.md "Peer transport"). The core implements it; a storage plugin gets it
// through PluginHost::peer_transport() and uses it for replication.
//
// Guarantees:
//   * Every connection starts with a hello naming the cluster id, the sender's node id and
//     its directory.id. A peer of another cluster is refused both ways (cluster_id_mismatch,
//     both ids in the error and in the log); nothing else is exchanged on that connection.
//   * Requests travel in binary length-prefixed frames of at most kMaxPeerFrameBytes.
//     A malformed, truncated or oversized frame closes that one connection with a logged
//     reason; the node serves on. A request of a type nobody handles is answered
//     not_supported.
//   * A request's callback runs exactly once: with the handler's answer (a payload or its
//     Error, code and message as the handler gave them), or with timeout (the handler may
//     have acted) or unavailable (the peer is unknown or unreachable, or the connection was
//     lost: Outcome::uncertain if the request had been sent).
//
// Message types are owned by ranges: the core's (forwarded client calls) and the storage
// plugin's (replication). A plugin registers handlers only in its own range.
//
// Thread-safety: every method may be called from any thread. Handlers and callbacks run
// on the transport's I/O threads and must not block; a handler may keep its responder and
// answer later from any thread (a long-poll fetch).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "sluice/error.h"
#include "sluice/types.h"

namespace sluice {

using PeerMessageType = std::uint16_t;
inline constexpr PeerMessageType kPeerCoreTypesFirst = 0x0001;
inline constexpr PeerMessageType kPeerCoreTypesLast = 0x00ff;
inline constexpr PeerMessageType kPeerStorageTypesFirst = 0x0100;
inline constexpr PeerMessageType kPeerStorageTypesLast = 0x01ff;
// A frame (header and payload) larger than this closes the connection.
inline constexpr std::size_t kMaxPeerFrameBytes = 64u << 20;

// Who sent a request, as its hello said (the cluster id was checked before any request).
struct PeerIdentity {
  NodeId node;
  std::string directory_id;
};

// Answers one request. Call exactly once, from any thread; later calls are ignored. A
// responder dropped without a call answers `unavailable`, outcome `uncertain` (it may have
// acted before it was dropped).
class PeerResponder {
 public:
  using Fn = std::function<void(Result<std::string>)>;
  PeerResponder() = default;
  explicit PeerResponder(Fn fn) : fn_(std::move(fn)) {}
  PeerResponder(PeerResponder&& o) noexcept : fn_(std::move(o.fn_)) { o.fn_ = nullptr; }
  // The request this responder held is answered (unavailable) before it takes another's.
  PeerResponder& operator=(PeerResponder&& o) noexcept {
    if (this != &o) {
      drop();
      fn_ = std::move(o.fn_);
      o.fn_ = nullptr;
    }
    return *this;
  }
  PeerResponder(const PeerResponder&) = delete;
  PeerResponder& operator=(const PeerResponder&) = delete;
  ~PeerResponder() { drop(); }
  void operator()(Result<std::string> answer) {
    if (!fn_) return;
    auto fn = std::move(fn_);
    fn_ = nullptr;
    fn(std::move(answer));
  }

 private:
  // Dropped unanswered: the handler may have acted before it dropped it (threw, say), so
  // the caller learns that it may have (uncertain), never that nothing happened.
  void drop() {
    if (fn_)
      (*this)(Error(Errc::unavailable, "the handler dropped the request without answering; it may have acted",
                    Outcome::uncertain));
  }
  Fn fn_;
};

using PeerHandler =
    std::function<void(const PeerIdentity& from, std::string payload, PeerResponder respond)>;
using PeerCallback = std::function<void(Result<std::string> answer)>;

class PeerTransport {
 public:
  virtual ~PeerTransport() = default;

  virtual NodeId self() const = 0;

  // Handles every request of `type`. conflict if the type already has a handler.
  virtual Result<void> handle(PeerMessageType type, PeerHandler handler) = 0;
  // Removes the handler. Once this returns, no call of it runs or will run (a running one
  // is waited for, so do not call it from inside that handler).
  virtual void unhandle(PeerMessageType type) = 0;

  // Sends one request to broker `peer` (resolved through the catalog's peer addresses) on
  // a pooled connection. `cb` runs exactly once, never inline.
  virtual void request(NodeId peer, PeerMessageType type, std::string payload,
                       std::chrono::milliseconds timeout, PeerCallback cb) = 0;
};

}  // namespace sluice
