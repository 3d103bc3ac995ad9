#include "sluice/catalog_rules.h"

#include <algorithm>
#include <string>

#include "sluice/features.h"
#include "sluice/hash.h"

namespace sluice {

Result<void> validate_stream_spec(const StreamSpec& spec) {
  if (spec.shards < 1 || spec.shards > kMaxShardsPerStream)
    return Error(Errc::invalid_argument, "shards must be between 1 and " +
                                             std::to_string(kMaxShardsPerStream) + ", got " +
                                             std::to_string(spec.shards));
  if (spec.retention.max_bytes == 0 || spec.retention.max_bytes < -1)
    return Error(Errc::invalid_argument, "retention.max_bytes must be -1 (unlimited) or positive");
  if (spec.retention.max_age_ms == 0 || spec.retention.max_age_ms < -1)
    return Error(Errc::invalid_argument, "retention.max_age_ms must be -1 (unlimited) or positive");
  if (spec.replication_factor < 1 || spec.replication_factor > kMaxReplicationFactor)
    return Error(Errc::invalid_argument, "replication_factor must be between 1 and " +
                                             std::to_string(kMaxReplicationFactor) + ", got " +
                                             std::to_string(spec.replication_factor));
  if (spec.min_insync < 1 || spec.min_insync > spec.replication_factor)
    return Error(Errc::invalid_argument,
                 "min_insync must be between 1 and the replication factor (" +
                     std::to_string(spec.replication_factor) + "), got " +
                     std::to_string(spec.min_insync));
  return {};
}

std::uint32_t default_min_insync(std::uint32_t replication_factor) {
  return replication_factor / 2 + 1;
}

namespace {
// Broker ids of a replica list or a target: not empty, no 0, no broker twice, at most
// 2 * kMaxReplicationFactor (the old and the new list while a reassignment runs).
Result<void> check_replica_list(const std::string& what, const std::vector<NodeId>& ids,
                                std::string_view name) {
  if (ids.empty()) return Error(Errc::invalid_argument, what + ": the " + std::string(name) + " is empty");
  if (ids.size() > 2 * kMaxReplicationFactor)
    return Error(Errc::invalid_argument, what + ": the " + std::string(name) + " names " +
                                             std::to_string(ids.size()) + " brokers, at most " +
                                             std::to_string(2 * kMaxReplicationFactor));
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i].value() == 0)
      return Error(Errc::invalid_argument, what + ": the " + std::string(name) + " names broker 0");
    for (std::size_t j = 0; j < i; ++j)
      if (ids[j] == ids[i])
        return Error(Errc::invalid_argument, what + ": the " + std::string(name) + " names broker " +
                                                 std::to_string(ids[i].value()) + " twice");
  }
  return {};
}
}  // namespace

