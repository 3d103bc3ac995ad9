// HttpServer: the sluice::ApiServer of the http-api plugin.
//
// Thread model:
//   * `http.threads` threads, each running an io_context of its own. The acceptor hands
//     each new connection to the next one, round robin, and it stays there: all its I/O,
//     its timers and the router's handle() run on that thread (through the connection's
//     strand). A thread never wakes another to run a connection's next step, which a
//     shared io_context did on every event (docs/architecture.md "HTTP io threads").
//   * A small thread pool (`http.admin_threads`) runs catalog calls, which may block.
//   * Node callbacks (publish completion, notify_when_beyond) run on core/storage threads
//     and only post back to the connection strand through the Exchange.
//   * A shared "gate" (mutex + open flag) guards every cross-thread post: stop() closes it
//     before it destroys the io_context, so a late Node callback never touches a dead
//     io_context or pool. (It cannot make a callback safe after the plugin library is
//     unloaded; see README.md "Known limits".)
//
// Lifetime: start() once; stop() is idempotent and is also called by the destructor.
#pragma once

#include <memory>

#include "config.h"
#include "sluice/host.h"
#include "sluice/node.h"

namespace sluice::http_api {

class HttpServer final : public ApiServer {
 public:
  HttpServer(HttpConfig cfg, PluginHost* host);  // host may be null (logs go to stderr)
  ~HttpServer() override;
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  Result<void> start(Node& node) override;
  std::uint16_t port() const override;
  void stop() override;
  // sluiced calls it on SIGHUP: re-reads auth.tokens_file (docs/security.md) and, with TLS,
  // the certificates (reload_certificates()). Each part that fails keeps what it had; the
  // error names every failure.
  Result<void> reload() override;

  // tls.cert_file set: re-reads tls.cert_file, tls.key_file and tls.client_ca_file for the
  // connections accepted from now on. On failure the previous certificate keeps serving and
  // the error is returned (and logged). The hook a SIGHUP handler calls.
  Result<void> reload_certificates();

  struct Impl;  // server_impl.h (public so that session.cc's connection classes can name it)

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::http_api
