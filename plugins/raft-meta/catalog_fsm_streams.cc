// CatalogFsm: streams. The incarnation and tombstone rules are the SDK's pure functions
// (sluice/features.h); these functions persist what they decide.
#include "catalog_fsm.h"

#include "catalog_fsm_db.h"

#include <algorithm>

#include "sluice/catalog_rules.h"
#include "sluice/features.h"

namespace sluice::raft_meta {

using namespace catalog_db;

ApplyResult CatalogFsm::apply_create_stream(std::uint64_t index, const Command& c) {
  ApplyResult r;
  r.seq = ChangeSeq{index};
  const auto seq = static_cast<std::int64_t>(index);
  if (auto v = validate_stream_spec(c.spec); !v.ok())
    return refuse(index, v.error().code, v.error().message);
  if (!c.placement.empty() && c.placement.size() != c.spec.shards)
    return refuse(index, Errc::invalid_argument,
                         "placement names " + std::to_string(c.placement.size()) +
                             " shards, the spec has " + std::to_string(c.spec.shards));
  if (c.spec.replication_factor > 1) {
    // Replicated: every shard placed on replication_factor distinct brokers, leader first
    // (the proposer's place_replicas); apply checks the shape, never re-places.
    if (c.placement.size() != c.spec.shards)
      return refuse(index, Errc::invalid_argument,
                    "a stream with replication_factor " + std::to_string(c.spec.replication_factor) +
                        " needs a placement for each of its " + std::to_string(c.spec.shards) +
                        " shards");
    for (std::size_t i = 0; i < c.placement.size(); ++i) {
      const auto& p = c.placement[i];
      std::vector<std::uint32_t> sorted = p.replicas;
      std::sort(sorted.begin(), sorted.end());
      const bool distinct = std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end();
      if (p.replicas.size() != c.spec.replication_factor || !distinct || sorted.front() == 0 ||
          p.leader != p.replicas.front())
        return refuse(index, Errc::invalid_argument,
                      "placement of shard " + std::to_string(i) + " must name " +
                          std::to_string(c.spec.replication_factor) +
                          " distinct brokers, the leader first");
    }
  }
  if (!namespace_exists(c.tenant, c.ns))
    return refuse(index, Errc::not_found, "no namespace " + c.tenant + "/" + c.ns);
  StreamKey key{c.tenant, c.ns, c.name};
  {
    Stmt s(db_, "SELECT 1 FROM streams WHERE tenant = ? AND ns = ? AND name = ?");
    s.bind(1, c.tenant).bind(2, c.ns).bind(3, c.name);
    if (s.step()) return refuse(index, Errc::already_exists, "stream " + key.to_string() + " exists");
  }
  StreamInfo info;
  info.key = key;
  // The rule (features.h): decided only from the entry (proposed, flag) and replicated
  // state (finalized, the name's tombstone). An unflagged 0 proposal stores 0.
  std::optional<Incarnation> tomb;
  if (auto t = tombstone(key)) tomb = t->deleted_up_to;
  info.incarnation = decide_create_incarnation(
      c.proposed_incarnation, c.incarnations == IncarnationRule::flagged,
      is_finalized(kStreamIncarnations), tomb);
  info.spec = c.spec;
  info.created_seq = ChangeSeq{index};
  info.created_at_us = c.clock_us;
  Stmt s(db_, "INSERT INTO streams(tenant, ns, name, incarnation, shards, retention_max_bytes,"
              " retention_max_age_ms, default_ack, created_seq, created_at_us,"
              " replication_factor, min_insync) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  s.bind(1, c.tenant).bind(2, c.ns).bind(3, c.name)
      .bind(4, static_cast<std::int64_t>(info.incarnation.value()))
      .bind(5, static_cast<std::int64_t>(info.spec.shards))
      .bind(6, info.spec.retention.max_bytes).bind(7, info.spec.retention.max_age_ms)
      .bind(8, to_string(info.spec.default_ack)).bind(9, seq).bind(10, info.created_at_us)
      .bind(11, static_cast<std::int64_t>(info.spec.replication_factor))
      .bind(12, static_cast<std::int64_t>(info.spec.min_insync));
  s.step();
  // Replica state starts from the brokers as registered (replicated state): each replica's
  // directory id is the one its broker registered with.
  const std::vector<BrokerInfo> brokers =
      info.spec.replication_factor > 1 ? list_brokers() : std::vector<BrokerInfo>{};
  // One assignment per shard, first generation = the create's index (never 0).
  std::vector<Assignment> as;
  for (std::uint32_t i = 0; i < info.spec.shards; ++i) {
    Assignment a;
    a.key = key;
    a.shard = ShardIndex{i};
    a.incarnation = info.incarnation;
    a.generation = first_generation(ChangeSeq{index});
    if (!c.placement.empty()) {
      a.leader = NodeId{c.placement[i].leader};
      for (auto rep : c.placement[i].replicas) a.replicas.push_back(NodeId{rep});
    }
    if (info.spec.replication_factor > 1) {
      if (auto st = start_replicated_shard(a, brokers); !st.ok())
        return refuse(index, st.error().code, st.error().message);
    }
    Stmt ins(db_, "INSERT INTO assignments(tenant, ns, name, shard, incarnation, generation,"
                  " leader, replicas, leader_epoch, in_sync, version)"
                  " VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    ins.bind(1, c.tenant).bind(2, c.ns).bind(3, c.name)
        .bind(4, static_cast<std::int64_t>(i))
        .bind(5, static_cast<std::int64_t>(a.incarnation.value()))
        .bind(6, static_cast<std::int64_t>(a.generation.value()))
        .bind(7, static_cast<std::int64_t>(a.leader.value()))
        .bind(8, join_ids(a.replicas))
        .bind(9, static_cast<std::int64_t>(a.leader_epoch.value()))
        .bind(10, encode_in_sync(a.in_sync))
        .bind(11, static_cast<std::int64_t>(a.version.value()));
    ins.step();
    as.push_back(std::move(a));
  }
  record_change(stream_change(index, ChangeEvent::Kind::stream_created, info, as, std::nullopt));
  r.stream = info;
  r.assignments = std::move(as);
  return r;
}

ApplyResult CatalogFsm::apply_delete_stream(std::uint64_t index, const Command& c) {
  ApplyResult r;
  r.seq = ChangeSeq{index};
  StreamKey key{c.tenant, c.ns, c.name};
  auto existing = get_stream(key);
  if (!existing.ok()) return refuse(index, existing.error().code, existing.error().message);
  std::vector<Assignment> removed = assignments(key);
  {
    Stmt s(db_, "DELETE FROM streams WHERE tenant = ? AND ns = ? AND name = ?");
    s.bind(1, c.tenant).bind(2, c.ns).bind(3, c.name);
    s.step();
  }
  {
    Stmt s(db_, "DELETE FROM assignments WHERE tenant = ? AND ns = ? AND name = ?");
    s.bind(1, c.tenant).bind(2, c.ns).bind(3, c.name);
    s.step();
  }
  // An unflagged delete of a stream at 0 writes no tombstone (what level 8 stores); a
  // flagged one only once stream_incarnations is finalized (replicated state).
  std::optional<Tombstone> written;
  if (auto up_to = decide_delete_tombstone(existing->incarnation,
                                           c.incarnations == IncarnationRule::flagged,
                                           is_finalized(kStreamIncarnations))) {
    written = raise_tombstone(TombstoneTable::streams, key, *up_to, index);
  }
  record_change(
      stream_change(index, ChangeEvent::Kind::stream_deleted, existing.value(), removed, written));
  r.stream = existing.value();
  r.assignments = std::move(removed);
  r.tombstone = written;
  return r;
}

// The compare-and-set of one shard's replica state (catalog_rules.h check_shard_update).
ApplyResult CatalogFsm::apply_update_shard(std::uint64_t index, const Command& c) {
  ApplyResult r;
  r.seq = ChangeSeq{index};
  const ShardUpdate& u = c.shard_update;
  const std::string what = u.key.to_string() + " shard " + std::to_string(u.shard.value());
  auto st = get_stream(u.key);
  if (!st.ok()) return refuse(index, st.error().code, st.error().message);
  std::optional<Assignment> cur;
  for (auto& a : assignments(u.key))
    if (a.shard == u.shard) cur = a;
  if (!cur) return refuse(index, Errc::not_found, "no shard " + what);
  if (st->spec.replication_factor <= 1 && cur->incarnation == u.incarnation)
    return refuse(index, Errc::invalid_argument,
                  what + ": the stream has replication factor 1, so the shard has no replica "
                         "state to change");
  if (auto v = check_shard_update(*cur, u); !v.ok())
    return refuse(index, v.error().code, v.error().message);
  // A reassignment step (level 17) comes as its own command type, so a member that does
  // not know it holds instead of applying the in-sync part alone.
  if (u.replicas.has_value() != (c.type == CommandType::reassign_shard))
    return refuse(index, Errc::invalid_argument,
                  what + ": a replica list change must be a reassign_shard entry");
  Assignment a = *cur;
  a.leader = u.leader;
  a.leader_epoch = u.leader_epoch;
  a.in_sync = u.in_sync;
  a.version = ShardVersion{cur->version.value() + 1};
  if (u.replicas) {
    a.replicas = *u.replicas;
    a.target_replicas = u.target_replicas;
  }
  Stmt s(db_, "UPDATE assignments SET leader = ?, leader_epoch = ?, in_sync = ?, version = ?,"
              " replicas = ?, target_replicas = ?"
              " WHERE tenant = ? AND ns = ? AND name = ? AND shard = ?");
  s.bind(1, static_cast<std::int64_t>(a.leader.value()))
      .bind(2, static_cast<std::int64_t>(a.leader_epoch.value()))
      .bind(3, encode_in_sync(a.in_sync))
      .bind(4, static_cast<std::int64_t>(a.version.value()))
      .bind(5, join_ids(a.replicas))
      .bind(6, join_ids(a.target_replicas))
      .bind(7, u.key.tenant).bind(8, u.key.ns).bind(9, u.key.name)
      .bind(10, static_cast<std::int64_t>(u.shard.value()));
  s.step();
  record_change(shard_change(index, a));
  r.stream = st.value();
  r.assignments = {a};
  return r;
}

}  // namespace sluice::raft_meta
