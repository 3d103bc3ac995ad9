// PgMetaStore inside a write transaction: SQL error mapping, the change sequence, the
// change record, and the fleet reads every rule needs.
#include "pg_meta_store.h"
#include "pg_meta_store_internal.h"

#include <pqxx/pqxx>

#include <algorithm>
#include <cstring>
#include <optional>
#include <set>
#include <stdexcept>

#include "codec.h"
#include "schema.h"
#include "sluice/catalog_rules.h"
#include "sluice/strings.h"
#include "sluice/features.h"
#include "sluice/names.h"
#include "sluice/uuid.h"

namespace sluice::postgres_meta {

using namespace detail;

// --- transactions ------------------------------------------------------------------------

Error PgMetaStore::map_sql_error(const std::string& st, const std::string& what) const {
  std::string m = clean(what);
  if (st == kStateOldInstanceCreate || st == kStateOldInstanceDelete ||
      st == kStateIncarnationRepeat || st == kStateTombstoneKept ||
      st == kStateOldInstanceCacheCreate || st == kStateOldInstanceCacheDelete ||
      st == kStateCacheIncarnationRepeat || st == kStateCacheTombstoneKept ||
      st == kStateOldInstanceCounterCreate || st == kStateCounterIncarnationRepeat ||
      st == kStateOldInstanceCounterDelete || st == kStateCounterTombstoneKept ||
      st == kStateBrokerLacksFeature)
    return Error(Errc::conflict, m);
  if (st == "23505") return Error(Errc::already_exists, m);
  if (st == "23503") return Error(Errc::not_found, m);
  return Error(Errc::internal, "PostgreSQL error " + st + ": " + m);
}

std::uint64_t PgMetaStore::next_seq(pqxx::transaction_base& tx) {
  return u64(tx.exec1("UPDATE counter SET last_seq = last_seq + 1 RETURNING last_seq")[0]);
}

void PgMetaStore::record_change(pqxx::transaction_base& tx, std::uint64_t seq,
                                ChangeEvent::Kind kind, const std::string& payload) {
  tx.exec_params("INSERT INTO changes(seq, kind, payload) VALUES ($1, $2, $3)",
                 static_cast<std::int64_t>(seq), std::string(to_string(kind)), payload);
  tx.exec_params("SELECT pg_notify($1, $2)", channel_, std::to_string(seq));
  // Keep the newest change_retention changes; watchers behind the cut resync.
  std::int64_t cutoff = static_cast<std::int64_t>(seq) - cfg_.change_retention;
  if (cutoff > 0) {
    auto r = tx.exec_params("DELETE FROM changes WHERE seq <= $1", cutoff);
    if (r.affected_rows() > 0)
      tx.exec_params("UPDATE counter SET pruned_up_to = GREATEST(pruned_up_to, $1)", cutoff);
  }
}

std::vector<BrokerInfo> PgMetaStore::read_brokers(pqxx::transaction_base& tx, bool lock) {
  std::vector<BrokerInfo> out;
  auto rs = tx.exec_params(
      std::string("SELECT id, address, directory_id, version, array_to_string(features, ','), "
                  "registered_seq, last_heartbeat > clock_timestamp() - ($1::bigint * interval '1 millisecond'), "
                  "peer_address FROM brokers ORDER BY id") +
          (lock ? " FOR SHARE" : ""),
      static_cast<std::int64_t>(cfg_.session_timeout.count()));
  for (const auto& r : rs) {
    BrokerInfo b;
    b.id = NodeId{static_cast<std::uint32_t>(i64(r[0]))};
    b.address = r[1].as<std::string>();
    b.directory_id = r[2].as<std::string>();
    b.version = r[3].as<std::string>();
    b.features = split_csv(r[4].is_null() ? "" : r[4].as<std::string>());
    b.registered_seq = ChangeSeq{u64(r[5])};
    b.live = r[6].as<bool>();
    b.peer_address = r[7].is_null() ? std::string() : r[7].as<std::string>();
    out.push_back(std::move(b));
  }
  return out;
}

Fin PgMetaStore::read_finalized(pqxx::transaction_base& tx) {
  Fin fin;
  for (const auto& r : tx.exec("SELECT name, finalized_seq FROM features"))
    fin[r[0].as<std::string>()] = ChangeSeq{u64(r[1])};
  return fin;
}

}  // namespace sluice::postgres_meta