Result<void> check_shard_update(const Assignment& current, const ShardUpdate& u) {
  const std::string what = u.key.to_string() + " shard " + std::to_string(u.shard.value());
  if (u.incarnation != current.incarnation)
    return Error(Errc::stale_route, what + ": the update names incarnation " +
                                        std::to_string(u.incarnation.value()) +
                                        ", the catalog holds " +
                                        std::to_string(current.incarnation.value()));
  if (u.expected_version != current.version)
    return Error(Errc::conflict, what + ": the update expects shard version " +
                                     std::to_string(u.expected_version.value()) +
                                     ", the catalog holds " +
                                     std::to_string(current.version.value()));
  // A reassignment step replaces the replica list: the rules below hold for the new one.
  const std::vector<NodeId>& replicas = u.replicas ? *u.replicas : current.replicas;
  auto is_replica = [&](NodeId b) {
    for (auto r : replicas)
      if (r == b) return true;
    return false;
  };
  if (u.replicas) {
    if (auto r = check_replica_list(what, *u.replicas, "replica list"); !r) return r;
    if (auto r = check_replica_list(what, u.target_replicas, "target"); !r && !u.target_replicas.empty())
      return r;
    for (auto t : u.target_replicas)
      if (!is_replica(t))
        return Error(Errc::invalid_argument, what + ": target broker " + std::to_string(t.value()) +
                                                 " is not in the replica list");
  } else if (!u.target_replicas.empty()) {
    return Error(Errc::invalid_argument, what + ": a target needs the replica list it belongs to");
  }
  if (u.leader.value() != 0 && !is_replica(u.leader))
    return Error(Errc::invalid_argument, what + ": broker " + std::to_string(u.leader.value()) +
                                             " is not a replica, so it cannot lead");
  if (u.leader_epoch < current.leader_epoch)
    return Error(Errc::invalid_argument, what + ": the leader epoch may not fall (from " +
                                             std::to_string(current.leader_epoch.value()) +
                                             " to " + std::to_string(u.leader_epoch.value()) + ")");
  if (u.leader != current.leader && u.leader_epoch == current.leader_epoch)
    return Error(Errc::invalid_argument,
                 what + ": a change of leader must raise the leader epoch above " +
                     std::to_string(current.leader_epoch.value()));
  bool leader_in_sync = false;
  for (std::size_t i = 0; i < u.in_sync.size(); ++i) {
    const auto& r = u.in_sync[i];
    if (!is_replica(r.broker))
      return Error(Errc::invalid_argument, what + ": in-sync broker " +
                                               std::to_string(r.broker.value()) +
                                               " is not a replica");
    if (r.directory_id.empty())
      return Error(Errc::invalid_argument, what + ": in-sync broker " +
                                               std::to_string(r.broker.value()) +
                                               " has no directory id");
    for (std::size_t j = 0; j < i; ++j)
      if (u.in_sync[j].broker == r.broker)
        return Error(Errc::invalid_argument, what + ": in-sync set names broker " +
                                                 std::to_string(r.broker.value()) + " twice");
    if (r.broker == u.leader) leader_in_sync = true;
  }
  if (u.leader.value() != 0 && !leader_in_sync)
    return Error(Errc::invalid_argument, what + ": leader " + std::to_string(u.leader.value()) +
                                             " is not in the in-sync set");
  return {};
}

Result<std::vector<std::vector<NodeId>>> place_replicas(
    const StreamKey& key, std::uint32_t shards, std::uint32_t replication_factor,
    const std::vector<BrokerInfo>& registered, const std::set<std::string, std::less<>>& finalized) {
  std::vector<NodeId> live;
  for (const auto& b : registered)
    if (b.live && admit_broker(b.features, finalized).ok()) live.push_back(b.id);
  std::sort(live.begin(), live.end());
  live.erase(std::unique(live.begin(), live.end()), live.end());
  if (replication_factor < 1 || live.size() < replication_factor)
    return Error(Errc::not_enough_replicas,
                 "replication_factor " + std::to_string(replication_factor) + " needs " +
                     std::to_string(replication_factor) + " live brokers, " +
                     std::to_string(live.size()) + " " + (live.size() == 1 ? "is" : "are") +
                     " live");
  const std::size_t n = live.size();
  const std::uint64_t offset = fnv1a64(key.to_string()) % n;
  std::vector<std::vector<NodeId>> out(shards);
  for (std::uint32_t i = 0; i < shards; ++i)
    for (std::uint32_t j = 0; j < replication_factor; ++j)
      out[i].push_back(live[(offset + i + j) % n]);
  return out;
}

Result<void> start_replicated_shard(Assignment& a, const std::vector<BrokerInfo>& brokers) {
  a.in_sync.clear();
  if (a.replicas.size() <= 1) {
    a.leader_epoch = LeaderEpoch{0};
    a.version = ShardVersion{0};
    return {};
  }
  a.leader = a.replicas.front();
  a.leader_epoch = LeaderEpoch{1};
  a.version = ShardVersion{1};
  for (auto r : a.replicas) {
    auto it = std::find_if(brokers.begin(), brokers.end(), [&](const auto& b) { return b.id == r; });
    if (it == brokers.end())
      return Error(Errc::not_enough_replicas, a.key.to_string() + " shard " + std::to_string(a.shard.value()) +
                                       ": replica " + std::to_string(r.value()) +
                                       " is not a registered broker");
    a.in_sync.push_back(InSyncReplica{r, it->directory_id});
  }
  return {};
}

Result<void> check_spec_supported(const StreamSpec&) {
  // This build serves every valid spec: replication factors up to kMaxReplicationFactor and
  // ack quorum (on one replica, quorum is the leader's own disk).
  return {};
}

namespace {
const BrokerInfo* find_broker(const std::vector<BrokerInfo>& brokers, NodeId id) {
  for (const auto& b : brokers)
    if (b.id == id) return &b;
  return nullptr;
}
std::string shard_what(const Assignment& a) {
  return a.key.to_string() + " shard " + std::to_string(a.shard.value());
}
}  // namespace

