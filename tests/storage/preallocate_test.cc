// Preallocated segments (storage.preallocate_segments; docs/architecture.md "Preallocated
// segments"): a half-full active segment gets a zero-filled, synced spare; the roll renames
// it into place and cuts the sealed segment back to its batches; a clean close cuts the
// active one; and a power cut inside a preallocated segment loses no acknowledged record,
// with the overwritten zeros modelled by the fault file system.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <iostream>
#include <random>

#include "layout.h"
#include "recovery_point.h"
#include "replica_node.h"
#include "shard_log.h"
#include "storage_test_util.h"

namespace sluice::fs_storage::testing {
namespace {

using sluice::testing::TestHost;
namespace fsys = std::filesystem;

constexpr std::uint64_t kSegment = 64 << 10;

void configure(TestHost& host) {
  host.set("storage.segment_bytes", std::to_string(kSegment));
  host.set("storage.index_interval_bytes", "4096");
  host.set("storage.retention_interval_ms", "0");
  host.set("storage.verify_on_start", "checkpoint");
  host.set("storage.verify_in_background", "false");
}

// The shard's segment files: base -> size.
std::map<std::uint64_t, std::uint64_t> segment_sizes(FsStorageEngine& engine) {
  std::map<std::uint64_t, std::uint64_t> out;
  const std::string dir = engine.shard_directory(test_ref()).value() + "/log";
  for (const auto& e : fsys::directory_iterator(dir))
    if (auto b = parse_offset_file_name(e.path().filename().string(), ".log")) out[*b] = e.file_size();
  return out;
}

std::string spare_file(FsStorageEngine& engine) {
  return engine.shard_directory(test_ref()).value() + "/log/next-segment.tmp";
}

class Writer {
 public:
  Writer(ShardLog& shard, std::map<std::uint64_t, std::string>& acked, std::string tag)
      : shard_(shard), acked_(acked), tag_(std::move(tag)) {}
  // One acknowledged batch of 4 records of ~1 KiB.
  void append() {
    std::string b = make_batch(tag_ + std::to_string(n_++), 4, 1000, 1000);
    auto vals = batch_values(b);
    auto r = append_wait(shard_, std::move(b));
    ASSERT_TRUE(r) << r.error().to_string();
    for (std::size_t k = 0; k < vals.size(); ++k) acked_[r->base_offset.value() + k] = vals[k];
  }

