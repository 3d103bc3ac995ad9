// An in-memory sluice::Node for http-api tests: a map of streams, one vector of records
// per shard, offsets assigned on publish, notify_when_beyond callbacks stored and fired
// on publish. Every call is counted so tests can assert the Node was never reached.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <set>
#include <mutex>
#include <string>
#include <vector>

#include "sluice/catalog_rules.h"
#include "sluice/names.h"
#include "sluice/node.h"
#include "sluice/record_batch.h"

namespace sluice::testing {

class FakeCatalog : public MetadataStore {
 public:
  explicit FakeCatalog(std::atomic<int>& calls) : calls_(calls) {}

  Result<void> start() override { return {}; }
  void stop() override {}
  MetadataStatus status() override { return {"fake", "cluster-1", true, "ok", kBuildMetadataLevel, ChangeSeq{seq_}}; }

  Result<TenantInfo> create_tenant(const std::string& name) override {
    std::lock_guard lk(mu_);
    ++calls_;
    if (tenants_.count(name)) return Error(Errc::already_exists, "tenant '" + name + "' exists");
    return tenants_[name] = TenantInfo{name, ChangeSeq{++seq_}};
  }
  Result<void> delete_tenant(const std::string& name) override {
    std::lock_guard lk(mu_);
    ++calls_;
    if (!tenants_.erase(name)) return Error(Errc::not_found, "tenant '" + name + "' not found");
    return {};
  }
  Result<std::vector<TenantInfo>> list_tenants() override {
    std::lock_guard lk(mu_);
    ++calls_;
    std::vector<TenantInfo> v;
    for (auto& [k, t] : tenants_) v.push_back(t);
    return v;
  }
  Result<NamespaceInfo> create_namespace(const std::string& tenant, const std::string& name) override {
    std::lock_guard lk(mu_);
    ++calls_;
    if (!tenants_.count(tenant)) return Error(Errc::not_found, "tenant '" + tenant + "' not found");
    auto k = tenant + "/" + name;
    if (namespaces_.count(k)) return Error(Errc::already_exists, "namespace exists");
    return namespaces_[k] = NamespaceInfo{tenant, name, ChangeSeq{++seq_}};
  }
  Result<void> delete_namespace(const std::string& tenant, const std::string& name) override {
    std::lock_guard lk(mu_);
    ++calls_;
    if (!namespaces_.erase(tenant + "/" + name)) return Error(Errc::not_found, "namespace not found");
    return {};
  }
  Result<std::vector<NamespaceInfo>> list_namespaces(const std::string& tenant) override {
    std::lock_guard lk(mu_);
    ++calls_;
    std::vector<NamespaceInfo> v;
    for (auto& [k, n] : namespaces_)
      if (n.tenant == tenant) v.push_back(n);
    return v;
  }
  Result<StreamInfo> create_stream(const StreamKey& key, const StreamSpec& spec) override {
    std::lock_guard lk(mu_);
    ++calls_;
    if (streams_.count(key)) return Error(Errc::already_exists, "stream '" + key.to_string() + "' exists");
    StreamInfo s{key, Incarnation{0}, spec, ChangeSeq{++seq_}, 0};
    return streams_[key] = s;
  }
  Result<StreamInfo> delete_stream(const StreamKey& key) override {
    std::lock_guard lk(mu_);
    ++calls_;
    auto it = streams_.find(key);
    if (it == streams_.end()) return Error(Errc::not_found, "stream '" + key.to_string() + "' not found");
    auto s = it->second;
    streams_.erase(it);
    return s;
  }
  Result<StreamInfo> get_stream(const StreamKey& key) override {
    std::lock_guard lk(mu_);
    ++calls_;
    auto it = streams_.find(key);
    if (it == streams_.end()) return Error(Errc::not_found, "stream '" + key.to_string() + "' not found");
    return it->second;
  }
  Result<std::vector<StreamInfo>> list_streams(const std::string& tenant, const std::string& ns) override {
    std::lock_guard lk(mu_);
    ++calls_;
    std::vector<StreamInfo> v;
    for (auto& [k, s] : streams_)
      if (k.tenant == tenant && k.ns == ns) v.push_back(s);
    return v;
  }
  Result<CatalogSnapshot> snapshot() override { return Error(Errc::internal, "not in fake"); }

