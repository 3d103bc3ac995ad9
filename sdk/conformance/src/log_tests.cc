// Conformance of the shard log (sluice/storage.h, ShardLog and StorageEngine): offsets,
// fetch bounds, the high watermark, notify and cancel, bad input, incarnation isolation
// and delete_incarnations.
#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>
#include <thread>

#include "conformance_util.h"
#include "sluice/testing/storage_conformance.h"

namespace sluice::testing {
namespace conformance_internal {
int log_tests_anchor = 0;
}  // namespace conformance_internal
namespace {

using namespace conformance_internal;

// --- offsets ------------------------------------------------------------------------

TEST_P(StorageConformance, OffsetsStartAtZeroAndAreContiguousPerShard) {
  auto s0 = open(shard_ref(0));
  auto s1 = open(shard_ref(1));
  ASSERT_TRUE(s0 && s1);
  std::uint64_t expect = 0;
  for (std::uint32_t n : {1u, 3u, 2u}) {
    auto r = append_wait(*s0, make_batch("s0-" + std::to_string(n), n));
    ASSERT_TRUE(r) << r.error().to_string();
    EXPECT_EQ(r->base_offset.value(), expect);
    EXPECT_EQ(r->count, n);
    EXPECT_FALSE(r->duplicate);
    expect += n;
  }
  auto r = append_wait(*s1, make_batch("s1", 2));
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->base_offset.value(), 0u) << "every shard has its own offsets from 0";
  auto all = read_all(*s0);
  ASSERT_EQ(all.size(), 6u);
  EXPECT_EQ(all[0], "s0-1#0");
  EXPECT_EQ(all[1], "s0-3#0");
  EXPECT_EQ(all[3], "s0-3#2");
  EXPECT_EQ(all[5], "s0-2#1");
}

TEST_P(StorageConformance, OffsetsOfConcurrentAppendsTileTheLog) {
  auto s = open(shard_ref());
  ASSERT_TRUE(s);
  constexpr int kThreads = 4, kPerThread = 25;
  std::mutex mu;
  std::map<std::uint64_t, std::vector<std::string>> by_base;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        std::string b = make_batch("t" + std::to_string(t) + "i" + std::to_string(i), 2);
        auto vals = values_of(b);
        auto r = append_wait(*s, std::move(b));
        std::lock_guard lk(mu);
        if (!r) {
          ADD_FAILURE() << r.error().to_string();
          continue;
        }
        if (!by_base.emplace(r->base_offset.value(), vals).second)
          ADD_FAILURE() << "two appends got base offset " << r->base_offset.value();
      }
    });
  for (auto& t : threads) t.join();
  auto all = read_all(*s);
  ASSERT_EQ(all.size(), std::size_t{kThreads * kPerThread * 2});
  std::uint64_t expect = 0;
  for (auto& [base, vals] : by_base) {
    ASSERT_EQ(base, expect) << "offsets must be contiguous";
    for (std::size_t k = 0; k < vals.size(); ++k) EXPECT_EQ(all[base + k], vals[k]);
    expect += vals.size();
  }
}

TEST_P(StorageConformance, OffsetsAckModeNoneAnswersAtOnceAndTheRecordBecomesVisible) {
  auto s = open(shard_ref());
  ASSERT_TRUE(s);
  auto r = append_wait(*s, make_batch("none", 3), AckMode::none);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->base_offset.value(), 0u);
  EXPECT_EQ(r->count, 3u);
  ASSERT_TRUE(eventually([&] { return s->stats().high_watermark.value() >= 3; }))
      << "an AckMode::none append never became visible";
  auto all = read_all(*s);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[2], "none#2");
}

TEST_P(StorageConformance, OpenShardReturnsTheSameObjectWhileOpen) {
  auto a = open(shard_ref());
  auto b = open(shard_ref());
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a.get(), b.get());
  EXPECT_EQ(a->ref(), shard_ref());
}

// --- fetch bounds ---------------------------------------------------------------------

TEST_P(StorageConformance, FetchAtTheHighWatermarkIsEmptyAndBeyondItIsInvalid) {
  auto s = open(shard_ref());
  ASSERT_TRUE(s);
  auto empty = s->read(Offset(0), 100, 1 << 20);
  ASSERT_TRUE(empty) << empty.error().to_string();
  EXPECT_TRUE(empty->batches.empty());
  EXPECT_EQ(empty->high_watermark.value(), 0u);
  auto beyond = s->read(Offset(1), 100, 1 << 20);
  ASSERT_FALSE(beyond);
  EXPECT_EQ(beyond.error().code, Errc::invalid_argument) << beyond.error().to_string();

  ASSERT_TRUE(append_wait(*s, make_batch("a", 4)));
  auto at = s->read(Offset(4), 100, 1 << 20);
  ASSERT_TRUE(at) << at.error().to_string();
  EXPECT_TRUE(at->batches.empty());
  EXPECT_EQ(at->high_watermark.value(), 4u);
  EXPECT_EQ(at->log_start.value(), 0u);
  auto past = s->read(Offset(5), 100, 1 << 20);
  ASSERT_FALSE(past);
  EXPECT_EQ(past.error().code, Errc::invalid_argument) << past.error().to_string();
}

