// BrokerRuntime against a scripted catalog and the real fs-storage engine: the durable
// guard across a resync and across a restart (docs/architecture.md "Broker runtime").
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <condition_variable>
#include <future>
#include <set>
#include <mutex>
#include <thread>

#include "broker.h"
#include "broker_catalog_facade.h"
#include "engine.h"
#include "sluice/record_batch.h"
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
  // Empty unless a test sets it; `features_failures` calls fail (unavailable) first.
  Result<std::vector<FeatureInfo>> list_features() override {
    std::lock_guard lk(mu_);
    if (features_failures > 0) {
      --features_failures;
      return Error(Errc::unavailable, "scripted: list_features failed");
    }
    return features;
  }
  std::vector<FeatureInfo> features;  // set before start
  int features_failures = 0;          // set before start
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
  // Set by a test: what a delete answers (without emitting its change).
  std::function<Result<StreamInfo>(const StreamKey&)> on_delete;
  Result<StreamInfo> delete_stream(const StreamKey& k) override { return on_delete ? on_delete(k) : no(); }
  Result<StreamInfo> get_stream(const StreamKey&) override { return no(); }
  Result<std::vector<StreamInfo>> list_streams(const std::string&, const std::string&) override { return no(); }
  Result<void> unregister_broker(NodeId) override { return no(); }
  std::vector<BrokerInfo> brokers;  // what list_brokers answers (set by a test)
  std::vector<ShardUpdate> updates;  // every update_shard asked (answered not_supported)
  Result<std::vector<BrokerInfo>> list_brokers() override {
    std::lock_guard lk(mu_);
    return brokers;
  }
  Result<Assignment> update_shard(const ShardUpdate& u) override {
    std::lock_guard lk(mu_);
    updates.push_back(u);
    return no();
  }
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

// Regression (review): when list_features failed during a resync, every finalized feature
// counted as finalized at change 0, which turned off the refusal of a stream a pre-
// incarnation member created at incarnation 0 after stream_incarnations was finalized:
// this broker alone served it (and could reopen the name's legacy data). The resync now
// fails and is retried until it knows when each feature was finalized.
TEST(Broker, a_resync_without_the_finalize_changes_does_not_serve_a_legacy_create) {
  sluice::testing::TestHost host;
  ScriptedCatalog cat;
  fs_storage::FsStorageEngine storage(host, std::make_shared<fs_storage::PosixFileSystem>());
  CatalogSnapshot snap = catalog_with(160, 0);  // created at incarnation 0, change 160
  cat.set_snapshot(snap);
  FeatureInfo inc;
  inc.name = std::string(kStreamIncarnations);
  inc.finalized = true;
  inc.finalized_seq = ChangeSeq{100};
  cat.features = {inc};
  cat.features_failures = 2;
  auto b = make_broker(host, cat, storage);
  ASSERT_TRUE(b->start());
  EXPECT_EQ(fetch_answer(*b), "conflict");
  EXPECT_FALSE(held_on_disk(storage, 0)) << "the legacy create was opened";
  EXPECT_TRUE(host.logged("after stream_incarnations was finalized"));
  b->stop();
}

// Regression (review): an operator's leader move checked only that the broker was in the
// in-sync set. A broker back with an empty disk (a new directory id) whose stale entry was
// still there was written down as leader, fenced the old one and then refused to lead.
TEST(Broker, a_leader_move_needs_an_eligible_broker_not_just_an_in_sync_entry) {
  sluice::testing::TestHost host;
  ScriptedCatalog cat;
  fs_storage::FsStorageEngine storage(host, std::make_shared<fs_storage::PosixFileSystem>());
  CatalogSnapshot snap = catalog_with(10, I1);
  snap.assignments[0].replicas = {NodeId{1}, NodeId{2}};
  snap.assignments[0].in_sync = {{NodeId{1}, "dir-1"}, {NodeId{2}, "dir-2"}};
  cat.set_snapshot(snap);
  auto live = [](std::uint32_t id, std::string dir) {
    BrokerInfo b;
    b.id = NodeId{id};
    b.directory_id = std::move(dir);
    b.live = true;
    return b;
  };
  auto b = make_broker(host, cat, storage);
  ASSERT_TRUE(b->start());
  cat.brokers = {live(1, "dir-1"), live(2, "dir-2-new-disk")};
  auto r = b->move_leader(K, ShardIndex{0}, NodeId{2});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::conflict) << r.error().to_string();
  EXPECT_NE(r.error().message.find("data directory"), std::string::npos) << r.error().message;
  cat.brokers = {live(1, "dir-1"), live(2, "dir-2")};
  cat.brokers[1].live = false;
  EXPECT_EQ(b->move_leader(K, ShardIndex{0}, NodeId{2}).error().code, Errc::conflict) << "a dead broker";
  EXPECT_TRUE(cat.updates.empty()) << "nothing may be written for an ineligible broker";
  cat.brokers[1].live = true;
  (void)b->move_leader(K, ShardIndex{0}, NodeId{2});  // eligible: the compare-and-set is asked (scripted: not_supported)
  EXPECT_EQ(cat.updates.size(), 1u);
  b->stop();
}

