// Idempotent producers: duplicates get the original offsets and write nothing, gaps are
// refused, and the state survives crashes, reopens (both verify modes) and retention, per
// shard incarnation.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <mutex>

#include "layout.h"
#include "storage_test_util.h"

namespace sluice::fs_storage::testing {
namespace {

using sluice::testing::TestHost;

std::string pbatch(std::uint64_t producer, std::uint64_t seq, std::uint32_t records,
                   std::size_t pad = 0) {
  BatchBuilder b;
  for (std::uint32_t i = 0; i < records; ++i)
    b.add(std::nullopt, "p" + std::to_string(producer) + "s" + std::to_string(seq) + "#" +
                            std::to_string(i) + std::string(pad, 'x'),
          {}, 1000);
  b.set_producer(producer, seq);
  return b.finish();
}

class ProducerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    host_.set("storage.retention_interval_ms", "0");
    host_.set("storage.segment_bytes", "1024");
    fs_ = std::make_shared<FaultFileSystem>();
  }
  std::shared_ptr<ShardLog> open(const ShardRef& ref = test_ref()) {
    if (!engine_) engine_ = std::make_unique<FsStorageEngine>(host_, fs_);
    auto s = engine_->open_shard(ref, StreamSpec{});
    EXPECT_TRUE(s) << s.error().to_string();
    return s ? *s : nullptr;
  }
  void reopen_engine() {
    engine_.reset();
    fs_->restart();
  }
  TestHost host_;
  std::shared_ptr<FaultFileSystem> fs_;
  std::unique_ptr<FsStorageEngine> engine_;
};

TEST_F(ProducerTest, DuplicateReturnsTheOriginalOffsetsAndWritesNothing) {
  auto s = open();
  ASSERT_TRUE(append_wait(*s, make_batch("plain", 2)));
  auto a = append_wait(*s, pbatch(7, 0, 3));
  auto b = append_wait(*s, pbatch(7, 1, 2));
  ASSERT_TRUE(a && b);
  EXPECT_FALSE(a->duplicate);
  EXPECT_EQ(a->base_offset.value(), 2u);
  const auto before = s->stats();
  auto d = append_wait(*s, pbatch(7, 0, 3));
  ASSERT_TRUE(d) << d.error().to_string();
  EXPECT_TRUE(d->duplicate);
  EXPECT_EQ(d->base_offset.value(), 2u);
  EXPECT_EQ(d->count, 3u);
  auto d2 = append_wait(*s, pbatch(7, 1, 2), AckMode::none);
  ASSERT_TRUE(d2);
  EXPECT_TRUE(d2->duplicate);
  EXPECT_EQ(d2->base_offset.value(), 5u);
  const auto after = s->stats();
  EXPECT_EQ(after.high_watermark, before.high_watermark);
  EXPECT_EQ(after.size_bytes, before.size_bytes);
  EXPECT_EQ(after.appended_records, before.appended_records);
  EXPECT_EQ(read_all(*s).size(), 7u);
}

TEST_F(ProducerTest, GapsAndStaleSequencesAreRefusedNamingTheExpectedSequence) {
  auto s = open();
  for (std::uint64_t q = 0; q < 8; ++q) ASSERT_TRUE(append_wait(*s, pbatch(9, q, 1)));
  const auto before = s->stats();
  auto check_gap = [&](std::uint64_t producer, std::uint64_t seq, const std::string& expected) {
    auto r = append_wait(*s, pbatch(producer, seq, 1));
    ASSERT_FALSE(r) << "seq " << seq;
    EXPECT_EQ(r.error().code, Errc::sequence_gap);
    EXPECT_NE(r.error().message.find("expected sequence " + expected), std::string::npos)
        << r.error().message;
  };
  check_gap(9, 9, "8");   // skipped one
  check_gap(9, 2, "8");   // older than the last 5 (3..7)
  check_gap(10, 4, "0");  // a new producer starts at 0
  for (std::uint64_t q = 3; q < 8; ++q) {
    auto r = append_wait(*s, pbatch(9, q, 1));
    ASSERT_TRUE(r);
    EXPECT_TRUE(r->duplicate);
    EXPECT_EQ(r->base_offset.value(), q);
  }
  EXPECT_EQ(s->stats().high_watermark, before.high_watermark) << "nothing written";
  auto next = append_wait(*s, pbatch(9, 8, 1));
  ASSERT_TRUE(next);
  EXPECT_FALSE(next->duplicate);
  EXPECT_EQ(next->base_offset.value(), 8u);
}

