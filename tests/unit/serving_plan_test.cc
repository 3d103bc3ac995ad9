// The broker's serving decisions (core/serving_plan.h) as a table: catalog image, node,
// what is held and the durable floors in; floors, closes, deletes, opens and each name's
// serving out, printed as one line and compared with the expected trace. No processes.
#include <gtest/gtest.h>

#include <sstream>

#include "catalog_image.h"
#include "serving_plan.h"
#include "sluice/levels.h"

using namespace sluice;
using namespace sluice::core;

namespace {

const StreamKey K{"t", "n", "s"};
const StreamKey OTHER{"t", "n", "other"};
constexpr NodeId ME{1};
constexpr NodeId PEER{2};
constexpr std::uint64_t I1 = 1'700'000'000'000'000, I2 = 1'700'000'000'500'000;

StreamInfo stream(const StreamKey& k, std::uint64_t inc, std::uint32_t shards = 1, std::uint64_t created = 5) {
  StreamInfo s;
  s.key = k;
  s.incarnation = Incarnation{inc};
  s.spec.shards = shards;
  s.created_seq = ChangeSeq{created};
  return s;
}

Assignment assign(const StreamKey& k, std::uint32_t shard, std::uint64_t inc, std::uint64_t gen, NodeId leader) {
  return Assignment{k, ShardIndex{shard}, Incarnation{inc}, Generation{gen}, leader, {leader}};
}

// An image with `s` placed: shard i's leader is leaders[i], generation = created seq.
CatalogImage with_stream(CatalogImage img, const StreamInfo& s, std::vector<NodeId> leaders) {
  img.streams[s.key] = s;
  auto& as = img.assignments[s.key];
  as.clear();
  for (std::uint32_t i = 0; i < leaders.size(); ++i)
    as.push_back(assign(s.key, i, s.incarnation.value(), s.created_seq.value(), leaders[i]));
  return img;
}

CatalogImage finalized_at(std::uint64_t seq) {
  CatalogImage img;
  img.finalized[std::string(kStreamIncarnations)] = ChangeSeq{seq};
  return img;
}

HeldStreams holding(const StreamKey& k, std::uint64_t inc, std::vector<bool> open, std::uint64_t gen = 5,
                    NodeId leader = ME) {
  HeldStream h;
  h.incarnation = Incarnation{inc};
  h.open = open;
  for (std::uint32_t i = 0; i < open.size(); ++i) h.assignments.push_back(assign(k, i, inc, gen, leader));
  return {{k, h}};
}

ServingFloors floor_of(std::optional<std::uint64_t> served, std::optional<std::uint64_t> deleted,
                       const StreamKey& k = K) {
  ServingFloor f;
  if (served) f.served = Incarnation{*served};
  if (deleted) f.deleted = Incarnation{*deleted};
  return {{k, f}};
}


std::string inc(std::uint64_t v) {
  if (v == I1) return "I1";
  if (v == I2) return "I2";
  return std::to_string(v);
}
std::string name(const StreamKey& k) { return k.name; }

// One line: floors | close | delete | open | streams | forget
std::string trace(const ServingPlan& p) {
  std::ostringstream o;
  auto incs = [](const std::optional<Incarnation>& i) { return i ? inc(i->value()) : std::string("-"); };
  o << "floors:";
  for (const auto& [k, f] : p.floors) o << " " << name(k) << "(served=" << incs(f.served) << ",deleted=" << incs(f.deleted) << ")";
  o << " | close:";
  for (const auto& c : p.close) o << " " << name(c.ref.stream) << "#" << c.ref.shard.value() << "@" << inc(c.ref.incarnation.value());
  o << " | delete:";
  for (const auto& d : p.remove) o << " " << name(d.key) << "<=" << inc(d.up_to.value());
  o << " | open:";
  for (const auto& a : p.open) o << " " << name(a.ref.stream) << "#" << a.ref.shard.value() << "@" << inc(a.ref.incarnation.value());
  o << " | streams:";
  for (const auto& [k, s] : p.streams) {
    o << " " << name(k) << "@" << inc(s.info.incarnation.value());
    if (!s.refused.empty()) {
      o << "=REFUSED";
      continue;
    }
    o << "=[";
    for (bool b : s.serve) o << (b ? "x" : ".");
    o << "]";
  }
  o << " | forget:";
  for (const auto& k : p.forget) o << " " << name(k);
  return o.str();
}

ChangeEvent event(ChangeEvent::Kind kind, ChangeSeq seq) {
  ChangeEvent ev;
  ev.kind = kind;
  ev.seq = seq;
  return ev;
}

std::string refusal_of(const ServingPlan& p, const StreamKey& k) {
  auto it = p.streams.find(k);
  return it == p.streams.end() ? "<absent>" : it->second.refused;
}

struct Case {
  const char* why;
  CatalogImage image;
  HeldStreams held;
  ServingFloors floors;
  std::string want;
  std::string refusal_has = {};  // a substring of K's refusal, if refused
  DataRole role = DataRole::broker;
  std::optional<StreamKey> only = std::nullopt;
};

void run(const std::vector<Case>& cases) {
  for (const auto& c : cases) {
    SCOPED_TRACE(c.why);
    const auto p = plan_serving(c.image, ServingNode{ME, c.role}, c.held, c.floors, c.only);
    EXPECT_EQ(trace(p), c.want);
    if (!c.refusal_has.empty()) {
      EXPECT_NE(refusal_of(p, K).find(c.refusal_has), std::string::npos) << refusal_of(p, K);
    }
  }
}

}  // namespace

