// plugins/http-api/quotas.h and waiters.h: the per-tenant publish token bucket and the
// per-shard long-poll count, with time given explicitly (no sleeping).
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "quotas.h"
#include "waiters.h"

namespace sluice::http_api {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

TEST(PublishQuotas, OffAdmitsEverythingWithoutTracking) {
  PublishQuotas q(0);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(q.charge("t", 1 << 20), 0u);
  EXPECT_EQ(q.tracked(), 0u);
  EXPECT_EQ(q.rejections(), 0u);
}

TEST(PublishQuotas, ABucketGoesIntoDebtAndRefusesUntilItIsPaid) {
  PublishQuotas q(1000);
  const auto t0 = Clock::now();
  EXPECT_EQ(q.charge("a", 5000, t0), 0u);       // a full bucket admits, then owes 4,000
  EXPECT_EQ(q.charge("a", 1, t0), 4u);          // 4,000 bytes at 1,000/s
  EXPECT_EQ(q.charge("a", 1, t0 + 2s), 2u);     // half paid
  EXPECT_EQ(q.charge("a", 1, t0 + 4s), 1u);     // exactly paid: empty, not positive
  EXPECT_EQ(q.charge("a", 1, t0 + 4100ms), 0u);  // 100 bytes of credit
  EXPECT_EQ(q.rejections(), 3u);
  // Another tenant has its own bucket.
  EXPECT_EQ(q.charge("b", 900, t0), 0u);
  EXPECT_EQ(q.charge("b", 100, t0), 0u);
  EXPECT_EQ(q.charge("b", 1, t0), 1u);
  // A bucket never holds more than one second's worth, however long it was idle.
  EXPECT_EQ(q.charge("b", 1000, t0 + 1h), 0u);
  EXPECT_EQ(q.charge("b", 1, t0 + 1h), 1u);
}

TEST(PublishQuotas, IdleBucketsAreForgottenSoUnknownNamesCannotGrowTheMap) {
  PublishQuotas q(1000);
  const auto t0 = Clock::now();
  for (int i = 0; i < 20000; ++i) EXPECT_EQ(q.charge("tenant-" + std::to_string(i), 10, t0 + i * 1ms), 0u);
  // Every bucket refills within 10 ms of its charge, so pruning keeps only recent ones.
  EXPECT_LE(q.tracked(), 4096u + 16u);
}

TEST(ShardWaiters, CountsPerShardUpToTheLimit) {
  ShardWaiters w(2);
  const StreamKey a{"t", "n", "a"}, b{"t", "n", "b"};
  EXPECT_TRUE(w.try_add(a, ShardIndex{0}));
  EXPECT_TRUE(w.try_add(a, ShardIndex{0}));
  EXPECT_FALSE(w.try_add(a, ShardIndex{0}));
  EXPECT_TRUE(w.try_add(a, ShardIndex{1}));  // another shard
  EXPECT_TRUE(w.try_add(b, ShardIndex{0}));  // another stream
  w.remove(a, ShardIndex{0});
  EXPECT_TRUE(w.try_add(a, ShardIndex{0}));
  EXPECT_FALSE(w.try_add(a, ShardIndex{0}));
}

}  // namespace
}  // namespace sluice::http_api
