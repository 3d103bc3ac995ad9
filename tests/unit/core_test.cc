// Unit tests for the host's pure pieces: names, specs, batch codec, partitioner, config,
// identity.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <vector>
#include <fstream>

#include "config.h"
#include "fresh_paths.h"
#include "identity.h"
#include "node_host.h"
#include "partitioner.h"
#include "sluice/catalog_rules.h"
#include "sluice/features.h"
#include "sluice/log.h"
#include "sluice/names.h"
#include "sluice/record_batch.h"
#include "sluice/uuid.h"
#include "support/test_host.h"

using namespace sluice;

TEST(Names, AcceptsTheDocumentedAlphabet) {
  for (const char* ok : {"orders", "a", "_x", "A.b-c_9", "0day"})
    EXPECT_TRUE(validate_name(NameKind::stream, ok).ok()) << ok;
  EXPECT_TRUE(validate_name(NameKind::stream, std::string(255, 'a')).ok());
}

TEST(Names, RejectsTraversalSeparatorsControlAndLength) {
  const std::string cases[] = {"", ".", "..", "../x", "a/b", std::string("a\0b", 3), "a\nb", "a\x7f",
                               "tab\t", ".hidden", "-dash", "sp ace", "é", std::string(256, 'a')};
  for (const auto& c : cases) {
    auto r = validate_name(NameKind::tenant, c);
    ASSERT_FALSE(r.ok()) << "accepted: " << c;
    EXPECT_EQ(r.error().code, Errc::invalid_name);
    EXPECT_EQ(http_status(r.error().code), 400);
    // The message never echoes raw control bytes.
    for (char ch : r.error().message) EXPECT_GE(static_cast<unsigned char>(ch), 0x20);
  }
}

TEST(StreamSpec, Bounds) {
  StreamSpec s;
  EXPECT_TRUE(validate_stream_spec(s).ok());
  s.shards = 0;
  EXPECT_FALSE(validate_stream_spec(s).ok());
  s.shards = kMaxShardsPerStream + 1;
  EXPECT_FALSE(validate_stream_spec(s).ok());
  s.shards = 4;
  s.retention.max_bytes = 0;
  EXPECT_FALSE(validate_stream_spec(s).ok());
  s.retention.max_bytes = -1;
  s.default_ack = AckMode::quorum;
  EXPECT_TRUE(validate_stream_spec(s).ok());   // structurally fine: apply must accept it
  EXPECT_TRUE(check_spec_supported(s).ok());   // and this build serves it
}

TEST(CatalogRules, ReplicationFactorAndMinInsyncBounds) {
  StreamSpec s;
  EXPECT_TRUE(validate_stream_spec(s).ok());  // the defaults: one copy, min_insync 1
  for (std::uint32_t rf : {0u, kMaxReplicationFactor + 1}) {
    s.replication_factor = rf;
    s.min_insync = 1;
    auto r = validate_stream_spec(s);
    ASSERT_FALSE(r.ok()) << rf;
    EXPECT_NE(r.error().message.find("replication_factor"), std::string::npos);
  }
  s.replication_factor = 3;
  s.min_insync = 0;
  EXPECT_FALSE(validate_stream_spec(s).ok());
  s.min_insync = 4;
  EXPECT_FALSE(validate_stream_spec(s).ok());
  s.min_insync = 3;
  EXPECT_TRUE(validate_stream_spec(s).ok());   // apply accepts it ...
  EXPECT_TRUE(check_spec_supported(s).ok());   // ... and this build serves it
  EXPECT_EQ(default_min_insync(1), 1u);
  EXPECT_EQ(default_min_insync(2), 2u);
  EXPECT_EQ(default_min_insync(3), 2u);
  EXPECT_EQ(default_min_insync(5), 3u);
}

namespace {
Assignment replicated_shard() {
  Assignment a;
  a.key = StreamKey{"t", "n", "s"};
  a.shard = ShardIndex{0};
  a.incarnation = Incarnation{7};
  a.leader = NodeId{1};
  a.replicas = {NodeId{1}, NodeId{2}, NodeId{3}};
  a.leader_epoch = LeaderEpoch{4};
  a.in_sync = {{NodeId{1}, "d1"}, {NodeId{2}, "d2"}, {NodeId{3}, "d3"}};
  a.version = ShardVersion{10};
  return a;
}
ShardUpdate update_of(const Assignment& a) {
  return ShardUpdate{a.key, a.shard, a.incarnation, a.version, a.leader, a.leader_epoch, a.in_sync};
}
}  // namespace

TEST(CatalogRules, ShardUpdateIsACompareAndSetOnTheVersion) {
  const auto cur = replicated_shard();
  auto u = update_of(cur);
  u.in_sync = {{NodeId{1}, "d1"}, {NodeId{2}, "d2"}};  // the leader shrinks the set
  EXPECT_TRUE(check_shard_update(cur, u).ok());
  u.expected_version = ShardVersion{9};  // a stale writer
  auto r = check_shard_update(cur, u);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::conflict);
  EXPECT_NE(r.error().message.find("10"), std::string::npos);
  u = update_of(cur);
  u.incarnation = Incarnation{6};  // another incarnation of the name
  r = check_shard_update(cur, u);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::stale_route);
}

