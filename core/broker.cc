#include "broker.h"

#include "sluice/metrics_text.h"

#include <chrono>
#include <sstream>

#include "partitioner.h"
#include "sluice/catalog_rules.h"
#include "sluice/features.h"
#include "sluice/names.h"
#include "sluice/record_batch.h"

namespace sluice::core {

namespace {
std::int64_t now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

}  // namespace

// Wraps the metadata store so that a create or delete answers only once this broker has
// applied it: the caller can publish right after a 201.
class BrokerRuntime::CatalogFacade final : public MetadataStore {
 public:
  CatalogFacade(BrokerRuntime& b, MetadataStore& inner) : b_(b), in_(inner) {}
  Result<void> start() override { return in_.start(); }
  void stop() override { in_.stop(); }
  MetadataStatus status() override { return in_.status(); }
  Result<TenantInfo> create_tenant(const std::string& name) override {
    if (auto v = validate_name(NameKind::tenant, name); !v) return v.error();
    return in_.create_tenant(name);
  }
  Result<void> delete_tenant(const std::string& name) override {
    if (auto v = validate_name(NameKind::tenant, name); !v) return v.error();
    return in_.delete_tenant(name);
  }
  Result<std::vector<TenantInfo>> list_tenants() override { return in_.list_tenants(); }
  Result<NamespaceInfo> create_namespace(const std::string& t, const std::string& n) override {
    if (auto v = validate_name(NameKind::tenant, t); !v) return v.error();
    if (auto v = validate_name(NameKind::ns, n); !v) return v.error();
    return in_.create_namespace(t, n);
  }
  Result<void> delete_namespace(const std::string& t, const std::string& n) override {
    if (auto v = validate_name(NameKind::tenant, t); !v) return v.error();
    if (auto v = validate_name(NameKind::ns, n); !v) return v.error();
    return in_.delete_namespace(t, n);
  }
  Result<std::vector<NamespaceInfo>> list_namespaces(const std::string& t) override {
    if (auto v = validate_name(NameKind::tenant, t); !v) return v.error();
    return in_.list_namespaces(t);
  }
  Result<StreamInfo> create_stream(const StreamKey& key, const StreamSpec& spec) override {
    return b_.create_stream(key, spec);
  }
  Result<StreamInfo> delete_stream(const StreamKey& key) override {
    if (auto v = validate_stream_key(key); !v) return v.error();
    auto r = in_.delete_stream(key);
    if (r && !b_.wait_applied(latest_seq(), b_.opts_.catalog_timeout_ms))
      return Error(Errc::timeout, "stream deleted in the catalog, but this broker has not applied it yet");
    return r;
  }
  Result<StreamInfo> get_stream(const StreamKey& key) override {
    if (auto v = validate_stream_key(key); !v) return v.error();
    return in_.get_stream(key);
  }
  Result<std::vector<StreamInfo>> list_streams(const std::string& t, const std::string& n) override {
    if (auto v = validate_name(NameKind::tenant, t); !v) return v.error();
    if (auto v = validate_name(NameKind::ns, n); !v) return v.error();
    return in_.list_streams(t, n);
  }
  Result<CatalogSnapshot> snapshot() override { return in_.snapshot(); }
  Result<BrokerInfo> register_broker(const BrokerRegistration& reg) override {
    return in_.register_broker(reg);
  }
  Result<void> heartbeat_broker(NodeId id) override { return in_.heartbeat_broker(id); }
  Result<void> unregister_broker(NodeId id) override { return in_.unregister_broker(id); }
  Result<std::vector<BrokerInfo>> list_brokers() override { return in_.list_brokers(); }
  Result<std::vector<FeatureInfo>> list_features() override { return in_.list_features(); }
  Result<FeatureInfo> finalize_feature(const std::string& name) override {
    auto r = in_.finalize_feature(name);
    if (r && !b_.wait_applied(latest_seq(), b_.opts_.catalog_timeout_ms))
      return Error(Errc::timeout, "feature finalized in the catalog, but this node has not applied it yet");
    return r;
  }
  Result<std::vector<Tombstone>> list_tombstones() override { return in_.list_tombstones(); }
  Result<CacheInfo> create_cache(const StreamKey& key, const CacheSpec& spec) override {
    return in_.create_cache(key, spec);
  }
  Result<CacheInfo> delete_cache(const StreamKey& key) override { return in_.delete_cache(key); }
  Result<CacheInfo> get_cache(const StreamKey& key) override { return in_.get_cache(key); }
  Result<std::vector<CacheInfo>> list_caches(const std::string& t, const std::string& n) override {
    return in_.list_caches(t, n);
  }
  Result<MembersView> list_members() override { return in_.list_members(); }
  Result<MemberInfo> join_member(const JoinRequest& req) override { return in_.join_member(req); }
  Result<void> remove_member(NodeId id) override { return in_.remove_member(id); }
  std::unique_ptr<WatchHandle> watch(ChangeSeq after, std::function<void(const ChangeEvent&)> on,
                                     std::function<void()> resync) override {
    return in_.watch(after, std::move(on), std::move(resync));
  }

