// Consumer-group journal compaction and the group's crash windows, with the fault file
// system: a crash at every compaction step, between a dead-letter append and its journal
// record, and between a replay's intent, its shard append and its completion record.
// Crash points are reached through FsStorageEngine::set_group_step_hook (no timing).
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>

#include "group.h"
#include "group_records.h"
#include "storage_test_util.h"

namespace sluice::fs_storage::testing {
namespace {

using sluice::testing::TestHost;

std::vector<std::uint64_t> offsets_of(const GroupDelivery& d) {
  std::vector<std::uint64_t> v;
  for (auto& i : d.records) v.push_back(i.offset.value());
  return v;
}
std::vector<Offset> offs(std::initializer_list<std::uint64_t> l) {
  std::vector<Offset> v;
  for (auto o : l) v.push_back(Offset(o));
  return v;
}
std::map<std::string, std::string> headers_of(const std::string& batch) {
  BatchReader r(batch.data(), batch.size());
  RecordView rv;
  std::map<std::string, std::string> hm;
  if (!r.next(rv)) return hm;
  std::vector<Header> hs;
  if (!decode_headers(rv.headers, hs)) return hm;
  for (auto& h : hs) hm[std::string(h.name)] = std::string(h.value);
  return hm;
}

class GroupCrashTest : public ::testing::Test {
 protected:
  void SetUp() override {
    host_.set("storage.retention_interval_ms", "0");
    fs_ = std::make_shared<FaultFileSystem>();
    start();
  }
  void start() {
    host_.set("storage.group_journal_compact_bytes", compact_bytes_);
    engine_ = std::make_unique<FsStorageEngine>(host_, fs_);
    engine_->set_group_clock([this] { return now_.load(); });
    engine_->set_group_step_hook([this](std::string_view step) {
      if (step != stop_at_) return false;
      if (!stop_repeatedly_) stop_at_.clear();
      ++stops_;
      if (crash_in_hook_) fs_->crash(11, CrashOptions{});
      return true;
    });
    shard_ = *engine_->open_shard(test_ref(), StreamSpec{});
  }
  void restart_after_crash() {
    shard_.reset();
    engine_.reset();
    fs_->restart();
    start();
  }
  GroupDelivery fetch(std::uint32_t n) {
    auto r = shard_->group_fetch("g", n, opts_);
    EXPECT_TRUE(r) << r.error().to_string();
    return r ? *r : GroupDelivery{};
  }
  GroupPosition pos() {
    auto r = shard_->group_position("g");
    EXPECT_TRUE(r) << r.error().to_string();
    return r ? *r : GroupPosition{};
  }
  std::string group_dir() { return *engine_->shard_directory(test_ref()) + "/groups/g"; }
  std::vector<std::string> dead_letter_batches() {
    auto dl = shard_->dead_letters("g", Offset(0), 100, 1 << 20);
    EXPECT_TRUE(dl) << dl.error().to_string();
    return dl ? dl->batches : std::vector<std::string>{};
  }