TEST(CatalogRules, ShardUpdateKeepsEpochsAndTheInSyncSetSound) {
  const auto cur = replicated_shard();
  auto refused = [&](const ShardUpdate& u, const char* why) {
    auto r = check_shard_update(cur, u);
    ASSERT_FALSE(r.ok()) << why;
    EXPECT_EQ(r.error().code, Errc::invalid_argument) << why;
  };
  auto u = update_of(cur);
  u.leader = NodeId{2};  // a new leader in the same epoch
  refused(u, "leader change without a new epoch");
  u.leader_epoch = LeaderEpoch{5};
  EXPECT_TRUE(check_shard_update(cur, u).ok());
  u = update_of(cur);
  u.leader_epoch = LeaderEpoch{3};
  refused(u, "falling epoch");
  u = update_of(cur);
  u.leader = NodeId{9};
  u.leader_epoch = LeaderEpoch{5};
  refused(u, "leader outside the replicas");
  u = update_of(cur);
  u.in_sync.push_back({NodeId{9}, "d9"});
  refused(u, "in-sync broker outside the replicas");
  u = update_of(cur);
  u.in_sync = {{NodeId{1}, "d1"}, {NodeId{1}, "d1b"}};
  refused(u, "a broker twice");
  u = update_of(cur);
  u.in_sync = {{NodeId{1}, "d1"}, {NodeId{2}, ""}};
  refused(u, "no directory id");
  u = update_of(cur);
  u.in_sync = {{NodeId{2}, "d2"}};
  refused(u, "leader outside the in-sync set");
  u = update_of(cur);
  u.leader = NodeId{0};  // no leader left: allowed, with a new epoch
  u.leader_epoch = LeaderEpoch{5};
  u.in_sync = {{NodeId{2}, "d2"}};
  EXPECT_TRUE(check_shard_update(cur, u).ok());
}

namespace {
BrokerInfo live_broker(std::uint32_t id, bool live = true) {
  BrokerInfo b;
  b.id = NodeId{id};
  b.directory_id = "dir-" + std::to_string(id);
  b.features = {"stream_incarnations"};
  b.live = live;
  return b;
}
}  // namespace

TEST(CatalogRules, PlaceReplicasPicksDistinctLiveBrokersLeaderFirst) {
  const StreamKey key{"t", "n", "s"};
  std::vector<BrokerInfo> brokers{live_broker(3), live_broker(1), live_broker(2, false),
                                  live_broker(5), live_broker(4)};
  auto p = place_replicas(key, 8, 3, brokers, {});
  ASSERT_TRUE(p.ok()) << p.error().to_string();
  ASSERT_EQ(p->size(), 8u);
  std::map<std::uint32_t, int> leaders, copies;
  for (const auto& shard : *p) {
    ASSERT_EQ(shard.size(), 3u);
    std::set<NodeId> distinct(shard.begin(), shard.end());
    EXPECT_EQ(distinct.size(), 3u);
    EXPECT_EQ(distinct.count(NodeId{2}), 0u) << "a broker that is not live holds no copy";
    ++leaders[shard.front().value()];
    for (auto b : shard) ++copies[b.value()];
  }
  // 8 shards over 4 live brokers: 2 leaders and 6 copies each.
  for (std::uint32_t id : {1u, 3u, 4u, 5u}) {
    EXPECT_EQ(leaders[id], 2) << id;
    EXPECT_EQ(copies[id], 6) << id;
  }
  // Deterministic, whatever order the brokers come in.
  std::reverse(brokers.begin(), brokers.end());
  auto again = place_replicas(key, 8, 3, brokers, {});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *p);
}

TEST(CatalogRules, PlaceReplicasNeedsEnoughLiveAdmittedBrokers) {
  const StreamKey key{"t", "n", "s"};
  std::vector<BrokerInfo> brokers{live_broker(1), live_broker(2), live_broker(3, false)};
  auto p = place_replicas(key, 1, 3, brokers, {});
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.error().code, Errc::not_enough_replicas);
  EXPECT_EQ(http_status(p.error().code), 503);
  EXPECT_NE(p.error().message.find("needs 3 live brokers, 2 are live"), std::string::npos)
      << p.error().message;
  // A broker that lacks a finalized feature is no candidate.
  brokers[2].live = true;
  EXPECT_TRUE(place_replicas(key, 1, 3, brokers, {}).ok());
  brokers[2].features.clear();
  auto refused = place_replicas(key, 1, 3, brokers, {"stream_incarnations"});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, Errc::not_enough_replicas);
}

