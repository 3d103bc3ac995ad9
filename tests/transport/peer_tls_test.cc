// The peer transport's mutual TLS (transport.tls.*, docs/security.md "TLS") on loopback:
// certificates `openssl` generates into a temp dir, real sockets. Both sides verify the
// other's certificate against the CA; another CA's certificate or a plain peer is refused;
// a reload swaps the certificate for new connections and keeps the old one on failure.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <sys/socket.h>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>

#include "peer_transport.h"
#include "peer_wire.h"

using namespace sluice;
using namespace sluice::core;
using namespace std::chrono_literals;

namespace {

namespace fs = std::filesystem;

constexpr auto kWait = std::chrono::seconds(30);
constexpr PeerMessageType kEcho = 0x0100;

std::string g_dir;  // ca, other-ca; peer1, peer2 (ca), stranger (other-ca): .pem/.key

struct Log {
  std::mutex mu;
  std::vector<std::string> lines;
  void add(const std::string& m) {
    std::lock_guard lk(mu);
    lines.push_back(m);
  }
  bool has(const std::string& a, const std::string& b = "") {
    std::lock_guard lk(mu);
    for (const auto& l : lines)
      if (l.find(a) != std::string::npos && l.find(b) != std::string::npos) return true;
    return false;
  }
  std::string all() {
    std::lock_guard lk(mu);
    std::string s;
    for (const auto& l : lines) s += l + "\n";
    return s;
  }
};

bool poll_until(const std::function<bool()>& cond) {
  const auto end = std::chrono::steady_clock::now() + kWait;
  while (!cond()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

PeerTransportOptions options(std::uint32_t node, const std::string& cert, std::shared_ptr<Log> log) {
  PeerTransportOptions o;
  o.self = NodeId{node};
  o.cluster_id = "cluster-a";
  o.directory_id = "dir-" + std::to_string(node);
  o.listen_address = "127.0.0.1:0";
  o.log = [log](LogLevel, const std::string& m) { log->add(m); };
  if (!cert.empty()) {
    o.tls_cert_file = g_dir + "/" + cert + ".pem";
    o.tls_key_file = g_dir + "/" + cert + ".key";
    o.tls_ca_file = g_dir + "/ca.pem";
  }
  return o;
}

struct Node {
  std::shared_ptr<PeerDirectory> dir = std::make_shared<PeerDirectory>();
  std::shared_ptr<Log> log = std::make_shared<Log>();
  std::unique_ptr<AsioPeerTransport> t;
  NodeId id;

  // cert: a name in g_dir ("" = plain TCP).
  Node(std::uint32_t node, const std::string& cert, bool require_node_id = false) : id(node) {
    auto o = options(node, cert, log);
    o.tls_require_node_id = require_node_id;
    auto r = AsioPeerTransport::start(o, dir);
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().to_string());
    t = std::move(r.value());
    EXPECT_TRUE(t->handle(kEcho, [](const PeerIdentity& from, std::string p, PeerResponder resp) {
                   resp("from " + std::to_string(from.node.value()) + ": " + p);
                 }).ok());
  }
  void knows(const Node& other) {
    dir->set_static({{other.id, "127.0.0.1:" + std::to_string(other.t->port())}});
  }
  Result<std::string> echo(const Node& to, const std::string& payload) {
    knows(to);
    auto p = std::make_shared<std::promise<Result<std::string>>>();
    auto f = p->get_future();
    t->request(to.id, kEcho, payload, 20s, [p](Result<std::string> r) { p->set_value(std::move(r)); });
    if (f.wait_for(kWait) != std::future_status::ready) return Error(Errc::internal, "the test waited in vain");
    return f.get();
  }
};

class PeerTls : public ::testing::Test {
 protected:
  static void sh(const std::string& cmd) {
    ASSERT_EQ(std::system(("cd '" + g_dir + "' && " + cmd + " >/dev/null 2>&1").c_str()), 0) << cmd;
  }
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/sluice-peer-tls-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    g_dir = tmpl;
    const std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    sh("openssl req -x509 " + ec + " -keyout ca.key -out ca.pem -days 2 -subj /CN=ca");
    sh("openssl req -x509 " + ec + " -keyout other-ca.key -out other-ca.pem -days 2 -subj /CN=other-ca");
    std::ofstream(g_dir + "/peer.ext") << "extendedKeyUsage=serverAuth,clientAuth\n";
    for (auto [name, ca] : {std::pair{"peer1", "ca"}, {"peer2", "ca"}, {"stranger", "other-ca"}}) {
      const std::string n = name, c = ca;
      sh("openssl req " + ec + " -keyout " + n + ".key -out " + n + ".csr -subj /CN=" + n);
      sh("openssl x509 -req -in " + n + ".csr -CA " + c + ".pem -CAkey " + c + ".key -CAcreateserial -out " + n +
         ".pem -days 2 -extfile peer.ext");
    }
    // Certificates that name their node (docs/security.md "A node's id in its certificate"),
    // and one whose name is not a node id.
    for (auto [name, uri] : {std::pair{"node1", "sluice:node:1"}, {"node2", "sluice:node:2"},
                             {"badname", "sluice:node:x1"}, {"typo", "sluice:Node:2"}}) {
      const std::string n = name;
      std::ofstream(g_dir + "/" + n + ".ext")
          << "extendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=URI:" << uri << "\n";
      sh("openssl req " + ec + " -keyout " + n + ".key -out " + n + ".csr -subj /CN=" + n);
      sh("openssl x509 -req -in " + n + ".csr -CA ca.pem -CAkey ca.key -CAcreateserial -out " + n +
         ".pem -days 2 -extfile " + n + ".ext");
    }
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(g_dir, ec);
  }
};

TEST_F(PeerTls, BothDirectionsWorkBetweenCertifiedPeers) {
  Node a(1, "peer1"), b(2, "peer2");
  auto r = a.echo(b, "hi");
  ASSERT_TRUE(r.ok()) << r.error().to_string() << a.log->all();
  EXPECT_EQ(*r, "from 1: hi");
  r = b.echo(a, "back");
  ASSERT_TRUE(r.ok()) << r.error().to_string() << b.log->all();
  EXPECT_EQ(*r, "from 2: back");
  // A large frame (a replication batch's size) crosses TLS whole.
  const std::string big(3 << 20, 'x');
  r = a.echo(b, big);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->size(), big.size() + 8);
  EXPECT_TRUE(a.log->has("mutual TLS"));
}