  // Acks, a dead letter and a replay: the state every snapshot must carry.
  //   offsets 0..9 ("a"), dead-letter 0 = offset 3 (replayed as offset 10),
  //   dead-letter 1 = offset 5, committed 6, outstanding {6}, hwm 11.
  void build_state() {
    ASSERT_TRUE(append_wait(*shard_, make_batch("a", 10)));
    EXPECT_EQ(offsets_of(fetch(6)), (std::vector<std::uint64_t>{0, 1, 2, 3, 4, 5}));
    ASSERT_TRUE(shard_->group_ack("g", offs({0, 1, 2, 4})));
    now_ += 1000;  // 3 and 5 time out; a second delivery would exceed max_deliveries = 1
    EXPECT_EQ(offsets_of(fetch(1)), std::vector<std::uint64_t>{6});
    ASSERT_EQ(pos().committed.value(), 6u);
    auto n = shard_->replay_dead_letters("g", Offset(0), Offset(1));
    ASSERT_TRUE(n) << n.error().to_string();
    ASSERT_EQ(*n, 1u);
  }
  // After build_state() and an ack of 6.
  void expect_state_after_ack_of_6() {
    auto p = pos();
    EXPECT_EQ(p.committed.value(), 7u) << "the ack of 6 survived";
    EXPECT_EQ(p.outstanding, 0u);
    EXPECT_EQ(p.dead_letter_start.value(), 1u) << "dead letter 0 stays replayed";
    EXPECT_EQ(p.dead_letter_end.value(), 2u);
    auto again = shard_->group_ack("g", offs({6}));
    ASSERT_FALSE(again);
    EXPECT_EQ(again.error().code, Errc::invalid_argument);
    auto dl = dead_letter_batches();
    ASSERT_EQ(dl.size(), 1u);
    EXPECT_EQ(headers_of(dl[0])["sluice-original-offset"], "5");
    EXPECT_EQ(shard_->stats().high_watermark.value(), 11u) << "replayed exactly once";
    auto d = fetch(100);
    EXPECT_EQ(offsets_of(d), (std::vector<std::uint64_t>{7, 8, 9, 10}))
        << "nothing acked or dead-lettered comes back, nothing is skipped";
  }

