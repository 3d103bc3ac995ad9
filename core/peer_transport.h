// The core's PeerTransport (sluice/transport.h; docs/replication.md "Peer transport").
//
// One Boost.Asio I/O thread runs every socket, timer, handler and callback; there is no
// thread per connection. Requests go out on one pooled connection per peer (multiplexed by
// request id); connections from peers are accepted on `transport.address`.
//
// Wire format (all integers little-endian), one frame:
//
//   offset size  field
//   0      1     magic 0xC5
//   1      1     high nibble: frame format version (1); low nibble: flags
//                  0x1 response (else a request), 0x2 error (only with response)
//   2      2     type (PeerMessageType; 0x0000 is the hello)
//   4      8     request id (0 in a hello)
//   12     4     payload length (header + payload <= kMaxPeerFrameBytes)
//   16     ...   payload
//
// Hello payload: "SLUICEPT", u16 version (1), u32 node id, u16 length + cluster id,
// u16 length + directory.id. Each side sends its hello first and checks the other's.
//
// With transport.tls.* (docs/security.md "TLS") every connection is TLS 1.2+ with mutual
// authentication: each side presents its certificate and verifies the other's against the
// CA before the hello, which then travels (like every frame) inside TLS. A plain peer, or
// one whose certificate another CA signed, fails the handshake and is closed.
// Error payload: u16 Errc, u8 Outcome, then the message (the rest of the payload).
//
// Thread-safety: every public method may be called from any thread.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "peer_directory.h"
#include "peer_wire.h"
#include "sluice/host.h"
#include "sluice/transport.h"

typedef struct x509_st X509;  // OpenSSL's, without its headers here

namespace sluice::core {

// The core's own message types (kPeerCoreTypesFirst..Last).
inline constexpr PeerMessageType kPeerPing = 0x0001;  // answered "pong" by the core

// The frame codec (peerwire::) is in peer_wire.h.

struct PeerTransportOptions {
  NodeId self;
  std::string cluster_id;
  std::string directory_id;
  std::string listen_address;  // host:port; port 0 = ephemeral; empty = do not listen
  // True: until handlers_registered(), a request of a type without a handler is answered
  // unavailable (transient: "starting"), not not_supported (definite). sluiced listens
  // before the broker registers its handlers, and a peer must retry, not give up.
  bool handlers_registered_later = false;
  // Test-only (transport.failpoint_file): "drop N" / "delay N MS" lines, re-read when its
  // mtime changes, checked on each frame sent.
  std::string failpoint_file;
  std::function<void(LogLevel, const std::string&)> log;  // default: log_line "transport"
  // Connecting and the hello exchange must finish within this, or the connection closes.
  std::chrono::milliseconds setup_timeout{10000};
  // transport.tls.*: all three set, or none (plain TCP). PEM files: this node's certificate
  // chain and key, and the CA (bundle) every peer's certificate must chain to.
  std::string tls_cert_file, tls_key_file, tls_ca_file;
  // transport.tls.require_node_id: a peer's certificate must name the node id its hello
  // claims (a URI subjectAltName `sluice:node:<id>`). Without it, a certificate that names
  // nodes is still held to them; one that names none may claim any id.
  bool tls_require_node_id = false;
};

// The node ids a certificate names: its URI subjectAltNames `sluice:node:<id>`
// (docs/security.md "A node's id in its certificate"). invalid_argument for such a name
// whose id is not a number from 1 to 2^32-1.
Result<std::vector<std::uint32_t>> certificate_node_ids(X509* cert);

class AsioPeerTransport final : public PeerTransport {
 public:
  // Binds (if listen_address is set) and starts the I/O thread. unavailable naming the
  // address if it cannot bind.
  static Result<std::unique_ptr<AsioPeerTransport>> start(PeerTransportOptions opts,
                                                          std::shared_ptr<PeerDirectory> directory);
  ~AsioPeerTransport() override;

  NodeId self() const override;
  Result<void> handle(PeerMessageType type, PeerHandler handler) override;
  void unhandle(PeerMessageType type) override;
  void request(NodeId peer, PeerMessageType type, std::string payload,
               std::chrono::milliseconds timeout, PeerCallback cb) override;

  // transport.tls.*: re-reads the files for connections made or accepted from now on (open
  // ones keep theirs). On failure the previous certificate stays and the error is returned.
  // invalid_argument when TLS is off. The hook a SIGHUP handler calls.
  Result<void> reload_certificates();

  // Every handler this node will have is registered: from now on a type without one is
  // not_supported (PeerTransportOptions::handlers_registered_later).
  void handlers_registered();

  // The hello the peer sent on the last outgoing connection to `peer` that got one.
  std::optional<peerwire::Hello> last_hello(NodeId peer) const;
  // The bound port (0 if not listening).
  std::uint16_t port() const;
  // Connections accepted so far (tests check the pooling with it).
  std::uint64_t accepted_connections() const;
  // Closes the listener and every connection; pending requests fail unavailable. Later
  // requests fail unavailable (still never inline). Idempotent; the destructor calls it.
  // Not from a handler or callback (it waits for the I/O thread).
  void stop();

  struct Impl;

 private:
  explicit AsioPeerTransport(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

// sluiced probe-peer: connects to `address`, exchanges hellos, sends a ping. The peer's
// identity from its hello, or the error (cluster_id_mismatch naming both ids, unavailable,
// timeout, or the ping's error).
struct ProbeResult {
  PeerIdentity peer;
  std::string cluster_id;
};
Result<ProbeResult> probe_peer(const std::string& address, const peerwire::Hello& self,
                               std::chrono::milliseconds timeout);

}  // namespace sluice::core
