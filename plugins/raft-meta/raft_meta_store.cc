#include "raft_meta_store.h"

#include "rpc.h"

#include "sluice/uuid.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <random>
#include <stdexcept>

#include "sluice/catalog_rules.h"
#include "sluice/features.h"
#include "sluice/names.h"

namespace sluice::raft_meta {

namespace {

constexpr std::string_view kComponent = "raft-meta";
constexpr std::size_t kDeliveryBatch = 256;

unsigned checked_unsigned(const PluginHost& host, std::string_view key, std::int64_t def,
                          std::int64_t min) {
  std::int64_t v = host.config_int(key, def);
  if (v < min || v > 0x7fffffff)
    throw std::invalid_argument(std::string(key) + " must be between " + std::to_string(min) +
                                " and 2147483647, got " + std::to_string(v));
  return static_cast<unsigned>(v);
}


std::vector<std::string> split_list(std::string_view s) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i <= s.size()) {
    std::size_t j = s.find(',', i);
    if (j == std::string_view::npos) j = s.size();
    std::string item(s.substr(i, j - i));
    auto b = item.find_first_not_of(" \t");
    auto e = item.find_last_not_of(" \t");
    if (b != std::string::npos) out.push_back(item.substr(b, e - b + 1));
    i = j + 1;
  }
  return out;
}


std::int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

RaftMetaConfig RaftMetaConfig::from_host(const PluginHost& host) {
  RaftMetaConfig c;
  c.raft_dir = host.config_string("raft.dir", "");
  if (c.raft_dir.empty()) c.raft_dir = (std::filesystem::path(host.data_dir()) / "raft").string();
  c.address = host.config_string("raft.address", "127.0.0.1:7800");
  if (host.config_has("raft.port")) {
    unsigned port = checked_unsigned(host, "raft.port", 7800, 0);
    if (port > 65535) throw std::invalid_argument("raft.port must be 0..65535");
    auto colon = c.address.rfind(':');
    std::string ip = colon == std::string::npos ? c.address : c.address.substr(0, colon);
    c.address = ip + ":" + std::to_string(port);
  }
  if (c.address.find(':') == std::string::npos)
    throw std::invalid_argument("raft.address must be ip:port, got '" + c.address + "'");
  c.snapshot_threshold = checked_unsigned(host, "raft.snapshot_threshold", 1024, 1);
  c.snapshot_trailing = checked_unsigned(host, "raft.snapshot_trailing", 128, 0);
  c.election_timeout_ms = checked_unsigned(host, "raft.election_timeout_ms", 1000, 10);
  c.heartbeat_timeout_ms = checked_unsigned(host, "raft.heartbeat_timeout_ms", 100, 1);
  c.timeout = std::chrono::milliseconds(checked_unsigned(host, "metadata.timeout_ms", 10000, 1));
  c.start_timeout =
      std::chrono::milliseconds(checked_unsigned(host, "metadata.start_timeout_ms", 30000, 1));
  {
    std::int64_t lv = host.config_int("metadata.level", kBuildMetadataLevel.value());
    if (lv < kLowestMetadataLevel.value() || lv > kBuildMetadataLevel.value())
      throw std::invalid_argument(
          "metadata.level must be between " + std::to_string(kLowestMetadataLevel.value()) +
          " and " + std::to_string(kBuildMetadataLevel.value()) + " (this build's level), got " +
          std::to_string(lv));
    c.level = MetadataLevel{static_cast<std::uint32_t>(lv)};
  }
  c.bootstrap_hold_back = split_list(host.config_string("metadata.bootstrap_hold_back", ""));
  for (auto& f : c.bootstrap_hold_back)
    if (!find_feature(f))
      throw std::invalid_argument("metadata.bootstrap_hold_back names unknown feature '" + f + "'");
  c.rpc_address = host.config_string("metadata.rpc_address", "127.0.0.1:7801");
  c.session_timeout =
      std::chrono::milliseconds(checked_unsigned(host, "broker.session_timeout_ms", 10000, 1));
  return c;
}

// --- watches -------------------------------------------------------------------------------

struct RaftMetaStore::Watcher {
  std::uint64_t id = 0;
  ChangeSeq cursor;  // delivery thread only
  std::function<void(const ChangeEvent&)> on_change;
  std::function<void()> resync;
  bool cancelled = false;  // guarded by watch_mu_
};

