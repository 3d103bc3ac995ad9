// The core's peer transport (core/peer_transport.h) on loopback: real sockets, one I/O
// thread per transport. Nothing sleeps for correctness: every wait has a generous deadline.
#include <gtest/gtest.h>

#include <boost/asio.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "peer_test_support.h"

using namespace sluice;
using namespace sluice::core;
using namespace std::chrono_literals;

TEST(PeerWire, HeaderAndHelloRoundTrip) {
  peerwire::Header h{peerwire::kFlagResponse | peerwire::kFlagError, 0x0123, 0x1122334455667788ull, 0};
  auto frame = peerwire::encode_frame(h, "abc");
  ASSERT_EQ(frame.size(), 19u);
  auto d = peerwire::decode_header(reinterpret_cast<const unsigned char*>(frame.data()));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->flags, h.flags);
  EXPECT_EQ(d->type, 0x0123);
  EXPECT_EQ(d->request_id, 0x1122334455667788ull);
  EXPECT_EQ(d->payload_len, 3u);
  auto hello = peerwire::decode_hello(peerwire::encode_hello({NodeId{7}, "cid", "did"}));
  ASSERT_TRUE(hello.ok());
  EXPECT_EQ(hello->node, NodeId{7});
  EXPECT_EQ(hello->cluster_id, "cid");
  EXPECT_EQ(hello->directory_id, "did");
  EXPECT_FALSE(peerwire::decode_hello("SLUICEPX").ok());
  auto e = peerwire::decode_error(peerwire::encode_error(Error(Errc::fenced, "deposed", Outcome::definite)));
  EXPECT_EQ(e.code, Errc::fenced);
  EXPECT_EQ(e.message, "deposed");
}

TEST(PeerDirectory, StaticEntriesWinOverTheCatalog) {
  PeerDirectory d;
  BrokerInfo b;
  b.id = NodeId{1};
  b.peer_address = "10.0.0.1:7802";
  d.replace_from_catalog({b});
  EXPECT_EQ(d.lookup(NodeId{1}).value(), "10.0.0.1:7802");
  d.set_static(PeerDirectory::parse_static(" 1=127.0.0.1:9, 2=h:1 ").value());
  EXPECT_EQ(d.lookup(NodeId{1}).value(), "127.0.0.1:9");
  EXPECT_EQ(d.lookup(NodeId{2}).value(), "h:1");
  EXPECT_FALSE(d.lookup(NodeId{3}).has_value());
  EXPECT_FALSE(PeerDirectory::parse_static("x=1:2").ok());
  EXPECT_FALSE(PeerDirectory::parse_static("1=nocolon").ok());
  EXPECT_TRUE(PeerDirectory::parse_static("").ok());
}

TEST(PeerTransport, RoundTripCarriesTheSendersIdentity) {
  TestNode a(1), b(2);
  a.knows(b);
  echo_handler(*b.t);
  Answer ans;
  a.t->request(NodeId{2}, kEcho, "hi", 10s, ans.cb());
  auto r = ans.get();
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r.value(), "from 1/dir-1: hi");
  EXPECT_EQ(a.t->self(), NodeId{1});
}

TEST(PeerTransport, ConcurrentRequestsShareOneConnection) {
  TestNode a(1), b(2);
  a.knows(b);
  // Answers in reverse order once all have arrived: the request ids must match them up.
  constexpr int kN = 64;
  std::mutex mu;
  std::vector<std::pair<std::string, PeerResponder>> held;
  ASSERT_TRUE(b.t->handle(kHold, [&](const PeerIdentity&, std::string p, PeerResponder r) {
                 std::vector<std::pair<std::string, PeerResponder>> all;
                 {
                   std::lock_guard lk(mu);
                   held.emplace_back(std::move(p), std::move(r));
                   if (held.size() < kN) return;
                   all = std::move(held);
                 }
                 for (auto it = all.rbegin(); it != all.rend(); ++it) it->second("re:" + it->first);
               }).ok());
  std::vector<std::unique_ptr<Answer>> answers;
  std::vector<std::thread> senders;
  for (int i = 0; i < kN; ++i) answers.push_back(std::make_unique<Answer>());
  for (int s = 0; s < 4; ++s)
    senders.emplace_back([&, s] {
      for (int i = s; i < kN; i += 4) a.t->request(NodeId{2}, kHold, std::to_string(i), 20s, answers[i]->cb());
    });
  for (auto& th : senders) th.join();
  for (int i = 0; i < kN; ++i) {
    auto r = answers[i]->get();
    ASSERT_TRUE(r.ok()) << i << ": " << r.error().to_string();
    EXPECT_EQ(r.value(), "re:" + std::to_string(i));
  }
  EXPECT_EQ(b.t->accepted_connections(), 1u);
}