 private:
  ShardLog& shard_;
  std::map<std::uint64_t, std::string>& acked_;
  std::string tag_;
  int n_ = 0;
};

// Appends until the active segment is half full and its spare is synced, then until the
// roll has taken the spare. Returns the new active segment's base.
std::uint64_t roll_into_a_spare(FsStorageEngine& engine, ShardLogImpl& impl, Writer& w) {
  const auto before = segment_sizes(engine);
  // Bytes of batches in the active segment: sealed segments hold nothing else.
  auto active_bytes = [&] {
    std::uint64_t sealed = 0;
    for (auto it = before.begin(); std::next(it) != before.end(); ++it) sealed += it->second;
    return impl.stats().size_bytes - sealed;
  };
  while (active_bytes() < kSegment / 2 + 8192) {
    w.append();
    if (::testing::Test::HasFatalFailure()) return 0;
  }
  EXPECT_TRUE(eventually([&] { return impl.spare_ready(); })) << "no spare was made";
  EXPECT_EQ(fsys::file_size(spare_file(engine)), kSegment);
  EXPECT_GE(impl.stats().preallocated_bytes, kSegment) << "the spare's zeros are not reported";
  while (segment_sizes(engine).size() == before.size()) {
    w.append();
    if (::testing::Test::HasFatalFailure()) return 0;
  }
  EXPECT_FALSE(impl.spare_ready());
  EXPECT_FALSE(fsys::exists(spare_file(engine)));
  return segment_sizes(engine).rbegin()->first;
}

void expect_all(ShardLog& shard, const std::map<std::uint64_t, std::string>& acked) {
  auto all = read_all(shard);
  for (const auto& [off, v] : acked) {
    auto it = all.find(off);
    ASSERT_NE(it, all.end()) << "acknowledged offset " << off << " lost";
    ASSERT_EQ(it->second, v) << "offset " << off;
  }
  std::uint64_t expect = 0;
  for (const auto& [off, v] : all) ASSERT_EQ(off, expect++) << "offsets are not contiguous";
}

TEST(PreallocatedSegments, ARollTakesASyncedSpareCutsTheSealedSegmentAndACleanCloseCutsTheActiveOne) {
  TestHost host;
  configure(host);
  auto fs = std::make_shared<FaultFileSystem>();
  std::map<std::uint64_t, std::string> acked;
  {
    FsStorageEngine engine(host, fs);
    auto shard = engine.open_shard(test_ref(), StreamSpec{}).value();
    auto impl = std::dynamic_pointer_cast<ShardLogImpl>(shard);
    Writer w(*shard, acked, "a");
    const std::uint64_t first_spare = roll_into_a_spare(engine, *impl, w);
    ASSERT_FALSE(HasFatalFailure());
    // The spare became the active segment: its full length is there from the start.
    EXPECT_EQ(segment_sizes(engine)[first_spare], kSegment);
    {
      // Its unwritten end is reported beside the batches (sluice_shard_preallocated_bytes).
      auto on_disk = segment_sizes(engine);
      const auto st = impl->stats();
      EXPECT_EQ(st.preallocated_bytes, kSegment - (st.size_bytes - on_disk.begin()->second));
      EXPECT_FALSE(fsys::exists(spare_file(engine)));
    }
    const std::uint64_t second = roll_into_a_spare(engine, *impl, w);
    ASSERT_FALSE(HasFatalFailure());
    auto sizes = segment_sizes(engine);
    ASSERT_EQ(sizes.size(), 3u);
    EXPECT_EQ(sizes[second], kSegment);
    // The sealed preallocated segment is cut back to its batches: it holds no zeros.
    EXPECT_LT(sizes[first_spare], kSegment);
    std::string tail(64, 'x');
    {
      std::ifstream in(segment_path(engine, test_ref(), first_spare), std::ios::binary);
      in.seekg(static_cast<std::streamoff>(sizes[first_spare] - tail.size()));
      in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
    }
    EXPECT_NE(tail, std::string(64, '\0')) << "the sealed segment ends in zeros";
    w.append();
    ASSERT_FALSE(HasFatalFailure());
    expect_all(*shard, acked);
    shard.reset();
    impl.reset();
    engine.shutdown();
    // A clean close cuts the active segment to its batches: the .idx it writes describes the
    // whole file, so the next start reads nothing.
    sizes = segment_sizes(engine);
    EXPECT_LT(sizes[second], kSegment);
    EXPECT_FALSE(fsys::exists(spare_file(engine)));
  }
  fs->restart();
  FsStorageEngine engine(host, fs);
  auto shard = engine.open_shard(test_ref(), StreamSpec{}).value();
  expect_all(*shard, acked);
  EXPECT_FALSE(host.logged("truncated torn tail"));
  EXPECT_FALSE(host.logged("checking every batch"));
}

// Power cuts while writing into a preallocated segment: whatever a crash does to the
// overwritten zeros (puts them all back, keeps a random prefix of the new bytes, adds
// garbage), every acknowledged record comes back, and appends go on where the log ends.
TEST(PreallocatedSegments, AcknowledgedRecordsSurviveAPowerCutInsideAPreallocatedSegment) {
  bool saw_torn = false, saw_zero_end = false;
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    std::cout << "[   SEED   ] " << seed << std::endl;
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    TestHost host;
    configure(host);
    if (seed % 3 == 0) host.set("storage.verify_on_start", "all");
    auto fs = std::make_shared<FaultFileSystem>();
    AckedRecords acks;
    auto& acked = acks.by_offset;
    for (int round = 0; round < 2; ++round) {
      SCOPED_TRACE("round " + std::to_string(round));
      FsStorageEngine engine(host, fs);
      auto shard = engine.open_shard(test_ref(), StreamSpec{}).value();
      auto impl = std::dynamic_pointer_cast<ShardLogImpl>(shard);
      expect_all(*shard, acked);
      ASSERT_FALSE(HasFatalFailure());
      Writer w(*shard, acked, "s" + std::to_string(seed) + "r" + std::to_string(round) + "-");
      const std::uint64_t active = roll_into_a_spare(engine, *impl, w);
      ASSERT_FALSE(HasFatalFailure());
      ASSERT_EQ(segment_sizes(engine)[active], kSegment);
      for (int i = 0, n = static_cast<int>(rng() % 4); i < n; ++i) w.append();
      ASSERT_FALSE(HasFatalFailure());

      // Appends written into the zeros but held before their fdatasync, then a power cut.
      std::vector<std::string> held;
      for (int i = 0, n = 1 + static_cast<int>(rng() % 6); i < n; ++i)
        held.push_back(make_batch("s" + std::to_string(seed) + "r" + std::to_string(round) + "u" +
                                      std::to_string(i),
                                  1 + rng() % 4, 1000, rng() % 800));
      append_then_power_cut(*shard, *fs, std::move(held), acks, seed * 100 + round,
                            CrashOptions{(seed & 1) != 0, (seed & 2) != 0, (seed & 4) != 0});
      ASSERT_FALSE(HasFatalFailure());
      shard.reset();
      impl.reset();
      engine.shutdown();
      fs->restart();
    }
    FsStorageEngine engine(host, fs);
    auto opened = engine.open_shard(test_ref(), StreamSpec{});
    ASSERT_TRUE(opened) << opened.error().to_string();
    expect_all(**opened, acked);
    ASSERT_FALSE(HasFatalFailure());
    // The log goes on after the recovered end (over the zeros it kept, or a cut tail).
    Writer w(**opened, acked, "after");
    for (int i = 0; i < 3; ++i) w.append();
    ASSERT_FALSE(HasFatalFailure());
    expect_all(**opened, acked);
    if (host.logged("truncated torn tail")) saw_torn = true;
    else saw_zero_end = true;
  }
  EXPECT_TRUE(saw_torn) << "some seed should have kept torn bytes in the zeros";
  EXPECT_TRUE(saw_zero_end) << "some seed should have put every zero back";
}

// After a crash, a preallocated segment's zeros are checked only up to the reservation its
// recovery point names (recovery_point.h "Reserved end"): the log never wrote beyond it, and
// a start does not read there. The bytes there are made non-zero on purpose: a start that
// read the whole spare would take them for a torn tail and cut the file at the last batch.
TEST(PreallocatedSegments, ACrashRestartReadsASpareOnlyUpToItsReservation) {
  TestHost host;
  configure(host);
  auto fs = std::make_shared<FaultFileSystem>();
  std::map<std::uint64_t, std::string> acked;
  std::string path, log_dir;
  std::uint64_t active = 0;
  {
    FsStorageEngine engine(host, fs);
    auto shard = engine.open_shard(test_ref(), StreamSpec{}).value();
    auto impl = std::dynamic_pointer_cast<ShardLogImpl>(shard);
    Writer w(*shard, acked, "r");
    active = roll_into_a_spare(engine, *impl, w);
    ASSERT_FALSE(HasFatalFailure());
    for (int i = 0; i < 2; ++i) w.append();
    ASSERT_FALSE(HasFatalFailure());
    path = segment_path(engine, test_ref(), active);
    log_dir = engine.shard_directory(test_ref()).value() + "/log";
    fs->crash(7, CrashOptions{});  // a SIGKILL: nothing unsynced to lose
    shard.reset();
    impl.reset();
    engine.shutdown();
  }
  fs->restart();
  auto rp = read_recovery_point(*fs, log_dir);
  ASSERT_TRUE(rp) << "no recovery point";
  ASSERT_EQ(rp->segment_base, active) << "the point does not name the spare being written";
  ASSERT_GT(rp->reserved_end, rp->position);
  ASSERT_LT(rp->reserved_end + 200, kSegment) << "the reservation covers the whole spare";
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(kSegment - 200));
    const std::string junk(100, 'X');
    f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  FsStorageEngine engine(host, fs);
  auto opened = engine.open_shard(test_ref(), StreamSpec{});
  ASSERT_TRUE(opened) << opened.error().to_string();
  expect_all(**opened, acked);
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_FALSE(host.logged("truncated torn tail")) << "the start read past the reservation";
  EXPECT_EQ(fsys::file_size(path), kSegment) << "the start read past the reservation and cut the spare";
  // The log goes on over the zeros, its reservation moving ahead of the writes.
  Writer w(**opened, acked, "after");
  for (int i = 0; i < 4; ++i) w.append();
  ASSERT_FALSE(HasFatalFailure());
  expect_all(**opened, acked);
  auto moved = read_recovery_point(*fs, log_dir);
  ASSERT_TRUE(moved);
  EXPECT_GT(moved->reserved_end, rp->reserved_end);
}