TEST_F(ProducerTest, IncarnationsDoNotShareProducerState) {
  auto a = open(test_ref(0, 1));
  ASSERT_TRUE(append_wait(*a, pbatch(5, 0, 2)));
  ASSERT_TRUE(append_wait(*a, pbatch(5, 1, 2)));
  auto b = open(test_ref(0, 2));
  auto r = append_wait(*b, pbatch(5, 0, 2));
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->duplicate) << "the first send to a new incarnation is never a duplicate";
  EXPECT_EQ(r->base_offset.value(), 0u);
  auto g = append_wait(*b, pbatch(5, 2, 2));
  ASSERT_FALSE(g);
  EXPECT_EQ(g.error().code, Errc::sequence_gap);
  // Also after a delete of the old incarnation and a reopen of the new one.
  ASSERT_TRUE(engine_->delete_incarnations(test_ref().stream, Incarnation(1)));
  reopen_engine();
  auto b2 = open(test_ref(0, 2));
  auto d = append_wait(*b2, pbatch(5, 0, 2));
  ASSERT_TRUE(d);
  EXPECT_TRUE(d->duplicate);
}

TEST_F(ProducerTest, DuplicateOfAnInFlightBatchCompletesRightAfterTheOriginal) {
  auto s = open();
  ASSERT_TRUE(append_wait(*s, pbatch(3, 0, 1)));
  fs_->block_syncs();
  std::mutex mu;
  std::vector<std::string> order;
  std::vector<Result<AppendResult>> results;
  auto record = [&](std::string who) {
    return [&, who](Result<AppendResult> r) {
      std::lock_guard lk(mu);
      order.push_back(who);
      results.push_back(std::move(r));
    };
  };
  s->append(pbatch(3, 1, 2), AckMode::leader, record("original"));
  ASSERT_TRUE(eventually([&] { return fs_->blocked_sync_waiters() >= 1; }));
  s->append(pbatch(3, 1, 2), AckMode::leader, record("retry"));
  {
    std::lock_guard lk(mu);
    EXPECT_TRUE(order.empty()) << "the retry waits for the original's sync";
  }
  fs_->unblock_syncs();
  ASSERT_TRUE(eventually([&] {
    std::lock_guard lk(mu);
    return order.size() == 2;
  }));
  EXPECT_EQ(order, (std::vector<std::string>{"original", "retry"}));
  ASSERT_TRUE(results[0] && results[1]);
  EXPECT_FALSE(results[0]->duplicate);
  EXPECT_TRUE(results[1]->duplicate);
  EXPECT_EQ(results[1]->base_offset, results[0]->base_offset);
  EXPECT_EQ(s->stats().high_watermark.value(), 3u);
}

TEST_F(ProducerTest, DuplicateOfAnInFlightBatchSharesItsFailure) {
  auto s = open();
  fs_->block_syncs();
  std::mutex mu;
  std::vector<Result<AppendResult>> results;
  auto cb = [&](Result<AppendResult> r) {
    std::lock_guard lk(mu);
    results.push_back(std::move(r));
  };
  s->append(pbatch(3, 0, 2), AckMode::leader, cb);
  ASSERT_TRUE(eventually([&] { return fs_->blocked_sync_waiters() >= 1; }));
  s->append(pbatch(3, 0, 2), AckMode::leader, cb);
  fs_->fail_syncs(true);
  fs_->unblock_syncs();
  ASSERT_TRUE(eventually([&] {
    std::lock_guard lk(mu);
    return results.size() == 2;
  }));
  for (auto& r : results) {
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, Errc::storage_failure);
    EXPECT_EQ(r.error().outcome, Outcome::uncertain);
  }
}

// Acknowledged batches stay duplicates across a crash; a batch lost in the crash (never
// acknowledged) is appended again on retry. Both verify modes, several segments.
TEST_F(ProducerTest, StateSurvivesCrashAndReopenInBothVerifyModes) {
  for (std::string mode : {"all", "tail"}) {
    SCOPED_TRACE(mode);
    TestHost host;
    host.set("storage.retention_interval_ms", "0");
    host.set("storage.segment_bytes", "1024");
    host.set("storage.verify_on_start", mode);
    auto fs = std::make_shared<FaultFileSystem>();
    std::map<std::uint64_t, std::uint64_t> base_of;  // seq -> base (producer 11)
    {
      FsStorageEngine e(host, fs);
      auto s = *e.open_shard(test_ref(), StreamSpec{});
      for (std::uint64_t q = 0; q < 30; ++q) {
        ASSERT_TRUE(append_wait(*s, make_batch("other", 1, 1000, 40)));
        auto r = append_wait(*s, pbatch(11, q, 2, 40));
        ASSERT_TRUE(r);
        base_of[q] = r->base_offset.value();
      }
      ASSERT_GT(s->stats().segments, 3u);
      fs->block_syncs();
      std::atomic<bool> answered{false};
      s->append(pbatch(11, 30, 2), AckMode::leader, [&](Result<AppendResult> r) {
        EXPECT_FALSE(r);
        answered = true;
      });
      ASSERT_TRUE(eventually([&] { return fs->blocked_sync_waiters() >= 1; }));
      fs->crash(42, CrashOptions{});
      fs->unblock_syncs();
      ASSERT_TRUE(eventually([&] { return answered.load(); }));
      e.shutdown();
    }
    fs->restart();
    for (int reopen = 0; reopen < 2; ++reopen) {
      FsStorageEngine e(host, fs);
      auto s = *e.open_shard(test_ref(), StreamSpec{});
      // The last 5: 25..29 before seq 30 is re-sent, 26..30 after.
      const std::uint64_t first = reopen == 0 ? 25 : 26;
      for (std::uint64_t q = first; q < first + 5; ++q) {
        auto d = append_wait(*s, pbatch(11, q, 2, q == 30 ? 0 : 40));
        ASSERT_TRUE(d) << d.error().to_string();
        EXPECT_TRUE(d->duplicate) << "seq " << q;
        EXPECT_EQ(d->base_offset.value(), base_of[q]) << "seq " << q;
      }
      auto old = append_wait(*s, pbatch(11, first - 1, 2, 40));
      ASSERT_FALSE(old);
      EXPECT_EQ(old.error().code, Errc::sequence_gap);
      if (reopen == 0) {  // the lost, never-acknowledged seq 30 is not a duplicate
        auto r = append_wait(*s, pbatch(11, 30, 2));
        ASSERT_TRUE(r);
        EXPECT_FALSE(r->duplicate);
        base_of[30] = r->base_offset.value();
      }
    }
  }
}