TEST(PeerTransport, AHandlerAnswersLaterFromAnotherThread) {
  TestNode a(1), b(2);
  a.knows(b);
  std::mutex mu;
  std::optional<PeerResponder> slot;
  ASSERT_TRUE(b.t->handle(kHold, [&](const PeerIdentity&, std::string, PeerResponder r) {
                 std::lock_guard lk(mu);
                 slot.emplace(std::move(r));
               }).ok());
  Answer ans;
  a.t->request(NodeId{2}, kHold, "", 20s, ans.cb());
  ASSERT_TRUE(poll_until([&] { std::lock_guard lk(mu); return slot.has_value(); }));
  std::thread([&] {
    std::lock_guard lk(mu);
    (*slot)(Error(Errc::fenced, "epoch 4 is behind 5", Outcome::definite));
  }).join();
  auto r = ans.get();
  ASSERT_FALSE(r.ok());
  // The handler's Error, verbatim.
  EXPECT_EQ(r.error().code, Errc::fenced);
  EXPECT_EQ(r.error().message, "epoch 4 is behind 5");
  EXPECT_EQ(r.error().outcome, Outcome::definite);
}

TEST(PeerTransport, ARequestTimesOutOnceAndALateAnswerIsIgnored) {
  TestNode a(1), b(2);
  a.knows(b);
  std::mutex mu;
  std::optional<PeerResponder> slot;
  ASSERT_TRUE(b.t->handle(kHold, [&](const PeerIdentity&, std::string, PeerResponder r) {
                 std::lock_guard lk(mu);
                 slot.emplace(std::move(r));
               }).ok());
  Answer ans;
  a.t->request(NodeId{2}, kHold, "", 200ms, ans.cb());
  auto r = ans.get();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::timeout);
  EXPECT_EQ(r.error().outcome, Outcome::uncertain);
  ASSERT_TRUE(poll_until([&] { std::lock_guard lk(mu); return slot.has_value(); }));
  {
    std::lock_guard lk(mu);
    (*slot)(std::string("late"));
  }
  // The connection still serves, and the late answer called nobody.
  echo_handler(*b.t);
  Answer ok;
  a.t->request(NodeId{2}, kEcho, "x", 10s, ok.cb());
  ASSERT_TRUE(ok.get().ok());
  EXPECT_EQ(ans.calls.load(), 1);
}

TEST(PeerTransport, AnUnknownPeerIsUnavailableAndTheCallbackIsNeverInline) {
  TestNode a(1);
  Answer ans;
  std::atomic<bool> returned{false};
  const auto caller = std::this_thread::get_id();
  a.t->request(NodeId{9}, kEcho, "", 10s, [&](Result<std::string> r) {
    // Inline means on this thread before request() returned; the I/O thread may well run
    // the callback before this thread gets to set `returned` (seen under load).
    EXPECT_TRUE(returned.load() || std::this_thread::get_id() != caller) << "the callback ran inside request()";
    ans.cb()(std::move(r));
  });
  returned = true;
  auto r = ans.get();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::unavailable);
  EXPECT_NE(r.error().message.find("peer 9"), std::string::npos) << r.error().message;
  EXPECT_NE(ans.thread, std::this_thread::get_id());
}

