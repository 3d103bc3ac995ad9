// BrokerRuntime against a scripted catalog and the real fs-storage engine: the durable
// guard across a resync and across a restart (docs/architecture.md "Broker runtime").
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <thread>

#include "broker.h"
#include "engine.h"
#include "test_host.h"

using namespace sluice;
using namespace sluice::core;

namespace {

const StreamKey K{"t", "n", "s"};
constexpr std::uint64_t I1 = 1'700'000'000'000'000, I2 = 1'700'000'000'500'000;

// A catalog whose snapshot the test sets; the broker's watch can be told to resync.
class ScriptedCatalog final : public MetadataStore {
 public:
  void set_snapshot(CatalogSnapshot s) {
    std::lock_guard lk(mu_);
    snap_ = std::move(s);
  }
  void force_resync() {
    std::function<void()> r;
    {
      std::lock_guard lk(mu_);
      r = resync_;
    }
    ASSERT_TRUE(r) << "the broker is not watching";
    r();
  }

  Result<void> start() override { return {}; }
  void stop() override {}
  MetadataStatus status() override {
    MetadataStatus s;
    s.backend = "scripted";
    s.ready = true;
    return s;
  }
  Result<CatalogSnapshot> snapshot() override {
    std::lock_guard lk(mu_);
    return snap_;
  }
  Result<std::vector<FeatureInfo>> list_features() override { return std::vector<FeatureInfo>{}; }
  Result<BrokerInfo> register_broker(const BrokerRegistration& reg) override {
    BrokerInfo b;
    b.id = reg.id;
    b.peer_address = reg.peer_address;
    std::lock_guard lk(mu_);
    last_registration_ = reg;
    return b;
  }
  BrokerRegistration last_registration() {
    std::lock_guard lk(mu_);
    return last_registration_;
  }
  void emit(const ChangeEvent& ev) {
    std::function<void(const ChangeEvent&)> f;
    {
      std::lock_guard lk(mu_);
      f = on_change_;
    }
    ASSERT_TRUE(f) << "the broker is not watching";
    f(ev);
  }
  Result<void> heartbeat_broker(NodeId) override { return {}; }
  std::unique_ptr<WatchHandle> watch(ChangeSeq, std::function<void(const ChangeEvent&)> on_change,
                                     std::function<void()> resync) override {
    std::lock_guard lk(mu_);
    on_change_ = std::move(on_change);
    resync_ = std::move(resync);
    return std::make_unique<WatchHandle>();
  }

  // Not used by these tests.
  Error no() { return Error(Errc::not_supported, "scripted catalog"); }
  Result<TenantInfo> create_tenant(const std::string&) override { return no(); }
  Result<void> delete_tenant(const std::string&) override { return no(); }
  Result<std::vector<TenantInfo>> list_tenants() override { return no(); }
  Result<NamespaceInfo> create_namespace(const std::string&, const std::string&) override { return no(); }
  Result<void> delete_namespace(const std::string&, const std::string&) override { return no(); }
  Result<std::vector<NamespaceInfo>> list_namespaces(const std::string&) override { return no(); }
  Result<StreamInfo> create_stream(const StreamKey&, const StreamSpec&) override { return no(); }
  Result<StreamInfo> delete_stream(const StreamKey&) override { return no(); }
  Result<StreamInfo> get_stream(const StreamKey&) override { return no(); }
  Result<std::vector<StreamInfo>> list_streams(const std::string&, const std::string&) override { return no(); }
  Result<void> unregister_broker(NodeId) override { return no(); }
  Result<std::vector<BrokerInfo>> list_brokers() override { return no(); }
  Result<FeatureInfo> finalize_feature(const std::string&) override { return no(); }
  Result<std::vector<Tombstone>> list_tombstones() override { return no(); }

