// Reassignment and broker drains as pure functions (catalog_rules.h, docs/replication.md
// "Reassignment").
#include <algorithm>
#include <map>

#include "sluice/catalog_rules.h"

namespace sluice {

namespace {

std::string what_of(const Assignment& a) {
  return a.key.to_string() + " shard " + std::to_string(a.shard.value());
}

std::string ids_text(const std::vector<NodeId>& ids) {
  std::string out = "[";
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ",";
    out += std::to_string(ids[i].value());
  }
  return out + "]";
}

bool has(const std::vector<NodeId>& v, NodeId b) { return std::find(v.begin(), v.end(), b) != v.end(); }

const BrokerInfo* broker_of(const std::vector<BrokerInfo>& brokers, NodeId id) {
  for (const auto& b : brokers)
    if (b.id == id) return &b;
  return nullptr;
}

bool eligible_in_sync(const Assignment& a, NodeId b, const std::vector<BrokerInfo>& brokers) {
  return std::any_of(a.in_sync.begin(), a.in_sync.end(), [&](const InSyncReplica& m) {
    return m.broker == b && eligible(m, brokers);
  });
}

ShardUpdate same_state(const Assignment& a) {
  ShardUpdate u;
  u.key = a.key;
  u.shard = a.shard;
  u.incarnation = a.incarnation;
  u.expected_version = a.version;
  u.leader = a.leader;
  u.leader_epoch = a.leader_epoch;
  u.in_sync = a.in_sync;
  return u;
}

}  // namespace

std::string replica_ids_text(const std::vector<NodeId>& ids) { return ids_text(ids); }

Result<ShardUpdate> plan_reassignment(const Assignment& a, const std::vector<NodeId>& target,
                                      std::uint32_t replication_factor,
                                      const std::vector<BrokerInfo>& brokers) {
  const std::string what = what_of(a);
  if (replication_factor <= 1 || a.replicas.size() <= 1)
    return Error(Errc::invalid_argument,
                 what + ": the stream has replication factor 1, and its only copy cannot be "
                        "moved by replication (create a stream with replication_factor above 1)");
  if (target.size() != replication_factor)
    return Error(Errc::invalid_argument, what + ": the new replica list " + ids_text(target) +
                                             " names " + std::to_string(target.size()) +
                                             " brokers; the stream has replication factor " +
                                             std::to_string(replication_factor));
  for (std::size_t i = 0; i < target.size(); ++i) {
    if (target[i].value() == 0)
      return Error(Errc::invalid_argument, what + ": broker ids start at 1, not 0");
    for (std::size_t j = 0; j < i; ++j)
      if (target[j] == target[i])
        return Error(Errc::invalid_argument, what + ": the new replica list names broker " +
                                                 std::to_string(target[i].value()) + " twice");
  }
  for (auto t : target) {
    const BrokerInfo* b = broker_of(brokers, t);
    if (!b)
      return Error(Errc::invalid_argument, what + ": broker " + std::to_string(t.value()) +
                                               " is not registered");
    if (!b->live && !has(a.replicas, t))
      return Error(Errc::conflict, what + ": broker " + std::to_string(t.value()) +
                                       " is not live, so it cannot take a copy now");
  }
  if (!a.target_replicas.empty())
    return Error(Errc::conflict, what + ": already moving to " + ids_text(a.target_replicas) +
                                     "; wait until that reassignment finishes");
  if (target == a.replicas)
    return Error(Errc::conflict, what + ": its replicas are " + ids_text(target) + " already");
  if (a.leader.value() == 0)
    return Error(Errc::conflict, what + ": it has no leader to copy from; elect one first "
                                        "(docs/replication.md \"Disk loss\")");
  ShardUpdate u = same_state(a);
  const bool same_set = std::all_of(target.begin(), target.end(), [&](NodeId t) { return has(a.replicas, t); }) &&
                        target.size() == a.replicas.size();
  if (same_set) {
    u.replicas = target;  // a new order only: the first is the new preferred leader
    return u;
  }
  std::vector<NodeId> all = a.replicas;
  for (auto t : target)
    if (!has(all, t)) all.push_back(t);
  u.replicas = std::move(all);
  u.target_replicas = target;
  return u;
}

