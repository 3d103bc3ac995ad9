// Directory layout per shard incarnation, name validation, and configuration parsing.
#include <gtest/gtest.h>

#include <filesystem>
#include <stdexcept>

#include "layout.h"
#include "storage_test_util.h"

namespace sluice::fs_storage::testing {
namespace {

using sluice::testing::TestHost;

TEST(LayoutTest, IncarnationZeroKeepsLegacyNameAndOthersGetHexSuffix) {
  EXPECT_EQ(shard_dir_name(ShardIndex(3), Incarnation(0)), "3");
  EXPECT_EQ(shard_dir_name(ShardIndex(3), Incarnation(0xab)), "3-00000000000000ab");
  TestHost host;
  host.set("storage.retention_interval_ms", "0");
  FsStorageEngine e(host, std::make_shared<PosixFileSystem>());
  ASSERT_TRUE(e.open_shard(test_ref(3, 0), StreamSpec{}));
  ASSERT_TRUE(e.open_shard(test_ref(3, 0xab), StreamSpec{}));
  const std::string base = host.data_dir() + "/shards/acme/orders/events/";
  EXPECT_TRUE(std::filesystem::exists(base + "3/log/00000000000000000000.log"));
  EXPECT_TRUE(std::filesystem::exists(base + "3-00000000000000ab/log/00000000000000000000.log"));
}

TEST(LayoutTest, IncarnationsOfOneShardHaveSeparateLogs) {
  TestHost host;
  host.set("storage.retention_interval_ms", "0");
  FsStorageEngine e(host, std::make_shared<PosixFileSystem>());
  auto a = e.open_shard(test_ref(1, 0), StreamSpec{});
  auto b = e.open_shard(test_ref(1, 7), StreamSpec{});
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(append_wait(**a, make_batch("a", 5)));
  auto r = append_wait(**b, make_batch("b", 1));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->base_offset.value(), 0u) << "every incarnation starts at offset 0";
  EXPECT_EQ(e.open_shard(test_ref(1, 7), StreamSpec{})->get(), b->get()) << "same object while open";
}

TEST(LayoutTest, InvalidNamesAreRejectedBeforeAnyPathIsBuilt) {
  TestHost host;
  host.set("storage.retention_interval_ms", "0");
  FsStorageEngine e(host, std::make_shared<PosixFileSystem>());
  for (StreamKey k : {StreamKey{"..", "n", "s"}, StreamKey{"t", "a/b", "s"}, StreamKey{"t", "n", ""},
                      StreamKey{"t", "n", ".deleted"}, StreamKey{"t", "n", std::string("a\0b", 3)}}) {
    auto r = e.open_shard(ShardRef{k, ShardIndex(0), Incarnation(0)}, StreamSpec{});
    ASSERT_FALSE(r) << k.to_string();
    EXPECT_EQ(r.error().code, Errc::invalid_name) << k.to_string();
  }
  EXPECT_FALSE(std::filesystem::exists(host.data_dir() + "/shards"));
}

TEST(LayoutTest, SegmentFileNamesRoundTrip) {
  EXPECT_EQ(segment_file_name(1234), "00000000000000001234.log");
  EXPECT_EQ(index_file_name(1234), "00000000000000001234.idx");
  EXPECT_EQ(parse_offset_file_name("00000000000000001234.log", ".log"), 1234u);
  EXPECT_FALSE(parse_offset_file_name("0000000000000000123x.log", ".log"));
  EXPECT_FALSE(parse_offset_file_name("00000000000000001234.idx.tmp", ".idx"));
}

TEST(LayoutTest, StorageDirConfigOverridesTheDefault) {
  TestHost host;
  host.set("storage.retention_interval_ms", "0");
  host.set("storage.dir", host.data_dir() + "/elsewhere/");
  FsStorageEngine e(host, std::make_shared<PosixFileSystem>());
  ASSERT_TRUE(e.open_shard(test_ref(), StreamSpec{}));
  EXPECT_TRUE(std::filesystem::exists(host.data_dir() + "/elsewhere/acme/orders/events/0/log"));
}

TEST(OptionsTest, BadValuesAreRejectedAtConstructionAndANodesDefaultsAreTheDocumentedOnes) {
  for (auto [k, v] : std::vector<std::pair<std::string, std::string>>{
           {"storage.fsync", "sometimes"}, {"storage.verify_on_start", "some"},
           {"storage.segment_bytes", "10"}, {"storage.flush_threads", "0"},
           {"storage.verify_mb_per_sec", "-1"}}) {
    TestHost host;
    host.set(k, v);
    EXPECT_THROW(FsStorageEngine(host, std::make_shared<PosixFileSystem>()), std::invalid_argument) << k;
  }
  TestHost host;
  auto o = Options::from_host(host);
  EXPECT_EQ(o.fsync, FsyncPolicy::always);
  // A node starts fast and CRC-checks what it skipped in the background (docs/architecture.md
  // "Restart: background verification"); a repair checks everything at start.
  EXPECT_EQ(o.verify_on_start, VerifyOnStart::checkpoint);
  EXPECT_TRUE(o.verify_in_background);
  EXPECT_EQ(o.verify_bytes_per_sec, 128ull << 20);
  host.set("storage.repair", "true");
  EXPECT_EQ(Options::from_host(host).verify_on_start, VerifyOnStart::all);
  EXPECT_EQ(o.segment_bytes, 64ull << 20);
  // Two flushers, so one shard's fdatasync overlaps another's (docs/benchmarks.md "Two
  // flushers"); at most 8.
  EXPECT_EQ(o.flush_threads, 2u);
  host.set("storage.flush_threads", "9");
  EXPECT_THROW(Options::from_host(host), std::invalid_argument);
  EXPECT_EQ(o.dir, host.data_dir() + "/shards");
  // Preallocated segments (docs/architecture.md "Preallocated segments"), but not without
  // syncs, where they could only cost.
  EXPECT_TRUE(o.preallocate_segments);
  TestHost never;
  never.set("storage.fsync", "never");
  EXPECT_FALSE(Options::from_host(never).preallocate_segments);
}

}  // namespace
}  // namespace sluice::fs_storage::testing