TEST(CatalogRules, NewShardsStartWithTheirReplicaState) {
  std::vector<BrokerInfo> brokers{live_broker(1), live_broker(2), live_broker(3)};
  Assignment a;
  a.key = StreamKey{"t", "n", "s"};
  a.replicas = {NodeId{2}, NodeId{3}, NodeId{1}};
  ASSERT_TRUE(start_replicated_shard(a, brokers).ok());
  EXPECT_EQ(a.leader, NodeId{2});
  EXPECT_EQ(a.leader_epoch, LeaderEpoch{1});
  EXPECT_EQ(a.version, ShardVersion{1});
  ASSERT_EQ(a.in_sync.size(), 3u);
  EXPECT_EQ(a.in_sync[0], (InSyncReplica{NodeId{2}, "dir-2"}));
  EXPECT_EQ(a.in_sync[2], (InSyncReplica{NodeId{1}, "dir-1"}));
  Assignment one;
  one.leader = NodeId{1};
  one.replicas = {NodeId{1}};
  ASSERT_TRUE(start_replicated_shard(one, brokers).ok());
  EXPECT_EQ(one.leader_epoch, LeaderEpoch{0});
  EXPECT_EQ(one.version, ShardVersion{0});
  EXPECT_TRUE(one.in_sync.empty());
  Assignment gone = a;
  gone.replicas = {NodeId{2}, NodeId{7}};
  auto r = start_replicated_shard(gone, brokers);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::not_enough_replicas);
}

TEST(CatalogRules, ReplicatedShardsIsAFleetFeatureAtLevel16) {
  const auto* f = find_feature(kReplicatedShards);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->required_level, kReplicatedShardsLevel);
  auto g = check_finalize(kReplicatedShards, MetadataLevel{14}, {});
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.error().code, Errc::conflict);
  EXPECT_TRUE(check_finalize(kReplicatedShards, MetadataLevel{16}, {}).ok());
}

TEST(CatalogRules, ShardReassignmentIsAFleetFeatureAtLevel17) {
  const auto* f = find_feature(kShardReassignment);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->required_level, kShardReassignmentLevel);
  auto g = check_finalize(kShardReassignment, MetadataLevel{16}, {});
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.error().code, Errc::conflict);
  EXPECT_TRUE(check_finalize(kShardReassignment, MetadataLevel{17}, {}).ok());
}

TEST(CatalogRules, CountersAreAFleetFeatureAtLevel18) {
  const auto* f = find_feature(kCounters);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->required_level, kCountersLevel);
  EXPECT_EQ(kCountersLevel, MetadataLevel{18});
  // Level 19 (raft-meta batch entries) is this build's level and adds no fleet feature.
  EXPECT_EQ(kBatchedEntriesLevel, MetadataLevel{19});
  EXPECT_EQ(kBuildMetadataLevel, MetadataLevel{19});
  for (auto& feat : known_features()) EXPECT_LE(feat.required_level, kCountersLevel) << feat.name;
  auto g = check_finalize(kCounters, MetadataLevel{17}, {});
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.error().code, Errc::conflict);
  EXPECT_TRUE(check_finalize(kCounters, MetadataLevel{18}, {}).ok());
}

TEST(Partitioner, StableAndInRange) {
  for (std::uint32_t n : {1u, 4u, 7u})
    for (const char* k : {"a", "b", "user-17"}) {
      EXPECT_LT(core::shard_for_key(k, n), n);
      EXPECT_EQ(core::shard_for_key(k, n), core::shard_for_key(k, n));
    }
  // Pinned: changing the hash silently re-routes every keyed stream.
  EXPECT_EQ(core::fnv1a64("user-17"), core::fnv1a64("user-17"));
  EXPECT_EQ(core::shard_for_key("orders", 4), core::fnv1a64("orders") % 4);
}

namespace {
std::string write_tmp(const std::string& dir, const std::string& text) {
  const std::string p = dir + "/sluiced.properties";
  std::ofstream(p) << text;
  return p;
}
}  // namespace

TEST(Config, DefaultsFileAndOverrides) {
  sluice::testing::TestHost tmp;
  auto f = write_tmp(tmp.data_dir(), "# comment\nhttp.port = 9000\nstorage.segment_bytes=1024\n");
  auto c = core::Config::load(f, {"http.port=9001"});
  EXPECT_EQ(c.get_int("http.port", 0), 9001);
  EXPECT_EQ(c.get_int("storage.segment_bytes", 0), 1024);
  EXPECT_EQ(c.get_string("data.dir", ""), "./data");  // documented default
  EXPECT_EQ(c.get_string("http.address", ""), "127.0.0.1");
}

TEST(Config, UnknownKeyIsAnError) {
  sluice::testing::TestHost tmp;
  auto f = write_tmp(tmp.data_dir(), "http.prot = 9000\n");
  try {
    core::Config::load(f, {});
    FAIL() << "accepted a typo";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown configuration key 'http.prot'"), std::string::npos);
  }
  EXPECT_NO_THROW(core::Config::load("", {"plugins.acme.speed=3"}));  // third-party namespace
  EXPECT_THROW(core::Config::load("", {"novalue"}), std::runtime_error);
}

