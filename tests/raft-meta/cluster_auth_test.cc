// Raft members authenticated by a shared cluster secret (plugins/raft-meta/cluster_auth.h,
// the version-2 frames of cluster_handshake.h): the frames and proofs alone, then handshakes
// over loopback TCP between transports with the same, another, or no secret, and a raw
// socket that replays a captured hello2 or sends a wrong proof. Conditions are polled.
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "cluster_auth.h"
#include "cluster_transport_fixture.h"

namespace sluice::raft_meta::transport_test {
namespace {

const std::string kSecret = "0123456789abcdef0123456789abcdef-the-members-secret";
const std::string kOtherSecret = "fedcba9876543210fedcba9876543210-another-cluster";

ClusterTransportOptions with_secret(const std::string& secret, bool require = false) {
  auto o = quiet_opts();
  o.secret = secret;
  o.require_auth = require;
  return o;
}

template <typename Reader>
ReadProgress feed_bytewise(Reader& r, const std::string& bytes) {
  ReadProgress p = ReadProgress::more;
  for (char c : bytes) {
    if (r.want() == 0) break;
    *r.next() = c;
    p = r.received(1);
    if (p != ReadProgress::more) break;
  }
  return p;
}

TEST(ClusterAuthFrames, Hello2CarriesTheNonceAndReadsBackBytewise) {
  AuthNonce nc{};
  for (std::size_t i = 0; i < nc.size(); i++) nc[i] = static_cast<unsigned char>(i * 7);
  const std::string h = encode_cluster_hello("cluster-1", 9, "127.0.0.1:7009", &nc);
  EXPECT_EQ(h.substr(0, 8), "SLRAFT02");
  EXPECT_EQ(h.size(), encode_cluster_hello("cluster-1", 9, "127.0.0.1:7009").size() + 32);
  HelloReader r;
  ASSERT_EQ(feed_bytewise(r, h), ReadProgress::complete) << r.reason();
  EXPECT_EQ(r.version(), 2);
  EXPECT_EQ(r.cluster_id(), "cluster-1");
  EXPECT_EQ(r.server_id(), 9u);
  EXPECT_EQ(r.address(), "127.0.0.1:7009");
  EXPECT_EQ(r.nonce(), nc);
  // Version 1 still reads, with no nonce.
  HelloReader r1;
  ASSERT_EQ(feed_bytewise(r1, encode_cluster_hello("c", 1, "1.2.3.4:5")), ReadProgress::complete);
  EXPECT_EQ(r1.version(), 1);
  // Any other version byte is not a Sluice hello.
  HelloReader r3;
  EXPECT_EQ(feed_bytewise(r3, "SLRAFT03" + h.substr(8)), ReadProgress::malformed);
  EXPECT_NE(r3.reason().find("bad magic"), std::string::npos);
}

TEST(ClusterAuthFrames, Answer2WithAndWithoutAuth) {
  AnswerAuth auth;
  auth.nonce.fill(0x11);
  auth.proof.fill(0x22);
  AnswerReader r(2);
  ASSERT_EQ(feed_bytewise(r, encode_cluster_answer_v2(HandshakeStatus::ok, "cl", &auth)),
            ReadProgress::complete)
      << r.reason();
  EXPECT_TRUE(r.authenticated());
  EXPECT_EQ(r.cluster_id(), "cl");
  EXPECT_EQ(r.auth().nonce, auth.nonce);
  EXPECT_EQ(r.auth().proof, auth.proof);

  AnswerReader plain(2);
  ASSERT_EQ(feed_bytewise(plain, encode_cluster_answer_v2(HandshakeStatus::cluster_id_mismatch,
                                                          "other", nullptr)),
            ReadProgress::complete);
  EXPECT_FALSE(plain.authenticated());
  EXPECT_EQ(plain.status(), HandshakeStatus::cluster_id_mismatch);
  EXPECT_EQ(plain.cluster_id(), "other");

  // An auth flag other than 0 or 1, and a version-1 answer to a hello2, are malformed.
  std::string bad = encode_cluster_answer_v2(HandshakeStatus::ok, "cl", nullptr);
  bad.back() = 2;
  AnswerReader rb(2);
  EXPECT_EQ(feed_bytewise(rb, bad), ReadProgress::malformed);
  EXPECT_NE(rb.reason().find("auth flag 2"), std::string::npos);
  AnswerReader old(2);
  EXPECT_EQ(feed_bytewise(old, encode_cluster_answer(HandshakeStatus::ok, "cl")),
            ReadProgress::malformed);
  EXPECT_NE(old.reason().find("version 1"), std::string::npos);
  // Status 3 reads in both versions and is judged "auth required".
  AnswerReader r3;
  ASSERT_EQ(feed_bytewise(r3, encode_cluster_answer(HandshakeStatus::auth_required, "cl")),
            ReadProgress::complete);
  EXPECT_EQ(judge_answer(r3.status(), r3.cluster_id(), "cl"), AnswerVerdict::auth_required);
}

AuthProof proof_of(const std::string& secret, ProofSide side, const ProofInput& in) {
  AuthProof p{};
  EXPECT_TRUE(auth_proof(secret, side, in, p));
  return p;
}

TEST(ClusterAuthProofs, BoundToSideSecretNoncesAndBothEnds) {
  AuthNonce nc{}, na{};
  nc.fill(1);
  na.fill(2);
  const ProofInput in{"c", 7, "127.0.0.1:1", 8, "127.0.0.1:2", &nc, &na};
  const auto base = proof_of(kSecret, ProofSide::acceptor, in);
  EXPECT_TRUE(proof_equal(base, proof_of(kSecret, ProofSide::acceptor, in)));
  EXPECT_FALSE(proof_equal(base, proof_of(kSecret, ProofSide::connector, in)));
  EXPECT_FALSE(proof_equal(base, proof_of(kOtherSecret, ProofSide::acceptor, in)));
  auto differs = [&](ProofInput changed) {
    return !proof_equal(base, proof_of(kSecret, ProofSide::acceptor, changed));
  };
  ProofInput x = in;
  x.cluster_id = "d";
  EXPECT_TRUE(differs(x));
  x = in;
  x.connector_id = 9;
  EXPECT_TRUE(differs(x));
  x = in;
  x.connector_address = "127.0.0.1:3";
  EXPECT_TRUE(differs(x));
  x = in;
  x.acceptor_id = 9;  // the same handshake relayed to another member
  EXPECT_TRUE(differs(x));
  x = in;
  x.acceptor_address = "127.0.0.1:3";
  EXPECT_TRUE(differs(x));
  x = in;
  x.nc = &na;
  x.na = &nc;
  EXPECT_TRUE(differs(x));
  AuthNonce a{}, b{};
  ASSERT_TRUE(random_nonce(a));
  ASSERT_TRUE(random_nonce(b));
  EXPECT_NE(a, b);
  AuthProof out{};
  EXPECT_FALSE(auth_proof(kSecret, ProofSide::acceptor, ProofInput{"c", 1, "a", 2, "b", nullptr, &na}, out));
}

TEST(ClusterAuthSecretFile, ModeLengthAndNoSecretInErrors) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("sluice-secret-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = (dir / "secret").string();
  auto write = [&](const std::string& text, mode_t mode) {
    std::ofstream(path, std::ios::trunc) << text;
    ASSERT_EQ(::chmod(path.c_str(), mode), 0);
  };
  write(kSecret + "\n", 0600);
  auto ok = load_cluster_secret(path);
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(*ok, kSecret);

  write(kSecret + "\n", 0644);
  auto open = load_cluster_secret(path);
  ASSERT_FALSE(open);
  EXPECT_NE(open.error().message.find("chmod 600"), std::string::npos);
  EXPECT_EQ(open.error().message.find(kSecret), std::string::npos);

  write("short-secret\n", 0600);
  auto shorter = load_cluster_secret(path);
  ASSERT_FALSE(shorter);
  EXPECT_NE(shorter.error().message.find("at least 32"), std::string::npos);
  EXPECT_EQ(shorter.error().message.find("short-secret"), std::string::npos);

  EXPECT_FALSE(load_cluster_secret((dir / "missing").string()));
  std::filesystem::remove_all(dir);
}

TEST_F(ClusterTransportTest, SameSecretAuthenticatesBothWaysAndCarriesData) {
  Endpoint& a = make("a", "cluster-1", 1, with_secret(kSecret, true));
  Endpoint& b = make("b", "cluster-1", 2, with_secret(kSecret, true));
  start(a);
  start(b);
  Conn& c = connect(a, b.id, b.address);
  ASSERT_TRUE(run_until([&] { return c.done && b.accepted.size() == 1; }));
  ASSERT_EQ(c.status, 0);
  own(c.stream);
  own(b.accepted[0].stream);
  EXPECT_EQ(b.accepted[0].id, 1u);
  EXPECT_EQ(a.warnings(), 0);
  EXPECT_EQ(b.warnings(), 0);
  // Bytes written right after the handshake reach libraft's stream on the other side.
  Reader r;
  b.accepted[0].stream->data = &r;
  ASSERT_EQ(uv_read_start(b.accepted[0].stream, reader_alloc, reader_read), 0);
  std::string payload = "append entries after the proof";
  uv_write_t w;
  uv_buf_t buf = uv_buf_init(payload.data(), static_cast<unsigned>(payload.size()));
  ASSERT_EQ(uv_write(&w, c.stream, &buf, 1, [](uv_write_t*, int st) { EXPECT_EQ(st, 0); }), 0);
  ASSERT_TRUE(run_until([&] { return r.got.size() >= payload.size(); }));
  EXPECT_EQ(r.got, payload);
}

TEST_F(ClusterTransportTest, AnotherSecretIsRefusedBothWays) {
  Endpoint& a = make("a", "cluster-1", 1, with_secret(kSecret));
  Endpoint& b = make("b", "cluster-1", 2, with_secret(kOtherSecret));
  start(a);
  start(b);
  Conn& c = connect(a, b.id, b.address);
  ASSERT_TRUE(run_until([&] { return c.done; }));
  EXPECT_NE(c.status, 0);
  EXPECT_TRUE(b.accepted.empty());
  EXPECT_TRUE(a.logged(LogLevel::warn, "did not prove the cluster secret"));
  Conn& back = connect(b, a.id, a.address);
  ASSERT_TRUE(run_until([&] { return back.done; }));
  EXPECT_NE(back.status, 0);
  EXPECT_TRUE(a.accepted.empty());
  EXPECT_TRUE(b.logged(LogLevel::warn, "did not prove the cluster secret"));
}

TEST_F(ClusterTransportTest, RequireAuthRefusesAMemberWithoutTheSecretBothWays) {
  Endpoint& a = make("a", "cluster-1", 1, with_secret(kSecret, true));
  Endpoint& none = make("none", "cluster-1", 2);
  start(a);
  start(none);
  // The member without a secret says hello version 1: answered with status 3.
  Conn& in = connect(none, a.id, a.address);
  ASSERT_TRUE(run_until([&] { return in.done; }));
  EXPECT_NE(in.status, 0);
  EXPECT_TRUE(a.accepted.empty());
  EXPECT_TRUE(a.logged(LogLevel::warn, "did not prove the cluster secret (it has no"));
  EXPECT_TRUE(none.logged(LogLevel::warn, "the peer requires the cluster secret"));
  // Toward it: its answer2 carries no proof, which a requiring member refuses.
  Conn& out = connect(a, none.id, none.address);
  ASSERT_TRUE(run_until([&] { return out.done; }));
  EXPECT_NE(out.status, 0);
  EXPECT_TRUE(a.logged(LogLevel::warn, "the peer holds no cluster secret"));
  // The secretless side cannot tell: it handed its end to libraft, which sees it closed.
  ASSERT_TRUE(run_until([&] { return none.accepted.size() == 1; }));
  own(none.accepted[0].stream);
}

TEST_F(ClusterTransportTest, WithoutRequireAuthASecretlessMemberStillConnects) {
  // The rollout's first step (docs/security.md): some members hold the secret, none requires it.
  Endpoint& a = make("a", "cluster-1", 1, with_secret(kSecret));
  Endpoint& none = make("none", "cluster-1", 2);
  start(a);
  start(none);
  Conn& out = connect(a, none.id, none.address);
  Conn& in = connect(none, a.id, a.address);
  ASSERT_TRUE(run_until([&] { return out.done && in.done && a.accepted.size() == 1 &&
                                     none.accepted.size() == 1; }));
  EXPECT_EQ(out.status, 0);
  EXPECT_EQ(in.status, 0);
  own(out.stream);
  own(in.stream);
  own(a.accepted[0].stream);
  own(none.accepted[0].stream);
  EXPECT_EQ(a.warnings(), 0);
  EXPECT_EQ(none.warnings(), 0);
}

// The fixture, with a raw read of exactly `n` bytes.
class ClusterAuthTransportTest : public ClusterTransportTest {
 protected:
  // Reads until `n` bytes arrived (or the peer closed); what arrived.
  std::string read_n(int fd, std::size_t n) {
    std::string got;
    EXPECT_TRUE(run_until([&] {
      char buf[256];
      ssize_t r = ::recv(fd, buf, std::min(sizeof buf, n - got.size()), MSG_DONTWAIT);
      if (r > 0) got.append(buf, static_cast<std::size_t>(r));
      return got.size() >= n || r == 0;
    }));
    return got;
  }
};

TEST_F(ClusterAuthTransportTest, AReplayedHandshakeCannotProveTheSecret) {
  Endpoint& b = make("b", "cluster-1", 2, with_secret(kSecret, true));
  start(b);
  const std::uint16_t port = port_of(b);
  const std::string me = "127.0.0.1:7007";
  AuthNonce nc{};
  ASSERT_TRUE(random_nonce(nc));
  const std::string hello = encode_cluster_hello("cluster-1", 7, me, &nc);
  const std::size_t answer_size = 8 + 4 + 4 + 9 + 1 + 32 + 32;
  // A real member's handshake, recorded: its hello2, the answer2, its proof. Accepted.
  int fd = track(raw_connect(port));
  raw_send(fd, hello);
  const std::string first = read_n(fd, answer_size);
  ASSERT_EQ(first.size(), answer_size);
  AnswerReader r1(2);
  ASSERT_EQ(feed_bytewise(r1, first), ReadProgress::complete) << r1.reason();
  ASSERT_TRUE(r1.authenticated());
  AuthProof recorded{};
  ASSERT_TRUE(auth_proof(kSecret, ProofSide::connector,
                         ProofInput{"cluster-1", 7, me, 2, b.address, &nc, &r1.auth().nonce},
                         recorded));
  raw_send(fd, std::string(reinterpret_cast<const char*>(recorded.data()), recorded.size()));
  ASSERT_TRUE(run_until([&] { return b.accepted.size() == 1; }));
  own(b.accepted[0].stream);

  // Replayed byte for byte on a new connection: the acceptor's nonce is fresh, so the
  // recorded proof is wrong and the stream never reaches libraft.
  int fd2 = track(raw_connect(port));
  raw_send(fd2, hello);
  const std::string second = read_n(fd2, answer_size);
  AnswerReader r2(2);
  ASSERT_EQ(feed_bytewise(r2, second), ReadProgress::complete) << r2.reason();
  EXPECT_NE(r2.auth().nonce, r1.auth().nonce) << "a fresh nonce per connection";
  raw_send(fd2, std::string(reinterpret_cast<const char*>(recorded.data()), recorded.size()) +
                    "raft bytes that must never reach libraft");
  EXPECT_TRUE(run_until([&] { return raw_closed(fd2); }));
  EXPECT_TRUE(run_until([&] { return b.logged(LogLevel::warn, "its proof is wrong"); }));
  EXPECT_EQ(b.accepted.size(), 1u);
}

TEST_F(ClusterAuthTransportTest, AHandshakeRelayedToAnotherMemberIsRefused) {
  // L dials M (a man in the middle, without the secret); M relays L's hello2 to member A
  // and A's answer2 back to L. A's proof names A, not the server L dialled: L refuses it.
  Endpoint& l = make("l", "cluster-1", 1, with_secret(kSecret, true));
  Endpoint& a = make("a", "cluster-1", 3, with_secret(kSecret, true));
  start(l);
  start(a);
  std::uint16_t mport = 0;
  int listener = track(raw_listener(&mport));
  Conn& c = connect(l, 2, loopback(mport));
  int from_l = -1;
  ASSERT_TRUE(run_until([&] { return (from_l = ::accept(listener, nullptr, nullptr)) >= 0; }));
  track(from_l);
  // L's hello2: everything up to its nonce.
  const std::size_t hello_size = encode_cluster_hello("cluster-1", 1, l.address).size() + 32;
  const std::string hello = read_n(from_l, hello_size);
  ASSERT_EQ(hello.size(), hello_size);
  int to_a = track(raw_connect(port_of(a)));
  raw_send(to_a, hello);
  const std::string answer = read_n(to_a, 8 + 4 + 4 + 9 + 1 + 64);
  ASSERT_EQ(answer.size(), 8u + 4 + 4 + 9 + 1 + 64);
  raw_send(from_l, answer);
  ASSERT_TRUE(run_until([&] { return c.done; }));
  EXPECT_NE(c.status, 0);
  EXPECT_TRUE(l.logged(LogLevel::warn, "its proof is wrong"));
  EXPECT_TRUE(a.accepted.empty());
}

}  // namespace
}  // namespace sluice::raft_meta::transport_test
