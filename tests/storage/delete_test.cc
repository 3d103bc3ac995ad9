// The delete protocol (storage.h delete_incarnations): marker, move to .deleted/, unmark,
// and the start-up recovery that finishes an interrupted delete before any shard opens.
// Crashes are simulated with the engine's step hook (the delete stops right after the
// named step, leaving what a SIGKILL at the failpoint of the same name would leave) and
// by building the partial state by hand.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <optional>
#include <thread>

#include "layout.h"
#include "storage_test_util.h"

namespace sluice::fs_storage::testing {
namespace {

using sluice::testing::TestHost;
namespace stdfs = std::filesystem;

StreamKey other_stream() { return StreamKey{"acme", "orders", "other"}; }

class DeleteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    host_.set("storage.retention_interval_ms", "0");
    root_ = host_.data_dir() + "/shards";
  }
  std::unique_ptr<FsStorageEngine> make_engine() {
    return std::make_unique<FsStorageEngine>(host_, std::make_shared<PosixFileSystem>());
  }
  // Opens `ref` and appends `records` records tagged with the ref.
  void fill(FsStorageEngine& e, const ShardRef& ref, std::uint32_t records = 3) {
    auto s = e.open_shard(ref, StreamSpec{});
    ASSERT_TRUE(s) << s.error().to_string();
    ASSERT_TRUE(append_wait(**s, make_batch(ref.to_string(), records)));
  }
  std::vector<std::string> entries(const std::string& dir) {
    std::vector<std::string> v;
    if (!stdfs::exists(dir)) return v;
    for (auto& e : stdfs::directory_iterator(dir)) v.push_back(e.path().filename().string());
    return v;
  }
  std::vector<ShardRef> on_disk(FsStorageEngine& e) {
    auto r = e.list_on_disk();
    EXPECT_TRUE(r) << r.error().to_string();
    return r ? *r : std::vector<ShardRef>{};
  }
  ShardRef ref_of(const StreamKey& k, std::uint32_t shard, std::uint64_t inc) {
    return ShardRef{k, ShardIndex(shard), Incarnation(inc)};
  }

  TestHost host_;
  std::string root_;
};

TEST_F(DeleteTest, DeletesEveryShardOfIncarnationsUpToAndKeepsHigherOnes) {
  auto e = make_engine();
  const auto k = test_ref().stream;
  for (auto [shard, inc] : std::vector<std::pair<std::uint32_t, std::uint64_t>>{
           {0, 0}, {1, 0}, {0, 5}, {1, 5}, {0, 9}, {1, 9}})
    fill(*e, ref_of(k, shard, inc));
  fill(*e, ref_of(other_stream(), 0, 5));
  auto held = *e->open_shard(ref_of(k, 1, 5), StreamSpec{});

  auto r = e->delete_incarnations(k, Incarnation(5));
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(*r, 4u);
  EXPECT_EQ(on_disk(*e), (std::vector<ShardRef>{ref_of(k, 0, 9), ref_of(k, 1, 9),
                                                ref_of(other_stream(), 0, 5)}));
  EXPECT_TRUE(entries(root_ + "/.delete-pending").empty()) << "no marker left";
  EXPECT_TRUE(entries(root_ + "/.deleted").empty()) << "garbage removed";
  // A caller still holding a deleted shard gets refusals, never data.
  auto a = append_wait(*held, make_batch("late", 1));
  ASSERT_FALSE(a);
  EXPECT_EQ(a.error().code, Errc::unavailable);
  // Kept incarnations still serve their data.
  auto kept = e->open_shard(ref_of(k, 0, 9), StreamSpec{});
  ASSERT_TRUE(kept);
  EXPECT_EQ(read_all(**kept).size(), 3u);
  // A second delete of the same range finds nothing.
  EXPECT_EQ(*e->delete_incarnations(k, Incarnation(5)), 0u);
  EXPECT_TRUE(host_.logged("deleted 4 shard directories of stream acme/orders/events"));
}

