// The cluster-id-presenting libraft transport (plugins/raft-meta/cluster_transport.h):
// handshakes over loopback TCP between transports and raw sockets, close with handshakes in
// flight, and a real three-server libraft group on it that a fourth server of another
// cluster cannot join. Everything runs on one uv loop in the test thread; conditions are
// polled with a generous deadline, never slept for.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cluster_transport.h"

extern "C" {
#include <raft.h>
#include <raft/uv.h>
}

namespace sluice::raft_meta {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

constexpr auto kPatience = 30s;

std::uint16_t free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sa.sin_port = 0;
  EXPECT_EQ(::bind(fd, reinterpret_cast<struct sockaddr*>(&sa), sizeof sa), 0);
  socklen_t len = sizeof sa;
  ::getsockname(fd, reinterpret_cast<struct sockaddr*>(&sa), &len);
  ::close(fd);
  return ntohs(sa.sin_port);
}

std::string loopback(std::uint16_t port) { return "127.0.0.1:" + std::to_string(port); }

const char* level_name(LogLevel l) {
  switch (l) {
    case LogLevel::debug: return "DEBUG";
    case LogLevel::info: return "INFO";
    case LogLevel::warn: return "WARN";
    case LogLevel::error: return "ERROR";
  }
  return "?";
}

// One transport under test with what it reported.
struct Endpoint {
  std::string name;
  raft_id id = 0;
  std::string address;
  std::string cluster_id;  // read by the transport's getter at every connection
  struct raft_uv_transport transport{};
  struct Line {
    LogLevel level;
    std::string text;
  };
  std::vector<Line> logs;
  struct Accepted {
    raft_id id;
    std::string address;
    uv_stream_t* stream;
  };
  std::vector<Accepted> accepted;
  bool close_called = false;
  bool closed = false;  // the transport's close callback fired
  int closed_order = 0;
  bool freed = false;

  int count(LogLevel level, std::string_view needle) const {
    int n = 0;
    for (const auto& l : logs)
      if (l.level == level && l.text.find(needle) != std::string::npos) n++;
    return n;
  }
  bool logged(LogLevel level, std::string_view needle) const { return count(level, needle) > 0; }
  int warnings() const {
    int n = 0;
    for (const auto& l : logs) n += l.level >= LogLevel::warn;
    return n;
  }
};

int g_order = 0;  // sequence of callbacks, to check their order

struct Conn {
  struct raft_uv_connect req{};
  bool done = false;
  int status = -1;
  uv_stream_t* stream = nullptr;
  int order = 0;
  int calls = 0;
};

void on_connect(struct raft_uv_connect* req, uv_stream_t* stream, int status) {
  auto* c = static_cast<Conn*>(req->data);
  c->calls++;
  c->done = true;
  c->status = status;
  c->stream = stream;
  c->order = ++g_order;
}

void on_accept(struct raft_uv_transport* t, raft_id id, const char* address, uv_stream_t* stream) {
  auto* e = static_cast<Endpoint*>(t->data);
  e->accepted.push_back({id, address, stream});
}

void on_transport_closed(struct raft_uv_transport* t) {
  auto* e = static_cast<Endpoint*>(t->data);
  e->closed = true;
  e->closed_order = ++g_order;
}

// Reads everything arriving on a handed-over stream into `got`.
struct Reader {
  std::string got;
  char buf[4096];
  bool eof = false;
};

void reader_alloc(uv_handle_t* h, size_t, uv_buf_t* b) {
  auto* r = static_cast<Reader*>(h->data);
  *b = uv_buf_init(r->buf, sizeof r->buf);
}
void reader_read(uv_stream_t* s, ssize_t n, const uv_buf_t*) {
  auto* r = static_cast<Reader*>(s->data);
  if (n > 0) r->got.append(r->buf, static_cast<size_t>(n));
  if (n < 0) {
    r->eof = true;
    uv_read_stop(s);
  }
}