TEST(ServingPlan, own_assignments_only) {
  run({
      {"a new stream assigned here is opened; the floor records it",
       with_stream({}, stream(K, I1), {ME}), {}, {},
       "floors: s(served=I1,deleted=-) | close: | delete: | open: s#0@I1 | streams: s@I1=[x] | forget:"},
      {"another broker's shard is known, not opened",
       with_stream({}, stream(K, I1, 2), {PEER, ME}), {}, {},
       "floors: s(served=I1,deleted=-) | close: | delete: | open: s#1@I1 | streams: s@I1=[.x] | forget:"},
      {"what is held and still assigned here is kept, not reopened",
       with_stream({}, stream(K, I1), {ME}), holding(K, I1, {true}), floor_of(I1, {}),
       "floors: | close: | delete: | open: | streams: s@I1=[x] | forget:"},
      {"a held name the catalog no longer has is closed and forgotten, its data kept",
       {}, holding(K, I1, {true}), floor_of(I1, {}),
       "floors: | close: s#0@I1 | delete: | open: | streams: | forget: s"},
  });
}

// felix #1245: ownership compares (incarnation, generation); an assignment that does not
// supersede the held one never replaces it.
TEST(ServingPlan, assignment_ordering) {
  run({
      {"an older generation does not take the shard away",
       with_stream({}, stream(K, I1, 1, 3), {PEER}), holding(K, I1, {true}, 7), floor_of(I1, {}),
       "floors: | close: | delete: | open: | streams: s@I1=[x] | forget:"},
      {"a newer generation moves it",
       with_stream({}, stream(K, I1, 1, 9), {PEER}), holding(K, I1, {true}, 7), floor_of(I1, {}),
       "floors: | close: s#0@I1 | delete: | open: | streams: s@I1=[.] | forget:"},
      {"a recreate at a LOWER generation is still taken: incarnation first (felix)",
       with_stream({}, stream(K, I2, 1, 2), {ME}), holding(K, I1, {true}, 7), floor_of(I1, {}),
       "floors: s(served=I2,deleted=-) | close: s#0@I1 | delete: | open: s#0@I2 | streams: s@I2=[x] | forget:"},
  });
}