TEST_P(StorageConformance, FetchHonoursMaxRecordsAndMaxBytesButReturnsAtLeastOneBatch) {
  auto s = open(shard_ref());
  ASSERT_TRUE(s);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(append_wait(*s, make_batch("b" + std::to_string(i), 1)));
  auto three = s->read(Offset(0), 3, 1 << 20);
  ASSERT_TRUE(three) << three.error().to_string();
  ASSERT_GE(three->batches.size(), 1u);
  EXPECT_LE(three->batches.size(), 3u) << "max_records = 3 over one-record batches";
  EXPECT_EQ(three->next_offset.value(), three->batches.size());
  auto one_byte = s->read(Offset(2), 100, 1);
  ASSERT_TRUE(one_byte) << one_byte.error().to_string();
  ASSERT_EQ(one_byte->batches.size(), 1u) << "max_bytes smaller than a batch still gives one batch";
  EXPECT_EQ(values_of(one_byte->batches[0]), std::vector<std::string>{"b2#0"});
  EXPECT_EQ(one_byte->next_offset.value(), 3u);
  EXPECT_EQ(one_byte->high_watermark.value(), 10u);
}

TEST_P(StorageConformance, FetchFromInsideABatchReturnsThatBatchAndTheNextOffsetAfterIt) {
  auto s = open(shard_ref());
  ASSERT_TRUE(s);
  ASSERT_TRUE(append_wait(*s, make_batch("five", 5)));
  ASSERT_TRUE(append_wait(*s, make_batch("two", 2)));
  auto r = s->read(Offset(3), 100, 1 << 20);
  ASSERT_TRUE(r) << r.error().to_string();
  ASSERT_FALSE(r->batches.empty());
  const BatchHeader h = BatchHeader::decode(r->batches[0].data());
  EXPECT_LE(h.base_offset, 3u);
  EXPECT_GT(h.next_offset(), 3u) << "the first batch must hold the requested offset";
  auto all = read_all(*s, 3);
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all.begin()->first, 3u);
  EXPECT_EQ(all[3], "five#3");
  EXPECT_EQ(all[6], "two#1");
}

TEST_P(StorageConformance, FetchReturnsTheStoredBatchStampedWithOffsetAndIncarnation) {
  const ShardRef ref = shard_ref(0, 7);
  auto s = open(ref);
  ASSERT_TRUE(s);
  ASSERT_TRUE(append_wait(*s, make_batch("first", 2)));
  BatchBuilder b;
  std::string headers;
  append_header(headers, "trace", "abc");
  b.add(std::nullopt, "no-key", headers, 4242);
  b.add("key", "", {}, 4243);
  ASSERT_TRUE(append_wait(*s, b.finish()));
  auto r = s->read(Offset(2), 100, 1 << 20);
  ASSERT_TRUE(r) << r.error().to_string();
  ASSERT_EQ(r->batches.size(), 1u);
  const std::string& got = r->batches[0];
  BatchHeader h;
  ASSERT_EQ(check_batch(got.data(), got.size(), &h), BatchCheck::ok);
  EXPECT_EQ(h.base_offset, 2u);
  EXPECT_EQ(h.incarnation, 7u);
  EXPECT_EQ(h.record_count, 2u);
  BatchReader reader(got.data(), got.size());
  RecordView rv;
  ASSERT_TRUE(reader.next(rv));
  EXPECT_FALSE(rv.key.has_value());
  EXPECT_EQ(rv.value, "no-key");
  EXPECT_EQ(rv.timestamp_ms, 4242);
  EXPECT_EQ(header_of(got, 2, "trace"), "abc");
  ASSERT_TRUE(reader.next(rv));
  EXPECT_EQ(rv.offset, 3u);
  ASSERT_TRUE(rv.key.has_value());
  EXPECT_EQ(*rv.key, "key");
  EXPECT_EQ(rv.value, "");
}

// --- the high watermark ------------------------------------------------------------------

