// The operator's shard calls of the broker runtime: the shards listing, leader moves,
// elections, reassignment and drains (docs/replication.md "The controller",
// "Reassignment"). Each decision is a pure rule of catalog_rules.h applied to this node's
// view; the catalog's compare-and-set refuses it (conflict, naming the stored version) if
// the shard has moved on since.
#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>

#include "broker.h"
#include "sluice/catalog_rules.h"
#include "sluice/names.h"

namespace sluice::core {

std::vector<BrokerInfo> BrokerRuntime::known_brokers(bool may_ask) const {
  std::vector<BrokerInfo> brokers;
  bool refresh = false;
  {
    std::lock_guard lk(brokers_mu_);
    const auto now = std::chrono::steady_clock::now();
    if (may_ask && now - brokers_at_ > std::chrono::seconds(1)) {
      brokers_at_ = now;  // one caller refreshes; the others use the last list meanwhile
      refresh = true;
    }
    brokers = brokers_cache_;
  }
  if (refresh) {
    // Not under brokers_mu_: a slow metadata store must not queue every caller behind it.
    if (auto b = catalog_.list_brokers(); b) {
      brokers = std::move(b).value();
      std::lock_guard lk(brokers_mu_);
      brokers_cache_ = brokers;
    }
  }
  return brokers;
}

std::string BrokerRuntime::leaderless_reason(const Assignment& a, bool may_ask) const {
  return unavailable_reason(a, known_brokers(may_ask));
}

Result<std::vector<ShardStatus>> BrokerRuntime::shards(const StreamKey& key) {
  if (auto v = validate_stream_key(key); !v) return v.error();
  auto st = find(key);
  if (!st) return no_stream(key);
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
        s.leader_epoch = a.leader_epoch;
        s.in_sync = a.in_sync;
        s.version = a.version;
        s.target_replicas = a.target_replicas;
        if (a.leader.value() == 0 && a.replicas.size() > 1) s.unavailable_reason = leaderless_reason(a);
        if (!a.target_replicas.empty()) {
          auto step = plan_reassignment_step(a, known_brokers());
          s.reassignment = step.change ? "moving to " + replica_ids_text(a.target_replicas) +
                                             ": the controller's next step: " + step.why
                                       : step.why;
        }
      }
    if (i < st->held.size() && st->held[i]) {
      s.stats = st->held[i]->stats();
      s.held = true;
    }
    out.push_back(std::move(s));
  }
  return out;
}

Result<Assignment> BrokerRuntime::move_leader(const StreamKey& key, ShardIndex shard, NodeId broker) {
  if (auto v = validate_stream_key(key); !v) return v.error();
  auto st = find(key);
  if (!st) return no_stream(key);
  if (!st->refused.empty()) return Error(Errc::conflict, st->refused);
  const Assignment* cur = nullptr;
  for (const auto& a : st->assignments)
    if (a.shard == shard) cur = &a;
  if (!cur)
    return Error(Errc::not_found, "stream " + key.to_string() + " has " + std::to_string(st->info.spec.shards) +
                                      " shards; shard " + std::to_string(shard.value()) + " does not exist");
  // Decided against this node's view; the catalog's compare-and-set refuses it (conflict,
  // naming the stored version) if the shard has moved on since.
  auto u = plan_leader_move(*cur, broker);
  if (!u) return u.error();
  // In the in-sync set is not enough: the broker must be eligible (live, and holding the
  // data directory the set recorded), as for any election. A broker back with an empty
  // disk would be written down as leader, fence the old one, and then refuse to lead.
  auto brokers = catalog_.list_brokers();
  if (!brokers) return brokers.error();
  const bool ok = std::any_of(cur->in_sync.begin(), cur->in_sync.end(),
                              [&](const InSyncReplica& m) { return m.broker == broker && eligible(m, *brokers); });
  if (!ok)
    return Error(Errc::conflict, key.to_string() + " shard " + std::to_string(shard.value()) + ": broker " +
                                     std::to_string(broker.value()) +
                                     " may not lead it: it is not live, or its data directory is not the one "
                                     "the in-sync set recorded (an empty or replaced disk); wait until it has "
                                     "caught up again");
  auto r = catalog_.update_shard(*u);
  if (!r) return r.error();
  host_.log(LogLevel::info, "broker",
            "operator moved the leader of " + key.to_string() + " shard " + std::to_string(shard.value()) +
                " to broker " + std::to_string(broker.value()) + " (epoch " +
                std::to_string(r->leader_epoch.value()) + ", version " + std::to_string(r->version.value()) + ")");
  return r;
}

