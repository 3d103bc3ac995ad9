// Consumer groups: at-least-once delivery, ack/nack/timeout redelivery on an injected clock
// (no sleeps), dead letters with their headers, replay, durability across crashes, and
// groups per shard incarnation.
#include <gtest/gtest.h>

#include <tuple>

#include <atomic>

#include "group.h"
#include "group_ops.h"
#include "group_records.h"
#include "shard_log.h"
#include "storage_test_util.h"

namespace sluice::fs_storage::testing {
namespace {

using sluice::testing::TestHost;

std::vector<std::uint64_t> offsets_of(const GroupDelivery& d) {
  std::vector<std::uint64_t> v;
  for (auto& i : d.records) v.push_back(i.offset.value());
  return v;
}
std::vector<std::uint32_t> deliveries_of(const GroupDelivery& d) {
  std::vector<std::uint32_t> v;
  for (auto& i : d.records) v.push_back(i.delivery);
  return v;
}
std::vector<Offset> offs(std::initializer_list<std::uint64_t> l) {
  std::vector<Offset> v;
  for (auto o : l) v.push_back(Offset(o));
  return v;
}
// Values of the records at `offsets` found in the delivered batches.
std::map<std::uint64_t, std::string> values_in(const GroupDelivery& d) {
  std::map<std::uint64_t, std::string> out;
  for (auto& b : d.batches) {
    BatchReader r(b.data(), b.size());
    RecordView rv;
    while (r.next(rv)) out[rv.offset] = std::string(rv.value);
  }
  return out;
}

class GroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    host_.set("storage.retention_interval_ms", "0");
    fs_ = std::make_shared<FaultFileSystem>();
    start();
  }
  void start() {
    engine_ = std::make_unique<FsStorageEngine>(host_, fs_);
    engine_->set_group_clock([this] { return now_.load(); });
    shard_ = *engine_->open_shard(test_ref(), StreamSpec{});
  }
  void crash_and_restart() {
    fs_->crash(7, CrashOptions{});
    shard_.reset();
    engine_.reset();
    fs_->restart();
    start();
  }
  GroupDelivery fetch(std::uint32_t n, GroupOptions o = {}) {
    auto r = shard_->group_fetch("g", n, o);
    EXPECT_TRUE(r) << r.error().to_string();
    return r ? *r : GroupDelivery{};
  }
  GroupPosition pos(const std::string& g = "g") {
    auto r = shard_->group_position(g);
    EXPECT_TRUE(r) << r.error().to_string();
    return r ? *r : GroupPosition{};
  }

  TestHost host_;
  std::shared_ptr<FaultFileSystem> fs_;
  std::unique_ptr<FsStorageEngine> engine_;
  std::shared_ptr<ShardLog> shard_;
  std::atomic<std::int64_t> now_{1'000'000};
};