// A copy that left this broker's replica list (reassignment): only that shard of that
// incarnation goes, by the same protocol; its other shards and incarnations stay.
TEST_F(DeleteTest, RemovingAReplicaRemovesOnlyThatShardOfThatIncarnation) {
  auto e = make_engine();
  const auto k = test_ref().stream;
  for (auto [shard, inc] : std::vector<std::pair<std::uint32_t, std::uint64_t>>{{0, 5}, {1, 5}, {0, 9}})
    fill(*e, ref_of(k, shard, inc));
  auto held = *e->open_shard(ref_of(k, 1, 5), StreamSpec{});
  auto r = e->remove_replica(ref_of(k, 1, 5));
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_TRUE(*r);
  EXPECT_EQ(on_disk(*e), (std::vector<ShardRef>{ref_of(k, 0, 5), ref_of(k, 0, 9)}));
  EXPECT_TRUE(entries(root_ + "/.delete-pending").empty()) << "no marker left";
  EXPECT_TRUE(entries(root_ + "/.deleted").empty()) << "garbage removed";
  auto a = append_wait(*held, make_batch("late", 1));
  ASSERT_FALSE(a) << "the closed copy acknowledges nothing";
  // Nothing left to remove: false, not an error. Bad names are refused before any path.
  r = e->remove_replica(ref_of(k, 1, 5));
  ASSERT_TRUE(r);
  EXPECT_FALSE(*r);
  EXPECT_FALSE(e->remove_replica(ShardRef{StreamKey{"acme", "..", "x"}, ShardIndex(0), Incarnation(1)}));
  // It reopens empty if the catalog ever names this broker again.
  auto again = e->open_shard(ref_of(k, 1, 5), StreamSpec{});
  ASSERT_TRUE(again);
  EXPECT_TRUE(read_all(**again).empty());
}

TEST_F(DeleteTest, DeletingIncarnationZeroRemovesTheLegacyDirectory) {
  auto e = make_engine();
  const auto k = test_ref().stream;
  fill(*e, ref_of(k, 3, 0));
  fill(*e, ref_of(k, 3, 1));
  ASSERT_TRUE(stdfs::exists(root_ + "/acme/orders/events/3"));
  auto r = e->delete_incarnations(k, Incarnation(0));
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(*r, 1u);
  EXPECT_FALSE(stdfs::exists(root_ + "/acme/orders/events/3"));
  EXPECT_TRUE(stdfs::exists(root_ + "/acme/orders/events/3-0000000000000001"));
  // The broker would not reopen incarnation 0; if it does, the log is new and empty.
  auto s = e->open_shard(ref_of(k, 3, 0), StreamSpec{});
  ASSERT_TRUE(s);
  EXPECT_EQ((*s)->stats().high_watermark.value(), 0u);
}

TEST_F(DeleteTest, InvalidNamesAreRejectedBeforeAnyPathIsBuilt) {
  auto e = make_engine();
  for (StreamKey k : {StreamKey{"..", "n", "s"}, StreamKey{"t", "a/b", "s"},
                      StreamKey{"t", "n", ".deleted"}, StreamKey{"t", "n", ""}}) {
    auto r = e->delete_incarnations(k, Incarnation(1));
    ASSERT_FALSE(r) << k.to_string();
    EXPECT_EQ(r.error().code, Errc::invalid_name);
  }
  EXPECT_FALSE(stdfs::exists(root_ + "/.delete-pending"));
}

TEST_F(DeleteTest, PendingAppendsCompleteBeforeTheDeleteReturns) {
  auto fs = std::make_shared<FaultFileSystem>();
  FsStorageEngine e(host_, fs);
  auto s = e.open_shard(test_ref(), StreamSpec{});
  ASSERT_TRUE(s);
  ASSERT_TRUE(append_wait(**s, make_batch("a", 2)));
  fs->block_syncs();
  std::atomic<bool> answered{false};
  (*s)->append(make_batch("b", 2), AckMode::leader, [&](Result<AppendResult>) { answered = true; });
  ASSERT_TRUE(eventually([&] { return fs->blocked_sync_waiters() >= 1; }));
  auto done = std::async(std::launch::async,
                         [&] { return e.delete_incarnations(test_ref().stream, Incarnation(0)); });
  fs->unblock_syncs();
  auto r = done.get();
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_TRUE(answered.load()) << "the pending append was answered before the delete returned";
  EXPECT_TRUE(on_disk(e).empty());
}

