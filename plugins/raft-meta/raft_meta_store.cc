#include "raft_meta_store.h"

#include "rpc.h"

#include "sluice/durable_fs.h"
#include "sluice/uuid.h"
#include "sluice/strings.h"

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




std::string join_list(const std::vector<std::string>& v) {
  std::string out;
  for (auto& x : v) out += (out.empty() ? "" : ",") + x;
  return out;
}

thread_local bool tl_no_forward = false;

std::int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

#define RAFT_META_TRY(expr)                         \
  do {                                              \
    if (auto _v = (expr); !_v.ok()) return _v.error(); \
  } while (0)

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
    // The product's levels: 8 (baseline), 10 (stream incarnations), 14 (cache incarnations
    // and the flag). 9 and 11..13 never shipped, so no member may claim them.
    if (lv != 8 && lv != 10 && lv != 14)
      throw std::invalid_argument("metadata.level must be 8, 10 or 14 (this build's level is " +
                                  std::to_string(kBuildMetadataLevel.value()) + "), got " +
                                  std::to_string(lv));
    c.level = MetadataLevel{static_cast<std::uint32_t>(lv)};
  }
  c.bootstrap_hold_back = split_list(host.config_string("metadata.bootstrap_hold_back", ""));
  for (auto& f : c.bootstrap_hold_back)
    if (!find_feature(f))
      throw std::invalid_argument("metadata.bootstrap_hold_back names unknown feature '" + f + "'");
  c.rpc_address = host.config_string("metadata.rpc_address", "127.0.0.1:7801");
  c.join = split_list(host.config_string("metadata.join", ""));
  if (!c.join.empty() && c.rpc_address.empty())
    throw std::invalid_argument("metadata.join needs metadata.rpc_address (members talk over it)");
  c.session_timeout =
      std::chrono::milliseconds(checked_unsigned(host, "broker.session_timeout_ms", 10000, 1));
  return c;
}

// --- lifecycle -----------------------------------------------------------------------------

RaftMetaStore::RaftMetaStore(PluginHost& host) : RaftMetaStore(host, RaftMetaConfig::from_host(host)) {}