TEST(Config, BadTypesNameTheKey) {
  auto c = core::Config::load("", {"http.port=eighty", "storage.repair=maybe"});
  try {
    c.get_int("http.port", 0);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("http.port"), std::string::npos);
  }
  EXPECT_THROW(c.get_bool("storage.repair", false), std::invalid_argument);
}

TEST(Config, MissingFileIsAnError) {
  EXPECT_THROW(core::Config::load("/nonexistent/sluiced.properties", {}), std::runtime_error);
}

// --print-config never shows the catalog database's password (docs/security.md).
TEST(Config, PrintConfigRedactsThePostgresPassword) {
  EXPECT_EQ(core::redact_conninfo("postgresql://u:s3cret@h:5432/db"), "postgresql://u:***@h:5432/db");
  EXPECT_EQ(core::redact_conninfo("postgres://u:p%40ss@h/db?sslmode=require&password=x2"),
            "postgres://u:***@h/db?sslmode=require&password=***");
  EXPECT_EQ(core::redact_conninfo("host=h password=s3cret user=u"), "host=h password=*** user=u");
  EXPECT_EQ(core::redact_conninfo("host=h password='a b c' user=u"), "host=h password=*** user=u");
  EXPECT_EQ(core::redact_conninfo("host=h user=u"), "host=h user=u");
  EXPECT_EQ(core::redact_conninfo("postgresql://u@h/db"), "postgresql://u@h/db");
  auto c = core::Config::load("", {"metadata.postgres.url=host=h password=s3cret", "metadata.backend=postgres"});
  const auto eff = c.effective();
  EXPECT_EQ(eff.at("metadata.postgres.url"), "host=h password=***");
  EXPECT_EQ(c.get_string("metadata.postgres.url", ""), "host=h password=s3cret");  // the plugin gets it whole
}

TEST(Identity, FormatsOnceAndKeepsDirectoryId) {
  sluice::testing::TestHost tmp;
  const std::string dir = tmp.data_dir() + "/d";
  std::string dirid;
  {
    auto id = core::DataDirIdentity::open_or_format(dir, NodeId{3});
    EXPECT_TRUE(id.freshly_formatted());
    dirid = id.directory_id();
    EXPECT_EQ(dirid.size(), 36u);
    EXPECT_TRUE(id.cluster_id().empty());
  }
  auto again = core::DataDirIdentity::open_or_format(dir, NodeId{3});
  EXPECT_FALSE(again.freshly_formatted());
  EXPECT_EQ(again.directory_id(), dirid);
}

TEST(Identity, NodeIdMismatchRefused) {
  sluice::testing::TestHost tmp;
  const std::string dir = tmp.data_dir() + "/d";
  core::DataDirIdentity::open_or_format(dir, NodeId{1});
  try {
    core::DataDirIdentity::open_or_format(dir, NodeId{2});
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("belongs to node.id 1"), std::string::npos) << e.what();
  }
}

TEST(Identity, ClusterIdPersistedBeforeUseAndNeverChanges) {
  sluice::testing::TestHost tmp;
  const std::string dir = tmp.data_dir() + "/d";
  const std::string a = sluice::random_uuid_v4(), b = sluice::random_uuid_v4();
  {
    auto id = core::DataDirIdentity::open_or_format(dir, NodeId{1});
    ASSERT_TRUE(id.adopt_cluster_id(a).ok());
  }
  // Persisted: a fresh open sees it.
  auto id = core::DataDirIdentity::open_or_format(dir, NodeId{1});
  EXPECT_EQ(id.cluster_id(), a);
  EXPECT_TRUE(id.adopt_cluster_id(a).ok());
  auto r = id.adopt_cluster_id(b);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::cluster_id_mismatch);
  EXPECT_NE(r.error().message.find(a), std::string::npos);
  EXPECT_NE(r.error().message.find(b), std::string::npos);
  EXPECT_EQ(core::DataDirIdentity::open_or_format(dir, NodeId{1}).cluster_id(), a);
}

// Seed kafka-15495 through storage.dir: the shard copies may live on a disk of their own.
// Replaced or wiped, that disk comes back empty while meta.properties keeps the directory.id
// the catalog records beside its replicas; the broker must come back as a new replica.
namespace {
std::string start_with(const std::string& dir, const std::string& storage, std::string* id_out,
                       bool configured = true) {
  auto id = core::DataDirIdentity::open_or_format(dir, NodeId{1});
  std::string what = id.bind_storage_dir(storage, configured);
  id.commit_storage_dir();
  if (id_out) *id_out = id.directory_id();
  return what;
}
}  // namespace