TEST_F(GroupTest, DeliversEveryRecordOnceInOrderWithWholeBatches) {
  ASSERT_TRUE(append_wait(*shard_, make_batch("a", 3)));
  ASSERT_TRUE(append_wait(*shard_, make_batch("b", 3)));
  ASSERT_TRUE(append_wait(*shard_, make_batch("c", 4)));
  auto d1 = fetch(5);
  EXPECT_EQ(offsets_of(d1), (std::vector<std::uint64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(deliveries_of(d1), std::vector<std::uint32_t>(5, 1));
  ASSERT_EQ(d1.batches.size(), 2u);
  EXPECT_EQ(values_in(d1).at(4), "b#1");
  auto d2 = fetch(100);
  EXPECT_EQ(offsets_of(d2), (std::vector<std::uint64_t>{5, 6, 7, 8, 9}));
  EXPECT_TRUE(fetch(100).records.empty()) << "nothing new, nothing due";
  EXPECT_EQ(pos().outstanding, 10u);
  ASSERT_TRUE(shard_->group_ack("g", offs({0, 1, 2, 3, 4, 5, 6, 7, 8, 9})));
  auto p = pos();
  EXPECT_EQ(p.committed.value(), 10u);
  EXPECT_EQ(p.outstanding, 0u);
  EXPECT_TRUE(fetch(100).records.empty());
  EXPECT_EQ(*shard_->list_groups(), std::vector<std::string>{"g"});
}

// Review finding: a consumer that fetched in a loop and never acked moved the whole shard
// into the group's outstanding set (memory, and a scan of it on every fetch), and one
// delivery held max_records batches whatever their size. Both are bounded now.
TEST_F(GroupTest, OutstandingDeliveriesAndADeliverysBytesAreBounded) {
  host_.set("storage.group_max_outstanding", "5");
  shard_.reset();
  engine_.reset();
  start();
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(append_wait(*shard_, make_batch("r" + std::to_string(i), 3)));  // 12 records
  EXPECT_EQ(offsets_of(fetch(100)), (std::vector<std::uint64_t>{0, 1, 2, 3, 4}));
  EXPECT_TRUE(fetch(100).records.empty()) << "no new delivery beyond 5 outstanding";
  EXPECT_EQ(pos().outstanding, 5u);
  ASSERT_TRUE(shard_->group_ack("g", offs({0, 1})));
  EXPECT_EQ(offsets_of(fetch(100)), (std::vector<std::uint64_t>{5, 6}));
  // Due again (a nack) is still delivered at the bound: redeliveries never wait.
  ASSERT_TRUE(shard_->group_nack("g", offs({2})));
  auto again = fetch(100);
  EXPECT_EQ(offsets_of(again), (std::vector<std::uint64_t>{2}));
  EXPECT_EQ(deliveries_of(again), (std::vector<std::uint32_t>{2}));

  // Bytes: 20 more records of 512 KiB, one per batch (offsets 12..31); a delivery of "up
  // to 100" for another group takes about 4 MiB of batches, not all 10 MiB.
  host_.set("storage.group_max_outstanding", "100000");
  shard_.reset();
  engine_.reset();
  start();
  const std::string big(512 << 10, 'x');
  for (int i = 0; i < 20; ++i) {
    BatchBuilder bb;
    bb.add(std::nullopt, big, {}, 1000);
    ASSERT_TRUE(append_wait(*shard_, bb.finish()));
  }
  auto d = shard_->group_fetch("big", 100, GroupOptions{});
  ASSERT_TRUE(d) << d.error().to_string();
  EXPECT_GT(d->records.size(), 12u) << "some of the large records";
  EXPECT_LT(d->records.size(), 32u) << "not all of them";
  std::size_t bytes = 0;
  for (const auto& b : d->batches) bytes += b.size();
  EXPECT_LT(bytes, std::size_t{5} << 20);
}

// Regression (review): a fetch that stopped at one of its bounds looked like one that
// delivered all there was, and a WebSocket group subscription then waited for a record
// beyond the high watermark with records ready below it, until an ack timeout. The fetch
// now says `more` when a bound stopped it, and only then (ABI 24).
TEST_F(GroupTest, AFetchStoppedByABoundSaysMoreAndOnlyThen) {
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(append_wait(*shard_, make_batch("r" + std::to_string(i), 3)));  // 12
  auto d = fetch(5);
  EXPECT_EQ(d.records.size(), 5u);
  EXPECT_TRUE(d.more) << "max_records stopped it";
  d = fetch(100);
  EXPECT_EQ(d.records.size(), 7u);
  EXPECT_FALSE(d.more) << "everything readable was delivered";
  d = fetch(100);
  EXPECT_TRUE(d.records.empty());
  EXPECT_FALSE(d.more) << "idle: nothing due, nothing new";
  ASSERT_TRUE(shard_->group_ack("g", offs({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11})));

  // Bytes: 40 records of 512 KiB, one per batch (offsets 12..51). A delivery holds about
  // 4 MiB, says `more` until the last, and fetching while it says so delivers them all.
  const std::string big(512 << 10, 'x');
  for (int i = 0; i < 40; ++i) {
    BatchBuilder bb;
    bb.add(std::nullopt, big, {}, 1000);
    ASSERT_TRUE(append_wait(*shard_, bb.finish()));
  }
  // Fetches while the answer says more (at most 20): the records delivered and the fetches.
  auto drain = [&] {
    std::size_t got = 0, fetches = 0;
    do {
      d = fetch(100);
      got += d.records.size();
      ++fetches;
    } while (d.more && fetches < 20);
    return std::pair{got, fetches};
  };
  auto [got, fetches] = drain();
  EXPECT_EQ(got, 40u);
  EXPECT_GT(fetches, 1u) << "the byte bound stopped the first delivery";
  EXPECT_FALSE(d.more);

  // Redeliveries past the byte bound: all 40 nacked, redelivered over several fetches.
  std::vector<Offset> all;
  for (std::uint64_t o = 12; o < 52; ++o) all.push_back(Offset(o));
  ASSERT_TRUE(shard_->group_nack("g", all));
  std::tie(got, fetches) = drain();
  EXPECT_EQ(got, 40u);
  EXPECT_GT(fetches, 1u);
  ASSERT_TRUE(shard_->group_ack("g", all));

  // Scanned bytes: a new group, its acks learned from the group log (as a new leader
  // learns them) for everything but offset 12, delivered first. The next fetch scans
  // acked batches only, stops at the scan bound with nothing to deliver, and says `more`.
  d = *shard_->group_fetch("h", 13, GroupOptions{});
  ASSERT_EQ(d.records.size(), 13u);
  ASSERT_TRUE(shard_->group_ack("h", offs({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11})));
  auto impl = engine_->replica(test_ref());
  ASSERT_TRUE(impl);
  std::string ack;
  ack.resize(4);
  wire::put_u32(ack.data(), 39);  // 19.5 MiB of batches: more than one scan
  for (std::uint64_t off = 13; off < 52; ++off) {
    char b[8];
    wire::put_u64(b, off);
    ack.append(b, 8);
  }
  ASSERT_TRUE(impl->apply_group_op(GroupOp{"h", group_records::kAck, ack, {}}));
  auto e = shard_->group_fetch("h", 100, GroupOptions{});
  ASSERT_TRUE(e) << e.error().to_string();
  EXPECT_TRUE(e->records.empty());
  EXPECT_TRUE(e->more) << "stopped scanning acked batches below the high watermark";
  fetches = 0;
  while (e && e->more && ++fetches < 20) e = shard_->group_fetch("h", 100, GroupOptions{});
  ASSERT_TRUE(e) << e.error().to_string();
  EXPECT_FALSE(e->more) << "the scan reached the high watermark";
}

// At max outstanding the group waits for acks: not `more`, whatever is readable.
TEST_F(GroupTest, AFetchAtMaxOutstandingIsNotMore) {
  host_.set("storage.group_max_outstanding", "3");
  shard_.reset();
  engine_.reset();
  start();
  ASSERT_TRUE(append_wait(*shard_, make_batch("a", 6)));
  auto d = fetch(100);
  EXPECT_EQ(d.records.size(), 3u);
  EXPECT_FALSE(d.more) << "the bound that stopped it is max outstanding: wait for acks";
  d = fetch(100);
  EXPECT_TRUE(d.records.empty());
  EXPECT_FALSE(d.more);
}

TEST_F(GroupTest, CommittedStopsAtTheFirstUnackedOffset) {
  ASSERT_TRUE(append_wait(*shard_, make_batch("a", 5)));
  fetch(5);
  ASSERT_TRUE(shard_->group_ack("g", offs({0, 1, 3, 4})));
  EXPECT_EQ(pos().committed.value(), 2u);
  EXPECT_EQ(pos().outstanding, 1u);
  ASSERT_TRUE(shard_->group_ack("g", offs({2})));
  EXPECT_EQ(pos().committed.value(), 5u);
}

TEST_F(GroupTest, NackAndTimeoutRedeliverWithAHigherDeliveryCount) {
  ASSERT_TRUE(append_wait(*shard_, make_batch("a", 3)));
  GroupOptions o;
  o.ack_timeout_ms = 1000;
  fetch(3, o);
  now_ += 500;
  ASSERT_TRUE(shard_->group_nack("g", offs({1})));
  auto d = fetch(10, o);
  EXPECT_EQ(offsets_of(d), std::vector<std::uint64_t>{1});
  EXPECT_EQ(deliveries_of(d), std::vector<std::uint32_t>{2});
  EXPECT_EQ(values_in(d).at(1), "a#1");
  now_ += 499;
  EXPECT_TRUE(fetch(10, o).records.empty()) << "not yet timed out";
  now_ += 1;
  auto t = fetch(10, o);
  EXPECT_EQ(offsets_of(t), (std::vector<std::uint64_t>{0, 2})) << "0 and 2 timed out; 1 was redelivered later";
  EXPECT_EQ(deliveries_of(t), (std::vector<std::uint32_t>{2, 2}));
}

TEST_F(GroupTest, AckOrNackOfAnOffsetThatIsNotOutstandingChangesNothing) {
  ASSERT_TRUE(append_wait(*shard_, make_batch("a", 4)));
  fetch(2);
  auto r = shard_->group_ack("g", offs({0, 3}));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::invalid_argument);
  EXPECT_NE(r.error().message.find("offset 3"), std::string::npos) << r.error().message;
  EXPECT_EQ(pos().outstanding, 2u) << "offset 0 was not acked either";
  EXPECT_EQ(pos().committed.value(), 0u);
  ASSERT_TRUE(shard_->group_ack("g", offs({0})));
  auto again = shard_->group_ack("g", offs({0}));
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, Errc::invalid_argument);
  auto n = shard_->group_nack("g", offs({2}));
  ASSERT_FALSE(n);
  EXPECT_EQ(n.error().code, Errc::invalid_argument);
  auto unknown = shard_->group_ack("nobody", offs({0}));
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, Errc::not_found);
  auto bad = shard_->group_fetch("../x", 1, GroupOptions{});
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, Errc::invalid_name);
}