RaftMetaStore::RaftMetaStore(PluginHost& host, RaftMetaConfig config)
    : host_(host), cfg_(std::move(config)), fsm_(cfg_.change_retention, cfg_.level) {
  delivery_ = std::thread([this] { delivery_main(); });
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

  // Durable before libraft writes into it: a power cut must not lose the directory's name
  // (and with it the log) after the member has acknowledged anything (sluice/durable_fs.h).
  if (auto made = create_directories_durably(cfg_.raft_dir); !made.ok())
    return Error(Errc::storage_failure, "cannot create raft.dir: " + made.error().message);

  // raft_start replays the last snapshot and the log into the catalog: start it empty
  // (a store may be started again after stop()).
  {
    std::lock_guard lk(fsm_mu_);
    try {
      fsm_.reset();
      hash_dirty_ = true;
    } catch (const std::exception& e) {
      return Error(Errc::internal, std::string("cannot reset the catalog: ") + e.what());
    }
  }

  // A member with an empty raft directory and `metadata.join` joins an existing group: it
  // learns the group's cluster id first (hello), adopts it (refused, naming both ids, if
  // this data directory belongs to another cluster), and starts with no configuration.
  const bool fresh = !std::filesystem::exists(std::filesystem::path(cfg_.raft_dir) / "metadata1") &&
                     !std::filesystem::exists(std::filesystem::path(cfg_.raft_dir) / "metadata2");
  const bool joining = fresh && !cfg_.join.empty();
  if (joining) {
    RemoteConfig rc;
    rc.controllers = cfg_.join;
    rc.timeout = cfg_.timeout;
    // The members may be starting too (systemd starts them together): retry until
    // metadata.start_timeout, but give up at once on another cluster's id.
    const auto give_up = std::chrono::steady_clock::now() + cfg_.start_timeout;
    for (;;) {
      RemoteMetadataStore probe(host_, rc);
      auto r = probe.start();
      if (r.ok()) break;
      if (r.error().code == Errc::cluster_id_mismatch || std::chrono::steady_clock::now() >= give_up)
        return Error(r.error().code, "cannot join through metadata.join (" + join_list(cfg_.join) +
                                         "): " + r.error().message);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
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
  o.bootstrap = cfg_.join.empty();
  o.cluster_id = [this] { return host_.cluster_id(); };
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
    if (rpc_) {
      rpc_->stop();
      rpc_.reset();
      rpc_port_ = 0;
    }
    {
      std::lock_guard lk(node_mu_);
      node_.reset();
    }
    n->stop();
    return e;
  };

  // The controller RPC serves from here on (joins, forwarding, member status); requests
  // that need the catalog answer `unavailable` until ready.
  if (!cfg_.rpc_address.empty()) {
    auto srv = std::make_unique<RpcServer>(*this, host_, cfg_.rpc_address);
    if (auto r = srv->start(); !r.ok()) return fail(r.error());
    rpc_port_ = srv->port();
    rpc_ = std::move(srv);
    auto colon = cfg_.rpc_address.rfind(':');
    advertised_rpc_ = cfg_.rpc_address.substr(0, colon) + ":" + std::to_string(rpc_port_.load());
  }

  const auto deadline = std::chrono::steady_clock::now() + cfg_.start_timeout;
  auto remaining = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                                 std::chrono::steady_clock::now());
  };

  if (joining) {
    // Ask the group to record and add this member; the leader promotes it to voter once
    // it caught up, so this returns when the catalog is here.
    for (;;) {
      auto r = announce(cfg_.join);
      if (r.ok()) break;
      if (r.error().code != Errc::unavailable && r.error().code != Errc::not_leader &&
          r.error().code != Errc::timeout)
        return fail(Error(r.error().code, "join refused: " + r.error().message));
      if (remaining().count() <= 0) return fail(Error(r.error().code, "join failed: " + r.error().message));
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }

  // Wait until the group has a leader and this member has the catalog: the leader applies
  // everything in its log (a barrier); a follower waits until it applied init_cluster.
  for (;;) {
    if (held_error()) break;  // a held member still announces itself (and is refused)
    const RaftRole role = n->role();
    if (role == RaftRole::leader) {
      auto b = n->barrier(std::max(remaining(), std::chrono::milliseconds(1)));
      if (b.ok()) break;
      if (b.error().code != Errc::not_leader && b.error().code != Errc::unavailable)
        return fail(b.error());
    } else if (role == RaftRole::follower && n->leader_id() != 0) {
      std::lock_guard lk(fsm_mu_);
      if (!fsm_.cluster_id().empty()) break;
    }
    if (remaining().count() <= 0)
      return fail(Error(Errc::unavailable,
                        "no leader with the catalog within " +
                            std::to_string(cfg_.start_timeout.count()) + " ms (role " +
                            std::string(to_string(n->role())) + ")"));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }

  std::string id;
  {
    std::lock_guard lk(fsm_mu_);
    id = fsm_.cluster_id();
  }
  if (id.empty() && n->role() == RaftRole::leader) {
    std::string fresh_id = random_uuid_v4();
    Command init = Command::init_cluster(fresh_id);
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
  if (id.empty() && !held_error())
    return fail(Error(Errc::unavailable, "the catalog has no cluster id yet"));

  // The host persists the id to meta.properties (fsynced) before answering; only then may
  // it be used (ARCHITECTURE.md §3).
  if (!id.empty())
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

  // Declare this member's level (and addresses) to the group if the record differs: a
  // restarted member after an upgrade or a downgrade. Refused below the level floor.
  if (!joining) {
    std::optional<MemberInfo> rec;
    {
      std::lock_guard lk(fsm_mu_);
      rec = fsm_.member(host_.node_id());
    }
    // (An ephemeral rpc port, "…:0" in tests, changes at every start; it is re-recorded
    // only with another change.)
    const bool rpc_ephemeral = cfg_.rpc_address.size() >= 2 &&
                               cfg_.rpc_address.compare(cfg_.rpc_address.size() - 2, 2, ":0") == 0;
    if (!rec || rec->level != cfg_.level || rec->raft_address != cfg_.address ||
        (!rpc_ephemeral && rec->rpc_address != advertised_rpc_)) {
      Result<MemberInfo> r = Error(Errc::unavailable, "");
      for (;;) {
        r = n->role() == RaftRole::leader ? join_member(JoinRequest{host_.node_id(), cfg_.address, advertised_rpc_, cfg_.level})
                                          : announce(peer_rpc_addresses());
        if (r.ok()) break;
        if (r.error().code != Errc::unavailable && r.error().code != Errc::not_leader &&
            r.error().code != Errc::timeout)
          break;
        if (remaining().count() <= 0) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
      if (!r.ok()) {
        ready_.store(false);
        return fail(Error(r.error().code, "the group refused this member (node " +
                                              std::to_string(host_.node_id().value()) + " at level " +
                                              std::to_string(cfg_.level.value()) + "): " + r.error().message));
      }
    }
  }
  if (auto h = held_error()) {
    ready_.store(false);
    return fail(*h);
  }
  log(LogLevel::info, "ready: cluster " + id + ", member " + std::to_string(host_.node_id().value()) +
                          " at metadata level " + std::to_string(cfg_.level.value()) + " (" +
                          std::string(to_string(n->role())) + "), raft " + cfg_.address +
                          ", rpc " + advertised_rpc_ + ", applied " + std::to_string(n->last_applied()));
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
  {
    std::lock_guard lk(fwd_mu_);
    fwd_pool_.clear();
    fwd_addr_.clear();
  }
  std::shared_ptr<RaftNode> n;
  {
    std::lock_guard lk(node_mu_);
    n.swap(node_);
  }
  if (n) n->stop();
}

// --- members and forwarding ------------------------------------------------------------------

RaftMetaStore::NoForward::NoForward() : prev(tl_no_forward) { tl_no_forward = true; }
RaftMetaStore::NoForward::~NoForward() { tl_no_forward = prev; }

void RaftMetaStore::note_leadership() {
  auto n = node();
  const bool leader = n && n->role() == RaftRole::leader;
  if (leader && !was_leader_.exchange(true)) {
    // A new leader has no heartbeats yet: every registered broker is live for one session
    // timeout (as after a restart), so a failover does not make the fleet "dead".
    std::lock_guard lk(live_mu_);
    last_seen_.clear();
    grace_until_ = now() + cfg_.session_timeout;
  } else if (!leader) {
    was_leader_.store(false);
  }
}

std::shared_ptr<MetadataStore> RaftMetaStore::leader_client() {
  if (tl_no_forward) return nullptr;
  auto n = node();
  if (!n || !ready_.load() || n->role() == RaftRole::leader) return nullptr;
  const std::uint64_t lid = n->leader_id();
  if (lid == 0 || lid == host_.node_id().value()) return nullptr;
  std::optional<MemberInfo> leader;
  {
    std::lock_guard lk(fsm_mu_);
    leader = fsm_.member(NodeId{static_cast<std::uint32_t>(lid)});
  }
  if (!leader || leader->rpc_address.empty()) return nullptr;
  std::lock_guard lk(fwd_mu_);
  if (fwd_addr_ != leader->rpc_address) {
    fwd_pool_.clear();
    fwd_addr_ = leader->rpc_address;
  }
  const std::size_t slot = fwd_next_++ % kForwardConnections;
  if (slot < fwd_pool_.size()) return fwd_pool_[slot];
  RemoteConfig rc;
  rc.controllers = {leader->rpc_address};
  rc.timeout = cfg_.timeout;
  rc.forwarded = true;
  auto c = std::make_shared<RemoteMetadataStore>(host_, rc);
  if (!c->start().ok()) return nullptr;
  fwd_pool_.push_back(c);
  return c;
}

Error RaftMetaStore::not_leader_error() {
  auto n = node();
  std::uint64_t lid = n ? n->leader_id() : 0;
  std::optional<MemberInfo> leader;
  if (lid != 0) {
    std::lock_guard lk(fsm_mu_);
    leader = fsm_.member(NodeId{static_cast<std::uint32_t>(lid)});
  }
  if (leader)
    return Error(Errc::not_leader, "member " + std::to_string(host_.node_id().value()) +
                                       " is not the leader; the leader is member " +
                                       std::to_string(lid) + " at " + leader->rpc_address,
                 Outcome::transient);
  return Error(Errc::not_leader, "member " + std::to_string(host_.node_id().value()) +
                                     " is not the leader and knows no leader yet",
               Outcome::transient);
}

ProposerView RaftMetaStore::proposer_view() {
  ProposerView v;
  v.own = cfg_.level;
  std::lock_guard lk(fsm_mu_);
  v.group = std::min(cfg_.level, fsm_.recorded_group_level().value_or(cfg_.level));
  v.stream_incarnations_finalized = fsm_.is_finalized(kStreamIncarnations);
  v.cache_incarnations_finalized = fsm_.is_finalized(kCacheIncarnations);
  return v;
}

std::vector<std::string> RaftMetaStore::peer_rpc_addresses() {
  std::vector<std::string> out;
  {
    std::lock_guard lk(fsm_mu_);
    for (auto& m : fsm_.list_members())
      if (m.id != host_.node_id() && !m.rpc_address.empty()) out.push_back(m.rpc_address);
  }
  for (auto& j : cfg_.join)
    if (std::find(out.begin(), out.end(), j) == out.end()) out.push_back(j);
  return out;
}

Result<MemberInfo> RaftMetaStore::announce(const std::vector<std::string>& via) {
  if (via.empty()) return Error(Errc::unavailable, "no other member known to announce this member to");
  RemoteConfig rc;
  rc.controllers = via;
  rc.timeout = std::max(cfg_.timeout, cfg_.start_timeout);  // the join waits for catch-up
  RemoteMetadataStore c(host_, rc);
  if (auto r = c.start(); !r.ok()) return r.error();
  return c.join_member(JoinRequest{host_.node_id(), cfg_.address, advertised_rpc_, cfg_.level});
}

MemberInfo RaftMetaStore::local_member_status() {
  MemberInfo m;
  m.id = host_.node_id();
  m.raft_address = cfg_.address;
  m.rpc_address = advertised_rpc_;
  m.level = cfg_.level;
  auto n = node();
  m.role = std::string(to_string(n ? n->role() : RaftRole::unavailable));
  std::lock_guard lk(fsm_mu_);
  m.applied = fsm_.applied();
  // The hash dumps the whole catalog: computed once per applied index (members listings
  // probe every member).
  if (hash_at_ != m.applied || hash_dirty_) {
    hash_ = fsm_.state_hash();
    hash_at_ = m.applied;
    hash_dirty_ = false;
  }
  m.state_hash = hash_;
  if (auto h = fsm_.held()) {
    m.held = true;
    m.held_index = ChangeSeq{h->index};
    m.held_required_level = h->required;
    m.held_reason = h->reason;
  }
  if (auto rec = fsm_.member(m.id)) m.joined_seq = rec->joined_seq;
  return m;
}

Result<MembersView> RaftMetaStore::list_members() {
  if (auto f = leader_client()) return f->list_members();
  RAFT_META_TRY(read_barrier_any());
  MembersView v;
  auto n = node();
  v.leader = NodeId{static_cast<std::uint32_t>(n ? n->leader_id() : 0)};
  std::vector<MemberInfo> recorded;
  {
    std::lock_guard lk(fsm_mu_);
    recorded = fsm_.list_members();
    v.level_floor = fsm_.level_floor();
    v.group_level = std::min(cfg_.level, fsm_.recorded_group_level().value_or(cfg_.level));
  }
  for (auto& rec : recorded) {
    MemberInfo m = rec;
    if (rec.id == host_.node_id()) {
      m = local_member_status();
      m.level = rec.level;
      m.joined_seq = rec.joined_seq;
    } else {
      m.role = "unreachable";
      auto st = probe_member_status(rec.rpc_address, host_, std::chrono::milliseconds(1000));
      if (st.ok()) {
        m.role = st->role;
        m.held = st->held;
        m.held_index = st->held_index;
        m.held_required_level = st->held_required_level;
        m.held_reason = st->held_reason;
        m.applied = st->applied;
        m.state_hash = st->state_hash;
      }
    }
    v.members.push_back(std::move(m));
  }
  return v;
}

Result<MemberInfo> RaftMetaStore::join_member(const JoinRequest& req) {
  if (auto f = leader_client()) return f->join_member(req);
  auto n = node();
  if (!n || !ready_.load()) return Error(Errc::unavailable, "raft-meta is not started");
  if (n->role() != RaftRole::leader) return not_leader_error();
  if (req.id.value() == 0) return Error(Errc::invalid_argument, "member id must be > 0");
  // The rpc address may be empty: a member without the controller RPC (metadata.rpc_address
  // empty) cannot be forwarded to, which only makes sense alone.
  if (req.raft_address.find(':') == std::string::npos ||
      (!req.rpc_address.empty() && req.rpc_address.find(':') == std::string::npos))
    return Error(Errc::invalid_argument, "member addresses must be ip:port");
  if (req.level < kLowestMetadataLevel)
    return Error(Errc::invalid_argument, "metadata level " + std::to_string(req.level.value()) +
                                             " is below the lowest level " +
                                             std::to_string(kLowestMetadataLevel.value()));
  {
    std::lock_guard lk(fsm_mu_);
    if (req.level < fsm_.level_floor())
      return Error(Errc::conflict, "member " + std::to_string(req.id.value()) + " runs at metadata level " +
                                       std::to_string(req.level.value()) + ", below the group's level floor " +
                                       std::to_string(fsm_.level_floor().value()) +
                                       " (raised by the first flagged entry); upgrade it first");
    if (auto old = fsm_.member(req.id); old && old->raft_address != req.raft_address)
      return Error(Errc::conflict, "node id " + std::to_string(req.id.value()) +
                                       " is already a member at " + old->raft_address);
  }
  // Record first, so that the group level includes the member before it receives any
  // entry (proposers stop flagging entries at once); then add it to the configuration.
  auto r = propose(Command::join_member(req));
  if (!r.ok()) return r.error();
  if (!r->ok()) return *r->error;
  if (req.id != host_.node_id()) {
    auto a = n->add_voter(req.id.value(), req.raft_address, std::max(cfg_.timeout, cfg_.start_timeout));
    if (!a.ok()) {
      log(LogLevel::warn, "adding member " + std::to_string(req.id.value()) + " failed: " + a.error().message);
      if (a.error().code == Errc::conflict) (void)propose(Command::leave_member(req.id));
      return a.error();
    }
  }
  log(LogLevel::info, "member " + std::to_string(req.id.value()) + " at " + req.raft_address +
                          " (rpc " + req.rpc_address + ") joined at metadata level " +
                          std::to_string(req.level.value()));
  std::lock_guard lk(fsm_mu_);
  auto rec = fsm_.member(req.id);
  if (!rec) return Error(Errc::internal, "member record missing after join");
  return *rec;
}

Result<void> RaftMetaStore::remove_member(NodeId id) {
  if (auto f = leader_client()) return f->remove_member(id);
  auto n = node();
  if (!n || !ready_.load()) return Error(Errc::unavailable, "raft-meta is not started");
  if (n->role() != RaftRole::leader) return not_leader_error();
  auto conf = n->configuration(cfg_.timeout);
  if (!conf.ok()) return conf.error();
  bool in_conf = false;
  std::size_t voters = 0;
  for (auto& srv : conf.value()) {
    if (srv.voter) ++voters;
    if (srv.id == id.value()) in_conf = true;
  }
  bool recorded = false;
  {
    std::lock_guard lk(fsm_mu_);
    recorded = fsm_.member(id).has_value();
  }
  if (!in_conf && !recorded) return Error(Errc::not_found, "no member " + std::to_string(id.value()));
  if (in_conf && voters <= 1)
    return Error(Errc::conflict, "member " + std::to_string(id.value()) +
                                     " is the last voter; a group cannot remove its last member");
  if (recorded) {
    auto r = propose(Command::leave_member(id));
    if (!r.ok()) return r.error();
    if (!r->ok()) return *r->error;
  }
  if (in_conf) RAFT_META_TRY(n->remove_server(id.value(), cfg_.timeout));
  log(LogLevel::info, "member " + std::to_string(id.value()) + " removed");
  return {};
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
  {
    std::lock_guard lk(fsm_mu_);
    s.level = std::min(cfg_.level, fsm_.recorded_group_level().value_or(cfg_.level));
  }
  s.ready = ready_.load() && (role == RaftRole::leader ||
                              (role == RaftRole::follower && n->leader_id() != 0));
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
    s_.hash_dirty_ = true;
  }
  if (r.ok()) {
    ChangeSeq at;
    {
      std::lock_guard lk(s_.fsm_mu_);
      at = s_.fsm_.applied();
    }
    s_.log(LogLevel::info, "restored the catalog from a snapshot at index " + std::to_string(at.value()));
    s_.catalog_changed();
  }
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
  if (n->role() != RaftRole::leader) return not_leader_error();
  note_leadership();
  Command stamped = c;
  stamped.level = cfg_.level.value();
  auto r = n->apply(encode_command(stamped), cfg_.timeout);
  if (!r.ok() && r.error().code == Errc::not_leader) return not_leader_error();
  return r;
}


Result<TenantInfo> RaftMetaStore::create_tenant(const std::string& name) {
  if (auto f = leader_client()) return f->create_tenant(name);
  RAFT_META_TRY(validate_name(NameKind::tenant, name));
  auto r = propose(Command::create_tenant(name));
  if (!r.ok()) return r.error();
  if (!r->ok()) return *r->error;
  return r->tenant;
}

Result<void> RaftMetaStore::delete_tenant(const std::string& name) {
  if (auto f = leader_client()) return f->delete_tenant(name);
  RAFT_META_TRY(validate_name(NameKind::tenant, name));
  auto r = propose(Command::delete_tenant(name));
  if (!r.ok()) return r.error();
  if (!r->ok()) return *r->error;
  return {};
}

Result<NamespaceInfo> RaftMetaStore::create_namespace(const std::string& tenant,
                                                      const std::string& name) {
  if (auto f = leader_client()) return f->create_namespace(tenant, name);
  RAFT_META_TRY(validate_name(NameKind::tenant, tenant));
  RAFT_META_TRY(validate_name(NameKind::ns, name));
  auto r = propose(Command::create_namespace(tenant, name));
  if (!r.ok()) return r.error();
  if (!r->ok()) return *r->error;
  return r->ns;
}

Result<void> RaftMetaStore::delete_namespace(const std::string& tenant, const std::string& name) {
  if (auto f = leader_client()) return f->delete_namespace(tenant, name);
  RAFT_META_TRY(validate_name(NameKind::tenant, tenant));
  RAFT_META_TRY(validate_name(NameKind::ns, name));
  auto r = propose(Command::delete_namespace(tenant, name));
  if (!r.ok()) return r.error();
  if (!r->ok()) return *r->error;
  return {};
}

Result<StreamInfo> RaftMetaStore::create_stream(const StreamKey& key, const StreamSpec& spec) {
  if (auto f = leader_client()) return f->create_stream(key, spec);
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
  // Rule 2 (proposer.h): the group level, not this member's, decides the proposal and
  // the flag; a member below a rule's level writes the entry the old way.
  (void)stamp_entry(c, proposer_view(), clock);
  std::vector<BrokerInfo> registered;
  {
    std::lock_guard lk(fsm_mu_);
    registered = fsm_.list_brokers();
  }

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
  if (auto f = leader_client()) return f->delete_stream(key);
  RAFT_META_TRY(validate_stream_key(key));
  Command c = Command::delete_stream(key);
  (void)stamp_entry(c, proposer_view(), now_us());
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
  if (n->role() != RaftRole::leader) return not_leader_error();
  note_leadership();
  auto r = n->barrier(cfg_.timeout);
  if (!r.ok() && r.error().code == Errc::not_leader) return not_leader_error();
  if (auto h = held_error()) return *h;
  return r;
}

// Members listing: current on the leader; elsewhere (no leader known) this member's view.
Result<void> RaftMetaStore::read_barrier_any() {
  auto n = node();
  if (!n) return Error(Errc::unavailable, "raft-meta is not started");
  if (n->role() != RaftRole::leader) return {};
  auto r = n->barrier(cfg_.timeout);
  if (!r.ok() && r.error().code != Errc::not_leader) return r.error();
  return {};
}

Result<std::vector<TenantInfo>> RaftMetaStore::list_tenants() {
  if (auto f = leader_client()) return f->list_tenants();
  RAFT_META_TRY(read_barrier());
  std::lock_guard lk(fsm_mu_);
  return fsm_.list_tenants();
}

Result<std::vector<NamespaceInfo>> RaftMetaStore::list_namespaces(const std::string& tenant) {
  if (auto f = leader_client()) return f->list_namespaces(tenant);
  RAFT_META_TRY(validate_name(NameKind::tenant, tenant));
  RAFT_META_TRY(read_barrier());
  std::lock_guard lk(fsm_mu_);
  return fsm_.list_namespaces(tenant);
}

Result<StreamInfo> RaftMetaStore::get_stream(const StreamKey& key) {
  if (auto f = leader_client()) return f->get_stream(key);
  RAFT_META_TRY(validate_stream_key(key));
  RAFT_META_TRY(read_barrier());
  std::lock_guard lk(fsm_mu_);
  return fsm_.get_stream(key);
}

Result<std::vector<StreamInfo>> RaftMetaStore::list_streams(const std::string& tenant,
                                                            const std::string& ns) {
  if (auto f = leader_client()) return f->list_streams(tenant, ns);
  RAFT_META_TRY(validate_name(NameKind::tenant, tenant));
  RAFT_META_TRY(validate_name(NameKind::ns, ns));
  RAFT_META_TRY(read_barrier());
  std::lock_guard lk(fsm_mu_);
  return fsm_.list_streams(tenant, ns);
}

Result<CatalogSnapshot> RaftMetaStore::snapshot() {
  if (auto f = leader_client()) return f->snapshot();
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
  if (auto f = leader_client()) return f->register_broker(reg);
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
  if (auto f = leader_client()) return f->heartbeat_broker(id);
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
  if (auto f = leader_client()) return f->unregister_broker(id);
  auto r = propose(Command::unregister_broker(id));
  if (!r.ok()) return r.error();
  if (!r->ok()) return *r->error;
  std::lock_guard lk(live_mu_);
  last_seen_.erase(id.value());
  return {};
}

Result<std::vector<BrokerInfo>> RaftMetaStore::list_brokers() {
  if (auto f = leader_client()) return f->list_brokers();
  RAFT_META_TRY(read_barrier());
  std::vector<BrokerInfo> registered;
  {
    std::lock_guard lk(fsm_mu_);
    registered = fsm_.list_brokers();
  }
  return brokers_with_liveness(std::move(registered));
}

Result<std::vector<FeatureInfo>> RaftMetaStore::list_features() {
  if (auto f = leader_client()) return f->list_features();
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
  if (auto f = leader_client()) return f->finalize_feature(name);
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
  // The gate: every member (the group level, from the replicated member records) at the
  // feature's level, and every serving broker implementing it.
  if (auto g = check_finalize(name, proposer_view().group, serving); !g.ok()) return g.error();
  auto r = propose(Command::finalize_feature(name));
  if (!r.ok()) return r.error();
  if (!r->ok()) return *r->error;
  fin[name] = r->finalized_seq;
  log(LogLevel::info, "feature " + name + " finalized at " +
                          std::to_string(r->finalized_seq.value()));
  return feature_info(name, fin, serving);
}

Result<std::vector<Tombstone>> RaftMetaStore::list_tombstones() {
  if (auto f = leader_client()) return f->list_tombstones();
  RAFT_META_TRY(read_barrier());
  std::lock_guard lk(fsm_mu_);
  try {
    return fsm_.list_tombstones();
  } catch (const std::exception& e) {
    return Error(Errc::internal, std::string("tombstones: ") + e.what());
  }
}

// --- caches ------------------------------------------------------------------------------

Result<CacheInfo> RaftMetaStore::create_cache(const StreamKey& key, const CacheSpec& spec) {
  // The seed's rule is about the member the request reaches: an upgraded member refuses a
  // cache create while the group is below 14, even when the leader it would forward to is
  // older (and would write the entry the old way).
  {
    Command probe = Command::create_cache(key, spec, 0);
    RAFT_META_TRY(stamp_entry(probe, proposer_view(), 0));
  }
  if (auto f = leader_client()) return f->create_cache(key, spec);
  RAFT_META_TRY(validate_name(NameKind::tenant, key.tenant));
  RAFT_META_TRY(validate_name(NameKind::ns, key.ns));
  RAFT_META_TRY(validate_name(NameKind::cache, key.name));
  if (spec.default_ttl_ms != -1 && spec.default_ttl_ms <= 0)
    return Error(Errc::invalid_argument, "default_ttl_ms must be -1 (no expiry) or positive");
  const std::int64_t clock = now_us();
  Command c = Command::create_cache(key, spec, clock);
  RAFT_META_TRY(stamp_entry(c, proposer_view(), clock));
  auto r = propose(c);
  if (!r.ok()) return r.error();
  if (!r->ok()) return *r->error;
  return r->cache;
}

Result<CacheInfo> RaftMetaStore::delete_cache(const StreamKey& key) {
  if (auto f = leader_client()) return f->delete_cache(key);
  RAFT_META_TRY(validate_name(NameKind::tenant, key.tenant));
  RAFT_META_TRY(validate_name(NameKind::ns, key.ns));
  RAFT_META_TRY(validate_name(NameKind::cache, key.name));
  Command c = Command::delete_cache(key);
  (void)stamp_entry(c, proposer_view(), now_us());
  auto r = propose(c);
  if (!r.ok()) return r.error();
  if (!r->ok()) return *r->error;
  return r->cache;
}

Result<CacheInfo> RaftMetaStore::get_cache(const StreamKey& key) {
  if (auto f = leader_client()) return f->get_cache(key);
  RAFT_META_TRY(validate_name(NameKind::tenant, key.tenant));
  RAFT_META_TRY(validate_name(NameKind::ns, key.ns));
  RAFT_META_TRY(validate_name(NameKind::cache, key.name));
  RAFT_META_TRY(read_barrier());
  std::lock_guard lk(fsm_mu_);
  auto c = fsm_.cache(key);
  if (!c) return Error(Errc::not_found, "no cache " + key.to_string());
  return *c;
}

Result<std::vector<CacheInfo>> RaftMetaStore::list_caches(const std::string& tenant,
                                                          const std::string& ns) {
  if (auto f = leader_client()) return f->list_caches(tenant, ns);
  RAFT_META_TRY(validate_name(NameKind::tenant, tenant));
  RAFT_META_TRY(validate_name(NameKind::ns, ns));
  RAFT_META_TRY(read_barrier());
  std::lock_guard lk(fsm_mu_);
  return fsm_.list_caches(tenant, ns);
}

ChangeBatch RaftMetaStore::changes_after(ChangeSeq after, std::size_t limit) {
  std::lock_guard lk(fsm_mu_);
  return fsm_.changes_after(after, limit);
}

// --- watch ---------------------------------------------------------------------------------

std::unique_ptr<WatchHandle> RaftMetaStore::watch(ChangeSeq after,
                                                  std::function<void(const ChangeEvent&)> on_change,
                                                  std::function<void()> resync) {
  return watches_.add(after, std::move(on_change), std::move(resync));
}

void RaftMetaStore::delivery_main() {
  std::uint64_t seen = 0;
  bool more = false;
  const auto fetch = [this](ChangeSeq after) -> Result<WatchBatch> {
    ChangeBatch batch;
    {
      std::lock_guard lk(fsm_mu_);
      try {
        batch = fsm_.changes_after(after, kDeliveryBatch);
      } catch (const std::exception& e) {
        log(LogLevel::error, std::string("reading the change log: ") + e.what());
        return Error(Errc::internal, e.what());
      }
    }
    WatchBatch out;
    out.resync = batch.resync;
    out.more = batch.events.size() == kDeliveryBatch;
    out.events = std::move(batch.events);
    return out;
  };
  const auto on_error = [this](const std::string& m) { log(LogLevel::error, m); };
  for (;;) {
    {
      std::unique_lock lk(watch_mu_);
      if (!more) watch_cv_.wait(lk, [&] { return delivery_stop_ || wake_seq_ != seen; });
      if (delivery_stop_) return;
      seen = wake_seq_;
    }
    more = watches_.deliver(fetch, on_error).more;
  }
}

}  // namespace sluice::raft_meta