TEST(Identity, AStorageDirThatLostItsCopiesGetsANewDirectoryId) {
  sluice::testing::TestHost tmp;
  const std::string dir = tmp.data_dir() + "/d", storage = tmp.data_dir() + "/disk2";
  std::string first, again, second, third;
  EXPECT_EQ(start_with(dir, storage, &first), "");  // a new data.dir: nothing lost
  EXPECT_TRUE(std::filesystem::exists(storage + "/storage.properties"));
  std::filesystem::create_directories(storage + "/t/n/s");
  EXPECT_EQ(start_with(dir, storage, &again), "");
  EXPECT_EQ(again, first) << "a storage.dir that kept its copies changed the id";
  std::filesystem::remove_all(storage);
  std::filesystem::create_directories(storage + "/lost+found");  // a freshly made file system
  // `rm -rf storage.dir/*` leaves fs-storage's marks of the old copies: they go with the id.
  std::filesystem::create_directories(storage + "/.replicas/t/n/s");
  const std::string what = start_with(dir, storage, &second);
  EXPECT_NE(second, first) << "empty shard copies kept the directory.id the catalog records";
  EXPECT_NE(what.find("shard copies are gone"), std::string::npos) << what;
  EXPECT_FALSE(std::filesystem::exists(storage + "/.replicas")) << "the old copies' marks outlived them";
  // Persisted in meta.properties, and the marker names it.
  EXPECT_EQ(start_with(dir, storage, &third), "");
  EXPECT_EQ(third, second);
  // The default storage.dir gone altogether (`rm -rf data/shards`): a new id, and the start
  // stands (it once failed syncing the directory it had not created yet).
  std::string fourth, fifth;
  start_with(dir, storage, &fourth, /*configured=*/false);
  std::filesystem::create_directories(storage + "/t/n/s");
  std::filesystem::remove_all(storage);
  EXPECT_NO_THROW(start_with(dir, storage, &fifth, /*configured=*/false));
  EXPECT_NE(fifth, fourth);
}

// Review: a configured storage.dir that does not exist is a disk not mounted (or a typo),
// refused with the id untouched. And once a marker was written, copies without one (a disk
// from before a replacement, mounted again) are refused, not adopted under the new id.
TEST(Identity, AMissingConfiguredStorageDirAndUnmarkedCopiesAfterAMarkAreRefused) {
  sluice::testing::TestHost tmp;
  const std::string dir = tmp.data_dir() + "/d", storage = tmp.data_dir() + "/disk2";
  std::string first;
  start_with(dir, storage, &first);
  std::filesystem::remove_all(storage);
  try {
    start_with(dir, storage, nullptr);
    FAIL() << "a configured storage.dir that does not exist was taken for a lost disk";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("is its disk mounted"), std::string::npos) << e.what();
  }
  EXPECT_EQ(core::DataDirIdentity::open_or_format(dir, NodeId{1}).directory_id(), first)
      << "a refused start changed the id";
  // The old disk comes back without its marker but with copies: not adopted.
  std::filesystem::create_directories(storage + "/t/n/s");
  EXPECT_THROW(start_with(dir, storage, nullptr), std::runtime_error);
  auto again = core::DataDirIdentity::open_or_format(dir, NodeId{1});
  EXPECT_EQ(again.directory_id(), first);
}

// Review: `rm -rf storage.dir/*` leaves fs-storage's dotfiles (.clean-shutdown, .deleted)
// and removes the marker; those hold no copy. And an unreadable storage.dir, or a file in
// its place, is an error that leaves the id alone.
TEST(Identity, AStorageDirWithOnlyBookkeepingLeftHasNoCopiesAndBadOnesAreErrors) {
  sluice::testing::TestHost tmp;
  const std::string dir = tmp.data_dir() + "/d", storage = tmp.data_dir() + "/s";
  std::string first, second;
  start_with(dir, storage, &first);
  std::filesystem::remove(storage + "/storage.properties");
  std::ofstream(storage + "/.clean-shutdown") << "";
  std::filesystem::create_directories(storage + "/.deleted");
  start_with(dir, storage, &second);
  EXPECT_NE(second, first) << "bookkeeping files were taken for shard copies";
  auto id = core::DataDirIdentity::open_or_format(dir, NodeId{1});
  std::ofstream(tmp.data_dir() + "/file") << "x";
  EXPECT_THROW(id.bind_storage_dir(tmp.data_dir() + "/file", true), std::runtime_error);
  EXPECT_EQ(id.directory_id(), second);
  if (::geteuid() != 0) {  // root reads anything
    std::filesystem::permissions(storage, std::filesystem::perms::none);
    EXPECT_THROW(id.bind_storage_dir(storage, true), std::runtime_error);
    std::filesystem::permissions(storage, std::filesystem::perms::owner_all);
    EXPECT_EQ(id.directory_id(), second);
  }
}