 private:
  // The delete's own seq is not returned by the contract, so wait for whatever the store
  // has applied now (which includes the delete).
  ChangeSeq latest_seq() { return in_.status().applied; }

  BrokerRuntime& b_;
  MetadataStore& in_;
};

BrokerRuntime::BrokerRuntime(NodeInfo info, MetadataStore& catalog, StorageEngine* storage,
                             BrokerOptions opts, PluginHost& host)
    : info_(std::move(info)),
      catalog_(catalog),
      storage_(storage),
      opts_(std::move(opts)),
      host_(host),
      facade_(std::make_unique<CatalogFacade>(*this, catalog)) {}

BrokerRuntime::~BrokerRuntime() { stop(); }

Error BrokerRuntime::no_broker_role() const {
  return Error(Errc::unavailable, "node " + std::to_string(info_.node_id.value()) +
                                      " has no broker role: it holds no shards",
               Outcome::definite);
}

Result<void> BrokerRuntime::start() {
  control_ = std::thread([this] { control_loop(); });
  if (auto r = resync(); !r) return r;
  started_ = true;
  if (storage_) heartbeat_ = std::thread([this] { heartbeat_loop(); });
  return {};
}

void BrokerRuntime::stop() {
  {
    std::lock_guard lk(tasks_mu_);
    stopping_ = true;
  }
  tasks_cv_.notify_all();
  if (control_.joinable()) control_.join();
  if (heartbeat_.joinable()) heartbeat_.join();
  watch_.reset();  // after the joins: the control thread may have been resyncing
  // A stopping broker stays registered: its shards stay placed on it and are served again
  // when it comes back. It stops counting as serving once its heartbeats lapse
  // (broker.session_timeout_ms). Decommissioning is unregister_broker, an operator's act.
  registered_ = false;
  std::unique_lock lk(streams_mu_);
  if (storage_)
    for (auto& [key, st] : streams_)
      for (auto& s : st->shards)
        if (s) storage_->close_shard(s->ref());
  streams_.clear();
}

Result<void> BrokerRuntime::register_self() {
  BrokerRegistration reg;
  reg.id = info_.node_id;
  reg.address = opts_.advertised_address;
  reg.directory_id = info_.directory_id;
  reg.version = info_.version;
  reg.features = opts_.features;
  auto r = catalog_.register_broker(reg);
  if (!r) return r.error();
  registered_ = true;
  return {};
}

void BrokerRuntime::heartbeat_loop() {
  std::unique_lock lk(tasks_mu_);
  while (!tasks_cv_.wait_for(lk, std::chrono::milliseconds(opts_.heartbeat_interval_ms),
                             [&] { return stopping_; })) {
    lk.unlock();
    auto r = catalog_.heartbeat_broker(info_.node_id);
    if (!r && r.error().code == Errc::conflict) {
      // Refused while running: stop serving at once, then let the node exit.
      note_failure("the control plane refuses this broker: " + r.error().message);
      {
        std::unique_lock slk(streams_mu_);
        for (auto& [key, st] : streams_)
          for (auto& sh : st->shards)
            if (sh) storage_->close_shard(sh->ref());
        streams_.clear();
      }
      if (opts_.on_fenced) opts_.on_fenced(r.error().message);
      lk.lock();
      return;
    }
    if (!r && r.error().code == Errc::not_found) {
      // The control plane lost us (e.g. a restored catalog): register again.
      if (auto rr = register_self(); !rr)
        host_.log(LogLevel::error, "broker", "re-registration refused: " + rr.error().to_string());
    } else if (!r) {
      host_.log(LogLevel::warn, "broker", "heartbeat failed: " + r.error().to_string());
    }
    lk.lock();
  }
}

Result<void> BrokerRuntime::delete_data(const StreamKey& key, Incarnation up_to, const char* why) {
  if (!storage_) return {};
  auto r = storage_->delete_incarnations(key, up_to);
  if (!r) {
    note_failure("cannot delete data of " + key.to_string() + ": " + r.error().message);
    return r.error();
  }
  if (r.value() > 0) {
    m_deleted_dirs_.fetch_add(r.value(), std::memory_order_relaxed);
    host_.log(LogLevel::info, "broker",
              "deleted " + std::to_string(r.value()) + " shard directories of " + key.to_string() +
                  " (incarnations up to " + std::to_string(up_to.value()) + "): " + why);
  }
  return {};
}

Result<void> BrokerRuntime::resync() {
  watch_.reset();
  auto snap = catalog_.snapshot();
  if (!snap) return snap.error();
  {
    std::unique_lock lk(streams_mu_);
    finalized_.clear();
    for (const auto& f : snap->finalized_features) finalized_[f] = ChangeSeq{0};
    for (const auto& t : snap->tombstones) {
      auto& cur = tombstones_[t.key];
      if (t.deleted_up_to > cur) cur = t.deleted_up_to;
    }
  }
  // When each feature was finalized (the snapshot has only names).
  if (auto feats = catalog_.list_features(); feats) {
    std::unique_lock lk(streams_mu_);
    for (const auto& f : *feats)
      if (f.finalized) finalized_[f.name] = f.finalized_seq;
  }
  // 1. Tombstones first, before anything is served (felix: the broker that slept).
  std::map<StreamKey, StreamInfo> want;
  for (auto& s : snap->streams) want[s.key] = s;
  std::vector<std::pair<StreamKey, Incarnation>> to_close;
  {
    std::shared_lock lk(streams_mu_);
    for (auto& [k, st] : streams_) {
      auto it = want.find(k);
      if (it == want.end() || it->second.incarnation != st->info.incarnation)
        to_close.emplace_back(k, st->info.incarnation);
    }
  }
  for (auto& [k, inc] : to_close) drop_stream(k, inc);
  for (const auto& t : snap->tombstones)
    if (auto r = delete_data(t.key, t.deleted_up_to, "tombstone"); !r && !started_) return r;

  // 2. Register before serving: a refusal stops the node.
  if (storage_ && !registered_) {
    if (auto r = register_self(); !r) return r;
  }

  // 3. Serve what is assigned here.
  std::map<StreamKey, std::vector<Assignment>> assigned;
  for (auto& a : snap->assignments) assigned[a.key].push_back(a);
  for (auto& [k, info] : want) {
    if (auto st = find(k); st && st->info.incarnation == info.incarnation) continue;
    if (auto r = serve_stream(info, assigned[k]); !r) {
      if (!started_) return r;  // startup: a shard that fails recovery stops the node
      note_failure(r.error().message);
    }
  }
  mark_applied(snap->seq);
  watch_ = catalog_.watch(
      snap->seq, [this](const ChangeEvent& ev) { enqueue({Task::Kind::change, ev}); },
      [this] { enqueue({Task::Kind::resync, {}}); });
  return {};
}

void BrokerRuntime::enqueue(Task t) {
  {
    std::lock_guard lk(tasks_mu_);
    if (stopping_) return;
    tasks_.push_back(std::move(t));
  }
  tasks_cv_.notify_all();
}

void BrokerRuntime::control_loop() {
  for (;;) {
    Task t;
    {
      std::unique_lock lk(tasks_mu_);
      tasks_cv_.wait(lk, [&] { return stopping_ || !tasks_.empty(); });
      if (stopping_) return;
      t = std::move(tasks_.front());
      tasks_.pop_front();
    }
    if (t.kind == Task::Kind::resync) {
      host_.log(LogLevel::warn, "broker", "change feed cursor too old; resyncing from a catalog snapshot");
      if (auto r = resync(); !r)
        host_.log(LogLevel::error, "broker", "resync failed: " + r.error().to_string());
    } else {
      apply(t.event);
    }
  }
}

void BrokerRuntime::note_failure(const std::string& what) {
  host_.log(LogLevel::error, "broker", what);
  std::lock_guard lk(applied_mu_);
  failure_ = what;
}

bool BrokerRuntime::finalized(std::string_view feature) {
  std::shared_lock lk(streams_mu_);
  return finalized_.find(feature) != finalized_.end();
}

void BrokerRuntime::apply(const ChangeEvent& ev) {
  switch (ev.kind) {
    case ChangeEvent::Kind::stream_created:
      if (auto r = serve_stream(ev.stream, ev.assignments); !r)
        note_failure("cannot open stream " + ev.stream.key.to_string() + ": " + r.error().message);
      break;
    case ChangeEvent::Kind::stream_deleted: {
      drop_stream(ev.stream.key, ev.stream.incarnation);
      if (ev.tombstone) {
        {
          std::unique_lock lk(streams_mu_);
          auto& cur = tombstones_[ev.stream.key];
          if (ev.tombstone->deleted_up_to > cur) cur = ev.tombstone->deleted_up_to;
        }
        (void)delete_data(ev.stream.key, ev.tombstone->deleted_up_to, "stream deleted (tombstone)");
      } else if (finalized(kStreamIncarnations)) {
        // A delete after the finalize removes the legacy data too (felix: "That data goes
        // the next time the name is deleted after the finalize").
        (void)delete_data(ev.stream.key, ev.stream.incarnation,
                          "stream deleted after stream_incarnations was finalized");
      }
      break;
    }
    case ChangeEvent::Kind::feature_finalized: {
      std::unique_lock lk(streams_mu_);
      finalized_.emplace(ev.feature, ev.seq);
      host_.log(LogLevel::info, "broker", "feature " + ev.feature + " is finalized");
      break;
    }
    default:
      break;  // tenants, namespaces and other brokers hold no data here
  }
  mark_applied(ev.seq);
}

void BrokerRuntime::mark_applied(ChangeSeq seq) {
  {
    std::lock_guard lk(applied_mu_);
    if (seq > applied_) applied_ = seq;
  }
  applied_cv_.notify_all();
}

bool BrokerRuntime::wait_applied(ChangeSeq seq, std::int64_t timeout_ms) {
  std::unique_lock lk(applied_mu_);
  return applied_cv_.wait_for(lk, std::chrono::milliseconds(timeout_ms),
                              [&] { return applied_ >= seq; });
}

Result<void> BrokerRuntime::serve_stream(const StreamInfo& info,
                                         const std::vector<Assignment>& assignments) {
  {
    std::shared_lock lk(streams_mu_);
    // Never a deleted incarnation (felix: a broker never moves a name to one).
    if (auto t = tombstones_.find(info.key); t != tombstones_.end() && info.incarnation <= t->second)
      return Error(Errc::stale_route, "stream " + info.key.to_string() + " incarnation " +
                                          std::to_string(info.incarnation.value()) +
                                          " is at or below its tombstone " +
                                          std::to_string(t->second.value()) + "; not serving it");
    // Never a lower incarnation than the one served.
    if (auto it = streams_.find(info.key);
        it != streams_.end() && info.incarnation < it->second->info.incarnation)
      return Error(Errc::stale_route, "stream " + info.key.to_string() + " is served at incarnation " +
                                          std::to_string(it->second->info.incarnation.value()) +
                                          "; ignoring the older incarnation " +
                                          std::to_string(info.incarnation.value()));
  }
  auto st = std::make_shared<StreamState>();
  st->info = info;
  st->assignments = assignments;
  st->shards.resize(info.spec.shards);
  {
    // A create at incarnation 0 committed after stream_incarnations was finalized came from
    // a proposer that predates incarnations (a member run at metadata.level 8). Apply
    // stored 0 so members agree (felix), but serving it would reopen any legacy data of
    // the name: refuse it, loudly and identically on every broker (both seqs are
    // replicated). Postgres refuses such creates in the database itself.
    std::shared_lock lk(streams_mu_);
    auto f = finalized_.find(kStreamIncarnations);
    if (info.incarnation.value() == 0 && f != finalized_.end() && f->second.value() > 0 &&
        info.created_seq > f->second)
      st->refused = "stream " + info.key.to_string() + " was created at incarnation 0 (change " +
                    std::to_string(info.created_seq.value()) + ") after stream_incarnations was finalized (change " +
                    std::to_string(f->second.value()) + "), by a member that predates incarnations; upgrade "
                    "that member, then delete and recreate the stream";
  }
  if (!st->refused.empty()) {
    host_.log(LogLevel::warn, "broker", "not serving: " + st->refused);
    std::unique_lock lk(streams_mu_);
    streams_[info.key] = std::move(st);
    return {};
  }
  // Hold what is assigned here and supersedes what this broker held for the name.
  std::shared_ptr<StreamState> held = find(info.key);
  std::uint32_t opened = 0;
  for (const auto& a : assignments) {
    if (a.leader != info_.node_id || a.shard.value() >= info.spec.shards || !storage_) continue;
    if (held && held->info.incarnation == a.incarnation) {
      const auto& ha = held->assignments;
      bool superseded = true;
      for (const auto& h : ha)
        if (h.shard == a.shard && !assignment_supersedes(a.incarnation, a.generation, h.incarnation, h.generation))
          superseded = false;
      if (!superseded && held->shards[a.shard.value()]) {
        st->shards[a.shard.value()] = held->shards[a.shard.value()];
        continue;
      }
    }
    ShardRef ref{info.key, a.shard, info.incarnation};
    auto log = storage_->open_shard(ref, info.spec);
    if (!log) {
      for (auto& s : st->shards)
        if (s) storage_->close_shard(s->ref());
      return log.error();
    }
    st->shards[a.shard.value()] = std::move(log.value());
    ++opened;
  }
  if (held && held->info.incarnation != info.incarnation) drop_stream(info.key, held->info.incarnation);
  if (opened)
    host_.log(LogLevel::info, "broker",
              "serving stream " + info.key.to_string() + " incarnation " +
                  std::to_string(info.incarnation.value()) + " (" + std::to_string(opened) + " of " +
                  std::to_string(info.spec.shards) + " shards here)");
  std::unique_lock lk(streams_mu_);
  streams_[info.key] = std::move(st);
  return {};
}

void BrokerRuntime::drop_stream(const StreamKey& key, Incarnation inc) {
  std::shared_ptr<StreamState> st;
  {
    std::unique_lock lk(streams_mu_);
    auto it = streams_.find(key);
    if (it == streams_.end() || it->second->info.incarnation != inc) return;
    st = std::move(it->second);
    streams_.erase(it);
  }
  std::uint32_t closed = 0;
  if (storage_)
    for (auto& s : st->shards)
      if (s) {
        storage_->close_shard(s->ref());
        ++closed;
      }
  if (closed)
    host_.log(LogLevel::info, "broker",
              "stopped serving stream " + key.to_string() + " incarnation " + std::to_string(inc.value()));
}

std::shared_ptr<BrokerRuntime::StreamState> BrokerRuntime::find(const StreamKey& key) {
  std::shared_lock lk(streams_mu_);
  auto it = streams_.find(key);
  return it == streams_.end() ? nullptr : it->second;
}

Result<std::shared_ptr<ShardLog>> BrokerRuntime::find_shard(const StreamKey& key, ShardIndex shard) {
  if (auto v = validate_stream_key(key); !v) return v.error();
  if (!storage_) return no_broker_role();
  auto st = find(key);
  if (!st) return Error(Errc::not_found, "stream " + key.to_string() + " does not exist");
  if (!st->refused.empty()) return Error(Errc::conflict, st->refused);
  if (shard.value() >= st->shards.size())
    return Error(Errc::not_found, "stream " + key.to_string() + " has " +
                                      std::to_string(st->shards.size()) + " shards; shard " +
                                      std::to_string(shard.value()) + " does not exist");
  if (!st->shards[shard.value()]) {
    NodeId leader{0};
    for (const auto& a : st->assignments)
      if (a.shard == shard) leader = a.leader;
    return Error(Errc::not_leader, "shard " + std::to_string(shard.value()) + " of " + key.to_string() +
                                       " is led by broker " + std::to_string(leader.value()) +
                                       ", not by this node (" + std::to_string(info_.node_id.value()) + ")");
  }
  return st->shards[shard.value()];
}

NodeInfo BrokerRuntime::info() {
  NodeInfo i = info_;
  i.cluster_id = host_.cluster_id();
  return i;
}

bool BrokerRuntime::ready(std::string* why) {
  auto st = catalog_.status();
  if (!st.ready) {
    if (why) *why = "metadata not ready: " + st.detail;
    return false;
  }
  if (!started_) {
    if (why) *why = "broker is starting";
    return false;
  }
  std::lock_guard lk(applied_mu_);
  if (!failure_.empty()) {
    if (why) *why = failure_;
    return false;
  }
  return true;
}

MetadataStore& BrokerRuntime::catalog() { return *facade_; }

Result<StreamInfo> BrokerRuntime::create_stream(const StreamKey& key, const StreamSpec& spec) {
  if (auto v = validate_stream_key(key); !v) return v.error();
  if (auto v = validate_stream_spec(spec); !v) return v.error();
  if (auto v = check_spec_supported(spec); !v) return v.error();
  // Shards are placed on registered brokers; with none, nothing could ever serve them.
  if (auto b = catalog_.list_brokers(); b && b->empty())
    return Error(Errc::unavailable, "no broker is registered to hold the stream's shards; start a broker first",
                 Outcome::transient);
  auto r = catalog_.create_stream(key, spec);
  if (!r) return r;
  if (!wait_applied(r->created_seq, opts_.catalog_timeout_ms))
    return Error(Errc::timeout, "stream created in the catalog, but this node has not applied it yet");
  return r;
}

Result<StreamInfo> BrokerRuntime::stream(const StreamKey& key) {
  if (auto v = validate_stream_key(key); !v) return v.error();
  auto st = find(key);
  if (!st) return Error(Errc::not_found, "stream " + key.to_string() + " does not exist");
  return st->info;
}

namespace {
// Gathers the per-shard append results of one publish request.
struct PublishGather {
  std::vector<std::uint32_t> shard_of;  // per record
  std::vector<std::uint32_t> index_in;  // per record: position inside its shard's batch
  std::vector<Offset> base;             // per shard (each slot written by one callback)
  std::atomic<int> remaining{0};
  std::mutex mu;
  std::optional<Error> error;
  std::atomic<int> succeeded{0};
  PublishCallback cb;

