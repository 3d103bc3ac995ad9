// CacheStore against the in-memory FakeNode (fake_node.h), which models idempotent
// producers and can hold a publish: two stores on one node are two brokers writing the
// same shard, so the races of docs/api.md "Compare-and-set" can be driven step by step.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "cache_store.h"
#include "fake_node.h"

namespace sluice::http_api {
namespace {

using sluice::testing::FakeNode;

// Polls `cond` for up to 20 s (the machine may be slow); true once it holds.
template <class F>
bool eventually(F cond) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return cond();
}

CacheConfig one_shard() {
  CacheConfig cfg;
  cfg.shards = 1;
  cfg.threads = 1;
  return cfg;
}

const StreamKey kCache{"t", "n", "c"};

Result<CacheStore::Write> put(CacheStore& s, std::string_view k, std::string_view v) {
  return s.put(kCache, k, v, std::nullopt, std::nullopt, std::nullopt);
}

// Regression: a write that looked the cache up just before it was deleted created the
// backing stream after the delete had removed it; the stream stayed until a restart's
// sweep. The write now looks the cache up again after the create and removes what it made.
TEST(CacheStore, AWriteRacingTheCachesDeleteLeavesNoBackingStreamBehind) {
  FakeNode node;
  ASSERT_TRUE(node.catalog().create_cache(kCache, CacheSpec{}));
  CacheStore store(node, one_shard());
  // The delete lands between the write's lookup and its create of the backing stream.
  node.catalog_for_test().after_next_create_stream = [&](const StreamKey&) { (void)node.catalog().delete_cache(kCache); };
  auto w = put(store, "k", "v");
  ASSERT_FALSE(w);
  EXPECT_EQ(w.error().code, Errc::not_found) << w.error().to_string();
  auto left = node.catalog().list_streams("t", "n");
  ASSERT_TRUE(left);
  EXPECT_TRUE(left->empty()) << "a backing stream was left for the deleted cache: " << left->front().key.to_string();
  store.stop();
}

// Regression: a broker whose batch of three writes lost its sequence to another broker's
// batch of one waited for the third offset of a batch that was never its own (the leader
// answers the winner's base), timed out after 30 s and answered all three "uncertain"
// (504). It must see the other batch's nonce at that base and retry.
TEST(CacheStore, ABatchThatLosesToASmallerBatchIsRetriedNotLeftWaiting) {
  FakeNode node;
  ASSERT_TRUE(node.catalog().create_cache(kCache, CacheSpec{}).ok());
  CacheStore a(node, one_shard()), b(node, one_shard());
  ASSERT_TRUE(put(a, "seed", "0").ok());
  ASSERT_TRUE(b.get(kCache, "seed").ok());  // b's index is where a's is

  // b's first batch ([k1]) is held; k2 and k3 queue behind it.
  node.hold_next_publish();
  Result<CacheStore::Write> r1{Error(Errc::internal, "unset")}, r2 = r1, r3 = r1;
  std::thread t1([&] { r1 = put(b, "k1", "v1"); });
  ASSERT_TRUE(eventually([&] { return node.held_publishes() == 1; }));
  std::thread t2([&] { r2 = put(b, "k2", "v2"); });
  std::thread t3([&] { r3 = put(b, "k3", "v3"); });
  ASSERT_TRUE(eventually([&] { return b.pending_writes() == 3; }));

  // a takes that sequence; b's [k1] arrives late, loses, and is retried together with k2
  // and k3: one batch of three, held again.
  auto x = put(a, "x", "ax");
  ASSERT_TRUE(x.ok()) << x.error().message;
  node.hold_next_publish();
  node.release_held();
  ASSERT_TRUE(eventually([&] { return node.held_publishes() == 1; }));
  // a's batch of one takes the sequence of b's batch of three.
  auto y = put(a, "y", "ay");
  ASSERT_TRUE(y.ok());
  node.release_held();

  const auto start = std::chrono::steady_clock::now();
  t1.join();
  t2.join();
  t3.join();
  for (auto* r : {&r1, &r2, &r3}) ASSERT_TRUE(r->ok()) << r->error().message;
  // Answered by the next round, not by a timeout (which is 30 s and fails above).
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(25));
  // All three landed after a's writes, in one batch (in the order they queued).
  std::vector<std::uint64_t> revs{r1->revision, r2->revision, r3->revision};
  std::sort(revs.begin(), revs.end());
  EXPECT_EQ(revs, (std::vector<std::uint64_t>{y->revision + 1, y->revision + 2, y->revision + 3}));
  for (auto* s : {&a, &b}) {
    for (auto [k, v] : {std::pair{"k1", "v1"}, {"k2", "v2"}, {"k3", "v3"}, {"x", "ax"}, {"y", "ay"}}) {
      auto e = s->get(kCache, k);
      ASSERT_TRUE(e.ok()) << k;
      EXPECT_EQ(e->value, v);
    }
  }
}