  // Fleet: one feature; finalize refused while `refuse_finalize_` is set.
  Result<BrokerInfo> register_broker(const BrokerRegistration& r) override {
    ++calls_;
    return BrokerInfo{r.id, r.address, r.directory_id, r.version, r.features, true, ChangeSeq{1}};
  }
  Result<void> heartbeat_broker(NodeId) override { return {}; }
  Result<void> unregister_broker(NodeId) override { return {}; }
  Result<std::vector<BrokerInfo>> list_brokers() override {
    ++calls_;
    return std::vector<BrokerInfo>{{NodeId{7}, "127.0.0.1:1", "d", "v", {"stream_incarnations"}, true, ChangeSeq{1}}};
  }
  Result<std::vector<FeatureInfo>> list_features() override {
    ++calls_;
    std::lock_guard lk(mu_);
    return std::vector<FeatureInfo>{feature_};
  }
  Result<FeatureInfo> finalize_feature(const std::string& name) override {
    ++calls_;
    std::lock_guard lk(mu_);
    if (name != feature_.name) return Error(Errc::not_found, "unknown feature '" + name + "'");
    if (feature_.finalized) return feature_;
    if (!refuse_reason.empty()) return Error(Errc::conflict, refuse_reason);
    feature_.finalized = true;
    feature_.finalized_seq = ChangeSeq{++seq_};
    return feature_;
  }
  Result<std::vector<Tombstone>> list_tombstones() override {
    ++calls_;
    return std::vector<Tombstone>{{StreamKey{"t", "n", "gone"}, Incarnation{42}, ChangeSeq{9}}};
  }
  std::string refuse_reason;
  std::unique_ptr<WatchHandle> watch(ChangeSeq, std::function<void(const ChangeEvent&)>,
                                     std::function<void()>) override {
    return nullptr;
  }

 private:
  std::atomic<int>& calls_;
  std::mutex mu_;
  std::uint64_t seq_ = 0;
  std::map<std::string, TenantInfo> tenants_;
  std::map<std::string, NamespaceInfo> namespaces_;
  std::map<StreamKey, StreamInfo> streams_;
  FeatureInfo feature_{"stream_incarnations", MetadataLevel{10}, false, ChangeSeq{0}, {NodeId{7}}, {}};
};

class FakeNode : public Node {
 public:
  struct StoredRecord {
    std::optional<std::string> key;
    std::string value;
    std::string headers;
    std::int64_t timestamp_ms;
  };

  FakeNode() : catalog_(calls_) {}

  // Every Node or catalog call increments this.
  int calls() const { return calls_.load(); }
  void set_ready(bool r, std::string why = "") {
    std::lock_guard lk(mu_);
    ready_ = r;
    why_ = std::move(why);
  }
  // Forwarding (Node::leader_address, Node::serves_locally): what the fake says of every shard.
  void set_leader(std::string address, bool local) {
    std::lock_guard lk(mu_);
    leader_ = std::move(address);
    local_ = local;
  }
  std::string leader_address(const StreamKey&, ShardIndex) override {
    std::lock_guard lk(mu_);
    return leader_;
  }
  bool serves_locally(const StreamKey&, ShardIndex) override {
    std::lock_guard lk(mu_);
    return local_;
  }
  std::size_t pending_notifies() {
    std::lock_guard lk(mu_);
    return notifies_.size();
  }
  // Records of one shard, as published.
  std::vector<StoredRecord> records(const StreamKey& k, std::uint32_t shard) {
    std::lock_guard lk(mu_);
    return shards_[{k, shard}];
  }

  NodeInfo info() override {
    ++calls_;
    return NodeInfo{"cluster-1", "fake", NodeId{7}, "dir-1", {"broker", "controller"}, "0.1.0",
                    kBuildMetadataLevel};
  }
  bool ready(std::string* why) override {
    ++calls_;
    std::lock_guard lk(mu_);
    if (!ready_ && why) *why = why_;
    return ready_;
  }
  std::string metrics_text() override {
    ++calls_;
    return "# TYPE fake_metric counter\nfake_metric 1\n";
  }
  MetadataStore& catalog() override { return catalog_; }

  Result<StreamInfo> create_stream(const StreamKey& key, const StreamSpec& spec) override {
    if (auto r = validate_stream_key(key); !r) return r.error();
    if (auto r = validate_stream_spec(spec); !r) return r.error();
    return catalog_.create_stream(key, spec);  // counts the call
  }
  Result<StreamInfo> stream(const StreamKey& key) override { return catalog_.get_stream(key); }