TEST_F(ProducerTest, RetentionDoesNotForgetProducerStateAndABadSnapshotIsRebuilt) {
  for (std::string mode : {"all", "tail"}) {
    SCOPED_TRACE(mode);
    TestHost host;
    host.set("storage.retention_interval_ms", "0");
    host.set("storage.segment_bytes", "1024");
    host.set("storage.verify_on_start", mode);
    auto fs = std::make_shared<PosixFileSystem>();
    StreamSpec spec;
    spec.retention.max_bytes = 1500;
    std::uint64_t base4 = 0;
    {
      FsStorageEngine e(host, fs);
      auto s = *e.open_shard(test_ref(), spec);
      for (std::uint64_t q = 0; q < 5; ++q) {
        auto r = append_wait(*s, pbatch(21, q, 2, 40));
        ASSERT_TRUE(r);
        base4 = r->base_offset.value();
      }
      // Another producer fills several segments, pushing producer 21 out of the log.
      for (std::uint64_t q = 0; q < 40; ++q) ASSERT_TRUE(append_wait(*s, pbatch(22, q, 2, 40)));
      e.run_retention_once();
      ASSERT_GT(s->stats().log_start.value(), base4 + 2) << "producer 21's batches are gone";
      auto d = append_wait(*s, pbatch(21, 4, 2, 40));
      ASSERT_TRUE(d);
      EXPECT_TRUE(d->duplicate);
    }
    {
      FsStorageEngine e(host, fs);
      auto s = *e.open_shard(test_ref(), spec);
      auto d = append_wait(*s, pbatch(21, 4, 2, 40));
      ASSERT_TRUE(d) << d.error().to_string();
      EXPECT_TRUE(d->duplicate);
      EXPECT_EQ(d->base_offset.value(), base4);
      auto n = append_wait(*s, pbatch(21, 5, 1));
      ASSERT_TRUE(n) << n.error().to_string();
      EXPECT_FALSE(n->duplicate);
    }
    // A corrupt snapshot is ignored: producers still in the log are rebuilt by the scan.
    const std::string snap =
        host.data_dir() + "/shards/acme/orders/events/0/log/" + std::string(kProducerSnapshotName);
    ASSERT_TRUE(std::filesystem::exists(snap));
    std::ofstream(snap, std::ios::binary | std::ios::trunc) << "garbage";
    {
      FsStorageEngine e(host, fs);
      auto s = *e.open_shard(test_ref(), spec);
      EXPECT_TRUE(host.logged("rebuilding producer state"));
      auto d = append_wait(*s, pbatch(22, 39, 2, 40));
      ASSERT_TRUE(d) << d.error().to_string();
      EXPECT_TRUE(d->duplicate);
    }
  }
}

TEST(ProducerTableTest, SnapshotRoundTrips) {
  ProducerTable t;
  for (std::uint64_t q = 0; q < 9; ++q) t.record(1, q, q * 10, 3);
  t.record(2, 0, 500, 1);
  std::uint64_t end = 0;
  auto d = ProducerTable::decode_snapshot(t.encode_snapshot(777), &end);
  ASSERT_TRUE(d) << d.error().to_string();
  EXPECT_EQ(end, 777u);
  EXPECT_EQ(d->check(1, 9).verdict, ProducerTable::Verdict::append);
  EXPECT_EQ(d->check(1, 4).verdict, ProducerTable::Verdict::duplicate);
  EXPECT_EQ(d->check(1, 4).original.base, 40u);
  EXPECT_EQ(d->check(1, 3).verdict, ProducerTable::Verdict::gap);
  EXPECT_EQ(d->check(2, 0).original.base, 500u);
  std::string bytes = t.encode_snapshot(1);
  bytes[25] ^= 1;
  EXPECT_FALSE(ProducerTable::decode_snapshot(bytes, &end));
}

}  // namespace
}  // namespace sluice::fs_storage::testing