// Regression (review): a replay built one batch of the whole range in memory, of any
// size; one past 4 GiB could not be appended, with its intent journaled, and the group then
// failed every open. A range past 16 MiB is refused now, before anything is journaled.
TEST_F(GroupTest, AReplayOfMoreThanSixteenMiBIsRefusedAndASmallerOneWorks) {
  const std::string mib(std::size_t{1} << 20, 'p');
  for (int i = 0; i < 20; ++i) {
    BatchBuilder bb;
    bb.add(std::nullopt, mib, {}, 1000);
    ASSERT_TRUE(append_wait(*shard_, bb.finish()));
  }
  GroupOptions o;
  o.max_deliveries = 1;
  // A fetch carries a few MiB: nack each delivery until all 20 are dead letters.
  for (int round = 0; round < 100; ++round) {
    std::vector<Offset> got;
    for (auto& r : fetch(100, o).records) got.push_back(r.offset);
    if (!got.empty()) ASSERT_TRUE(shard_->group_nack("g", got));
    if (pos().dead_letter_end.value() >= 20u) break;
  }
  ASSERT_EQ(pos().dead_letter_end.value(), 20u);
  auto big = shard_->replay_dead_letters("g", Offset(0), Offset(20));
  ASSERT_FALSE(big);
  EXPECT_EQ(big.error().code, Errc::invalid_argument) << big.error().to_string();
  EXPECT_NE(big.error().message.find("smaller range"), std::string::npos) << big.error().message;
  EXPECT_EQ(shard_->stats().high_watermark.value(), 20u) << "nothing replayed";
  auto part = shard_->replay_dead_letters("g", Offset(0), Offset(10));
  ASSERT_TRUE(part) << part.error().to_string();
  EXPECT_EQ(*part, 10u);
  crash_and_restart();
  EXPECT_EQ(pos().dead_letter_start.value(), 10u) << "the group opens, no replay pending";
  EXPECT_EQ(shard_->stats().high_watermark.value(), 30u);
}