namespace {
class Handle final : public WatchHandle {
 public:
  Handle(std::function<void()> cancel) : cancel_(std::move(cancel)) {}
  ~Handle() override { cancel_(); }

 private:
  std::function<void()> cancel_;
};
}  // namespace

// --- lifecycle -----------------------------------------------------------------------------

RaftMetaStore::RaftMetaStore(PluginHost& host) : RaftMetaStore(host, RaftMetaConfig::from_host(host)) {}

RaftMetaStore::RaftMetaStore(PluginHost& host, RaftMetaConfig config)
    : host_(host), cfg_(std::move(config)), fsm_(cfg_.change_retention) {
  delivery_ = std::thread([this] { delivery_main(); });
  delivery_id_ = delivery_.get_id();
}

RaftMetaStore::~RaftMetaStore() {
  stop();
  {
    std::lock_guard lk(watch_mu_);
    delivery_stop_ = true;
  }
  watch_cv_.notify_all();
  delivery_.join();
}

void RaftMetaStore::log(LogLevel level, const std::string& msg) { host_.log(level, kComponent, msg); }

std::shared_ptr<RaftNode> RaftMetaStore::node() {
  std::lock_guard lk(node_mu_);
  return node_;
}

Result<void> RaftMetaStore::start() {
  std::lock_guard life(life_mu_);
  if (ready_.load()) return {};
  starting_.store(true);
  struct Reset {
    std::atomic<bool>& f;
    ~Reset() { f.store(false); }
  } reset{starting_};

  std::error_code ec;
  std::filesystem::create_directories(cfg_.raft_dir, ec);
  if (ec) return Error(Errc::storage_failure, "cannot create " + cfg_.raft_dir + ": " + ec.message());

  // raft_start replays the last snapshot and the log into the catalog: start it empty
  // (a store may be started again after stop()).
  {
    std::lock_guard lk(fsm_mu_);
    try {
      fsm_.reset();
    } catch (const std::exception& e) {
      return Error(Errc::internal, std::string("cannot reset the catalog: ") + e.what());
    }
  }

  RaftNodeOptions o;
  o.id = host_.node_id().value();
  o.address = cfg_.address;
  o.dir = cfg_.raft_dir;
  o.snapshot_threshold = cfg_.snapshot_threshold;
  o.snapshot_trailing = cfg_.snapshot_trailing;
  o.election_timeout_ms = cfg_.election_timeout_ms;
  o.heartbeat_timeout_ms = cfg_.heartbeat_timeout_ms;
  o.log = [this](LogLevel l, const std::string& m) { log(l, m); };
  auto n = std::make_shared<RaftNode>(std::move(o), adapter_);
  // Start failures are returned, not logged: the host prints the one ERROR line.
  if (auto r = n->start(); !r.ok()) return r;
  {
    std::lock_guard lk(node_mu_);
    node_ = n;
  }
  auto fail = [&](Error e) -> Result<void> {
    log(LogLevel::info, "start aborted; stopping the raft node");
    {
      std::lock_guard lk(node_mu_);
      node_.reset();
    }
    n->stop();
    return e;
  };

  // Wait for leadership (a single voter elects itself at raft_start), then a barrier so
  // that everything in the log is applied before we look at the catalog.
  const auto deadline = std::chrono::steady_clock::now() + cfg_.start_timeout;
  auto remaining = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                                 std::chrono::steady_clock::now());
  };
  for (;;) {
    if (n->role() == RaftRole::leader) {
      auto b = n->barrier(std::max(remaining(), std::chrono::milliseconds(1)));
      if (b.ok()) break;
      if (b.error().code != Errc::not_leader && b.error().code != Errc::unavailable)
        return fail(b.error());
    }
    if (remaining().count() <= 0)
      return fail(Error(Errc::unavailable,
                        "raft node did not become leader within " +
                            std::to_string(cfg_.start_timeout.count()) + " ms (role " +
                            std::string(to_string(n->role())) + ")"));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }

  std::string id;
  {
    std::lock_guard lk(fsm_mu_);
    id = fsm_.cluster_id();
  }
  if (id.empty()) {
    std::string fresh = random_uuid_v4();
    Command init = Command::init_cluster(fresh);
    init.level = cfg_.level.value();
    // A new cluster finalizes every feature this member's level knows, unless held back
    // (a level-8 member knows none).
    for (auto& f : features_known_at_level())
      if (std::find(cfg_.bootstrap_hold_back.begin(), cfg_.bootstrap_hold_back.end(), f) ==
          cfg_.bootstrap_hold_back.end())
        init.finalize_features.push_back(f);
    auto r = n->apply(encode_command(init), cfg_.timeout);
    if (!r.ok()) return fail(r.error());
    // Rejected with already_exists: someone initialized first; its id is the group's.
    if (!r->ok() && r->error->code != Errc::already_exists) return fail(*r->error);
    id = r->cluster_id;
    if (id.empty()) return fail(Error(Errc::internal, "init_cluster returned no cluster id"));
    log(LogLevel::info, "initialized cluster " + id);
  }

  // The host persists the id to meta.properties (fsynced) before answering; only then may
  // it be used (ARCHITECTURE.md §3).
  if (auto a = host_.adopt_cluster_id(id); !a.ok())
    return fail(Error(a.error().code, a.error().message + " (raft log in " + cfg_.raft_dir + ")"));
  {
    // Leader (re)start: every registered broker counts as live for one session timeout,
    // so a restart does not make the whole fleet "dead".
    std::lock_guard lk(live_mu_);
    last_seen_.clear();
    grace_until_ = now() + cfg_.session_timeout;
  }
  ready_.store(true);
  if (!cfg_.rpc_address.empty()) {
    auto srv = std::make_unique<RpcServer>(*this, host_, cfg_.rpc_address);
    if (auto r = srv->start(); !r.ok()) {
      ready_.store(false);
      return fail(r.error());
    }
    rpc_port_ = srv->port();
    rpc_ = std::move(srv);
  }
  log(LogLevel::info, "ready: cluster " + id + " at metadata level " +
                          std::to_string(cfg_.level.value()) + ", leader of a single-member group at " +
                          cfg_.address + ", applied " + std::to_string(n->last_applied()));
  catalog_changed();
  return {};
}

