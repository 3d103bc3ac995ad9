// plugins/http-api/tls.h and HttpServer::reload_certificates() (docs/security.md "TLS"): the
// real server with tls.cert_file on an ephemeral port, an OpenSSL client, and certificates
// `openssl` generates into a temp dir. A reload swaps the certificate for new connections;
// a failed one keeps the previous certificate serving.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "config.h"
#include "fake_node.h"
#include "server.h"
#include "test_host.h"
#include "tls.h"

namespace sluice::testing {
namespace {

namespace fs = std::filesystem;
using Config = std::map<std::string, std::string>;

std::string g_dir;  // ca.pem, first.{pem,key}, second.{pem,key}

void sh(const std::string& cmd) {
  ASSERT_EQ(std::system(("cd '" + g_dir + "' && " + cmd + " >/dev/null 2>&1").c_str()), 0) << cmd;
}

void copy(const std::string& from, const std::string& to) {
  fs::copy_file(g_dir + "/" + from, g_dir + "/" + to, fs::copy_options::overwrite_existing);
}

void write(const std::string& name, const std::string& text) {
  std::ofstream(g_dir + "/" + name, std::ios::trunc) << text;
}

class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/sluice-tls-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    g_dir = tmpl;
    const std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    sh("openssl req -x509 " + ec + " -keyout ca.key -out ca.pem -days 2 -subj /CN=test-ca");
    write("leaf.ext", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n");
    for (const char* name : {"first", "second"}) {
      const std::string n = name;
      sh("openssl req " + ec + " -keyout " + n + ".key -out " + n + ".csr -subj /CN=" + n);
      sh("openssl x509 -req -in " + n + ".csr -CA ca.pem -CAkey ca.key -CAcreateserial -out " + n +
         ".pem -days 2 -extfile leaf.ext");
    }
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(g_dir, ec);
  }

  void SetUp() override {
    copy("first.pem", "cert.pem");
    copy("first.key", "key.pem");
  }

  http_api::TlsFiles files() const { return {g_dir + "/cert.pem", g_dir + "/key.pem", ""}; }
};

std::string subject_cn(X509* cert) {
  char buf[256] = {};
  X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, buf, sizeof buf);
  return buf;
}

// A TLS client on 127.0.0.1:port that verifies the server against ca.pem: the server
// certificate's common name and the answer to GET /healthz ("" if the handshake failed).
struct Handshake {
  std::string cn, reply;
};
Handshake connect_tls(std::uint16_t port) {
  Handshake out;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return out;
  }
  timeval tv{30, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL_CTX_load_verify_locations(ctx, (g_dir + "/ca.pem").c_str(), nullptr);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  SSL* ssl = SSL_new(ctx);
  SSL_set_fd(ssl, fd);
  if (SSL_connect(ssl) == 1) {
    if (X509* peer = SSL_get1_peer_certificate(ssl)) {
      out.cn = subject_cn(peer);
      X509_free(peer);
    }
    const std::string req = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    SSL_write(ssl, req.data(), static_cast<int>(req.size()));
    char buf[4096];
    for (int n; (n = SSL_read(ssl, buf, sizeof buf)) > 0;) out.reply.append(buf, static_cast<std::size_t>(n));
  }
  ERR_clear_error();
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  ::close(fd);
  return out;
}

TEST_F(TlsTest, HolderKeepsThePreviousContextWhenAReloadFails) {
  http_api::TlsContextHolder h(files());
  EXPECT_EQ(h.current(), nullptr);
  ASSERT_TRUE(h.reload_certificates().ok());
  auto before = h.current();
  ASSERT_NE(before, nullptr);

  write("cert.pem", "not a certificate\n");
  auto r = h.reload_certificates();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::invalid_argument);
  EXPECT_NE(r.error().message.find("tls.cert_file '" + g_dir + "/cert.pem'"), std::string::npos)
      << r.error().message;
  EXPECT_EQ(h.current(), before);

  copy("second.pem", "cert.pem");  // the key is still first's
  r = h.reload_certificates();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("does not match the certificate"), std::string::npos) << r.error().message;
  EXPECT_EQ(h.current(), before);

  copy("second.key", "key.pem");
  ASSERT_TRUE(h.reload_certificates().ok());
  EXPECT_NE(h.current(), before);
}

TEST_F(TlsTest, MissingFilesAreNamed) {
  auto r = http_api::make_server_context({g_dir + "/none.pem", g_dir + "/key.pem", ""});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("tls.cert_file"), std::string::npos) << r.error().message;
  r = http_api::make_server_context({g_dir + "/cert.pem", g_dir + "/none.key", ""});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("tls.key_file"), std::string::npos) << r.error().message;
  r = http_api::make_server_context({g_dir + "/cert.pem", g_dir + "/key.pem", g_dir + "/none-ca.pem"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("tls.client_ca_file"), std::string::npos) << r.error().message;
}

TEST_F(TlsTest, ServerReloadSwapsTheCertificateForNewConnections) {
  FakeNode node;
  TestHost host(Config{{"http.port", "0"}, {"tls.cert_file", g_dir + "/cert.pem"}, {"tls.key_file", g_dir + "/key.pem"}});
  http_api::HttpServer server(http_api::HttpConfig::from_host(host), &host);
  auto started = server.start(node);
  ASSERT_TRUE(started.ok()) << started.error().to_string();

  Handshake h = connect_tls(server.port());
  EXPECT_EQ(h.cn, "first");
  EXPECT_EQ(h.reply.rfind("HTTP/1.1 200", 0), 0u) << h.reply;

  // A broken file: the reload fails and the first certificate keeps serving.
  write("cert.pem", "-----BEGIN CERTIFICATE-----\ngarbage\n-----END CERTIFICATE-----\n");
  EXPECT_FALSE(server.reload_certificates().ok());
  h = connect_tls(server.port());
  EXPECT_EQ(h.cn, "first");
  EXPECT_EQ(h.reply.rfind("HTTP/1.1 200", 0), 0u) << h.reply;

  // Rotated files: new connections get the new certificate.
  copy("second.pem", "cert.pem");
  copy("second.key", "key.pem");
  auto r = server.reload_certificates();
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  h = connect_tls(server.port());
  EXPECT_EQ(h.cn, "second");
  EXPECT_EQ(h.reply.rfind("HTTP/1.1 200", 0), 0u) << h.reply;
  server.stop();
}

TEST_F(TlsTest, ReloadWithoutTlsIsAnError) {
  FakeNode node;
  TestHost host(Config{{"http.port", "0"}});
  http_api::HttpServer server(http_api::HttpConfig::from_host(host), &host);
  ASSERT_TRUE(server.start(node).ok());
  auto r = server.reload_certificates();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("TLS is off"), std::string::npos);
  server.stop();
}

TEST_F(TlsTest, ConfigRefusesHalfAPair) {
  EXPECT_THROW(http_api::HttpConfig::from_host(TestHost(Config{{"tls.cert_file", "c.pem"}})), std::invalid_argument);
  EXPECT_THROW(http_api::HttpConfig::from_host(TestHost(Config{{"tls.key_file", "k.pem"}})), std::invalid_argument);
  EXPECT_THROW(http_api::HttpConfig::from_host(TestHost(Config{{"tls.client_ca_file", "ca.pem"}})),
               std::invalid_argument);
  EXPECT_NO_THROW(http_api::HttpConfig::from_host(TestHost(Config{})));
}

}  // namespace
}  // namespace sluice::testing