TEST(ServingPlan, tombstones_and_deletes) {
  CatalogImage recreated = with_stream({}, stream(K, I2), {ME});
  recreated.tombstones[K] = Incarnation{I1};
  CatalogImage deleted;
  deleted.tombstones[K] = Incarnation{I1};
  CatalogImage at_tomb = with_stream({}, stream(K, I1), {ME});
  at_tomb.tombstones[K] = Incarnation{I1};
  run({
      {"delete with a tombstone: close, then delete up to it; the floor records the word",
       deleted, holding(K, I1, {true}), floor_of(I1, {}),
       "floors: s(served=I1,deleted=I1) | close: s#0@I1 | delete: s<=I1 | open: | streams: | forget: s"},
      {"recreate while awake: the old incarnation closes, the tombstone deletes it, the new opens",
       recreated, holding(K, I1, {true}), floor_of(I1, {}),
       "floors: s(served=I2,deleted=I1) | close: s#0@I1 | delete: s<=I1 | open: s#0@I2 | streams: s@I2=[x] | forget:"},
      {"regression (felix): slept through a delete and a recreate: the old data goes before the new opens",
       recreated, {}, floor_of(I1, {}),
       "floors: s(served=I2,deleted=I1) | close: | delete: s<=I1 | open: s#0@I2 | streams: s@I2=[x] | forget:"},
      {"a full plan repeats every delete word (a crash may have cut the last one short)",
       recreated, holding(K, I2, {true}), floor_of(I2, I1),
       "floors: | close: | delete: s<=I1 | open: | streams: s@I2=[x] | forget:"},
      {"a change event's plan deletes only when the word rises",
       recreated, holding(K, I2, {true}), floor_of(I2, I1),
       "floors: | close: | delete: | open: | streams: s@I2=[x] | forget:", {}, DataRole::broker, K},
      {"never at or below the tombstone",
       at_tomb, {}, {},
       "floors: s(served=-,deleted=I1) | close: | delete: s<=I1 | open: | streams: s@I1=REFUSED | forget:",
       "at or below its tombstone"},
      {"a change event's plan touches only its name",
       with_stream(deleted, stream(OTHER, I2), {ME}), {}, {},
       "floors: other(served=I2,deleted=-) | close: | delete: | open: other#0@I2 | streams: other@I2=[x] | forget:",
       {}, DataRole::broker, OTHER},
  });
}

// The durable guard (docs/architecture.md "Broker runtime"): a restored control plane
// cannot move a name back to a deleted or lower incarnation.
TEST(ServingPlan, restored_control_plane) {
  const CatalogImage rewound = with_stream({}, stream(K, I1), {ME});  // before the delete: no tombstone
  run({
      {"regression: restore + broker restart: the floors refuse the deleted incarnation",
       rewound, {}, floor_of(I2, I1),
       "floors: | close: | delete: s<=I1 | open: | streams: s@I1=REFUSED | forget:",
       "a delete this broker applied earlier (its durable floor)"},
      {"regression (resync order): restore without restart: the held newer incarnation closes, the old is refused",
       rewound, holding(K, I2, {true}), floor_of(I2, I1),
       "floors: | close: s#0@I2 | delete: s<=I1 | open: | streams: s@I1=REFUSED | forget:",
       "at or below"},
      {"held is a floor too, even before it is persisted",
       rewound, holding(K, I2, {true}), {},
       "floors: | close: s#0@I2 | delete: | open: | streams: s@I1=REFUSED | forget:",
       "lower than incarnation " + std::to_string(I2) + " that this broker has served"},
      {"a lower incarnation than served, with no delete word, is refused",
       rewound, {}, floor_of(I2, {}),
       "floors: | close: | delete: | open: | streams: s@I1=REFUSED | forget:", "lower than incarnation"},
      {"restored to before the stream existed: closed, and its data NOT deleted (no word)",
       {}, holding(K, I2, {true}), floor_of(I2, {}),
       "floors: | close: s#0@I2 | delete: | open: | streams: | forget: s"},
      {"a create on the restored control plane lands above (clock) and is served",
       with_stream({}, stream(K, I2 + 1), {ME}), {}, floor_of(I2, I1),
       "floors: s(served=" + std::to_string(I2 + 1) + ",deleted=I1) | close: | delete: s<=I1 | open: s#0@" +
           std::to_string(I2 + 1) + " | streams: s@" + std::to_string(I2 + 1) + "=[x] | forget:"},
      {"restored to before the finalize: a legacy 0 is below what was served",
       with_stream({}, stream(K, 0), {ME}), {}, floor_of(I2, I1),
       "floors: | close: | delete: s<=I1 | open: | streams: s@0=REFUSED | forget:", "at or below"},
  });
}

