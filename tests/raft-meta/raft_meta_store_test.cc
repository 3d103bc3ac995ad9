// RaftMetaStore with a real libuv raft in a temporary directory.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "raft_meta_store.h"
#include "test_host.h"
#include "sluice/levels.h"

namespace sluice::raft_meta {
namespace {

using sluice::testing::TestHost;
namespace fs = std::filesystem;

constexpr auto kPatience = std::chrono::seconds(20);

// Polls `pred` until it holds or kPatience passes (no sleeps as assertions).
template <class Pred>
bool eventually(Pred pred) {
  auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return pred();
}

std::map<std::string, std::string> base_config() {
  // Port 0: libraft's TCP transport binds an ephemeral port. A single member never dials
  // itself, so the advertised address does not have to be reachable.
  return {{"raft.address", "127.0.0.1:0"}, {"metadata.rpc_address", "127.0.0.1:0"}, {"metadata.timeout_ms", "20000"}};
}

StreamSpec spec(std::uint32_t shards = 1) {
  StreamSpec s;
  s.shards = shards;
  return s;
}

// Completed snapshots: libraft writes the data file first and its `.meta` file last.
std::vector<fs::path> snapshot_files(const fs::path& dir) {
  std::vector<fs::path> out;
  for (auto& e : fs::directory_iterator(dir)) {
    auto name = e.path().filename().string();
    if (name.rfind("snapshot-", 0) == 0 && e.path().extension() == ".meta") {
      fs::path data = e.path();
      data.replace_extension();
      if (fs::exists(data)) out.push_back(data);
    }
  }
  return out;
}

TEST(RaftMetaStore, StartsAdoptsClusterIdAndRecoversAfterRestart) {
  TestHost host(base_config());
  std::string cluster;
  StreamInfo created;
  std::uint64_t hash = 0;
  {
    RaftMetaStore store(host);
    EXPECT_FALSE(store.status().ready);
    ASSERT_TRUE(store.start().ok());
    auto st = store.status();
    EXPECT_TRUE(st.ready);
    EXPECT_EQ(st.backend, "raft");
    EXPECT_EQ(st.detail, "leader");
    EXPECT_EQ(st.level, kBuildMetadataLevel);
    cluster = st.cluster_id;
    EXPECT_EQ(cluster.size(), 36u);
    EXPECT_EQ(cluster[14], '4');  // UUID v4
    EXPECT_EQ(host.cluster_id(), cluster);

    ASSERT_TRUE(store.create_tenant("acme").ok());
    auto ns = store.create_namespace("acme", "prod");
    ASSERT_TRUE(ns.ok());
    auto s = store.create_stream({"acme", "prod", "orders"}, spec(3));
    ASSERT_TRUE(s.ok()) << s.error().to_string();
    created = s.value();
    // A new cluster finalizes stream_incarnations at bootstrap: a real incarnation.
    EXPECT_NE(created.incarnation, Incarnation{0});
    EXPECT_GT(created.created_seq, ns->created_seq);
    EXPECT_GT(created.created_at_us, 0);
    EXPECT_EQ(store.create_stream({"acme", "prod", "orders"}, spec()).error().code,
              Errc::already_exists);
    EXPECT_EQ(store.create_namespace("nobody", "x").error().code, Errc::not_found);
    EXPECT_EQ(store.create_tenant("bad name").error().code, Errc::invalid_name);
    EXPECT_EQ(store.delete_tenant("acme").error().code, Errc::conflict);
    EXPECT_GE(store.status().applied, created.created_seq);
    hash = store.state_hash();
    store.stop();
    EXPECT_FALSE(store.status().ready);
    EXPECT_EQ(store.create_tenant("late").error().code, Errc::unavailable);
  }
  {
    RaftMetaStore store(host);
    ASSERT_TRUE(store.start().ok());
    EXPECT_EQ(store.status().cluster_id, cluster);
    EXPECT_EQ(store.state_hash(), hash);
    auto got = store.get_stream({"acme", "prod", "orders"});
    ASSERT_TRUE(got.ok()) << got.error().to_string();
    EXPECT_EQ(got->created_seq, created.created_seq);
    EXPECT_EQ(got->spec, spec(3));
    EXPECT_EQ(store.list_tenants()->size(), 1u);
    auto snap = store.snapshot();
    ASSERT_TRUE(snap.ok());
    EXPECT_EQ(snap->streams.size(), 1u);
    EXPECT_GE(snap->seq, created.created_seq);
    // Still writable after the restart.
    ASSERT_TRUE(store.delete_stream({"acme", "prod", "orders"}).ok());
    EXPECT_EQ(store.get_stream({"acme", "prod", "orders"}).error().code, Errc::not_found);
  }
}

TEST(RaftMetaStore, RestartRestoresFromSnapshotPlusLog) {
  TestHost host(base_config());
  host.set("raft.snapshot_threshold", "8");
  host.set("raft.snapshot_trailing", "2");
  std::uint64_t hash = 0;
  std::string cluster;
  {
    RaftMetaStore store(host);
    ASSERT_TRUE(store.start().ok());
    cluster = store.status().cluster_id;
    ASSERT_TRUE(store.create_tenant("acme").ok());
    ASSERT_TRUE(store.create_namespace("acme", "prod").ok());
    for (int i = 0; i < 100; ++i) {
      StreamKey k{"acme", "prod", "s" + std::to_string(i % 40)};
      if (i < 40) {
        ASSERT_TRUE(store.create_stream(k, spec(1 + i % 4)).ok()) << i;
      } else if (i < 70) {
        ASSERT_TRUE(store.delete_stream(k).ok()) << i;
      } else {
        ASSERT_TRUE(store.create_tenant("t" + std::to_string(i)).ok()) << i;
      }
    }
    EXPECT_TRUE(eventually([&] { return !snapshot_files(host.data_dir() + "/raft").empty(); }));
    // One more entry after the last snapshot, so the restart replays log on top of it.
    ASSERT_TRUE(store.create_tenant("after-snapshot").ok());
    hash = store.state_hash();
  }
  {
    RaftMetaStore store(host);
    ASSERT_TRUE(store.start().ok());
    EXPECT_EQ(store.status().cluster_id, cluster);
    EXPECT_EQ(store.state_hash(), hash);
    EXPECT_EQ(store.list_streams("acme", "prod")->size(), 10u);
    EXPECT_EQ(store.list_tenants()->size(), 1u + 30u + 1u);
    EXPECT_TRUE(store.get_stream({"acme", "prod", "s35"}).ok());
    EXPECT_EQ(store.get_stream({"acme", "prod", "s5"}).error().code, Errc::not_found);
  }
}

TEST(RaftMetaStore, SnapshotFileIsTheSqliteDatabaseVerbatim) {
  TestHost host(base_config());
  host.set("raft.snapshot_threshold", "4");
  host.set("raft.snapshot_trailing", "1");
  RaftMetaStore store(host);
  ASSERT_TRUE(store.start().ok());
  for (int i = 0; i < 12; ++i) ASSERT_TRUE(store.create_tenant("t" + std::to_string(i)).ok());
  fs::path dir = fs::path(host.data_dir()) / "raft";
  ASSERT_TRUE(eventually([&] { return !snapshot_files(dir).empty(); }));
  store.stop();  // no snapshot is written or removed while we read
  ASSERT_FALSE(snapshot_files(dir).empty());
  for (auto& p : snapshot_files(dir)) {
    std::ifstream in(p, std::ios::binary);
    std::string head(16, '\0');
    in.read(head.data(), 16);
    EXPECT_EQ(head.substr(0, 15), "SQLite format 3") << p;
  }
}

TEST(RaftMetaStore, DirectoryOfAnotherClusterIsRefused) {
  // Case 1: the host already belongs to a cluster, the raft directory is fresh: the
  // member lost its log, and is refused before libraft bootstraps a second group.
  {
    TestHost host(base_config());
    ASSERT_TRUE(host.adopt_cluster_id("aaaaaaaa-0000-4000-8000-000000000000").ok());
    RaftMetaStore store(host);
    auto r = store.start();
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, Errc::cluster_id_mismatch);
    EXPECT_NE(r.error().message.find("aaaaaaaa-0000-4000-8000-000000000000"), std::string::npos)
        << r.error().message;
    EXPECT_NE(r.error().message.find("lost its log"), std::string::npos) << r.error().message;
    EXPECT_FALSE(std::filesystem::exists(host.data_dir() + "/raft/metadata1"));
    EXPECT_FALSE(store.status().ready);
    EXPECT_EQ(store.create_tenant("acme").error().code, Errc::unavailable);
  }
  // Case 2: a raft directory of cluster X given to a node of cluster Y.
  TestHost first(base_config());
  std::string x;
  {
    RaftMetaStore store(first);
    ASSERT_TRUE(store.start().ok());
    x = store.status().cluster_id;
  }
  auto cfg = base_config();
  cfg["raft.dir"] = first.data_dir() + "/raft";
  TestHost second(cfg);
  const std::string y = "bbbbbbbb-0000-4000-8000-000000000000";
  ASSERT_TRUE(second.adopt_cluster_id(y).ok());
  RaftMetaStore store(second);
  auto r = store.start();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::cluster_id_mismatch);
  EXPECT_NE(r.error().message.find(x), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find(y), std::string::npos) << r.error().message;
  EXPECT_EQ(second.cluster_id(), y);
  EXPECT_FALSE(store.status().ready);
}

