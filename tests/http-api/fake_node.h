// An in-memory sluice::Node for http-api tests: a map of streams, one vector of records
// per shard, offsets assigned on publish, notify_when_beyond callbacks stored and fired
// on publish. Every call is counted so tests can assert the Node was never reached.
#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <condition_variable>
#include <map>
#include <set>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "sluice/catalog_rules.h"
#include "sluice/levels.h"
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
    StreamInfo s;
    std::function<void(const StreamKey&)> hook;
    {
      std::lock_guard lk(mu_);
      ++calls_;
      if (streams_.count(key)) return Error(Errc::already_exists, "stream '" + key.to_string() + "' exists");
      ++seq_;
      s = streams_[key] = StreamInfo{key, Incarnation{distinct_incarnations ? seq_ : 0}, spec, ChangeSeq{seq_}, 0};
      hook = std::exchange(after_next_create_stream, nullptr);
    }
    if (hook) hook(key);
    return s;
  }
  // Creates give incarnation = the create's sequence (a delete and create is another
  // stream); false (the default): every stream is incarnation 0, as before the feature.
  bool distinct_incarnations = false;
  // Runs once, right after the next stream is created (outside the lock): a test's race.
  std::function<void(const StreamKey&)> after_next_create_stream;
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
  // Caches: enough for a CacheStore (create and read; incarnation = the create's sequence).
  Result<CacheInfo> create_cache(const StreamKey& key, const CacheSpec& spec) override {
    std::lock_guard lk(mu_);
    ++calls_;
    if (caches_.count(key)) return Error(Errc::already_exists, "cache '" + key.to_string() + "' exists");
    const ChangeSeq seq{++seq_};
    return caches_[key] = CacheInfo{key, Incarnation{seq.value()}, spec, seq};
  }
  Result<CacheInfo> delete_cache(const StreamKey& key) override {
    std::lock_guard lk(mu_);
    ++calls_;
    auto it = caches_.find(key);
    if (it == caches_.end()) return Error(Errc::not_found, "cache '" + key.to_string() + "' not found");
    auto c = it->second;
    caches_.erase(it);
    return c;
  }
  Result<CacheInfo> get_cache(const StreamKey& key) override {
    std::lock_guard lk(mu_);
    ++calls_;
    auto it = caches_.find(key);
    if (it == caches_.end()) return Error(Errc::not_found, "cache '" + key.to_string() + "' not found");
    return it->second;
  }

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
  std::map<StreamKey, CacheInfo> caches_;
  FeatureInfo feature_{"stream_incarnations", MetadataLevel{10}, false, ChangeSeq{0}, {NodeId{7}}, {}};
};

class FakeNode : public Node {
 public:
  struct StoredRecord {
    std::optional<std::string> key;
    std::string value;
    std::string headers;
    std::int64_t timestamp_ms;
    // An idempotent producer's batch is fetched as it was published (one header, its
    // producer id and sequence); other records in batches of up to 3.
    std::uint64_t producer_id = 0, producer_seq = 0, batch_base = 0, batch_count = 0;
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
  // A broker whose catalog feed has not applied the streams yet: stream() (this broker's
  // applied view) answers not_found while the catalog has them.
  std::atomic<bool> lagging{false};
  Result<StreamInfo> stream(const StreamKey& key) override {
    if (lagging) return Error(Errc::not_found, "stream " + key.to_string() + " does not exist here (not applied yet)");
    return catalog_.get_stream(key);
  }

