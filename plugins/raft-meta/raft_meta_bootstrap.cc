// RaftMetaStore lifecycle: construction, start (bootstrap a new group, join one, or restart
// from raft.dir), stop.
#include "raft_meta_store.h"
#include "raft_meta_store_internal.h"

#include "rpc.h"

#include "sluice/durable_fs.h"
#include "sluice/uuid.h"
#include "sluice/strings.h"

#include <pthread.h>
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

// How long a restarted follower asks for the leader's read index before it settles for less.
constexpr std::chrono::milliseconds kReadIndexPatience{3000};

constexpr std::string_view kComponent = "raft-meta";

std::string join_list(const std::vector<std::string>& v) {
  std::string out;
  for (auto& x : v) out += (out.empty() ? "" : ",") + x;
  return out;
}

}  // namespace

// --- lifecycle -----------------------------------------------------------------------------

RaftMetaStore::RaftMetaStore(PluginHost& host) : RaftMetaStore(host, RaftMetaConfig::from_host(host)) {}

RaftMetaStore::RaftMetaStore(PluginHost& host, RaftMetaConfig config)
    : host_(host), cfg_(std::move(config)), fsm_(cfg_.change_retention, cfg_.level) {
  delivery_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "meta-delivery");
    delivery_main();
  });
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
  {
    std::lock_guard lk(fwd_mu_);
    fwd_stopped_ = false;
  }
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
      held_now_.store(false);
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
  // A seed (no metadata.join) whose raft directory is gone but whose data directory names
  // a cluster lost its log: bootstrapping would start a second group under the old
  // cluster's id, and the old members, which still list it, would take its rewritten log
  // (same indexes and terms, other entries) as theirs. Refused before libraft writes.
  if (fresh && cfg_.join.empty() && !host_.cluster_id().empty())
    return Error(Errc::cluster_id_mismatch,
                 "raft.dir " + cfg_.raft_dir + " has no raft log, but this data directory belongs to cluster " +
                     host_.cluster_id() +
                     ": this member lost its log. Rebuild it from the group: remove it (sluice members remove " +
                     std::to_string(host_.node_id().value()) +
                     "), set metadata.join to the other members' RPC addresses and start it again "
                     "(docs/operations.md)");
  if (joining) {
    RemoteConfig rc;
    rc.controllers = cfg_.join;
    rc.timeout = cfg_.timeout;
    rc.tls = cfg_.rpc_tls;
    // The members may be starting too (systemd starts them together): retry until
    // metadata.start_timeout, but give up at once on another cluster's id.
    const auto give_up = std::chrono::steady_clock::now() + cfg_.start_timeout;
    for (;;) {
      RemoteMetadataStore probe(host_, rc);
      auto r = probe.start();
      if (r.ok()) {
        // A member the group still lists would be a voter with an empty log the moment it
        // answers: with the leader down, it and one other member could elect a leader
        // without entries the group committed (acknowledged creates lost, incarnations
        // handed out again). It must be removed first and then join as a new member, which
        // the leader catches up before it votes.
        auto m = probe.list_members();
        if (m.ok()) {
          for (const auto& rec : m->members)
            if (rec.id == host_.node_id())
              return Error(Errc::conflict,
                           "member " + std::to_string(host_.node_id().value()) +
                               " is still in the group but its raft log is empty: it must not vote "
                               "before it has the group's log. Remove it first (sluice members remove " +
                               std::to_string(host_.node_id().value()) + "), then start it again to join "
                               "(docs/operations.md)");
          break;
        }
        r = m.error();
      }
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
  o.cluster_secret = cfg_.cluster_secret;
  o.require_auth = cfg_.require_auth;
  o.log = [this](LogLevel l, const std::string& m) { log(l, m); };
  // A held member cannot serve; as leader it would make the whole group unavailable.
  o.step_down_wanted = [this] { return held_now_.load(); };
  // Level 19 group commit: concurrent proposals share one batch entry (command.h). Only
  // proposals propose() marks batchable are combined, and only while the group is at 19.
  if (cfg_.level >= kBatchedEntriesLevel) {
    o.combine = [level = cfg_.level.value()](const std::vector<std::string>& parts) {
      return encode_batch(parts, level);
    };
    o.may_combine = [this] { return group_allows_batches(); };
    o.max_batch_commands = kMaxBatchCommands;
    o.max_batch_bytes = kMaxBatchBytes;
  }
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
    auto srv = std::make_unique<RpcServer>(*this, host_, cfg_.rpc_address, cfg_.rpc_tls);
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
  // everything in its log (a barrier); a follower waits until it applied the leader's read
  // index (RaftMetaStore::read_index: what the leader had applied once a barrier of its term
  // committed), asked over the controller RPC. Then its own member record and the group's
  // level floor are current, so a member restarted below the floor is refused (or found
  // held) here, at start, rather than after it served a stale catalog (docs/upgrades.md).
  // The follower's own commit index is no such target: right after a restart it is what its
  // log alone proves (0 without a snapshot) until the leader's first append is processed,
  // which may come after the leader is known; nor are the other followers' applied
  // changes after a whole-group restart.
  std::uint64_t catch_up_to = 0;    // the last resort: a raft index
  std::uint64_t catch_up_seq = 0;   // a change sequence (the read index, or the fallback)
  std::optional<std::chrono::steady_clock::time_point> asking_since;
  auto next_ask = std::chrono::steady_clock::now();
  auto fsm_applied_seq = [&] {
    std::lock_guard lk(fsm_mu_);
    return fsm_.applied().value();
  };
  auto leader_read_index = [&]() -> std::optional<std::uint64_t> {
    std::vector<std::string> via;  // the leader's recorded address first; the others move on
    {
      std::lock_guard lk(fsm_mu_);
      if (auto m = fsm_.member(NodeId{static_cast<std::uint32_t>(n->leader_id())}); m && !m->rpc_address.empty())
        via.push_back(m->rpc_address);
    }
    for (auto& a : peer_rpc_addresses())
      if (std::find(via.begin(), via.end(), a) == via.end()) via.push_back(a);
    for (const auto& addr : via) {  // another member answers not_leader: the next one
      RemoteConfig rc;
      rc.controllers = {addr};
      rc.timeout = std::clamp(remaining(), std::chrono::milliseconds(1), std::chrono::milliseconds(1000));
      rc.tls = cfg_.rpc_tls;
      rc.quiet = true;
      RemoteMetadataStore c(host_, rc);
      if (!c.start().ok()) continue;
      if (auto r = c.read_index(); r.ok()) return r->value();
    }
    return std::nullopt;
  };
  auto others_applied = [&]() -> std::optional<std::uint64_t> {
    std::optional<std::uint64_t> best;
    for (const auto& addr : peer_rpc_addresses()) {
      auto budget = std::clamp(remaining(), std::chrono::milliseconds(1), std::chrono::milliseconds(1000));
      auto st = probe_member_status(addr, host_, budget, cfg_.rpc_tls);
      if (!st.ok() || st->id == host_.node_id()) continue;
      best = std::max(best.value_or(0), st->applied.value());
    }
    return best;
  };
  auto choose_target = [&] {
    const auto now = std::chrono::steady_clock::now();
    if (!asking_since) asking_since = now;
    if (auto ri = leader_read_index()) {
      catch_up_seq = std::max<std::uint64_t>(*ri, 1);
      return;
    }
    if (std::chrono::steady_clock::now() - *asking_since < kReadIndexPatience) {
      next_ask = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
      return;
    }
    // No leader answers a read index (a build without it, or addresses recorded by an older
    // start): the highest change the other members applied, else the commit index known
    // here. Raft still holds this member if it applies an entry above its level; only the
    // refusal may come later.
    if (auto g = others_applied()) {
      catch_up_seq = std::max<std::uint64_t>(*g, 1);
      log(LogLevel::warn, "no leader answered for a read index; catching up to change " +
                              std::to_string(catch_up_seq) + ", the highest the other members applied");
    } else {
      catch_up_to = std::max<std::uint64_t>(n->commit_index(), 1);
      log(LogLevel::warn, "no other member answered over the controller RPC; catching up to the commit index " +
                              std::to_string(catch_up_to) + " known here");
    }
  };
  for (;;) {
    if (held_error()) break;  // a held member still announces itself (and is refused)
    const RaftRole role = n->role();
    if (role == RaftRole::leader) {
      auto b = n->barrier(std::max(remaining(), std::chrono::milliseconds(1)));
      if (b.ok()) break;
      if (b.error().code != Errc::not_leader && b.error().code != Errc::unavailable)
        return fail(b.error());
    } else if (role == RaftRole::follower && n->leader_id() != 0) {
      if (catch_up_to == 0 && catch_up_seq == 0 && std::chrono::steady_clock::now() >= next_ask) choose_target();
      std::lock_guard lk(fsm_mu_);
      if (!fsm_.cluster_id().empty() && ((catch_up_seq != 0 && fsm_.applied().value() >= catch_up_seq) ||
                                         (catch_up_to != 0 && n->last_applied() >= catch_up_to)))
        break;
    }
    if (remaining().count() <= 0)
      return fail(Error(Errc::unavailable,
                        "no leader with the catalog within " +
                            std::to_string(cfg_.start_timeout.count()) + " ms (role " +
                            std::string(to_string(n->role())) + ", applied " +
                            std::to_string(n->last_applied()) +
                            (catch_up_to ? " of " + std::to_string(catch_up_to) + " committed" : std::string()) +
                            (catch_up_seq ? ", change " + std::to_string(fsm_applied_seq()) + " of " +
                                                std::to_string(catch_up_seq) + " the group applied"
                                          : std::string()) +
                            ")"));
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
  // it be used (docs/architecture.md "Identity").
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
  std::vector<std::shared_ptr<RemoteMetadataStore>> idle;  // closed after the lock is released
  {
    std::lock_guard lk(fwd_mu_);
    idle.swap(fwd_idle_);
    fwd_addr_.clear();
    ++fwd_epoch_;
    fwd_open_ = 0;
    fwd_stopped_ = true;  // a call that passed ready_ before this neither opens nor keeps one
    fwd_cv_.notify_all();
  }
  idle.clear();
  std::shared_ptr<RaftNode> n;
  {
    std::lock_guard lk(node_mu_);
    n.swap(node_);
  }
  if (n) n->stop();
}

}  // namespace sluice::raft_meta