TEST_F(PeerTls, AnotherCasCertificateIsRefusedBothWays) {
  Node a(1, "peer1"), s(3, "stranger");
  auto r = a.echo(s, "x");  // a verifies s as a server
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::unavailable) << r.error().to_string();
  EXPECT_NE(r.error().message.find("TLS handshake failed"), std::string::npos) << r.error().message;
  EXPECT_TRUE(a.log->has("refused: TLS handshake failed", "certificate verify failed")) << a.log->all();
  r = s.echo(a, "x");  // a verifies s as a client
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::unavailable);
  // a logs its side on its own I/O thread, possibly after s saw the refusal.
  EXPECT_TRUE(poll_until([&] { return a.log->has("connection from", "TLS handshake failed"); })) << a.log->all();
}

TEST_F(PeerTls, APlainPeerIsRefusedBothWays) {
  Node a(1, "peer1"), p(2, "");
  auto r = a.echo(p, "x");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::unavailable);
  r = p.echo(a, "x");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::unavailable);
  EXPECT_TRUE(poll_until([&] { return a.log->has("TLS handshake failed"); })) << a.log->all();
}

TEST_F(PeerTls, ReloadSwapsForNewConnectionsAndKeepsTheOldOneOnFailure) {
  fs::copy_file(g_dir + "/peer1.pem", g_dir + "/rot.pem", fs::copy_options::overwrite_existing);
  fs::copy_file(g_dir + "/peer1.key", g_dir + "/rot.key", fs::copy_options::overwrite_existing);
  Node a(1, "rot");
  {
    Node b(2, "peer2");
    ASSERT_TRUE(a.echo(b, "1").ok());
  }
  // A half-written certificate: the reload fails, the old certificate keeps working.
  std::ofstream(g_dir + "/rot.pem", std::ios::trunc) << "-----BEGIN CERTIFICATE-----\n";
  auto rr = a.t->reload_certificates();
  ASSERT_FALSE(rr.ok());
  EXPECT_NE(rr.error().message.find("transport.tls.cert_file"), std::string::npos) << rr.error().message;
  {
    Node b(3, "peer2");  // a new connection
    auto r = a.echo(b, "2");
    ASSERT_TRUE(r.ok()) << r.error().to_string();
  }
  // Valid files from another CA: the reload succeeds, and new peers now refuse a.
  fs::copy_file(g_dir + "/stranger.pem", g_dir + "/rot.pem", fs::copy_options::overwrite_existing);
  fs::copy_file(g_dir + "/stranger.key", g_dir + "/rot.key", fs::copy_options::overwrite_existing);
  ASSERT_TRUE(a.t->reload_certificates().ok());
  Node c(4, "peer2");
  auto r = a.echo(c, "3");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::unavailable);
}