// Changes queued together are applied as one batch (docs/architecture.md "Broker runtime"):
// a name deleted, created again and deleted again, and a second name created, all emitted
// at once, end as if applied one by one: no deleted incarnation on disk or served, the
// second name served, and floors on disk that a restart onto the old catalog still obeys.
TEST(Broker, changes_applied_together_end_as_if_applied_in_order) {
  sluice::testing::TestHost host;
  ScriptedCatalog cat;
  const StreamKey K2{"t", "n", "s2"};
  auto created = [](const StreamKey& k, std::uint64_t seq, std::uint64_t inc) {
    ChangeEvent ev{};
    ev.kind = ChangeEvent::Kind::stream_created;
    ev.seq = ChangeSeq{seq};
    ev.stream.key = k;
    ev.stream.incarnation = Incarnation{inc};
    ev.stream.spec.shards = 1;
    ev.stream.created_seq = ChangeSeq{seq};
    ev.assignments = {Assignment{k, ShardIndex{0}, Incarnation{inc}, Generation{seq}, NodeId{1}, {NodeId{1}}}};
    return ev;
  };
  auto deleted = [&](const StreamKey& k, std::uint64_t seq, std::uint64_t inc) {
    ChangeEvent ev = created(k, seq, inc);
    ev.kind = ChangeEvent::Kind::stream_deleted;
    ev.tombstone = Tombstone{k, Incarnation{inc}, ChangeSeq{seq}};
    return ev;
  };
  {
    fs_storage::FsStorageEngine storage(host, std::make_shared<fs_storage::PosixFileSystem>());
    cat.set_snapshot(catalog_with(10, I1));
    auto b = make_broker(host, cat, storage);
    ASSERT_TRUE(b->start());
    ASSERT_TRUE(held_on_disk(storage, I1));
    for (const auto& ev : {deleted(K, 11, I1), created(K, 12, I2), deleted(K, 13, I2), created(K2, 14, I1)})
      cat.emit(ev);
    ASSERT_TRUE(b->wait_applied(ChangeSeq{14}, 30000));
    EXPECT_FALSE(held_on_disk(storage, I1));
    EXPECT_FALSE(held_on_disk(storage, I2));
    auto gone = b->fetch(K, ShardIndex{0}, Offset{0}, 10, 1 << 20);
    ASSERT_FALSE(gone);
    EXPECT_EQ(gone.error().code, Errc::not_found);
    EXPECT_TRUE(b->fetch(K2, ShardIndex{0}, Offset{0}, 10, 1 << 20));
    b->stop();
  }
  // A restored control plane naming incarnation I2 of K: the floors (appended, not
  // rewritten) say it was deleted here.
  fs_storage::FsStorageEngine storage(host, std::make_shared<fs_storage::PosixFileSystem>());
  cat.set_snapshot(catalog_with(12, I2));
  auto b = make_broker(host, cat, storage);
  ASSERT_TRUE(b->start());
  EXPECT_EQ(fetch_answer(*b), "conflict");
  EXPECT_FALSE(held_on_disk(storage, I2));
  b->stop();
}