// A compare-and-set decided by a broker whose batch lost is decided again on the new
// state: exactly one of two competing if_revision writes wins.
TEST(CacheStore, CompareAndSetAcrossTwoBrokersHasOneWinner) {
  FakeNode node;
  ASSERT_TRUE(node.catalog().create_cache(kCache, CacheSpec{}).ok());
  CacheStore a(node, one_shard()), b(node, one_shard());
  auto first = put(a, "k", "v0");
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(b.get(kCache, "k").ok());
  node.hold_next_publish();
  Result<CacheStore::Write> rb{Error(Errc::internal, "unset")};
  std::thread tb([&] { rb = b.put(kCache, "k", "from-b", std::nullopt, first->revision, std::nullopt); });
  ASSERT_TRUE(eventually([&] { return node.held_publishes() == 1; }));
  auto ra = a.put(kCache, "k", "from-a", std::nullopt, first->revision, std::nullopt);
  ASSERT_TRUE(ra.ok());
  EXPECT_EQ(ra->status, CacheStore::Write::Status::ok);
  node.release_held();
  tb.join();
  ASSERT_TRUE(rb.ok());
  EXPECT_EQ(rb->status, CacheStore::Write::Status::mismatch);
  EXPECT_EQ(rb->revision, ra->revision);  // the current revision, a's
  auto e = b.get(kCache, "k");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->value, "from-a");
}


// Reads are linearizable across a leader change: a new leader's high watermark can lag its
// log end (records acknowledged by the old leader that its followers have not fetched
// yet). A read must wait for them, not answer the older value from its index.
TEST(CacheStore, AReadWaitsForTheLeadersLogEndNotItsHighWatermark) {
  FakeNode node;
  ASSERT_TRUE(node.catalog().create_cache(kCache, CacheSpec{}).ok());
  CacheStore a(node, one_shard()), b(node, one_shard());
  ASSERT_TRUE(put(a, "k", "old").ok());
  ASSERT_TRUE(b.get(kCache, "k").ok());  // b indexed "old"
  auto fresh = put(a, "k", "new");     // acknowledged
  ASSERT_TRUE(fresh.ok());
  node.cap_high_watermark(fresh->revision - 1);  // the new leader does not show it yet
  Result<CacheEntry> got{Error(Errc::internal, "unset")};
  std::thread reader([&] { got = b.get(kCache, "k"); });
  // The read waits on the leader (a notify), instead of answering "old".
  const bool waited = eventually([&] { return node.pending_notifies() == 1; });
  node.cap_high_watermark(std::nullopt);
  reader.join();
  EXPECT_TRUE(waited);
  ASSERT_TRUE(got.ok()) << got.error().message;
  EXPECT_EQ(got->value, "new");
  EXPECT_EQ(got->revision, fresh->revision);
}

// Regression (CI, test_cache_brokers.CacheBrokers.test_acknowledged_puts_survive_a_leader_kill): a
// read whose fetch was forwarded to a leader that died mid-call failed with "unavailable,
// uncertain" (the transport cannot know whether a call it lost took effect) and went to
// the client as a 503 at once, because only "transient" errors were retried. A read changes
// nothing, so it is retried on any failure that is not definite, and never reports
// "uncertain"; so is a write's catch-up before it decides (docs/api.md "Caches").
TEST(CacheStore, AReadWhoseLeaderConnectionDiedIsRetried) {
  FakeNode node;
  ASSERT_TRUE(node.catalog().create_cache(kCache, CacheSpec{}).ok());
  CacheConfig quick = one_shard();
  quick.transient_retry = std::chrono::milliseconds(500);
  CacheStore a(node, one_shard()), b(node, quick);
  auto w = put(a, "k", "v");
  ASSERT_TRUE(w.ok());
  const Error lost(Errc::unavailable, "peer 2 at 127.0.0.1:1: the connection was closed", Outcome::uncertain);
  node.fail_next_fetches(3, lost);
  auto got = b.get(kCache, "k");
  ASSERT_TRUE(got.ok()) << got.error().message;
  EXPECT_EQ(got->value, "v");
  EXPECT_EQ(got->revision, w->revision);
  EXPECT_EQ(node.failing_fetches(), 0);

  // A write's catch-up (a read, before anything is decided or appended) likewise.
  ASSERT_TRUE(put(a, "k3", "from-a").ok());
  node.fail_next_fetches(3, lost);
  auto w3 = put(b, "k3", "from-b");
  ASSERT_TRUE(w3.ok()) << w3.error().message;
  EXPECT_EQ(node.failing_fetches(), 0);
  EXPECT_EQ(a.get(kCache, "k3")->value, "from-b");

  // When the failure outlasts the retry, the read says so as transient, not uncertain.
  ASSERT_TRUE(put(a, "k2", "v2").ok());  // b must fetch to list
  node.fail_next_fetches(1 << 30, lost);
  auto listed = b.list(kCache, "", "", 10);
  node.fail_next_fetches(0, lost);
  ASSERT_FALSE(listed.ok());
  EXPECT_EQ(listed.error().code, Errc::unavailable);
  EXPECT_EQ(listed.error().outcome, Outcome::transient);
}