  // Caps every shard's high watermark (a new leader whose followers have not fetched yet:
  // its log holds acknowledged records it does not yet show); nullopt lifts the cap and
  // fires the waits it held.
  void cap_high_watermark(std::optional<std::uint64_t> cap) {
    std::vector<std::function<void()>> fire;
    {
      std::lock_guard lk(mu_);
      hwm_cap_ = cap;
      for (auto it = notifies_.begin(); it != notifies_.end();) {
        if (visible(shards_[{it->key, it->shard}]) > it->offset) {
          fire.push_back(std::move(it->cb));
          it = notifies_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (auto& f : fire) f();
  }
  // The next publish is held: neither applied nor answered until release_held() (which
  // applies it then, as a leader would take a batch that arrives late).
  void hold_next_publish() {
    std::lock_guard lk(mu_);
    hold_next_ = true;
  }
  // The next `n` fetches fail with `e` (a peer lost mid-call, say) and read nothing.
  void fail_next_fetches(int n, Error e) {
    std::lock_guard lk(mu_);
    failing_fetches_ = n;
    fetch_error_ = std::move(e);
  }
  int failing_fetches() {
    std::lock_guard lk(mu_);
    return failing_fetches_;
  }
  // Fetches that asked for offset 0 (an index built from the log start).
  int fetches_from_start() {
    std::lock_guard lk(mu_);
    return fetches_from_start_;
  }
  std::size_t held_publishes() {
    std::lock_guard lk(mu_);
    return held_.size();
  }
  void release_held() {
    std::vector<std::function<void()>> go;
    {
      std::lock_guard lk(mu_);
      go.swap(held_);
    }
    for (auto& f : go) f();
  }

  void publish(const StreamKey& key, const std::vector<PublishRecord>& records,
               const PublishOptions& opts, PublishCallback cb) override {
    ++calls_;
    {
      std::lock_guard lk(mu_);
      last_producer_ = {opts.producer_id, opts.sequence};
      if (hold_next_) {
        hold_next_ = false;
        // Copies: the caller's records may not outlive this call.
        auto owned = std::make_shared<std::vector<std::array<std::string, 2>>>();
        std::vector<std::optional<std::uint32_t>> shards;
        std::vector<std::int64_t> stamps;
        std::vector<bool> keyed;
        for (auto& r : records) {
          owned->push_back({r.key ? std::string(*r.key) : std::string(), std::string(r.value)});
          shards.push_back(r.shard);
          stamps.push_back(r.timestamp_ms);
          keyed.push_back(r.key.has_value());
        }
        held_.push_back([this, key, owned, shards, stamps, keyed, opts, cb = std::move(cb)]() mutable {
          std::vector<PublishRecord> again(owned->size());
          for (std::size_t i = 0; i < again.size(); ++i) {
            if (keyed[i]) again[i].key = (*owned)[i][0];
            again[i].value = (*owned)[i][1];
            again[i].shard = shards[i];
            again[i].timestamp_ms = stamps[i];
          }
          apply_publish(key, again, opts, std::move(cb));
        });
        return;
      }
    }
    apply_publish(key, records, opts, std::move(cb));
  }

  void apply_publish(const StreamKey& key, const std::vector<PublishRecord>& records,
                     const PublishOptions& opts, PublishCallback cb) {
    const AckMode ack = opts.ack;
    std::vector<PublishedRecord> out;
    std::vector<std::function<void()>> fire;
    {
      auto s = catalog_.get_stream(key);
      if (!s) return cb(s.error());
      std::lock_guard lk(mu_);
      last_ack_ = ack;
      // Idempotent producers, as storage.h says, for a batch to one shard: the next
      // sequence is appended; one already taken answers the batch that took it (its base
      // and count, whatever this batch holds); any other is a gap.
      if (opts.producer_id != 0 && !records.empty()) {
        const std::uint32_t shard = records.front().shard ? *records.front().shard : 0;
        auto& taken = producers_[{key, shard, opts.producer_id}];
        if (opts.sequence < taken.size()) {
          const auto [base, count] = taken[opts.sequence];
          for (std::size_t i = 0; i < records.size(); ++i)
            out.push_back({ShardIndex{shard}, Offset{base + std::min<std::uint64_t>(i, count - 1)}});
          cb(std::move(out));
          return;
        }
        if (opts.sequence > taken.size())
          return cb(Error(Errc::sequence_gap, "expected sequence " + std::to_string(taken.size())));
        taken.emplace_back(shards_[{key, shard}].size(), records.size());
      }
      const std::uint64_t batch_base = records.empty() ? 0 : shards_[{key, records.front().shard ? *records.front().shard : 0}].size();
      for (auto& r : records) {
        const std::uint32_t shard = r.shard ? *r.shard : 0;
        if (shard >= s->spec.shards) return cb(Error(Errc::invalid_argument, "no such shard"));
        auto& v = shards_[{key, shard}];
        v.push_back({r.key ? std::optional<std::string>(std::string(*r.key)) : std::nullopt,
                     std::string(r.value), std::string(r.headers),
                     r.timestamp_ms ? r.timestamp_ms : 1000});
        if (opts.producer_id != 0)
          v.back().producer_id = opts.producer_id, v.back().producer_seq = opts.sequence,
          v.back().batch_base = batch_base, v.back().batch_count = records.size();
        out.push_back({ShardIndex{shard}, Offset{v.size() - 1}});
        for (auto it = notifies_.begin(); it != notifies_.end();) {
          if (it->key == key && it->shard == shard && visible(v) > it->offset) {
            fire.push_back(std::move(it->cb));
            it = notifies_.erase(it);
          } else {
            ++it;
          }
        }
      }
    }
    {
      // A compaction on the leader trims the log past this batch before its writer answers.
      std::lock_guard lk(mu_);
      if (trim_after_next_publish_) {
        trim_after_next_publish_ = false;
        const std::uint32_t shard = records.empty() || !records.front().shard ? 0 : *records.front().shard;
        log_start_[{key, shard}] = shards_[{key, shard}].size();
      }
    }
    // Like storage: callbacks run on "another" thread; here, the publishing thread.
    for (auto& f : fire) f();
    cb(std::move(out));
  }
  // The next publish's shard is trimmed to its end right after it is appended (its records,
  // and everything before, readable no more: offset_out_of_range).
  void trim_after_next_publish() {
    std::lock_guard lk(mu_);
    trim_after_next_publish_ = true;
  }
  std::size_t stored_total() {  // records appended, in every shard of every stream
    std::lock_guard lk(mu_);
    std::size_t n = 0;
    for (const auto& [k, v] : shards_) n += v.size();
    return n;
  }

  // A fetch of a shard the fake says another broker leads (set_leader(.., false)) waits
  // until unblock_remote_fetches(), as a forwarded read waits for the leader; counted.
  void block_remote_fetches() {
    std::lock_guard lk(mu_);
    block_remote_ = true;
  }
  void unblock_remote_fetches() {
    {
      std::lock_guard lk(mu_);
      block_remote_ = false;
    }
    remote_cv_.notify_all();
  }
  int blocked_remote_fetches() {
    std::lock_guard lk(mu_);
    return blocked_remote_;
  }

  Result<FetchResult> fetch(const StreamKey& key, ShardIndex shard, Offset from,
                            std::uint32_t max_records, std::size_t) override {
    ++calls_;
    std::unique_lock lk(mu_);
    if (block_remote_ && !local_) {
      ++blocked_remote_;
      remote_cv_.wait(lk, [&] { return !block_remote_; });
    }
    if (from.value() == 0) ++fetches_from_start_;
    if (failing_fetches_ > 0) {
      --failing_fetches_;
      return fetch_error_;
    }
    auto& v = shards_[{key, shard.value()}];
    if (from.value() > visible(v)) return Error(Errc::invalid_argument, "offset beyond the end");
    const std::uint64_t log_start = log_start_[{key, shard.value()}];
    if (from.value() < log_start)
      return Error(Errc::offset_out_of_range, "offset " + std::to_string(from.value()) + " is below the log start");
    FetchResult fr;
    fr.high_watermark = Offset{visible(v)};
    fr.log_start = Offset{log_start};
    // Batches of up to 3 records aligned at multiples of 3, so the first batch may start
    // before `from` (readers must skip).
    std::uint64_t start = from.value() / 3 * 3;
    if (from.value() < v.size() && v[from.value()].producer_id != 0) start = v[from.value()].batch_base;
    std::uint64_t end = std::min<std::uint64_t>(visible(v), from.value() + max_records);
    while (start < end) {
      BatchBuilder b;
      std::uint64_t stop = std::min<std::uint64_t>(start / 3 * 3 + 3, v.size());
      if (v[start].producer_id != 0) {
        stop = v[start].batch_base + v[start].batch_count;
        b.set_producer(v[start].producer_id, v[start].producer_seq);
      } else {
        for (std::uint64_t i = start; i < stop; ++i)
          if (v[i].producer_id != 0) stop = i;  // a producer's batch starts there
      }
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
    st.log_start = Offset{log_start_[{key, shard.value()}]};
    st.high_watermark = Offset{visible(shards_[{key, shard.value()}])};
    st.log_end = Offset{shards_[{key, shard.value()}].size()};
    return st;
  }
  Result<std::uint64_t> notify_when_beyond(const StreamKey& key, ShardIndex shard, Offset offset,
                                           std::function<void()> cb) override {
    ++calls_;
    {
      std::lock_guard lk(mu_);
      if (visible(shards_[{key, shard.value()}]) <= offset.value()) {
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
  // With an incarnation: refused (conflict) unless the catalog's stream is that one.
  Result<void> pinned(const StreamKey& key, std::optional<Incarnation> incarnation) {
    if (!incarnation) return {};
    auto si = catalog_.get_stream(key);
    if (!si) return si.error();
    if (si->incarnation != *incarnation) return Error(Errc::conflict, "stream " + key.to_string() + " is another incarnation now");
    return {};
  }
  Result<GroupDelivery> group_fetch(const StreamKey& key, ShardIndex shard, const std::string& group,
                                    std::uint32_t max_records, const GroupOptions&,
                                    std::optional<Incarnation> incarnation = std::nullopt) override {
    ++calls_;
    if (auto p = pinned(key, incarnation); !p) return p.error();
    std::unique_lock lk(mu_);
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
    if (after_group_fetch_) {
      auto hook = std::move(after_group_fetch_);
      after_group_fetch_ = nullptr;
      lk.unlock();
      hook();  // once, outside the lock: it may publish
    }
    return d;
  }
  // Runs `f` once, right after the next group fetch has read (a publish racing a poll).
  void after_next_group_fetch(std::function<void()> f) {
    std::lock_guard lk(mu_);
    after_group_fetch_ = std::move(f);
  }
  Result<void> group_ack(const StreamKey& key, ShardIndex shard, const std::string& group,
                         const std::vector<Offset>& offsets,
                         std::optional<Incarnation> incarnation = std::nullopt) override {
    ++calls_;
    if (auto p = pinned(key, incarnation); !p) return p.error();
    std::lock_guard lk(mu_);
    auto& g = groups_[{group, shard.value()}];
    for (auto o : offsets)
      if (!g.outstanding.count(o.value()))
        return Error(Errc::invalid_argument, "offset " + std::to_string(o.value()) + " is not outstanding");
    for (auto o : offsets) g.outstanding.erase(o.value());
    return {};
  }
  Result<void> group_nack(const StreamKey& k, ShardIndex shard, const std::string& group,
                          const std::vector<Offset>& offsets,
                          std::optional<Incarnation> incarnation = std::nullopt) override {
    return group_ack(k, shard, group, offsets, incarnation);
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
                                            Offset to, std::optional<Incarnation>) override {
    return to.value() - from.value();
  }

 private:
  struct FakeGroup {
    std::uint64_t next = 0;
    std::set<std::uint64_t> outstanding;
  };
  std::map<std::pair<std::string, std::uint32_t>, FakeGroup> groups_;
  std::pair<std::uint64_t, std::uint64_t> last_producer_{0, 0};
  // (stream, shard, producer) -> the (base, count) of each sequence it took.
  std::map<std::tuple<StreamKey, std::uint32_t, std::uint64_t>, std::vector<std::pair<std::uint64_t, std::uint64_t>>>
      producers_;
  bool hold_next_ = false;
  bool block_remote_ = false;
  int blocked_remote_ = 0;
  std::condition_variable remote_cv_;
  std::optional<std::uint64_t> hwm_cap_;
  std::uint64_t visible(const std::vector<StoredRecord>& v) const {
    return hwm_cap_ ? std::min<std::uint64_t>(*hwm_cap_, v.size()) : v.size();
  }
  std::vector<std::function<void()>> held_;
  int failing_fetches_ = 0;
  int fetches_from_start_ = 0;
  std::function<void()> after_group_fetch_;
  Error fetch_error_{Errc::internal, "unset"};
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
  std::map<std::pair<StreamKey, std::uint32_t>, std::uint64_t> log_start_;  // trimmed below
  bool trim_after_next_publish_ = false;
  std::vector<Notify> notifies_;
};

}  // namespace sluice::testing