struct Collector {
  std::mutex mu;
  std::vector<ChangeEvent> events;
  std::atomic<int> resyncs{0};
  std::size_t size() {
    std::lock_guard lk(mu);
    return events.size();
  }
  std::vector<ChangeEvent> get() {
    std::lock_guard lk(mu);
    return events;
  }
  std::unique_ptr<WatchHandle> watch(MetadataStore& s, ChangeSeq after) {
    return s.watch(
        after,
        [this](const ChangeEvent& e) {
          std::lock_guard lk(mu);
          events.push_back(e);
        },
        [this] { ++resyncs; });
  }
};

TEST(RaftMetaStore, WatchDeliversChangesInOrder) {
  TestHost host(base_config());
  RaftMetaStore store(host);
  ASSERT_TRUE(store.start().ok());
  ASSERT_TRUE(store.create_tenant("acme").ok());  // before the watch: replayed

  Collector all;
  auto h1 = all.watch(store, ChangeSeq{0});
  ASSERT_TRUE(store.create_namespace("acme", "prod").ok());
  std::vector<StreamInfo> streams;
  for (int i = 0; i < 5; ++i) {
    auto s = store.create_stream({"acme", "prod", "s" + std::to_string(i)}, spec());
    ASSERT_TRUE(s.ok());
    streams.push_back(s.value());
  }
  ASSERT_TRUE(eventually([&] { return all.size() >= 7; }));
  auto ev = all.get();
  ASSERT_EQ(ev.size(), 7u);
  EXPECT_EQ(ev[0].kind, ChangeEvent::Kind::tenant_created);
  EXPECT_EQ(ev[1].kind, ChangeEvent::Kind::namespace_created);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(ev[2 + i].kind, ChangeEvent::Kind::stream_created);
    EXPECT_EQ(ev[2 + i].stream.key.name, "s" + std::to_string(i));
    EXPECT_EQ(ev[2 + i].seq, streams[i].created_seq);
  }
  for (std::size_t i = 1; i < ev.size(); ++i) EXPECT_LT(ev[i - 1].seq, ev[i].seq);

  // From a cursor: only later changes.
  Collector tail;
  auto h2 = tail.watch(store, streams[2].created_seq);
  ASSERT_TRUE(eventually([&] { return tail.size() >= 2; }));
  auto t = tail.get();
  EXPECT_EQ(t[0].seq, streams[3].created_seq);
  EXPECT_EQ(t[1].seq, streams[4].created_seq);

  // A cancelled watch gets nothing more; the others keep going.
  h2.reset();
  ASSERT_TRUE(store.delete_stream({"acme", "prod", "s0"}).ok());
  ASSERT_TRUE(eventually([&] { return all.size() >= 8; }));
  EXPECT_EQ(all.get().back().kind, ChangeEvent::Kind::stream_deleted);
  EXPECT_EQ(tail.size(), 2u);
  EXPECT_EQ(all.resyncs.load(), 0);
}

}  // namespace
}  // namespace sluice::raft_meta

