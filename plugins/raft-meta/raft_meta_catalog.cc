// RaftMetaStore catalog calls: the state machine adapter (raft thread), mutations, reads,
// fleet and caches.
#include "raft_meta_store.h"
#include "raft_meta_store_internal.h"

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

std::int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

// --- state machine (raft thread) -----------------------------------------------------------

ApplyResult RaftMetaStore::FsmAdapter::apply(std::uint64_t index, std::string_view entry) {
  ApplyResult r;
  {
    std::lock_guard lk(s_.fsm_mu_);
    r = s_.fsm_.apply(index, entry);
    s_.held_now_.store(s_.fsm_.held().has_value());
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
    s_.held_now_.store(s_.fsm_.held().has_value());
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

std::optional<Error> RaftMetaStore::held_error() { return proposal_context()->held; }

Result<ApplyResult> RaftMetaStore::propose(const Command& c) {
  auto n = node();
  if (!n || !ready_.load()) return Error(Errc::unavailable, "raft-meta is not started");
  if (auto h = held_error()) return *h;
  if (n->role() != RaftRole::leader) return not_leader_error();
  note_leadership();
  Command stamped = c;
  stamped.level = cfg_.level.value();
  // The group's level is checked only when proposals are about to share an entry
  // (group_allows_batches, on the raft thread), so a lone proposal pays nothing for it.
  auto r = n->apply(encode_command(stamped), cfg_.timeout,
                    may_batch(ProposerView{cfg_.level, cfg_.level}, stamped.type));
  if (!r.ok() && r.error().code == Errc::not_leader) return not_leader_error();
  return r;
}

// Level 19 (proposer.h may_batch): a name operation or shard update may share a batch
// entry with concurrent ones while this member and every recorded member run at 19 or
// above. A member that joins below 19 in between makes apply refuse the batch as a whole,
// and RaftNode proposes each command again alone (raft_node.h), so a stale view costs a
// retry, never a wrong answer.
bool RaftMetaStore::group_allows_batches() {
  ProposerView v{cfg_.level, MetadataLevel{0}};
  // No recorded member yet (a group still forming): group level 0, no batching.
  v.group = std::min(cfg_.level, proposal_context()->recorded_group.value_or(MetadataLevel{0}));
  return may_batch(v, CommandType::create_stream);
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
  // Level 16 before forwarding: a member never hands a replicated create to a leader that
  // would not know what replication_factor means.
  if (spec.replication_factor > 1)
    RAFT_META_TRY(check_replicated_create(
        proposer_view(), "replication_factor " + std::to_string(spec.replication_factor)));
  if (auto f = leader_client()) return f->create_stream(key, spec);
  RAFT_META_TRY(validate_stream_key(key));
  RAFT_META_TRY(validate_stream_spec(spec));
  if (spec.replication_factor > 1) RAFT_META_TRY(replica_placement(key, spec));
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
  // One context for the view, the brokers and the features: a consistent read of them.
  const auto ctx = proposal_context();
  (void)stamp_entry(c, ctx->view, clock);
  const std::vector<BrokerInfo>& registered = ctx->brokers;

  // Placement: round robin over the live brokers sorted by id, from an offset derived from
  // the name. With no live broker, over the registered ones: a shard is placed on a broker
  // id like a replica assignment, and is served when that broker comes back (a broker that
  // slept through a delete and a recreate takes the new stream). Nobody registered ->
  // every shard unassigned (leader 0).
  const std::set<std::string, std::less<>>& fin = ctx->finalized;
  c.placement.resize(spec.shards);
  if (spec.replication_factor > 1) {
    // Replicated: distinct live brokers per shard, the leader first (catalog_rules.h).
    auto placed = place_replicas(key, spec.shards, spec.replication_factor,
                                 brokers_with_liveness(registered), fin);
    if (placed.ok()) {
      for (std::uint32_t i = 0; i < spec.shards; ++i) {
        c.placement[i].leader = placed.value()[i].front().value();
        for (auto b : placed.value()[i]) c.placement[i].replicas.push_back(b.value());
      }
    }
    return c;
  }
  const auto leaders = place_shards(key, spec.shards, brokers_with_liveness(registered), fin);
  for (std::uint32_t i = 0; i < spec.shards; ++i) {
    if (leaders[i].value() == 0) continue;
    c.placement[i].leader = leaders[i].value();
    c.placement[i].replicas = {leaders[i].value()};
  }
  return c;
}

Result<std::vector<std::vector<NodeId>>> RaftMetaStore::replica_placement(const StreamKey& key,
                                                                          const StreamSpec& spec) {
  const auto ctx = proposal_context();
  return place_replicas(key, spec.shards, spec.replication_factor,
                        brokers_with_liveness(ctx->brokers), ctx->finalized);
}

Result<Assignment> RaftMetaStore::update_shard(const ShardUpdate& u) {
  RAFT_META_TRY(check_replicated_shards(proposer_view(), "update_shard"));
  if (u.replicas) RAFT_META_TRY(check_shard_reassignment(proposer_view()));
  if (auto f = leader_client()) return f->update_shard(u);
  RAFT_META_TRY(validate_stream_key(u.key));
  auto r = propose(Command::update_shard(u));
  if (!r.ok()) return r.error();
  if (!r->ok()) return *r->error;
  if (r->assignments.empty()) return Error(Errc::internal, "update_shard applied without an assignment");
  return r->assignments.front();
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

Result<BrokerInfo> RaftMetaStore::register_broker(const BrokerRegistration& reg) {
  if (auto f = leader_client()) return f->register_broker(reg);
  if (reg.id.value() == 0) return Error(Errc::invalid_argument, "broker id must be > 0");
  BrokerRegistration sorted = reg;
  std::sort(sorted.features.begin(), sorted.features.end());
  sorted.features.erase(std::unique(sorted.features.begin(), sorted.features.end()),
                        sorted.features.end());
  Command c = Command::register_broker(sorted);
  (void)stamp_entry(c, proposer_view(), 0);  // peer_address only in a group at 16
  const std::uint64_t ended_before = finalizes_ended();
  auto r = propose(std::move(c));
  if (!r.ok()) return r.error();
  if (!r->ok()) return *r->error;
  {
    const auto t = now();
    std::lock_guard lk(live_mu_);
    // Registered (the apply checked the finalized features), but not live while a finalize
    // of a feature it lacks is in flight, or if one ended meanwhile: that finalize may not
    // have seen it.
    if (auto e = lacks_finalizing(sorted.features, reg.id, ended_before)) return *e;
    last_seen_[reg.id.value()] = t;  // registration counts as a heartbeat
  }
  BrokerInfo b = r->broker;
  b.live = true;
  return b;
}

Result<void> RaftMetaStore::heartbeat_broker(NodeId id) {
  if (auto f = leader_client()) return f->heartbeat_broker(id);
  if (!ready_.load()) return Error(Errc::unavailable, "raft-meta is not started");
  // Read before the features: a finalize that ends between that read and the liveness
  // update below is seen by the count (review finding: it committed, cleared finalizing_,
  // and this heartbeat, checked against the features from before, made the broker live).
  const std::uint64_t ended_before = finalizes_ended();
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
  const auto t = now();
  std::lock_guard lk(live_mu_);
  if (auto e = lacks_finalizing(b->features, id, ended_before)) return *e;
  last_seen_[id.value()] = t;
  return {};
}

std::uint64_t RaftMetaStore::finalizes_ended() {
  std::lock_guard lk(live_mu_);
  return finalizes_ended_;
}

std::optional<Error> RaftMetaStore::lacks_finalizing(const std::vector<std::string>& features, NodeId id,
                                                     std::uint64_t ended_before) const {
  // A finalize of a feature this broker lacks is between its gate and its commit: the
  // broker must not become live now, or it would be serving once the feature is final
  // (review finding). Transient: once the finalize is decided, the next call is answered
  // as usual (admitted, or refused for good with conflict). A finalize that ended since
  // the caller read the features may have made one final: the same answer.
  if (finalizes_ended_ != ended_before)
    return Error(Errc::unavailable,
                 "broker " + std::to_string(id.value()) + ": a feature finalize ended meanwhile; try again",
                 Outcome::transient);
  for (const auto& [name, n] : finalizing_)
    if (std::find(features.begin(), features.end(), name) == features.end())
      return Error(Errc::unavailable,
                   "broker " + std::to_string(id.value()) + " lacks feature " + name +
                       ", which is being finalized; try again",
                   Outcome::transient);
  return std::nullopt;
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
  return describe_features(fin, serving);
}

Result<FeatureInfo> RaftMetaStore::finalize_feature(const std::string& name) {
  if (auto f = leader_client()) return f->finalize_feature(name);
  // From before the gate to the commit, no broker that lacks `name` becomes live
  // (finalizing_): a heartbeat or registration meanwhile is refused, transient.
  {
    std::lock_guard lk(live_mu_);
    ++finalizing_[name];
  }
  struct Done {
    RaftMetaStore* s;
    const std::string& name;
    ~Done() {
      std::lock_guard lk(s->live_mu_);
      if (--s->finalizing_[name] == 0) s->finalizing_.erase(name);
      ++s->finalizes_ended_;
    }
  } done{this, name};
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
  if (fin.count(name)) return describe_feature(name, fin, serving);
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
  return describe_feature(name, fin, serving);
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

ChangeBatch RaftMetaStore::wait_changes_after(ChangeSeq after, std::size_t limit,
                                              std::chrono::steady_clock::time_point deadline,
                                              const std::atomic<bool>& stop) {
  for (;;) {
    // The wake count is read before the catalog (watch_mu_ and fsm_mu_ are never held
    // together): a change applied after the read bumps it, so no wake-up is lost.
    std::uint64_t seen;
    {
      std::lock_guard lk(watch_mu_);
      seen = wake_seq_;
    }
    auto b = changes_after(after, limit);
    if (b.resync || !b.events.empty() || stop || std::chrono::steady_clock::now() >= deadline)
      return b;
    std::unique_lock lk(watch_mu_);
    watch_cv_.wait_until(lk, deadline,
                         [&] { return wake_seq_ != seen || stop || delivery_stop_; });
    if (delivery_stop_) return changes_after(after, limit);
  }
}

void RaftMetaStore::wake_long_polls() {
  { std::lock_guard lk(watch_mu_); }  // a waiter between its check and its wait sees `stop`
  watch_cv_.notify_all();
}

// --- counters (level 18) ----------------------------------------------------------------

Result<CounterInfo> RaftMetaStore::create_counter(const StreamKey& key) {
  // Checked here before forwarding (check_counters), so an older leader never gets one.
  {
    Command probe = Command::create_counter(key, 0);
    RAFT_META_TRY(stamp_entry(probe, proposer_view(), 0));
  }
  if (auto f = leader_client()) return f->create_counter(key);
  RAFT_META_TRY(validate_name(NameKind::tenant, key.tenant));
  RAFT_META_TRY(validate_name(NameKind::ns, key.ns));
  RAFT_META_TRY(validate_name(NameKind::counter, key.name));
  const std::int64_t clock = now_us();
  Command c = Command::create_counter(key, clock);
  RAFT_META_TRY(stamp_entry(c, proposer_view(), clock));
  auto r = propose(c);
  if (!r.ok()) return r.error();
  if (!r->ok()) return *r->error;
  return r->counter;
}

Result<CounterInfo> RaftMetaStore::delete_counter(const StreamKey& key) {
  {
    Command probe = Command::delete_counter(key);
    RAFT_META_TRY(stamp_entry(probe, proposer_view(), 0));
  }
  if (auto f = leader_client()) return f->delete_counter(key);
  RAFT_META_TRY(validate_name(NameKind::tenant, key.tenant));
  RAFT_META_TRY(validate_name(NameKind::ns, key.ns));
  RAFT_META_TRY(validate_name(NameKind::counter, key.name));
  Command c = Command::delete_counter(key);
  RAFT_META_TRY(stamp_entry(c, proposer_view(), now_us()));
  auto r = propose(c);
  if (!r.ok()) return r.error();
  if (!r->ok()) return *r->error;
  return r->counter;
}

Result<CounterInfo> RaftMetaStore::get_counter(const StreamKey& key) {
  if (auto f = leader_client()) return f->get_counter(key);
  RAFT_META_TRY(validate_name(NameKind::tenant, key.tenant));
  RAFT_META_TRY(validate_name(NameKind::ns, key.ns));
  RAFT_META_TRY(validate_name(NameKind::counter, key.name));
  RAFT_META_TRY(read_barrier());
  std::lock_guard lk(fsm_mu_);
  auto c = fsm_.counter(key);
  if (!c) return Error(Errc::not_found, "no counter " + key.to_string());
  return *c;
}

Result<std::vector<CounterInfo>> RaftMetaStore::list_counters(const std::string& tenant,
                                                              const std::string& ns) {
  if (auto f = leader_client()) return f->list_counters(tenant, ns);
  RAFT_META_TRY(validate_name(NameKind::tenant, tenant));
  RAFT_META_TRY(validate_name(NameKind::ns, ns));
  RAFT_META_TRY(read_barrier());
  std::lock_guard lk(fsm_mu_);
  return fsm_.list_counters(tenant, ns);
}

}  // namespace sluice::raft_meta