void leave_in_sync(ShardUpdate& u, NodeId self) {
  if (u.leader == self) {
    u.leader = NodeId{0};
    u.leader_epoch = LeaderEpoch{u.leader_epoch.value() + 1};
  }
  std::erase_if(u.in_sync, [&](const InSyncReplica& m) { return m.broker == self; });
}

bool eligible(const InSyncReplica& m, const std::vector<BrokerInfo>& brokers) {
  const BrokerInfo* b = find_broker(brokers, m.broker);
  return b && b->live && b->directory_id == m.directory_id;
}

FailoverPlan plan_failover(const Assignment& a, std::uint32_t min_insync,
                           const std::vector<BrokerInfo>& brokers) {
  FailoverPlan out;
  if (a.replicas.size() <= 1) return out;
  const InSyncReplica* leader = nullptr;
  for (const auto& m : a.in_sync)
    if (a.leader.value() != 0 && m.broker == a.leader) leader = &m;
  if (leader && eligible(*leader, brokers)) return out;

  ShardUpdate u;
  u.key = a.key;
  u.shard = a.shard;
  u.incarnation = a.incarnation;
  u.expected_version = a.version;
  u.leader_epoch = LeaderEpoch{a.leader_epoch.value() + 1};
  u.in_sync = a.in_sync;
  std::string was;
  if (a.leader.value() != 0) {
    const BrokerInfo* b = find_broker(brokers, a.leader);
    was = "leader " + std::to_string(a.leader.value()) +
          (!b ? " is not registered" : !b->live ? " is down"
               : leader && b->directory_id != leader->directory_id
                   ? " came back with a new directory"
                   : " is not eligible");
  }
  for (NodeId r : a.replicas) {
    if (r == a.leader) continue;
    auto m = std::find_if(a.in_sync.begin(), a.in_sync.end(),
                          [&](const InSyncReplica& x) { return x.broker == r; });
    if (m == a.in_sync.end() || !eligible(*m, brokers)) continue;
    u.leader = r;
    if (a.leader.value() != 0 && u.in_sync.size() > std::max<std::uint32_t>(min_insync, 1))
      std::erase_if(u.in_sync, [&](const InSyncReplica& x) { return x.broker == a.leader; });
    out.change = true;
    out.update = std::move(u);
    out.why = (was.empty() ? std::string("no leader") : was) + ": elected in-sync broker " +
              std::to_string(r.value()) + " in epoch " +
              std::to_string(out.update.leader_epoch.value());
    return out;
  }
  if (a.leader.value() == 0) return out;  // already leaderless; waiting for an eligible one
  u.leader = NodeId{0};
  out.change = true;
  out.update = std::move(u);
  out.why = was + "; no eligible in-sync replica: no leader from epoch " +
            std::to_string(out.update.leader_epoch.value()) + " (" +
            unavailable_reason([&] {
              Assignment x = a;
              x.leader = NodeId{0};
              return x;
            }(), brokers) + ")";
  return out;
}

std::string unavailable_reason(const Assignment& a, const std::vector<BrokerInfo>& brokers) {
  if (a.leader.value() != 0) return {};
  if (a.in_sync.empty()) return "it has no in-sync replica";
  auto state = [&](const InSyncReplica& m) -> std::string {
    const BrokerInfo* b = find_broker(brokers, m.broker);
    if (!b) return "is not registered";
    if (b->directory_id != m.directory_id)
      return "came back with a new directory (" + b->directory_id + ", recorded " +
             m.directory_id + ")";
    if (!b->live) return "is down";
    return "is eligible (an election is pending)";
  };
  if (a.in_sync.size() == 1)
    return "the only in-sync replica, broker " + std::to_string(a.in_sync[0].broker.value()) +
           ", " + state(a.in_sync[0]);
  std::string out = "no in-sync replica can lead:";
  for (std::size_t i = 0; i < a.in_sync.size(); ++i)
    out += (i ? "; broker " : " broker ") + std::to_string(a.in_sync[i].broker.value()) + " " +
           state(a.in_sync[i]);
  return out;
}