TEST_P(StorageConformance, HighWatermarkCoversEveryAcknowledgedAppend) {
  auto s = open(shard_ref());
  ASSERT_TRUE(s);
  for (int i = 0; i < 5; ++i) {
    auto r = append_wait(*s, make_batch("h" + std::to_string(i), 3));
    ASSERT_TRUE(r) << r.error().to_string();
    const std::uint64_t end = r->base_offset.value() + r->count;
    EXPECT_GE(s->stats().high_watermark.value(), end);
    auto f = s->read(r->base_offset, 100, 1 << 20);
    ASSERT_TRUE(f) << f.error().to_string();
    EXPECT_GE(f->high_watermark.value(), end) << "an acknowledged record must be visible";
    ASSERT_FALSE(f->batches.empty());
  }
  EXPECT_EQ(s->stats().high_watermark.value(), 15u);
  EXPECT_EQ(s->stats().log_start.value(), 0u);
}

// --- notify and cancel -------------------------------------------------------------------

TEST_P(StorageConformance, NotifyFiresInlineWhenTheHighWatermarkIsAlreadyBeyond) {
  auto s = open(shard_ref());
  ASSERT_TRUE(s);
  ASSERT_TRUE(append_wait(*s, make_batch("n", 2)));
  int calls = 0;
  const std::uint64_t h = s->notify_when_beyond(Offset(1), [&] { ++calls; });
  EXPECT_EQ(h, 0u);
  EXPECT_EQ(calls, 1);
}

TEST_P(StorageConformance, NotifyFiresOnceWhenAnAppendPassesTheOffset) {
  auto s = open(shard_ref());
  ASSERT_TRUE(s);
  ASSERT_TRUE(append_wait(*s, make_batch("n", 1)));
  std::atomic<int> calls{0};
  const std::uint64_t h = s->notify_when_beyond(Offset(1), [&] { ++calls; });
  EXPECT_NE(h, 0u);
  EXPECT_EQ(calls.load(), 0) << "the high watermark is 1: offset 1 is not passed yet";
  ASSERT_TRUE(append_wait(*s, make_batch("m", 1)));
  ASSERT_TRUE(eventually([&] { return calls.load() == 1; }));
  ASSERT_TRUE(append_wait(*s, make_batch("o", 1)));
  std::atomic<int> later{0};
  EXPECT_EQ(s->notify_when_beyond(Offset(2), [&] { ++later; }), 0u);
  EXPECT_EQ(later.load(), 1);
  EXPECT_EQ(calls.load(), 1) << "a waiter is called exactly once";
  s->cancel_notify(h);  // already fired: ignored
  s->cancel_notify(0);  // ignored
}

TEST_P(StorageConformance, NotifyCancelDropsTheWaiterAndDestroysItsCallback) {
  auto s = open(shard_ref());
  ASSERT_TRUE(s);
  auto token = std::make_shared<int>(0);
  std::atomic<int> cancelled_calls{0}, other_calls{0};
  const std::uint64_t h = s->notify_when_beyond(Offset(0), [&, token] { ++cancelled_calls; });
  ASSERT_NE(h, 0u);
  EXPECT_GT(token.use_count(), 1) << "the engine holds the callback";
  s->cancel_notify(h);
  EXPECT_EQ(token.use_count(), 1) << "cancel_notify must destroy the callback before it returns";
  const std::uint64_t h2 = s->notify_when_beyond(Offset(0), [&] { ++other_calls; });
  ASSERT_NE(h2, 0u);
  ASSERT_TRUE(append_wait(*s, make_batch("n", 1)));
  ASSERT_TRUE(eventually([&] { return other_calls.load() == 1; }));
  EXPECT_EQ(cancelled_calls.load(), 0) << "a cancelled waiter fired";
}

TEST_P(StorageConformance, NotifyCloseCallsThePendingWaiters) {
  auto s = open(shard_ref());
  ASSERT_TRUE(s);
  std::atomic<int> calls{0};
  ASSERT_NE(s->notify_when_beyond(Offset(0), [&] { ++calls; }), 0u);
  engine().close_shard(shard_ref());
  ASSERT_TRUE(eventually([&] { return calls.load() == 1; })) << "close must call the waiters";
}

// --- bad input ---------------------------------------------------------------------------

TEST_P(StorageConformance, BadInputMalformedBatchesAreRefusedAndNothingIsWritten) {
  auto s = open(shard_ref());
  ASSERT_TRUE(s);
  const std::string good = make_batch("good", 2);
  std::string bad_crc = good;
  bad_crc[bad_crc.size() - 1] ^= 0x55;
  std::string bad_magic = good;
  bad_magic[0] = 'X';
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"empty", ""},
      {"garbage", std::string(100, 'z')},
      {"bad CRC", bad_crc},
      {"bad magic", bad_magic},
      {"truncated", good.substr(0, good.size() - 3)},
      {"trailing bytes", good + "xx"},
      {"header only", good.substr(0, kBatchHeaderSize)},
  };
  for (const auto& [what, bytes] : cases) {
    auto r = append_wait(*s, bytes);
    ASSERT_FALSE(r) << what << " was accepted";
    EXPECT_TRUE(r.error().code == Errc::malformed_body || r.error().code == Errc::invalid_argument)
        << what << ": " << r.error().to_string();
    EXPECT_EQ(s->stats().high_watermark.value(), 0u) << what;
  }
  auto r = append_wait(*s, good);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->base_offset.value(), 0u) << "a refused batch must not take offsets";
  EXPECT_EQ(read_all(*s).size(), 2u);
}