int RaftMetaStore::rpc_port() const { return rpc_port_.load(); }

void RaftMetaStore::stop() {
  std::lock_guard life(life_mu_);
  if (rpc_) {
    rpc_->stop();
    rpc_.reset();
    rpc_port_ = 0;
  }
  ready_.store(false);
  std::shared_ptr<RaftNode> n;
  {
    std::lock_guard lk(node_mu_);
    n.swap(node_);
  }
  if (n) n->stop();
}

MetadataStatus RaftMetaStore::status() {
  MetadataStatus s;
  s.backend = "raft";
  auto n = node();
  {
    std::lock_guard lk(fsm_mu_);
    s.cluster_id = ready_.load() ? fsm_.cluster_id() : host_.cluster_id();
    s.applied = fsm_.applied();
  }
  RaftRole role = n ? n->role() : RaftRole::unavailable;
  s.level = cfg_.level;  // single member: the group's level is this member's
  s.ready = ready_.load() && role == RaftRole::leader;
  if (auto h = held_error()) {
    s.ready = false;
    s.detail = h->message;
    return s;
  }
  if (starting_.load())
    s.detail = "starting";
  else if (!n)
    s.detail = "stopped";
  else
    s.detail = std::string(to_string(role));
  return s;
}

// --- state machine (raft thread) -----------------------------------------------------------

ApplyResult RaftMetaStore::FsmAdapter::apply(std::uint64_t index, std::string_view entry) {
  ApplyResult r;
  {
    std::lock_guard lk(s_.fsm_mu_);
    r = s_.fsm_.apply(index, entry);
  }
  if (!r.ok() && r.error->code == Errc::malformed_body)
    s_.log(LogLevel::warn, "entry " + std::to_string(index) + " rejected: " + r.error->message);
  s_.catalog_changed();
  return r;
}

std::string RaftMetaStore::FsmAdapter::snapshot() {
  std::lock_guard lk(s_.fsm_mu_);
  return s_.fsm_.snapshot();
}

Result<void> RaftMetaStore::FsmAdapter::restore(std::string_view image) {
  Result<void> r;
  {
    std::lock_guard lk(s_.fsm_mu_);
    r = s_.fsm_.restore(image);
  }
  if (r.ok()) s_.catalog_changed();
  return r;
}

void RaftMetaStore::catalog_changed() {
  {
    std::lock_guard lk(watch_mu_);
    ++wake_seq_;
  }
  watch_cv_.notify_all();
}