TEST_F(GroupTest, TooManyDeliveriesMoveARecordToDeadLettersWithHeadersAndReplayPublishesIt) {
  BatchBuilder bb;
  std::string hdrs;
  append_header(hdrs, "trace", "t-1");
  bb.add(std::string_view("k0"), "v0", {}, 1000);
  bb.add(std::string_view("k1"), "poison", hdrs, 1234);
  ASSERT_TRUE(append_wait(*shard_, bb.finish()));
  GroupOptions o;
  o.max_deliveries = 2;
  fetch(10, o);
  ASSERT_TRUE(shard_->group_ack("g", offs({0})));
  ASSERT_TRUE(shard_->group_nack("g", offs({1})));
  EXPECT_EQ(deliveries_of(fetch(10, o)), std::vector<std::uint32_t>{2});
  ASSERT_TRUE(shard_->group_nack("g", offs({1})));
  EXPECT_TRUE(fetch(10, o).records.empty()) << "a third delivery would exceed max_deliveries";
  auto p = pos();
  EXPECT_EQ(p.committed.value(), 2u) << "a dead letter counts as done";
  EXPECT_EQ(p.outstanding, 0u);
  EXPECT_EQ(p.dead_letter_start.value(), 0u);
  EXPECT_EQ(p.dead_letter_end.value(), 1u);

  auto dl = shard_->dead_letters("g", Offset(0), 100, 1 << 20);
  ASSERT_TRUE(dl) << dl.error().to_string();
  ASSERT_EQ(dl->batches.size(), 1u);
  BatchReader r(dl->batches[0].data(), dl->batches[0].size());
  RecordView rv;
  ASSERT_TRUE(r.next(rv));
  EXPECT_EQ(rv.offset, 0u);
  EXPECT_EQ(rv.key, std::optional<std::string_view>("k1"));
  EXPECT_EQ(rv.value, "poison");
  EXPECT_EQ(rv.timestamp_ms, 1234);
  std::vector<Header> hs;
  ASSERT_TRUE(decode_headers(rv.headers, hs));
  std::map<std::string, std::string> hm;
  for (auto& h : hs) hm[std::string(h.name)] = std::string(h.value);
  EXPECT_EQ(hm["trace"], "t-1");
  EXPECT_EQ(hm["sluice-original-offset"], "1");
  EXPECT_EQ(hm["sluice-deliveries"], "2");

  auto n = shard_->replay_dead_letters("g", Offset(0), Offset(1));
  ASSERT_TRUE(n) << n.error().to_string();
  EXPECT_EQ(*n, 1u);
  EXPECT_EQ(shard_->stats().high_watermark.value(), 3u) << "replayed as a new record";
  auto all = read_all(*shard_);
  EXPECT_EQ(all.at(2), "poison");
  auto dl2 = shard_->dead_letters("g", Offset(0), 100, 1 << 20);
  ASSERT_TRUE(dl2);
  EXPECT_TRUE(dl2->batches.empty()) << "replayed dead letters are not listed again";
  EXPECT_EQ(pos().dead_letter_start.value(), 1u);
  auto again = fetch(10, o);
  EXPECT_EQ(offsets_of(again), std::vector<std::uint64_t>{2});
  EXPECT_EQ(deliveries_of(again), std::vector<std::uint32_t>{1});
  // The replayed copy has the original headers, not the dead-letter ones.
  BatchReader r2(again.batches[0].data(), again.batches[0].size());
  ASSERT_TRUE(r2.next(rv));
  hs.clear();
  ASSERT_TRUE(decode_headers(rv.headers, hs));
  ASSERT_EQ(hs.size(), 2u);
  EXPECT_EQ(hs[0].name, "trace");
  EXPECT_EQ(hs[1].name, "sluice-replayed-from") << "the mark recovery looks for";
  EXPECT_EQ(hs[1].value, "g:0");

  // Dead letters and the replay mark survive a restart.
  crash_and_restart();
  auto dl3 = shard_->dead_letters("g", Offset(0), 100, 1 << 20);
  ASSERT_TRUE(dl3);
  EXPECT_TRUE(dl3->batches.empty());
  EXPECT_EQ(pos().dead_letter_end.value(), 1u);
  EXPECT_EQ(pos().committed.value(), 2u);
}