TEST(Identity, AStorageDirOfAnOlderBuildIsAdoptedAndAnotherDirectorysIsRefused) {
  sluice::testing::TestHost tmp;
  const std::string a = tmp.data_dir() + "/a", b = tmp.data_dir() + "/b", storage = tmp.data_dir() + "/s";
  std::string id_a;
  {
    auto id = core::DataDirIdentity::open_or_format(a, NodeId{1});
    id_a = id.directory_id();
  }
  // Shard copies written by a build without the marker: kept, same id.
  std::filesystem::create_directories(storage + "/t");
  {
    auto id = core::DataDirIdentity::open_or_format(a, NodeId{1});
    EXPECT_NE(id.bind_storage_dir(storage, true).find("older build"), std::string::npos);
    id.commit_storage_dir();
    EXPECT_EQ(id.directory_id(), id_a);
  }
  // Another node's data.dir pointed at the same storage.dir: refused, naming both ids.
  auto other = core::DataDirIdentity::open_or_format(b, NodeId{2});
  try {
    other.bind_storage_dir(storage, true);
    FAIL() << "a storage.dir holding another directory's copies was taken";
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(id_a), std::string::npos) << m;
    EXPECT_NE(m.find(other.directory_id()), std::string::npos) << m;
  }
}

TEST(Identity, MalformedMetaPropertiesRefused) {
  sluice::testing::TestHost tmp;
  const std::string dir = tmp.data_dir() + "/d";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/meta.properties") << "version=1\nnode.id=1\ndirectory.id=nope\n";
  EXPECT_THROW(core::DataDirIdentity::open_or_format(dir, NodeId{1}), std::runtime_error);
}

// Regression: NodeHost answered an absent key with the documented default of
// core/config_keys.cc instead of the caller's `def`, against sluice/host.h.
TEST(NodeHost, AbsentKeyGivesTheCallersDefault) {
  sluice::testing::TestHost tmp;
  auto id = core::DataDirIdentity::open_or_format(tmp.data_dir() + "/d", NodeId{1});
  auto cfg = core::Config::load("", {"http.threads=7"});
  core::NodeHost host(cfg, id);
  // Documented defaults: http.address 127.0.0.1, http.port 8080, storage.repair false.
  EXPECT_EQ(host.config_string("http.address", "0.0.0.0"), "0.0.0.0");
  EXPECT_EQ(host.config_int("http.port", 1234), 1234);
  EXPECT_TRUE(host.config_bool("storage.repair", true));
  EXPECT_EQ(host.config_string("plugins.acme.speed", "fast"), "fast");
  // A configured key wins, and a bad value still names the key.
  EXPECT_EQ(host.config_int("http.threads", 2), 7);
  auto bad = core::Config::load("", {"http.port=eighty"});
  core::NodeHost bad_host(bad, id);
  EXPECT_THROW(bad_host.config_int("http.port", 8080), std::invalid_argument);
}

TEST(LogLevel, ParsesTheFourLevelsAndRefusesOthers) {
  EXPECT_EQ(parse_log_level("debug").value(), LogLevel::debug);
  EXPECT_EQ(parse_log_level("info").value(), LogLevel::info);
  EXPECT_EQ(parse_log_level("warn").value(), LogLevel::warn);
  EXPECT_EQ(parse_log_level("error").value(), LogLevel::error);
  auto r = parse_log_level("verbose");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::invalid_argument);
  EXPECT_NE(r.error().message.find("verbose"), std::string::npos);
}

TEST(LogLevel, HostDropsLinesBelowTheThreshold) {
  sluice::testing::TestHost tmp;
  auto id = core::DataDirIdentity::open_or_format(tmp.data_dir() + "/d", NodeId{1});
  auto cfg = core::Config::load("", {});
  core::NodeHost host(cfg, id);
  const LogLevel saved = log_threshold();
  EXPECT_EQ(saved, LogLevel::info);  // the default
  set_log_threshold(LogLevel::warn);
  ::testing::internal::CaptureStderr();
  host.log(LogLevel::debug, "t", "debug-line");
  host.log(LogLevel::info, "t", "info-line");
  host.log(LogLevel::warn, "t", "warn-line");
  log_line(LogLevel::info, "t", "direct-info-line");
  log_line(LogLevel::error, "t", "direct-error-line");
  const std::string out = ::testing::internal::GetCapturedStderr();
  set_log_threshold(saved);
  EXPECT_EQ(out.find("debug-line"), std::string::npos) << out;
  EXPECT_EQ(out.find("info-line"), std::string::npos) << out;
  EXPECT_NE(out.find("WARN t: warn-line"), std::string::npos) << out;
  EXPECT_EQ(out.find("direct-info-line"), std::string::npos) << out;
  EXPECT_NE(out.find("ERROR t: direct-error-line"), std::string::npos) << out;
}