// A crash right after each step, then a new engine: nothing of the deleted incarnations is
// served, no marker is left, and .deleted/ is empty.
TEST_F(DeleteTest, CrashAfterEachStepIsFinishedAtTheNextStart) {
  for (std::string step : {"storage.delete.after_marker", "storage.delete.after_move",
                           "storage.delete.after_unmark"}) {
    SCOPED_TRACE(step);
    TestHost host;
    host.set("storage.retention_interval_ms", "0");
    const std::string root = host.data_dir() + "/shards";
    const auto k = test_ref().stream;
    {
      FsStorageEngine e(host, std::make_shared<PosixFileSystem>());
      for (auto inc : {0u, 2u, 4u}) {
        auto s = e.open_shard(test_ref(0, inc), StreamSpec{});
        ASSERT_TRUE(s);
        ASSERT_TRUE(append_wait(**s, make_batch("old" + std::to_string(inc), 4)));
      }
      e.set_delete_step_hook([&](std::string_view s) { return s == step; });
      auto r = e.delete_incarnations(k, Incarnation(2));
      ASSERT_FALSE(r) << "the hook stops the delete";
      EXPECT_EQ(r.error().code, Errc::internal);
      // The state a crash at this step leaves.
      EXPECT_EQ(entries(root + "/.delete-pending").size(), step == "storage.delete.after_unmark" ? 0u : 1u);
      EXPECT_EQ(stdfs::exists(root + "/acme/orders/events/0"), step == "storage.delete.after_marker");
      // Without a crash, the process goes on: what the marker names is never reopened here
      // (appends to it would be deleted by the next start's recovery of the marker).
      auto again = e.open_shard(test_ref(0, 0), StreamSpec{});
      ASSERT_FALSE(again) << "a shard its durable delete marker names was reopened";
      EXPECT_EQ(again.error().code, Errc::storage_failure);
      EXPECT_TRUE(e.open_shard(test_ref(0, 4), StreamSpec{})) << "an incarnation the delete spares opens";
    }
    FsStorageEngine e(host, std::make_shared<PosixFileSystem>());
    EXPECT_TRUE(entries(root + "/.delete-pending").empty());
    EXPECT_TRUE(entries(root + "/.deleted").empty());
    auto disk = e.list_on_disk();
    ASSERT_TRUE(disk);
    EXPECT_EQ(*disk, std::vector<ShardRef>{test_ref(0, 4)});
    if (step != "storage.delete.after_unmark")
      EXPECT_TRUE(host.logged("finished interrupted delete"));
    else
      EXPECT_TRUE(host.logged("removed deleted data"));
    for (auto inc : {0u, 2u}) {  // reopening a deleted incarnation resurrects nothing
      auto s = e.open_shard(test_ref(0, inc), StreamSpec{});
      ASSERT_TRUE(s);
      EXPECT_EQ((*s)->stats().high_watermark.value(), 0u);
      EXPECT_TRUE(read_all(**s).empty());
    }
    auto kept = e.open_shard(test_ref(0, 4), StreamSpec{});
    ASSERT_TRUE(kept);
    EXPECT_EQ(read_all(**kept).size(), 4u);
  }
}

// A delete stopped after its marker keeps its shards closed only until the marker is
// finished: the next delete of the name finishes it first, and they open again (empty).
TEST_F(DeleteTest, AStoppedDeleteIsFinishedByTheNextDeleteOfTheName) {
  TestHost host;
  host.set("storage.retention_interval_ms", "0");
  const std::string root = host.data_dir() + "/shards";
  FsStorageEngine e(host, std::make_shared<PosixFileSystem>());
  for (auto inc : {0u, 2u}) {
    auto s = e.open_shard(test_ref(0, inc), StreamSpec{});
    ASSERT_TRUE(s);
    ASSERT_TRUE(append_wait(**s, make_batch("old" + std::to_string(inc), 4)));
  }
  e.set_delete_step_hook([&](std::string_view s) { return s == "storage.delete.after_marker"; });
  ASSERT_FALSE(e.delete_incarnations(test_ref().stream, Incarnation(0)));
  EXPECT_FALSE(e.open_shard(test_ref(0, 0), StreamSpec{}));
  e.set_delete_step_hook(nullptr);
  auto again = e.delete_incarnations(test_ref().stream, Incarnation(0));
  ASSERT_TRUE(again) << again.error().to_string();
  EXPECT_TRUE(host.logged("finished the earlier stopped delete"));
  EXPECT_TRUE(entries(root + "/.delete-pending").empty());
  auto reopened = e.open_shard(test_ref(0, 0), StreamSpec{});
  ASSERT_TRUE(reopened) << reopened.error().to_string();
  EXPECT_TRUE(read_all(**reopened).empty());
  auto kept = e.open_shard(test_ref(0, 2), StreamSpec{});
  ASSERT_TRUE(kept);
  EXPECT_EQ(read_all(**kept).size(), 4u);
}