TEST_F(PeerTls, PartialOrBadSettingsRefuseToStart) {
  auto log = std::make_shared<Log>();
  auto o = options(1, "peer1", log);
  o.tls_ca_file.clear();
  auto r = AsioPeerTransport::start(o, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("must be set together"), std::string::npos) << r.error().message;
  o = options(1, "peer1", log);
  o.tls_key_file = g_dir + "/peer2.key";
  r = AsioPeerTransport::start(o, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("does not match"), std::string::npos) << r.error().message;
  o = options(1, "peer1", log);
  o.tls_ca_file = g_dir + "/none.pem";
  r = AsioPeerTransport::start(o, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("transport.tls.ca_file"), std::string::npos) << r.error().message;
  // Plain transports still reject a reload.
  Node p(2, "");
  EXPECT_FALSE(p.t->reload_certificates().ok());
}

}  // namespace

// A client that speaks for whichever node it likes, over TLS with a certificate of its
// choosing: what a modified binary holding a certificate of the cluster's CA could do.
// kRefused if the node at `port` closed the connection instead of answering its echo,
// kAccepted if it answered, kNoAnswer if it did neither within kWait (a watchdog shuts the
// socket down: blocking Asio reads ignore SO_RCVTIMEO).
enum Claim { kAccepted, kRefused, kNoAnswer };
Claim claim(std::uint16_t port, const std::string& cert, std::uint32_t claims) {
  namespace asio = boost::asio;
  namespace ssl = asio::ssl;
  using boost::asio::ip::tcp;
  asio::io_context io;
  ssl::context ctx(ssl::context::tls);
  ctx.use_certificate_chain_file(g_dir + "/" + cert + ".pem");
  ctx.use_private_key_file(g_dir + "/" + cert + ".key", ssl::context::pem);
  ctx.load_verify_file(g_dir + "/ca.pem");
  ctx.set_verify_mode(ssl::verify_peer);
  ssl::stream<tcp::socket> s(io, ctx);
  s.next_layer().connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  std::mutex mu;
  std::condition_variable cv;
  bool done = false, fired = false;
  std::thread watchdog([&] {
    std::unique_lock lk(mu);
    if (!cv.wait_for(lk, kWait, [&] { return done; })) {
      fired = true;
      ::shutdown(s.next_layer().native_handle(), SHUT_RDWR);
    }
  });
  auto result = [&]() -> Claim {
    boost::system::error_code ec;
    s.handshake(ssl::stream_base::client, ec);
    if (ec) return kRefused;
    using namespace peerwire;
    asio::write(s, asio::buffer(encode_frame(Header{0, kHelloType, 0, 0},
                                             encode_hello({NodeId{claims}, "cluster-a", "dir-x"}))), ec);
    asio::write(s, asio::buffer(encode_frame(Header{0, kEcho, 1, 0}, "x")), ec);
    for (int frames = 0; frames < 4; ++frames) {  // its hello, then the answer
      unsigned char h[kHeaderBytes];
      asio::read(s, asio::buffer(h), ec);
      if (ec) return kRefused;  // closed (or reset)
      auto hdr = decode_header(h);
      if (!hdr) return kRefused;
      std::string body(hdr->payload_len, '\0');
      asio::read(s, asio::buffer(body), ec);
      if (ec) return kRefused;
      if (hdr->flags & kFlagResponse) return kAccepted;
    }
    return kAccepted;
  }();
  {
    std::lock_guard lk(mu);
    done = true;
  }
  cv.notify_all();
  watchdog.join();
  return fired ? kNoAnswer : result;
}