// A DELETE through broker `b`'s catalog facade, on its own thread, against a catalog that
// answers `deleted` without emitting the change: a test checks that it has not answered
// yet, emits the change(s), then join()s.
struct PendingDelete {
  std::atomic<bool> called{false}, returned{false};
  Result<StreamInfo> result{Error(Errc::internal, "unset")};
  std::unique_ptr<MetadataStore> facade;
  std::thread t;
  PendingDelete(BrokerRuntime& b, ScriptedCatalog& cat, const StreamKey& key, StreamInfo deleted) {
    cat.on_delete = [this, deleted](const StreamKey&) -> Result<StreamInfo> {
      called = true;
      return deleted;
    };
    facade = make_catalog_facade(b, cat, 60000);
    t = std::thread([this, key] {
      result = facade->delete_stream(key);
      returned = true;
    });
  }
  // The catalog committed the delete; whether the broker answered within 300 ms anyway.
  bool answered_early() {
    EXPECT_TRUE(eventually([&] { return called.load(); }));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    return returned.load();
  }
  void join() { t.join(); }
  ~PendingDelete() {
    if (t.joinable()) t.join();
  }
};

// Regression (review): a DELETE through the broker's catalog waited for the store's
// status().applied, which on postgres-meta lags the store's own commit (the feed learns of
// it later): the delete answered at once while this broker still served, and accepted
// publishes into, the deleted incarnation. It answers once the broker has applied it.
TEST(Broker, a_delete_answers_once_this_broker_no_longer_serves_the_incarnation) {
  sluice::testing::TestHost host;
  ScriptedCatalog cat;
  fs_storage::FsStorageEngine storage(host, std::make_shared<fs_storage::PosixFileSystem>());
  cat.set_snapshot(catalog_with(10, I1));
  auto b = make_broker(host, cat, storage);
  ASSERT_TRUE(b->start());
  auto info = b->stream(K);
  ASSERT_TRUE(info);
  PendingDelete del(*b, cat, K, *info);
  EXPECT_FALSE(del.answered_early()) << "the delete answered while this broker still served the stream";
  EXPECT_TRUE(b->stream(K));
  ChangeEvent ev{};
  ev.kind = ChangeEvent::Kind::stream_deleted;
  ev.seq = ChangeSeq{11};
  ev.stream = *info;
  ev.assignments = catalog_with(10, I1).assignments;
  ev.tombstone = Tombstone{K, Incarnation{I1}, ChangeSeq{11}};
  cat.emit(ev);
  del.join();
  ASSERT_TRUE(del.result) << del.result.error().to_string();
  EXPECT_FALSE(b->stream(K));
  EXPECT_FALSE(held_on_disk(storage, I1));
  b->stop();
}