// A recovery point's reservation that the writer went past without moving it (left by a
// run that kept no points, or by a build that did not know the field) must not hide the
// batches beyond it. The worst case is batches that end exactly at the reserved end: the
// trial read up to it sees only whole batches, and only the page at the reserved end (a
// batch header, never zero) tells it that the writer went on. Run in the plain first
// segment (the file ends at the last batch) and in a spare (zeros after the last batch).
void stale_reservation_hides_nothing(bool in_a_spare) {
  TestHost host;
  configure(host);
  auto fs = std::make_shared<FaultFileSystem>();
  std::map<std::uint64_t, std::string> acked;
  std::string log_dir, path;
  std::uint64_t active = 0, aligned = 0;
  {
    FsStorageEngine engine(host, fs);
    auto shard = engine.open_shard(test_ref(), StreamSpec{}).value();
    auto impl = std::dynamic_pointer_cast<ShardLogImpl>(shard);
    log_dir = engine.shard_directory(test_ref()).value() + "/log";
    Writer w(*shard, acked, "s");
    if (in_a_spare) active = roll_into_a_spare(engine, *impl, w);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    for (int i = 0; i < 3; ++i) w.append();
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    // Where the active segment's batches end: the shard's bytes less the sealed segments'.
    auto active_end = [&] {
      std::uint64_t sealed = 0;
      for (const auto& [base, size] : segment_sizes(engine))
        if (base != active) sealed += size;
      return impl->stats().size_bytes - sealed;
    };
    // One batch padded to end on a page boundary: the reserved end a stale point names.
    const std::uint64_t pos = active_end();
    std::string fit;
    for (std::size_t pad = 0; pad < 8192 && fit.empty(); ++pad) {
      std::string b = make_batch("fit", 1, 1000, pad);
      if ((pos + b.size()) % 4096 == 0) fit = std::move(b);
    }
    ASSERT_FALSE(fit.empty()) << "no padding ends a batch on a page boundary";
    aligned = pos + fit.size();
    auto vals = batch_values(fit);
    auto r = append_wait(*shard, std::move(fit));
    ASSERT_TRUE(r) << r.error().to_string();
    acked[r->base_offset.value()] = vals.at(0);
    ASSERT_EQ(active_end(), aligned);
    for (int i = 0; i < 3; ++i) w.append();
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    ASSERT_EQ(segment_sizes(engine).rbegin()->first, active) << "the test expects no roll";
    path = segment_path(engine, test_ref(), active);
    EXPECT_EQ(fsys::file_size(path) == kSegment, in_a_spare);
    fs->crash(11, CrashOptions{});  // a SIGKILL: nothing unsynced to lose
    shard.reset();
    impl.reset();
    engine.shutdown();
  }
  fs->restart();
  // The stale point: no trusted prefix, a reservation at the page boundary.
  ASSERT_TRUE(write_recovery_point(*fs, log_dir, RecoveryPoint{active, 0, active, 0, aligned}, true));
  ASSERT_EQ(read_recovery_point(*fs, log_dir)->reserved_end, aligned);
  FsStorageEngine engine(host, fs);
  auto opened = engine.open_shard(test_ref(), StreamSpec{});
  ASSERT_TRUE(opened) << opened.error().to_string();
  expect_all(**opened, acked);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  EXPECT_GT((*opened)->stats().high_watermark.value(), acked.rbegin()->first)
      << "records past the reservation were lost";
  EXPECT_FALSE(host.logged("truncated torn tail"));
  EXPECT_EQ(fsys::file_size(path) == kSegment, in_a_spare) << "a spare's zeros stay for the writes";
  // The start removed the point whose reservation it did not keep, before any write.
  auto left = read_recovery_point(*fs, log_dir);
  EXPECT_FALSE(left && left->reserved_end == aligned) << "the stale reservation is still on disk";
}

