// The metadata conformance suite's fixture (conformance_test.cc, conformance_caches_test.cc):
// one backend instance per test, raft-meta or postgres-meta. See conformance_test.cc.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "all_features.h"
#include "pg_test_util.h"
#include "raft_meta_store.h"
#include "sluice/catalog_rules.h"
#include "sluice/features.h"
#include "test_host.h"

namespace sluice::conformance {

using sluice::testing::TestHost;
inline const std::string kInc(kStreamIncarnations);
inline const std::string kRepl(kReplicatedShards);
inline const std::string kReassign(kShardReassignment);
inline const std::string kCacheInc(kCacheIncarnations);
inline const std::string kCountersF(kCounters);

struct Options {
  bool hold_back_incarnations = false;  // a cluster bootstrapped without the finalize
  std::size_t change_retention = 0;     // 0: the backend's default
};

// One started store and its host; the store is destroyed first.
struct Instance {
  std::unique_ptr<TestHost> host;
  std::unique_ptr<MetadataStore> store;
  ~Instance() {
    if (store) store->stop();
    store.reset();
  }
};

struct Backend {
  std::string name;
  std::function<std::unique_ptr<Instance>(const Options&)> make;
};

inline void PrintTo(const Backend& b, std::ostream* os) { *os << b.name; }

inline std::unique_ptr<Instance> make_raft(const Options& o) {
  auto in = std::make_unique<Instance>();
  std::map<std::string, std::string> cfg = {{"raft.address", "127.0.0.1:0"},
                                            {"metadata.rpc_address", ""},
                                            {"metadata.timeout_ms", "30000"}};
  // Both backends also finalize cache_incarnations (level 14) and replicated_shards (16) at
  // bootstrap: held back alike.
  if (o.hold_back_incarnations)
    cfg["metadata.bootstrap_hold_back"] = sluice::testing::all_features_joined();
  in->host = std::make_unique<TestHost>(cfg);
  auto c = raft_meta::RaftMetaConfig::from_host(*in->host);
  if (o.change_retention) c.change_retention = o.change_retention;
  in->store = std::make_unique<raft_meta::RaftMetaStore>(*in->host, c);
  auto r = in->store->start();
  EXPECT_TRUE(r.ok()) << r.error().to_string();
  return in;
}

inline std::unique_ptr<Instance> make_postgres(const Options& o) {
  auto in = std::make_unique<Instance>();
  in->host = std::make_unique<TestHost>();
  auto c = pgtest::config(pgtest::fresh_schema("conf_" + pgtest::current_test_name()));
  if (o.hold_back_incarnations) c.bootstrap_hold_back = sluice::testing::all_features();
  if (o.change_retention) c.change_retention = static_cast<std::int64_t>(o.change_retention);
  if (c.url.empty()) c.start_timeout = std::chrono::milliseconds(1);  // already failed: say so fast
  in->store = std::make_unique<postgres_meta::PgMetaStore>(*in->host, c);
  auto r = in->store->start();
  EXPECT_TRUE(r.ok()) << r.error().to_string();
  return in;
}

class Conformance : public ::testing::TestWithParam<Backend> {
 protected:
  std::unique_ptr<Instance> make(const Options& o = {}) { return GetParam().make(o); }
  static StreamSpec spec(std::uint32_t shards = 1) {
    StreamSpec s;
    s.shards = shards;
    return s;
  }
  static void make_ns(MetadataStore& s) {
    ASSERT_TRUE(s.create_tenant("acme").ok());
    ASSERT_TRUE(s.create_namespace("acme", "prod").ok());
  }
  static BrokerRegistration broker(std::uint32_t id, bool with_incarnations) {
    BrokerRegistration b;
    b.id = NodeId{id};
    b.address = "127.0.0.1:" + std::to_string(9000 + id);
    b.directory_id = "dir-" + std::to_string(id);
    b.version = "test";
    if (with_incarnations) b.features = sluice::testing::all_features();
    return b;
  }
  static StreamSpec replicated(std::uint32_t shards, std::uint32_t rf, std::uint32_t min_insync) {
    StreamSpec s = spec(shards);
    s.replication_factor = rf;
    s.min_insync = min_insync;
    return s;
  }
  // The stream's assignments, by shard, from a snapshot.
  static std::vector<Assignment> assignments_of(MetadataStore& s, const StreamKey& key) {
    std::vector<Assignment> out;
    auto snap = s.snapshot();
    EXPECT_TRUE(snap.ok());
    if (!snap.ok()) return out;
    for (auto& a : snap->assignments)
      if (a.key == key) out.push_back(a);
    std::sort(out.begin(), out.end(), [](auto& x, auto& y) { return x.shard < y.shard; });
    return out;
  }
};

// Collects watch deliveries (they arrive on a backend thread).
struct Collector {
  std::mutex mu;
  std::vector<ChangeEvent> events;
  std::atomic<int> resyncs{0};
  std::function<void(const ChangeEvent&)> on_change() {
    return [this](const ChangeEvent& e) {
      std::lock_guard lk(mu);
      events.push_back(e);
    };
  }
  std::function<void()> on_resync() {
    return [this] { ++resyncs; };
  }
  std::vector<ChangeEvent> copy() {
    std::lock_guard lk(mu);
    return events;
  }
  std::size_t size() {
    std::lock_guard lk(mu);
    return events.size();
  }
};

inline const StreamKey kKey{"acme", "prod", "orders"};

}  // namespace sluice::conformance
