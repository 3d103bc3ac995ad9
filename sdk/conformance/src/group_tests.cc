// Conformance of consumer groups and dead letters (sluice/storage.h, "consumer groups").
#include <algorithm>

#include "conformance_util.h"
#include "sluice/testing/storage_conformance.h"

namespace sluice::testing {
namespace conformance_internal {
int group_tests_anchor = 0;
}  // namespace conformance_internal
namespace {

using namespace conformance_internal;

GroupOptions opts(std::uint32_t max_deliveries = 5, std::int64_t ack_timeout_ms = 600000) {
  GroupOptions o;
  o.max_deliveries = max_deliveries;
  o.ack_timeout_ms = ack_timeout_ms;
  return o;
}

std::vector<std::uint64_t> offsets_of(const GroupDelivery& d) {
  std::vector<std::uint64_t> out;
  for (auto& it : d.records) out.push_back(it.offset.value());
  return out;
}

template <class T>
void expect_not_supported(const Result<T>& r, const char* call) {
  ASSERT_FALSE(r.ok()) << call << " succeeded although the engine opted out";
  EXPECT_EQ(r.error().code, Errc::not_supported) << call << ": " << r.error().to_string();
  EXPECT_EQ(r.error().outcome, Outcome::definite) << call;
}

// Appends `n` one-record batches "<tag><i>#0" to `s`.
void fill(ShardLog& s, const std::string& tag, int n) {
  for (int i = 0; i < n; ++i) ASSERT_TRUE(append_wait(s, make_batch(tag + std::to_string(i), 1)));
}

}  // namespace

// With no_groups, every group call must say not_supported; then the test is SKIPPED.
#define SKIP_WITHOUT_GROUPS(shard)                                                          \
  do {                                                                                      \
    if (opt_outs().no_groups) {                                                             \
      expect_not_supported((shard)->group_fetch("g", 10, opts()), "group_fetch");           \
      expect_not_supported((shard)->group_ack("g", {Offset(0)}), "group_ack");              \
      expect_not_supported((shard)->group_nack("g", {Offset(0)}), "group_nack");            \
      expect_not_supported((shard)->group_position("g"), "group_position");                 \
      expect_not_supported((shard)->dead_letters("g", Offset(0), 10, 1 << 20), "dead_letters"); \
      expect_not_supported((shard)->replay_dead_letters("g", Offset(0), Offset(0)),         \
                           "replay_dead_letters");                                          \
      auto groups = (shard)->list_groups();                                                 \
      if (groups) EXPECT_TRUE(groups->empty()) << "list_groups lists groups";              \
      else expect_not_supported(groups, "list_groups");                                     \
      GTEST_SKIP() << "opt-out no_groups (checked: every group call answers not_supported)"; \
    }                                                                                       \
  } while (0)

#define SKIP_WITHOUT_DEAD_LETTERS(shard)                                                    \
  do {                                                                                      \
    SKIP_WITHOUT_GROUPS(shard);                                                             \
    if (opt_outs().no_dead_letters) {                                                       \
      expect_not_supported((shard)->dead_letters("g", Offset(0), 10, 1 << 20), "dead_letters"); \
      expect_not_supported((shard)->replay_dead_letters("g", Offset(0), Offset(0)),         \
                           "replay_dead_letters");                                          \
      GTEST_SKIP() << "opt-out no_dead_letters (checked: answers not_supported)";           \
    }                                                                                       \
  } while (0)

namespace {

TEST_P(StorageConformance, GroupsDeliverInOffsetOrderAndAcksMoveTheCommittedOffset) {
  auto s = open(shard_ref());
  ASSERT_TRUE(s);
  SKIP_WITHOUT_GROUPS(s);
  ASSERT_TRUE(append_wait(*s, make_batch("x", 2)));
  ASSERT_TRUE(append_wait(*s, make_batch("y", 3)));
  auto d = s->group_fetch("g", 100, opts());
  ASSERT_TRUE(d) << d.error().to_string();
  EXPECT_EQ(offsets_of(*d), (std::vector<std::uint64_t>{0, 1, 2, 3, 4}));
  for (auto& it : d->records) EXPECT_EQ(it.delivery, 1u);
  // Every delivered record is in one of the delivered batches.
  for (auto& it : d->records) {
    bool found = false;
    for (auto& b : d->batches) {
      const BatchHeader h = BatchHeader::decode(b.data());
      if (it.offset.value() >= h.base_offset && it.offset.value() < h.next_offset()) found = true;
    }
    EXPECT_TRUE(found) << "offset " << it.offset.value() << " has no batch";
  }
  auto p = s->group_position("g");
  ASSERT_TRUE(p) << p.error().to_string();
  EXPECT_EQ(p->group, "g");
  EXPECT_EQ(p->committed.value(), 0u);
  EXPECT_EQ(p->outstanding, 5u);

  ASSERT_TRUE(s->group_ack("g", {Offset(0), Offset(1)}));
  ASSERT_TRUE(s->group_ack("g", {Offset(3)}));
  p = s->group_position("g");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->committed.value(), 2u) << "offset 2 is still outstanding";
  EXPECT_EQ(p->outstanding, 2u);
  ASSERT_TRUE(s->group_ack("g", {Offset(2), Offset(4)}));
  p = s->group_position("g");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->committed.value(), 5u);
  EXPECT_EQ(p->outstanding, 0u);