TEST_F(GroupTest, AcksSurviveACrashAndUnackedRecordsAreRedelivered) {
  ASSERT_TRUE(append_wait(*shard_, make_batch("a", 6)));
  fetch(6);
  ASSERT_TRUE(shard_->group_ack("g", offs({0, 1, 2, 4})));
  crash_and_restart();
  auto p = pos();
  EXPECT_EQ(p.committed.value(), 3u);
  EXPECT_EQ(p.outstanding, 2u);
  auto d = fetch(10);
  EXPECT_EQ(offsets_of(d), (std::vector<std::uint64_t>{3, 5})) << "redelivered at once, 4 stays acked";
  EXPECT_EQ(deliveries_of(d), (std::vector<std::uint32_t>{2, 2}));
  ASSERT_TRUE(shard_->group_ack("g", offs({3, 5})));
  EXPECT_EQ(pos().committed.value(), 6u);
}

TEST_F(GroupTest, LostDeliveryRecordsMeanRedeliveryNeverSkipping) {
  ASSERT_TRUE(append_wait(*shard_, make_batch("a", 3)));
  fetch(1);
  ASSERT_TRUE(shard_->group_ack("g", offs({0})));  // synced, with the delivery before it
  fetch(2);                                          // delivery record never synced
  crash_and_restart();
  auto d = fetch(10);
  EXPECT_EQ(offsets_of(d), (std::vector<std::uint64_t>{1, 2}));
  EXPECT_EQ(pos().committed.value(), 1u);
}