// Regression (review): a fetch that failed transiently (a leader moving, a lost
// connection) dropped the whole index, so after every leader move every broker rebuilt
// each active shard from the log start, under the shard's lock. The index is kept.
TEST(CacheStore, AFetchThatFailsTransientlyKeepsTheIndex) {
  FakeNode node;
  ASSERT_TRUE(node.catalog().create_cache(kCache, CacheSpec{}).ok());
  CacheConfig quick = one_shard();
  quick.transient_retry = std::chrono::milliseconds(500);
  CacheStore a(node, one_shard()), b(node, quick);
  ASSERT_TRUE(put(a, "k", "v").ok());
  ASSERT_TRUE(b.get(kCache, "k").ok());  // b's index is built
  const int built = node.fetches_from_start();
  ASSERT_TRUE(put(a, "k2", "v2").ok());
  for (const Error& e : {Error(Errc::not_leader, "the leader moved", Outcome::transient),
                         Error(Errc::unavailable, "the connection was closed", Outcome::uncertain)}) {
    node.fail_next_fetches(1, e);
    auto got = b.get(kCache, "k2");
    ASSERT_TRUE(got.ok()) << got.error().message;
    EXPECT_EQ(got->value, "v2");
  }
  EXPECT_EQ(node.fetches_from_start(), built) << "the index was rebuilt from the log start";
}

// Regression (review): compaction on the leader trimmed a write's batch before its broker
// read the batch back; the rebuild from the log start never saw the batch's nonce, the
// write took it for another broker's win and was decided and appended again: a counter add
// counted twice. Whether it won can no longer be known: the answer is "uncertain", and
// nothing is appended again.
TEST(CacheStore, AWriteWhoseBatchWasTrimmedBeforeItWasReadBackIsUncertainNotRepeated) {
  FakeNode node;
  ASSERT_TRUE(node.catalog().create_cache(kCache, CacheSpec{}).ok());
  CacheStore a(node, one_shard());
  ASSERT_TRUE(put(a, "seed", "0").ok());
  const std::size_t before = node.stored_total();
  node.trim_after_next_publish();
  auto w = put(a, "k", "v");
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().outcome, Outcome::uncertain) << w.error().message;
  EXPECT_EQ(node.stored_total(), before + 1) << "the write was appended again";
}

// Regression (review): a broker whose feed had not yet applied a cache's backing stream
// (made by a write through another broker) took the miss for "nothing written": a read
// after an acknowledged write answered 404, a counter 0, a listing nothing. The catalog
// now tells the two apart, and the lag is transient (the read is retried, then 503).
TEST(CacheStore, AReadOnABrokerThatHasNotAppliedTheBackingStreamIsNotANotFound) {
  FakeNode node;
  ASSERT_TRUE(node.catalog().create_cache(kCache, CacheSpec{}).ok());
  CacheStore a(node, one_shard());
  ASSERT_TRUE(put(a, "k", "v").ok());
  CacheConfig cfg = one_shard();
  cfg.transient_retry = std::chrono::milliseconds(100);
  CacheStore b(node, cfg);  // another broker, behind on the feed
  node.lagging = true;
  auto g = b.get(kCache, "k");
  ASSERT_FALSE(g) << "answered as if nothing was written";
  EXPECT_EQ(g.error().code, Errc::unavailable) << g.error().to_string();
  EXPECT_EQ(g.error().outcome, Outcome::transient);
  auto l = b.list(kCache, "", "", 10);
  ASSERT_FALSE(l);
  EXPECT_EQ(l.error().code, Errc::unavailable) << l.error().to_string();
  node.lagging = false;  // the feed caught up
  auto g2 = b.get(kCache, "k");
  ASSERT_TRUE(g2) << g2.error().to_string();
  EXPECT_EQ(g2->value, "v");
  // A cache never written to is still an honest miss.
  const StreamKey empty{"t", "n", "empty"};
  ASSERT_TRUE(node.catalog().create_cache(empty, CacheSpec{}).ok());
  node.lagging = true;
  auto m = b.get(empty, "k");
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error().code, Errc::not_found) << m.error().to_string();
  node.lagging = false;
  a.stop();
  b.stop();
}

}  // namespace
}  // namespace sluice::http_api