  auto none = s->group_fetch("g", 100, opts());
  ASSERT_TRUE(none) << none.error().to_string();
  EXPECT_TRUE(none->records.empty()) << "acked records are never delivered again";
  auto groups = s->list_groups();
  ASSERT_TRUE(groups) << groups.error().to_string();
  EXPECT_NE(std::find(groups->begin(), groups->end(), "g"), groups->end());
}

TEST_P(StorageConformance, GroupsMaxRecordsBoundsADeliveryAndGroupsAreIndependent) {
  auto s = open(shard_ref());
  ASSERT_TRUE(s);
  SKIP_WITHOUT_GROUPS(s);
  fill(*s, "r", 6);
  auto a = s->group_fetch("a", 3, opts());
  ASSERT_TRUE(a) << a.error().to_string();
  EXPECT_EQ(offsets_of(*a), (std::vector<std::uint64_t>{0, 1, 2}));
  auto a2 = s->group_fetch("a", 3, opts());
  ASSERT_TRUE(a2) << a2.error().to_string();
  EXPECT_EQ(offsets_of(*a2), (std::vector<std::uint64_t>{3, 4, 5}));
  auto b = s->group_fetch("b", 100, opts());
  ASSERT_TRUE(b) << b.error().to_string();
  EXPECT_EQ(offsets_of(*b), (std::vector<std::uint64_t>{0, 1, 2, 3, 4, 5}))
      << "another group gets every record too";
}

TEST_P(StorageConformance, GroupsAckOfAnOffsetNotOutstandingIsInvalidAndChangesNothing) {
  auto s = open(shard_ref());
  ASSERT_TRUE(s);
  SKIP_WITHOUT_GROUPS(s);
  fill(*s, "r", 3);
  ASSERT_TRUE(s->group_fetch("g", 2, opts()));  // delivers 0 and 1
  auto never = s->group_ack("g", {Offset(2)});
  ASSERT_FALSE(never) << "offset 2 was never delivered";
  EXPECT_EQ(never.error().code, Errc::invalid_argument) << never.error().to_string();
  EXPECT_NE(never.error().message.find('2'), std::string::npos) << never.error().message;
  auto mixed = s->group_ack("g", {Offset(0), Offset(99)});
  ASSERT_FALSE(mixed);
  EXPECT_EQ(mixed.error().code, Errc::invalid_argument) << mixed.error().to_string();
  auto p = s->group_position("g");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->outstanding, 2u) << "a refused ack changes nothing";
  EXPECT_EQ(p->committed.value(), 0u);
  ASSERT_TRUE(s->group_ack("g", {Offset(0)}));
  auto twice = s->group_ack("g", {Offset(0)});
  ASSERT_FALSE(twice) << "offset 0 is already acked";
  EXPECT_EQ(twice.error().code, Errc::invalid_argument) << twice.error().to_string();
  auto nack = s->group_nack("g", {Offset(2)});
  ASSERT_FALSE(nack);
  EXPECT_EQ(nack.error().code, Errc::invalid_argument) << nack.error().to_string();
}

TEST_P(StorageConformance, GroupsNackRedeliversWithTheNextDeliveryCount) {
  auto s = open(shard_ref());
  ASSERT_TRUE(s);
  SKIP_WITHOUT_GROUPS(s);
  fill(*s, "r", 3);
  auto d = s->group_fetch("g", 100, opts());
  ASSERT_TRUE(d) << d.error().to_string();
  ASSERT_EQ(d->records.size(), 3u);
  ASSERT_TRUE(s->group_nack("g", {Offset(1)}));
  auto again = s->group_fetch("g", 100, opts());
  ASSERT_TRUE(again) << again.error().to_string();
  ASSERT_EQ(offsets_of(*again), std::vector<std::uint64_t>{1});
  EXPECT_EQ(again->records[0].delivery, 2u);
  ASSERT_EQ(again->batches.size(), 1u);
  EXPECT_EQ(values_of(again->batches[0]), std::vector<std::string>{"r1#0"});
}

