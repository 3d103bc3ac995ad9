// TLS for the HTTP listener (docs/security.md "TLS"): the server's OpenSSL context, built
// from tls.cert_file, tls.key_file and tls.client_ca_file. Asio's ssl headers stay in
// tls.cc, session.cc and ws_session.cc; everyone else sees only this forward declaration.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "sluice/error.h"

namespace boost::asio::ssl {
class context;
}

namespace sluice::http_api {

struct TlsFiles {
  std::string cert_file;       // PEM certificate chain, leaf first
  std::string key_file;        // PEM private key of the leaf
  std::string client_ca_file;  // PEM CA bundle; set: every client must present a certificate it signed
  bool enabled() const { return !cert_file.empty(); }
};

// Builds a TLS 1.2+ server context from the files. Errors name the file and OpenSSL's reason.
Result<std::shared_ptr<boost::asio::ssl::context>> make_server_context(const TlsFiles& files);

// The context new connections use. A connection keeps the context it started with (a
// shared_ptr), so a reload affects only connections accepted after it.
// Thread-safety: all methods may be called from any thread.
class TlsContextHolder {
 public:
  explicit TlsContextHolder(TlsFiles files) : files_(std::move(files)) {}

  // Re-reads the files and swaps the context in. On any error the previous context stays
  // (and keeps serving) and the error is returned. The first call loads the initial one.
  Result<void> reload_certificates();

  // Null until a load succeeded.
  std::shared_ptr<boost::asio::ssl::context> current() const;

  const TlsFiles& files() const { return files_; }

 private:
  const TlsFiles files_;
  mutable std::mutex mu_;
  std::shared_ptr<boost::asio::ssl::context> ctx_;
};

}  // namespace sluice::http_api
