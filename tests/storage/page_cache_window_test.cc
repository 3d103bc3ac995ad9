// The page-cache window (storage.page_cache_window_bytes; docs/architecture.md "Page-cache
// window"): once synced, a shard's log further back than the window leaves the page cache,
// the window itself stays, and every record still reads back (from the disk). Residency is
// read with mincore(2) on a mapping of each segment file, on the real file system.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>

#include "layout.h"
#include "replica_node.h"
#include "shard_log.h"
#include "storage_test_util.h"

namespace sluice::fs_storage::testing {
namespace {

using sluice::testing::TestHost;
namespace fsys = std::filesystem;

constexpr std::uint64_t kWindow = 1 << 20;
constexpr std::uint64_t kSegment = 4 << 20;

// The kernel may evict any clean page at any time (a sanitized run lost 1 page of 1023
// with the window off), so "kept" means nearly all of it; "dropped" stays strict, as
// nothing reads those pages before they are counted.
bool mostly(std::size_t resident, std::size_t pages) { return pages > 0 && resident * 10 >= pages * 9; }

bool on_tmpfs(const std::string& path) {
  struct statfs s{};
  return ::statfs(path.c_str(), &s) == 0 && s.f_type == TMPFS_MAGIC;
}

// Appends `total` bytes (~6 MiB: two 4 MiB segments) in 16 KiB batches, then returns the
// segment files.
std::map<std::uint64_t, std::string> fill(FsStorageEngine& engine, ShardLog& shard, std::map<std::uint64_t, std::string>& acked,
                                          std::uint64_t total = kSegment + 2 * kWindow) {
  std::uint64_t bytes = 0;
  for (int i = 0; bytes < total; ++i) {
    std::string b = make_batch("w" + std::to_string(i), 16, 1000, 1000);
    bytes += b.size();
    auto vals = batch_values(b);
    auto r = append_wait(shard, std::move(b));
    EXPECT_TRUE(r) << r.error().to_string();
    if (!r) break;
    for (std::size_t k = 0; k < vals.size(); ++k) acked[r->base_offset.value() + k] = vals[k];
  }
  std::map<std::uint64_t, std::string> segs;
  const std::string dir = engine.shard_directory(test_ref()).value() + "/log";
  for (const auto& e : fsys::directory_iterator(dir))
    if (auto base = parse_offset_file_name(e.path().filename().string(), ".log")) segs[*base] = e.path().string();
  return segs;
}

void configure(TestHost& host, std::uint64_t window, std::uint64_t segment = kSegment) {
  host.set("storage.segment_bytes", std::to_string(segment));
  host.set("storage.retention_interval_ms", "0");
  host.set("storage.preallocate_segments", "false");
  host.set("storage.page_cache_window_bytes", std::to_string(window));
}

// One shard on the real file system, filled by fill().
class PageCacheWindow : public ::testing::Test {
 protected:
  void SetUp() override {
    if (on_tmpfs(host_.data_dir())) GTEST_SKIP() << "tmpfs has no page cache to leave";
  }
  // Opens the shard with this window and segment size and appends `total` bytes.
  void fill_with(std::uint64_t window, std::uint64_t segment = kSegment, std::uint64_t total = kSegment + 2 * kWindow) {
    configure(host_, window, segment);
    engine_ = std::make_unique<FsStorageEngine>(host_, std::make_shared<PosixFileSystem>());
    shard_ = engine_->open_shard(test_ref(), StreamSpec{}).value();
    segs_ = fill(*engine_, *shard_, acked_, total);
    // The last group's drop runs on the flusher after its acknowledgement.
    std::dynamic_pointer_cast<ShardLogImpl>(shard_)->wait_flushed();
  }
  // Every acknowledged record reads back (from the disk where it was dropped).
  void expect_reads_back() {
    auto all = read_all(*shard_);
    ASSERT_EQ(all.size(), acked_.size());
    for (const auto& [off, v] : acked_) ASSERT_EQ(all[off], v) << "offset " << off;
  }
  TestHost host_;
  std::unique_ptr<FsStorageEngine> engine_;
  std::shared_ptr<ShardLog> shard_;
  std::map<std::uint64_t, std::string> acked_;
  std::map<std::uint64_t, std::string> segs_;  // base -> path
};

TEST_F(PageCacheWindow, SyncedBytesBehindTheWindowLeaveThePageCacheAndStillReadBack) {
  fill_with(kWindow);
  ASSERT_FALSE(HasFailure());
  ASSERT_EQ(segs_.size(), 2u);
  const std::string& sealed = segs_.begin()->second;
  const std::string& active = segs_.rbegin()->second;
  const std::uint64_t active_size = fsys::file_size(active);
  ASSERT_GT(active_size, kWindow + kWindow / 8);

  // The sealed segment is wholly behind the window: the active one alone fills it.
  auto [sealed_res, sealed_pages] = resident_pages(sealed, 0, kSegment);
  EXPECT_GT(sealed_pages, 0u);
  EXPECT_EQ(sealed_res, 0u) << "pages of the sealed segment still cached";
  // The active segment: dropped up to within a step (1/32 of the window, at least 64 KiB)
  // of the window's start, give or take a page and a folio of these 16 KiB writes that
  // straddles the end of the last drop (the margin below is wider); the window is cached.
  const std::uint64_t dropped_below = active_size - kWindow - kWindow / 8 - 4096 - (64 << 10);
  auto [old_res, old_pages] = resident_pages(active, 0, dropped_below);
  EXPECT_GT(old_pages, 0u);
  EXPECT_EQ(old_res, 0u) << "pages behind the window still cached";
  auto [win_res, win_pages] = resident_pages(active, active_size - kWindow, active_size);
  EXPECT_TRUE(mostly(win_res, win_pages)) << win_res << " of " << win_pages << " pages inside the window cached";

  expect_reads_back();
}

// Segments shorter than the window: the window spans several of them, those inside it stay
// cached, and every segment wholly behind it is dropped.
TEST_F(PageCacheWindow, SegmentsShorterThanTheWindowAreDroppedOnceBehindIt) {
  constexpr std::uint64_t kSmall = 256 << 10;
  fill_with(kWindow, kSmall, 4 * kWindow);
  ASSERT_FALSE(HasFailure());
  ASSERT_GE(segs_.size(), 12u);
  // From the newest segment back: bytes after each segment's end.
  std::uint64_t after = 0;
  std::size_t dropped = 0;
  for (auto it = segs_.rbegin(); it != segs_.rend(); ++it) {
    const std::uint64_t size = fsys::file_size(it->second);
    auto [res, pages] = resident_pages(it->second, 0, size);
    // Behind the window by more than the sealed segment it may still be working through.
    if (after >= kWindow + kSmall) {
      EXPECT_EQ(res, 0u) << it->second << " is " << after << " bytes behind the newest";
      ++dropped;
    } else if (after + size <= kWindow) {
      EXPECT_TRUE(mostly(res, pages)) << it->second << " lies inside the window, " << res << " of " << pages << " pages cached";
    }
    after += size;
  }
  EXPECT_GE(dropped, 6u);
  expect_reads_back();
}

// The control: with the window off the same appends leave everything cached, so the check
// above measures the window and not the machine.
TEST_F(PageCacheWindow, OffKeepsEverySyncedPageCached) {
  fill_with(0);
  ASSERT_FALSE(HasFailure());
  ASSERT_EQ(segs_.size(), 2u);
  for (const auto& [base, path] : segs_) {
    auto [res, pages] = resident_pages(path, 0, kSegment);
    EXPECT_TRUE(mostly(res, pages)) << path << ": " << res << " of " << pages << " pages cached";
  }
}

// Regression (found in review): a follower's cut into a sealed segment made that segment
// active again while it was still queued as sealed, and the next drop advised away the
// active segment (whole, or the part inside the window). After a cut and a catch-up, no
// drop may touch the log's newest window. The fault file system records every advice.
TEST(PageCacheWindowReplica, ACutIntoASealedSegmentKeepsTheNewestWindowCached) {
  Node a, f;
  for (Node* n : {&a, &f}) {
    n->host.set("storage.segment_bytes", std::to_string(256 << 10));
    n->host.set("storage.page_cache_window_bytes", std::to_string(kWindow));
    n->restart();
  }
  ASSERT_TRUE(a.log->become_leader(LeaderEpoch(1)));
  for (int i = 0; i < 190; ++i)  // about 3 MiB in 16 KiB batches of 16 records
    ASSERT_TRUE(append_wait(*a.log, make_batch("x" + std::to_string(i), 16, 1000, 1000), AckMode::leader));
  ASSERT_TRUE(f.log->become_follower(LeaderEpoch(1), NodeId(1)));
  replicate(*a.log, *f.log, 256 << 10);
  ASSERT_FALSE(f.fs->cache_drops().empty()) << "the follower dropped nothing behind its window";

  // 20 batches back (about 330 KB): inside the sealed segment before the active one.
  const std::uint64_t end = f.log->durable_end().value();
  const auto before = segment_files(f.log_dir());
  ASSERT_TRUE(f.log->truncate_to(Offset(end - 20 * 16)));
  ASSERT_LT(segment_files(f.log_dir()).size(), before.size()) << "the cut stayed in the active segment";
  const std::size_t cut_mark = f.fs->cache_drops().size();
  replicate(*a.log, *f.log, 64 << 10);
  ASSERT_EQ(f.log->durable_end().value(), end);

  // The newest window, per segment file: [from, size).
  std::map<std::string, std::uint64_t> window_from;
  std::uint64_t left = kWindow;
  const auto after = segment_files(f.log_dir());
  for (auto it = after.rbegin(); it != after.rend() && left > 0; ++it) {
    const std::uint64_t size = it->second.size();
    window_from[f.log_dir() + "/" + it->first] = size > left ? size - left : 0;
    left -= std::min(left, size);
  }
  const auto drops = f.fs->cache_drops();
  for (std::size_t i = cut_mark; i < drops.size(); ++i) {
    auto w = window_from.find(drops[i].path);
    if (w == window_from.end()) continue;
    const bool to_end = drops[i].len == 0;
    EXPECT_TRUE(!to_end && drops[i].offset + drops[i].len <= w->second)
        << "after the cut, a drop of " << drops[i].path << " [" << drops[i].offset << ", "
        << (to_end ? std::string("end") : std::to_string(drops[i].offset + drops[i].len))
        << ") reaches into the newest window (from " << w->second << ")";
  }
  f.log->advance_high_watermark(Offset(end));  // reads stop at a follower's high watermark
  EXPECT_EQ(read_all(*f.log).size(), end);
}

TEST(PageCacheWindowOption, AWindowBelowOneMebibyteIsRefused) {
  TestHost host;
  host.set("storage.page_cache_window_bytes", "4096");
  EXPECT_THROW(Options::from_host(host), std::invalid_argument);
  host.set("storage.page_cache_window_bytes", "-1");
  EXPECT_THROW(Options::from_host(host), std::invalid_argument);
  host.set("storage.page_cache_window_bytes", "0");
  EXPECT_EQ(Options::from_host(host).page_cache_window_bytes, 0u);
  host.set("storage.page_cache_window_bytes", "1048576");
  EXPECT_EQ(Options::from_host(host).page_cache_window_bytes, 1048576u);
  host.set("storage.fsync", "never");
  EXPECT_EQ(Options::from_host(host).page_cache_window_bytes, 0u) << "unsynced pages are not dropped";
}

}  // namespace
}  // namespace sluice::fs_storage::testing