TEST(PeerTransport, APeerThatIsDownIsUnavailable) {
  std::uint16_t port = 0;
  {
    asio::io_context io;
    tcp::acceptor acc(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    port = acc.local_endpoint().port();
  }  // closed: nothing listens there
  TestNode a(1);
  a.dir->set_static({{NodeId{2}, "127.0.0.1:" + std::to_string(port)}});
  Answer ans;
  a.t->request(NodeId{2}, kEcho, "", 10s, ans.cb());
  auto r = ans.get();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::unavailable);
  EXPECT_NE(r.error().outcome, Outcome::uncertain);  // nothing was sent
}

TEST(PeerTransport, AConnectionLostAfterSendingIsUnavailableUncertain) {
  TestNode a(1);
  auto b = std::make_unique<TestNode>(2);
  a.knows(*b);
  std::atomic<bool> got{false};
  std::mutex mu;
  std::optional<PeerResponder> slot;
  ASSERT_TRUE(b->t->handle(kHold, [&](const PeerIdentity&, std::string, PeerResponder r) {
                  std::lock_guard lk(mu);
                  slot.emplace(std::move(r));
                  got = true;
                }).ok());
  Answer ans;
  a.t->request(NodeId{2}, kHold, "", 20s, ans.cb());
  ASSERT_TRUE(poll_until([&] { return got.load(); }));
  b->t->stop();  // the node goes away with the request in hand
  auto r = ans.get();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::unavailable);
  EXPECT_EQ(r.error().outcome, Outcome::uncertain);
  {
    std::lock_guard lk(mu);
    slot.reset();  // answering a stopped transport does nothing
  }
  b.reset();
  Answer again;
  a.t->request(NodeId{2}, kHold, "", 10s, again.cb());
  auto r2 = again.get();
  ASSERT_FALSE(r2.ok());
  EXPECT_EQ(r2.error().code, Errc::unavailable);
}

TEST(PeerTransport, AnotherClusterIsRefusedBothWaysNamingBothIds) {
  TestNode a(1, "cluster-aaa"), c(3, "cluster-ccc");
  a.knows(c);
  c.knows(a);
  echo_handler(*a.t);
  echo_handler(*c.t);
  for (auto [from, to] : {std::pair{&a, &c}, std::pair{&c, &a}}) {
    Answer ans;
    from->t->request(to->id, kEcho, "", 10s, ans.cb());
    auto r = ans.get();
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, Errc::cluster_id_mismatch) << r.error().to_string();
    EXPECT_NE(r.error().message.find("cluster-aaa"), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find("cluster-ccc"), std::string::npos) << r.error().message;
    // Both sides log it with both ids.
    EXPECT_TRUE(poll_until([&] { return from->log->has("cluster-aaa", "cluster-ccc", "refused"); }))
        << from->log->all();
    EXPECT_TRUE(poll_until([&] { return to->log->has("cluster-aaa", "cluster-ccc", "refused"); }))
        << to->log->all();
  }
}