// Security review: any holder of a certificate the CA signed could claim another node's id
// in its hello, and fence that node's leaderships or report replication progress in its
// name. A certificate that names its node (URI sluice:node:<id>) binds the claim.
TEST_F(PeerTls, ACertificateThatNamesANodeSpeaksForThatNodeAlone) {
  Node a(1, "node1"), b(2, "node2");
  auto r = a.echo(b, "hi");
  ASSERT_TRUE(r.ok()) << r.error().to_string() << a.log->all() << b.log->all();
  EXPECT_EQ(*r, "from 1: hi");
  EXPECT_EQ(claim(a.t->port(), "node2", 2), kAccepted) << a.log->all();
  EXPECT_EQ(claim(a.t->port(), "node2", 3), kRefused) << "node 2's certificate spoke for node 3";
  EXPECT_TRUE(poll_until([&] { return a.log->has("says it is node 3", "certificate names node 2"); }))
      << a.log->all();
  // A name that is not a node id is refused at the handshake's end, whatever the claim.
  EXPECT_EQ(claim(a.t->port(), "badname", 2), kRefused);
  EXPECT_TRUE(poll_until([&] { return a.log->has("not a node id"); })) << a.log->all();
  // So is a misspelt one: it must not read as "names no node" (and so any node).
  EXPECT_EQ(claim(a.t->port(), "typo", 7), kRefused);
  EXPECT_TRUE(poll_until([&] { return a.log->has("must be sluice:node:<id>"); })) << a.log->all();
}

TEST_F(PeerTls, WithRequireNodeIdACertificateWithoutANameIsRefused) {
  Node a(1, "node1", true), p(2, "peer2");
  auto r = p.echo(a, "x");
  ASSERT_FALSE(r.ok()) << *r;
  EXPECT_TRUE(poll_until([&] { return a.log->has("names no node", "require_node_id"); })) << a.log->all();
  r = a.echo(p, "x");  // and as the side that dialled
  ASSERT_FALSE(r.ok()) << *r;
  EXPECT_EQ(r.error().code, Errc::unauthorized) << r.error().to_string();
  Node c(2, "node2", true);  // named: served
  r = c.echo(a, "y");
  ASSERT_TRUE(r.ok()) << r.error().to_string() << a.log->all();
}

TEST_F(PeerTls, ABrokerWhoseCertificateNamesAnotherNodeDoesNotStart) {
  auto log = std::make_shared<Log>();
  auto r = AsioPeerTransport::start(options(3, "node2", log), std::make_shared<PeerDirectory>());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::invalid_argument);
  EXPECT_NE(r.error().message.find("names node 2, but this is node 3"), std::string::npos) << r.error().message;
  auto o = options(1, "peer1", log);
  o.tls_require_node_id = true;
  r = AsioPeerTransport::start(o, std::make_shared<PeerDirectory>());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("names no node"), std::string::npos) << r.error().message;
}