// Legacy data (incarnation 0) before and after the stream_incarnations finalize (felix
// "The fix for the rollout").
TEST(ServingPlan, legacy_incarnation_zero) {
  CatalogImage after_delete = finalized_at(10);
  after_delete.untombstoned_deletes[K] = Incarnation{0};
  CatalogImage zero_tomb = with_stream(finalized_at(10), stream(K, 0, 1, 4), {ME});
  zero_tomb.tombstones[K] = Incarnation{0};
  run({
      {"before the finalize a recreate at 0 reopens the legacy data (level 8)",
       with_stream({}, stream(K, 0, 1, 20), {ME}), {}, floor_of(0, {}),
       "floors: | close: | delete: | open: s#0@0 | streams: s@0=[x] | forget:"},
      {"a stream at 0 created before the finalize is served after it",
       with_stream(finalized_at(10), stream(K, 0, 1, 4), {ME}), {}, {},
       "floors: s(served=0,deleted=-) | close: | delete: | open: s#0@0 | streams: s@0=[x] | forget:"},
      {"regression (felix): a level-8 create committed after the finalize is refused, never served over legacy data",
       with_stream(finalized_at(10), stream(K, 0, 1, 12), {ME}), {}, floor_of(0, {}),
       "floors: | close: | delete: | open: | streams: s@0=REFUSED | forget:", "predates incarnations"},
      {"... the same create while a legacy 0 is held closes it",
       with_stream(finalized_at(10), stream(K, 0, 1, 12), {ME}), holding(K, 0, {true}), floor_of(0, {}),
       "floors: | close: s#0@0 | delete: | open: | streams: s@0=REFUSED | forget:", "predates incarnations"},
      {"finalize seq unknown (0): cannot tell, so served",
       with_stream(finalized_at(0), stream(K, 0, 1, 12), {ME}), {}, {},
       "floors: s(served=0,deleted=-) | close: | delete: | open: s#0@0 | streams: s@0=[x] | forget:"},
      {"a delete after the finalize removes the legacy data (no tombstone needed)",
       after_delete, holding(K, 0, {true}), floor_of(0, {}),
       "floors: s(served=0,deleted=0) | close: s#0@0 | delete: s<=0 | open: | streams: | forget: s"},
      {"a tombstone at 0 refuses a stream at 0",
       zero_tomb, {}, {},
       "floors: s(served=-,deleted=0) | close: | delete: s<=0 | open: | streams: s@0=REFUSED | forget:",
       "at or below its tombstone"},
  });
}

TEST(ServingPlan, node_without_the_broker_role) {
  CatalogImage recreated = with_stream({}, stream(K, I2), {ME});
  recreated.tombstones[K] = Incarnation{I1};
  run({
      {"no data role: nothing opened or deleted, no floor",
       recreated, {}, {},
       "floors: | close: | delete: | open: | streams: s@I2=[.] | forget:", {}, DataRole::none},
      {"... but the refusals still hold",
       with_stream(finalized_at(10), stream(K, 0, 1, 12), {ME}), {}, {},
       "floors: | close: | delete: | open: | streams: s@0=REFUSED | forget:", "predates incarnations",
       DataRole::none},
  });
}

// The image a broker replays the change feed into (catalog_image.h).
TEST(CatalogImage, replay_of_stream_changes) {
  CatalogSnapshot snap;
  snap.seq = ChangeSeq{9};
  snap.streams = {stream(K, I1)};
  snap.assignments = {assign(K, 0, I1, 5, ME)};
  snap.finalized_features = {std::string(kStreamIncarnations)};
  FeatureInfo f;
  f.name = std::string(kStreamIncarnations);
  f.finalized = true;
  f.finalized_seq = ChangeSeq{3};
  auto img = image_from_snapshot(snap, {f});
  EXPECT_EQ(img.finalized.at(std::string(kStreamIncarnations)), ChangeSeq{3});

  auto del = event(ChangeEvent::Kind::stream_deleted, ChangeSeq{10});
  del.stream = stream(K, I1);
  del.tombstone = Tombstone{K, Incarnation{I1}, ChangeSeq{10}};
  replay(img, del);
  EXPECT_FALSE(img.streams.count(K));
  EXPECT_FALSE(img.assignments.count(K));
  EXPECT_EQ(img.tombstones.at(K), Incarnation{I1});

  auto create = event(ChangeEvent::Kind::stream_created, ChangeSeq{11});
  create.stream = stream(K, I2, 1, 11);
  create.assignments = {assign(K, 0, I2, 11, ME)};
  replay(img, create);
  EXPECT_EQ(img.streams.at(K).incarnation, Incarnation{I2});
  EXPECT_EQ(img.seq, ChangeSeq{11});

  // A delete of an older incarnation does not remove the newer stream.
  replay(img, del);
  EXPECT_EQ(img.streams.at(K).incarnation, Incarnation{I2});

  // A delete without a tombstone after the finalize is a delete word (legacy data goes).
  auto legacy = event(ChangeEvent::Kind::stream_deleted, ChangeSeq{12});
  legacy.stream = stream(OTHER, 0);
  replay(img, legacy);
  EXPECT_EQ(img.untombstoned_deletes.at(OTHER), Incarnation{0});
}