TEST(PeerTransport, BadFramesCloseThatConnectionAndTheNodeServesOn) {
  TestNode a(1), b(2);
  a.knows(b);
  echo_handler(*b.t);
  {
    RawClient garbage(b.t->port());
    garbage.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_TRUE(garbage.closed_by_peer());
    EXPECT_TRUE(poll_until([&] { return b.log->has("malformed frame", "bad magic"); })) << b.log->all();
  }
  {
    RawClient trunc(b.t->port());
    trunc.hello();
    std::string frame = peerwire::encode_frame(peerwire::Header{0, kEcho, 1, 0}, std::string(100, 'x'));
    trunc.send(frame.substr(0, peerwire::kHeaderBytes + 10));
    trunc.s.shutdown(tcp::socket::shutdown_send);
    EXPECT_TRUE(trunc.closed_by_peer());
    EXPECT_TRUE(poll_until([&] { return b.log->has("truncated frame"); })) << b.log->all();
  }
  {
    RawClient big(b.t->port());
    big.hello();
    std::string header = peerwire::encode_frame(peerwire::Header{0, kEcho, 1, 0}, "");
    const std::uint32_t len = kMaxPeerFrameBytes;  // with the header: 16 bytes over the limit
    for (int i = 0; i < 4; ++i) header[12 + i] = static_cast<char>((len >> (8 * i)) & 0xff);
    big.send(header);
    EXPECT_TRUE(big.closed_by_peer());
    EXPECT_TRUE(poll_until([&] { return b.log->has("oversized frame"); })) << b.log->all();
  }
  {
    RawClient nohello(b.t->port());
    nohello.send(peerwire::encode_frame(peerwire::Header{0, kEcho, 1, 0}, "x"));
    EXPECT_TRUE(nohello.closed_by_peer());
    EXPECT_TRUE(poll_until([&] { return b.log->has("not a hello"); })) << b.log->all();
  }
  {
    // Regression (review): a first frame claiming 64 MiB was allocated and zeroed in full
    // before it was known to be a hello, per unauthenticated connection. It is refused from
    // its header: the connection closes without the payload ever being sent.
    RawClient huge(b.t->port());
    std::string header = peerwire::encode_frame(peerwire::Header{0, peerwire::kHelloType, 0, 0}, "");
    const std::uint32_t len = kMaxPeerFrameBytes - 64;  // a legal frame size, no legal hello
    for (int i = 0; i < 4; ++i) header[12 + i] = static_cast<char>((len >> (8 * i)) & 0xff);
    huge.send(header);
    EXPECT_TRUE(huge.closed_by_peer());
    EXPECT_TRUE(poll_until([&] { return b.log->has("malformed frame", "more than a hello"); })) << b.log->all();
  }
  Answer ans;
  a.t->request(NodeId{2}, kEcho, "still", 10s, ans.cb());
  auto r = ans.get();
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r.value(), "from 1/dir-1: still");
}

TEST(PeerTransport, AnUnhandledTypeIsNotSupported) {
  TestNode a(1), b(2);
  a.knows(b);
  Answer ans;
  a.t->request(NodeId{2}, 0x01ff, "", 10s, ans.cb());
  auto r = ans.get();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::not_supported);
  EXPECT_NE(r.error().message.find("0x01ff"), std::string::npos) << r.error().message;
  // The core's ping is handled by the core.
  Answer ping;
  a.t->request(NodeId{2}, kPeerPing, "", 10s, ping.cb());
  auto p = ping.get();
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p.value(), "pong");
}

TEST(PeerTransport, HandleRefusesASecondHandler) {
  TestNode a(1);
  echo_handler(*a.t);
  auto r = a.t->handle(kEcho, [](const PeerIdentity&, std::string, PeerResponder) {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::conflict);
  EXPECT_EQ(a.t->handle(kPeerPing, [](const PeerIdentity&, std::string, PeerResponder) {}).error().code,
            Errc::conflict);
  a.t->unhandle(kEcho);
  EXPECT_TRUE(a.t->handle(kEcho, [](const PeerIdentity&, std::string, PeerResponder) {}).ok());
}

TEST(PeerTransport, UnhandleWaitsForARunningHandler) {
  TestNode a(1), b(2);
  a.knows(b);
  std::mutex mu;
  std::condition_variable cv;
  bool entered = false, release = false;
  ASSERT_TRUE(b.t->handle(kHold, [&](const PeerIdentity&, std::string, PeerResponder r) {
                 std::unique_lock lk(mu);
                 entered = true;
                 cv.notify_all();
                 cv.wait(lk, [&] { return release; });
                 r(std::string("done"));
               }).ok());
  Answer ans;
  a.t->request(NodeId{2}, kHold, "", 20s, ans.cb());
  {
    std::unique_lock lk(mu);
    ASSERT_TRUE(cv.wait_for(lk, kWait, [&] { return entered; }));
  }
  std::atomic<bool> unhandled{false};
  std::thread th([&] {
    b.t->unhandle(kHold);
    unhandled = true;
  });
  // It must not return while the handler runs (a bounded look, not a correctness sleep:
  // returning early is the failure being looked for).
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(unhandled.load());
  {
    std::lock_guard lk(mu);
    release = true;
  }
  cv.notify_all();
  th.join();
  EXPECT_TRUE(unhandled.load());
  auto r = ans.get();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value(), "done");
  Answer after;
  a.t->request(NodeId{2}, kHold, "", 10s, after.cb());
  auto r2 = after.get();
  ASSERT_FALSE(r2.ok());
  EXPECT_EQ(r2.error().code, Errc::not_supported);
}