std::uint64_t RaftMetaStore::state_hash() {
  std::lock_guard lk(fsm_mu_);
  return fsm_.state_hash();
}

// --- mutations -----------------------------------------------------------------------------

std::optional<Error> RaftMetaStore::held_error() {
  std::lock_guard lk(fsm_mu_);
  if (auto h = fsm_.held())
    return Error(Errc::unavailable, "this metadata member is held at index " + std::to_string(h->index) +
                                        ": " + h->reason, Outcome::definite);
  return std::nullopt;
}

Result<ApplyResult> RaftMetaStore::propose(const Command& c) {
  auto n = node();
  if (!n || !ready_.load()) return Error(Errc::unavailable, "raft-meta is not started");
  if (auto h = held_error()) return *h;
  Command stamped = c;
  stamped.level = cfg_.level.value();
  return n->apply(encode_command(stamped), cfg_.timeout);
}

#define RAFT_META_TRY(expr)                         \
  do {                                              \
    if (auto _v = (expr); !_v.ok()) return _v.error(); \
  } while (0)

Result<TenantInfo> RaftMetaStore::create_tenant(const std::string& name) {
  RAFT_META_TRY(validate_name(NameKind::tenant, name));
  auto r = propose(Command::create_tenant(name));
  if (!r.ok()) return r.error();
  if (!r->ok()) return *r->error;
  return r->tenant;
}

Result<void> RaftMetaStore::delete_tenant(const std::string& name) {
  RAFT_META_TRY(validate_name(NameKind::tenant, name));
  auto r = propose(Command::delete_tenant(name));
  if (!r.ok()) return r.error();
  if (!r->ok()) return *r->error;
  return {};
}

Result<NamespaceInfo> RaftMetaStore::create_namespace(const std::string& tenant,
                                                      const std::string& name) {
  RAFT_META_TRY(validate_name(NameKind::tenant, tenant));
  RAFT_META_TRY(validate_name(NameKind::ns, name));
  auto r = propose(Command::create_namespace(tenant, name));
  if (!r.ok()) return r.error();
  if (!r->ok()) return *r->error;
  return r->ns;
}

Result<void> RaftMetaStore::delete_namespace(const std::string& tenant, const std::string& name) {
  RAFT_META_TRY(validate_name(NameKind::tenant, tenant));
  RAFT_META_TRY(validate_name(NameKind::ns, name));
  auto r = propose(Command::delete_namespace(tenant, name));
  if (!r.ok()) return r.error();
  if (!r->ok()) return *r->error;
  return {};
}

Result<StreamInfo> RaftMetaStore::create_stream(const StreamKey& key, const StreamSpec& spec) {
  RAFT_META_TRY(validate_stream_key(key));
  RAFT_META_TRY(validate_stream_spec(spec));
  auto r = propose(stream_create_command(key, spec));
  if (!r.ok()) return r.error();
  if (!r->ok()) return *r->error;
  return r->stream;
}

Command RaftMetaStore::stream_create_command(const StreamKey& key, const StreamSpec& spec) {
  std::int64_t clock = now_us();
  Command c = Command::create_stream(key, spec, clock);
  c.level = cfg_.level.value();
  std::vector<BrokerInfo> registered;
  bool finalized_here = false;
  {
    std::lock_guard lk(fsm_mu_);
    finalized_here = fsm_.is_finalized(kStreamIncarnations);
    registered = fsm_.list_brokers();
  }
  // Below the feature's level this member has never heard of incarnations: it proposes 0
  // even if the catalog says the feature is finalized (apply then stores 0, as level 8).
  const FeatureSpec* f = find_feature(kStreamIncarnations);
  if (f && cfg_.level >= f->required_level)
    c.proposed_incarnation = propose_incarnation(finalized_here, clock);
  // The incarnations flag stays unset: it needs every member at level 14.
  c.incarnations = IncarnationRule::legacy;

  // Placement: round robin over the live brokers sorted by id, from an offset derived from
  // the name. With no live broker, over the registered ones: a shard is placed on a broker
  // id like a replica assignment, and is served when that broker comes back (a broker that
  // slept through a delete and a recreate takes the new stream). Nobody registered ->
  // every shard unassigned (leader 0).
  std::set<std::string, std::less<>> fin;
  {
    std::lock_guard lk(fsm_mu_);
    for (auto& [name, at] : fsm_.finalized_features()) fin.insert(name);
  }
  const auto leaders = place_shards(key, spec.shards, brokers_with_liveness(registered), fin);
  c.placement.resize(spec.shards);
  for (std::uint32_t i = 0; i < spec.shards; ++i) {
    if (leaders[i].value() == 0) continue;
    c.placement[i].leader = leaders[i].value();
    c.placement[i].replicas = {leaders[i].value()};
  }
  return c;
}

