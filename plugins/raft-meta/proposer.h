// What a proposer writes (docs/metadata-raft-design.md, rule 2): pure functions from the
// proposer's own level and the group's level (the lowest recorded member level, which is
// replicated state) to the fields of a create or delete entry. The store and the
// simulation tests both use them, so "a member run at level N proposes exactly what a
// build of level N would" is checked once.
//
//   effective level E = min(own level, group level)
//   create_stream  proposed = clock if E >= 10, else 0 (finalized or not: apply ignores it
//                  until stream_incarnations is finalized, and a view that has not seen a
//                  finalize appended before this entry must not store the stream at 0)
//                  flagged  = E >= 14
//   create_cache   refused (409) if own >= 14 and group < 14 (the seed: an upgraded member
//                  refuses cache creates while a member is below 14); a member below 14
//                  proposes the old way: proposed 0, unflagged
//                  proposed = clock if E >= 14, else 0 (as for streams)
//   deletes        flagged = E >= 14, proposed 0
//   create_counter / delete_counter  refused (409) unless own and group are >= 18 and
//                  `counters` is finalized (check_counters); a create proposes the clock
//   batching       (level 19) name operations and shard updates share batch entries while
//                  own and group are >= 19 (may_batch)
//   register_broker peer_address only while the group is >= 16: it is a level-16 field of
//                  an op older members apply without it (they would store none, members at
//                  16 the address: states that differ for good). The broker registers again
//                  once replicated_shards is finalized, which needs every member at 16.
//
// Thread-safety: pure functions.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "command.h"
#include "sluice/error.h"
#include "sluice/features.h"
#include "sluice/types.h"