TEST(PeerTransport, FailpointsDropAndDelayTrafficToAPeer) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("sluice-failpoints-" + std::to_string(::getpid()) + ".txt");
  std::filesystem::remove(path);
  TestNode a(1, "cluster-a", path.string()), b(2);
  a.knows(b);
  echo_handler(*b.t);
  {
    Answer ans;
    a.t->request(NodeId{2}, kEcho, "x", 10s, ans.cb());
    ASSERT_TRUE(ans.get().ok());
  }
  { std::ofstream(path) << "drop 2\n"; }
  {
    Answer ans;
    a.t->request(NodeId{2}, kEcho, "x", 300ms, ans.cb());
    auto r = ans.get();
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, Errc::timeout);
  }
  { std::ofstream(path) << "# a partition healed into latency\ndelay 2 400\n"; }
  {
    const auto t0 = std::chrono::steady_clock::now();
    Answer ans;
    a.t->request(NodeId{2}, kEcho, "x", 20s, ans.cb());
    ASSERT_TRUE(ans.get().ok());
    EXPECT_GE(std::chrono::steady_clock::now() - t0, 400ms);
  }
  std::filesystem::remove(path);
  {
    Answer ans;
    a.t->request(NodeId{2}, kEcho, "x", 10s, ans.cb());
    ASSERT_TRUE(ans.get().ok());
  }
  EXPECT_TRUE(a.log->has("failpoint file"));
}

TEST(PeerTransport, ProbePeerReportsTheIdentityOrTheRefusal) {
  TestNode b(2, "cluster-a");
  auto ok = probe_peer(b.address(), {NodeId{5}, "cluster-a", "probe"}, 10s);
  ASSERT_TRUE(ok.ok()) << ok.error().to_string();
  EXPECT_EQ(ok->peer.node, NodeId{2});
  EXPECT_EQ(ok->peer.directory_id, "dir-2");
  auto bad = probe_peer(b.address(), {NodeId{5}, "cluster-z", "probe"}, 10s);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, Errc::cluster_id_mismatch);
  EXPECT_NE(bad.error().message.find("cluster-z"), std::string::npos);
  EXPECT_NE(bad.error().message.find("cluster-a"), std::string::npos);
}

TEST(PeerTransport, UnhandleFromInsideItsOwnHandlerDoesNotHang) {
  TestNode a(1), b(2);
  a.knows(b);
  ASSERT_TRUE(b.t->handle(kHold, [&b](const PeerIdentity&, std::string, PeerResponder r) {
                 b.t->unhandle(kHold);  // the SDK says not to; it must not deadlock the node
                 r(std::string("last"));
               }).ok());
  Answer first;
  a.t->request(NodeId{2}, kHold, "", 10s, first.cb());
  auto r = first.get();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value(), "last");
  Answer second;
  a.t->request(NodeId{2}, kHold, "", 10s, second.cb());
  EXPECT_EQ(second.get().error().code, Errc::not_supported);
}

TEST(PeerTransport, APeerThatNeverSaysHelloIsDroppedAndItsRequestsFailUnavailable) {
  asio::io_context io;
  tcp::acceptor mute(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  TestNode a(1, "cluster-a", "", 300ms);
  a.dir->set_static({{NodeId{2}, "127.0.0.1:" + std::to_string(mute.local_endpoint().port())}});
  Answer ans;
  a.t->request(NodeId{2}, kEcho, "", 20s, ans.cb());
  tcp::socket held(io);
  mute.accept(held);  // accepted, and silent
  auto r = ans.get();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::unavailable);
  EXPECT_NE(r.error().message.find("no hello"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().outcome, Outcome::uncertain);  // queued behind the hello: never sent
}