 private:
  std::mutex mu_;
  CatalogSnapshot snap_;
  std::function<void()> resync_;
  std::function<void(const ChangeEvent&)> on_change_;
  BrokerRegistration last_registration_;
};

// The catalog holding K at `inc`, shard 0 led by node 1 (the test host's id).
CatalogSnapshot catalog_with(std::uint64_t seq, std::uint64_t inc, std::optional<std::uint64_t> tombstone = {}) {
  CatalogSnapshot s;
  s.seq = ChangeSeq{seq};
  StreamInfo info;
  info.key = K;
  info.incarnation = Incarnation{inc};
  info.spec.shards = 1;
  info.created_seq = ChangeSeq{seq};
  s.streams = {info};
  s.assignments = {Assignment{K, ShardIndex{0}, Incarnation{inc}, Generation{seq}, NodeId{1}, {NodeId{1}}}};
  s.finalized_features = {std::string(kStreamIncarnations)};
  if (tombstone) s.tombstones = {Tombstone{K, Incarnation{*tombstone}, ChangeSeq{seq}}};
  return s;
}

std::unique_ptr<BrokerRuntime> make_broker(sluice::testing::TestHost& host, ScriptedCatalog& cat, StorageEngine& storage,
                                           std::shared_ptr<PeerDirectory> peers = nullptr) {
  NodeInfo info;
  info.node_id = NodeId{1};
  BrokerOptions opts;
  opts.heartbeat_interval_ms = 600000;
  opts.peer_address = "127.0.0.1:7902";
  opts.peers = std::move(peers);
  return std::make_unique<BrokerRuntime>(info, cat, &storage, opts, host);
}

bool eventually(const std::function<bool()>& cond) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return cond();
}

bool held_on_disk(StorageEngine& storage, std::uint64_t inc) {
  auto refs = storage.list_on_disk();
  if (!refs) return false;
  for (const auto& r : *refs)
    if (r.stream == K && r.incarnation == Incarnation{inc}) return true;
  return false;
}

// "served", "conflict" (refused), or the error.
std::string fetch_answer(BrokerRuntime& b) {
  auto r = b.fetch(K, ShardIndex{0}, Offset{0}, 10, 1 << 20);
  if (r) return "served";
  return r.error().code == Errc::conflict ? "conflict" : r.error().to_string();
}

}  // namespace

// Regression (issue: resync() dropped the stream before serve_stream checked it): a resync
// onto a rewound catalog (a restored control plane) must not move the name to the lower
// incarnation; the held one closes, the lower one is refused.
TEST(Broker, resync_onto_a_rewound_catalog_never_serves_the_lower_incarnation) {
  sluice::testing::TestHost host;
  ScriptedCatalog cat;
  fs_storage::FsStorageEngine storage(host, std::make_shared<fs_storage::PosixFileSystem>());
  cat.set_snapshot(catalog_with(20, I2));
  auto b = make_broker(host, cat, storage);
  ASSERT_TRUE(b->start());
  ASSERT_TRUE(b->fetch(K, ShardIndex{0}, Offset{0}, 10, 1 << 20));

  cat.set_snapshot(catalog_with(10, I1));
  cat.force_resync();
  ASSERT_TRUE(eventually([&] { auto s = b->stream(K); return s && s->incarnation == Incarnation{I1}; }));
  EXPECT_EQ(fetch_answer(*b), "conflict");
  EXPECT_FALSE(held_on_disk(storage, I1)) << "the lower incarnation was opened";
  EXPECT_TRUE(held_on_disk(storage, I2)) << "the newer incarnation's data must stay: no delete word";
  b->stop();
}

// Regression: the guard survives a restart (<data.dir>/broker/floors): a restored catalog
// that names the deleted incarnation, with no tombstone, is refused, and the delete the
// broker applied before is applied again.
TEST(Broker, restart_onto_a_restored_catalog_refuses_the_deleted_incarnation) {
  sluice::testing::TestHost host;
  ScriptedCatalog cat;
  {
    fs_storage::FsStorageEngine storage(host, std::make_shared<fs_storage::PosixFileSystem>());
    cat.set_snapshot(catalog_with(10, I1));
    auto b = make_broker(host, cat, storage);
    ASSERT_TRUE(b->start());
    b->stop();
    // Deleted and recreated while the broker was down; it applies both at its next start.
    cat.set_snapshot(catalog_with(20, I2, I1));
    b = make_broker(host, cat, storage);
    ASSERT_TRUE(b->start());
    EXPECT_FALSE(held_on_disk(storage, I1));
    b->stop();
  }
  fs_storage::FsStorageEngine storage(host, std::make_shared<fs_storage::PosixFileSystem>());
  cat.set_snapshot(catalog_with(10, I1));  // the restored control plane
  auto b = make_broker(host, cat, storage);
  ASSERT_TRUE(b->start());
  EXPECT_EQ(fetch_answer(*b), "conflict");
  EXPECT_FALSE(held_on_disk(storage, I1)) << "the deleted incarnation was reopened";
  EXPECT_TRUE(host.logged("not serving: stream t/n/s incarnation " + std::to_string(I1)));
  b->stop();
}