Result<StreamInfo> RaftMetaStore::delete_stream(const StreamKey& key) {
  RAFT_META_TRY(validate_stream_key(key));
  Command c = Command::delete_stream(key);
  c.level = cfg_.level.value();  // proposed_incarnation 0, unflagged (level 14 sets them)
  auto r = propose(c);
  if (!r.ok()) return r.error();
  if (!r->ok()) return *r->error;
  return r->stream;
}

// --- reads ---------------------------------------------------------------------------------

Result<void> RaftMetaStore::read_barrier() {
  auto n = node();
  if (!n || !ready_.load()) return Error(Errc::unavailable, "raft-meta is not started");
  if (auto h = held_error()) return *h;  // a held member serves nothing from its state
  auto r = n->barrier(cfg_.timeout);
  if (auto h = held_error()) return *h;
  return r;
}

Result<std::vector<TenantInfo>> RaftMetaStore::list_tenants() {
  RAFT_META_TRY(read_barrier());
  std::lock_guard lk(fsm_mu_);
  return fsm_.list_tenants();
}

Result<std::vector<NamespaceInfo>> RaftMetaStore::list_namespaces(const std::string& tenant) {
  RAFT_META_TRY(validate_name(NameKind::tenant, tenant));
  RAFT_META_TRY(read_barrier());
  std::lock_guard lk(fsm_mu_);
  return fsm_.list_namespaces(tenant);
}

Result<StreamInfo> RaftMetaStore::get_stream(const StreamKey& key) {
  RAFT_META_TRY(validate_stream_key(key));
  RAFT_META_TRY(read_barrier());
  std::lock_guard lk(fsm_mu_);
  return fsm_.get_stream(key);
}

Result<std::vector<StreamInfo>> RaftMetaStore::list_streams(const std::string& tenant,
                                                            const std::string& ns) {
  RAFT_META_TRY(validate_name(NameKind::tenant, tenant));
  RAFT_META_TRY(validate_name(NameKind::ns, ns));
  RAFT_META_TRY(read_barrier());
  std::lock_guard lk(fsm_mu_);
  return fsm_.list_streams(tenant, ns);
}

Result<CatalogSnapshot> RaftMetaStore::snapshot() {
  RAFT_META_TRY(read_barrier());
  CatalogSnapshot snap;
  {
    std::lock_guard lk(fsm_mu_);
    try {
      snap = fsm_.catalog_snapshot();
    } catch (const std::exception& e) {
      return Error(Errc::internal, std::string("catalog snapshot: ") + e.what());
    }
  }
  snap.brokers = brokers_with_liveness(std::move(snap.brokers));
  return snap;
}

// --- fleet ---------------------------------------------------------------------------------

std::chrono::steady_clock::time_point RaftMetaStore::now() const {
  return cfg_.clock ? cfg_.clock() : std::chrono::steady_clock::now();
}

std::vector<std::string> RaftMetaStore::features_known_at_level() const {
  std::vector<std::string> out;
  for (auto& f : known_features())
    if (f.required_level <= cfg_.level) out.emplace_back(f.name);
  return out;
}

std::vector<BrokerInfo> RaftMetaStore::brokers_with_liveness(std::vector<BrokerInfo> registered) {
  const auto t = now();
  std::lock_guard lk(live_mu_);
  for (auto& b : registered) {
    auto it = last_seen_.find(b.id.value());
    b.live = t < grace_until_ ||
             (it != last_seen_.end() && t - it->second < cfg_.session_timeout);
  }
  return registered;
}

std::vector<BrokerInfo> RaftMetaStore::serving_brokers(const std::vector<BrokerInfo>& registered) {
  std::vector<BrokerInfo> out;
  for (auto& b : brokers_with_liveness(registered))
    if (b.live) out.push_back(b);
  return out;
}