// --- raw sockets (blocking connect, non-blocking reads) ---

int raw_connect(std::uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sa.sin_port = htons(port);
  EXPECT_EQ(::connect(fd, reinterpret_cast<struct sockaddr*>(&sa), sizeof sa), 0) << strerror(errno);
  return fd;
}

void raw_send(int fd, std::string_view bytes) {
  ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
}

// Drains what is readable into `got`; true once the other end closed (EOF or reset).
bool raw_closed(int fd, std::string* got = nullptr) {
  char buf[1024];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      if (got) got->append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) return true;
    return errno != EAGAIN && errno != EWOULDBLOCK;
  }
}

int raw_listener(std::uint16_t* port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd, reinterpret_cast<struct sockaddr*>(&sa), sizeof sa), 0);
  EXPECT_EQ(::listen(fd, 16), 0);
  socklen_t len = sizeof sa;
  ::getsockname(fd, reinterpret_cast<struct sockaddr*>(&sa), &len);
  *port = ntohs(sa.sin_port);
  ::fcntl(fd, F_SETFL, O_NONBLOCK);
  return fd;
}

std::string le32(std::uint32_t v) {
  std::string s;
  for (int i = 0; i < 4; i++) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return s;
}
std::string le64(std::uint64_t v) {
  std::string s;
  for (int i = 0; i < 8; i++) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return s;
}

ClusterTransportOptions quiet_opts() {
  ClusterTransportOptions o;
  o.log_repeat_interval_ms = 0;  // every refusal logged: tests count them
  return o;
}

class ClusterTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(uv_loop_init(&loop_), 0);
    ASSERT_EQ(uv_timer_init(&loop_, &tick_), 0);
  }

  void TearDown() override {
    close_all();
    for (uv_stream_t* s : streams_)
      uv_close(reinterpret_cast<uv_handle_t*>(s), [](uv_handle_t* h) { raft_free(h); });
    for (int fd : fds_) ::close(fd);
    uv_close(reinterpret_cast<uv_handle_t*>(&tick_), nullptr);
    for (int i = 0; i < 10 && uv_loop_alive(&loop_); i++) uv_run(&loop_, UV_RUN_NOWAIT);
    // Every handle of every transport has been closed: nothing is left on the loop.
    EXPECT_EQ(uv_loop_close(&loop_), 0) << "uv handles left open";
  }

  // Closes (transport->close, then cluster_transport_close) every endpoint still open.
  virtual void close_all() {
    for (auto& e : endpoints_) {
      if (!e->close_called) {
        e->close_called = true;
        e->transport.close(&e->transport, on_transport_closed);
      }
    }
    EXPECT_TRUE(run_until([&] {
      for (auto& e : endpoints_)
        if (!e->closed) return false;
      return true;
    }));
    for (auto& e : endpoints_) {
      if (!e->freed) {
        cluster_transport_close(&e->transport);
        e->freed = true;
      }
    }
  }

  template <class Pred>
  bool run_until(Pred pred, std::chrono::milliseconds patience = kPatience) {
    auto deadline = std::chrono::steady_clock::now() + patience;
    uv_timer_start(&tick_, [](uv_timer_t*) {}, 5, 5);  // UV_RUN_ONCE returns at least every 5 ms
    bool ok = pred();
    while (!ok && std::chrono::steady_clock::now() < deadline) {
      uv_run(&loop_, UV_RUN_ONCE);
      ok = pred();
    }
    uv_timer_stop(&tick_);
    return ok;
  }

  Endpoint& make(std::string name, std::string cluster_id, raft_id id,
                 ClusterTransportOptions opts = quiet_opts(), std::uint16_t port = 0) {
    auto e = std::make_unique<Endpoint>();
    Endpoint* p = e.get();
    p->name = std::move(name);
    p->id = id;
    p->cluster_id = std::move(cluster_id);
    p->address = loopback(port ? port : free_port());
    p->transport.data = p;
    int rv = cluster_transport_init(
        &p->transport, &loop_, [p] { return p->cluster_id; },
        [p](LogLevel level, const std::string& text) {
          p->logs.push_back({level, text});
          if (level >= LogLevel::info)
            std::cerr << "[" << p->name << "] " << level_name(level) << " " << text << "\n";
        },
        opts);
    EXPECT_EQ(rv, 0);
    EXPECT_EQ(p->transport.data, p) << "init must keep transport->data";
    endpoints_.push_back(std::move(e));
    return *p;
  }

  // transport->init + listen, as the uv io does.
  void start(Endpoint& e, bool listen = true) {
    ASSERT_EQ(e.transport.init(&e.transport, e.id, e.address.c_str()), 0) << e.transport.errmsg;
    if (listen) {
      ASSERT_EQ(e.transport.listen(&e.transport, on_accept), 0) << e.transport.errmsg;
    }
  }

  Conn& connect(Endpoint& from, raft_id to_id, const std::string& to_address, int* rv_out = nullptr) {
    conns_.push_back(std::make_unique<Conn>());
    Conn& c = *conns_.back();
    c.req.data = &c;
    int rv = from.transport.connect(&from.transport, &c.req, to_id, to_address.c_str(), on_connect);
    if (rv_out) {
      *rv_out = rv;
    } else {
      EXPECT_EQ(rv, 0) << from.transport.errmsg;
    }
    return c;
  }

  std::uint16_t port_of(const Endpoint& e) { return cluster_transport_listen_port(&e.transport); }

  int track(int fd) {
    fds_.push_back(fd);
    return fd;
  }
  void own(uv_stream_t* s) {
    if (s) streams_.push_back(s);
  }

  uv_loop_t loop_{};
  uv_timer_t tick_{};
  std::deque<std::unique_ptr<Endpoint>> endpoints_;
  std::deque<std::unique_ptr<Conn>> conns_;
  std::vector<uv_stream_t*> streams_;
  std::vector<int> fds_;
};

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