Result<ShardUpdate> plan_unclean_election(const Assignment& a, NodeId broker,
                                          const std::vector<BrokerInfo>& brokers) {
  const std::string what = shard_what(a);
  if (a.replicas.size() <= 1)
    return Error(Errc::invalid_argument, what + " has one replica: there is no other to elect");
  if (std::find(a.replicas.begin(), a.replicas.end(), broker) == a.replicas.end())
    return Error(Errc::invalid_argument, what + ": broker " + std::to_string(broker.value()) +
                                             " is not one of its replicas");
  for (const auto& m : a.in_sync)
    if (a.leader.value() != 0 && m.broker == a.leader && eligible(m, brokers))
      return Error(Errc::conflict, what + " has an eligible leader, broker " +
                                       std::to_string(a.leader.value()) +
                                       "; an unclean election is only for a shard without one");
  for (const auto& m : a.in_sync)
    if (eligible(m, brokers))
      return Error(Errc::conflict, what + ": in-sync broker " + std::to_string(m.broker.value()) +
                                       " is eligible, so the controller elects it without losing "
                                       "anything; an unclean election is only for a shard with no "
                                       "eligible in-sync replica");
  const BrokerInfo* b = find_broker(brokers, broker);
  if (!b || !b->live)
    return Error(Errc::conflict, what + ": broker " + std::to_string(broker.value()) +
                                     (b ? " is down" : " is not registered"));
  ShardUpdate u;
  u.key = a.key;
  u.shard = a.shard;
  u.incarnation = a.incarnation;
  u.expected_version = a.version;
  u.leader = broker;
  u.leader_epoch = LeaderEpoch{a.leader_epoch.value() + 1};
  u.in_sync = {InSyncReplica{broker, b->directory_id}};
  return u;
}

Result<ShardUpdate> plan_preferred_election(const Assignment& a,
                                            const std::vector<BrokerInfo>& brokers) {
  const std::string what = shard_what(a);
  if (a.replicas.size() <= 1)
    return Error(Errc::invalid_argument, what + " has one replica: there is no other to elect");
  const NodeId preferred = a.replicas.front();
  if (a.leader == preferred)
    return Error(Errc::conflict, what + ": its preferred replica, broker " +
                                     std::to_string(preferred.value()) + ", already leads it");
  auto m = std::find_if(a.in_sync.begin(), a.in_sync.end(),
                        [&](const InSyncReplica& x) { return x.broker == preferred; });
  if (m == a.in_sync.end() || !eligible(*m, brokers))
    return Error(Errc::conflict, what + ": its preferred replica, broker " +
                                     std::to_string(preferred.value()) +
                                     " is not an eligible in-sync replica yet (down, behind, or "
                                     "back with a new directory)");
  ShardUpdate u;
  u.key = a.key;
  u.shard = a.shard;
  u.incarnation = a.incarnation;
  u.expected_version = a.version;
  u.leader = preferred;
  u.leader_epoch = LeaderEpoch{a.leader_epoch.value() + 1};
  u.in_sync = a.in_sync;
  return u;
}

Result<ShardUpdate> plan_leader_move(const Assignment& current, NodeId broker) {
  const std::string what =
      current.key.to_string() + " shard " + std::to_string(current.shard.value());
  if (broker.value() == 0)
    return Error(Errc::invalid_argument, what + ": the new leader must be a broker id, not 0");
  if (std::find(current.replicas.begin(), current.replicas.end(), broker) == current.replicas.end())
    return Error(Errc::invalid_argument, what + ": broker " + std::to_string(broker.value()) +
                                             " is not one of its replicas");
  if (current.leader == broker)
    return Error(Errc::conflict, what + ": broker " + std::to_string(broker.value()) +
                                     " already leads it (epoch " +
                                     std::to_string(current.leader_epoch.value()) + ")");
  const bool in_sync = std::any_of(current.in_sync.begin(), current.in_sync.end(),
                                   [&](const InSyncReplica& m) { return m.broker == broker; });
  if (!in_sync)
    return Error(Errc::conflict, what + ": broker " + std::to_string(broker.value()) +
                                     " is not in the in-sync set, so it may lack acknowledged "
                                     "records; wait until it has caught up");
  ShardUpdate u;
  u.key = current.key;
  u.shard = current.shard;
  u.incarnation = current.incarnation;
  u.expected_version = current.version;
  u.leader = broker;
  u.leader_epoch = LeaderEpoch{current.leader_epoch.value() + 1};
  u.in_sync = current.in_sync;
  return u;
}

}  // namespace sluice