TEST(CatalogImage, a_shard_change_replaces_the_assignment_of_its_incarnation) {
  CatalogSnapshot snap;
  snap.seq = ChangeSeq{9};
  snap.streams = {stream(K, I1, 2)};
  snap.assignments = {assign(K, 0, I1, 5, ME), assign(K, 1, I1, 5, ME)};
  auto img = image_from_snapshot(snap, {});
  auto ch = event(ChangeEvent::Kind::shard_changed, ChangeSeq{10});
  Assignment a = assign(K, 1, I1, 5, ME);
  a.leader_epoch = LeaderEpoch{2};
  a.version = ShardVersion{3};
  ch.stream.key = K;
  ch.assignments = {a};
  replay(img, ch);
  EXPECT_EQ(img.assignments.at(K).at(1).version, ShardVersion{3});
  EXPECT_EQ(img.assignments.at(K).at(0).version, ShardVersion{0}) << "the other shard is unchanged";
  EXPECT_EQ(img.seq, ChangeSeq{10});
  // A change of another incarnation changes nothing.
  Assignment old = a;
  old.incarnation = Incarnation{I1 - 1};
  old.version = ShardVersion{9};
  ch.assignments = {old};
  replay(img, ch);
  EXPECT_EQ(img.assignments.at(K).at(1).version, ShardVersion{3});
}

TEST(CatalogImage, a_delete_before_the_finalize_leaves_no_word) {
  CatalogImage img = with_stream({}, stream(K, 0), {ME});
  auto legacy = event(ChangeEvent::Kind::stream_deleted, ChangeSeq{12});
  legacy.stream = stream(K, 0);
  replay(img, legacy);
  EXPECT_TRUE(img.untombstoned_deletes.empty());
  EXPECT_TRUE(img.tombstones.empty());
  auto fin = event(ChangeEvent::Kind::feature_finalized, ChangeSeq{13});
  fin.feature = std::string(kStreamIncarnations);
  replay(img, fin);
  EXPECT_EQ(img.finalized.at(std::string(kStreamIncarnations)), ChangeSeq{13});
}

// Replicated shards (docs/replication.md): a broker opens every shard it holds a replica of,
// but serves clients only on the shards it leads.
TEST(ServingPlan, AReplicaIsOpenButServedOnlyByItsLeader) {
  auto img = with_stream(CatalogImage{}, stream(K, I1, 2), {PEER, ME});
  img.assignments[K][0].replicas = {PEER, ME, NodeId{3}};
  img.assignments[K][1].replicas = {ME, PEER, NodeId{3}};
  const auto p = plan_serving(img, ServingNode{ME, DataRole::broker}, {}, {});
  EXPECT_EQ(trace(p), "floors: s(served=I1,deleted=-) | close: | delete: | open: s#0@I1 s#1@I1 | "
                      "streams: s@I1=[.x] | forget:");
  const auto& sv = p.streams.at(K);
  EXPECT_EQ(sv.hold, (std::vector<bool>{true, true}));
  // Broker 3 is a replica of both: it opens both and serves none.
  const auto p3 = plan_serving(img, ServingNode{NodeId{3}, DataRole::broker}, {}, {});
  EXPECT_EQ(p3.open.size(), 2u);
  EXPECT_EQ(p3.streams.at(K).serve, (std::vector<bool>{false, false}));
  // Broker 4 holds nothing.
  const auto p4 = plan_serving(img, ServingNode{NodeId{4}, DataRole::broker}, {}, {});
  EXPECT_TRUE(p4.open.empty());
}

