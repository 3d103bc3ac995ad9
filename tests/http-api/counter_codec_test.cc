// The counter data plane's pure rules (plugins/http-api/counter_codec.h): record format,
// overflow, idempotent adds per (key, producer), and replay determinism.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "counter_codec.h"
#include "sluice/names.h"

namespace sluice::http_api {
namespace {

using K = AddDecision::Kind;

TEST(CounterCodec, RecordsRoundTripAndGarbageIsRefused) {
  for (std::int64_t d : {std::int64_t{0}, std::int64_t{1}, std::int64_t{-7},
                         std::numeric_limits<std::int64_t>::max(), std::numeric_limits<std::int64_t>::min()}) {
    CounterRecord r{0x0102030405060708ull, 42, 9, d};
    auto bytes = encode_counter_record(r);
    ASSERT_EQ(bytes.size(), kCounterRecordBytes);
    auto back = decode_counter_record(bytes);
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(*back, r);
  }
  std::string ok = encode_counter_record(CounterRecord{});
  EXPECT_FALSE(decode_counter_record(ok.substr(1)).has_value());
  EXPECT_FALSE(decode_counter_record(ok + "x").has_value());
  std::string bad = ok;
  bad[0] = 2;
  EXPECT_FALSE(decode_counter_record(bad).has_value()) << "an unknown format";
  EXPECT_FALSE(decode_counter_record("").has_value());
}

TEST(CounterCodec, BackingNamesAreValidStreamNamesAndDifferPerIncarnation) {
  auto a = counter_backing_stream_name("hits", Incarnation{5}, ChangeSeq{9});
  EXPECT_EQ(a, "__counter.5.9.n.hits");
  EXPECT_NE(a, counter_backing_stream_name("hits", Incarnation{6}, ChangeSeq{12}));
  std::string longest(kMaxNameBytes, 'x');
  auto h = counter_backing_stream_name(longest, Incarnation{1'700'000'000'000'000}, ChangeSeq{123456});
  EXPECT_LE(h.size(), kMaxNameBytes);
  EXPECT_TRUE(validate_name(NameKind::stream, a).ok());
  EXPECT_TRUE(validate_name(NameKind::stream, h).ok()) << h;
}

TEST(CounterCodec, AddsSumAndOverflowIsRefusedAndChangesNothing) {
  CounterIndex ix;
  EXPECT_EQ(ix.value("k"), 0);
  EXPECT_EQ(ix.apply("k", {1, 0, 0, 5}).value, 5);
  EXPECT_EQ(ix.apply("k", {2, 0, 0, -8}).value, -3);
  EXPECT_EQ(ix.value("k"), -3);
  EXPECT_EQ(ix.value("other"), 0);
  const auto max = std::numeric_limits<std::int64_t>::max();
  const auto min = std::numeric_limits<std::int64_t>::min();
  EXPECT_EQ(ix.apply("m", {3, 0, 0, max}).value, max);
  auto over = ix.apply("m", {4, 0, 0, 1});
  EXPECT_EQ(over.kind, K::overflow);
  EXPECT_EQ(over.value, max);
  EXPECT_EQ(ix.value("m"), max) << "nothing applied";
  EXPECT_EQ(ix.apply("n", {5, 0, 0, min}).value, min);
  EXPECT_EQ(ix.apply("n", {6, 0, 0, -1}).kind, K::overflow);
  EXPECT_EQ(ix.apply("n", {7, 0, 0, max}).value, -1);
  EXPECT_FALSE(checked_add(max, 1).has_value());
  EXPECT_FALSE(checked_add(min, -1).has_value());
  EXPECT_EQ(*checked_add(max, min), -1);
}

TEST(CounterCodec, AProducersAddIsAppliedOnceAndGapsAreRefused) {
  CounterIndex ix;
  // Sequence 1 before 0: a gap naming 0.
  auto gap = ix.apply("k", {1, 7, 1, 10});
  EXPECT_EQ(gap.kind, K::sequence_gap);
  EXPECT_EQ(gap.expected, 0u);
  EXPECT_EQ(ix.value("k"), 0);
  EXPECT_EQ(ix.apply("k", {2, 7, 0, 10}).value, 10);
  EXPECT_EQ(ix.apply("k", {3, 0, 0, 1}).value, 11);  // an add without a producer
  // The retry of sequence 0 answers the original value and adds nothing.
  auto dup = ix.apply("k", {4, 7, 0, 10});
  EXPECT_EQ(dup.kind, K::duplicate);
  EXPECT_EQ(dup.value, 10);
  EXPECT_EQ(ix.value("k"), 11);
  for (std::uint64_t s = 1; s <= 6; ++s) EXPECT_EQ(ix.apply("k", {10 + s, 7, s, 1}).kind, K::apply);
  EXPECT_EQ(ix.value("k"), 17);
  // The window keeps the last 5: 2..6 are duplicates, 0 and 1 are now gaps naming 7.
  EXPECT_EQ(ix.apply("k", {20, 7, 2, 1}).kind, K::duplicate);
  EXPECT_EQ(ix.apply("k", {21, 7, 6, 1}).value, 17);
  auto old = ix.apply("k", {22, 7, 1, 1});
  EXPECT_EQ(old.kind, K::sequence_gap);
  EXPECT_EQ(old.expected, 7u);
  EXPECT_EQ(ix.apply("k", {23, 7, 8, 1}).kind, K::sequence_gap);
  EXPECT_EQ(ix.value("k"), 17);
  // Producers are per key: producer 7 starts at 0 on another key.
  EXPECT_EQ(ix.apply("j", {24, 7, 0, 2}).value, 2);
  // An overflowing add with a producer takes no sequence.
  EXPECT_EQ(ix.apply("j", {25, 7, 1, std::numeric_limits<std::int64_t>::max()}).kind, K::overflow);
  EXPECT_EQ(ix.apply("j", {26, 7, 1, 3}).value, 5);
}

// Every broker replays the same log: whatever was appended (duplicates and gaps included),
// the values and producer states come out the same, and equal to the sum of the applied adds.
TEST(CounterCodec, ReplayIsDeterministic) {
  std::mt19937_64 rng(18);
  std::vector<std::pair<std::string, std::string>> log;
  for (int i = 0; i < 2000; ++i) {
    CounterRecord r;
    r.nonce = rng();
    r.producer_id = rng() % 3;
    r.sequence = rng() % 8;
    r.delta = static_cast<std::int64_t>(rng() % 201) - 100;
    log.emplace_back("k" + std::to_string(rng() % 4), encode_counter_record(r));
  }
  CounterIndex a, b;
  std::map<std::string, std::int64_t> sums;
  for (auto& [k, v] : log) {
    auto r = decode_counter_record(v);
    ASSERT_TRUE(r.has_value());
    auto d = a.apply(k, *r);
    if (d.kind == K::apply) sums[k] += r->delta;
  }
  for (auto& [k, v] : log) b.apply(k, *decode_counter_record(v));
  for (auto& [k, s] : sums) {
    EXPECT_EQ(a.value(k), s) << k;
    EXPECT_EQ(b.value(k), s) << k;
    const auto* pa = a.find(k);
    const auto* pb = b.find(k);
    ASSERT_TRUE(pa && pb);
    ASSERT_EQ(pa->producers.size(), pb->producers.size());
    for (auto& [id, p] : pa->producers) {
      EXPECT_EQ(p.next, pb->producers.at(id).next);
      EXPECT_EQ(p.answered, pb->producers.at(id).answered);
    }
  }
}

// The store's decision path (counters.cc through CacheStore::update): an add decided
// against the stored state writes the new state, and deciding the next add against what
// was written gives the same answers as a CounterIndex over the adds.
TEST(CounterStoredAdd, DecidesAgainstTheStoredStateLikeTheIndex) {
  std::mt19937_64 rng(7);
  std::optional<std::string> stored;
  CounterIndex index;
  std::map<std::uint64_t, std::uint64_t> next;
  for (int i = 0; i < 2000; ++i) {
    CounterRecord r;
    r.producer_id = rng() % 4;  // 0: no producer
    r.delta = static_cast<std::int64_t>(rng() % 201) - 100;
    if (r.producer_id) {
      auto& n = next[r.producer_id];
      const auto pick = rng() % 10;
      r.sequence = pick < 6 ? n : pick < 9 ? (n >= 3 ? n - 3 : 0) : n + 2;  // next, retry, gap
    }
    StoredAdd d = decide_stored_add(stored ? &*stored : nullptr, r);
    ASSERT_FALSE(d.corrupt);
    AddDecision want = index.apply("k", r);
    ASSERT_EQ(d.decision.kind, want.kind) << i;
    ASSERT_EQ(d.decision.value, want.value) << i;
    ASSERT_EQ(d.decision.expected, want.expected) << i;
    if (want.kind == K::apply && r.producer_id) next[r.producer_id] = r.sequence + 1;
    ASSERT_EQ(d.write.has_value(), want.kind == K::apply && (r.producer_id != 0 || r.delta != 0)) << i;
    if (d.write) stored = *d.write;
    if (!stored) {
      EXPECT_EQ(index.value("k"), 0);
      continue;
    }
    auto st = decode_counter_state(*stored);
    ASSERT_TRUE(st.has_value());
    EXPECT_EQ(st->value, index.value("k"));
  }
}

TEST(CounterStoredAdd, OverflowAndGapWriteNothingAndGarbageIsCorrupt) {
  CounterKeyState st;
  st.value = std::numeric_limits<std::int64_t>::max();
  const std::string stored = encode_counter_state(st);
  StoredAdd d = decide_stored_add(&stored, CounterRecord{0, 0, 0, 1});
  EXPECT_EQ(d.decision.kind, K::overflow);
  EXPECT_EQ(d.decision.value, st.value);
  EXPECT_FALSE(d.write.has_value());
  d = decide_stored_add(&stored, CounterRecord{0, 5, 1, -1});
  EXPECT_EQ(d.decision.kind, K::sequence_gap);
  EXPECT_EQ(d.decision.expected, 0u);
  EXPECT_FALSE(d.write.has_value());
  d = decide_stored_add(nullptr, CounterRecord{0, 0, 0, 0});
  EXPECT_EQ(d.decision.kind, K::apply);
  EXPECT_FALSE(d.write.has_value()) << "an add of 0 without a producer writes nothing";
  const std::string garbage = "not a state";
  d = decide_stored_add(&garbage, CounterRecord{0, 0, 0, 1});
  EXPECT_TRUE(d.corrupt);
  EXPECT_FALSE(d.write.has_value());
}

TEST(CounterState, RoundTripsAndRefusesGarbage) {
  CounterKeyState st;
  st.value = -42;
  for (std::uint64_t p = 1; p <= 3; ++p)
    for (std::uint64_t s = 0; s < 8; ++s) apply_add(st, CounterRecord{0, p, s, 1}, decide_add(&st, CounterRecord{0, p, s, 1}));
  const std::string bytes = encode_counter_state(st);
  auto back = decode_counter_state(bytes);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->value, st.value);
  EXPECT_EQ(back->tick, st.tick);
  ASSERT_EQ(back->producers.size(), 3u);
  for (auto& [id, p] : st.producers) {
    EXPECT_EQ(back->producers.at(id).next, p.next);
    EXPECT_EQ(back->producers.at(id).used, p.used);
    EXPECT_EQ(back->producers.at(id).answered, p.answered);
    EXPECT_EQ(p.answered.size(), kProducerWindow);
  }
  for (std::size_t cut = 0; cut < bytes.size(); ++cut)
    EXPECT_FALSE(decode_counter_state(bytes.substr(0, cut)).has_value()) << cut;
  EXPECT_FALSE(decode_counter_state(bytes + "x").has_value());
  std::string wrong = bytes;
  wrong[0] = 1;
  EXPECT_FALSE(decode_counter_state(wrong).has_value());
}

TEST(CounterState, AKeyForgetsItsLeastRecentlyUsedProducer) {
  CounterKeyState st;
  auto add = [&](std::uint64_t p, std::uint64_t s) {
    CounterRecord r{0, p, s, 1};
    AddDecision d = decide_add(&st, r);
    if (d.kind == K::apply) apply_add(st, r, d);
    return d;
  };
  for (std::uint64_t p = 1; p <= kMaxProducersPerKey; ++p) ASSERT_EQ(add(p, 0).kind, K::apply);
  ASSERT_EQ(add(1, 1).kind, K::apply);  // producer 1 is now the most recently used
  ASSERT_EQ(add(1000, 0).kind, K::apply);  // one too many: producer 2 (least recent) goes
  EXPECT_EQ(st.producers.size(), kMaxProducersPerKey);
  EXPECT_EQ(st.producers.count(2), 0u);
  EXPECT_EQ(add(1, 0).kind, K::duplicate);
  EXPECT_EQ(add(2, 0).kind, K::apply) << "a forgotten producer starts again at 0";
  EXPECT_EQ(st.value, static_cast<std::int64_t>(kMaxProducersPerKey) + 3);
}

}  // namespace
}  // namespace sluice::http_api
