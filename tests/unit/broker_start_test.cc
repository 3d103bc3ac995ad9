// BrokerRuntime's start against a scripted catalog and the real fs-storage engine: what a
// start does before the broker registers, and so before the controller counts it as live
// (docs/architecture.md "Broker runtime", docs/replication.md "A lost shard copy").
#include <gtest/gtest.h>

#include <filesystem>

#include "broker_test_support.h"
#include "sluice/catalog_rules.h"
#include "sluice/levels.h"

namespace {

const ShardRef kRef{K, ShardIndex{0}, Incarnation{I1}};

// The real engine, whose assign() records the catalog's word and accepts it (the unit test
// host has no peer transport for the replication manager).
class RecordingAssign final : public StorageEngine {
 public:
  RecordingAssign(StorageEngine& inner, ScriptedCatalog& cat) : inner_(inner), cat_(cat) {}
  Result<std::shared_ptr<ShardLog>> open_shard(const ShardRef& ref, const StreamSpec& spec) override {
    {
      std::lock_guard lk(mu_);
      registrations_at_open.push_back(cat_.registrations());
    }
    if (on_open) on_open();
    return inner_.open_shard(ref, spec);
  }
  Result<void> assign(const ShardRef&, const ReplicaAssignment& a) override {
    std::lock_guard lk(mu_);
    assigned.push_back(a);
    return {};
  }
  void close_shard(const ShardRef& ref) override { inner_.close_shard(ref); }
  Result<bool> remove_replica(const ShardRef& ref) override { return inner_.remove_replica(ref); }
  void shutdown() override { inner_.shutdown(); }
  Result<std::uint32_t> delete_incarnations(const StreamKey& k, Incarnation up_to) override {
    return inner_.delete_incarnations(k, up_to);
  }
  Result<std::vector<ShardRef>> list_on_disk() override { return inner_.list_on_disk(); }
  std::vector<ReplicaAssignment> assigned_so_far() {
    std::lock_guard lk(mu_);
    return assigned;
  }
  std::function<void()> on_open;  // called at each open_shard, before the inner engine's
  std::vector<int> registrations_when_opening() {
    std::lock_guard lk(mu_);
    return registrations_at_open;
  }

 private:
  StorageEngine& inner_;
  ScriptedCatalog& cat_;
  std::vector<int> registrations_at_open;  // how many registrations each open_shard came after
  std::mutex mu_;
  std::vector<ReplicaAssignment> assigned;
};

// K at I1 with two replicas: broker 2 leads in epoch 3, and both brokers (this one, 1, under
// its directory id "") are in sync, at version 7.
CatalogSnapshot two_replicas() {
  auto s = catalog_with(10, I1);
  s.streams[0].spec.replication_factor = 2;
  s.streams[0].spec.min_insync = 1;
  s.finalized_features.push_back(std::string(kReplicatedShards));
  auto& a = s.assignments[0];
  a.leader = NodeId{2};
  a.replicas = {NodeId{2}, NodeId{1}};
  a.leader_epoch = LeaderEpoch{3};
  a.in_sync = {InSyncReplica{NodeId{2}, "dir-2"}, InSyncReplica{NodeId{1}, ""}};
  a.version = ShardVersion{7};
  return s;
}

// This disk held a copy of K's shard 0 (marked in .replicas at its first open), then its
// directory was deleted.
void lose_the_copy(fs_storage::FsStorageEngine& fs, const StreamSpec& spec) {
  ASSERT_TRUE(fs.open_shard(kRef, spec));
  fs.close_shard(kRef);
  auto dir = fs.shard_directory(kRef);
  ASSERT_TRUE(dir);
  ASSERT_GT(std::filesystem::remove_all(*dir), 0u);
}

// The catalog's compare-and-set, applied to `stored`.
Result<Assignment> apply_update(Assignment& stored, const ShardUpdate& u) {
  if (u.expected_version != stored.version)
    return Error(Errc::conflict, "scripted: the shard is at version " + std::to_string(stored.version.value()));
  stored.leader = u.leader;
  stored.leader_epoch = u.leader_epoch;
  stored.in_sync = u.in_sync;
  stored.version = ShardVersion{stored.version.value() + 1};
  return stored;
}

}  // namespace

