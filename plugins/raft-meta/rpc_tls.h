// TLS with mutual authentication for the controller RPC (rpc.h; docs/security.md
// "Controller RPC"): `metadata.rpc_tls.cert_file`, `.key_file` and `.ca_file`, all three or
// none. With them, the RPC server (controllers) and every RPC client (brokers, members
// forwarding to the leader, joining members) speak TLS 1.2+ only, present their certificate,
// and refuse a peer whose certificate does not chain to `ca_file`. The CA is the cluster's
// own: any certificate it signed is a node of this cluster (names and addresses are not
// checked, since nodes are addressed by IP and move).
//
// The server sends no session tickets, so nothing ever arrives unasked on an idle client
// connection (the client's stale-connection check relies on it, rpc_client.cc).
//
// reload() re-reads the three files for new connections; on any error it keeps the
// contexts in use and says why. Threading: every method may be called from any thread.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "rpc_codec.h"
#include "sluice/error.h"
#include "sluice/host.h"

struct ssl_ctx_st;

namespace sluice::raft_meta {

struct RpcTlsFiles {
  std::string cert_file, key_file, ca_file;
};

class RpcTls {
 public:
  // nullptr when none of the keys is set; throws std::invalid_argument when only some are,
  // or when the files do not load (a configuration boundary).
  static std::shared_ptr<RpcTls> from_host(const PluginHost& host);
  static Result<std::shared_ptr<RpcTls>> load(const RpcTlsFiles& files);
  ~RpcTls();

  Result<void> reload();
  // The TLS handshake on a connected blocking socket, `timeout` for the whole of it. The
  // stream does not own `fd`.
  Result<std::unique_ptr<rpc::ByteStream>> accept(int fd, std::chrono::milliseconds timeout);
  Result<std::unique_ptr<rpc::ByteStream>> connect(int fd, std::chrono::milliseconds timeout);

 private:
  struct Contexts;
  explicit RpcTls(RpcTlsFiles files) : files_(std::move(files)) {}
  std::shared_ptr<Contexts> current();

  RpcTlsFiles files_;
  std::mutex mu_;
  std::shared_ptr<Contexts> ctx_;  // guarded by mu_
};

}  // namespace sluice::raft_meta