TEST_P(StorageConformance, GroupsRedeliverAfterTheAckTimeout) {
  auto s = open(shard_ref());
  ASSERT_TRUE(s);
  SKIP_WITHOUT_GROUPS(s);
  fill(*s, "r", 1);
  auto d = s->group_fetch("g", 100, opts(5, 20));
  ASSERT_TRUE(d) << d.error().to_string();
  ASSERT_EQ(offsets_of(*d), std::vector<std::uint64_t>{0});
  std::uint32_t delivery = 0;
  ASSERT_TRUE(eventually([&] {
    auto again = s->group_fetch("g", 100, opts(5, 600000));
    if (!again || again->records.empty()) return false;
    delivery = again->records[0].delivery;
    return true;
  })) << "a record not acked within ack_timeout_ms was never redelivered";
  EXPECT_EQ(delivery, 2u);
}

TEST_P(StorageConformance, GroupsPositionsAndAcksSurviveARestart) {
  if (opt_outs().no_restart_persistence)
    GTEST_SKIP() << "opt-out no_restart_persistence: data does not survive a restart";
  {
    auto s = open(shard_ref());
    ASSERT_TRUE(s);
    SKIP_WITHOUT_GROUPS(s);
    fill(*s, "r", 4);
    ASSERT_TRUE(s->group_fetch("g", 100, opts()));
    ASSERT_TRUE(s->group_ack("g", {Offset(0), Offset(1), Offset(3)}));
  }
  restart();
  auto s = open(shard_ref());
  ASSERT_TRUE(s);
  auto p = s->group_position("g");
  ASSERT_TRUE(p) << p.error().to_string();
  EXPECT_EQ(p->committed.value(), 2u) << "acks are durable";
  auto d = s->group_fetch("g", 100, opts());
  ASSERT_TRUE(d) << d.error().to_string();
  EXPECT_EQ(offsets_of(*d), std::vector<std::uint64_t>{2}) << "unacked: redelivered, never skipped";
  auto groups = s->list_groups();
  ASSERT_TRUE(groups) << groups.error().to_string();
  EXPECT_NE(std::find(groups->begin(), groups->end(), "g"), groups->end());
}

TEST_P(StorageConformance, BadInputGroupArgumentsAreRefused) {
  auto s = open(shard_ref());
  ASSERT_TRUE(s);
  SKIP_WITHOUT_GROUPS(s);
  fill(*s, "r", 1);
  for (std::uint32_t md : {0u, 1001u}) {
    auto r = s->group_fetch("g", 10, opts(md));
    ASSERT_FALSE(r) << "max_deliveries " << md << " accepted";
    EXPECT_EQ(r.error().code, Errc::invalid_argument) << r.error().to_string();
  }
  auto t = s->group_fetch("g", 10, opts(5, 0));
  ASSERT_FALSE(t) << "ack_timeout_ms 0 accepted";
  EXPECT_EQ(t.error().code, Errc::invalid_argument) << t.error().to_string();
  for (const char* name : {"", "../x", "a/b", ".hidden"}) {
    auto r = s->group_fetch(name, 10, opts());
    ASSERT_FALSE(r) << "group name \"" << name << "\" accepted";
    EXPECT_EQ(r.error().code, Errc::invalid_name) << r.error().to_string();
  }
  auto groups = s->list_groups();
  ASSERT_TRUE(groups) << groups.error().to_string();
  EXPECT_TRUE(groups->empty()) << "a refused fetch must not create a group";
}

// --- dead letters ---------------------------------------------------------------------------

TEST_P(StorageConformance, DeadLettersTakeARecordAfterMaxDeliveriesWithItsOrigin) {
  auto s = open(shard_ref());
  ASSERT_TRUE(s);
  SKIP_WITHOUT_DEAD_LETTERS(s);
  fill(*s, "r", 2);
  ASSERT_TRUE(s->group_fetch("g", 100, opts(2)));
  ASSERT_TRUE(s->group_ack("g", {Offset(1)}));
  ASSERT_TRUE(s->group_nack("g", {Offset(0)}));
  auto second = s->group_fetch("g", 100, opts(2));
  ASSERT_TRUE(second) << second.error().to_string();
  ASSERT_EQ(offsets_of(*second), std::vector<std::uint64_t>{0});
  EXPECT_EQ(second->records[0].delivery, 2u);
  ASSERT_TRUE(s->group_nack("g", {Offset(0)}));
  auto third = s->group_fetch("g", 100, opts(2));
  ASSERT_TRUE(third) << third.error().to_string();
  EXPECT_TRUE(third->records.empty()) << "a third delivery exceeds max_deliveries = 2";

  auto p = s->group_position("g");
  ASSERT_TRUE(p) << p.error().to_string();
  EXPECT_EQ(p->committed.value(), 2u) << "a dead-lettered record counts as done";
  EXPECT_EQ(p->outstanding, 0u);
  EXPECT_EQ(p->dead_letter_start.value(), 0u);
  EXPECT_EQ(p->dead_letter_end.value(), 1u);
  auto dl = s->dead_letters("g", Offset(0), 100, 1 << 20);
  ASSERT_TRUE(dl) << dl.error().to_string();
  ASSERT_EQ(dl->batches.size(), 1u);
  const std::string& b = dl->batches[0];
  BatchHeader h;
  ASSERT_EQ(check_batch(b.data(), b.size(), &h), BatchCheck::ok);
  EXPECT_EQ(values_of(b), std::vector<std::string>{"r0#0"});
  BatchReader reader(b.data(), b.size());
  RecordView rv;
  ASSERT_TRUE(reader.next(rv));
  ASSERT_TRUE(rv.key.has_value());
  EXPECT_EQ(*rv.key, "k0") << "the original key is kept";
  EXPECT_EQ(header_of(b, h.base_offset, "sluice-original-offset"), "0");
  EXPECT_EQ(header_of(b, h.base_offset, "sluice-deliveries"), "2");
}