// --- a real libraft group on the transport ---

struct Server {
  Endpoint* ep = nullptr;
  std::string dir;
  struct raft_io io{};
  struct raft_fsm fsm{};
  struct raft raft{};
  bool started = false;
  bool raft_closed = false;
  std::vector<std::string> applied;
};

int fsm_apply(struct raft_fsm* fsm, const struct raft_buffer* buf, void** result) {
  auto* s = static_cast<Server*>(fsm->data);
  s->applied.emplace_back(static_cast<const char*>(buf->base), buf->len);
  *result = nullptr;
  return 0;
}
int fsm_snapshot(struct raft_fsm*, struct raft_buffer* bufs[], unsigned* n) {
  auto* arr = static_cast<struct raft_buffer*>(raft_malloc(sizeof(struct raft_buffer)));
  arr[0].base = raft_calloc(1, 8);
  arr[0].len = 8;
  *bufs = arr;
  *n = 1;
  return 0;
}
int fsm_restore(struct raft_fsm*, struct raft_buffer* buf) {
  raft_free(buf->base);
  return 0;
}

struct Apply {
  struct raft_apply req{};  // the function raft_apply hides the struct's plain name
  bool done = false;
  int status = -1;
};
struct Change {
  struct raft_change req{};
  bool done = false;
  int status = -1;
};

class ClusterTransportRaftTest : public ClusterTransportTest {
 protected:
  void TearDown() override {
    ClusterTransportTest::TearDown();
    std::error_code ec;
    for (auto& s : servers_) fs::remove_all(s->dir, ec);
  }