Result<Assignment> BrokerRuntime::elect_leader(const StreamKey& key, ShardIndex shard, Election kind,
                                               NodeId broker) {
  if (auto v = validate_stream_key(key); !v) return v.error();
  auto st = find(key);
  if (!st) return no_stream(key);
  if (!st->refused.empty()) return Error(Errc::conflict, st->refused);
  const Assignment* cur = nullptr;
  for (const auto& a : st->assignments)
    if (a.shard == shard) cur = &a;
  if (!cur)
    return Error(Errc::not_found, "stream " + key.to_string() + " has " + std::to_string(st->info.spec.shards) +
                                      " shards; shard " + std::to_string(shard.value()) + " does not exist");
  auto brokers = catalog_.list_brokers();
  if (!brokers) return brokers.error();
  if (kind == Election::preferred) {
    auto u = plan_preferred_election(*cur, *brokers);
    if (!u) return u.error();
    auto r = catalog_.update_shard(*u);
    if (!r) return r.error();
    host_.log(LogLevel::info, "broker",
              "operator's preferred-leader election: broker " + std::to_string(r->leader.value()) + " leads " +
                  key.to_string() + " shard " + std::to_string(shard.value()) + " in epoch " +
                  std::to_string(r->leader_epoch.value()));
    return r;
  }
  auto u = plan_unclean_election(*cur, broker, *brokers);
  if (!u) return u.error();
  const std::string before = unavailable_reason(*cur, *brokers);
  auto r = catalog_.update_shard(*u);
  if (!r) return r.error();
  host_.log(LogLevel::warn, "broker",
            "UNCLEAN election by an operator: broker " + std::to_string(broker.value()) + " leads " +
                key.to_string() + " shard " + std::to_string(shard.value()) + " in epoch " +
                std::to_string(r->leader_epoch.value()) + " with itself alone in sync" +
                (before.empty() ? std::string() : " (" + before + ")") +
                "; records acknowledged beyond its log end are lost");
  return r;
}

Result<Assignment> BrokerRuntime::reassign_shard(const StreamKey& key, ShardIndex shard,
                                                 const std::vector<NodeId>& target) {
  if (auto v = validate_stream_key(key); !v) return v.error();
  auto st = find(key);
  if (!st) return no_stream(key);
  if (!st->refused.empty()) return Error(Errc::conflict, st->refused);
  const Assignment* cur = nullptr;
  for (const auto& a : st->assignments)
    if (a.shard == shard) cur = &a;
  if (!cur)
    return Error(Errc::not_found, "stream " + key.to_string() + " has " + std::to_string(st->info.spec.shards) +
                                      " shards; shard " + std::to_string(shard.value()) + " does not exist");
  auto brokers = catalog_.list_brokers();
  if (!brokers) return brokers.error();
  auto u = plan_reassignment(*cur, target, st->info.spec.replication_factor, *brokers);
  if (!u) return u.error();
  auto r = catalog_.update_shard(*u);
  if (!r) return r.error();
  host_.log(LogLevel::info, "broker",
            "operator's reassignment of " + key.to_string() + " shard " + std::to_string(shard.value()) +
                " from " + replica_ids_text(cur->replicas) + " to " + replica_ids_text(target) +
                (r->target_replicas.empty() ? std::string(" (a new order only: done)")
                                            : " started (version " + std::to_string(r->version.value()) + ")"));
  return r;
}

Result<DrainPlan> BrokerRuntime::drain_broker(NodeId broker) {
  if (broker.value() == 0) return Error(Errc::invalid_argument, "broker ids start at 1, not 0");
  auto snap = catalog_.snapshot();
  if (!snap) return snap.error();
  auto brokers = catalog_.list_brokers();
  if (!brokers) return brokers.error();
  if (std::none_of(brokers->begin(), brokers->end(), [&](const BrokerInfo& b) { return b.id == broker; }))
    return Error(Errc::not_found, "broker " + std::to_string(broker.value()) + " is not registered");
  std::map<StreamKey, std::uint32_t> rf;
  for (const auto& s : snap->streams) rf[s.key] = s.spec.replication_factor;
  std::vector<Assignment> current;
  for (const auto& a : snap->assignments)
    if (rf.count(a.key)) current.push_back(a);
  DrainPlan plan = plan_drain(broker, current, *brokers);
  std::size_t started = 0;
  for (auto& m : plan.moves) {
    if (!m.refused.empty()) continue;
    const std::string what = m.assignment.key.to_string() + " shard " + std::to_string(m.assignment.shard.value());
    auto u = plan_reassignment(m.assignment, m.target, rf[m.assignment.key], *brokers);
    if (u) {
      auto r = catalog_.update_shard(*u);
      if (r) {
        ++started;
        continue;
      }
      m.refused = r.error().message;
    } else {
      m.refused = u.error().message;
    }
    m.target.clear();
  }
  host_.log(LogLevel::info, "broker",
            "operator's drain of broker " + std::to_string(broker.value()) + ": " + std::to_string(started) +
                " reassignment(s) started, " + std::to_string(plan.moves.size() - started) + " refused");
  return plan;
}