FeatureInfo RaftMetaStore::feature_info(std::string_view name,
                                        const std::map<std::string, ChangeSeq, std::less<>>& fin,
                                        const std::vector<BrokerInfo>& serving) const {
  FeatureInfo fi;
  fi.name = std::string(name);
  const FeatureSpec* spec = find_feature(name);
  fi.required_level = spec ? spec->required_level : MetadataLevel{0};
  if (auto it = fin.find(name); it != fin.end()) {
    fi.finalized = true;
    fi.finalized_seq = it->second;
  }
  for (auto& b : serving) {
    if (std::find(b.features.begin(), b.features.end(), name) != b.features.end())
      fi.supported_by.push_back(b.id);
    else
      fi.lacking.push_back(b.id);
  }
  return fi;
}

Result<BrokerInfo> RaftMetaStore::register_broker(const BrokerRegistration& reg) {
  if (reg.id.value() == 0) return Error(Errc::invalid_argument, "broker id must be > 0");
  BrokerRegistration sorted = reg;
  std::sort(sorted.features.begin(), sorted.features.end());
  sorted.features.erase(std::unique(sorted.features.begin(), sorted.features.end()),
                        sorted.features.end());
  auto r = propose(Command::register_broker(sorted));
  if (!r.ok()) return r.error();
  if (!r->ok()) return *r->error;
  {
    std::lock_guard lk(live_mu_);
    last_seen_[reg.id.value()] = now();  // registration counts as a heartbeat
  }
  BrokerInfo b = r->broker;
  b.live = true;
  return b;
}

Result<void> RaftMetaStore::heartbeat_broker(NodeId id) {
  if (!ready_.load()) return Error(Errc::unavailable, "raft-meta is not started");
  std::optional<BrokerInfo> b;
  std::set<std::string, std::less<>> fin;
  {
    std::lock_guard lk(fsm_mu_);
    b = fsm_.broker(id);
    for (auto& [name, at] : fsm_.finalized_features()) fin.insert(name);
  }
  if (!b) return Error(Errc::not_found, "broker " + std::to_string(id.value()) + " is not registered");
  // A broker that lacks a feature finalized while it was paused or partitioned must not
  // come back as serving (review): the same admission rule as at registration.
  if (auto a = admit_broker(b->features, fin); !a) return a.error();
  std::lock_guard lk(live_mu_);
  last_seen_[id.value()] = now();
  return {};
}

Result<void> RaftMetaStore::unregister_broker(NodeId id) {
  auto r = propose(Command::unregister_broker(id));
  if (!r.ok()) return r.error();
  if (!r->ok()) return *r->error;
  std::lock_guard lk(live_mu_);
  last_seen_.erase(id.value());
  return {};
}

Result<std::vector<BrokerInfo>> RaftMetaStore::list_brokers() {
  RAFT_META_TRY(read_barrier());
  std::vector<BrokerInfo> registered;
  {
    std::lock_guard lk(fsm_mu_);
    registered = fsm_.list_brokers();
  }
  return brokers_with_liveness(std::move(registered));
}

Result<std::vector<FeatureInfo>> RaftMetaStore::list_features() {
  RAFT_META_TRY(read_barrier());
  std::vector<BrokerInfo> registered;
  std::map<std::string, ChangeSeq, std::less<>> fin;
  {
    std::lock_guard lk(fsm_mu_);
    registered = fsm_.list_brokers();
    fin = fsm_.finalized_features();
  }
  auto serving = serving_brokers(registered);
  std::vector<FeatureInfo> out;
  for (auto& f : known_features()) out.push_back(feature_info(f.name, fin, serving));
  for (auto& [name, at] : fin)  // finalized by a build that knows more than this one
    if (!find_feature(name)) out.push_back(feature_info(name, fin, serving));
  return out;
}

Result<FeatureInfo> RaftMetaStore::finalize_feature(const std::string& name) {
  RAFT_META_TRY(read_barrier());
  std::vector<BrokerInfo> registered;
  std::map<std::string, ChangeSeq, std::less<>> fin;
  {
    std::lock_guard lk(fsm_mu_);
    registered = fsm_.list_brokers();
    fin = fsm_.finalized_features();
  }
  auto serving = serving_brokers(registered);
  // Already finalized: the same answer, nothing proposed (one-way and idempotent).
  if (fin.count(name)) return feature_info(name, fin, serving);
  if (!find_feature(name)) return Error(Errc::not_found, "unknown feature '" + name + "'");
  // The gate. Single member: the group's level is this member's configured level.
  if (auto g = check_finalize(name, cfg_.level, serving); !g.ok()) return g.error();
  auto r = propose(Command::finalize_feature(name));
  if (!r.ok()) return r.error();
  if (!r->ok()) return *r->error;
  fin[name] = r->finalized_seq;
  log(LogLevel::info, "feature " + name + " finalized at " +
                          std::to_string(r->finalized_seq.value()));
  return feature_info(name, fin, serving);
}

