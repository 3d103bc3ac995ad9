#include "rpc_tls.h"

#include <fcntl.h>
#include <poll.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

namespace sluice::raft_meta {

namespace {

// The queued OpenSSL errors, oldest first, and clears the queue.
std::string ssl_errors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "no detail" : out;
}

struct CtxDeleter {
  void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
};
using CtxPtr = std::unique_ptr<SSL_CTX, CtxDeleter>;

Result<CtxPtr> make_ctx(const RpcTlsFiles& f, bool server) {
  ERR_clear_error();
  CtxPtr ctx(SSL_CTX_new(server ? TLS_server_method() : TLS_client_method()));
  if (!ctx) return Error(Errc::internal, "SSL_CTX_new: " + ssl_errors());
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  // A peer that closes without close_notify (a process killed) reads as closed, as on a
  // plain socket.
  SSL_CTX_set_options(ctx.get(), SSL_OP_IGNORE_UNEXPECTED_EOF);
  if (SSL_CTX_use_certificate_chain_file(ctx.get(), f.cert_file.c_str()) != 1)
    return Error(Errc::invalid_argument,
                 "metadata.rpc_tls.cert_file " + f.cert_file + ": " + ssl_errors());
  if (SSL_CTX_use_PrivateKey_file(ctx.get(), f.key_file.c_str(), SSL_FILETYPE_PEM) != 1)
    return Error(Errc::invalid_argument,
                 "metadata.rpc_tls.key_file " + f.key_file + ": " + ssl_errors());
  if (SSL_CTX_check_private_key(ctx.get()) != 1)
    return Error(Errc::invalid_argument, "metadata.rpc_tls.key_file " + f.key_file +
                                             " does not match cert_file " + f.cert_file);
  if (SSL_CTX_load_verify_locations(ctx.get(), f.ca_file.c_str(), nullptr) != 1)
    return Error(Errc::invalid_argument,
                 "metadata.rpc_tls.ca_file " + f.ca_file + ": " + ssl_errors());
  // Both ways: a peer must present a certificate of the cluster's CA.
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  if (server) {
    if (STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(f.ca_file.c_str()))
      SSL_CTX_set_client_CA_list(ctx.get(), names);
    // Nothing is sent unasked after the handshake (rpc_tls.h).
    SSL_CTX_set_num_tickets(ctx.get(), 0);
    SSL_CTX_set_options(ctx.get(), SSL_OP_NO_TICKET);
    SSL_CTX_set_session_cache_mode(ctx.get(), SSL_SESS_CACHE_OFF);
  }
  return ctx;
}

class TlsStream final : public rpc::ByteStream {
 public:
  explicit TlsStream(SSL* ssl) : ssl_(ssl) {}
  ~TlsStream() override {
    // close_notify only on a connection that never failed (OpenSSL: no SSL_shutdown after
    // SSL_ERROR_SYSCALL or SSL_ERROR_SSL). The fd is the owner's.
    if (!broken_) {
      ERR_clear_error();
      SSL_shutdown(ssl_);
    }
    SSL_free(ssl_);
  }
  long write_some(const char* p, std::size_t n, std::string* why) override {
    std::size_t done = 0;
    ERR_clear_error();
    errno = 0;
    int rc = SSL_write_ex(ssl_, p, n, &done);
    if (rc == 1) return static_cast<long>(done);
    return fail(rc, "write", why);
  }
  long read_some(char* p, std::size_t n, std::string* why) override {
    std::size_t done = 0;
    ERR_clear_error();
    errno = 0;
    int rc = SSL_read_ex(ssl_, p, n, &done);
    if (rc == 1) return static_cast<long>(done);
    return fail(rc, "read", why);
  }

 private:
  long fail(int rc, const char* what, std::string* why) {
    const int e = SSL_get_error(ssl_, rc);
    if (e == SSL_ERROR_ZERO_RETURN) return 0;  // close_notify: closed
    broken_ = true;
    if (why) {
      if (e == SSL_ERROR_SYSCALL)
        *why = std::string(what) + ": " + (errno ? std::strerror(errno) : "closed");
      else if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
        *why = std::string(what) + ": timed out";
      else
        *why = std::string(what) + ": TLS: " + ssl_errors();
    }
    // A peer that vanished without close_notify reads as closed, like a plain socket.
    if (e == SSL_ERROR_SYSCALL && errno == 0) return 0;
    return -1;
  }
  SSL* ssl_;
  bool broken_ = false;
};

}  // namespace

