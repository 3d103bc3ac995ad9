#include "tls.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <boost/asio/ssl/context.hpp>

namespace sluice::http_api {

namespace ssl = boost::asio::ssl;

namespace {

// Asio takes OpenSSL's error off its queue into the error_code: a private key that does not
// match the certificate already loaded.
bool key_mismatch(const boost::system::error_code& ec) {
  if (!ec || ec.category() != boost::asio::error::get_ssl_category()) return false;
  const auto e = static_cast<unsigned long>(ec.value());
  return ERR_GET_LIB(e) == ERR_LIB_X509 && ERR_GET_REASON(e) == X509_R_KEY_VALUES_MISMATCH;
}

// OpenSSL's reason for the last failure (its error queue), or Asio's message.
std::string reason(const boost::system::error_code& ec) {
  std::string r = ec.message();
  if (unsigned long e = ERR_peek_last_error(); e != 0) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    r = buf;
  }
  ERR_clear_error();
  return r;
}

Error file_error(const char* key, const std::string& path, const std::string& why) {
  return Error(Errc::invalid_argument, std::string(key) + " '" + path + "': " + why);
}

}  // namespace

Result<std::shared_ptr<ssl::context>> make_server_context(const TlsFiles& f) {
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_server);
  boost::system::error_code ec;
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                       ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 | ssl::context::single_dh_use,
                   ec);
  if (ec) return Error(Errc::internal, "TLS: cannot set context options: " + reason(ec));
  ctx->use_certificate_chain_file(f.cert_file, ec);
  if (ec) return file_error("tls.cert_file", f.cert_file, reason(ec));
  ctx->use_private_key_file(f.key_file, ssl::context::pem, ec);
  if (ec && key_mismatch(ec))
    return file_error("tls.key_file", f.key_file, "does not match the certificate in tls.cert_file (" + reason(ec) + ")");
  if (ec) return file_error("tls.key_file", f.key_file, reason(ec));
  if (SSL_CTX_check_private_key(ctx->native_handle()) != 1)
    return file_error("tls.key_file", f.key_file,
                      "does not match the certificate in tls.cert_file (" + reason({}) + ")");
  if (!f.client_ca_file.empty()) {
    ctx->load_verify_file(f.client_ca_file, ec);
    if (ec) return file_error("tls.client_ca_file", f.client_ca_file, reason(ec));
    ctx->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert, ec);
    if (ec) return Error(Errc::internal, "TLS: cannot set the verify mode: " + reason(ec));
    // The CAs a client is told to pick its certificate for.
    if (STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(f.client_ca_file.c_str()))
      SSL_CTX_set_client_CA_list(ctx->native_handle(), names);
    // Session resumption with client certificates needs an id context.
    static const unsigned char kSid[] = "sluice-http";
    SSL_CTX_set_session_id_context(ctx->native_handle(), kSid, sizeof kSid - 1);
  }
  return ctx;
}

Result<void> TlsContextHolder::reload_certificates() {
  auto fresh = make_server_context(files_);
  if (!fresh) return fresh.error();
  std::lock_guard lk(mu_);
  ctx_ = std::move(*fresh);
  return {};
}

std::shared_ptr<ssl::context> TlsContextHolder::current() const {
  std::lock_guard lk(mu_);
  return ctx_;
}

}  // namespace sluice::http_api