// Regression (stop 42's open window): the broker registered, and so counted as live, before
// it opened its shards. Its lost copy could then be elected while the old leader was down
// too, and with min_insync 1 that election took the old leader out of the in-sync set; the
// lost copy gave the leadership up once it opened, and the shard was left with no counted
// copy at all until an operator's unclean election. Now the copy leaves the set first.
TEST(BrokerStart, a_lost_copy_leaves_the_in_sync_set_before_the_broker_registers) {
  sluice::testing::TestHost host;
  ScriptedCatalog cat;
  fs_storage::FsStorageEngine fs(host, std::make_shared<fs_storage::PosixFileSystem>());
  auto snap = two_replicas();
  lose_the_copy(fs, snap.streams[0].spec);
  Assignment stored = snap.assignments[0];
  cat.set_snapshot(snap);
  cat.on_update = [&](const ShardUpdate& u) { return apply_update(stored, u); };
  RecordingAssign storage(fs, cat);
  auto b = make_broker(host, cat, storage);
  ASSERT_TRUE(b->start());
  EXPECT_EQ(cat.calls(), (std::vector<std::string>{"update_shard", "register_broker"}));
  EXPECT_EQ(storage.registrations_when_opening(), std::vector<int>{0}) << "opened after registering";
  ASSERT_EQ(cat.updates.size(), 1u);
  const auto& u = cat.updates[0];
  EXPECT_EQ(u.expected_version, ShardVersion{7});
  EXPECT_EQ(u.leader, NodeId{2}) << "another broker's leadership is kept";
  EXPECT_EQ(u.leader_epoch, LeaderEpoch{3});
  ASSERT_EQ(u.in_sync.size(), 1u);
  EXPECT_EQ(u.in_sync[0].broker, NodeId{2});
  // The engine is told the catalog's answer, not the plan's older word that still counted
  // the lost copy.
  auto assigned = storage.assigned_so_far();
  ASSERT_FALSE(assigned.empty());
  EXPECT_EQ(assigned.front().version, ShardVersion{8});
  EXPECT_EQ(assigned.front().in_sync.size(), 1u);
  b->stop();
}

// The controller moved the shard between the broker's snapshot and its request (its own
// failover made the shard leaderless in epoch 4): the conflict reads the shard again and
// the request is made against the stored version.
TEST(BrokerStart, a_lost_copys_leave_that_meets_a_newer_version_asks_again_against_it) {
  sluice::testing::TestHost host;
  ScriptedCatalog cat;
  fs_storage::FsStorageEngine fs(host, std::make_shared<fs_storage::PosixFileSystem>());
  auto snap = two_replicas();
  lose_the_copy(fs, snap.streams[0].spec);
  cat.set_snapshot(snap);
  Assignment stored = snap.assignments[0];
  stored.leader = NodeId{0};
  stored.leader_epoch = LeaderEpoch{4};
  stored.version = ShardVersion{9};
  auto moved = snap;
  moved.assignments[0] = stored;
  bool first = true;
  cat.on_update = [&](const ShardUpdate& u) -> Result<Assignment> {
    if (first) {
      first = false;
      cat.set_snapshot(moved);  // what a snapshot reads from now on
    }
    return apply_update(stored, u);
  };
  RecordingAssign storage(fs, cat);
  auto b = make_broker(host, cat, storage);
  ASSERT_TRUE(b->start());
  EXPECT_EQ(cat.calls(), (std::vector<std::string>{"update_shard", "update_shard", "register_broker"}));
  ASSERT_EQ(cat.updates.size(), 2u);
  EXPECT_EQ(cat.updates[1].expected_version, ShardVersion{9});
  EXPECT_EQ(cat.updates[1].leader, NodeId{0});
  EXPECT_EQ(cat.updates[1].leader_epoch, LeaderEpoch{4});
  ASSERT_EQ(stored.in_sync.size(), 1u);
  EXPECT_EQ(stored.in_sync[0].broker, NodeId{2});
  auto assigned = storage.assigned_so_far();
  ASSERT_FALSE(assigned.empty());
  EXPECT_EQ(assigned.front().version, ShardVersion{10}) << "the engine was given an older word";
  b->stop();
}

// A broker the catalog records under another directory (back with a new or replaced disk)
// holds no copy an in-sync set counts: it registers before its opens, as that makes the
// old record's in-sync entries ineligible at once, and asks nothing.
TEST(BrokerStart, a_broker_back_with_another_directory_registers_before_it_opens) {
  sluice::testing::TestHost host;
  ScriptedCatalog cat;
  fs_storage::FsStorageEngine fs(host, std::make_shared<fs_storage::PosixFileSystem>());
  auto snap = two_replicas();
  snap.assignments[0].in_sync[1].directory_id = "the-old-disk";
  BrokerInfo me;
  me.id = NodeId{1};
  me.directory_id = "the-old-disk";
  snap.brokers = {me};
  cat.set_snapshot(snap);
  RecordingAssign storage(fs, cat);
  auto b = make_broker(host, cat, storage);
  ASSERT_TRUE(b->start());
  EXPECT_EQ(cat.calls(), (std::vector<std::string>{"register_broker"}));
  EXPECT_EQ(storage.registrations_when_opening(), std::vector<int>{1}) << "opened before registering";
  b->stop();
}