TEST_P(StorageConformance, DeadLettersReplayPublishesThemOnceAsNewRecords) {
  auto s = open(shard_ref());
  ASSERT_TRUE(s);
  SKIP_WITHOUT_DEAD_LETTERS(s);
  fill(*s, "r", 1);
  ASSERT_TRUE(s->group_fetch("g", 100, opts(1)));
  ASSERT_TRUE(s->group_nack("g", {Offset(0)}));
  auto moved = s->group_fetch("g", 100, opts(1));
  ASSERT_TRUE(moved) << moved.error().to_string();
  ASSERT_TRUE(moved->records.empty());
  auto p = s->group_position("g");
  ASSERT_TRUE(p);
  ASSERT_EQ(p->dead_letter_end.value(), 1u);

  auto bad = s->replay_dead_letters("g", Offset(0), Offset(2));
  ASSERT_FALSE(bad) << "the range ends beyond the dead letters";
  EXPECT_EQ(bad.error().code, Errc::invalid_argument) << bad.error().to_string();

  auto n = s->replay_dead_letters("g", Offset(0), Offset(1));
  ASSERT_TRUE(n) << n.error().to_string();
  EXPECT_EQ(*n, 1u);
  auto all = read_all(*s);
  ASSERT_EQ(all.size(), 2u) << "the replayed record is appended at a new offset";
  EXPECT_EQ(all[1], "r0#0");
  auto d = s->group_fetch("g", 100, opts(1));
  ASSERT_TRUE(d) << d.error().to_string();
  ASSERT_EQ(offsets_of(*d), std::vector<std::uint64_t>{1}) << "delivered as a new record";
  EXPECT_EQ(d->records[0].delivery, 1u);
  auto other = s->group_fetch("other", 100, opts());
  ASSERT_TRUE(other) << other.error().to_string();
  EXPECT_EQ(offsets_of(*other), (std::vector<std::uint64_t>{0, 1})) << "to every group";

  auto again = s->replay_dead_letters("g", Offset(0), Offset(1));
  ASSERT_TRUE(again) << again.error().to_string();
  EXPECT_EQ(*again, 0u) << "a replayed dead letter is marked and never replayed twice";
  EXPECT_EQ(read_all(*s).size(), 2u);
}

TEST_P(StorageConformance, DeadLettersSurviveARestart) {
  if (opt_outs().no_restart_persistence)
    GTEST_SKIP() << "opt-out no_restart_persistence: data does not survive a restart";
  {
    auto s = open(shard_ref());
    ASSERT_TRUE(s);
    SKIP_WITHOUT_DEAD_LETTERS(s);
    fill(*s, "r", 1);
    ASSERT_TRUE(s->group_fetch("g", 100, opts(1)));
    ASSERT_TRUE(s->group_nack("g", {Offset(0)}));
    ASSERT_TRUE(s->group_fetch("g", 100, opts(1)));
  }
  restart();
  auto s = open(shard_ref());
  ASSERT_TRUE(s);
  auto p = s->group_position("g");
  ASSERT_TRUE(p) << p.error().to_string();
  EXPECT_EQ(p->committed.value(), 1u);
  EXPECT_EQ(p->dead_letter_end.value(), 1u);
  auto dl = s->dead_letters("g", Offset(0), 100, 1 << 20);
  ASSERT_TRUE(dl) << dl.error().to_string();
  ASSERT_EQ(dl->batches.size(), 1u);
  EXPECT_EQ(values_of(dl->batches[0]), std::vector<std::string>{"r0#0"});
}

}  // namespace
}  // namespace sluice::testing