// Regression (stop 42, left open): the next delete of a name took an earlier stopped
// delete out of half_deleted_ before finishing its marker, so while that marker moved its
// shard's directory away an open of that shard (not covered by the new delete: another
// shard's removal) went ahead, recovering or recreating the directory being deleted. The
// shard now stays refused until the earlier marker is finished.
TEST_F(DeleteTest, AnEarlierStoppedDeleteKeepsItsShardsClosedUntilFinished) {
  auto e = make_engine();
  fill(*e, test_ref(0, 0));
  fill(*e, test_ref(1, 0));
  e->set_delete_step_hook([&](std::string_view s) { return s == "storage.delete.after_marker"; });
  ASSERT_FALSE(e->remove_replica(test_ref(0, 0)));
  std::optional<bool> opened_meanwhile;  // an open of shard 0 while its marker was finished
  Errc refused_with{};
  e->set_delete_step_hook([&](std::string_view s) {
    if (s == "storage.delete.after_move" && !opened_meanwhile) {
      auto o = e->open_shard(test_ref(0, 0), StreamSpec{});
      opened_meanwhile = bool(o);
      if (o) e->close_shard(test_ref(0, 0));
      else refused_with = o.error().code;
    }
    return false;
  });
  auto removed = e->remove_replica(test_ref(1, 0));
  ASSERT_TRUE(removed) << removed.error().to_string();
  ASSERT_TRUE(opened_meanwhile.has_value()) << "the earlier delete was not finished first";
  EXPECT_FALSE(*opened_meanwhile) << "the shard of an unfinished delete opened";
  EXPECT_EQ(refused_with, Errc::storage_failure);
  e->set_delete_step_hook(nullptr);
  auto reopened = e->open_shard(test_ref(0, 0), StreamSpec{});
  ASSERT_TRUE(reopened) << reopened.error().to_string();
  EXPECT_TRUE(read_all(**reopened).empty());
}

// The partial state of a crash in the middle of step 2, built by hand: one listed dir
// already in .deleted/, the other still in place; plus a marker .tmp of a delete that never
// started (its dir must stay).
TEST_F(DeleteTest, RecoveryMovesWhatIsLeftAndIgnoresAnUnfinishedMarkerTmp) {
  const auto k = test_ref().stream;
  {
    auto e = make_engine();
    fill(*e, test_ref(0, 0));
    fill(*e, test_ref(1, 0));
    fill(*e, test_ref(2, 0));
  }
  const std::string id = "0000000000000001-000001";
  stdfs::create_directories(root_ + "/.deleted/" + id + "/acme/orders/events");
  stdfs::rename(root_ + "/acme/orders/events/0", root_ + "/.deleted/" + id + "/acme/orders/events/0");
  stdfs::create_directories(root_ + "/.delete-pending");
  {
    std::string body = "sluice-delete-marker 1\nacme/orders/events/0\nacme/orders/events/1\n";
    char crc[16];
    std::snprintf(crc, sizeof crc, "%08x", crc32c(body.data(), body.size()));
    std::ofstream(root_ + "/.delete-pending/" + id + ".marker") << body << "crc " << crc << "\n";
    std::ofstream(root_ + "/.delete-pending/0000000000000002-000002.marker.tmp")
        << "sluice-delete-marker 1\nacme/orders/events/2\n";
  }
  auto e = make_engine();
  EXPECT_TRUE(entries(root_ + "/.delete-pending").empty());
  EXPECT_TRUE(entries(root_ + "/.deleted").empty());
  EXPECT_EQ(on_disk(*e), std::vector<ShardRef>{test_ref(2, 0)});
  EXPECT_TRUE(host_.logged("finished interrupted delete " + id + ": moved 1 of 2 directories"));
}

// Upgrade (review finding): a build before the one-directory rule made
// .deleted/<id>/<tenant>/<ns>/<stream> and then renamed the shard into it; a crash between
// the two left that tree, which a rename to .deleted/<id> cannot replace (ENOTEMPTY), and
// the start failed. The marker names one directory, still in place: the tree is garbage.
TEST_F(DeleteTest, AnOlderBuildsHalfMadeDestinationDoesNotStopTheStart) {
  { auto e = make_engine(); fill(*e, test_ref(0, 0)); fill(*e, test_ref(1, 0)); }
  const std::string id = "0000000000000003-000003";
  stdfs::create_directories(root_ + "/.deleted/" + id + "/acme/orders/events");
  stdfs::create_directories(root_ + "/.delete-pending");
  {
    std::string body = "sluice-delete-marker 1\nacme/orders/events/0\n";
    char crc[16];
    std::snprintf(crc, sizeof crc, "%08x", crc32c(body.data(), body.size()));
    std::ofstream(root_ + "/.delete-pending/" + id + ".marker") << body << "crc " << crc << "\n";
  }
  auto e = make_engine();
  EXPECT_TRUE(entries(root_ + "/.delete-pending").empty());
  EXPECT_TRUE(entries(root_ + "/.deleted").empty());
  EXPECT_EQ(on_disk(*e), std::vector<ShardRef>{test_ref(1, 0)});
}