// Review finding on the fix above: a broker whose catalog feed had not delivered the create
// yet held nothing under the name, and the wait ended at once; it then opened the stream
// and served it until the delete arrived. The delete waits for the create first.
TEST(Broker, a_delete_through_a_broker_that_lags_the_create_waits_for_both) {
  sluice::testing::TestHost host;
  ScriptedCatalog cat;
  fs_storage::FsStorageEngine storage(host, std::make_shared<fs_storage::PosixFileSystem>());
  const StreamKey K2{"t", "n", "late"};
  cat.set_snapshot(catalog_with(10, I1));
  auto b = make_broker(host, cat, storage);
  ASSERT_TRUE(b->start());
  ChangeEvent created{};
  created.kind = ChangeEvent::Kind::stream_created;
  created.seq = ChangeSeq{11};
  created.stream.key = K2;
  created.stream.incarnation = Incarnation{I2};
  created.stream.spec.shards = 1;
  created.stream.created_seq = ChangeSeq{11};
  created.assignments = {Assignment{K2, ShardIndex{0}, Incarnation{I2}, Generation{11}, NodeId{1}, {NodeId{1}}}};
  // Created at 11, deleted at 12: this broker has applied neither.
  PendingDelete del(*b, cat, K2, created.stream);
  EXPECT_FALSE(del.answered_early()) << "the delete answered before this broker had even applied the create";
  cat.emit(created);
  ChangeEvent deleted = created;
  deleted.kind = ChangeEvent::Kind::stream_deleted;
  deleted.seq = ChangeSeq{12};
  deleted.tombstone = Tombstone{K2, Incarnation{I2}, ChangeSeq{12}};
  cat.emit(deleted);
  del.join();
  ASSERT_TRUE(del.result) << del.result.error().to_string();
  EXPECT_FALSE(b->stream(K2));
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
  // From the moment shard 1 stops being served here, shard 0 is still served: the name
  // stays in service while the plan closes shard 1 (the ASan run once caught a window
  // where the whole name was out of service).
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

// --- Forwarding (docs/replication.md "Forwarding") -------------------------------------
// Two brokers in one process, joined by a loopback PeerTransport: broker 1 leads shard 0,
// broker 2 shard 1. Calls made on broker 1 for shard 1 go to broker 2 and come back.
namespace {

class Loopback {
 public:
  class Port final : public PeerTransport {
   public:
    Port(Loopback& net, NodeId id) : net_(net), id_(id) {}
    NodeId self() const override { return id_; }
    Result<void> handle(PeerMessageType type, PeerHandler h) override {
      std::lock_guard lk(net_.mu_);
      if (!net_.handlers_.emplace(std::make_pair(id_.value(), type), std::move(h)).second)
        return Error(Errc::conflict, "type already handled");
      return {};
    }
    // As the real transport: once this returns, no call of the handler runs.
    void unhandle(PeerMessageType type) override {
      std::unique_lock lk(net_.mu_);
      net_.handlers_.erase({id_.value(), type});
      net_.idle_.wait(lk, [&] { return net_.running_[id_.value()] == 0; });
    }
    void request(NodeId peer, PeerMessageType type, std::string payload, std::chrono::milliseconds,
                 PeerCallback cb) override {
      net_.send(id_, peer, type, std::move(payload), std::move(cb));
    }

   private:
    Loopback& net_;
    NodeId id_;
  };

  void set_down(NodeId id, bool down) {
    std::lock_guard lk(mu_);
    if (down) down_.insert(id.value());
    else down_.erase(id.value());
  }
  void set_answers_lost(NodeId id, bool lost) {
    std::lock_guard lk(mu_);
    if (lost) lost_.insert(id.value());
    else lost_.erase(id.value());
  }
  // Waits until no request is being delivered (before the brokers are destroyed).
  void drain() {
    std::unique_lock lk(mu_);
    idle_.wait(lk, [&] { return inflight_ == 0; });
  }
  int requests(PeerMessageType type) {
    std::lock_guard lk(mu_);
    return counts_[type];
  }

 private:
  void send(NodeId from, NodeId to, PeerMessageType type, std::string payload, PeerCallback cb) {
    {
      std::lock_guard lk(mu_);
      ++inflight_;
    }
    pool_.post([this, from, to, type, payload = std::move(payload), cb = std::move(cb)]() mutable {
      deliver(from, to, type, std::move(payload), std::move(cb));
      std::lock_guard lk(mu_);
      --inflight_;
      idle_.notify_all();
    });
  }
  void deliver(NodeId from, NodeId to, PeerMessageType type, std::string payload, PeerCallback cb) {
    {
      PeerHandler h;
      {
        std::lock_guard lk(mu_);
        ++counts_[type];
        if (down_.count(to.value()))
          return cb(Error(Errc::unavailable, "broker " + std::to_string(to.value()) + " is down", Outcome::transient));
        auto it = handlers_.find({to.value(), type});
        if (it != handlers_.end()) h = it->second;
        if (h) ++running_[to.value()];
      }
      if (!h) return cb(Error(Errc::not_supported, "no handler"));
      bool lose = false;
      {
        std::lock_guard lk(mu_);
        lose = lost_.count(to.value()) > 0;
      }
      // Lost: the peer handles the call, and its answer never arrives (as the transport
      // reports a connection closed after the request was sent).
      h(PeerIdentity{from, ""}, std::move(payload), PeerResponder([cb, lose](Result<std::string> a) {
          if (lose) return cb(Error(Errc::unavailable, "the connection was closed", Outcome::uncertain));
          cb(std::move(a));
        }));
      std::lock_guard lk(mu_);
      --running_[to.value()];
      idle_.notify_all();
    }
  }

  std::mutex mu_;
  std::map<std::pair<std::uint32_t, PeerMessageType>, PeerHandler> handlers_;
  std::set<std::uint32_t> down_;
  std::set<std::uint32_t> lost_;  // answers from these never arrive
  std::map<PeerMessageType, int> counts_;
  std::map<std::uint32_t, int> running_;  // handler calls in progress, per node
  int inflight_ = 0;                       // requests posted and not yet delivered
  std::condition_variable idle_;
  fwd::Workers pool_{4};
};

class ForwardHost : public sluice::testing::TestHost {
 public:
  PeerTransport* transport = nullptr;
  PeerTransport* peer_transport() override { return transport; }
};

// K with 2 shards: shard 0 on broker 1, shard 1 on `shard1_leader` (0: none); both
// brokers registered with their HTTP addresses.
CatalogSnapshot two_brokers(NodeId shard1_leader) {
  CatalogSnapshot s = catalog_with(10, I1);
  s.streams[0].spec.shards = 2;
  s.assignments.push_back(Assignment{K, ShardIndex{1}, Incarnation{I1}, Generation{10}, shard1_leader, {NodeId{2}}});
  BrokerInfo b1, b2;
  b1.id = NodeId{1};
  b1.address = "127.0.0.1:18081";
  b2.id = NodeId{2};
  b2.address = "127.0.0.1:18082";
  s.brokers = {b1, b2};
  return s;
}

struct Pair {
  Loopback net;
  Loopback::Port port1{net, NodeId{1}}, port2{net, NodeId{2}};
  ForwardHost host1, host2;
  ScriptedCatalog cat1, cat2;
  std::unique_ptr<fs_storage::FsStorageEngine> storage1, storage2;
  std::unique_ptr<BrokerRuntime> b1, b2;

  explicit Pair(NodeId shard1_leader_for_1 = NodeId{2}, NodeId shard1_leader_for_2 = NodeId{2}) {
    host1.transport = &port1;
    host2.transport = &port2;
    storage1 = std::make_unique<fs_storage::FsStorageEngine>(host1, std::make_shared<fs_storage::PosixFileSystem>());
    storage2 = std::make_unique<fs_storage::FsStorageEngine>(host2, std::make_shared<fs_storage::PosixFileSystem>());
    cat1.set_snapshot(two_brokers(shard1_leader_for_1));
    cat2.set_snapshot(two_brokers(shard1_leader_for_2));
    b1 = make(host1, cat1, *storage1, 1);
    b2 = make(host2, cat2, *storage2, 2);
  }
  static std::unique_ptr<BrokerRuntime> make(ForwardHost& host, ScriptedCatalog& cat, StorageEngine& storage,
                                             std::uint32_t id) {
    NodeInfo info;
    info.node_id = NodeId{id};
    BrokerOptions opts;
    opts.heartbeat_interval_ms = 600000;
    opts.advertised_address = "127.0.0.1:1808" + std::to_string(id);
    opts.forward_wait_hold_ms = 200;  // so a test sees the re-asking after a hold
    return std::make_unique<BrokerRuntime>(info, cat, &storage, opts, host);
  }
  ~Pair() {
    b1->stop();
    b2->stop();
    net.drain();
  }
};

Result<std::vector<PublishedRecord>> publish_sync(BrokerRuntime& b, std::vector<PublishRecord> recs) {
  std::promise<Result<std::vector<PublishedRecord>>> p;
  auto f = p.get_future();
  b.publish(K, recs, PublishOptions{}, [&p](Result<std::vector<PublishedRecord>> r) { p.set_value(std::move(r)); });
  if (f.wait_for(std::chrono::seconds(30)) != std::future_status::ready)
    return Error(Errc::timeout, "publish did not answer");
  return f.get();
}

std::vector<std::string> values(const FetchResult& f) {
  std::vector<std::string> out;
  for (const auto& b : f.batches) {
    BatchReader r(b.data(), b.size());
    RecordView rv;
    while (r.next(rv)) out.emplace_back(rv.value);
  }
  return out;
}

}  // namespace

TEST(Forwarding, publish_fetch_and_groups_on_another_brokers_shard_go_to_its_leader) {
  Pair p;
  ASSERT_TRUE(p.b1->start());
  ASSERT_TRUE(p.b2->start());
  EXPECT_EQ(p.b1->leader_address(K, ShardIndex{1}), "127.0.0.1:18082");
  EXPECT_EQ(p.b1->leader_address(K, ShardIndex{0}), "127.0.0.1:18081");
  EXPECT_TRUE(p.b1->serves_locally(K, ShardIndex{0}));
  EXPECT_FALSE(p.b1->serves_locally(K, ShardIndex{1}));
  EXPECT_TRUE(p.b2->serves_locally(K, ShardIndex{1}));

  PublishRecord a, b, c;
  a.value = "one";
  a.shard = 1;
  b.value = "two";
  b.shard = 1;
  c.value = "zero";
  c.shard = 0;
  auto r = publish_sync(*p.b1, {a, b, c});  // shard 1 forwarded, shard 0 local, in one request
  ASSERT_TRUE(r) << r.error().to_string();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[0].shard.value(), 1u);
  EXPECT_EQ((*r)[0].offset.value(), 0u);
  EXPECT_EQ((*r)[1].offset.value(), 1u);
  EXPECT_EQ((*r)[2].shard.value(), 0u);
  EXPECT_EQ(p.net.requests(fwd::kPublish), 1);

  // The data is on broker 2 (read there directly) and readable through broker 1.
  auto direct = p.b2->fetch(K, ShardIndex{1}, Offset{0}, 10, 1 << 20);
  ASSERT_TRUE(direct) << direct.error().to_string();
  EXPECT_EQ(values(*direct), (std::vector<std::string>{"one", "two"}));
  auto via = p.b1->fetch(K, ShardIndex{1}, Offset{0}, 10, 1 << 20);
  ASSERT_TRUE(via) << via.error().to_string();
  EXPECT_EQ(values(*via), (std::vector<std::string>{"one", "two"}));
  EXPECT_EQ(via->high_watermark.value(), 2u);
  auto stats = p.b1->shard_stats(K, ShardIndex{1});
  ASSERT_TRUE(stats) << stats.error().to_string();
  EXPECT_EQ(stats->high_watermark.value(), 2u);

  // Long poll through broker 1: fires once broker 2 appends (after at least one hold).
  std::atomic<bool> fired{false};
  auto h = p.b1->notify_when_beyond(K, ShardIndex{1}, Offset{2}, [&] { fired = true; });
  ASSERT_TRUE(h) << h.error().to_string();
  // The leader holds the wait 200 ms, answers "nothing new", and broker 1 asks again.
  ASSERT_TRUE(eventually([&] { return p.net.requests(fwd::kWait) >= 2; }));
  EXPECT_FALSE(fired.load());
  PublishRecord d;
  d.value = "three";
  d.shard = 1;
  ASSERT_TRUE(publish_sync(*p.b2, {d}));
  EXPECT_TRUE(eventually([&] { return fired.load(); }));

  // A poll that gives up cancels: the leader is told to drop its hold at once.
  auto h2 = p.b1->notify_when_beyond(K, ShardIndex{1}, Offset{100}, [] {});
  ASSERT_TRUE(h2) << h2.error().to_string();
  p.b1->cancel_notify(K, ShardIndex{1}, h2.value());
  EXPECT_TRUE(eventually([&] { return p.net.requests(fwd::kCancelWait) == 1; }));

  // A consumer group through broker 1.
  auto g = p.b1->group_fetch(K, ShardIndex{1}, "workers", 10, GroupOptions{});
  ASSERT_TRUE(g) << g.error().to_string();
  ASSERT_EQ(g->records.size(), 3u);
  EXPECT_EQ(g->records[0].delivery, 1u);
  // Pinned to another incarnation (ABI 20): refused, on the leader and before anything is
  // forwarded; nothing is acked. Pinned to this one: done, forwarded with it.
  const auto acks_sent = p.net.requests(fwd::kGroupAck);
  for (auto* b : {p.b1.get(), p.b2.get()}) {
    auto stale = b->group_ack(K, ShardIndex{1}, "workers", {Offset{0}}, Incarnation{I2});
    ASSERT_FALSE(stale);
    EXPECT_EQ(stale.error().code, Errc::conflict) << stale.error().to_string();
    EXPECT_NE(stale.error().message.find("not incarnation " + std::to_string(I2)), std::string::npos);
    EXPECT_EQ(b->group_fetch(K, ShardIndex{1}, "workers", 10, GroupOptions{}, Incarnation{I2}).error().code,
              Errc::conflict);
  }
  EXPECT_EQ(p.net.requests(fwd::kGroupAck), acks_sent) << "a call for another incarnation was forwarded";
  ASSERT_TRUE(p.b1->group_ack(K, ShardIndex{1}, "workers", {Offset{0}}, Incarnation{I1}));
  ASSERT_TRUE(p.b1->group_ack(K, ShardIndex{1}, "workers", {Offset{1}, Offset{2}}));
  auto pos = p.b1->group_positions(K, "workers");
  ASSERT_TRUE(pos) << pos.error().to_string();
  ASSERT_EQ(pos->size(), 2u);
  EXPECT_EQ((*pos)[1].committed.value(), 3u);
  auto names = p.b1->groups(K);
  ASSERT_TRUE(names) << names.error().to_string();
  EXPECT_EQ(*names, std::vector<std::string>{"workers"});

  // Bad input is refused before anything is forwarded, as on the leader.
  auto bad = p.b1->fetch(K, ShardIndex{7}, Offset{0}, 10, 1 << 20);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, Errc::not_found);
  auto unknown = p.b1->fetch(StreamKey{"t", "n", "nope"}, ShardIndex{1}, Offset{0}, 10, 1 << 20);
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, Errc::not_found);

  // The leader down: unavailable, transient (nothing was sent), for reads and publishes.
  p.net.set_down(NodeId{2}, true);
  auto down = p.b1->fetch(K, ShardIndex{1}, Offset{0}, 10, 1 << 20);
  ASSERT_FALSE(down);
  EXPECT_EQ(down.error().code, Errc::unavailable);
  EXPECT_EQ(down.error().outcome, Outcome::transient);
  auto pdown = publish_sync(*p.b1, {a});
  ASSERT_FALSE(pdown);
  EXPECT_EQ(pdown.error().code, Errc::unavailable);
  // Partly written (shard 0 took its batch): the outcome is uncertain.
  auto partial = publish_sync(*p.b1, {a, c});
  ASSERT_FALSE(partial);
  EXPECT_EQ(partial.error().outcome, Outcome::uncertain);
}

