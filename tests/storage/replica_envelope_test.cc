// The replication envelope and wire (replication_wire.h): what a leader refuses before it
// reads anything (another incarnation, a lower epoch, a sender other than the hello, a
// malformed request), and the codec's own bounds.
#include <gtest/gtest.h>

#include <future>

#include "replica_cluster.h"
#include "replica_manager.h"
#include "replication_wire.h"

namespace sluice::fs_storage::replica_test {
namespace {

class Envelope : public ::testing::Test {
 protected:
  void SetUp() override { c.tell(); }
  Result<std::string> send(FetchRequest req, std::uint32_t from = 2) {
    std::promise<Result<std::string>> p;
    c.transports_[from]->request(NodeId{1}, kReplicaFetch, encode(req), 5s,
                                 [&](Result<std::string> r) { p.set_value(std::move(r)); });
    return p.get_future().get();
  }
  FetchRequest good() {
    FetchRequest r;
    r.env = Incarnated{shard_ref(), LeaderEpoch{1}, NodeId{2}, "dir-2"};
    return r;
  }
  Cluster c{3};
};

TEST_F(Envelope, AnotherIncarnationIsAStaleRoute) {
  auto req = good();
  req.env.ref.incarnation = Incarnation{8};
  auto r = send(req);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::stale_route);
  EXPECT_NE(r.error().message.find("incarnation 7"), std::string::npos) << r.error().message;
}

// Regression (review): a fetch from beyond the leader's end (a follower holding a tail
// the leader does not have) was refused only after its position had been recorded, so the
// replica looked caught up and could join the in-sync set with a divergent log.
TEST_F(Envelope, AFetchFromBeyondTheLeadersEndRecordsNoProgress) {
  ASSERT_TRUE(c.logs_[1]->append(1).get());  // the leader's log ends at 1
  auto req = good();
  req.fetch_offset = Offset{5};
  req.durable_end = Offset{5};
  auto r = send(req);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::conflict);
  for (const auto& p : c.managers_[1]->progress(shard_ref()))
    if (p.broker == NodeId{2}) EXPECT_LT(p.durable_end, Offset{5}) << "a divergent position was recorded";
}

TEST_F(Envelope, AnUnknownShardIsNotFound) {
  auto req = good();
  req.env.ref.shard = ShardIndex{3};
  auto r = send(req);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::not_found);
}

TEST_F(Envelope, ALowerEpochIsFenced) {
  c.set_catalog([](ReplicaAssignment& a) { a.leader_epoch = LeaderEpoch{5}; });
  c.tell({1});
  auto r = send(good());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::fenced);
}

TEST_F(Envelope, ASenderOtherThanTheHelloIsRefused) {
  auto req = good();
  req.env.sender = NodeId{3};
  auto r = send(req);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::invalid_argument);
  req = good();
  req.env.directory_id = "someone-else";
  r = send(req);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::invalid_argument);
}

TEST_F(Envelope, AMalformedRequestIsMalformedBody) {
  std::promise<Result<std::string>> p;
  c.transports_[2]->request(NodeId{1}, kReplicaFetch, "garbage", 5s,
                            [&](Result<std::string> r) { p.set_value(std::move(r)); });
  auto r = p.get_future().get();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::malformed_body);
}