TEST(PreallocatedSegments, AStaleReservationDoesNotHideBatchesWrittenPastIt) {
  stale_reservation_hides_nothing(false);
}

TEST(PreallocatedSegments, AStaleReservationInASpareDoesNotHideBatchesWrittenPastIt) {
  stale_reservation_hides_nothing(true);
}

// A busy shard does not grow its plain first segment to the end: once that holds
// max(segment_bytes / 16, 1 MiB), a spare is made and the next group rolls into it.
TEST(PreallocatedSegments, ABusyShardMovesFromItsPlainSegmentIntoASpareEarly) {
  TestHost host;
  configure(host);
  constexpr std::uint64_t kBig = 32ull << 20;  // early roll at 2 MiB
  host.set("storage.segment_bytes", std::to_string(kBig));
  auto fs = std::make_shared<FaultFileSystem>();
  std::map<std::uint64_t, std::string> acked;
  FsStorageEngine engine(host, fs);
  auto shard = engine.open_shard(test_ref(), StreamSpec{}).value();
  auto impl = std::dynamic_pointer_cast<ShardLogImpl>(shard);
  Writer w(*shard, acked, "e");
  while (impl->stats().size_bytes < (2u << 20)) {  // the group that crosses asks for a spare
    w.append();
    ASSERT_FALSE(HasFatalFailure());
  }
  ASSERT_EQ(segment_sizes(engine).size(), 1u) << "rolled before a spare was ready";
  ASSERT_TRUE(eventually([&] { return impl->spare_ready(); })) << "no spare was made";
  w.append();
  ASSERT_FALSE(HasFatalFailure());
  auto sizes = segment_sizes(engine);
  ASSERT_EQ(sizes.size(), 2u) << "the group after the spare was ready did not roll into it";
  EXPECT_LT(sizes.begin()->second, (3u << 20)) << "the plain segment was cut back to its batches";
  EXPECT_EQ(sizes.rbegin()->second, kBig);
  expect_all(*shard, acked);
}

