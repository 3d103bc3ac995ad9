// CatalogFsm: the fleet commands (brokers and fleet features). One function per command;
// CatalogFsm::apply_command (catalog_fsm.cc) dispatches.
#include "catalog_fsm.h"

#include "catalog_fsm_db.h"

#include <algorithm>
#include <set>

#include "sluice/features.h"

namespace sluice::raft_meta {

using namespace catalog_db;

ApplyResult CatalogFsm::apply_register_broker(std::uint64_t index, const Command& c) {
  ApplyResult r;
  r.seq = ChangeSeq{index};
  const auto seq = static_cast<std::int64_t>(index);
  const BrokerRegistration& b = c.broker;
  if (b.id.value() == 0) return refuse(index, Errc::invalid_argument, "broker id must be > 0");
  std::vector<std::string> features = b.features;
  for (auto& f : features)
    if (!valid_feature_name(f))
      return refuse(index, Errc::invalid_argument, "bad feature name '" + f + "'");
  std::sort(features.begin(), features.end());
  features.erase(std::unique(features.begin(), features.end()), features.end());
  std::set<std::string, std::less<>> finalized;
  for (auto& [name, at] : finalized_features()) finalized.insert(name);
  if (auto a = admit_broker(features, finalized); !a.ok())
    return refuse(index, a.error().code, "broker " + std::to_string(b.id.value()) + ": " +
                                             a.error().message);
  BrokerInfo info;
  info.id = b.id;
  info.address = b.address;
  info.directory_id = b.directory_id;
  info.version = b.version;
  info.features = features;
  info.registered_seq = ChangeSeq{index};
  info.peer_address = b.peer_address;
  Stmt s(db_, "INSERT INTO brokers(id, address, directory_id, version, features, registered_seq,"
              " peer_address) VALUES(?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET"
              " address = excluded.address, directory_id = excluded.directory_id,"
              " version = excluded.version, features = excluded.features,"
              " registered_seq = excluded.registered_seq, peer_address = excluded.peer_address");
  s.bind(1, static_cast<std::int64_t>(info.id.value())).bind(2, info.address)
      .bind(3, info.directory_id).bind(4, info.version).bind(5, join_strings(info.features))
      .bind(6, seq).bind(7, info.peer_address);
  s.step();
  record_change(broker_change(index, ChangeEvent::Kind::broker_registered, info));
  r.broker = info;
  return r;
}

ApplyResult CatalogFsm::apply_unregister_broker(std::uint64_t index, const Command& c) {
  ApplyResult r;
  r.seq = ChangeSeq{index};
  auto existing = broker(c.broker.id);
  if (!existing)
    return refuse(index, Errc::not_found, "no broker " + std::to_string(c.broker.id.value()));
  Stmt s(db_, "DELETE FROM brokers WHERE id = ?");
  s.bind(1, static_cast<std::int64_t>(c.broker.id.value()));
  s.step();
  record_change(broker_change(index, ChangeEvent::Kind::broker_unregistered, *existing));
  r.broker = *existing;
  return r;
}

ApplyResult CatalogFsm::apply_finalize_feature(std::uint64_t index, const Command& c) {
  ApplyResult r;
  r.seq = ChangeSeq{index};
  const auto seq = static_cast<std::int64_t>(index);
  // Apply records any well-formed name: whether a feature is "known" depends on the
  // applying build, and apply must not (felix: a level-8 member proposes a finalize of a
  // feature it does not know as an ordinary one). The proposer answers not_found for a
  // feature it does not know, before proposing.
  if (!valid_feature_name(c.feature))
    return refuse(index, Errc::invalid_argument, "bad feature name '" + c.feature + "'");
  r.feature = c.feature;
  {
    Stmt q(db_, "SELECT finalized_seq FROM features WHERE name = ?");
    q.bind(1, c.feature);
    if (q.step()) {  // one-way and idempotent: unchanged, no change event
      r.finalized_seq = ChangeSeq{static_cast<std::uint64_t>(q.i64(0))};
      return r;
    }
  }
  Stmt s(db_, "INSERT INTO features(name, finalized_seq) VALUES(?, ?)");
  s.bind(1, c.feature).bind(2, seq);
  s.step();
  record_change(feature_change(index, c.feature));
  r.finalized_seq = ChangeSeq{index};
  return r;
}

}  // namespace sluice::raft_meta
