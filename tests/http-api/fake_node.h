// An in-memory sluice::Node for http-api tests: a map of streams, one vector of records
// per shard, offsets assigned on publish, notify_when_beyond callbacks stored and fired
// on publish. Every call is counted so tests can assert the Node was never reached.
#pragma once

#include <atomic>
#include <functional>
#include <map>
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

  void publish(const StreamKey& key, const std::vector<PublishRecord>& records, AckMode ack,
               PublishCallback cb) override {
    ++calls_;
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
  Result<void> notify_when_beyond(const StreamKey& key, ShardIndex shard, Offset offset,
                                  std::function<void()> cb) override {
    ++calls_;
    {
      std::lock_guard lk(mu_);
      if (shards_[{key, shard.value()}].size() <= offset.value()) {
        notifies_.push_back({key, shard.value(), offset.value(), std::move(cb)});
        return {};
      }
    }
    cb();
    return {};
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

  AckMode last_ack() {
    std::lock_guard lk(mu_);
    return last_ack_;
  }

 private:
  struct Notify {
    StreamKey key;
    std::uint32_t shard;
    std::uint64_t offset;
    std::function<void()> cb;
  };
  std::atomic<int> calls_{0};
  FakeCatalog catalog_;
  std::mutex mu_;
  bool ready_ = true;
  std::string why_;
  AckMode last_ack_ = AckMode::leader;
  std::map<std::pair<StreamKey, std::uint32_t>, std::vector<StoredRecord>> shards_;
  std::vector<Notify> notifies_;
};

}  // namespace sluice::testing