// Review finding: a plan that closes one shard of a name must keep serving the shards of
// that name that stay here. Step 2 took the name out of service, and step 5 no longer
// found the open shard 0 to carry it over: it stayed open in storage but unserved.
TEST(Broker, moving_one_shard_away_keeps_serving_the_shard_that_stays) {
  sluice::testing::TestHost host;
  ScriptedCatalog cat;
  fs_storage::FsStorageEngine storage(host, std::make_shared<fs_storage::PosixFileSystem>());
  auto two_shards = [](std::uint64_t seq, NodeId shard1_leader) {
    CatalogSnapshot s = catalog_with(10, I1);
    s.seq = ChangeSeq{seq};
    s.streams[0].spec.shards = 2;
    s.assignments.push_back(
        Assignment{K, ShardIndex{1}, Incarnation{I1}, Generation{seq}, shard1_leader, {shard1_leader}});
    return s;
  };
  cat.set_snapshot(two_shards(10, NodeId{1}));
  auto b = make_broker(host, cat, storage);
  ASSERT_TRUE(b->start());
  ASSERT_TRUE(b->fetch(K, ShardIndex{0}, Offset{0}, 10, 1 << 20));
  ASSERT_TRUE(b->fetch(K, ShardIndex{1}, Offset{0}, 10, 1 << 20));

  cat.set_snapshot(two_shards(20, NodeId{2}));  // shard 1 moves to broker 2
  cat.force_resync();
  ASSERT_TRUE(eventually([&] { return !b->fetch(K, ShardIndex{1}, Offset{0}, 10, 1 << 20); }));
  auto r = b->fetch(K, ShardIndex{0}, Offset{0}, 10, 1 << 20);
  EXPECT_TRUE(r) << "shard 0 stayed here and must still be served: " << r.error().to_string();
  b->stop();
}

// The peer directory (docs/replication.md "Peer transport") follows the catalog: the broker
// registers its transport.address as its peer_address, and learns every broker's from the
// snapshot and from broker_registered / broker_unregistered changes.
TEST(Broker, the_peer_directory_follows_the_catalogs_broker_registrations) {
  sluice::testing::TestHost host;
  ScriptedCatalog cat;
  fs_storage::FsStorageEngine storage(host, std::make_shared<fs_storage::PosixFileSystem>());
  auto snap = catalog_with(20, I2);
  BrokerInfo two;
  two.id = NodeId{2};
  two.peer_address = "127.0.0.1:7912";
  snap.brokers = {two};
  cat.set_snapshot(snap);
  auto peers = std::make_shared<PeerDirectory>();
  auto b = make_broker(host, cat, storage, peers);
  ASSERT_TRUE(b->start());
  EXPECT_EQ(cat.last_registration().peer_address, "127.0.0.1:7902");
  EXPECT_EQ(peers->lookup(NodeId{1}).value_or(""), "127.0.0.1:7902");
  EXPECT_EQ(peers->lookup(NodeId{2}).value_or(""), "127.0.0.1:7912");

  ChangeEvent reg;
  reg.kind = ChangeEvent::Kind::broker_registered;
  reg.seq = ChangeSeq{21};
  reg.broker.id = NodeId{3};
  reg.broker.peer_address = "127.0.0.1:7922";
  cat.emit(reg);
  ASSERT_TRUE(eventually([&] { return peers->lookup(NodeId{3}).has_value(); }));
  EXPECT_EQ(*peers->lookup(NodeId{3}), "127.0.0.1:7922");

  ChangeEvent unreg;
  unreg.kind = ChangeEvent::Kind::broker_unregistered;
  unreg.seq = ChangeSeq{22};
  unreg.broker.id = NodeId{2};
  cat.emit(unreg);
  ASSERT_TRUE(eventually([&] { return !peers->lookup(NodeId{2}).has_value(); }));
  b->stop();
}