// Zeros cost one extra write of every byte, and a sync of a large group saves little: a
// shard whose syncs average more than 64 KiB never asks for a spare.
TEST(PreallocatedSegments, AShardOfLargeGroupsGetsNoSpare) {
  TestHost host;
  configure(host);
  host.set("storage.segment_bytes", std::to_string(1 << 20));
  FsStorageEngine engine(host, std::make_shared<FaultFileSystem>());
  auto shard = engine.open_shard(test_ref(), StreamSpec{}).value();
  auto impl = std::dynamic_pointer_cast<ShardLogImpl>(shard);
  std::map<std::uint64_t, std::string> acked;
  std::uint64_t base = 0;
  while (segment_sizes(engine).size() < 3) {  // one append (one sync) of ~96 KiB at a time
    std::string b = make_batch("big" + std::to_string(base), 96, 1000, 1000);
    auto vals = batch_values(b);
    auto r = append_wait(*shard, std::move(b));
    ASSERT_TRUE(r) << r.error().to_string();
    for (std::size_t k = 0; k < vals.size(); ++k) acked[r->base_offset.value() + k] = vals[k];
    base = r->base_offset.value();
    EXPECT_FALSE(fsys::exists(spare_file(engine))) << "a spare for 96 KiB syncs";
  }
  EXPECT_FALSE(impl->spare_ready());
  EXPECT_LT(segment_sizes(engine).rbegin()->second, 1u << 20) << "the new segment is a plain one";
  EXPECT_EQ(impl->stats().preallocated_bytes, 0u);
  expect_all(*shard, acked);
}