FailoverPlan plan_reassignment_step(const Assignment& a, const std::vector<BrokerInfo>& brokers) {
  FailoverPlan out;
  if (a.target_replicas.empty()) return out;
  const std::string to = "moving to " + ids_text(a.target_replicas);
  if (a.leader.value() == 0) {
    out.why = to + ": waiting for the shard to have a leader";
    return out;
  }
  std::vector<NodeId> behind;
  for (auto t : a.target_replicas)
    if (!eligible_in_sync(a, t, brokers)) behind.push_back(t);
  if (!behind.empty()) {
    out.why = to + ": waiting for broker" + (behind.size() == 1 ? " " : "s ") +
              ids_text(behind) + " to catch up and join the in-sync set";
    return out;
  }
  out.change = true;
  out.update = same_state(a);
  if (!has(a.target_replicas, a.leader)) {
    // Leadership moves first, into the target (its first member: every member is an
    // eligible in-sync replica now); the next step drops the old replicas.
    out.update.leader = a.target_replicas.front();
    out.update.leader_epoch = LeaderEpoch{a.leader_epoch.value() + 1};
    out.why = to + ": every new replica is in sync; broker " +
              std::to_string(out.update.leader.value()) + " leads in epoch " +
              std::to_string(out.update.leader_epoch.value()) + " before broker " +
              std::to_string(a.leader.value()) + " leaves";
    return out;
  }
  std::vector<NodeId> removed;
  for (auto r : a.replicas)
    if (!has(a.target_replicas, r)) removed.push_back(r);
  out.update.replicas = a.target_replicas;
  out.update.target_replicas.clear();
  out.update.in_sync.clear();
  for (const auto& m : a.in_sync)
    if (has(a.target_replicas, m.broker)) out.update.in_sync.push_back(m);
  out.why = "reassignment done: replicas " + ids_text(a.target_replicas) + ", broker" +
            (removed.size() == 1 ? " " : "s ") + ids_text(removed) + " removed";
  return out;
}

DrainPlan plan_drain(NodeId broker, const std::vector<Assignment>& assignments,
                     const std::vector<BrokerInfo>& brokers) {
  DrainPlan out;
  // Candidates: live brokers other than the drained one, the least loaded first (copies
  // held, counting the moves planned here), then by id, so the answer is deterministic.
  std::map<NodeId, std::size_t> load;
  for (const auto& b : brokers)
    if (b.live && b.id != broker) load[b.id] = 0;
  for (const auto& a : assignments)
    for (auto r : a.target_replicas.empty() ? a.replicas : a.target_replicas)
      if (auto it = load.find(r); it != load.end()) ++it->second;
  for (const auto& a : assignments) {
    const auto& current = a.target_replicas.empty() ? a.replicas : a.target_replicas;
    if (!has(a.replicas, broker) && !has(a.target_replicas, broker)) continue;
    DrainMove m;
    m.assignment = a;
    if (a.replicas.size() <= 1) {
      m.refused = what_of(a) + ": replication factor 1, its only copy cannot be moved";
      out.moves.push_back(std::move(m));
      continue;
    }
    if (!a.target_replicas.empty() && has(a.target_replicas, broker)) {
      m.refused = what_of(a) + ": already moving to " + ids_text(a.target_replicas) +
                  ", which keeps broker " + std::to_string(broker.value()) +
                  "; drain again when it finishes";
      out.moves.push_back(std::move(m));
      continue;
    }
    if (!a.target_replicas.empty()) continue;  // already moving off it
    NodeId pick{0};
    std::size_t best = 0;
    for (const auto& [id, n] : load) {
      if (has(a.replicas, id)) continue;
      if (pick.value() == 0 || n < best) {
        pick = id;
        best = n;
      }
    }
    if (pick.value() == 0) {
      m.refused = what_of(a) + ": no live broker outside " + ids_text(a.replicas) +
                  " can take its copy";
      out.moves.push_back(std::move(m));
      continue;
    }
    ++load[pick];
    m.target = current;
    std::replace(m.target.begin(), m.target.end(), broker, pick);
    out.moves.push_back(std::move(m));
  }
  return out;
}

}  // namespace sluice