Result<std::vector<Tombstone>> RaftMetaStore::list_tombstones() {
  RAFT_META_TRY(read_barrier());
  std::lock_guard lk(fsm_mu_);
  try {
    return fsm_.list_tombstones();
  } catch (const std::exception& e) {
    return Error(Errc::internal, std::string("tombstones: ") + e.what());
  }
}

ChangeBatch RaftMetaStore::changes_after(ChangeSeq after, std::size_t limit) {
  std::lock_guard lk(fsm_mu_);
  return fsm_.changes_after(after, limit);
}

// --- watch ---------------------------------------------------------------------------------

std::unique_ptr<WatchHandle> RaftMetaStore::watch(ChangeSeq after,
                                                  std::function<void(const ChangeEvent&)> on_change,
                                                  std::function<void()> resync) {
  auto w = std::make_shared<Watcher>();
  w->cursor = after;
  w->on_change = std::move(on_change);
  w->resync = std::move(resync);
  {
    std::lock_guard lk(watch_mu_);
    w->id = next_watch_id_++;
    watchers_[w->id] = w;
    ++wake_seq_;
  }
  watch_cv_.notify_all();
  std::uint64_t id = w->id;
  return std::make_unique<Handle>([this, id] { unregister(id); });
}

void RaftMetaStore::unregister(std::uint64_t id) {
  std::unique_lock lk(watch_mu_);
  auto it = watchers_.find(id);
  if (it != watchers_.end()) {
    it->second->cancelled = true;
    watchers_.erase(it);
  }
  // Wait for an in-flight callback, unless we are that callback (destroying the handle
  // from inside on_change): then it simply is the last one.
  if (std::this_thread::get_id() != delivery_id_)
    watch_cv_.wait(lk, [&] { return delivering_ != id; });
}

void RaftMetaStore::delivery_main() {
  std::uint64_t seen = 0;
  bool more = false;
  for (;;) {
    std::vector<std::shared_ptr<Watcher>> ws;
    {
      std::unique_lock lk(watch_mu_);
      if (!more) watch_cv_.wait(lk, [&] { return delivery_stop_ || wake_seq_ != seen; });
      if (delivery_stop_) return;
      seen = wake_seq_;
      for (auto& [id, w] : watchers_) ws.push_back(w);
    }
    more = false;
    for (auto& w : ws) {
      ChangeBatch batch;
      {
        std::lock_guard lk(fsm_mu_);
        try {
          batch = fsm_.changes_after(w->cursor, kDeliveryBatch);
        } catch (const std::exception& e) {
          log(LogLevel::error, std::string("reading the change log: ") + e.what());
          continue;
        }
      }
      // Runs `fn` as watcher w's callback unless it was cancelled. false: cancelled.
      auto run = [&](auto&& fn) {
        {
          std::lock_guard lk(watch_mu_);
          if (w->cancelled) return false;
          delivering_ = w->id;
        }
        try {
          fn();
        } catch (const std::exception& e) {
          log(LogLevel::error, std::string("watch callback threw: ") + e.what());
        } catch (...) {
          log(LogLevel::error, "watch callback threw");
        }
        {
          std::lock_guard lk(watch_mu_);
          delivering_ = 0;
        }
        watch_cv_.notify_all();
        return true;
      };
      if (batch.resync) {
        // Too old to replay: deliver nothing, ask for a resync, and end this watch.
        run([&] { if (w->resync) w->resync(); });
        std::lock_guard lk(watch_mu_);
        w->cancelled = true;
        watchers_.erase(w->id);
        continue;
      }
      for (auto& ev : batch.events) {
        if (!run([&] { if (w->on_change) w->on_change(ev); })) break;
        w->cursor = ev.seq;
      }
      if (batch.events.size() == kDeliveryBatch) more = true;
    }
  }
}

}  // namespace sluice::raft_meta
