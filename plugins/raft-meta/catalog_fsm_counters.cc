// CatalogFsm: counters (level 18, fleet feature `counters`; docs/metadata-levels.md).
// Named like caches, with incarnations that never repeat and tombstones; unlike caches they
// have no legacy past: apply refuses them until `counters` is finalized and while a
// recorded member is below 18 (catalog_fsm.cc), so every counter is incarnated and every
// delete leaves a tombstone.
#include "catalog_fsm.h"

#include "catalog_fsm_db.h"

#include "sluice/features.h"

namespace sluice::raft_meta {

using namespace catalog_db;

ApplyResult CatalogFsm::apply_create_counter(std::uint64_t index, const Command& c) {
  ApplyResult r;
  r.seq = ChangeSeq{index};
  if (!namespace_exists(c.tenant, c.ns))
    return refuse(index, Errc::not_found, "no namespace " + c.tenant + "/" + c.ns);
  StreamKey key{c.tenant, c.ns, c.name};
  if (counter(key)) return refuse(index, Errc::already_exists, "counter " + key.to_string() + " exists");
  CounterInfo info;
  info.key = key;
  std::optional<Incarnation> tomb;
  if (auto t = counter_tombstone(key)) tomb = t->deleted_up_to;
  // Always incarnated: max(proposed, tombstone + 1), and never 0 (a proposer writes its
  // clock, at least 1).
  info.incarnation = next_incarnation(c.proposed_incarnation ? c.proposed_incarnation : 1, tomb);
  info.created_seq = ChangeSeq{index};
  Stmt s(db_, "INSERT INTO counters(tenant, ns, name, incarnation, created_seq, created_at_us)"
              " VALUES(?, ?, ?, ?, ?, ?)");
  s.bind(1, c.tenant).bind(2, c.ns).bind(3, c.name)
      .bind(4, static_cast<std::int64_t>(info.incarnation.value()))
      .bind(5, static_cast<std::int64_t>(index)).bind(6, c.clock_us);
  s.step();
  record_change(counter_change(index, ChangeEvent::Kind::counter_created, info, std::nullopt));
  r.counter = info;
  return r;
}

ApplyResult CatalogFsm::apply_delete_counter(std::uint64_t index, const Command& c) {
  ApplyResult r;
  r.seq = ChangeSeq{index};
  StreamKey key{c.tenant, c.ns, c.name};
  auto existing = counter(key);
  if (!existing) return refuse(index, Errc::not_found, "no counter " + key.to_string());
  {
    Stmt s(db_, "DELETE FROM counters WHERE tenant = ? AND ns = ? AND name = ?");
    s.bind(1, c.tenant).bind(2, c.ns).bind(3, c.name);
    s.step();
  }
  Tombstone written = raise_tombstone(TombstoneTable::counters, key, existing->incarnation, index);
  record_change(counter_change(index, ChangeEvent::Kind::counter_deleted, *existing, written));
  r.counter = *existing;
  r.tombstone = written;
  return r;
}

}  // namespace sluice::raft_meta