struct RpcTls::Contexts {
  CtxPtr server, client;
};

RpcTls::~RpcTls() = default;

Result<std::shared_ptr<RpcTls>> RpcTls::load(const RpcTlsFiles& files) {
  std::shared_ptr<RpcTls> t(new RpcTls(files));
  if (auto r = t->reload(); !r) return r.error();
  return t;
}

std::shared_ptr<RpcTls> RpcTls::from_host(const PluginHost& host) {
  RpcTlsFiles f{host.config_string("metadata.rpc_tls.cert_file", ""),
                host.config_string("metadata.rpc_tls.key_file", ""),
                host.config_string("metadata.rpc_tls.ca_file", "")};
  const int set = !f.cert_file.empty() + !f.key_file.empty() + !f.ca_file.empty();
  if (set == 0) return nullptr;
  if (set != 3)
    throw std::invalid_argument(
        "metadata.rpc_tls.cert_file, key_file and ca_file go together: set all three or none");
  auto t = load(f);
  if (!t) throw std::invalid_argument(t.error().message);
  return *t;
}

Result<void> RpcTls::reload() {
  auto server = make_ctx(files_, true);
  if (!server) return server.error();
  auto client = make_ctx(files_, false);
  if (!client) return client.error();
  auto c = std::make_shared<Contexts>();
  c->server = std::move(*server);
  c->client = std::move(*client);
  std::lock_guard lk(mu_);
  ctx_ = std::move(c);
  return {};
}

std::shared_ptr<RpcTls::Contexts> RpcTls::current() {
  std::lock_guard lk(mu_);
  return ctx_;
}

namespace {
// The handshake on a non-blocking socket, bounded as a whole by `deadline` (a peer trickling
// one byte at a time cannot stretch it); the socket is blocking again afterwards.
Result<std::unique_ptr<rpc::ByteStream>> handshake(SSL_CTX* ctx, int fd, bool server,
                                                   std::chrono::milliseconds timeout) {
  ERR_clear_error();
  SSL* ssl = SSL_new(ctx);
  if (!ssl) return Error(Errc::internal, "SSL_new: " + ssl_errors());
  SSL_set_fd(ssl, fd);
  const int flags = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string why;
  for (;;) {
    ERR_clear_error();
    errno = 0;
    const int rc = server ? SSL_accept(ssl) : SSL_connect(ssl);
    if (rc == 1) break;
    const int e = SSL_get_error(ssl, rc);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      pollfd p{fd, static_cast<short>(e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT), 0};
      if (left.count() > 0 && ::poll(&p, 1, static_cast<int>(left.count())) > 0) continue;
      if (left.count() > 0 && errno == EINTR) continue;
      why = "timed out after " + std::to_string(timeout.count()) + " ms";
    } else if (e == SSL_ERROR_SYSCALL) {
      why = errno ? std::strerror(errno) : "the peer closed the connection";
    } else {
      why = ssl_errors();
    }
    const long verify = SSL_get_verify_result(ssl);
    if (verify != X509_V_OK)
      why += std::string(" (peer certificate: ") + X509_verify_cert_error_string(verify) + ")";
    SSL_free(ssl);
    ::fcntl(fd, F_SETFL, flags);
    return Error(Errc::unavailable, "TLS handshake failed: " + why);
  }
  ::fcntl(fd, F_SETFL, flags);
  return std::unique_ptr<rpc::ByteStream>(new TlsStream(ssl));
}
}  // namespace

Result<std::unique_ptr<rpc::ByteStream>> RpcTls::accept(int fd, std::chrono::milliseconds timeout) {
  auto c = current();
  return handshake(c->server.get(), fd, true, timeout);
}

Result<std::unique_ptr<rpc::ByteStream>> RpcTls::connect(int fd, std::chrono::milliseconds timeout) {
  auto c = current();
  return handshake(c->client.get(), fd, false, timeout);
}

}  // namespace sluice::raft_meta