// Review finding: a read forwarded to a leader that died after the request was sent failed
// "uncertain", which tells a client the call may have taken effect; a read changes
// nothing, so it is transient (retry). A write lost the same way stays uncertain.
TEST(Forwarding, a_read_whose_answer_was_lost_is_transient_and_a_write_uncertain) {
  Pair p;
  ASSERT_TRUE(p.b1->start());
  ASSERT_TRUE(p.b2->start());
  PublishRecord a;
  a.value = "one";
  a.shard = 1;
  ASSERT_TRUE(publish_sync(*p.b1, {a}));
  p.net.set_answers_lost(NodeId{2}, true);
  auto f = p.b1->fetch(K, ShardIndex{1}, Offset{0}, 10, 1 << 20);
  ASSERT_FALSE(f);
  EXPECT_EQ(f.error().code, Errc::unavailable);
  EXPECT_EQ(f.error().outcome, Outcome::transient) << f.error().to_string();
  auto st = p.b1->shard_stats(K, ShardIndex{1});
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().outcome, Outcome::transient);
  auto pos = p.b1->group_positions(K, "workers");
  ASSERT_FALSE(pos);
  EXPECT_EQ(pos.error().outcome, Outcome::transient);
  auto w = publish_sync(*p.b1, {a});
  ASSERT_FALSE(w);
  EXPECT_EQ(w.error().outcome, Outcome::uncertain) << "the publish was sent: it may have been appended";
  auto g = p.b1->group_fetch(K, ShardIndex{1}, "workers", 10, GroupOptions{});
  ASSERT_FALSE(g);
  EXPECT_EQ(g.error().outcome, Outcome::uncertain) << "a group fetch records deliveries";
  p.net.set_answers_lost(NodeId{2}, false);
}