  void publish(const StreamKey& key, const std::vector<PublishRecord>& records,
               const PublishOptions& opts, PublishCallback cb) override {
    ++calls_;
    const AckMode ack = opts.ack;
    {
      std::lock_guard lk(mu_);
      last_producer_ = {opts.producer_id, opts.sequence};
    }
    std::vector<PublishedRecord> out;
    std::vector<std::function<void()>> fire;
    {
      auto s = catalog_.get_stream(key);
      if (!s) return cb(s.error());
      std::lock_guard lk(mu_);
      last_ack_ = ack;
      for (auto& r : records) {
        const std::uint32_t shard = r.shard ? *r.shard : 0;
        if (shard >= s->spec.shards) return cb(Error(Errc::invalid_argument, "no such shard"));
        auto& v = shards_[{key, shard}];
        v.push_back({r.key ? std::optional<std::string>(std::string(*r.key)) : std::nullopt,
                     std::string(r.value), std::string(r.headers),
                     r.timestamp_ms ? r.timestamp_ms : 1000});
        out.push_back({ShardIndex{shard}, Offset{v.size() - 1}});
        for (auto it = notifies_.begin(); it != notifies_.end();) {
          if (it->key == key && it->shard == shard && v.size() > it->offset) {
            fire.push_back(std::move(it->cb));
            it = notifies_.erase(it);
          } else {
            ++it;
          }
        }
      }
    }
    // Like storage: callbacks run on "another" thread; here, the publishing thread.
    for (auto& f : fire) f();
    cb(std::move(out));
  }

  Result<FetchResult> fetch(const StreamKey& key, ShardIndex shard, Offset from,
                            std::uint32_t max_records, std::size_t) override {
    ++calls_;
    std::lock_guard lk(mu_);
    auto& v = shards_[{key, shard.value()}];
    if (from.value() > v.size()) return Error(Errc::invalid_argument, "offset beyond the end");
    FetchResult fr;
    fr.high_watermark = Offset{v.size()};
    fr.log_start = Offset{0};
    // Batches of up to 3 records aligned at multiples of 3, so the first batch may start
    // before `from` (readers must skip).
    std::uint64_t start = from.value() / 3 * 3;
    std::uint64_t end = std::min<std::uint64_t>(v.size(), from.value() + max_records);
    while (start < end) {
      BatchBuilder b;
      const std::uint64_t stop = std::min<std::uint64_t>(start / 3 * 3 + 3, v.size());
      for (std::uint64_t i = start; i < stop; ++i)
        b.add(v[i].key ? std::optional<std::string_view>(*v[i].key) : std::nullopt, v[i].value,
              v[i].headers, v[i].timestamp_ms);
      std::string batch = b.finish();
      restamp_batch(batch.data(), start, 0);
      fr.batches.push_back(std::move(batch));
      start = stop;
    }
    fr.next_offset = Offset{std::max<std::uint64_t>(from.value(), start)};
    return fr;
  }
  Result<ShardStats> shard_stats(const StreamKey& key, ShardIndex shard) override {
    ++calls_;
    std::lock_guard lk(mu_);
    ShardStats st;
    st.log_start = Offset{0};
    st.high_watermark = Offset{shards_[{key, shard.value()}].size()};
    return st;
  }
  Result<std::uint64_t> notify_when_beyond(const StreamKey& key, ShardIndex shard, Offset offset,
                                           std::function<void()> cb) override {
    ++calls_;
    {
      std::lock_guard lk(mu_);
      if (shards_[{key, shard.value()}].size() <= offset.value()) {
        const std::uint64_t h = ++last_handle_;
        notifies_.push_back({key, shard.value(), offset.value(), std::move(cb), h});
        return h;
      }
    }
    cb();
    return std::uint64_t{0};
  }
  void cancel_notify(const StreamKey&, ShardIndex, std::uint64_t handle) override {
    std::lock_guard lk(mu_);
    for (auto it = notifies_.begin(); it != notifies_.end(); ++it)
      if (it->handle == handle) {
        notifies_.erase(it);
        ++cancelled_;
        return;
      }
  }
  std::size_t cancelled() {
    std::lock_guard lk(mu_);
    return cancelled_;
  }
  Result<std::vector<ShardStatus>> shards(const StreamKey& key) override {
    auto s = catalog_.get_stream(key);
    if (!s) return s.error();
    std::vector<ShardStatus> out;
    std::lock_guard lk(mu_);
    for (std::uint32_t i = 0; i < s->spec.shards; ++i) {
      ShardStatus st{ShardIndex{i}, Incarnation{0}, Generation{1}, NodeId{7}, {NodeId{7}}, {}};
      st.stats.high_watermark = Offset{shards_[{key, i}].size()};
      out.push_back(st);
    }
    return out;
  }

