// Where a replicated shard's log starts (shard_log_start.cc): retention never passes the
// high watermark.
#include <gtest/gtest.h>

#include "replica_node.h"
#include "storage_test_util.h"

namespace sluice::fs_storage::testing {
namespace {

StreamSpec with_retention(std::int64_t max_bytes) {
  StreamSpec s = repl_spec();
  s.retention = RetentionPolicy{max_bytes, -1};
  return s;
}

TEST(ReplicaLogStartTest, RetentionNeverMovesTheLogStartPastTheHighWatermark) {
  Node a(kIncarnation, with_retention(1024));
  ASSERT_TRUE(a.log->become_leader(LeaderEpoch(1)));
  append_n(*a.log, "r", 10);  // segments at 0, 6, 12, 18, 24: about 4.5 KiB, over 1 KiB
  a.engine->run_retention_once();
  EXPECT_EQ(a.log->log_start(), Offset(0)) << "retention removed records nobody has committed";
  a.log->advance_high_watermark(Offset(14));
  a.engine->run_retention_once();
  // The segment [12, 18) holds the high watermark: it and everything after it stay.
  EXPECT_EQ(a.log->log_start(), Offset(12));
  a.log->advance_high_watermark(Offset(30));
  a.engine->run_retention_once();
  EXPECT_EQ(a.log->log_start(), Offset(24));
}

}  // namespace
}  // namespace sluice::fs_storage::testing