TEST(Forwarding, a_forwarded_call_is_never_forwarded_again) {
  // Broker 1 thinks broker 2 leads shard 1; broker 2 thinks nobody does (it lags, or the
  // leader moved): broker 2 answers not_leader and does not send the call anywhere.
  Pair p(NodeId{2}, NodeId{1});
  ASSERT_TRUE(p.b1->start());
  ASSERT_TRUE(p.b2->start());
  auto r = p.b1->fetch(K, ShardIndex{1}, Offset{0}, 10, 1 << 20);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::not_leader) << r.error().to_string();
  EXPECT_EQ(p.net.requests(fwd::kFetch), 1);
  PublishRecord a;
  a.value = "x";
  a.shard = 1;
  auto w = publish_sync(*p.b1, {a});
  ASSERT_FALSE(w);
  EXPECT_EQ(w.error().code, Errc::not_leader);
  EXPECT_EQ(p.net.requests(fwd::kPublish), 1);
}

TEST(Forwarding, a_shard_without_a_leader_is_shard_unavailable) {
  Pair p(NodeId{0}, NodeId{0});
  ASSERT_TRUE(p.b1->start());
  auto r = p.b1->fetch(K, ShardIndex{1}, Offset{0}, 10, 1 << 20);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::shard_unavailable);
  EXPECT_NE(r.error().message.find("shard 1"), std::string::npos) << r.error().message;
  EXPECT_EQ(p.b1->leader_address(K, ShardIndex{1}), "");
}