namespace sluice::raft_meta {

struct ProposerView {
  MetadataLevel own;    // the level this member runs at
  MetadataLevel group;  // the lowest member level (own included)
  bool stream_incarnations_finalized = false;
  bool cache_incarnations_finalized = false;
  bool replicated_shards_finalized = false;
  bool shard_reassignment_finalized = false;
  bool counters_finalized = false;
  MetadataLevel effective() const { return std::min(own, group); }
};

// Level 16: whether this member may propose a replicated-shards entry (a create with
// replication_factor > 1, an update_shard). conflict naming what is missing: this member's
// level, the group's, or the finalize of `replicated_shards`. Checked before forwarding,
// like the cache rule below, so a member never hands such a request to an older leader.
inline Result<void> check_replicated_shards(const ProposerView& v, std::string_view what) {
  if (v.own < kReplicatedShardsLevel)
    return Error(Errc::conflict, std::string(what) + " needs metadata level " +
                                     std::to_string(kReplicatedShardsLevel.value()) +
                                     "; this member runs at level " + std::to_string(v.own.value()));
  if (v.group < kReplicatedShardsLevel)
    return Error(Errc::conflict, std::string(what) + " needs every metadata member at level " +
                                     std::to_string(kReplicatedShardsLevel.value()) +
                                     "; the group is at level " + std::to_string(v.group.value()) +
                                     " (upgrade every member first)");
  if (!v.replicated_shards_finalized)
    return Error(Errc::conflict, std::string(what) +
                                     " needs the fleet feature replicated_shards, which is not "
                                     "finalized (POST /v1/features/replicated_shards/finalize)");
  return {};
}

// A replicated create also needs stream_incarnations finalized (review finding): before it,
// every stream is incarnation 0 and a shard's version starts over at 1 on each create, so
// an update_shard computed for a deleted replicated stream (incarnation 0, version 1) would
// pass the compare-and-set of its re-creation and replace that one's leader and in-sync
// set. With the finalize each creation has its own incarnation. Proposer-only: safe while
// older members apply.
inline Result<void> check_replicated_create(const ProposerView& v, std::string_view what) {
  if (auto r = check_replicated_shards(v, what); !r) return r;
  if (!v.stream_incarnations_finalized)
    return Error(Errc::conflict, std::string(what) +
                                     " needs the fleet feature stream_incarnations, which is not "
                                     "finalized (POST /v1/features/stream_incarnations/finalize)");
  return {};
}

// Level 17: whether this member may propose a reassignment step (an update_shard that
// changes the replica list). Checked before forwarding, like the rule above.
inline Result<void> check_shard_reassignment(const ProposerView& v) {
  if (v.own < kShardReassignmentLevel)
    return Error(Errc::conflict, "reassignment needs metadata level " +
                                     std::to_string(kShardReassignmentLevel.value()) +
                                     "; this member runs at level " + std::to_string(v.own.value()));
  if (v.group < kShardReassignmentLevel)
    return Error(Errc::conflict, "reassignment needs every metadata member at level " +
                                     std::to_string(kShardReassignmentLevel.value()) +
                                     "; the group is at level " + std::to_string(v.group.value()) +
                                     " (upgrade every member first)");
  if (!v.shard_reassignment_finalized)
    return Error(Errc::conflict,
                 "reassignment needs the fleet feature shard_reassignment, which is not finalized "
                 "(POST /v1/features/shard_reassignment/finalize)");
  return {};
}

// Level 18: whether this member may propose a counter create or delete. Checked before
// forwarding, like the rules above, so a member never hands such a request to an older
// leader (which would not know the op).
inline Result<void> check_counters(const ProposerView& v) {
  if (v.own < kCountersLevel)
    return Error(Errc::conflict, "counters need metadata level " +
                                     std::to_string(kCountersLevel.value()) +
                                     "; this member runs at level " + std::to_string(v.own.value()));
  if (v.group < kCountersLevel)
    return Error(Errc::conflict, "counters need every metadata member at level " +
                                     std::to_string(kCountersLevel.value()) +
                                     "; the group is at level " + std::to_string(v.group.value()) +
                                     " (upgrade every member first)");
  if (!v.counters_finalized)
    return Error(Errc::conflict,
                 "counters need the fleet feature counters, which is not finalized "
                 "(POST /v1/features/counters/finalize)");
  return {};
}

// Level 19: whether a proposal of type `t` may share a batch entry with concurrent ones
// (group commit, raft_node.h). Only while this member and every recorded member run at 19
// or above, and only for the catalog's name operations and shard updates (is_batchable).
// No fleet feature: brokers never read entries, only the changes, which a batch records
// exactly as the same commands alone. A stale view is safe: apply refuses a batch while a
// recorded member is below 19, and the commands are then proposed again alone.
inline bool may_batch(const ProposerView& v, CommandType t) {
  return v.own >= kBatchedEntriesLevel && v.group >= kBatchedEntriesLevel && is_batchable(t);
}

// Fills proposed_incarnation, incarnations and level of a create/delete `c` (any other
// command only gets `level`). conflict for a cache create the group cannot take yet.
inline Result<void> stamp_entry(Command& c, const ProposerView& v, std::int64_t clock_us) {
  c.level = v.own.value();
  const MetadataLevel e = v.effective();
  const bool flag = e >= kFlaggedEntriesLevel;
  switch (c.type) {
    case CommandType::create_stream:
      // The clock whether or not this view has seen the finalize (review finding): a
      // finalize appended but not yet applied here is applied before this entry, and a 0
      // proposed from the stale view stored the stream at incarnation 0 after the finalize
      // (refused by every broker). Apply ignores the clock until the finalize
      // (decide_create_incarnation), on every member of level 10 and above.
      c.proposed_incarnation = e >= kStreamIncarnationsLevel ? propose_incarnation(true, clock_us) : 0;
      c.incarnations = flag ? IncarnationRule::flagged : IncarnationRule::legacy;
      return {};
    case CommandType::create_cache:
      if (v.own >= kFlaggedEntriesLevel && v.group < kFlaggedEntriesLevel)
        return Error(Errc::conflict,
                     "cache creates need every metadata member at level " +
                         std::to_string(kFlaggedEntriesLevel.value()) + "; the group is at level " +
                         std::to_string(v.group.value()) + " (upgrade every member first)");
      c.proposed_incarnation = e >= kFlaggedEntriesLevel ? propose_incarnation(true, clock_us) : 0;
      c.incarnations = flag ? IncarnationRule::flagged : IncarnationRule::legacy;
      return {};
    case CommandType::create_counter:
      if (auto ok = check_counters(v); !ok) return ok;
      c.proposed_incarnation = propose_incarnation(true, clock_us);
      return {};
    case CommandType::delete_counter:
      return check_counters(v);
    case CommandType::register_broker:
      if (v.group < kReplicatedShardsLevel) c.broker.peer_address.clear();
      return {};
    case CommandType::delete_stream:
    case CommandType::delete_cache:
      c.proposed_incarnation = 0;
      c.incarnations = flag ? IncarnationRule::flagged : IncarnationRule::legacy;
      return {};
    default:
      return {};
  }
}

}  // namespace sluice::raft_meta
