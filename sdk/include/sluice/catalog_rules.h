// Catalog rules as pure functions (STYLE.md "Decisions are pure functions"). Both metadata
// backends and the host call these, so Raft and Postgres decide alike. They take state
// and return decisions; they never do I/O.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "sluice/error.h"
#include "sluice/metadata.h"
#include "sluice/types.h"

namespace sluice {

inline constexpr std::uint32_t kMaxShardsPerStream = 1024;

// Structural validity, stable forever: shards 1..kMaxShardsPerStream, retention values -1
// (unlimited) or > 0, replication_factor 1..kMaxReplicationFactor, min_insync
// 1..replication_factor. Metadata apply uses only this, because what apply accepts must never
// depend on the build that applies it (felix post-mortem, "apply reads only the entry").
Result<void> validate_stream_spec(const StreamSpec& spec);

// What this build can serve, beyond validate_stream_spec. Checked by the proposer and the
// broker, never inside apply. This build serves every valid spec (replicated shards and ack
// quorum, docs/replication.md); the hook stays for specs a future build adds.
Result<void> check_spec_supported(const StreamSpec& spec);

// The min_insync a create gets when it names none: a majority of the replication factor.
std::uint32_t default_min_insync(std::uint32_t replication_factor);

// The rules of a shard compare-and-set (MetadataStore::update_shard), applied by both
// backends against the stored assignment `current`, in this order:
//   stale_route   update.incarnation differs from current.incarnation
//   conflict      update.expected_version differs from current.version (names both)
//   invalid_argument
//                 the leader is neither 0 nor a replica; the leader epoch falls; the leader
//                 changes and the epoch does not rise; in_sync names a broker twice, a
//                 non-replica, or an empty directory id; a leader outside in_sync
// The caller then stores the update with version current.version + 1.
Result<void> check_shard_update(const Assignment& current, const ShardUpdate& update);

// Where a new stream's replicas go when replication_factor > 1 (both backends, at create):
// for each shard, `replication_factor` distinct brokers, the first its leader. Candidates
// are the live brokers that implement every finalized feature (as place_shards), sorted by
// id; shard i takes the candidates at (offset + i + j) mod n for j = 0..rf-1, offset =
// fnv1a64("tenant/ns/name") mod n, so leaders and copies spread evenly and the answer is
// deterministic. Never falls back to brokers that are not live: a copy claimed on a broker
// that is down is a copy that does not exist. not_enough_replicas (503) when fewer than
// replication_factor candidates are live, naming both numbers.
Result<std::vector<std::vector<NodeId>>> place_replicas(
    const StreamKey& key, std::uint32_t shards, std::uint32_t replication_factor,
    const std::vector<BrokerInfo>& registered, const std::set<std::string, std::less<>>& finalized);

// The replica state a new shard starts with (both backends, at create). replication_factor
// 1: no leader epoch, version 0, empty in-sync set (what builds before level 16 store).
// Above 1: leader = replicas[0], leader epoch 1, version 1, in_sync = every replica with the
// directory id it registered with (`brokers`); not_enough_replicas if a replica is not among them.
Result<void> start_replicated_shard(Assignment& a, const std::vector<BrokerInfo>& brokers);

// An operator's leader move (docs/replication.md "Moving a leader"): the compare-and-set
// that makes `broker` lead `current`'s shard, in the next leader epoch, with the in-sync set
// kept. invalid_argument if `broker` is 0 or not a replica; conflict if it already leads, or
// if it is not in the in-sync set (it may lack acknowledged records: electing it could lose
// them, which is issue 11's unclean election, not a move).
Result<ShardUpdate> plan_leader_move(const Assignment& current, NodeId broker);

// A lost copy leaving the in-sync set (docs/replication.md "A lost shard copy"): `u`, which
// holds the shard's leader, leader_epoch and in_sync as stored, without `self` in the set,
// and leaderless in the next epoch if `self` leads (the controller then elects an in-sync
// replica, or says why it cannot). Both the broker at start and the storage engine use it.
void leave_in_sync(ShardUpdate& u, NodeId self);

// --- the controller's rules (docs/replication.md "The controller") ----------------------
// A replica is eligible to lead when its broker is registered and live and its current
// directory.id equals the one the in-sync set recorded (seed kafka-15495).
bool eligible(const InSyncReplica& member, const std::vector<BrokerInfo>& brokers);

// The controller's decision for one replicated shard (an assignment with more than one
// replica), from the registered brokers (live and current directory ids):
//   * an eligible leader: nothing to do;
//   * otherwise the first replica in the replica list that is an eligible in-sync member
//     leads, in the next epoch; the old leader leaves the in-sync set unless that would
//     take it below min_insync;
//   * no eligible member: the shard has no leader (leader 0, next epoch, the in-sync set
//     kept), so a returning old leader is fenced and nothing is served until an eligible
//     replica returns or an operator elects one uncleanly.
// `why` says what was decided and why, for the log.
struct FailoverPlan {
  bool change = false;
  ShardUpdate update;
  std::string why;
};
FailoverPlan plan_failover(const Assignment& current, std::uint32_t min_insync,
                           const std::vector<BrokerInfo>& brokers);

// Why a shard has no leader, naming each in-sync replica's state ("the only in-sync
// replica, broker 11, came back with a new directory"); empty when it has one.
std::string unavailable_reason(const Assignment& current, const std::vector<BrokerInfo>& brokers);

// An operator's unclean election (`sluice shard elect --unclean`): `broker` leads in the
// next epoch with an in-sync set of itself alone, under its current directory. It may lack
// acknowledged records. invalid_argument if the shard has one replica or `broker` is not a
// replica; conflict if any in-sync member is eligible (the controller elects it cleanly), if the shard has
// an eligible leader (nothing to repair), or the broker is not registered or not live.
Result<ShardUpdate> plan_unclean_election(const Assignment& current, NodeId broker,
                                          const std::vector<BrokerInfo>& brokers);

// A preferred-leader election: the first replica in the list leads, in the next epoch, with
// the in-sync set kept. conflict if it already leads, or is not an eligible in-sync member
// (it would lack acknowledged records, or has a new disk); invalid_argument with one
// replica. The controller runs it every controller.preferred_leader_interval_ms; an
// operator on demand (sluice shard elect --preferred).
Result<ShardUpdate> plan_preferred_election(const Assignment& current,
                                            const std::vector<BrokerInfo>& brokers);

// --- reassignment (docs/replication.md "Reassignment", metadata level 17) ----------------
// An operator's reassignment of one shard to `target` (its first member the new preferred
// leader): the compare-and-set that starts it. invalid_argument: a replication factor of 1,
// a target that is not `replication_factor` distinct broker ids, or names an unregistered
// broker; conflict: a new broker that is not live, a reassignment already running, the
// same list, or no leader to copy from. A target with the same brokers in another order
// only reorders the list; otherwise `replicas` becomes the current list followed by the new
// brokers, and `target_replicas` the target. Leader, epoch and in-sync set are kept.
Result<ShardUpdate> plan_reassignment(const Assignment& current, const std::vector<NodeId>& target,
                                      std::uint32_t replication_factor,
                                      const std::vector<BrokerInfo>& brokers);

// The controller's next step of a running reassignment: nothing while a target member is
// not an eligible in-sync replica (or the shard has no leader); then, if the leader is not
// in the target, the target's first member leads in the next epoch; then the replica list
// becomes the target, the in-sync set keeps only target members, and the target empties.
// `why` names the step taken, or what it waits for (the progress operators see).
FailoverPlan plan_reassignment_step(const Assignment& current, const std::vector<BrokerInfo>& brokers);

// A broker drain: for every shard with a copy on `broker`, the reassignment that replaces
// it by the live broker holding the fewest copies (then the lowest id) outside the shard's
// replica list. A shard it cannot move (replication factor 1, no candidate, a reassignment
// that keeps the broker) is listed with `refused` set. Shards already moving off it are
// skipped.
struct DrainMove {
  Assignment assignment;
  std::vector<NodeId> target;  // empty when refused
  std::string refused;
};
struct DrainPlan {
  std::vector<DrainMove> moves;
};
DrainPlan plan_drain(NodeId broker, const std::vector<Assignment>& assignments,
                     const std::vector<BrokerInfo>& brokers);

// "[2,3,4]" (messages and the shards listing).
std::string replica_ids_text(const std::vector<NodeId>& ids);

}  // namespace sluice
