// Batch entries (metadata level 19) on CatalogFsm alone: each command of a batch is applied
// as it would be alone (same results, same errors, same catalog), with its own change
// sequence; members below 19 hold at a batch; the first batch raises the level floor; the
// proposer batches only while every recorded member is at 19 (proposer.h may_batch).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "catalog_fsm.h"
#include "command.h"
#include "proposer.h"
#include "sluice/levels.h"

namespace sluice::raft_meta {
namespace {

StreamSpec one_shard() {
  StreamSpec s;
  s.shards = 1;
  return s;
}

// A catalog with a cluster, tenant "t", namespace "t/n" and members at `levels`, at
// indexes 1..3+levels.size().
std::uint64_t prepare(CatalogFsm& fsm, std::vector<std::uint32_t> levels) {
  std::uint64_t i = 1;
  Command init = Command::init_cluster("11111111-2222-4333-8444-555555555555");
  init.finalize_features = {"stream_incarnations", "cache_incarnations", "replicated_shards",
                            "shard_reassignment", "counters"};
  EXPECT_TRUE(fsm.apply(i++, encode_command(init)).ok());
  EXPECT_TRUE(fsm.apply(i++, encode_command(Command::create_tenant("t"))).ok());
  EXPECT_TRUE(fsm.apply(i++, encode_command(Command::create_namespace("t", "n"))).ok());
  for (std::uint32_t m = 0; m < levels.size(); ++m) {
    JoinRequest j{NodeId{m + 1}, "10.0.0." + std::to_string(m + 1) + ":7800",
                  "10.0.0." + std::to_string(m + 1) + ":7801", MetadataLevel{levels[m]}};
    auto r = fsm.apply(i++, encode_command(Command::join_member(j)));
    EXPECT_TRUE(r.ok()) << r.error->to_string();
  }
  return i;
}

Command stream(const std::string& name, std::int64_t clock) {
  Command c = Command::create_stream({"t", "n", name}, one_shard(), clock);
  c.proposed_incarnation = static_cast<std::uint64_t>(clock);
  c.incarnations = IncarnationRule::flagged;
  return c;
}
Command del(const std::string& name) {
  Command c = Command::delete_stream({"t", "n", name});
  c.incarnations = IncarnationRule::flagged;
  return c;
}

// Commands whose results differ: created, already exists, a bad name, a delete of the
// first, a recreate of it, a counter, and a delete of a stream that does not exist.
std::vector<std::string> mixed_commands() {
  Command counter = Command::create_counter({"t", "n", "hits"}, 1'700'000'000'000'000);
  counter.proposed_incarnation = 1'700'000'000'000'000;
  return {encode_command(stream("a", 1'700'000'000'000'001)),
          encode_command(stream("a", 1'700'000'000'000'002)),
          encode_command(stream("bad/name", 1'700'000'000'000'003)),
          encode_command(stream("b", 1'700'000'000'000'004)),
          encode_command(del("a")),
          encode_command(stream("a", 1'700'000'000'000'005)),
          encode_command(counter),
          encode_command(del("missing"))};
}

void expect_same_result(const ApplyResult& a, const ApplyResult& b, std::size_t i) {
  EXPECT_EQ(a.seq, b.seq) << "command " << i;
  ASSERT_EQ(a.ok(), b.ok()) << "command " << i << ": " << (a.ok() ? b.error->message : a.error->message);
  if (!a.ok()) {
    EXPECT_EQ(a.error->code, b.error->code) << "command " << i;
    EXPECT_EQ(a.error->message, b.error->message) << "command " << i;
  }
  EXPECT_EQ(a.stream.key, b.stream.key) << "command " << i;
  EXPECT_EQ(a.stream.incarnation, b.stream.incarnation) << "command " << i;
  EXPECT_EQ(a.stream.created_seq, b.stream.created_seq) << "command " << i;
  EXPECT_EQ(a.tombstone.has_value(), b.tombstone.has_value()) << "command " << i;
  if (a.tombstone && b.tombstone) {
    EXPECT_EQ(a.tombstone->deleted_up_to, b.tombstone->deleted_up_to) << "command " << i;
    EXPECT_EQ(a.tombstone->seq, b.tombstone->seq) << "command " << i;
  }
  EXPECT_EQ(a.counter.incarnation, b.counter.incarnation) << "command " << i;
}

TEST(BatchEntries, EachCommandIsAppliedAsItWouldBeAlone) {
  CatalogFsm batched, alone;
  const std::uint64_t first = prepare(batched, {19, 19, 19});
  ASSERT_EQ(prepare(alone, {19, 19, 19}), first);
  const auto cmds = mixed_commands();

  ApplyResult b = batched.apply(first, encode_batch(cmds, 19));
  ASSERT_TRUE(b.ok()) << b.error->to_string();
  ASSERT_EQ(b.inner.size(), cmds.size());
  std::vector<ApplyResult> a;
  for (std::size_t i = 0; i < cmds.size(); ++i) a.push_back(alone.apply(first + i, cmds[i]));

  for (std::size_t i = 0; i < cmds.size(); ++i) expect_same_result(b.inner[i], a[i], i);
  // One failing command does not fail the others.
  EXPECT_TRUE(b.inner[0].ok());
  EXPECT_EQ(b.inner[1].error->code, Errc::already_exists);
  EXPECT_EQ(b.inner[2].error->code, Errc::invalid_name);
  EXPECT_TRUE(b.inner[3].ok());
  EXPECT_TRUE(b.inner[5].ok());
  EXPECT_GT(b.inner[5].stream.incarnation, b.inner[0].stream.incarnation);
  EXPECT_EQ(b.inner[7].error->code, Errc::not_found);

  // The same catalog and the same change log (each command its own sequence).
  const std::uint64_t last = first + cmds.size() - 1;
  EXPECT_EQ(batched.applied(), ChangeSeq{last});
  EXPECT_EQ(alone.applied(), ChangeSeq{last});
  EXPECT_EQ(batched.applied_index(), first);
  auto sb = batched.catalog_snapshot(), sa = alone.catalog_snapshot();
  ASSERT_EQ(sb.streams.size(), sa.streams.size());
  for (std::size_t i = 0; i < sb.streams.size(); ++i) {
    EXPECT_EQ(sb.streams[i].key, sa.streams[i].key);
    EXPECT_EQ(sb.streams[i].incarnation, sa.streams[i].incarnation);
    EXPECT_EQ(sb.streams[i].created_seq, sa.streams[i].created_seq);
  }
  EXPECT_EQ(sb.seq, sa.seq);
  EXPECT_EQ(batched.list_tombstones().size(), alone.list_tombstones().size());
  auto cb = batched.changes_after(ChangeSeq{first - 1}, 100), ca = alone.changes_after(ChangeSeq{first - 1}, 100);
  ASSERT_EQ(cb.events.size(), ca.events.size());
  for (std::size_t i = 0; i < cb.events.size(); ++i) {
    EXPECT_EQ(cb.events[i].seq, ca.events[i].seq);
    EXPECT_EQ(cb.events[i].kind, ca.events[i].kind);
  }

  // Sequences stay unique after the batch: the next entry's command is after the batch's.
  ApplyResult next = batched.apply(first + 1, encode_command(stream("c", 1'700'000'000'000'009)));
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next.seq, ChangeSeq{last + 1});
  EXPECT_EQ(next.stream.created_seq, ChangeSeq{last + 1});
  EXPECT_EQ(batched.applied(), ChangeSeq{last + 1});
  EXPECT_EQ(batched.applied_index(), first + 1);
}

TEST(BatchEntries, TheFirstBatchRaisesTheFloorTo19) {
  CatalogFsm fsm;
  const std::uint64_t i = prepare(fsm, {19, 19});
  EXPECT_LT(fsm.level_floor(), kBatchedEntriesLevel);
  auto r = fsm.apply(i, encode_batch({encode_command(stream("a", 1)), encode_command(stream("b", 2))}, 19));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(fsm.level_floor(), kBatchedEntriesLevel);
  // A member below 19 can no longer join.
  JoinRequest j{NodeId{3}, "10.0.0.3:7800", "10.0.0.3:7801", MetadataLevel{18}};
  auto join = fsm.apply(i + 1, encode_command(Command::join_member(j)));
  ASSERT_FALSE(join.ok());
  EXPECT_EQ(join.error->code, Errc::conflict);
}

TEST(BatchEntries, RefusedAsAWholeWhileARecordedMemberIsBelow19) {
  CatalogFsm fsm;  // this member runs at 19; member 2 is recorded at 18
  const std::uint64_t i = prepare(fsm, {19, 18});
  const auto hash = fsm.state_hash();
  auto r = fsm.apply(i, encode_batch({encode_command(stream("a", 1)), encode_command(stream("b", 2))}, 19));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error->code, Errc::conflict) << r.error->message;
  EXPECT_TRUE(r.inner.empty());
  EXPECT_FALSE(fsm.get_stream({"t", "n", "a"}).ok());
  EXPECT_FALSE(fsm.get_stream({"t", "n", "b"}).ok());
  EXPECT_LT(fsm.level_floor(), kBatchedEntriesLevel);
  EXPECT_FALSE(fsm.held().has_value());
  EXPECT_NE(fsm.state_hash(), hash);  // applied_index moved, nothing else
  EXPECT_EQ(fsm.applied(), ChangeSeq{i});
}

TEST(BatchEntries, AMemberBelow19HoldsAtABatch) {
  for (std::uint32_t level : {18u, 17u, 14u}) {
    CatalogFsm fsm(kDefaultChangeRetention, MetadataLevel{level});
    const std::uint64_t i = prepare(fsm, {19, 19});
    const auto before = fsm.state_hash();
    auto r = fsm.apply(i, encode_batch({encode_command(Command::create_namespace("t", "x"))}, 19));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error->code, Errc::unavailable);
    EXPECT_EQ(r.error->outcome, Outcome::uncertain);  // committed: the others apply it
    ASSERT_TRUE(fsm.held().has_value()) << "level " << level;
    EXPECT_EQ(fsm.held()->index, i);
    EXPECT_EQ(fsm.held()->required, kBatchedEntriesLevel);
    EXPECT_EQ(fsm.state_hash(), before) << "level " << level << " applied part of a batch";
    EXPECT_EQ(fsm.applied(), ChangeSeq{i - 1});
  }
  // A member at 19 holds at a batch carrying a newer build's command, before applying any.
  CatalogFsm fsm;
  const std::uint64_t i = prepare(fsm, {19});
  const auto before = fsm.state_hash();
  auto r = fsm.apply(i, encode_batch({encode_command(Command::create_namespace("t", "x")),
                                      R"({"v":1,"op":"frobnicate","level":20})"},
                                     20));
  ASSERT_FALSE(r.ok());
  ASSERT_TRUE(fsm.held().has_value());
  EXPECT_EQ(fsm.held()->required, MetadataLevel{20});
  EXPECT_EQ(fsm.state_hash(), before);
}

TEST(BatchEntries, MalformedAndGroupCommandsAreRefusedOneByOne) {
  CatalogFsm fsm;
  const std::uint64_t i = prepare(fsm, {19});
  JoinRequest j{NodeId{2}, "10.0.0.2:7800", "10.0.0.2:7801", MetadataLevel{19}};
  const std::string nested = encode_batch({encode_command(stream("z", 1))}, 19);
  auto r = fsm.apply(i, encode_batch({encode_command(stream("a", 1)), "[1,2]", nested,
                                      encode_command(Command::join_member(j)),
                                      encode_command(Command::finalize_feature("x")),
                                      encode_command(stream("b", 2))},
                                     19));
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r.inner.size(), 6u);
  EXPECT_TRUE(r.inner[0].ok());
  EXPECT_EQ(r.inner[1].error->code, Errc::malformed_body);
  EXPECT_EQ(r.inner[2].error->code, Errc::malformed_body);
  EXPECT_EQ(r.inner[3].error->code, Errc::invalid_argument);
  EXPECT_EQ(r.inner[4].error->code, Errc::invalid_argument);
  EXPECT_TRUE(r.inner[5].ok());
  EXPECT_FALSE(fsm.member(NodeId{2}).has_value());
  EXPECT_FALSE(fsm.is_finalized("x"));
  EXPECT_FALSE(fsm.get_stream({"t", "n", "z"}).ok());
  for (std::size_t k = 0; k < r.inner.size(); ++k) EXPECT_EQ(r.inner[k].seq, ChangeSeq{i + k});
  // A batch wrapper without commands is malformed as a whole.
  auto empty = fsm.apply(i + 1, R"({"v":1,"op":"batch","level":19,"entries":[]})");
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.error->code, Errc::malformed_body);
  EXPECT_FALSE(fsm.held().has_value());
}

TEST(BatchEntries, SequencesSurviveASnapshot) {
  CatalogFsm fsm;
  const std::uint64_t i = prepare(fsm, {19});
  ASSERT_TRUE(fsm.apply(i, encode_batch({encode_command(stream("a", 1)), encode_command(stream("b", 2)),
                                         encode_command(stream("c", 3))},
                                        19))
                  .ok());
  CatalogFsm copy;
  ASSERT_TRUE(copy.restore(fsm.snapshot()).ok());
  EXPECT_EQ(copy.applied(), ChangeSeq{i + 2});
  EXPECT_EQ(copy.state_hash(), fsm.state_hash());
  auto r = copy.apply(i + 1, encode_command(stream("d", 4)));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.stream.created_seq, ChangeSeq{i + 3});
}

TEST(BatchEntries, ALogThatNeverBatchedHashesAsLevel18Does) {
  CatalogFsm at19, at18(kDefaultChangeRetention, MetadataLevel{18});
  const std::uint64_t i = prepare(at19, {18, 19});
  ASSERT_EQ(prepare(at18, {18, 19}), i);
  for (auto* f : {&at19, &at18}) ASSERT_TRUE(f->apply(i, encode_command(stream("a", 1))).ok());
  EXPECT_EQ(at19.state_hash(), at18.state_hash());
}

TEST(BatchEntries, TheProposerBatchesOnlyWhileEveryMemberIsAt19) {
  const MetadataLevel l18{18}, l19{19};
  EXPECT_TRUE(may_batch(ProposerView{l19, l19}, CommandType::create_stream));
  EXPECT_TRUE(may_batch(ProposerView{l19, l19}, CommandType::delete_cache));
  EXPECT_FALSE(may_batch(ProposerView{l19, l18}, CommandType::create_stream));  // a member below
  EXPECT_FALSE(may_batch(ProposerView{l18, l18}, CommandType::create_stream));  // run at 18
  EXPECT_FALSE(may_batch(ProposerView{l19, l19}, CommandType::join_member));
  EXPECT_FALSE(may_batch(ProposerView{l19, l19}, CommandType::finalize_feature));
  EXPECT_FALSE(may_batch(ProposerView{l19, l19}, CommandType::register_broker));
}

TEST(BatchEntries, OlderBuildsSeeANewerBuildsCommand) {
  const std::string b = encode_batch({encode_command(stream("a", 1))}, 19);
  EXPECT_FALSE(needs_newer_build(b));  // this build knows it
  auto d = decode_entry(b);
  EXPECT_TRUE(d.batch);
  ASSERT_EQ(d.inner.size(), 1u);
  ASSERT_TRUE(d.inner[0].command.has_value());
  EXPECT_EQ(d.inner[0].command->name, "a");
  EXPECT_FALSE(decode_command(b).ok());  // not one command
}

// RaftMetaStore keeps what a proposer reads (members, features, brokers, held) per
// CatalogFsm::generation() and reads it again only once that moved, so the generation must
// move with every entry that can change those, and must not move with names and shards
// (or the cache would never be used).
TEST(BatchEntries, GenerationMovesExactlyWhenWhatAProposerReadsMayChange) {
  CatalogFsm fsm;
  std::uint64_t i = prepare(fsm, {19, 19, 19});
  auto moved = [&](const std::string& entry) {
    const std::uint64_t before = fsm.generation();
    fsm.apply(i++, entry);
    return fsm.generation() != before;
  };
  // Names and shards: never.
  EXPECT_FALSE(moved(encode_command(stream("g1", 1'700'000'000'000'101))));
  EXPECT_FALSE(moved(encode_command(del("g1"))));
  EXPECT_FALSE(moved(encode_command(Command::create_tenant("t2"))));
  EXPECT_FALSE(moved(encode_command(Command::create_namespace("t2", "n2"))));
  EXPECT_FALSE(moved(encode_batch({encode_command(stream("g2", 1'700'000'000'000'102)),
                                   encode_command(stream("g3", 1'700'000'000'000'103))},
                                  19)));
  EXPECT_FALSE(moved(encode_command(stream("g2", 1'700'000'000'000'104))));  // refused: exists
  // Brokers, features and members: always, also when the command is refused.
  BrokerRegistration reg{NodeId{7}, "10.0.0.7:8080", "dir-7", "1.0", {}, ""};
  EXPECT_TRUE(moved(encode_command(Command::register_broker(reg))));
  EXPECT_TRUE(moved(encode_command(Command::unregister_broker(NodeId{7}))));
  EXPECT_TRUE(moved(encode_command(Command::finalize_feature("no_such_feature"))));
  JoinRequest j{NodeId{4}, "10.0.0.4:7800", "10.0.0.4:7801", MetadataLevel{19}};
  EXPECT_TRUE(moved(encode_command(Command::join_member(j))));
  EXPECT_TRUE(moved(encode_command(Command::leave_member(NodeId{4}))));
  EXPECT_TRUE(moved("garbage"));
  // A batch that carries a member command (refused inside the batch) moves it too.
  EXPECT_TRUE(moved(encode_batch({encode_command(stream("g4", 1'700'000'000'000'105)),
                                  encode_command(Command::join_member(j))},
                                 19)));
  // Restore and reset: always.
  std::uint64_t g = fsm.generation();
  ASSERT_TRUE(fsm.restore(fsm.snapshot()).ok());
  EXPECT_NE(fsm.generation(), g);
  g = fsm.generation();
  fsm.reset();
  EXPECT_NE(fsm.generation(), g);

  // A hold (an entry above this member's level) moves it: held() is part of what is kept.
  CatalogFsm old(kDefaultChangeRetention, MetadataLevel{18});
  std::uint64_t k = prepare(old, {18, 18});
  g = old.generation();
  old.apply(k, encode_batch({encode_command(stream("h1", 1'700'000'000'000'106)),
                             encode_command(stream("h2", 1'700'000'000'000'107))},
                            19));
  ASSERT_TRUE(old.held().has_value());
  EXPECT_NE(old.generation(), g);
}

}  // namespace
}  // namespace sluice::raft_meta