TEST(FreshPaths, NotesTheOutermostMissingComponentAndUndoesIt) {
  sluice::testing::TestHost tmp;
  const std::string root = tmp.data_dir();
  std::filesystem::create_directories(root + "/exists");
  core::FreshPaths fresh;
  fresh.note(root + "/exists");             // exists: nothing to undo
  fresh.note(root + "/a/b/data");           // a is the outermost new directory
  fresh.note(root + "/a/b/data/meta.properties");  // inside a: already covered
  fresh.note(root + "/exists/raft");
  EXPECT_EQ(fresh.paths(), (std::vector<std::string>{root + "/a/b/data", root + "/a/b/data/meta.properties",
                                                      root + "/exists/raft"}));
  std::filesystem::create_directories(root + "/a/b/data");
  std::ofstream(root + "/a/b/data/meta.properties") << "x";
  ASSERT_TRUE(fresh.undo().ok());
  EXPECT_FALSE(std::filesystem::exists(root + "/a"));
  EXPECT_FALSE(std::filesystem::exists(root + "/exists/raft"));  // never created: no-op
  EXPECT_TRUE(std::filesystem::exists(root + "/exists"));
  EXPECT_TRUE(fresh.paths().empty());
}

// Review finding: the outermost missing ancestor can be a parent another node shares
// (data.dir = /srv/sluice/n1 and /srv/sluice/n2). A refused start removes its own
// directory, and the shared parent only while it is empty.
TEST(FreshPaths, NeverRemovesASharedParentThatAnotherNodeFilledMeanwhile) {
  sluice::testing::TestHost tmp;
  const std::string root = tmp.data_dir();
  core::FreshPaths fresh;
  fresh.note(root + "/srv/n1");  // srv is missing too
  std::filesystem::create_directories(root + "/srv/n1");
  std::filesystem::create_directories(root + "/srv/n2");  // another node, started meanwhile
  std::ofstream(root + "/srv/n2/acknowledged") << "records";
  ASSERT_TRUE(fresh.undo().ok());
  EXPECT_FALSE(std::filesystem::exists(root + "/srv/n1"));
  EXPECT_TRUE(std::filesystem::exists(root + "/srv/n2/acknowledged"));

  core::FreshPaths alone;
  alone.note(root + "/only/n1");
  std::filesystem::create_directories(root + "/only/n1");
  ASSERT_TRUE(alone.undo().ok());
  EXPECT_FALSE(std::filesystem::exists(root + "/only"));  // empty, and created by this start
}

TEST(CatalogRules, ALeaderMoveRaisesTheEpochAndNeedsAnInSyncTarget) {
  auto cur = replicated_shard();
  const auto leader = cur.leader;
  NodeId target{0};
  for (auto m : cur.in_sync)
    if (m.broker != leader) target = m.broker;
  ASSERT_NE(target.value(), 0u);
  auto u = plan_leader_move(cur, target);
  ASSERT_TRUE(u.ok()) << u.error().message;
  EXPECT_EQ(u->leader, target);
  EXPECT_EQ(u->leader_epoch.value(), cur.leader_epoch.value() + 1);
  EXPECT_EQ(u->expected_version, cur.version);
  EXPECT_EQ(u->in_sync, cur.in_sync);
  EXPECT_TRUE(check_shard_update(cur, *u).ok());  // what the backends will apply
  auto r = plan_leader_move(cur, NodeId{0});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::invalid_argument);
  r = plan_leader_move(cur, NodeId{99});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::invalid_argument);
  r = plan_leader_move(cur, leader);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::conflict);
  // A replica outside the in-sync set may lack acknowledged records: not a move.
  cur.in_sync.erase(std::remove_if(cur.in_sync.begin(), cur.in_sync.end(),
                                   [&](const InSyncReplica& m) { return m.broker == target; }),
                    cur.in_sync.end());
  r = plan_leader_move(cur, target);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::conflict);
  EXPECT_NE(r.error().message.find("in-sync"), std::string::npos);
}

namespace {
std::vector<BrokerInfo> brokers_of(std::initializer_list<std::tuple<std::uint32_t, const char*, bool>> l) {
  std::vector<BrokerInfo> out;
  for (const auto& [id, dir, live] : l) {
    BrokerInfo b;
    b.id = NodeId{id};
    b.directory_id = dir;
    b.live = live;
    out.push_back(b);
  }
  return out;
}
}  // namespace