namespace sluice::raft_meta {
namespace {

TEST(RaftMetaStore, StopThenStartTheSameObjectReplaysIntoAnEmptyCatalog) {
  TestHost host(base_config());
  RaftMetaStore store(host);
  ASSERT_TRUE(store.start().ok());
  ASSERT_TRUE(store.create_tenant("acme").ok());
  std::string cluster = store.status().cluster_id;
  std::uint64_t hash = store.state_hash();
  store.stop();
  ASSERT_TRUE(store.start().ok());
  EXPECT_EQ(store.status().cluster_id, cluster);
  EXPECT_EQ(store.state_hash(), hash);
  EXPECT_EQ(store.list_tenants()->size(), 1u);
}

TEST(RaftMetaStore, WatchBehindThePrunedChangeLogIsToldToResync) {
  TestHost host(base_config());
  RaftMetaConfig cfg = RaftMetaConfig::from_host(host);
  cfg.change_retention = 4;
  RaftMetaStore store(host, cfg);
  ASSERT_TRUE(store.start().ok());
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(store.create_tenant("t" + std::to_string(i)).ok());

  Collector old;
  auto h1 = old.watch(store, ChangeSeq{0});
  ASSERT_TRUE(eventually([&] { return old.resyncs.load() == 1; }));
  EXPECT_EQ(old.size(), 0u);  // nothing delivered, only resync

  // The caller's recovery: snapshot, then watch from its seq.
  auto snap = store.snapshot();
  ASSERT_TRUE(snap.ok());
  EXPECT_EQ(snap->tenants.size(), 10u);
  Collector fresh;
  auto h2 = fresh.watch(store, snap->seq);
  ASSERT_TRUE(store.create_tenant("next").ok());
  ASSERT_TRUE(eventually([&] { return fresh.size() >= 1; }));
  EXPECT_EQ(fresh.get()[0].tenant, "next");
  EXPECT_EQ(fresh.resyncs.load(), 0);
  EXPECT_EQ(old.resyncs.load(), 1);
}

TEST(RaftMetaStore, WatchHandleDestructorWaitsForTheRunningCallback) {
  TestHost host(base_config());
  RaftMetaStore store(host);
  ASSERT_TRUE(store.start().ok());
  std::atomic<bool> in_callback{false}, release{false}, finished{false};
  auto h = store.watch(
      ChangeSeq{0},
      [&](const ChangeEvent&) {
        in_callback = true;
        while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        finished = true;
      },
      [] {});
  ASSERT_TRUE(store.create_tenant("acme").ok());
  ASSERT_TRUE(eventually([&] { return in_callback.load(); }));
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    release = true;
  });
  h.reset();  // must not return while the callback runs
  EXPECT_TRUE(finished.load());
  releaser.join();
}

TEST(RaftMetaStore, WatchHandleMayBeDestroyedInsideItsCallback) {
  TestHost host(base_config());
  RaftMetaStore store(host);
  ASSERT_TRUE(store.start().ok());
  std::unique_ptr<WatchHandle> h;
  std::mutex mu;
  std::atomic<int> calls{0};
  {
    std::lock_guard lk(mu);
    h = store.watch(
        ChangeSeq{0},
        [&](const ChangeEvent&) {
          ++calls;
          std::lock_guard lk2(mu);
          h.reset();
        },
        [] {});
  }
  ASSERT_TRUE(store.create_tenant("a").ok());
  ASSERT_TRUE(store.create_tenant("b").ok());
  ASSERT_TRUE(eventually([&] { return calls.load() >= 1; }));
  // A later change is not delivered to the cancelled watch.
  Collector probe;
  auto hp = probe.watch(store, ChangeSeq{0});
  ASSERT_TRUE(eventually([&] { return probe.size() >= 2; }));
  EXPECT_EQ(calls.load(), 1);
}

}  // namespace
}  // namespace sluice::raft_meta
