// CatalogFsm: the metadata member commands (the replicated record of each voter's
// addresses and level, from which the group level is computed).
#include "catalog_fsm.h"

#include "catalog_fsm_db.h"
#include "sluice/levels.h"

namespace sluice::raft_meta {

using namespace catalog_db;

ApplyResult CatalogFsm::apply_join_member(std::uint64_t index, const Command& c) {
  ApplyResult r;
  r.seq = ChangeSeq{index};
  const auto seq = static_cast<std::int64_t>(index);
  const JoinRequest& m = c.member;
  if (m.id.value() == 0) return refuse(index, Errc::invalid_argument, "member id must be > 0");
  if (m.raft_address.empty() || m.raft_address.size() > 255 || m.rpc_address.size() > 255)
    return refuse(index, Errc::invalid_argument, "member addresses must be 1..255 bytes");
  if (m.level < kLowestMetadataLevel)
    return refuse(index, Errc::invalid_argument, "member level " + std::to_string(m.level.value()) +
                                                     " is below the lowest level " +
                                                     std::to_string(kLowestMetadataLevel.value()));
  if (m.level < level_floor())
    return refuse(index, Errc::conflict, "member " + std::to_string(m.id.value()) + " runs at metadata level " +
                                             std::to_string(m.level.value()) + ", below the group's level floor " +
                                             std::to_string(level_floor().value()) +
                                             " (raised by the first flagged entry); upgrade it first");
  if (auto old = member(m.id); old && old->raft_address != m.raft_address)
    return refuse(index, Errc::conflict, "node id " + std::to_string(m.id.value()) +
                                             " is already a member at " + old->raft_address);
  Stmt q(db_, "SELECT id FROM members WHERE raft_address = ? AND id != ?");
  q.bind(1, m.raft_address).bind(2, static_cast<std::int64_t>(m.id.value()));
  if (q.step())
    return refuse(index, Errc::conflict, "raft address " + m.raft_address + " belongs to member " +
                                             std::to_string(q.i64(0)));
  Stmt s(db_, "INSERT INTO members(id, raft_address, rpc_address, level, joined_seq)"
              " VALUES(?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET"
              " rpc_address = excluded.rpc_address, level = excluded.level,"
              " joined_seq = excluded.joined_seq");
  s.bind(1, static_cast<std::int64_t>(m.id.value())).bind(2, m.raft_address)
      .bind(3, m.rpc_address).bind(4, static_cast<std::int64_t>(m.level.value())).bind(5, seq);
  s.step();
  update_group_level();
  return r;
}

ApplyResult CatalogFsm::apply_leave_member(std::uint64_t index, const Command& c) {
  ApplyResult r;
  r.seq = ChangeSeq{index};
  if (!member(c.member.id))
    return refuse(index, Errc::not_found, "no member " + std::to_string(c.member.id.value()));
  if (list_members().size() <= 1)
    return refuse(index, Errc::conflict, "member " + std::to_string(c.member.id.value()) +
                                             " is the last voter; a group cannot remove its last member");
  Stmt s(db_, "DELETE FROM members WHERE id = ?");
  s.bind(1, static_cast<std::int64_t>(c.member.id.value()));
  s.step();
  update_group_level();
  return r;
}

}  // namespace sluice::raft_meta