// Regression (review): a publish over two shards whose first answer was "transient,
// nothing written" (a local shard closing) and whose second was "uncertain" (forwarded,
// then the connection was lost) answered transient, so a client retried and could
// duplicate the second shard's batch. The most uncertain outcome is the request's.
TEST(Forwarding, a_request_failed_in_parts_reports_its_most_uncertain_error) {
  std::optional<Error> kept;
  fwd::keep_most_uncertain(kept, Error(Errc::invalid_argument, "definite", Outcome::definite));
  fwd::keep_most_uncertain(kept, Error(Errc::shard_unavailable, "closing", Outcome::transient));
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->outcome, Outcome::transient);
  fwd::keep_most_uncertain(kept, Error(Errc::unavailable, "lost", Outcome::uncertain));
  EXPECT_EQ(kept->outcome, Outcome::uncertain);
  EXPECT_EQ(kept->message, "lost");
  // Once uncertain, a later transient or definite answer does not hide it; among equals
  // the first is kept.
  fwd::keep_most_uncertain(kept, Error(Errc::shard_unavailable, "closing too", Outcome::transient));
  fwd::keep_most_uncertain(kept, Error(Errc::timeout, "second uncertain", Outcome::uncertain));
  EXPECT_EQ(kept->message, "lost");
}

TEST(Forwarding, codec_round_trips) {
  FetchResult f;
  f.batches = {"abc", std::string("\0\1", 2)};
  f.next_offset = Offset{7};
  f.high_watermark = Offset{9};
  f.log_start = Offset{1};
  auto g = fwd::decode_fetch_result(fwd::encode_fetch_result(f));
  ASSERT_TRUE(g);
  EXPECT_EQ(g->batches, f.batches);
  EXPECT_EQ(g->next_offset.value(), 7u);
  EXPECT_EQ(g->high_watermark.value(), 9u);
  EXPECT_EQ(g->log_start.value(), 1u);
  auto enc = fwd::encode_fetch_result(f);
  EXPECT_FALSE(fwd::decode_fetch_result(enc.substr(0, enc.size() - 1)));  // truncated
  EXPECT_FALSE(fwd::decode_fetch_result(enc + "x"));                      // trailing bytes
  GroupDelivery d;
  d.batches = {"b"};
  d.records = {{Offset{3}, 2}};
  auto e = fwd::decode_delivery(fwd::encode_delivery(d));
  ASSERT_TRUE(e);
  EXPECT_EQ(e->records[0].offset.value(), 3u);
  EXPECT_EQ(e->records[0].delivery, 2u);
}