  TestHost host_;
  std::string compact_bytes_ = "1";  // compact after every call that writes the journal
  std::shared_ptr<FaultFileSystem> fs_;
  std::unique_ptr<FsStorageEngine> engine_;
  std::shared_ptr<ShardLog> shard_;
  std::atomic<std::int64_t> now_{1'000'000};
  GroupOptions opts_{1, 1000};
  std::string stop_at_;
  bool crash_in_hook_ = true;
  bool stop_repeatedly_ = false;
  int stops_ = 0;
};

TEST_F(GroupCrashTest, CompactionKeepsTheJournalSmallAndRecoveryLoadsTheSnapshot) {
  compact_bytes_ = "256";
  shard_.reset();
  engine_.reset();
  start();
  ASSERT_TRUE(append_wait(*shard_, make_batch("a", 300)));
  std::uint64_t max_journal = 0;
  for (std::uint64_t i = 0; i < 300; ++i) {
    ASSERT_EQ(offsets_of(fetch(1)), std::vector<std::uint64_t>{i});
    ASSERT_TRUE(shard_->group_ack("g", offs({i})));
    max_journal = std::max(max_journal, std::filesystem::file_size(group_dir() + "/journal"));
  }
  EXPECT_LT(max_journal, 256u + 64u) << "compacted whenever it passed the threshold";
  EXPECT_TRUE(std::filesystem::exists(group_dir() + "/snapshot"));
  fs_->crash(3, CrashOptions{});
  restart_after_crash();
  EXPECT_EQ(pos().committed.value(), 300u);
  EXPECT_TRUE(fetch(10).records.empty());
}

class CompactionCrashTest : public GroupCrashTest,
                            public ::testing::WithParamInterface<const char*> {};

TEST_P(CompactionCrashTest, ACrashAtEveryStepNeitherLosesNorRepeatsAnything) {
  build_state();
  stop_at_ = GetParam();
  ASSERT_TRUE(shard_->group_ack("g", offs({6}))) << "the ack is durable before compaction starts";
  ASSERT_EQ(stops_, 1) << "the crash point was reached";
  restart_after_crash();
  expect_state_after_ack_of_6();
  // And again, after whatever the recovery compacted.
  fs_->crash(5, CrashOptions{});
  restart_after_crash();
  EXPECT_EQ(pos().committed.value(), 7u);
  EXPECT_EQ(dead_letter_batches().size(), 1u);
}

INSTANTIATE_TEST_SUITE_P(Steps, CompactionCrashTest,
                         ::testing::Values("group.compact.after_snapshot_tmp",
                                           "group.compact.after_snapshot",
                                           "group.compact.after_journal_tmp",
                                           "group.compact.after_journal"));

// A journal reset that fails leaves the group appending to the journal the snapshot covers a
// prefix of: recovery must apply exactly the records after that prefix.
TEST_F(GroupCrashTest, RecordsAfterTheSnapshotInTheSameGenerationAreReplayed) {
  build_state();
  crash_in_hook_ = false;
  stop_repeatedly_ = true;
  stop_at_ = "group.compact.after_snapshot";  // snapshots renamed, journal never reset
  ASSERT_TRUE(shard_->group_ack("g", offs({6})));
  auto d = fetch(2);  // 7, 8
  ASSERT_EQ(offsets_of(d), (std::vector<std::uint64_t>{7, 8}));
  ASSERT_EQ(stops_, 2);
  stop_at_ = "group.compact.after_snapshot_tmp";  // this one never renames its snapshot
  ASSERT_TRUE(shard_->group_ack("g", offs({7})));  // lands after the snapshot's prefix
  ASSERT_EQ(stops_, 3);
  fs_->crash(9, CrashOptions{});
  restart_after_crash();
  auto p = pos();
  EXPECT_EQ(p.committed.value(), 8u) << "the ack after the snapshot's prefix survived";
  EXPECT_EQ(p.outstanding, 1u) << "8 was delivered";
  auto r = fetch(100);
  EXPECT_EQ(offsets_of(r), (std::vector<std::uint64_t>{9, 10}));
  EXPECT_EQ(pos().dead_letter_end.value(), 3u)
      << "8's delivery count (1 = max_deliveries) survived: it moved to dead letters";
}

// Regression (review): a journal that ends before the bytes its snapshot covers (a disk that
// lost synced bytes) was only logged, and the group appended at its end: inside the range
// the snapshot covers, which the next open skips, so an acknowledged ack was lost. A new
// journal generation is started from the snapshot before anything is appended.
TEST_F(GroupCrashTest, AJournalShorterThanItsSnapshotStartsANewGenerationFirst) {
  compact_bytes_ = "1073741824";  // the whole state in the journal first
  shard_.reset();
  engine_.reset();
  start();
  build_state();
  compact_bytes_ = "1";  // then one compaction, which covers all of it (no clean close,
  fs_->crash(3, CrashOptions{});  // which would compact the journal first)
  restart_after_crash();
  crash_in_hook_ = false;
  stop_repeatedly_ = true;
  stop_at_ = "group.compact.after_snapshot";  // the snapshot covers the journal; no reset follows
  ASSERT_TRUE(shard_->group_ack("g", offs({6})));
  ASSERT_GE(stops_, 1);
  stop_at_.clear();
  const std::string journal = group_dir() + "/journal";
  shard_.reset();
  engine_.reset();
  ASSERT_GT(std::filesystem::file_size(journal), 100u);
  std::filesystem::resize_file(journal, 1);  // a torn first record: the journal ends at 0
  compact_bytes_ = "1073741824";  // no compaction from here on: only the open's own
  fs_->restart();
  start();
  ASSERT_EQ(pos().committed.value(), 7u) << "the snapshot's state";
  EXPECT_EQ(offsets_of(fetch(1)), std::vector<std::uint64_t>{7});
  ASSERT_TRUE(shard_->group_ack("g", offs({7})));
  shard_.reset();
  engine_.reset();
  fs_->restart();
  start();
  EXPECT_EQ(pos().committed.value(), 8u) << "the ack written after the short journal was lost";
}

TEST_F(GroupCrashTest, ACorruptSnapshotFailsTheGroupLoudly) {
  build_state();
  ASSERT_TRUE(std::filesystem::exists(group_dir() + "/snapshot"));
  const std::string snap = group_dir() + "/snapshot";
  shard_.reset();
  engine_.reset();
  {
    std::fstream f(snap, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(20);
    f.put('\x7f');
  }
  fs_->restart();
  start();
  auto r = shard_->group_position("g");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::corrupt_data);
  EXPECT_NE(r.error().message.find("snapshot"), std::string::npos) << r.error().message;
}

namespace {
// One journal record as group_journal.cc writes it: u32 payload length, u32 CRC-32C of the
// type and payload, u8 type, payload.
std::string journal_record(std::uint8_t type, const std::string& payload, bool good_crc = true) {
  std::string body(1, static_cast<char>(type));
  body += payload;
  std::string r(8, '\0');
  wire::put_u32(r.data(), static_cast<std::uint32_t>(payload.size()));
  wire::put_u32(r.data() + 4, crc32c(body.data(), body.size()) ^ (good_crc ? 0u : 1u));
  return r + body;
}
std::string ack_payload(std::uint64_t off) {
  std::string p(12, '\0');
  wire::put_u32(p.data(), 1);
  wire::put_u64(p.data() + 4, off);
  return p;
}
}  // namespace

// Regression (review): the journal's replay stopped at the first record it could not read
// and cut everything after it as a torn tail. A record whose CRC holds but whose type this
// build does not know (a newer build's, after a rollback) is not torn: cutting there dropped
// the synced ACKs after it (acked records delivered again). It is corrupt_data now, and
// nothing is cut.
class JournalDamageTest : public GroupCrashTest {
 protected:
  // Offsets 0..2 delivered, 0 acked; the engine stopped and `tail` appended to the journal.
  // Returns the journal's size before the append.
  std::uintmax_t ack_one_then_append(const std::string& tail) {
    EXPECT_TRUE(append_wait(*shard_, make_batch("a", 3)));
    EXPECT_EQ(offsets_of(fetch(3)), (std::vector<std::uint64_t>{0, 1, 2}));
    EXPECT_TRUE(shard_->group_ack("g", offs({0})));
    journal_ = group_dir() + "/journal";
    shard_.reset();
    engine_.reset();
    const auto before = std::filesystem::file_size(journal());
    std::ofstream(journal(), std::ios::binary | std::ios::app) << tail;
    fs_->restart();
    start();
    return before;
  }
  const std::string& journal() const { return journal_; }
  std::string journal_;
  void expect_refused_not_cut(const std::string& bad) {
    const std::string tail = bad + journal_record(group_records::kAck, ack_payload(2));
    const auto with = ack_one_then_append(tail) + tail.size();
    auto r = shard_->group_position("g");
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, Errc::corrupt_data) << r.error().to_string();
    EXPECT_NE(r.error().message.find("not a torn tail"), std::string::npos) << r.error().message;
    EXPECT_EQ(std::filesystem::file_size(journal()), with) << "nothing cut";
  }
};

TEST_F(JournalDamageTest, ASoundRecordOfATypeThisBuildDoesNotKnowIsCorruptionNotATornTail) {
  expect_refused_not_cut(journal_record(7, std::string(16, 'x')));
}

// A damaged record is the torn tail even with a sound record after it: a power cut may keep
// a later unsynced page and lose an earlier one, so that cannot tell corruption apart.
TEST_F(JournalDamageTest, ADamagedRecordIsCutAsATornTailEvenWithASoundOneAfterIt) {
  const auto before = ack_one_then_append(journal_record(group_records::kAck, ack_payload(1), false) +
                                          journal_record(group_records::kAck, ack_payload(2)));
  EXPECT_EQ(pos().committed.value(), 1u);
  EXPECT_EQ(std::filesystem::file_size(journal()), before);
}

// Regression (review of 13a6e62): a replay intent an earlier build journaled may cover more
// than the 16 MiB a new replay may; recovery must finish it, not fail every open of the group.
TEST_F(GroupCrashTest, AnEarlierBuildsReplayIntentOfMoreThanSixteenMiBIsFinishedAtOpen) {
  compact_bytes_ = "1073741824";
  shard_.reset();
  engine_.reset();
  start();
  const std::string mib(std::size_t{1} << 20, 'p');
  for (int i = 0; i < 20; ++i) {
    BatchBuilder bb;
    bb.add(std::nullopt, mib, {}, 1000);
    ASSERT_TRUE(append_wait(*shard_, bb.finish()));
  }
  for (int round = 0; round < 100; ++round) {
    std::vector<Offset> got;
    for (auto& r : fetch(100).records) got.push_back(r.offset);
    if (!got.empty()) ASSERT_TRUE(shard_->group_nack("g", got));
    if (pos().dead_letter_end.value() >= 20u) break;
  }
  ASSERT_EQ(pos().dead_letter_end.value(), 20u);
  const std::string journal = group_dir() + "/journal";
  shard_.reset();
  engine_.reset();
  {
    std::string intent(24, '\0');
    wire::put_u64(intent.data(), 0);
    wire::put_u64(intent.data() + 8, 20);
    wire::put_u64(intent.data() + 16, 20);  // the shard's high watermark then
    std::ofstream f(journal, std::ios::binary | std::ios::app);
    f << journal_record(group_records::kReplayPending, intent);
  }
  fs_->restart();
  start();
  auto p = shard_->group_position("g");
  ASSERT_TRUE(p) << p.error().to_string();
  EXPECT_EQ(p->dead_letter_start.value(), 20u);
  EXPECT_EQ(shard_->stats().high_watermark.value(), 40u) << "all 20 replayed, in one batch";
}

// A torn tail (a record cut short at the end) is still cut, as before.
TEST_F(JournalDamageTest, ATornLastRecordIsStillCut) {
  const std::string rec = journal_record(group_records::kAck, ack_payload(1));
  const auto before = ack_one_then_append(rec.substr(0, rec.size() - 3));
  EXPECT_EQ(pos().committed.value(), 1u);
  EXPECT_EQ(std::filesystem::file_size(journal()), before);
}

// Regression (review): the journal's directory was synced only by the open that created
// the journal. When that sync failed (the open failed), the next open found the file and
// synced nothing: acks fdatasync'ed into a file whose entry a power cut could take back.
TEST_F(GroupCrashTest, AJournalWhoseDirectorySyncFailedIsSyncedByTheNextOpen) {
  compact_bytes_ = "1048576";  // no compaction, whose renames sync the directory anyway
  shard_.reset();
  engine_.reset();
  start();
  ASSERT_TRUE(append_wait(*shard_, make_batch("a", 3)));
  // The first sync of groups/g is make_dirs' (for dead-letters/), the second the journal's.
  fs_->fail_dir_sync("/groups/g", 1);
  auto failed = shard_->group_fetch("g", 3, opts_);
  ASSERT_FALSE(failed) << "the open was to fail at the journal's directory sync";
  ASSERT_EQ(offsets_of(fetch(3)), (std::vector<std::uint64_t>{0, 1, 2}));
  ASSERT_TRUE(shard_->group_ack("g", offs({0, 1, 2})));
  CrashOptions lose;
  lose.lose_unsynced_entries = true;
  fs_->crash(5, lose);
  restart_after_crash();
  EXPECT_EQ(pos().committed.value(), 3u) << "the acked records came back";
}

// 3a: the dead-letter append is durable, its DEAD record is not.
TEST_F(GroupCrashTest, ACrashBetweenADeadLetterAndItsJournalRecordDoesNotDeadLetterTwice) {
  compact_bytes_ = "1048576";
  shard_.reset();
  engine_.reset();
  start();
  ASSERT_TRUE(append_wait(*shard_, make_batch("a", 3)));
  ASSERT_EQ(offsets_of(fetch(3)), (std::vector<std::uint64_t>{0, 1, 2}));
  ASSERT_TRUE(shard_->group_ack("g", offs({0, 2})));
  now_ += 1000;
  stop_at_ = "group.dead.after_append";
  EXPECT_FALSE(shard_->group_fetch("g", 10, opts_));
  ASSERT_EQ(stops_, 1);
  restart_after_crash();
  auto p = pos();
  EXPECT_EQ(p.committed.value(), 3u) << "the move was recorded at open";
  EXPECT_EQ(p.outstanding, 0u);
  EXPECT_EQ(p.dead_letter_end.value(), 1u);
  now_ += 10'000;
  EXPECT_TRUE(fetch(10).records.empty());
  EXPECT_EQ(pos().dead_letter_end.value(), 1u) << "dead-lettered once";
  restart_after_crash();  // and the recorded move itself is durable
  EXPECT_EQ(pos().committed.value(), 3u);
  EXPECT_EQ(pos().dead_letter_end.value(), 1u);
}

// 3a, with the DELIVER records lost as well: the move is recorded, and a lower record the
// journal forgot is delivered again, not skipped (the recorded DEAD must not move the cursor).
TEST_F(GroupCrashTest, ARecordedMoveWithLostDeliveriesSkipsNothing) {
  compact_bytes_ = "1048576";
  shard_.reset();
  engine_.reset();
  start();
  GroupOptions o{2, 1000};
  ASSERT_TRUE(append_wait(*shard_, make_batch("a", 4)));
  auto d = shard_->group_fetch("g", 2, o);  // 0, 1; DELIVER never synced
  ASSERT_TRUE(d);
  ASSERT_TRUE(shard_->group_nack("g", offs({1})));
  ASSERT_EQ(offsets_of(*shard_->group_fetch("g", 1, o)), std::vector<std::uint64_t>{1});
  ASSERT_TRUE(shard_->group_nack("g", offs({1})));
  stop_at_ = "group.dead.after_append";  // 1 is moved; the crash takes every journal byte
  EXPECT_FALSE(shard_->group_fetch("g", 1, o));
  ASSERT_EQ(stops_, 1);
  restart_after_crash();
  EXPECT_EQ(pos().dead_letter_end.value(), 1u);
  EXPECT_EQ(offsets_of(fetch(10)), (std::vector<std::uint64_t>{0, 2, 3}));
  fs_->crash(1, CrashOptions{});
  restart_after_crash();
  EXPECT_EQ(offsets_of(fetch(10)), (std::vector<std::uint64_t>{0, 2, 3})) << "after another restart too";
  EXPECT_EQ(pos().dead_letter_end.value(), 1u);
}

// Regression (review): the open-time check read the first sluice-original-offset header of
// a dead letter, and a record may carry one of its own (a tool that republishes dead letters
// keeps their headers). Record 0, carrying "sluice-original-offset: 3", was dead-lettered;
// every later open then recorded offset 3 as moved, and 3 was never delivered.
TEST_F(GroupCrashTest, ARecordsOwnOriginalOffsetHeaderDoesNotSkipThatOffsetAtOpen) {
  std::string headers;
  append_header(headers, "sluice-original-offset", "3");
  BatchBuilder bb;
  bb.add(std::nullopt, "republished", headers, 1000);
  ASSERT_TRUE(append_wait(*shard_, bb.finish()));       // offset 0
  ASSERT_TRUE(append_wait(*shard_, make_batch("a", 3)));  // offsets 1..3
  GroupOptions o{1, 1000};
  ASSERT_EQ(offsets_of(*shard_->group_fetch("g", 1, o)), std::vector<std::uint64_t>{0});
  ASSERT_TRUE(shard_->group_nack("g", offs({0})));
  ASSERT_EQ(offsets_of(*shard_->group_fetch("g", 1, o)), std::vector<std::uint64_t>{1});  // 0 moved
  ASSERT_EQ(pos().dead_letter_end.value(), 1u);
  ASSERT_TRUE(shard_->group_ack("g", offs({1})));
  restart_after_crash();
  EXPECT_EQ(offsets_of(fetch(10)), (std::vector<std::uint64_t>{2, 3})) << "offset 3 was skipped";
}

class ReplayCrashTest : public GroupCrashTest {
 protected:
  // Offsets 0..2, offset 1 dead-lettered (dead-letter 0), committed 3; hwm 3.
  void dead_letter_one() {
    ASSERT_TRUE(append_wait(*shard_, make_batch("a", 3)));
    fetch(3);
    ASSERT_TRUE(shard_->group_ack("g", offs({0, 2})));
    now_ += 1000;
    EXPECT_TRUE(fetch(10).records.empty());
    ASSERT_EQ(pos().dead_letter_end.value(), 1u);
  }
};

// 3b: the replayed batch is durable in the shard, its REPLAYED record is not.
TEST_F(ReplayCrashTest, ACrashAfterTheShardAppendDoesNotReplayTwice) {
  dead_letter_one();
  stop_at_ = "group.replay.after_append";
  EXPECT_FALSE(shard_->replay_dead_letters("g", Offset(0), Offset(1)));
  restart_after_crash();
  EXPECT_EQ(pos().dead_letter_start.value(), 1u) << "found in the shard, marked replayed";
  EXPECT_TRUE(dead_letter_batches().empty());
  EXPECT_EQ(shard_->stats().high_watermark.value(), 4u);
  auto again = shard_->replay_dead_letters("g", Offset(0), Offset(1));  // the operator retries
  ASSERT_TRUE(again) << again.error().to_string();
  EXPECT_EQ(*again, 0u);
  EXPECT_EQ(shard_->stats().high_watermark.value(), 4u) << "one copy only";
  auto all = read_all(*shard_);
  EXPECT_EQ(all.at(3), "a#1");
}

// 3b: the intent is durable, the shard append never happened: recovery finishes the replay.
TEST_F(ReplayCrashTest, ACrashAfterTheIntentFinishesTheReplayAtOpen) {
  dead_letter_one();
  stop_at_ = "group.replay.after_intent";
  EXPECT_FALSE(shard_->replay_dead_letters("g", Offset(0), Offset(1)));
  restart_after_crash();
  EXPECT_EQ(pos().dead_letter_start.value(), 1u);
  EXPECT_EQ(shard_->stats().high_watermark.value(), 4u) << "replayed once, at open";
  auto all = read_all(*shard_);
  EXPECT_EQ(all.at(3), "a#1");
  restart_after_crash();
  EXPECT_EQ(shard_->stats().high_watermark.value(), 4u) << "and not again";
}

// Regression (review): the open-time search for an interrupted replay's batch accepted any
// record carrying "sluice-replayed-from: <group>:<n>", so a producer's record with that
// header (a consumer republishing what it read, headers and all) ended the replay unreplayed.
TEST_F(ReplayCrashTest, AProducersReplayMarkIsNotTakenForTheInterruptedReplay) {
  dead_letter_one();
  stop_at_ = "group.replay.after_intent";
  EXPECT_FALSE(shard_->replay_dead_letters("g", Offset(0), Offset(1)));
  restart_after_crash();
  std::string headers;
  append_header(headers, "sluice-replayed-from", "g:0");
  append_header(headers, "app", "republished");
  BatchBuilder bb;
  bb.add(std::nullopt, "not the replay", headers, 1000);
  ASSERT_TRUE(append_wait(*shard_, bb.finish()));  // offset 3, before the group opens
  EXPECT_EQ(pos().dead_letter_start.value(), 1u);  // opens the group: recovery runs
  EXPECT_EQ(shard_->stats().high_watermark.value(), 5u) << "the replay was not appended";
  EXPECT_EQ(read_all(*shard_).at(4), "a#1");
}

// 3b, with other appends after the replayed batch and a compaction in between: the search
// starts at the high watermark recorded in the intent (and the intent survives a snapshot).
TEST_F(ReplayCrashTest, TheReplayedBatchIsFoundBehindLaterAppends) {
  dead_letter_one();
  stop_at_ = "group.replay.after_append";
  crash_in_hook_ = false;
  EXPECT_FALSE(shard_->replay_dead_letters("g", Offset(0), Offset(1)));
  ASSERT_TRUE(append_wait(*shard_, make_batch("z", 5)));
  fetch(1);  // compacts (threshold 1 byte) with the replay still pending
  fs_->crash(2, CrashOptions{});
  restart_after_crash();
  EXPECT_EQ(pos().dead_letter_start.value(), 1u);  // opens the group: recovery runs
  EXPECT_EQ(shard_->stats().high_watermark.value(), 9u) << "no second copy";
}

}  // namespace
}  // namespace sluice::fs_storage::testing