// A shard change (same incarnation and generation, a higher version) supersedes what is held:
// the leader moved, so the old leader keeps the shard open as a replica but stops serving it.
TEST(ServingPlan, AHigherShardVersionSupersedesTheHeldAssignment) {
  auto img = with_stream(CatalogImage{}, stream(K, I1, 1), {PEER});
  img.assignments[K][0].replicas = {ME, PEER};
  img.assignments[K][0].version = ShardVersion{2};
  img.assignments[K][0].leader_epoch = LeaderEpoch{2};
  auto held = holding(K, I1, {true});
  held[K].assignments[0].replicas = {ME, PEER};
  held[K].assignments[0].version = ShardVersion{1};
  const auto p = plan_serving(img, ServingNode{ME, DataRole::broker}, held, {}, K);
  EXPECT_EQ(trace(p), "floors: s(served=I1,deleted=-) | close: | delete: | open: | streams: s@I1=[.] | forget:");
  EXPECT_EQ(p.streams.at(K).assignments[0].leader, PEER);
  EXPECT_EQ(p.streams.at(K).assignments[0].version, ShardVersion{2});
  // The older word does not undo the newer one held.
  img.assignments[K][0].version = ShardVersion{1};
  img.assignments[K][0].leader = ME;
  held[K].assignments[0].version = ShardVersion{3};
  held[K].assignments[0].leader = PEER;
  const auto q = plan_serving(img, ServingNode{ME, DataRole::broker}, held, {}, K);
  EXPECT_EQ(q.streams.at(K).assignments[0].version, ShardVersion{3});
}

// Reassignment (docs/replication.md "Reassignment"): once a replicated shard's list no
// longer names this broker, its open copy is closed and dropped; a full plan (start,
// resync) drops it too, for a broker that was down when the move finished. A stream with
// replication factor 1 never drops: its only copy may have moved by generation.
TEST(ServingPlan, ACopyThatLeftTheReplicaListIsDroppedOnlyForReplicatedStreams) {
  auto s = stream(K, I1, 2);
  s.spec.replication_factor = 3;
  auto img = with_stream(CatalogImage{}, s, {PEER, PEER});
  for (auto& a : img.assignments[K]) {
    a.replicas = {PEER, NodeId{3}, NodeId{4}};
    a.version = ShardVersion{5};
  }
  auto held = holding(K, I1, {true, false}, 5, PEER);
  held[K].assignments[0].replicas = {PEER, NodeId{3}, ME};
  const auto p = plan_serving(img, ServingNode{ME, DataRole::broker}, held, {}, K);
  ASSERT_EQ(p.close.size(), 1u);
  ASSERT_EQ(p.drop.size(), 1u) << "an event plan drops only what was open";
  EXPECT_EQ(p.drop[0].ref, (ShardRef{K, ShardIndex{0}, Incarnation{I1}}));
  EXPECT_NE(p.drop[0].reason.find("[2,3,4]"), std::string::npos) << p.drop[0].reason;
  const auto full = plan_serving(img, ServingNode{ME, DataRole::broker}, {}, {});
  EXPECT_EQ(full.drop.size(), 2u) << "a full plan drops every shard not listed here";
  // Still a replica: nothing dropped; and a replication factor of 1 never drops.
  EXPECT_TRUE(plan_serving(img, ServingNode{NodeId{3}, DataRole::broker}, {}, {}).drop.empty());
  img.streams[K].spec.replication_factor = 1;
  EXPECT_TRUE(plan_serving(img, ServingNode{ME, DataRole::broker}, held, {}, K).drop.empty());
  EXPECT_TRUE(plan_serving(img, ServingNode{ME, DataRole::broker}, {}, {}).drop.empty());
}

TEST(CatalogImage, AShardChangeReplacesOnlyThatShardOfThatIncarnation) {
  auto img = with_stream(CatalogImage{}, stream(K, I1, 2), {ME, PEER});
  ChangeEvent ev = event(ChangeEvent::Kind::shard_changed, ChangeSeq{9});
  Assignment a = img.assignments[K][1];
  a.leader = ME;
  a.leader_epoch = LeaderEpoch{2};
  a.version = ShardVersion{2};
  ev.stream.key = K;
  ev.assignments = {a};
  replay(img, ev);
  EXPECT_EQ(img.seq, ChangeSeq{9});
  EXPECT_EQ(img.assignments[K][0].leader, ME);
  EXPECT_EQ(img.assignments[K][1].leader, ME);
  EXPECT_EQ(img.assignments[K][1].version, ShardVersion{2});
  // A change to an incarnation the image no longer holds changes nothing.
  Assignment old = a;
  old.incarnation = Incarnation{I1 - 1};
  old.leader = PEER;
  old.version = ShardVersion{5};
  ev.seq = ChangeSeq{10};
  ev.assignments = {old};
  replay(img, ev);
  EXPECT_EQ(img.assignments[K][1].leader, ME);
}