  FakeCatalog& catalog_for_test() { return catalog_; }
  AckMode last_ack() {
    std::lock_guard lk(mu_);
    return last_ack_;
  }
  std::pair<std::uint64_t, std::uint64_t> last_producer() {
    std::lock_guard lk(mu_);
    return last_producer_;
  }

  // Groups: a minimal model. Delivers every stored record once per fetch round, tracks
  // what is outstanding, and refuses acks of anything else (as storage does).
  Result<GroupDelivery> group_fetch(const StreamKey& key, ShardIndex shard, const std::string& group,
                                    std::uint32_t max_records, const GroupOptions&) override {
    ++calls_;
    std::lock_guard lk(mu_);
    auto& g = groups_[{group, shard.value()}];
    auto& v = shards_[{key, shard.value()}];
    GroupDelivery d;
    BatchBuilder b;
    std::uint64_t first = g.next;
    while (g.next < v.size() && d.records.size() < max_records) {
      auto& r = v[g.next];
      b.add(r.key ? std::optional<std::string_view>(*r.key) : std::nullopt, r.value, r.headers, r.timestamp_ms);
      d.records.push_back({Offset{g.next}, 1});
      g.outstanding.insert(g.next);
      ++g.next;
    }
    if (!d.records.empty()) {
      std::string batch = b.finish();
      restamp_batch(batch.data(), first, 0);
      d.batches.push_back(std::move(batch));
    }
    return d;
  }
  Result<void> group_ack(const StreamKey&, ShardIndex shard, const std::string& group,
                         const std::vector<Offset>& offsets) override {
    ++calls_;
    std::lock_guard lk(mu_);
    auto& g = groups_[{group, shard.value()}];
    for (auto o : offsets)
      if (!g.outstanding.count(o.value()))
        return Error(Errc::invalid_argument, "offset " + std::to_string(o.value()) + " is not outstanding");
    for (auto o : offsets) g.outstanding.erase(o.value());
    return {};
  }
  Result<void> group_nack(const StreamKey& k, ShardIndex shard, const std::string& group,
                          const std::vector<Offset>& offsets) override {
    return group_ack(k, shard, group, offsets);
  }
  Result<std::vector<GroupPosition>> group_positions(const StreamKey&, const std::string& group) override {
    ++calls_;
    std::lock_guard lk(mu_);
    auto& g = groups_[{group, 0}];
    GroupPosition p;
    p.group = group;
    p.committed = Offset{g.next - g.outstanding.size()};
    p.outstanding = g.outstanding.size();
    return std::vector<GroupPosition>{p};
  }
  Result<std::vector<std::string>> groups(const StreamKey&) override {
    std::lock_guard lk(mu_);
    std::vector<std::string> out;
    for (auto& [k, g] : groups_) out.push_back(k.first);
    return out;
  }
  Result<FetchResult> dead_letters(const StreamKey&, ShardIndex, const std::string&, Offset,
                                   std::uint32_t, std::size_t) override {
    return FetchResult{};
  }
  Result<std::uint64_t> replay_dead_letters(const StreamKey&, ShardIndex, const std::string&, Offset from,
                                            Offset to) override {
    return to.value() - from.value();
  }

 private:
  struct FakeGroup {
    std::uint64_t next = 0;
    std::set<std::uint64_t> outstanding;
  };
  std::map<std::pair<std::string, std::uint32_t>, FakeGroup> groups_;
  std::pair<std::uint64_t, std::uint64_t> last_producer_{0, 0};
  std::uint64_t last_handle_ = 0;
  std::size_t cancelled_ = 0;
  struct Notify {
    StreamKey key;
    std::uint32_t shard;
    std::uint64_t offset;
    std::function<void()> cb;
    std::uint64_t handle = 0;
  };
  std::atomic<int> calls_{0};
  FakeCatalog catalog_;
  std::string leader_;
  bool local_ = true;
  std::mutex mu_;
  bool ready_ = true;
  std::string why_;
  AckMode last_ack_ = AckMode::leader;
  std::map<std::pair<StreamKey, std::uint32_t>, std::vector<StoredRecord>> shards_;
  std::vector<Notify> notifies_;
};

}  // namespace sluice::testing