TEST_F(GroupTest, GroupsArePerIncarnation) {
  auto a = *engine_->open_shard(test_ref(0, 1), StreamSpec{});
  auto b = *engine_->open_shard(test_ref(0, 2), StreamSpec{});
  ASSERT_TRUE(append_wait(*a, make_batch("a", 3)));
  ASSERT_TRUE(append_wait(*b, make_batch("b", 3)));
  auto da = a->group_fetch("g", 10, GroupOptions{});
  ASSERT_TRUE(da);
  ASSERT_TRUE(a->group_ack("g", offs({0, 1, 2})));
  EXPECT_TRUE(b->list_groups()->empty());
  auto pb = b->group_position("g");
  ASSERT_FALSE(pb);
  EXPECT_EQ(pb.error().code, Errc::not_found);
  auto db = b->group_fetch("g", 10, GroupOptions{});
  ASSERT_TRUE(db);
  EXPECT_EQ(offsets_of(*db), (std::vector<std::uint64_t>{0, 1, 2})) << "a new incarnation's group starts at 0";
  EXPECT_EQ(values_in(*db).at(0), "b#0");
  // Deleting incarnation 1 takes its group with it.
  ASSERT_TRUE(engine_->delete_incarnations(test_ref().stream, Incarnation(1)));
  auto a2 = *engine_->open_shard(test_ref(0, 1), StreamSpec{});
  EXPECT_TRUE(a2->list_groups()->empty());
}

// The group log's ops (group_ops.h) are applied again after a crash or a change of leader,
// from a lower-bound checkpoint: applying one twice must change nothing more.
TEST_F(GroupTest, ApplyingACommittedGroupLogOpTwiceChangesNothingMore) {
  ASSERT_TRUE(append_wait(*shard_, make_batch("a", 5)));
  auto impl = engine_->replica(test_ref());
  ASSERT_TRUE(impl);
  auto u64s = [](std::initializer_list<std::uint64_t> l) {
    std::string s;
    for (auto v : l) {
      char b[8];
      wire::put_u64(b, v);
      s.append(b, 8);
    }
    return s;
  };
  std::string ack("\x02\0\0\0", 4);
  ack += u64s({0, 1});
  BatchBuilder bb;
  bb.add(std::nullopt, "dead", "", 1);
  const std::string dead_letter = bb.finish();
  const std::string dead = u64s({2, 0});
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(impl->apply_group_op(GroupOp{"g", group_records::kAck, ack, {}}));
    ASSERT_TRUE(impl->apply_group_op(GroupOp{"g", group_records::kDead, dead, dead_letter}));
    ASSERT_TRUE(impl->apply_group_op(GroupOp{"g", group_records::kReplayed, u64s({0, 1}), {}}));
    ASSERT_TRUE(impl->apply_group_op(GroupOp{"g", group_records::kReplayPending, u64s({0, 1, 5}), {}}));
    ASSERT_TRUE(impl->apply_group_op(GroupOp{"h", GroupOps::kOpCreate, {}, {}}));
  }
  auto p = pos();
  EXPECT_EQ(p.committed.value(), 3u);
  EXPECT_EQ(p.dead_letter_end.value(), 1u) << "the dead letter was appended once";
  EXPECT_EQ(p.dead_letter_start.value(), 1u) << "and is replayed";
  EXPECT_EQ(*shard_->list_groups(), (std::vector<std::string>{"g", "h"}));
  // A REPLAY_PENDING applied after its REPLAYED is not pending: the next replay call does
  // not append the dead letter to the shard a second time.
  auto n = shard_->replay_dead_letters("g", Offset(1), Offset(1));
  ASSERT_TRUE(n) << n.error().to_string();
  EXPECT_EQ(shard_->stats().log_end.value(), 5u);
  EXPECT_EQ(offsets_of(fetch(10)), (std::vector<std::uint64_t>{3, 4})) << "0-2 are done";
  // A dead letter that would leave a gap in the dead-letter log is corrupt, not applied.
  auto gap = impl->apply_group_op(GroupOp{"g", group_records::kDead, u64s({3, 7}), dead_letter});
  ASSERT_FALSE(gap);
  EXPECT_EQ(gap.error().code, Errc::corrupt_data);
  EXPECT_EQ(pos().dead_letter_end.value(), 1u);
}