TEST_F(DeleteTest, CorruptMarkerFailsTheStartInsteadOfServing) {
  { auto e = make_engine(); fill(*e, test_ref()); }
  stdfs::create_directories(root_ + "/.delete-pending");
  std::ofstream(root_ + "/.delete-pending/x.marker") << "sluice-delete-marker 1\nacme/orders/events/0\ncrc 00000000\n";
  EXPECT_THROW(make_engine(), std::runtime_error);
  // A marker naming something outside a shard directory is refused too.
  std::string body = "sluice-delete-marker 1\nacme/orders/../../etc\n";
  char crc[16];
  std::snprintf(crc, sizeof crc, "%08x", crc32c(body.data(), body.size()));
  std::ofstream(root_ + "/.delete-pending/x.marker") << body << "crc " << crc << "\n";
  EXPECT_THROW(make_engine(), std::runtime_error);
  EXPECT_TRUE(stdfs::exists(root_ + "/acme/orders/events/0/log"));
}

TEST_F(DeleteTest, ListOnDiskReportsShardDirectoriesOnly) {
  auto e = make_engine();
  fill(*e, test_ref(0, 0));
  fill(*e, test_ref(7, 0xab));
  fill(*e, ref_of(StreamKey{"t2", "n", "s"}, 1, 1));
  stdfs::create_directories(root_ + "/acme/orders/events/junk");
  stdfs::create_directories(root_ + "/acme/orders/events/01");
  stdfs::create_directories(root_ + "/acme/orders/events/0-0000000000000000");
  stdfs::create_directories(root_ + "/.deleted/x/acme/orders/events/5");
  std::ofstream(root_ + "/acme/orders/events/9") << "a file, not a shard";
  EXPECT_EQ(on_disk(*e), (std::vector<ShardRef>{test_ref(0, 0), test_ref(7, 0xab),
                                                ref_of(StreamKey{"t2", "n", "s"}, 1, 1)}));
}

// A deleted name leaves no directory behind (only one still holding a kept incarnation
// stays), so a node with many tombstones has nothing to walk for them at start
// (docs/benchmarks.md "sluice-catalog-bench"); a new incarnation opens again afterwards.
TEST_F(DeleteTest, DeletingTheLastIncarnationRemovesTheNamesDirectory) {
  auto e = make_engine();
  const auto k = test_ref().stream;
  const std::string dir = root_ + "/" + k.tenant + "/" + k.ns + "/" + k.name;
  fill(*e, ref_of(k, 0, 5));
  fill(*e, ref_of(k, 0, 9));
  ASSERT_EQ(*e->delete_incarnations(k, Incarnation(5)), 1u);
  EXPECT_TRUE(stdfs::exists(dir)) << "incarnation 9 is still there";
  ASSERT_EQ(*e->delete_incarnations(k, Incarnation(9)), 1u);
  EXPECT_FALSE(stdfs::exists(dir));
  EXPECT_TRUE(stdfs::exists(root_ + "/" + k.tenant + "/" + k.ns));
  // An empty directory left by an older build goes on the next delete of the name.
  stdfs::create_directories(dir);
  EXPECT_EQ(*e->delete_incarnations(k, Incarnation(9)), 0u);
  EXPECT_FALSE(stdfs::exists(dir));
  fill(*e, ref_of(k, 0, 12));
  EXPECT_EQ(on_disk(*e), (std::vector<ShardRef>{ref_of(k, 0, 12)}));
}

TEST(LayoutParseTest, ShardDirNamesRoundTrip) {
  for (auto [s, i] : std::vector<std::pair<std::uint32_t, std::uint64_t>>{
           {0, 0}, {3, 0}, {4294967295u, 0}, {3, 0xab}, {12, ~0ull}}) {
    auto p = parse_shard_dir_name(shard_dir_name(ShardIndex(s), Incarnation(i)));
    ASSERT_TRUE(p);
    EXPECT_EQ(p->first.value(), s);
    EXPECT_EQ(p->second.value(), i);
  }
  for (auto bad : {"", "01", "x", "3-", "3-00000000000000AB", "3-0000000000000000", "3-00ab",
                   "4294967296", "-1", "3-00000000000000ab0"})
    EXPECT_FALSE(parse_shard_dir_name(bad)) << bad;
}

}  // namespace
}  // namespace sluice::fs_storage::testing