  void close_all() override {
    for (auto& s : servers_) {
      if (!s->started) continue;
      s->raft.data = s.get();
      raft_close(&s->raft, [](struct raft* r) {
        auto* s = static_cast<Server*>(r->data);
        // As raft_node.cc does: the uv io and the transport are released in raft's close
        // callback, by which time the transport's own close has completed.
        raft_uv_close(&s->io);
        cluster_transport_close(&s->ep->transport);
        s->ep->freed = true;
        s->ep->closed = true;
        s->ep->close_called = true;
        s->raft_closed = true;
      });
    }
    EXPECT_TRUE(run_until([&] {
      for (auto& s : servers_)
        if (s->started && !s->raft_closed) return false;
      return true;
    }));
    ClusterTransportTest::close_all();
  }

  Server& add_server(raft_id id, const std::string& cluster_id) {
    auto s = std::make_unique<Server>();
    std::string tmpl = (fs::temp_directory_path() / "sluice-transport-XXXXXX").string();
    EXPECT_NE(mkdtemp(tmpl.data()), nullptr);
    s->dir = tmpl;
    s->ep = &make("s" + std::to_string(id), cluster_id, id);
    EXPECT_EQ(raft_uv_init(&s->io, &loop_, s->dir.c_str(), &s->ep->transport), 0);
    raft_uv_set_snapshot_compression(&s->io, false);
    s->fsm.version = 1;
    s->fsm.data = s.get();
    s->fsm.apply = fsm_apply;
    s->fsm.snapshot = fsm_snapshot;
    s->fsm.restore = fsm_restore;
    EXPECT_EQ(raft_init(&s->raft, &s->io, &s->fsm, id, s->ep->address.c_str()), 0)
        << raft_errmsg(&s->raft);
    s->raft.data = s.get();
    raft_set_election_timeout(&s->raft, 500);
    raft_set_heartbeat_timeout(&s->raft, 50);
    raft_set_max_catch_up_round_duration(&s->raft, 2000);
    servers_.push_back(std::move(s));
    return *servers_.back();
  }

  void start_server(Server& s) {
    ASSERT_EQ(raft_start(&s.raft), 0) << raft_errmsg(&s.raft);
    s.started = true;
  }

  // The member of `group` every member of `group` agrees is the leader, or null.
  Server* agreed_leader(const std::vector<Server*>& group) {
    Server* leader = nullptr;
    for (Server* s : group)
      if (raft_state(&s->raft) == RAFT_LEADER) {
        if (leader) return nullptr;
        leader = s;
      }
    if (!leader) return nullptr;
    for (Server* s : group) {
      raft_id id = 0;
      const char* addr = nullptr;
      raft_leader(&s->raft, &id, &addr);
      if (id != leader->ep->id) return nullptr;
    }
    return leader;
  }

  void propose(Server& leader, Apply& a, const std::string& entry) {
    ASSERT_EQ(entry.size() % 8, 0u) << "libraft's uv io needs entries of a multiple of 8 bytes";
    struct raft_buffer buf;
    buf.len = entry.size();
    buf.base = raft_malloc(buf.len);
    std::memcpy(buf.base, entry.data(), buf.len);
    a.req.data = &a;
    int rv = raft_apply(&leader.raft, &a.req, &buf, 1, [](struct raft_apply* req, int status, void*) {
      auto* a = static_cast<Apply*>(req->data);
      a->done = true;
      a->status = status;
    });
    if (rv != 0) raft_free(buf.base);
    ASSERT_EQ(rv, 0) << raft_errmsg(&leader.raft);
  }

  std::vector<std::unique_ptr<Server>> servers_;
};

void on_change(struct raft_change* req, int status) {
  auto* c = static_cast<Change*>(req->data);
  c->done = true;
  c->status = status;
}