// --- incarnation isolation ---------------------------------------------------------------

TEST_P(StorageConformance, IncarnationsKeepTheirOwnOffsetsAndData) {
  auto old_inc = open(shard_ref(0, 0));
  ASSERT_TRUE(old_inc);
  ASSERT_TRUE(append_wait(*old_inc, make_batch("old", 3)));
  auto new_inc = open(shard_ref(0, 1));
  ASSERT_TRUE(new_inc);
  EXPECT_NE(old_inc.get(), new_inc.get());
  EXPECT_EQ(new_inc->stats().high_watermark.value(), 0u) << "a new incarnation starts empty";
  auto r = append_wait(*new_inc, make_batch("new", 1));
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->base_offset.value(), 0u) << "offsets start at 0 in every incarnation";
  auto fresh = read_all(*new_inc);  // also checks the incarnation stamped on each batch
  ASSERT_EQ(fresh.size(), 1u);
  EXPECT_EQ(fresh[0], "new#0");
  auto old_all = read_all(*old_inc);
  ASSERT_EQ(old_all.size(), 3u);
  EXPECT_EQ(old_all[0], "old#0");
}

// --- delete_incarnations -----------------------------------------------------------------

TEST_P(StorageConformance, DeleteIncarnationsRemovesUpToTheBoundAndKeepsTheRest) {
  const std::vector<ShardRef> doomed = {shard_ref(0, 0), shard_ref(1, 0), shard_ref(0, 1)};
  const ShardRef kept = shard_ref(0, 2), other = shard_ref(0, 0, "other");
  std::shared_ptr<ShardLog> held;
  for (const auto& ref : doomed) {
    auto s = open(ref);
    ASSERT_TRUE(s);
    ASSERT_TRUE(append_wait(*s, make_batch("doomed", 2)));
    held = s;
  }
  for (const auto& ref : {kept, other}) {
    auto s = open(ref);
    ASSERT_TRUE(s);
    ASSERT_TRUE(append_wait(*s, make_batch("kept-" + ref.stream.name, 2)));
  }
  auto n = engine().delete_incarnations(shard_ref().stream, Incarnation(1));
  ASSERT_TRUE(n) << n.error().to_string();
  EXPECT_EQ(*n, 3u) << "one shard incarnation per doomed (shard, incarnation)";

  auto after_append = append_wait(*held, make_batch("late", 1));
  EXPECT_FALSE(after_append) << "a deleted incarnation's open shard must be closed";
  held.reset();

  auto check_listing = [&] {
    auto on_disk = engine().list_on_disk();
    ASSERT_TRUE(on_disk) << on_disk.error().to_string();
    std::set<ShardRef> refs(on_disk->begin(), on_disk->end());
    for (const auto& d : doomed) EXPECT_EQ(refs.count(d), 0u) << d.to_string() << " still listed";
    EXPECT_EQ(refs.count(kept), 1u) << kept.to_string() << " not listed";
    EXPECT_EQ(refs.count(other), 1u) << other.to_string() << " not listed";
  };
  check_listing();
  if (!opt_outs().no_restart_persistence) {
    restart();
    check_listing();
  }
  for (const auto& ref : {kept, other}) {
    auto s = open(ref);
    ASSERT_TRUE(s);
    auto all = read_all(*s);
    ASSERT_EQ(all.size(), 2u) << ref.to_string();
    EXPECT_EQ(all[0], "kept-" + ref.stream.name + "#0");
  }
  auto again = open(doomed[0]);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->stats().high_watermark.value(), 0u) << "no record of a deleted incarnation is served";
  EXPECT_TRUE(read_all(*again).empty());
}

TEST_P(StorageConformance, DeleteIncarnationsWithNothingToDeleteReturnsZero) {
  auto s = open(shard_ref(0, 5));
  ASSERT_TRUE(s);
  ASSERT_TRUE(append_wait(*s, make_batch("x", 1)));
  auto n = engine().delete_incarnations(shard_ref().stream, Incarnation(4));
  ASSERT_TRUE(n) << n.error().to_string();
  EXPECT_EQ(*n, 0u);
  auto m = engine().delete_incarnations(StreamKey{"acme", "orders", "nothing"}, Incarnation(9));
  ASSERT_TRUE(m) << m.error().to_string();
  EXPECT_EQ(*m, 0u);
  EXPECT_EQ(read_all(*s).size(), 1u);
}

}  // namespace
}  // namespace sluice::testing
