// RaftMetaStore metadata members (join, remove, status) and forwarding to the leader.
#include "raft_meta_store.h"
#include "raft_meta_store_internal.h"

#include "rpc.h"
#include "rpc_tls.h"

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

thread_local bool tl_no_forward = false;

}  // namespace

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
  std::shared_ptr<RemoteMetadataStore> c;
  std::uint64_t epoch;
  std::vector<std::shared_ptr<RemoteMetadataStore>> drop;  // closed after the lock is released
  {
    std::unique_lock lk(fwd_mu_);
    if (fwd_stopped_) return nullptr;
    if (fwd_addr_ != leader->rpc_address) {
      drop.swap(fwd_idle_);
      fwd_open_ = 0;  // counted per leader: leases to the old one close when they come back
      fwd_addr_ = leader->rpc_address;
      ++fwd_epoch_;
      fwd_cv_.notify_all();
    }
    // At most kForwardOpen connections to the leader: its RPC server's connection limit is
    // shared with the brokers and the other members. Beyond that a call waits for one.
    if (fwd_idle_.empty() && fwd_open_ >= kForwardOpen &&
        !fwd_cv_.wait_for(lk, cfg_.timeout, [&] {
          return fwd_stopped_ || !fwd_idle_.empty() || fwd_open_ < kForwardOpen;
        }))
      return nullptr;  // answered as by a member that cannot reach the leader
    if (fwd_stopped_) return nullptr;
    epoch = fwd_epoch_;
    if (!fwd_idle_.empty()) {
      c = std::move(fwd_idle_.back());
      fwd_idle_.pop_back();
    } else {
      ++fwd_open_;  // this call's new connection, counted before it exists
    }
  }
  drop.clear();
  if (!c) {  // none idle: another connection (its hello is a round trip, outside the lock)
    RemoteConfig rc;
    rc.controllers = {leader->rpc_address};
    rc.timeout = cfg_.timeout;
    rc.forwarded = true;
    rc.tls = cfg_.rpc_tls;
    c = std::make_shared<RemoteMetadataStore>(host_, rc);
    if (!c->start().ok()) {
      c.reset();
      std::lock_guard lk(fwd_mu_);
      if (epoch == fwd_epoch_) --fwd_open_;
      fwd_cv_.notify_one();
      return nullptr;
    }
  }
  // The lease: the caller's pointer, which hands the connection back when its last copy goes.
  RemoteMetadataStore* raw = c.get();
  return std::shared_ptr<MetadataStore>(raw, [this, c = std::move(c), epoch](MetadataStore*) mutable {
    return_forward_client(std::move(c), epoch);
  });
}