TEST_F(ClusterTransportRaftTest, ThreeMembersFormAGroupAndAMemberOfAnotherClusterCannotJoin) {
  std::vector<Server*> group;
  for (raft_id id = 1; id <= 3; id++) group.push_back(&add_server(id, "cluster-A"));
  struct raft_configuration conf;
  raft_configuration_init(&conf);
  for (Server* s : group)
    ASSERT_EQ(raft_configuration_add(&conf, s->ep->id, s->ep->address.c_str(), RAFT_VOTER), 0);
  for (Server* s : group) ASSERT_EQ(raft_bootstrap(&s->raft, &conf), 0) << raft_errmsg(&s->raft);
  raft_configuration_close(&conf);
  for (Server* s : group) start_server(*s);

  Server* leader = nullptr;
  ASSERT_TRUE(run_until([&] { return (leader = agreed_leader(group)) != nullptr; }))
      << "no leader elected over the cluster transport";

  Apply first;
  propose(*leader, first, "entry-one-000001");  // 16 bytes
  ASSERT_TRUE(run_until([&] {
    if (!first.done) return false;
    for (Server* s : group)
      if (s->applied.size() < 1) return false;
    return true;
  }));
  ASSERT_EQ(first.status, 0);
  for (Server* s : group) {
    ASSERT_EQ(s->applied.size(), 1u) << "server " << s->ep->id;
    EXPECT_EQ(s->applied[0], "entry-one-000001");
    EXPECT_EQ(s->ep->warnings(), 0) << "server " << s->ep->id;
  }

  // A fourth server of another cluster: added, then assigned voter. The leader's
  // connections to it are refused, so it never catches up.
  Server& foreign = add_server(4, "cluster-B");
  start_server(foreign);
  Change add;
  add.req.data = &add;
  ASSERT_EQ(raft_add(&leader->raft, &add.req, 4, foreign.ep->address.c_str(), on_change), 0);
  ASSERT_TRUE(run_until([&] { return add.done; }));
  ASSERT_EQ(add.status, 0) << "adding a spare commits on the three members";

  Change assign;
  assign.req.data = &assign;
  ASSERT_EQ(raft_assign(&leader->raft, &assign.req, 4, RAFT_VOTER, on_change), 0)
      << raft_errmsg(&leader->raft);
  const std::string leader_side =
      "refused raft connection: peer cluster id cluster-B, this member's cluster id cluster-A";
  const std::string foreign_side =
      "refused raft connection: peer cluster id cluster-A, this member's cluster id cluster-B";
  ASSERT_TRUE(run_until([&] {
    return leader->ep->logged(LogLevel::warn, leader_side) &&
           foreign.ep->logged(LogLevel::warn, foreign_side);
  })) << "both sides of the refused connection log both ids";
  // libraft gives up the promotion (max_catch_up_round_duration, 2 s here).
  ASSERT_TRUE(run_until([&] { return assign.done; }));
  EXPECT_NE(assign.status, 0) << "the foreign server must not become a voter";
  EXPECT_TRUE(foreign.ep->accepted.empty());

  // The group goes on; the foreign server has received nothing.
  Server* leader2 = nullptr;
  ASSERT_TRUE(run_until([&] { return (leader2 = agreed_leader(group)) != nullptr; }));
  Apply second;
  propose(*leader2, second, "entry-two-000002");
  ASSERT_TRUE(run_until([&] {
    if (!second.done) return false;
    for (Server* s : group)
      if (s->applied.size() < 2) return false;
    return true;
  }));
  EXPECT_EQ(second.status, 0);
  for (Server* s : group) EXPECT_EQ(s->applied.back(), "entry-two-000002");
  EXPECT_TRUE(foreign.applied.empty());
  EXPECT_EQ(raft_last_applied(&foreign.raft), 0u);
  raft_id foreign_leader = 0;
  const char* foreign_leader_addr = nullptr;
  raft_leader(&foreign.raft, &foreign_leader, &foreign_leader_addr);
  EXPECT_EQ(foreign_leader, 0u) << "the foreign server never heard from the group";
  for (unsigned i = 0; i < leader2->raft.configuration.n; i++) {
    const auto& srv = leader2->raft.configuration.servers[i];
    if (srv.id == 4) {
      EXPECT_NE(srv.role, RAFT_VOTER);
    }
  }
}

}  // namespace
}  // namespace sluice::raft_meta