// A power cut during one group's sync, in preallocated space: the sector holding batch k's
// header was not rewritten (it reads as the synced bytes before k, then zeros), while the
// sector of batch k+1 was. k starts mid-sector, so no whole zero sector lies between them.
// Nothing of the group was acknowledged: the start cuts at k instead of refusing.
TEST(PreallocatedSegments, ATornGroupWhoseLostSectorBeganBeforeTheBatchIsCutNotRefused) {
  TestHost host;
  configure(host);
  host.set("storage.verify_on_start", "all");
  auto fs = std::make_shared<FaultFileSystem>();
  std::map<std::uint64_t, std::string> acked;
  std::string path;
  std::uint64_t k_pos = 0, k_base = 0;
  {
    FsStorageEngine engine(host, fs);
    auto shard = engine.open_shard(test_ref(), StreamSpec{}).value();
    auto impl = std::dynamic_pointer_cast<ShardLogImpl>(shard);
    Writer w(*shard, acked, "g");
    const std::uint64_t active = roll_into_a_spare(engine, *impl, w);
    ASSERT_FALSE(HasFatalFailure());
    path = segment_path(engine, test_ref(), active);
    auto sealed = [&] {
      std::uint64_t n = 0;
      for (const auto& [b, sz] : segment_sizes(engine))
        if (b != active) n += sz;
      return n;
    };
    const std::string probe = make_batch("k", 1, 1000, 300);
    // Small batches until the next one starts at least 100 bytes into a sector and ends in
    // the next sector.
    for (int i = 0;; ++i) {
      ASSERT_LT(i, 200);
      const std::uint64_t pos = impl->stats().size_bytes - sealed();
      const std::uint64_t in_sector = pos % 512;
      if (in_sector >= 100 && in_sector + probe.size() > 512) {
        k_pos = pos;
        break;
      }
      std::string b = make_batch("s" + std::to_string(i), 1, 1000, 50);
      const std::string v = batch_values(b).at(0);
      auto r = append_wait(*shard, std::move(b));
      ASSERT_TRUE(r);
      acked[r->base_offset.value()] = v;
    }
    auto k = append_wait(*shard, probe);
    ASSERT_TRUE(k);
    k_base = k->base_offset.value();
    ASSERT_TRUE(append_wait(*shard, make_batch("k1", 1, 1000, 50)));  // batch k+1, next sector
    fs->crash(9, CrashOptions{});  // nothing unsynced: a SIGKILL, zeros kept
    shard.reset();
    impl.reset();
    engine.shutdown();
  }
  // As if k and k+1 were one unsynced group and the first sector of k never reached the disk.
  {
    const std::uint64_t end = (k_pos / 512 + 1) * 512;
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(k_pos));
    const std::string zeros(end - k_pos, '\0');
    f.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
  }
  fs->restart();
  FsStorageEngine engine(host, fs);
  auto opened = engine.open_shard(test_ref(), StreamSpec{});
  ASSERT_TRUE(opened) << "refused a torn group: " << opened.error().to_string();
  expect_all(**opened, acked);
  EXPECT_EQ(read_all(**opened).size(), k_base) << "batch k and k+1 are cut";
  EXPECT_TRUE(host.logged("a torn group commit"));
}

// With preallocation turned off, a start cuts the zeros a preallocated segment kept.
TEST(PreallocatedSegments, WithPreallocationOffAStartCutsTheZerosAfterTheLastBatch) {
  TestHost host;
  configure(host);
  auto fs = std::make_shared<FaultFileSystem>();
  std::map<std::uint64_t, std::string> acked;
  std::uint64_t active = 0;
  {
    FsStorageEngine engine(host, fs);
    auto shard = engine.open_shard(test_ref(), StreamSpec{}).value();
    auto impl = std::dynamic_pointer_cast<ShardLogImpl>(shard);
    Writer w(*shard, acked, "z");
    active = roll_into_a_spare(engine, *impl, w);
    ASSERT_FALSE(HasFatalFailure());
    w.append();
    ASSERT_FALSE(HasFatalFailure());
    fs->crash(3, CrashOptions{});  // no clean close: the zeros stay
    shard.reset();
    impl.reset();
    engine.shutdown();
  }
  fs->restart();
  host.set("storage.preallocate_segments", "false");
  FsStorageEngine engine(host, fs);
  auto shard = engine.open_shard(test_ref(), StreamSpec{}).value();
  expect_all(*shard, acked);
  EXPECT_TRUE(host.logged("bytes of zeros after the last batch"));
  EXPECT_LT(segment_sizes(engine)[active], kSegment);
}

