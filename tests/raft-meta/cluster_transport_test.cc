// The cluster-id-presenting libraft transport (plugins/raft-meta/cluster_transport.h):
// handshakes over loopback TCP between transports and raw sockets, and close with handshakes
// in flight. A real libraft group on it: cluster_transport_raft_test.cc; the frames and rules
// alone: cluster_handshake_test.cc. Conditions are polled with a generous deadline, never
// slept for.
#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>

#include "cluster_transport_fixture.h"

namespace sluice::raft_meta::transport_test {
namespace {

TEST(ClusterTransportFrames, HelloAndAnswerLayout) {
  std::string hello = encode_cluster_hello("abc", 0x0102030405060708ull, "1.2.3.4:5");
  std::string want = std::string("SLRAFT01") + std::string("\x03\x00\x00\x00", 4) + "abc" +
                     std::string("\x08\x07\x06\x05\x04\x03\x02\x01", 8) +
                     std::string("\x09\x00\x00\x00", 4) + "1.2.3.4:5";
  EXPECT_EQ(hello, want);
  std::string answer = encode_cluster_answer(HandshakeStatus::cluster_id_mismatch, "xy");
  EXPECT_EQ(answer, std::string("SLRAFT01") + std::string("\x01\x00\x00\x00\x02\x00\x00\x00", 8) + "xy");
  EXPECT_EQ(ClusterTransportOptions{}.handshake_timeout_ms, 5000u);
}

TEST_F(ClusterTransportTest, MatchingIdsHandOverStreamsThatCarryData) {
  Endpoint& a = make("a", "cluster-1", 1);
  Endpoint& b = make("b", "cluster-1", 2);
  start(a);
  start(b);
  Conn& c = connect(a, b.id, b.address);
  ASSERT_TRUE(run_until([&] { return c.done && b.accepted.size() == 1; }));
  ASSERT_EQ(c.status, 0);
  ASSERT_NE(c.stream, nullptr);
  own(c.stream);
  own(b.accepted[0].stream);
  EXPECT_EQ(c.calls, 1);
  EXPECT_EQ(b.accepted[0].id, 1u);
  EXPECT_EQ(b.accepted[0].address, a.address);
  EXPECT_EQ(a.warnings(), 0);
  EXPECT_EQ(b.warnings(), 0);

  // What the connector writes after the handshake arrives intact at the acceptor's stream.
  Reader r;
  b.accepted[0].stream->data = &r;
  ASSERT_EQ(uv_read_start(b.accepted[0].stream, reader_alloc, reader_read), 0);
  std::string payload = "raft message bytes 0123456789abcdef";
  uv_write_t w;
  bool written = false;
  w.data = &written;
  uv_buf_t buf = uv_buf_init(payload.data(), static_cast<unsigned>(payload.size()));
  ASSERT_EQ(uv_write(&w, c.stream, &buf, 1, [](uv_write_t* w, int st) {
              EXPECT_EQ(st, 0);
              *static_cast<bool*>(w->data) = true;
            }),
            0);
  ASSERT_TRUE(run_until([&] { return written && r.got.size() >= payload.size(); }));
  EXPECT_EQ(r.got, payload);
}

TEST_F(ClusterTransportTest, MismatchedIdsAreRefusedAndBothSidesNameBothIds) {
  Endpoint& a = make("a", "cluster-A", 1);
  Endpoint& b = make("b", "cluster-B", 2);
  start(a);
  start(b);
  Conn& c = connect(a, b.id, b.address);
  ASSERT_TRUE(run_until([&] { return c.done; }));
  EXPECT_NE(c.status, 0);
  EXPECT_EQ(c.stream, nullptr);
  EXPECT_TRUE(b.accepted.empty());
  EXPECT_TRUE(a.logged(LogLevel::warn,
                       "refused raft connection: peer cluster id cluster-B, this member's "
                       "cluster id cluster-A"));
  EXPECT_TRUE(b.logged(LogLevel::warn,
                       "refused raft connection: peer cluster id cluster-A, this member's "
                       "cluster id cluster-B"));
  // Still no accept after the refusal has been fully processed on both sides.
  Conn& c2 = connect(a, b.id, b.address);
  ASSERT_TRUE(run_until([&] { return c2.done; }));
  EXPECT_NE(c2.status, 0);
  EXPECT_TRUE(b.accepted.empty());
}

TEST_F(ClusterTransportTest, EmptyLocalIdRefusesBothWaysUntilLearned) {
  Endpoint& a = make("a", "cluster-1", 1);
  Endpoint& b = make("b", "", 2);
  start(a);
  start(b);

  // The acceptor does not know its id: refused, status 2.
  Conn& c1 = connect(a, b.id, b.address);
  ASSERT_TRUE(run_until([&] { return c1.done; }));
  EXPECT_NE(c1.status, 0);
  EXPECT_TRUE(b.accepted.empty());
  EXPECT_TRUE(b.logged(LogLevel::warn, "this member's cluster id is not known yet"));
  EXPECT_TRUE(a.logged(LogLevel::warn, "does not know its cluster id yet"));

  // The connector does not know its id: connect fails at once, no callback is owed.
  int rv = 0;
  Conn& c2 = connect(b, a.id, a.address, &rv);
  EXPECT_EQ(rv, RAFT_NOCONNECTION);
  EXPECT_TRUE(b.logged(LogLevel::warn, "not connecting to raft server 1 at " + a.address +
                                           ": this member's cluster id is not known yet"));

  // Learned later: the getter is read at each connection.
  b.cluster_id = "cluster-1";
  Conn& c3 = connect(b, a.id, a.address);
  ASSERT_TRUE(run_until([&] { return c3.done && a.accepted.size() == 1; }));
  EXPECT_EQ(c3.status, 0);
  own(c3.stream);
  own(a.accepted[0].stream);
  EXPECT_EQ(a.accepted[0].id, 2u);
  EXPECT_FALSE(c2.done) << "a connect that failed synchronously must not call back";
}

TEST_F(ClusterTransportTest, MalformedHellosAreClosedWithAWarningAndTheListenerStillAccepts) {
  Endpoint& b = make("b", "cluster-1", 2);
  start(b);
  std::uint16_t port = port_of(b);
  ASSERT_NE(port, 0);
  std::string good = encode_cluster_hello("cluster-1", 7, "127.0.0.1:7007");
  std::string magic = "SLRAFT01";
  struct Case {
    const char* name;
    std::string bytes;
    bool shut_write;  // half-close after sending (a truncated frame)
    const char* reason;
  };
  std::vector<Case> cases = {
      {"garbage", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", false, "bad magic"},
      {"garbage-short", "SL", true, "truncated"},
      {"nothing", "", true, "connection closed before any handshake byte"},
      {"truncated", good.substr(0, 20), true, "truncated: connection closed after 20"},
      {"oversized-cluster-id", magic + le32(1000) + std::string(64, 'x'), false,
       "cluster id length 1000 exceeds 64"},
      {"oversized-address", magic + le32(9) + "cluster-1" + le64(7) + le32(4096), false,
       "address length 4096 not in 1..255"},
      {"empty-address", magic + le32(9) + "cluster-1" + le64(7) + le32(0), false,
       "address length 0"},
      {"server-id-0", encode_cluster_hello("cluster-1", 0, "127.0.0.1:1"), false, "server id 0"},
      {"binary-address", encode_cluster_hello("cluster-1", 7, std::string("a\0b", 3)), false,
       "not printable"},
      {"surplus", good + "extra", false, "bytes after the hello"},
  };
  for (const auto& tc : cases) {
    SCOPED_TRACE(tc.name);
    int before = b.count(LogLevel::warn, tc.reason);
    int fd = track(raw_connect(port));
    raw_send(fd, tc.bytes);
    if (tc.shut_write) ::shutdown(fd, SHUT_WR);
    std::string got;
    EXPECT_TRUE(run_until([&] { return raw_closed(fd, &got); }));
    EXPECT_TRUE(run_until([&] { return b.count(LogLevel::warn, tc.reason) > before; }))
        << "no WARN naming: " << tc.reason;
    EXPECT_TRUE(b.logged(LogLevel::warn, "closing raft connection from 127.0.0.1:"));
    EXPECT_TRUE(got.empty()) << "a malformed hello gets no answer";
    EXPECT_TRUE(b.accepted.empty());
  }

  // A well-formed hello from a raw client is answered OK and accepted.
  int fd = track(raw_connect(port));
  raw_send(fd, good);
  std::string answer = encode_cluster_answer(HandshakeStatus::ok, "cluster-1");
  std::string got;
  ASSERT_TRUE(run_until([&] {
    raw_closed(fd, &got);
    return got.size() >= answer.size() && b.accepted.size() == 1;
  }));
  EXPECT_EQ(got, answer);
  own(b.accepted[0].stream);
  EXPECT_EQ(b.accepted[0].id, 7u);
  EXPECT_EQ(b.accepted[0].address, "127.0.0.1:7007");

  // And a real transport still connects.
  Endpoint& a = make("a", "cluster-1", 1);
  start(a);
  Conn& c = connect(a, b.id, b.address);
  ASSERT_TRUE(run_until([&] { return c.done && b.accepted.size() == 2; }));
  EXPECT_EQ(c.status, 0);
  own(c.stream);
  own(b.accepted[1].stream);
}

TEST_F(ClusterTransportTest, SilentPeersAreClosedAfterTheHandshakeTimeout) {
  ClusterTransportOptions opts = quiet_opts();
  opts.handshake_timeout_ms = 300;
  Endpoint& b = make("b", "cluster-1", 2, opts);
  start(b);

  // Incoming: a client that sends nothing.
  int fd = track(raw_connect(port_of(b)));
  ASSERT_TRUE(run_until([&] { return raw_closed(fd); }));
  EXPECT_TRUE(run_until([&] { return b.logged(LogLevel::warn, "handshake timed out after 300 ms"); }));
  // A client that stops half-way through.
  int fd2 = track(raw_connect(port_of(b)));
  raw_send(fd2, encode_cluster_hello("cluster-1", 7, "127.0.0.1:7007").substr(0, 15));
  ASSERT_TRUE(run_until([&] { return raw_closed(fd2); }));
  EXPECT_TRUE(run_until([&] { return b.logged(LogLevel::warn, "15 handshake bytes received"); }));
  EXPECT_TRUE(b.accepted.empty());

  // Outgoing: an acceptor that never answers.
  std::uint16_t port;
  int lfd = track(raw_listener(&port));
  Conn& c = connect(b, 9, loopback(port));
  ASSERT_TRUE(run_until([&] { return c.done; }));
  EXPECT_EQ(c.status, RAFT_NOCONNECTION);
  EXPECT_EQ(c.stream, nullptr);
  EXPECT_TRUE(b.logged(LogLevel::warn, "timed out after 300 ms (outgoing to raft server 9"));
  (void)lfd;
}

TEST_F(ClusterTransportTest, ConnectorRefusesBadAnswers) {
  Endpoint& a = make("a", "cluster-1", 1);
  start(a, /*listen=*/false);
  std::string magic = "SLRAFT01";
  struct Case {
    const char* name;
    std::string answer;
    bool close_after;
    const char* reason;
  };
  std::vector<Case> cases = {
      {"garbage", "HTTP/1.1 400 Bad Request\r\n\r\n", false, "bad magic in the answer"},
      {"unknown-status", magic + le32(7) + le32(0), false, "unknown answer status 7"},
      {"oversized-id", magic + le32(0) + le32(500), false, "answer cluster id length 500 exceeds 64"},
      {"truncated", encode_cluster_answer(HandshakeStatus::ok, "cluster-1").substr(0, 19), true,
       "truncated answer"},
      {"surplus", encode_cluster_answer(HandshakeStatus::ok, "cluster-1") + "xx", false,
       "bytes after the answer"},
      {"ok-for-another-id", encode_cluster_answer(HandshakeStatus::ok, "cluster-2"), false,
       "refused raft connection: peer cluster id cluster-2, this member's cluster id cluster-1"},
      {"mismatch", encode_cluster_answer(HandshakeStatus::cluster_id_mismatch, "cluster-9"), false,
       "refused raft connection: peer cluster id cluster-9, this member's cluster id cluster-1"},
  };
  for (const auto& tc : cases) {
    SCOPED_TRACE(tc.name);
    std::uint16_t port;
    int lfd = track(raw_listener(&port));
    Conn& c = connect(a, 5, loopback(port));
    int sfd = -1;
    std::string hello;
    std::string want = encode_cluster_hello("cluster-1", 1, a.address);
    ASSERT_TRUE(run_until([&] {
      if (sfd < 0) {
        sfd = ::accept(lfd, nullptr, nullptr);
        if (sfd >= 0) track(sfd);
      }
      if (sfd >= 0) raw_closed(sfd, &hello);
      return hello.size() >= want.size();
    }));
    EXPECT_EQ(hello, want) << "the connector sends exactly the hello";
    raw_send(sfd, tc.answer);
    if (tc.close_after) ::shutdown(sfd, SHUT_WR);
    ASSERT_TRUE(run_until([&] { return c.done; }));
    EXPECT_NE(c.status, 0);
    EXPECT_EQ(c.stream, nullptr);
    EXPECT_TRUE(a.logged(LogLevel::warn, tc.reason)) << "no WARN naming: " << tc.reason;
  }
}

TEST_F(ClusterTransportTest, ConnectToNothingFailsQuietly) {
  Endpoint& a = make("a", "cluster-1", 1);
  start(a, false);
  Conn& c = connect(a, 2, loopback(free_port()));
  ASSERT_TRUE(run_until([&] { return c.done; }));
  EXPECT_EQ(c.status, RAFT_NOCONNECTION);
  EXPECT_EQ(a.warnings(), 0) << "a peer that is down is libraft's business (it retries)";
  int rv = 0;
  connect(a, 2, "not-an-address", &rv);
  EXPECT_EQ(rv, RAFT_NOCONNECTION);
}

TEST_F(ClusterTransportTest, CloseAbortsHandshakesInFlight) {
  Endpoint& a = make("a", "cluster-1", 1);
  start(a);
  // An incoming handshake stuck half-way.
  int in_fd = track(raw_connect(port_of(a)));
  raw_send(in_fd, encode_cluster_hello("cluster-1", 7, "127.0.0.1:7007").substr(0, 10));
  // An outgoing handshake waiting for its answer.
  std::uint16_t port;
  int lfd = track(raw_listener(&port));
  Conn& waiting = connect(a, 5, loopback(port));
  int sfd = -1;
  std::string hello;
  ASSERT_TRUE(run_until([&] {
    if (sfd < 0) {
      sfd = ::accept(lfd, nullptr, nullptr);
      if (sfd >= 0) track(sfd);
    }
    if (sfd >= 0) raw_closed(sfd, &hello);
    return !hello.empty();
  }));
  // An outgoing one whose TCP connect has not even been reported yet.
  Conn& pending = connect(a, 6, loopback(port));

  a.close_called = true;
  a.transport.close(&a.transport, on_transport_closed);
  EXPECT_FALSE(a.closed) << "the close callback waits for the handles to close";
  EXPECT_FALSE(waiting.done);
  EXPECT_FALSE(pending.done);
  ASSERT_TRUE(run_until([&] { return a.closed; }));
  EXPECT_TRUE(waiting.done);
  EXPECT_TRUE(pending.done);
  EXPECT_EQ(waiting.status, RAFT_CANCELED);
  EXPECT_EQ(pending.status, RAFT_CANCELED);
  EXPECT_EQ(waiting.stream, nullptr);
  EXPECT_LT(waiting.order, a.closed_order);
  EXPECT_LT(pending.order, a.closed_order);
  EXPECT_TRUE(a.accepted.empty());
  EXPECT_TRUE(run_until([&] { return raw_closed(in_fd); })) << "the incoming handshake was closed";
  EXPECT_TRUE(run_until([&] { return raw_closed(sfd); })) << "the outgoing handshake was closed";
  cluster_transport_close(&a.transport);
  a.freed = true;
  // TearDown checks that the loop has no handle left.
}

TEST_F(ClusterTransportTest, RepeatedRefusalsAreRateLimited) {
  ClusterTransportOptions opts;
  opts.log_repeat_interval_ms = 60000;
  Endpoint& a = make("a", "cluster-A", 1, opts);
  Endpoint& b = make("b", "cluster-B", 2, opts);
  start(a);
  start(b);
  for (int i = 0; i < 3; i++) {
    Conn& c = connect(a, b.id, b.address);
    ASSERT_TRUE(run_until([&] { return c.done; }));
    EXPECT_NE(c.status, 0);
  }
  EXPECT_EQ(a.count(LogLevel::warn, "refused raft connection"), 1);
  EXPECT_EQ(b.count(LogLevel::warn, "refused raft connection"), 1);

  // Malformed hellos from one host: one line per interval, whatever the reason.
  for (std::string garbage : {"GET / HTTP/1.1\r\n\r\n", "XXXXXXXXXXXXXXXX"}) {
    int fd = track(raw_connect(port_of(b)));
    raw_send(fd, garbage);
    ASSERT_TRUE(run_until([&] { return raw_closed(fd); }));
  }
  EXPECT_EQ(b.count(LogLevel::warn, "malformed handshake"), 1);
}

}  // namespace
}  // namespace sluice::raft_meta::transport_test