void RaftMetaStore::return_forward_client(std::shared_ptr<RemoteMetadataStore> c, std::uint64_t epoch) {
  std::shared_ptr<RemoteMetadataStore> drop;  // closed after the lock is released
  std::lock_guard lk(fwd_mu_);
  if (epoch == fwd_epoch_ && !fwd_stopped_ && fwd_idle_.size() < kForwardIdle) {
    fwd_idle_.push_back(std::move(c));
  } else {
    drop = std::move(c);  // a moved leader, a stopped store, or enough idle already
    // Counted only in the epoch it was opened in: a leader move or stop uncounted the
    // idle ones then, and starts the count again for the new leader.
    if (epoch == fwd_epoch_) --fwd_open_;
  }
  fwd_cv_.notify_one();
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

ProposerView RaftMetaStore::proposer_view() { return proposal_context()->view; }

std::shared_ptr<const RaftMetaStore::ProposalContext> RaftMetaStore::proposal_context() {
  const std::uint64_t seen = fsm_.generation();
  {
    std::lock_guard lk(ctx_mu_);
    if (ctx_ && ctx_->generation == seen) return ctx_;
  }
  auto c = std::make_shared<ProposalContext>();
  {
    std::lock_guard lk(fsm_mu_);
    c->generation = fsm_.generation();
    c->recorded_group = fsm_.recorded_group_level();
    for (auto& [name, at] : fsm_.finalized_features()) c->finalized.insert(name);
    c->brokers = fsm_.list_brokers();
    if (auto h = fsm_.held())
      c->held = Error(Errc::unavailable, "this metadata member is held at index " +
                                             std::to_string(h->index) + ": " + h->reason,
                      Outcome::definite);
  }
  ProposerView& v = c->view;
  v.own = cfg_.level;
  v.group = std::min(cfg_.level, c->recorded_group.value_or(cfg_.level));
  v.stream_incarnations_finalized = c->finalized.count(kStreamIncarnations) > 0;
  v.cache_incarnations_finalized = c->finalized.count(kCacheIncarnations) > 0;
  v.replicated_shards_finalized = c->finalized.count(kReplicatedShards) > 0;
  v.shard_reassignment_finalized = c->finalized.count(kShardReassignment) > 0;
  v.counters_finalized = c->finalized.count(kCounters) > 0;
  std::lock_guard lk(ctx_mu_);
  if (!ctx_ || ctx_->generation < c->generation) ctx_ = c;
  return c;
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
  rc.tls = cfg_.rpc_tls;
  RemoteMetadataStore c(host_, rc);
  if (auto r = c.start(); !r.ok()) return r.error();
  return c.join_member(JoinRequest{host_.node_id(), cfg_.address, advertised_rpc_, cfg_.level});
}

Result<ChangeSeq> RaftMetaStore::read_index() {
  auto n = node();
  if (!n || !ready_.load()) return Error(Errc::unavailable, "raft-meta is not started");
  if (n->role() != RaftRole::leader) return not_leader_error();
  if (auto h = held_error()) return *h;  // its applied state stopped: no read index
  if (auto b = n->barrier(cfg_.timeout); !b.ok()) return b.error();
  std::lock_guard lk(fsm_mu_);
  return fsm_.applied();
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
      auto st = probe_member_status(rec.rpc_address, host_, std::chrono::milliseconds(1000),
                                    cfg_.rpc_tls);
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
  // The voters that stay must be able to commit without the one leaving: a majority of them
  // answering. Three voters, one down: removing a live one left a configuration that needs
  // the dead one, and the group stopped committing, the removal's own entry included
  // (review finding). Removing the dead one is what such a group needs, and passes.
  if (in_conf) {
    std::size_t stay = 0, live = 0;
    std::string down;
    for (const auto& srv : conf.value()) {
      if (!srv.voter || srv.id == id.value()) continue;
      ++stay;
      if (srv.id == host_.node_id().value()) {
        ++live;
        continue;
      }
      std::optional<MemberInfo> rec;
      {
        std::lock_guard lk(fsm_mu_);
        rec = fsm_.member(NodeId{static_cast<std::uint32_t>(srv.id)});
      }
      if (rec && probe_member_status(rec->rpc_address, host_, std::chrono::milliseconds(1000), cfg_.rpc_tls).ok())
        ++live;
      else
        down += (down.empty() ? "" : ", ") + std::to_string(srv.id);
    }
    if (live < stay / 2 + 1)
      return Error(Errc::conflict, "removing member " + std::to_string(id.value()) + " would leave " +
                                       std::to_string(stay) + " voter(s) of which only " + std::to_string(live) +
                                       " answer (not answering: " + down +
                                       "); the group could not commit until they are back. Bring them back, or "
                                       "remove the ones that are gone first");
  }
  // Out of the Raft configuration first, then un-recorded (join does the reverse): the
  // leave raises the group level once it applies, and a member still voting then (an older
  // binary being rolled back out) would apply entries stamped for a level it does not
  // implement, and diverge. A remove_server that fails leaves the record, so the group
  // stays at the lower level until a retry finishes. This leader removing itself un-records
  // itself first (it runs this build; after its removal it could not propose).
  auto leave = [&]() -> Result<void> {
    if (!recorded) return {};
    auto r = propose(Command::leave_member(id));
    if (!r.ok()) return r.error();
    if (!r->ok()) return *r->error;
    return {};
  };
  const bool self = id == host_.node_id();
  if (self) RAFT_META_TRY(leave());
  if (in_conf) RAFT_META_TRY(n->remove_server(id.value(), cfg_.timeout));
  if (!self) RAFT_META_TRY(leave());
  log(LogLevel::info, "member " + std::to_string(id.value()) + " removed");
  return {};
}

Result<void> RaftMetaStore::reload() {
  // One RpcTls serves the RPC server and every client of this member (rpc_tls.h): new
  // connections use the new certificates, open ones keep theirs.
  if (!cfg_.rpc_tls) return {};
  if (auto r = cfg_.rpc_tls->reload(); !r) return r;
  log(LogLevel::info, "controller RPC certificates reloaded");
  return {};
}

bool RaftMetaStore::is_controller() {
  // Notices a step-down (and a new leadership's grace period for broker liveness) even when
  // no proposal passed through this member meanwhile.
  note_leadership();
  auto n = node();
  if (!(ready_.load() && !starting_.load() && n && n->role() == RaftRole::leader && !held_error())) return false;
  // Not during the liveness grace of a new leadership (or a restart): every registered
  // broker then counts as live without having been heard from, and the controller would
  // act on that guess: elect a dead replica for a leaderless shard, or finish a
  // reassignment (dropping a live in-sync copy) because a crashed target "is live". The
  // grace suppresses failovers anyway, so waiting it out delays none of them.
  std::lock_guard lk(live_mu_);
  return now() >= grace_until_;
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

}  // namespace sluice::raft_meta