// Review finding: a group that learned its acks from the group log (a new leader after a
// failover: ACK ops move committed, not the cursor) read the whole acked part of the shard
// into memory on its first fetch, to find nothing to deliver.
TEST_F(GroupTest, AGroupWhoseAcksCameFromTheGroupLogDoesNotReadThemAgain) {
  const std::string big(512 << 10, 'x');
  for (int i = 0; i < 16; ++i) {  // 8 MiB, one record per batch
    BatchBuilder bb;
    bb.add(std::nullopt, big, {}, 1000);
    ASSERT_TRUE(append_wait(*shard_, bb.finish()));
  }
  auto impl = engine_->replica(test_ref());
  ASSERT_TRUE(impl);
  std::string ack("\x10\0\0\0", 4);  // 16 offsets
  for (std::uint64_t off = 0; off < 16; ++off) {
    char b[8];
    wire::put_u64(b, off);
    ack.append(b, 8);
  }
  ASSERT_TRUE(impl->apply_group_op(GroupOp{"g", group_records::kAck, ack, {}}));
  EXPECT_EQ(pos().committed.value(), 16u);
  const auto read_before = fs_->read_bytes();
  EXPECT_TRUE(fetch(100).records.empty());
  EXPECT_LT(fs_->read_bytes() - read_before, std::uint64_t{1} << 20) << "the acked records were read again";
  ASSERT_TRUE(append_wait(*shard_, make_batch("new", 2)));
  EXPECT_EQ(offsets_of(fetch(100)), (std::vector<std::uint64_t>{16, 17}));
}

// Review finding: redeliveries had no byte bound (only new records did): due offsets one
// per large batch made one fetch hold all of those batches.
TEST_F(GroupTest, RedeliveriesAreBoundedInBytesToo) {
  const std::string big(512 << 10, 'x');
  for (int i = 0; i < 20; ++i) {  // 10 MiB, one record per batch
    BatchBuilder bb;
    bb.add(std::nullopt, big, {}, 1000);
    ASSERT_TRUE(append_wait(*shard_, bb.finish()));
  }
  std::vector<Offset> all;
  for (int round = 0; round < 10 && all.size() < 20; ++round)
    for (auto& it : fetch(100).records) all.push_back(it.offset);
  ASSERT_EQ(all.size(), 20u);
  ASSERT_TRUE(shard_->group_nack("g", all));
  auto d = fetch(100);
  std::size_t bytes = 0;
  for (const auto& b : d.batches) bytes += b.size();
  EXPECT_GT(d.records.size(), 0u);
  EXPECT_LT(bytes, std::size_t{5} << 20) << d.records.size() << " redeliveries in one fetch";
}

// Regression (review): dead-letter moves did not count toward a fetch's bounds, so a
// consumer that never acked made one fetch move every outstanding record (two syncs each,
// a quorum round trip each on a replicated shard) while holding the group's lock.
TEST_F(GroupTest, AFetchMovesABoundedNumberOfDeadLetters) {
  for (int i = 0; i < 25; ++i) ASSERT_TRUE(append_wait(*shard_, make_batch("b" + std::to_string(i), 10)));
  GroupOptions o;
  o.max_deliveries = 1;
  o.ack_timeout_ms = 1000;
  std::size_t delivered = 0;
  for (int round = 0; round < 20 && delivered < 250; ++round) delivered += fetch(100, o).records.size();
  ASSERT_EQ(delivered, 250u);
  now_ += 1000;  // every one is due, and has had its one delivery
  EXPECT_TRUE(fetch(10, o).records.empty());
  EXPECT_EQ(pos().dead_letter_end.value(), 100u) << "moves in one fetch: at most max(10, 100)";
  EXPECT_EQ(pos().outstanding, 150u);
  for (int round = 0; round < 10 && pos().outstanding > 0; ++round) fetch(10, o);
  EXPECT_EQ(pos().dead_letter_end.value(), 250u);
  EXPECT_EQ(pos().committed.value(), 250u);
}