TEST(CatalogRules, FailoverKeepsAnEligibleLeaderAndElectsTheFirstEligibleInSyncReplica) {
  auto cur = replicated_shard();
  EXPECT_FALSE(plan_failover(cur, 2, brokers_of({{1, "d1", true}, {2, "d2", true}, {3, "d3", true}})).change);
  // Leader 1 is down: broker 2 (first in the replica list after it) leads; 1 leaves the set.
  auto p = plan_failover(cur, 2, brokers_of({{1, "d1", false}, {2, "d2", true}, {3, "d3", true}}));
  ASSERT_TRUE(p.change);
  EXPECT_EQ(p.update.leader, NodeId{2});
  EXPECT_EQ(p.update.leader_epoch.value(), cur.leader_epoch.value() + 1);
  EXPECT_EQ(p.update.expected_version, cur.version);
  EXPECT_EQ(p.update.in_sync, (std::vector<InSyncReplica>{{NodeId{2}, "d2"}, {NodeId{3}, "d3"}}));
  EXPECT_TRUE(check_shard_update(cur, p.update).ok()) << p.why;
  // Never below min_insync: with min_insync 3 the dead leader stays recorded.
  p = plan_failover(cur, 3, brokers_of({{1, "d1", false}, {2, "d2", true}, {3, "d3", true}}));
  ASSERT_TRUE(p.change);
  EXPECT_EQ(p.update.in_sync.size(), 3u);
  // Seed kafka-15495: broker 2 is live but came back with a new directory: not eligible.
  p = plan_failover(cur, 2, brokers_of({{1, "d1", false}, {2, "d2-new", true}, {3, "d3", true}}));
  ASSERT_TRUE(p.change);
  EXPECT_EQ(p.update.leader, NodeId{3});
}

TEST(CatalogRules, WithNoEligibleReplicaTheShardHasNoLeaderAndSaysWhy) {
  auto cur = replicated_shard();
  cur.in_sync = {{NodeId{1}, "d1"}};  // shrunk to the leader (min_insync 1)
  // The leader came back with an empty disk: it must not lead, and nobody else may.
  auto brokers = brokers_of({{1, "d1-new", true}, {2, "d2", true}, {3, "d3", true}});
  auto p = plan_failover(cur, 1, brokers);
  ASSERT_TRUE(p.change);
  EXPECT_EQ(p.update.leader, NodeId{0});
  EXPECT_EQ(p.update.leader_epoch.value(), cur.leader_epoch.value() + 1) << "a returning leader is fenced";
  EXPECT_EQ(p.update.in_sync, cur.in_sync);
  EXPECT_TRUE(check_shard_update(cur, p.update).ok());
  Assignment after = cur;
  after.leader = NodeId{0};
  after.leader_epoch = p.update.leader_epoch;
  const auto why = unavailable_reason(after, brokers);
  EXPECT_NE(why.find("the only in-sync replica, broker 1, came back with a new directory"), std::string::npos) << why;
  EXPECT_EQ(unavailable_reason(cur, brokers), "") << "a shard with a leader has no reason";
  EXPECT_FALSE(plan_failover(after, 1, brokers).change) << "leaderless stays leaderless";
  // The recorded replica returns with its own directory: it is elected.
  p = plan_failover(after, 1, brokers_of({{1, "d1", true}, {2, "d2", true}}));
  ASSERT_TRUE(p.change);
  EXPECT_EQ(p.update.leader, NodeId{1});
}

TEST(CatalogRules, AnUncleanElectionNeedsALiveReplicaAndAShardWithoutAnEligibleLeader) {
  auto cur = replicated_shard();
  cur.leader = NodeId{0};
  cur.in_sync = {{NodeId{1}, "d1"}};
  auto brokers = brokers_of({{1, "d1-new", true}, {2, "d2", true}, {3, "d3", false}});
  auto u = plan_unclean_election(cur, NodeId{2}, brokers);
  ASSERT_TRUE(u.ok()) << u.error().message;
  EXPECT_EQ(u->leader, NodeId{2});
  EXPECT_EQ(u->in_sync, (std::vector<InSyncReplica>{{NodeId{2}, "d2"}}));
  EXPECT_EQ(u->leader_epoch.value(), cur.leader_epoch.value() + 1);
  EXPECT_TRUE(check_shard_update(cur, *u).ok());
  auto r = plan_unclean_election(cur, NodeId{9}, brokers);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::invalid_argument) << "not a replica";
  r = plan_unclean_election(cur, NodeId{3}, brokers);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::conflict) << "a dead broker";
  auto healthy = replicated_shard();
  r = plan_unclean_election(healthy, NodeId{2}, brokers_of({{1, "d1", true}, {2, "d2", true}}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::conflict) << "a shard with an eligible leader";
}

TEST(CatalogRules, APreferredElectionNeedsTheFirstReplicaEligibleAndInSync) {
  auto cur = replicated_shard();
  cur.leader = NodeId{2};
  auto all = brokers_of({{1, "d1", true}, {2, "d2", true}, {3, "d3", true}});
  auto u = plan_preferred_election(cur, all);
  ASSERT_TRUE(u.ok()) << u.error().message;
  EXPECT_EQ(u->leader, NodeId{1});
  EXPECT_EQ(u->in_sync, cur.in_sync);
  EXPECT_TRUE(check_shard_update(cur, *u).ok());
  auto r = plan_preferred_election(cur, brokers_of({{1, "d1-new", true}, {2, "d2", true}}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::conflict) << "a new directory is not eligible";
  cur.in_sync.erase(cur.in_sync.begin());
  r = plan_preferred_election(cur, all);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::conflict) << "not in sync";
  r = plan_preferred_election(replicated_shard(), all);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::conflict) << "already leads";
}