// Step 6 of a start (apply_plan): a copy this disk lost (docs/replication.md "A lost shard
// copy") that the catalog still counts in the in-sync set leaves it before the broker
// registers. Registered, the broker is live, and the controller could elect it from the
// empty copy before the storage engine's own request ran: with min_insync 1 that election
// also takes the dead old leader out of the set, so when the lost copy then gave the
// leadership up, no counted copy was left and the shard waited for an operator's unclean
// election. A conflict (the controller moved the shard meanwhile) reads the shard again;
// a catalog that does not answer within metadata.timeout_ms leaves the request to the
// storage engine, which asks again once the shard is assigned.
std::map<ShardRef, Assignment> BrokerRuntime::leave_in_sync_sets_of_lost_copies(
    const ServingPlan& plan, const std::map<ShardRef, std::shared_ptr<ShardLog>>& opened) {
  std::map<ShardRef, Assignment> left;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(opts_.catalog_timeout_ms);
  for (const auto& [ref, log] : opened) {
    if (!log || !log->copy_lost()) continue;
    // Each request may wait up to the metadata timeout: once the window is spent, the rest
    // are left to the storage engine rather than holding the registration up further.
    if (std::chrono::steady_clock::now() >= deadline) {
      host_.log(LogLevel::error, "broker",
                "shard " + ref.to_string() + ": this disk lost its copy; no time is left to take it out of the "
                "in-sync set before this broker registers (metadata.timeout_ms); the storage engine asks once "
                "the shard is assigned");
      continue;
    }
    auto sv = plan.streams.find(ref.stream);
    if (sv == plan.streams.end()) continue;
    std::optional<Assignment> a;
    for (const auto& x : sv->second.assignments)
      if (x.shard == ref.shard && x.incarnation == ref.incarnation) a = x;
    const auto counted = [&] {
      return std::any_of(a->in_sync.begin(), a->in_sync.end(), [&](const InSyncReplica& m) {
        return m.broker == info_.node_id && m.directory_id == info_.directory_id;
      });
    };
    while (a && counted()) {
      ShardUpdate u;
      u.key = ref.stream;
      u.shard = ref.shard;
      u.incarnation = ref.incarnation;
      u.expected_version = a->version;
      u.leader = a->leader;
      u.leader_epoch = a->leader_epoch;
      u.in_sync = a->in_sync;
      leave_in_sync(u, info_.node_id);
      auto r = catalog_.update_shard(u);
      if (r) {
        host_.log(LogLevel::warn, "broker",
                  "shard " + ref.to_string() + ": this disk lost its copy, which the catalog counted in the "
                  "in-sync set; it left the set before this broker registered (version " +
                      std::to_string(r->version.value()) + ", leader " + std::to_string(r->leader.value()) +
                      " in epoch " + std::to_string(r->leader_epoch.value()) + ")");
        a = *r;
        left[ref] = *r;
        break;
      }
      const bool moved = r.error().code == Errc::conflict;
      if (std::chrono::steady_clock::now() >= deadline || !(moved || transient_catalog_error(r.error()))) {
        host_.log(LogLevel::error, "broker",
                  "shard " + ref.to_string() + ": this disk lost its copy, and it could not leave the in-sync "
                  "set before this broker registered (" + r.error().to_string() +
                      "); the storage engine asks again once the shard is assigned");
        break;
      }
      if (!moved) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        continue;
      }
      // The shard moved on (the controller's failover, say): its state as stored now.
      auto snap = catalog_.snapshot();
      if (!snap) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        continue;
      }
      a.reset();
      for (const auto& x : snap->assignments)
        if (x.key == ref.stream && x.shard == ref.shard && x.incarnation == ref.incarnation) a = x;
      if (a) left[ref] = *a;  // newer than the plan's, whatever happens next
    }
  }
  return left;
}

}  // namespace sluice::core