  void done() {
    if (error) {
      // Some shards may have taken their batch: then the request as a whole did happen in
      // part, and a blind retry would duplicate those records (review finding).
      if (succeeded.load() > 0)
        cb(Error(error->code,
                 error->message + " (other shards of this request were written: outcome unknown)",
                 Outcome::uncertain));
      else
        cb(*error);
      return;
    }
    std::vector<PublishedRecord> out(shard_of.size());
    for (std::size_t i = 0; i < shard_of.size(); ++i)
      out[i] = {ShardIndex{shard_of[i]}, Offset{base[shard_of[i]].value() + index_in[i]}};
    cb(std::move(out));
  }
};
}  // namespace

void BrokerRuntime::publish(const StreamKey& key, const std::vector<PublishRecord>& records,
                            const PublishOptions& opts, PublishCallback cb) {
  m_publish_requests_.fetch_add(1, std::memory_order_relaxed);
  auto fail = [&](Error e) {
    m_publish_errors_.fetch_add(1, std::memory_order_relaxed);
    cb(std::move(e));
  };
  if (auto v = validate_stream_key(key); !v) return fail(v.error());
  if (!storage_) return fail(no_broker_role());
  if (records.empty()) return fail(Error(Errc::invalid_argument, "a publish needs at least one record"));
  if (records.size() > opts_.max_records_per_publish)
    return fail(Error(Errc::invalid_argument,
                      "a publish may hold at most " + std::to_string(opts_.max_records_per_publish) +
                          " records, got " + std::to_string(records.size())));
  if (opts.ack == AckMode::quorum)
    return fail(Error(Errc::invalid_argument, "ack 'quorum' needs replication, which this build does not support yet"));
  auto st = find(key);
  if (!st) return fail(Error(Errc::not_found, "stream " + key.to_string() + " does not exist"));
  if (!st->refused.empty()) return fail(Error(Errc::conflict, st->refused));
  const std::uint32_t n = static_cast<std::uint32_t>(st->shards.size());

  auto g = std::make_shared<PublishGather>();
  g->shard_of.resize(records.size());
  g->index_in.resize(records.size());
  g->base.resize(n);
  std::vector<std::uint32_t> count(n, 0);
  std::vector<std::size_t> bytes(n, 0);
  const std::uint32_t sticky = st->sticky.fetch_add(1, std::memory_order_relaxed) % n;
  for (std::size_t i = 0; i < records.size(); ++i) {
    const auto& r = records[i];
    std::uint32_t s;
    if (r.shard) {
      if (*r.shard >= n)
        return fail(Error(Errc::invalid_argument, "record " + std::to_string(i) + " names shard " +
                                                      std::to_string(*r.shard) + ", but the stream has " +
                                                      std::to_string(n) + " shards"));
      s = *r.shard;
    } else if (r.key) {
      s = shard_for_key(*r.key, n);
    } else {
      s = sticky;
    }
    g->shard_of[i] = s;
    g->index_in[i] = count[s]++;
    bytes[s] += kRecordHeaderSize + (r.key ? r.key->size() : 0) + r.value.size() + r.headers.size();
  }
  // One batch per shard touched, built in one buffer each.
  std::vector<BatchBuilder> builders;
  std::vector<std::uint32_t> builder_shard;
  std::vector<int> builder_of(n, -1);
  for (std::uint32_t s = 0; s < n; ++s) {
    if (!count[s]) continue;
    if (!st->shards[s]) {
      NodeId leader{0};
      for (const auto& a : st->assignments)
        if (a.shard.value() == s) leader = a.leader;
      return fail(Error(Errc::not_leader, "shard " + std::to_string(s) + " of " + key.to_string() +
                                              " is led by broker " + std::to_string(leader.value()) +
                                              ", not by this node"));
    }
    builder_of[s] = static_cast<int>(builders.size());
    builders.emplace_back().reserve(kBatchHeaderSize + bytes[s]);
    builder_shard.push_back(s);
  }
  if (opts.producer_id != 0) {
    // An idempotent send is exactly one batch: its sequence is per (producer, shard).
    if (builders.size() != 1)
      return fail(Error(Errc::invalid_argument,
                        "an idempotent publish (producer_id) must put every record on one shard; "
                        "this request touches " + std::to_string(builders.size()) +
                            " shards (give an explicit shard, or one key)"));
    builders[0].set_producer(opts.producer_id, opts.sequence);
  }
  const std::int64_t now = now_ms();
  std::uint64_t total_bytes = 0;
  for (std::size_t i = 0; i < records.size(); ++i) {
    const auto& r = records[i];
    builders[builder_of[g->shard_of[i]]].add(r.key, r.value, r.headers,
                                             r.timestamp_ms ? r.timestamp_ms : now);
    total_bytes += r.value.size();
  }
  m_publish_records_.fetch_add(records.size(), std::memory_order_relaxed);
  m_publish_bytes_.fetch_add(total_bytes, std::memory_order_relaxed);
  g->cb = std::move(cb);
  g->remaining.store(static_cast<int>(builders.size()));
  for (std::size_t b = 0; b < builders.size(); ++b) {
    const std::uint32_t s = builder_shard[b];
    st->shards[s]->append(builders[b].finish(), opts.ack, [this, g, s](Result<AppendResult> r) {
      if (r) {
        g->base[s] = r->base_offset;
        g->succeeded.fetch_add(1, std::memory_order_relaxed);
        if (r->duplicate) m_publish_duplicates_.fetch_add(1, std::memory_order_relaxed);
      } else {
        std::lock_guard lk(g->mu);
        if (!g->error) g->error = r.error();
      }
      if (g->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        if (g->error) m_publish_errors_.fetch_add(1, std::memory_order_relaxed);
        g->done();
      }
    });
  }
}

Result<FetchResult> BrokerRuntime::fetch(const StreamKey& key, ShardIndex shard, Offset from,
                                         std::uint32_t max_records, std::size_t max_bytes) {
  m_fetch_requests_.fetch_add(1, std::memory_order_relaxed);
  auto log = find_shard(key, shard);
  if (!log) {
    m_fetch_errors_.fetch_add(1, std::memory_order_relaxed);
    return log.error();
  }
  auto r = log.value()->read(from, max_records, max_bytes);
  if (!r) m_fetch_errors_.fetch_add(1, std::memory_order_relaxed);
  return r;
}

Result<ShardStats> BrokerRuntime::shard_stats(const StreamKey& key, ShardIndex shard) {
  auto log = find_shard(key, shard);
  if (!log) return log.error();
  return log.value()->stats();
}

Result<std::uint64_t> BrokerRuntime::notify_when_beyond(const StreamKey& key, ShardIndex shard,
                                                        Offset offset, std::function<void()> cb) {
  auto log = find_shard(key, shard);
  if (!log) return log.error();
  return log.value()->notify_when_beyond(offset, std::move(cb));
}

void BrokerRuntime::cancel_notify(const StreamKey& key, ShardIndex shard, std::uint64_t handle) {
  if (handle == 0) return;
  // The shard may have closed (its waiters then fired) or been recreated: a handle of
  // another ShardLog object is unknown to it and ignored.
  if (auto log = find_shard(key, shard); log) log.value()->cancel_notify(handle);
}

Result<std::vector<ShardStatus>> BrokerRuntime::shards(const StreamKey& key) {
  if (auto v = validate_stream_key(key); !v) return v.error();
  auto st = find(key);
  if (!st) return Error(Errc::not_found, "stream " + key.to_string() + " does not exist");
  std::vector<ShardStatus> out;
  for (std::uint32_t i = 0; i < st->shards.size(); ++i) {
    ShardStatus s;
    s.shard = ShardIndex{i};
    s.incarnation = st->info.incarnation;
    for (const auto& a : st->assignments)
      if (a.shard.value() == i) {
        s.generation = a.generation;
        s.leader = a.leader;
        s.replicas = a.replicas;
      }
    if (st->shards[i]) s.stats = st->shards[i]->stats();
    out.push_back(std::move(s));
  }
  return out;
}

namespace {
Result<void> check_group(const std::string& group) { return validate_name(NameKind::group, group); }
}  // namespace

Result<GroupDelivery> BrokerRuntime::group_fetch(const StreamKey& key, ShardIndex shard,
                                                 const std::string& group, std::uint32_t max_records,
                                                 const GroupOptions& opts) {
  if (auto v = check_group(group); !v) return v.error();
  auto log = find_shard(key, shard);
  if (!log) return log.error();
  return log.value()->group_fetch(group, max_records, opts);
}

Result<void> BrokerRuntime::group_ack(const StreamKey& key, ShardIndex shard, const std::string& group,
                                      const std::vector<Offset>& offsets) {
  if (auto v = check_group(group); !v) return v.error();
  auto log = find_shard(key, shard);
  if (!log) return log.error();
  return log.value()->group_ack(group, offsets);
}

Result<void> BrokerRuntime::group_nack(const StreamKey& key, ShardIndex shard, const std::string& group,
                                       const std::vector<Offset>& offsets) {
  if (auto v = check_group(group); !v) return v.error();
  auto log = find_shard(key, shard);
  if (!log) return log.error();
  return log.value()->group_nack(group, offsets);
}

Result<std::vector<GroupPosition>> BrokerRuntime::group_positions(const StreamKey& key,
                                                                  const std::string& group) {
  if (auto v = check_group(group); !v) return v.error();
  if (auto v = validate_stream_key(key); !v) return v.error();
  if (!storage_) return no_broker_role();
  auto st = find(key);
  if (!st) return Error(Errc::not_found, "stream " + key.to_string() + " does not exist");
  std::vector<GroupPosition> out;
  for (auto& s : st->shards) {
    if (!s) continue;
    auto p = s->group_position(group);
    if (!p && p.error().code == Errc::not_found) {
      // A group that never consumed this shard incarnation is at the start, with nothing
      // outstanding and no dead letters (a recreated stream's groups start empty).
      GroupPosition empty;
      empty.group = group;
      out.push_back(empty);
      continue;
    }
    if (!p) return p.error();
    out.push_back(std::move(p.value()));
  }
  return out;
}

Result<std::vector<std::string>> BrokerRuntime::groups(const StreamKey& key) {
  if (auto v = validate_stream_key(key); !v) return v.error();
  if (!storage_) return no_broker_role();
  auto st = find(key);
  if (!st) return Error(Errc::not_found, "stream " + key.to_string() + " does not exist");
  std::set<std::string> all;
  for (auto& s : st->shards) {
    if (!s) continue;
    auto g = s->list_groups();
    if (!g) return g.error();
    all.insert(g->begin(), g->end());
  }
  return std::vector<std::string>(all.begin(), all.end());
}

Result<FetchResult> BrokerRuntime::dead_letters(const StreamKey& key, ShardIndex shard,
                                                const std::string& group, Offset from,
                                                std::uint32_t max_records, std::size_t max_bytes) {
  if (auto v = check_group(group); !v) return v.error();
  auto log = find_shard(key, shard);
  if (!log) return log.error();
  auto r = log.value()->dead_letters(group, from, max_records, max_bytes);
  if (!r && r.error().code == Errc::not_found) return FetchResult{};  // no such group: none
  return r;
}

Result<std::uint64_t> BrokerRuntime::replay_dead_letters(const StreamKey& key, ShardIndex shard,
                                                         const std::string& group, Offset from,
                                                         Offset to) {
  if (auto v = check_group(group); !v) return v.error();
  auto log = find_shard(key, shard);
  if (!log) return log.error();
  return log.value()->replay_dead_letters(group, from, to);
}

std::string BrokerRuntime::metrics_text() {
  MetricsWriter w;
  auto counter = [&](const char* name, const char* help, std::uint64_t v) {
    w.single(name, help, MetricType::counter, v);
  };
  counter("sluice_publish_requests_total", "Publish requests received.", m_publish_requests_.load());
  counter("sluice_publish_records_total", "Records accepted for publishing.", m_publish_records_.load());
  counter("sluice_publish_value_bytes_total", "Value bytes accepted for publishing.", m_publish_bytes_.load());
  counter("sluice_publish_errors_total", "Publish requests that failed.", m_publish_errors_.load());
  counter("sluice_publish_duplicates_total", "Idempotent retries answered with their original offsets.",
          m_publish_duplicates_.load());
  counter("sluice_fetch_requests_total", "Fetch requests.", m_fetch_requests_.load());
  counter("sluice_fetch_errors_total", "Fetch requests that failed.", m_fetch_errors_.load());
  counter("sluice_deleted_shard_dirs_total", "Shard incarnation directories deleted on the control plane's word.",
          m_deleted_dirs_.load());
  {
    std::lock_guard lk(applied_mu_);
    w.single("sluice_catalog_applied_seq", "Highest catalog change applied by this node.", MetricType::gauge,
             applied_.value());
  }
  std::vector<std::shared_ptr<StreamState>> all;
  {
    std::shared_lock lk(streams_mu_);
    for (auto& [k, st] : streams_) all.push_back(st);
  }
  struct Row {
    MetricLabels labels;
    ShardStats stats;
  };
  std::vector<Row> rows;
  for (auto& st : all) {
    for (std::size_t i = 0; i < st->shards.size(); ++i) {
      if (!st->shards[i]) continue;
      rows.push_back({{{"tenant", st->info.key.tenant},
                       {"namespace", st->info.key.ns},
                       {"stream", st->info.key.name},
                       {"shard", std::to_string(i)},
                       {"incarnation", std::to_string(st->info.incarnation.value())}},
                      st->shards[i]->stats()});
    }
  }
  auto per_shard = [&](const char* name, const char* help, MetricType type, auto field) {
    w.family(name, help, type);
    for (const auto& r : rows) w.sample(name, r.labels, static_cast<std::uint64_t>(field(r.stats)));
  };
  per_shard("sluice_shard_high_watermark", "Next offset to be made durable, per shard incarnation.",
            MetricType::gauge, [](const ShardStats& s) { return s.high_watermark.value(); });
  per_shard("sluice_shard_log_start", "First retained offset, per shard incarnation.", MetricType::gauge,
            [](const ShardStats& s) { return s.log_start.value(); });
  per_shard("sluice_shard_size_bytes", "Bytes on disk, per shard incarnation.", MetricType::gauge,
            [](const ShardStats& s) { return s.size_bytes; });
  per_shard("sluice_shard_syncs_total", "fdatasync calls since the shard opened.", MetricType::counter,
            [](const ShardStats& s) { return s.syncs; });
  per_shard("sluice_shard_appended_records_total", "Records appended since the shard opened.", MetricType::counter,
            [](const ShardStats& s) { return s.appended_records; });
  return std::move(w).str();
}

}  // namespace sluice::core
