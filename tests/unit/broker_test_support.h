// Shared by broker_test.cc and forwarding_test.cc: a scripted catalog, the catalog
// snapshots the tests start from, and small helpers. Internal linkage (an anonymous
// namespace): each test file gets its own copy.
#pragma once

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
#include "sluice/levels.h"
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
    ++registrations_;
    calls_.push_back("register_broker");
    return b;
  }
  BrokerRegistration last_registration() {
    std::lock_guard lk(mu_);
    return last_registration_;
  }
  int registrations() {
    std::lock_guard lk(mu_);
    return registrations_;
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
  std::atomic<bool> refuse_heartbeats{false};  // set by a test: heartbeats answer conflict (fenced)
  Result<void> heartbeat_broker(NodeId) override {
    if (refuse_heartbeats) return Error(Errc::conflict, "scripted: this broker is fenced");
    return {};
  }
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
    {
      // hold_list_brokers: the call waits, as on a metadata store that does not answer.
      std::unique_lock lk(hold_mu_);
      ++list_brokers_calls_;
      hold_cv_.wait(lk, [&] { return !hold_list_brokers_; });
    }
    std::lock_guard lk(mu_);
    return brokers;
  }
  void hold_list_brokers(bool on) {
    {
      std::lock_guard lk(hold_mu_);
      hold_list_brokers_ = on;
    }
    hold_cv_.notify_all();
  }
  int list_brokers_calls() {
    std::lock_guard lk(hold_mu_);
    return list_brokers_calls_;
  }
  // on_update answers it when set (not_supported otherwise); called without the lock.
  std::function<Result<Assignment>(const ShardUpdate&)> on_update;
  Result<Assignment> update_shard(const ShardUpdate& u) override {
    {
      std::lock_guard lk(mu_);
      updates.push_back(u);
      calls_.push_back("update_shard");
    }
    return on_update ? on_update(u) : no();
  }
  // register_broker and update_shard, in the order they were called.
  std::vector<std::string> calls() {
    std::lock_guard lk(mu_);
    return calls_;
  }
  // on_finalize answers it when set (not_supported otherwise).
  std::function<Result<FeatureInfo>(const std::string&)> on_finalize;
  Result<FeatureInfo> finalize_feature(const std::string& name) override {
    if (on_finalize) return on_finalize(name);
    return no();
  }
  Result<std::vector<Tombstone>> list_tombstones() override { return no(); }

 private:
  std::mutex mu_;
  CatalogSnapshot snap_;
  std::function<void()> resync_;
  std::function<void(const ChangeEvent&)> on_change_;
  BrokerRegistration last_registration_;
  int registrations_ = 0;
  std::vector<std::string> calls_;
  std::mutex hold_mu_;
  std::condition_variable hold_cv_;
  bool hold_list_brokers_ = false;
  int list_brokers_calls_ = 0;
};

// The catalog holding K at `inc`, shard 0 led by node 1 (the test host's id).
inline CatalogSnapshot catalog_with(std::uint64_t seq, std::uint64_t inc, std::optional<std::uint64_t> tombstone = {}) {
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

// Broker 1 (heartbeats every 10 minutes); `tune` changes its options further.
inline std::unique_ptr<BrokerRuntime> make_broker(sluice::testing::TestHost& host, ScriptedCatalog& cat, StorageEngine& storage,
                                           std::shared_ptr<PeerDirectory> peers = nullptr,
                                           const std::function<void(BrokerOptions&)>& tune = {}) {
  NodeInfo info;
  info.node_id = NodeId{1};
  BrokerOptions opts;
  opts.heartbeat_interval_ms = 600000;
  opts.peer_address = "127.0.0.1:7902";
  opts.peers = std::move(peers);
  if (tune) tune(opts);
  return std::make_unique<BrokerRuntime>(info, cat, &storage, opts, host);
}

// The catalog's delete of K's incarnation I1 (as catalog_with(10, I1) holds it), change 11.
inline ChangeEvent deleted_at_11(const StreamInfo& info) {
  ChangeEvent ev{};
  ev.kind = ChangeEvent::Kind::stream_deleted;
  ev.seq = ChangeSeq{11};
  ev.stream = info;
  ev.assignments = catalog_with(10, I1).assignments;
  ev.tombstone = Tombstone{K, Incarnation{I1}, ChangeSeq{11}};
  return ev;
}

inline bool eventually(const std::function<bool()>& cond) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return cond();
}

inline bool held_on_disk(StorageEngine& storage, std::uint64_t inc) {
  auto refs = storage.list_on_disk();
  if (!refs) return false;
  for (const auto& r : *refs)
    if (r.stream == K && r.incarnation == Incarnation{inc}) return true;
  return false;
}

// "served", "conflict" (refused), or the error.
inline std::string fetch_answer(BrokerRuntime& b) {
  auto r = b.fetch(K, ShardIndex{0}, Offset{0}, 10, 1 << 20);
  if (r) return "served";
  return r.error().code == Errc::conflict ? "conflict" : r.error().to_string();
}

}  // namespace