TEST(ReplicationWire, EveryTruncationAndTrailingByteIsMalformed) {
  FetchRequest req;
  req.env = Incarnated{shard_ref(), LeaderEpoch{3}, NodeId{2}, "dir-2"};
  req.fetch_offset = Offset{10};
  req.durable_end = Offset{9};
  req.max_bytes = 1000;
  req.wait_ms = 5;
  const auto bytes = encode(req);
  auto back = decode_fetch_request(bytes);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->env.ref, req.env.ref);
  EXPECT_EQ(back->env.directory_id, "dir-2");
  EXPECT_EQ(back->fetch_offset, Offset{10});
  EXPECT_EQ(back->durable_end, Offset{9});
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    auto r = decode_fetch_request(std::string_view(bytes).substr(0, n));
    ASSERT_FALSE(r) << n;
    EXPECT_EQ(r.error().code, Errc::malformed_body);
  }
  EXPECT_FALSE(decode_fetch_request(bytes + "x"));

  FetchResponse resp;
  resp.leader_epoch = LeaderEpoch{3};
  resp.high_watermark = Offset{4};
  resp.chunk_base = Offset{4};
  const std::string chunk(100, 'c');
  resp.chunk = chunk;
  const auto rb = encode(resp);
  auto rback = decode_fetch_response(rb);
  ASSERT_TRUE(rback);
  EXPECT_EQ(rback->chunk, chunk);
  EXPECT_EQ(rback->high_watermark, Offset{4});
  for (std::size_t n = 0; n < rb.size(); ++n)
    EXPECT_FALSE(decode_fetch_response(std::string_view(rb).substr(0, n))) << n;

  const auto eb = encode(EpochEndRequest{req.env, LeaderEpoch{2}});
  ASSERT_TRUE(decode_epoch_end_request(eb));
  for (std::size_t n = 0; n < eb.size(); ++n)
    EXPECT_FALSE(decode_epoch_end_request(std::string_view(eb).substr(0, n))) << n;
  EXPECT_FALSE(decode_epoch_end_response("short"));
}

TEST(ReplicationWire, TheEnvelopeNamesWhichLogOfTheShardItSpeaksOf) {
  EpochEndRequest req{Incarnated{shard_ref(), LeaderEpoch{3}, NodeId{2}, "dir-2", LogKind::groups},
                      LeaderEpoch{2}};
  auto bytes = encode(req);
  auto back = decode_epoch_end_request(bytes);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->env.log, LogKind::groups);
  // The log byte is the envelope's last; the epoch (8 bytes) follows it.
  bytes[bytes.size() - 9] = 7;
  auto bad = decode_epoch_end_request(bytes);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, Errc::malformed_body);
  EXPECT_NE(bad.error().message.find("unknown log kind"), std::string::npos) << bad.error().message;
}

// The lost_copy_fetch flag (docs/replication.md "Replication messages") is a trailing byte,
// present only when set: a request without it is byte for byte the one older builds send
// and the only one they accept, so nothing changes on the wire before the finalize.
TEST(ReplicationWire, AFetchSaysItsCopyIsLostInATrailingByteOnlyWhenItIs) {
  FetchRequest req;
  req.env = Incarnated{shard_ref(), LeaderEpoch{3}, NodeId{2}, "dir-2"};
  req.fetch_offset = Offset{10};
  req.durable_end = Offset{10};
  req.max_bytes = 1000;
  req.wait_ms = 5;
  const auto plain = encode(req);
  // The format before the flag, field by field.
  std::string old;
  auto le = [&](std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) old.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  auto str = [&](const std::string& v) {
    le(v.size(), 2);
    old += v;
  };
  str(req.env.ref.stream.tenant);
  str(req.env.ref.stream.ns);
  str(req.env.ref.stream.name);
  le(req.env.ref.incarnation.value(), 8);
  le(req.env.ref.shard.value(), 4);
  le(3, 8);
  le(2, 4);
  str("dir-2");
  le(0, 1);  // the data log
  le(10, 8);
  le(10, 8);
  le(1000, 4);
  le(5, 4);
  EXPECT_EQ(plain, old);
  auto back = decode_fetch_request(plain);
  ASSERT_TRUE(back);
  EXPECT_FALSE(back->copy_lost);

  req.copy_lost = true;
  const auto lost = encode(req);
  EXPECT_EQ(lost, old + '\x01');
  back = decode_fetch_request(lost);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_TRUE(back->copy_lost);
  EXPECT_EQ(back->fetch_offset, Offset{10});
  EXPECT_EQ(back->wait_ms, 5u);
  // Flags this build does not know, and anything after the flags, are malformed.
  for (int f : {0x00, 0x02, 0x03, 0x80, 0xff}) {
    auto r = decode_fetch_request(old + static_cast<char>(f));
    ASSERT_FALSE(r) << f;
    EXPECT_EQ(r.error().code, Errc::malformed_body);
    EXPECT_NE(r.error().message.find("unknown fetch flags"), std::string::npos) << r.error().message;
  }
  auto two = decode_fetch_request(lost + '\x01');
  ASSERT_FALSE(two);
  EXPECT_EQ(two.error().code, Errc::malformed_body);
}

}  // namespace
}  // namespace sluice::fs_storage::replica_test
