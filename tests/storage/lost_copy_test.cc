// fs-storage's side of a lost shard copy (docs/replication.md "A lost shard copy"): a
// replicated copy is marked in <storage.dir>/.replicas before its directories exist, so a
// copy whose log is gone while its mark stays opens as a lost copy, durably, until the
// replication manager forgets it (durably too).
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include "layout.h"
#include "replica_node.h"

namespace sluice::fs_storage::testing {
namespace {

namespace fs = std::filesystem;

std::string storage_root(Node& n) {
  // <root>/<tenant>/<ns>/<stream>/<shard dir>
  return fs::path(n.shard_dir()).parent_path().parent_path().parent_path().parent_path().string();
}

std::string mark_of(Node& n) { return replica_mark(storage_root(n), n.ref).value(); }

// The process stops, `damage` happens to its disk, and a new process opens the shard.
void reopen_after(Node& n, const std::function<void()>& damage) {
  n.log.reset();
  n.engine.reset();
  damage();
  n.fs->restart();
  n.open();
}

// The process stops, `dir` (the shard's directory) is deleted, and a new engine opens the
// shard: what that open answers.
Result<std::shared_ptr<ShardLog>> open_after_losing(Node& n, const std::string& dir) {
  n.log.reset();
  n.engine.reset();
  fs::remove_all(dir);
  n.fs->restart();
  n.engine = std::make_unique<FsStorageEngine>(n.host, n.fs);
  return n.engine->open_shard(n.ref, n.spec);
}

void write_committed(Node& n) {
  ASSERT_TRUE(n.log->become_leader(LeaderEpoch(1)));
  n.log->set_in_sync(1, 1);
  ASSERT_TRUE(append_wait(*n.log, batch("a"), AckMode::leader));
  ASSERT_GT(n.log->durable_end().value(), 0u);
}

// The shard's directory gone (deleted, or removed after damage) while storage.dir and its
// mark survive: the open starts the copy empty and says it is lost, across restarts, until
// forget_copy_lost().
TEST(LostCopy, AReplicatedCopyWhoseDirectoryIsGoneOpensLostUntilForgotten) {
  Node n;
  EXPECT_FALSE(n.log->copy_lost());
  EXPECT_TRUE(fs::exists(mark_of(n))) << "a replicated copy is marked at its first open";
  write_committed(n);
  const std::string dir = n.shard_dir();
  reopen_after(n, [&] { fs::remove_all(dir); });
  EXPECT_TRUE(n.log->copy_lost());
  EXPECT_TRUE(n.log->stats().copy_lost) << "the shard status and sluice_shard_copy_lost show it";
  EXPECT_EQ(n.log->durable_end(), Offset(0));
  EXPECT_TRUE(fs::exists(dir + "/" + std::string(kLostCopyFile)));
  // Refilled by a fetch, or not: a restart still knows it is not the copy the catalog
  // counted.
  n.restart();
  EXPECT_TRUE(n.log->copy_lost());
  ASSERT_TRUE(n.log->forget_copy_lost());
  EXPECT_FALSE(n.log->copy_lost());
  EXPECT_FALSE(n.log->stats().copy_lost);
  EXPECT_FALSE(fs::exists(dir + "/" + std::string(kLostCopyFile)));
  n.restart();
  EXPECT_FALSE(n.log->copy_lost());
}

// Review finding: forgetting the loss removed lost-copy without syncing its directory, so
// a power cut could bring the file back on a copy that had caught up; with its leader's
// disk gone too, the one copy holding every record could then not lead.
TEST(LostCopy, AForgottenLossStaysForgottenAfterAPowerCut) {
  Node n;
  write_committed(n);
  const std::string dir = n.shard_dir();
  reopen_after(n, [&] { fs::remove_all(dir); });
  ASSERT_TRUE(n.log->copy_lost());
  ASSERT_TRUE(n.log->forget_copy_lost());
  CrashOptions opt;
  opt.lose_unsynced_entries = true;
  n.fs->crash(7, opt);  // the power goes before the process stops
  n.log.reset();
  n.engine.reset();
  n.fs->restart();
  n.open();
  EXPECT_FALSE(n.log->copy_lost());
}

// A power cut at any step of the open that finds the copy lost (its directories and the
// lost-copy file written, entries not yet synced undone): the next open still finds it lost,
// never an empty copy taken for the one the catalog counted.
TEST(LostCopy, APowerCutAtAnyStepOfALostCopysOpenLeavesItLost) {
  bool finished = false;
  for (int k = 0; k < 200 && !finished; ++k) {
    SCOPED_TRACE("crash before mutating operation " + std::to_string(k + 1));
    Node n;
    write_committed(n);
    const std::string dir = n.shard_dir();
    n.log.reset();
    n.engine.reset();
    fs::remove_all(dir);
    n.fs->restart();
    CrashOptions opt;
    opt.lose_unsynced_entries = true;
    n.engine = std::make_unique<FsStorageEngine>(n.host, n.fs);
    n.fs->crash_after(k, 1000 + k, opt);
    (void)n.engine->open_shard(n.ref, n.spec);
    finished = !n.fs->crashed();
    n.engine.reset();
    if (!finished) n.fs->crash(2000 + k, opt);
    n.fs->restart();
    n.open();
    EXPECT_TRUE(n.log->copy_lost());
    EXPECT_EQ(n.log->durable_end(), Offset(0));
  }
  EXPECT_TRUE(finished) << "the open never completed within 200 operations";
}

// Only the log directory gone (the epoch history and checkpoint left): lost all the same.
TEST(LostCopy, ACopyWhoseLogDirectoryAloneIsGoneIsLost) {
  Node n;
  write_committed(n);
  const std::string ldir = n.log_dir();
  reopen_after(n, [&] { fs::remove_all(ldir); });
  EXPECT_TRUE(n.log->copy_lost());
}

// The log directory is there but its segments are gone (or a repair cut below what was
// committed): the log ends below the high watermark the copy closed with, so it lost
// records it held as committed, and is a lost copy too.
TEST(LostCopy, ALogThatEndsBelowTheHighWatermarkItClosedWithIsLost) {
  Node n;
  write_committed(n);
  n.log->advance_high_watermark(n.log->durable_end());
  ASSERT_GT(n.log->high_watermark().value(), 0u);
  n.restart();  // a clean close: the checkpoint holds the high watermark
  EXPECT_FALSE(n.log->copy_lost());
  const std::string ldir = n.log_dir();
  reopen_after(n, [&] {
    for (const auto& e : fs::directory_iterator(ldir)) fs::remove(e.path());
  });
  EXPECT_TRUE(n.log->copy_lost());
  EXPECT_TRUE(fs::exists(n.shard_dir() + "/" + std::string(kLostCopyFile)));
}

// A copy an older build made (a log, no mark) is adopted as it is and marked; a single
// replica is not marked before its first flush (its directories are not durable before).
TEST(LostCopy, AnUnmarkedCopyIsAdoptedAndANeverFlushedSingleReplicaIsNotMarked) {
  Node n;
  write_committed(n);
  const std::string mark = mark_of(n);
  fs::remove(mark);
  n.restart();
  EXPECT_FALSE(n.log->copy_lost());
  EXPECT_TRUE(fs::exists(mark));

  Node single(kIncarnation, StreamSpec{});
  EXPECT_FALSE(single.log->copy_lost());
  EXPECT_FALSE(fs::exists(mark_of(single)));
}

// A single replica is marked at its first flush. Its log gone under the mark, the records it
// acknowledged are lost with nothing else holding them: the open is refused rather than
// handing out offsets 0.. again, until storage.repair accepts the loss.
TEST(LostCopy, ASingleReplicaWhoseLogIsGoneIsRefusedUntilRepair) {
  Node n(kIncarnation, StreamSpec{});
  ASSERT_TRUE(append_wait(*n.log, batch("a"), AckMode::leader));
  const std::string mark = mark_of(n);
  EXPECT_TRUE(fs::exists(mark)) << "marked once its directories were synced";
  const std::string dir = n.shard_dir();
  auto s = open_after_losing(n, dir);
  ASSERT_FALSE(s) << "a single replica's lost log opened empty";
  EXPECT_EQ(s.error().code, Errc::corrupt_data) << s.error().to_string();
  EXPECT_NE(s.error().message.find("storage.repair"), std::string::npos) << s.error().message;
  n.engine.reset();
  n.host.set("storage.repair", "true");
  n.open();
  EXPECT_EQ(n.log->durable_end(), Offset(0));
  // The loss accepted, the mark waits for the new directories to be durable.
  EXPECT_FALSE(fs::exists(mark));
  ASSERT_TRUE(append_wait(*n.log, batch("b"), AckMode::leader));
  EXPECT_TRUE(fs::exists(mark));

  // For this shard alone: its mark removed by hand, it opens empty without the flag.
  n.host.set("storage.repair", "false");
  reopen_after(n, [&] {
    fs::remove_all(dir);
    fs::remove(mark);
  });
  EXPECT_EQ(n.log->durable_end(), Offset(0));
}

// Regression (stop 42, left open): a single replica with records but no mark (an older
// build's, or one not appended to since this build first opened it) was marked only at its
// next flush, so a loss of its log before any append went unnoticed and it opened empty,
// handing out offsets 0.. again. It is marked at the open that finds its records.
TEST(LostCopy, AnUnmarkedSingleReplicaWithRecordsIsMarkedAtOpen) {
  Node n(kIncarnation, StreamSpec{});
  ASSERT_TRUE(append_wait(*n.log, batch("a"), AckMode::leader));
  const std::string mark = mark_of(n);
  const std::string dir = n.shard_dir();
  reopen_after(n, [&] { fs::remove(mark); });  // as an older build left it
  EXPECT_TRUE(fs::exists(mark)) << "an open that found records did not mark the shard";
  auto s = open_after_losing(n, dir);
  ASSERT_FALSE(s) << "a single replica's lost log opened empty";
  EXPECT_EQ(s.error().code, Errc::corrupt_data) << s.error().to_string();
}

// A copy removed on purpose (the replica list no longer names this broker) takes its mark
// with it, so a later reassignment back opens a new copy, not a lost one.
TEST(LostCopy, RemovingAReplicaRemovesItsMark) {
  Node n;
  write_committed(n);
  const std::string mark = mark_of(n);
  n.log.reset();
  auto removed = n.engine->remove_replica(n.ref);
  ASSERT_TRUE(removed) << removed.error().to_string();
  EXPECT_TRUE(*removed);
  EXPECT_FALSE(fs::exists(mark));
  EXPECT_FALSE(fs::exists(fs::path(mark).parent_path())) << "the name's empty mark directory goes too";
  auto s = n.engine->open_shard(n.ref, n.spec);
  ASSERT_TRUE(s) << s.error().to_string();
  n.log = n.engine->replica(n.ref);
  EXPECT_FALSE(n.log->copy_lost());
  EXPECT_TRUE(fs::exists(mark));
}

// Regression (stop 42, left open): a copy whose directory was already gone when its stream
// was deleted kept its mark for ever (the delete removed the marks of the directories it
// moved only). Now the delete removes every mark it covers, and the empty mark directory.
TEST(LostCopy, ADeleteRemovesTheMarkOfACopyWhoseDirectoryWasAlreadyGone) {
  for (const bool whole_stream_dir : {false, true}) {
    SCOPED_TRACE(whole_stream_dir ? "the stream's directory gone" : "the shard's directory gone");
    Node n;
    write_committed(n);
    const std::string mark = mark_of(n);
    const std::string dir = n.shard_dir();
    n.log.reset();
    n.engine->close_shard(n.ref);
    fs::remove_all(whole_stream_dir ? fs::path(dir).parent_path() : fs::path(dir));
    ASSERT_TRUE(fs::exists(mark));
    auto deleted = n.engine->delete_incarnations(n.ref.stream, n.ref.incarnation);
    ASSERT_TRUE(deleted) << deleted.error().to_string();
    EXPECT_EQ(*deleted, 0u);
    EXPECT_FALSE(fs::exists(mark)) << "the mark of a deleted copy stayed";
    EXPECT_FALSE(fs::exists(fs::path(mark).parent_path())) << "the name's empty mark directory stayed";
  }
}

}  // namespace
}  // namespace sluice::fs_storage::testing