// A follower's small append_replica chunks get spares too: it rolls into them where the
// leader rolled, cuts the sealed ones, and after a power cut holds everything it reported
// durable.
TEST(PreallocatedSegments, AFollowerRollsIntoSparesAndKeepsWhatItReportedDurable) {
  Node leader, follower;
  for (Node* n : {&leader, &follower}) {
    n->host.set("storage.segment_bytes", std::to_string(kSegment));
    n->host.set("storage.preallocate_segments", n == &follower ? "true" : "false");
    n->restart();
    ASSERT_FALSE(HasFatalFailure());
  }
  ASSERT_TRUE(leader.log->become_leader(LeaderEpoch(1)));
  ASSERT_TRUE(follower.log->become_follower(LeaderEpoch(1), NodeId(1)));
  bool saw_spare_in_use = false;
  for (int round = 0; round < 4; ++round) {
    append_n(*leader.log, "r" + std::to_string(round) + "-", 80);  // ~36 KiB
    ASSERT_FALSE(HasFatalFailure());
    replicate(*leader.log, *follower.log, 2048);  // one sync per ~2 KiB chunk
    ASSERT_FALSE(HasFatalFailure());
    // Let the spare that the half-full segment asked for be written before the next round.
    EXPECT_TRUE(eventually([&] {
      return follower.log->spare_ready() || !fsys::exists(follower.log_dir() + "/next-segment.tmp");
    }));
    for (const auto& e : fsys::directory_iterator(follower.log_dir()))
      if (e.path().extension() == ".log" && e.file_size() == kSegment) saw_spare_in_use = true;
  }
  EXPECT_TRUE(saw_spare_in_use) << "the follower never wrote into a preallocated segment";
  const Offset end = leader.log->durable_end();
  ASSERT_EQ(follower.log->durable_end(), end);
  // Sealed segments hold exactly the leader's bytes; only the active one may be longer.
  std::map<std::string, std::uint64_t> lsize, fsize;
  for (const auto& e : fsys::directory_iterator(leader.log_dir()))
    if (e.path().extension() == ".log") lsize[e.path().filename().string()] = e.file_size();
  for (const auto& e : fsys::directory_iterator(follower.log_dir()))
    if (e.path().extension() == ".log") fsize[e.path().filename().string()] = e.file_size();
  ASSERT_EQ(lsize.size(), fsize.size()) << "the follower rolled where the leader did not";
  for (auto l = lsize.begin(), f = fsize.begin(); l != lsize.end(); ++l, ++f) {
    EXPECT_EQ(l->first, f->first);
    if (std::next(l) != lsize.end()) {
      EXPECT_EQ(l->second, f->second) << l->first;
    }
  }

  follower.fs->crash(11, CrashOptions{true, true, true});
  follower.restart();
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_EQ(follower.log->durable_end(), end) << "a power cut took what the follower reported durable";
  leader.log->advance_high_watermark(end);
  follower.log->advance_high_watermark(end);
  const auto records = read_all(*leader.log);
  EXPECT_EQ(records.size(), end.value());
  EXPECT_EQ(read_all(*follower.log), records);
}

// The zeros after the last batch are taken for unwritten space only when nothing but zeros
// follows: a damaged acknowledged batch inside a preallocated segment, with acknowledged
// batches after it, still stops the start.
TEST(PreallocatedSegments, ACorruptBatchBeforeAcknowledgedOnesInAPreallocatedSegmentIsStillRefused) {
  TestHost host;
  configure(host);
  host.set("storage.verify_on_start", "all");
  auto fs = std::make_shared<FaultFileSystem>();
  std::map<std::uint64_t, std::string> acked;
  std::uint64_t active = 0;
  std::string path;
  {
    FsStorageEngine engine(host, fs);
    auto shard = engine.open_shard(test_ref(), StreamSpec{}).value();
    auto impl = std::dynamic_pointer_cast<ShardLogImpl>(shard);
    Writer w(*shard, acked, "c");
    active = roll_into_a_spare(engine, *impl, w);
    ASSERT_FALSE(HasFatalFailure());
    for (int i = 0; i < 4; ++i) w.append();
    ASSERT_FALSE(HasFatalFailure());
    path = segment_path(engine, test_ref(), active);
    // Leave the zeros in place, as a SIGKILL would: no clean close.
    fs->crash(7, CrashOptions{});
    shard.reset();
    impl.reset();
    engine.shutdown();
  }
  flip_byte(path, 100);  // inside the first batch of the preallocated segment
  fs->restart();
  FsStorageEngine engine(host, fs);
  auto opened = engine.open_shard(test_ref(), StreamSpec{});
  ASSERT_FALSE(opened) << "a corrupt acknowledged batch was taken for the end of the log";
  EXPECT_EQ(opened.error().code, Errc::corrupt_data) << opened.error().to_string();
}

}  // namespace
}  // namespace sluice::fs_storage::testing