// A copy that is not lost, and a lost copy the catalog no longer counts, ask nothing.
TEST(BrokerStart, a_copy_that_is_not_lost_or_not_counted_asks_nothing) {
  for (const bool counted : {true, false}) {
    SCOPED_TRACE(counted ? "a held copy" : "a lost copy the in-sync set does not count");
    sluice::testing::TestHost host;
    ScriptedCatalog cat;
    fs_storage::FsStorageEngine fs(host, std::make_shared<fs_storage::PosixFileSystem>());
    auto snap = two_replicas();
    if (counted) {
      ASSERT_TRUE(fs.open_shard(kRef, snap.streams[0].spec));
      fs.close_shard(kRef);
    } else {
      lose_the_copy(fs, snap.streams[0].spec);
      snap.assignments[0].in_sync.pop_back();
    }
    cat.set_snapshot(snap);
    RecordingAssign storage(fs, cat);
    auto b = make_broker(host, cat, storage);
    ASSERT_TRUE(b->start());
    EXPECT_EQ(cat.calls(), (std::vector<std::string>{"register_broker"}));
    b->stop();
  }
}

// A build that lacks a finalized feature is refused before it opens (and so writes) any
// shard: the registration's rule, checked on the snapshot before the opens.
TEST(BrokerStart, a_broker_the_catalog_would_refuse_opens_nothing) {
  sluice::testing::TestHost host;
  ScriptedCatalog cat;
  fs_storage::FsStorageEngine fs(host, std::make_shared<fs_storage::PosixFileSystem>());
  auto snap = catalog_with(10, I1);
  snap.finalized_features.push_back("a_feature_of_a_newer_build");
  cat.set_snapshot(snap);
  RecordingAssign storage(fs, cat);
  auto b = make_broker(host, cat, storage);
  auto r = b->start();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::conflict) << r.error().to_string();
  EXPECT_NE(r.error().message.find("a_feature_of_a_newer_build"), std::string::npos) << r.error().message;
  EXPECT_FALSE(held_on_disk(fs, I1)) << "a refused build opened a shard";
  EXPECT_TRUE(cat.calls().empty());
  b->stop();
}

TEST(CatalogRules, ALostCopyLeavingTheInSyncSetGivesUpOnlyItsOwnLeadership) {
  ShardUpdate u;
  u.leader = NodeId{1};
  u.leader_epoch = LeaderEpoch{5};
  u.in_sync = {InSyncReplica{NodeId{1}, "a"}, InSyncReplica{NodeId{2}, "b"}};
  auto led = u;
  leave_in_sync(led, NodeId{1});
  EXPECT_EQ(led.leader, NodeId{0});
  EXPECT_EQ(led.leader_epoch, LeaderEpoch{6});
  ASSERT_EQ(led.in_sync.size(), 1u);
  EXPECT_EQ(led.in_sync[0].broker, NodeId{2});
  auto followed = u;
  leave_in_sync(followed, NodeId{2});
  EXPECT_EQ(followed.leader, NodeId{1});
  EXPECT_EQ(followed.leader_epoch, LeaderEpoch{5});
  ASSERT_EQ(followed.in_sync.size(), 1u);
  EXPECT_EQ(followed.in_sync[0].broker, NodeId{1});
}

// Plugins ask PluginHost::feature_finalized (sluice/host.h), which sluiced answers from the
// broker: fs-storage's lost copies say so in their fetches once lost_copy_fetch is
// finalized, from their first fetch on. So the broker knows what the catalog finalized
// before it opens a shard, and learns what is finalized later from the change feed.
TEST(BrokerStart, the_finalized_features_are_known_before_the_first_shard_opens) {
  sluice::testing::TestHost host;
  ScriptedCatalog cat;
  fs_storage::FsStorageEngine fs(host, std::make_shared<fs_storage::PosixFileSystem>());
  auto snap = catalog_with(10, I1);
  snap.finalized_features.push_back(std::string(kLostCopyFetch));
  cat.set_snapshot(snap);
  FeatureInfo lost;
  lost.name = std::string(kLostCopyFetch);
  lost.finalized = true;
  lost.finalized_seq = ChangeSeq{5};
  cat.features = {lost};
  RecordingAssign storage(fs, cat);
  BrokerRuntime* broker = nullptr;
  std::vector<bool> finalized_at_open;
  storage.on_open = [&] { finalized_at_open.push_back(broker->feature_finalized(kLostCopyFetch)); };
  auto b = make_broker(host, cat, storage);
  broker = b.get();
  EXPECT_FALSE(b->feature_finalized(kLostCopyFetch)) << "known before the catalog was read";
  ASSERT_TRUE(b->start());
  EXPECT_EQ(finalized_at_open, std::vector<bool>{true});
  EXPECT_FALSE(b->feature_finalized(kCounters));
  ChangeEvent fin;
  fin.kind = ChangeEvent::Kind::feature_finalized;
  fin.seq = ChangeSeq{11};
  fin.feature = std::string(kCounters);
  cat.emit(fin);
  ASSERT_TRUE(eventually([&] { return b->feature_finalized(kCounters); }));
  EXPECT_TRUE(b->feature_finalized(kLostCopyFetch));
  EXPECT_FALSE(b->feature_finalized("no_such_feature"));
  b->stop();
}