// Late review: a redelivery due behind more dead-letter candidates than one fetch moves was
// not delivered by that fetch, whose empty answer parks a long poll for its whole wait.
TEST_F(GroupTest, ARedeliveryBehindTheDeadLetterBoundIsStillDelivered) {
  for (int i = 0; i < 15; ++i) ASSERT_TRUE(append_wait(*shard_, make_batch("b" + std::to_string(i), 10)));
  GroupOptions o;
  o.max_deliveries = 2;
  o.ack_timeout_ms = 1000;
  std::size_t delivered = 0;
  for (int round = 0; round < 20 && delivered < 150; ++round) delivered += fetch(100, o).records.size();
  ASSERT_EQ(delivered, 150u);
  // 0..148 get their second delivery (nacked, due at once), 149 stays at its first.
  std::vector<Offset> second;
  for (std::uint64_t off = 0; off < 149; ++off) second.push_back(Offset(off));
  ASSERT_TRUE(shard_->group_nack("g", second));
  delivered = 0;
  for (int round = 0; round < 20 && delivered < 149; ++round) delivered += fetch(100, o).records.size();
  ASSERT_EQ(delivered, 149u);
  now_ += 1000;  // all due: 0..148 for the dead letters (more than one fetch moves), 149 again
  auto d = fetch(10, o);
  EXPECT_EQ(offsets_of(d), std::vector<std::uint64_t>{149});
  EXPECT_EQ(deliveries_of(d), std::vector<std::uint32_t>{2});
  EXPECT_EQ(pos().dead_letter_end.value(), 100u);
}

// Regression (review): a fetch counted a redelivery before the steps that could still fail
// (a dead-letter move behind it); the failed fetch handed nothing out, but the count stayed
// raised, and the record reached the dead letters without max_deliveries deliveries.
TEST_F(GroupTest, AFetchThatFailsCountsNoDelivery) {
  shard_.reset();
  engine_.reset();
  engine_ = std::make_unique<FsStorageEngine>(host_, fs_);
  engine_->set_group_clock([this] { return now_.load(); });
  std::atomic<bool> fail_move{false};
  engine_->set_group_step_hook([&](std::string_view step) {
    return step == "group.dead.after_append" && fail_move.exchange(false);
  });
  shard_ = *engine_->open_shard(test_ref(), StreamSpec{});
  ASSERT_TRUE(append_wait(*shard_, make_batch("a", 3)));
  GroupOptions o;
  o.max_deliveries = 2;
  o.ack_timeout_ms = 1000;
  EXPECT_EQ(offsets_of(fetch(10, o)), (std::vector<std::uint64_t>{0, 1, 2}));
  ASSERT_TRUE(shard_->group_nack("g", offs({1})));
  EXPECT_EQ(deliveries_of(fetch(10, o)), std::vector<std::uint32_t>{2});  // 1's second delivery
  now_ += 1000;  // 0 and 2 are due for their second delivery, 1 for the dead letters
  fail_move = true;
  auto failed = shard_->group_fetch("g", 10, o);
  ASSERT_FALSE(failed) << "the move of 1 was to fail";
  // The failed fetch delivered nothing: 0 and 2 get their second delivery now.
  auto d = fetch(10, o);
  EXPECT_EQ(offsets_of(d), (std::vector<std::uint64_t>{0, 2}));
  EXPECT_EQ(deliveries_of(d), (std::vector<std::uint32_t>{2, 2}));
}

// Review finding: after a journal write whose fdatasync failed, the group went on: a later
// ack was written after the failed record and answered, and after a power cut the journal's
// replay stops at the failed record, cutting that acknowledged ack too. The group refuses
// calls once its journal failed, until the shard is reopened.
TEST_F(GroupTest, AGroupWhoseJournalFailedRefusesCallsUntilReopened) {
  ASSERT_TRUE(append_wait(*shard_, make_batch("a", 3)));
  EXPECT_EQ(offsets_of(fetch(10)), (std::vector<std::uint64_t>{0, 1, 2}));
  fs_->fail_syncs(true);
  auto failed = shard_->group_ack("g", offs({0}));
  ASSERT_FALSE(failed);
  fs_->fail_syncs(false);
  auto later = shard_->group_ack("g", offs({1}));
  ASSERT_FALSE(later) << "an ack after a failed journal sync was answered";
  EXPECT_EQ(later.error().code, Errc::storage_failure) << later.error().to_string();
  EXPECT_FALSE(shard_->group_fetch("g", 10, GroupOptions{}));
  // Reopened: the journal is read again from disk, and the group serves: what is not acked
  // is delivered again once due, and acks of it commit.
  shard_.reset();
  engine_.reset();
  start();
  now_ += 100'000'000;  // every delivery's ack timeout is over
  std::vector<Offset> again;
  for (auto& it : fetch(10).records) again.push_back(it.offset);
  EXPECT_FALSE(again.empty());
  ASSERT_TRUE(shard_->group_ack("g", again));
  EXPECT_EQ(pos().committed.value(), 3u);
}

}  // namespace
}  // namespace sluice::fs_storage::testing
