// PgMetaStore fleet calls: broker registration, heartbeats and the feature finalize gate.
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

// --- fleet ------------------------------------------------------------------------------

Result<BrokerInfo> PgMetaStore::register_broker(const BrokerRegistration& reg) {
  if (reg.id.value() == 0) return Error(Errc::invalid_argument, "broker id must be > 0");
  std::vector<std::string> features = reg.features;
  for (auto& f : features)
    if (!valid_feature_name(f)) return Error(Errc::invalid_argument, "bad feature name '" + f + "'");
  std::sort(features.begin(), features.end());
  features.erase(std::unique(features.begin(), features.end()), features.end());
  return run<BrokerInfo>(Mode::write, [&](pqxx::transaction_base& tx) -> Result<BrokerInfo> {
    std::set<std::string, std::less<>> finalized;
    for (auto& [name, at] : read_finalized(tx)) finalized.insert(name);
    if (auto a = admit_broker(features, finalized); !a.ok())
      return Error(a.error().code,
                   "broker " + std::to_string(reg.id.value()) + ": " + a.error().message);
    const std::uint64_t seq = next_seq(tx);
    BrokerInfo info;
    info.id = reg.id;
    info.address = reg.address;
    info.directory_id = reg.directory_id;
    info.version = reg.version;
    info.features = features;
    info.registered_seq = ChangeSeq{seq};
    info.peer_address = reg.peer_address;
    tx.exec_params(
        "INSERT INTO brokers(id, address, directory_id, version, features, registered_seq,"
        " last_heartbeat, peer_address) VALUES ($1, $2, $3, $4, $5::text[], $6, clock_timestamp(), $7)"
        " ON CONFLICT (id) DO UPDATE SET address = excluded.address,"
        " directory_id = excluded.directory_id, version = excluded.version,"
        " features = excluded.features, registered_seq = excluded.registered_seq,"
        " last_heartbeat = excluded.last_heartbeat, peer_address = excluded.peer_address",
        static_cast<std::int64_t>(info.id.value()), info.address, info.directory_id, info.version,
        pg_array(info.features), static_cast<std::int64_t>(seq), info.peer_address);
    record_change(tx, seq, ChangeEvent::Kind::broker_registered, broker_payload(info));
    info.live = true;
    return info;
  });
}

Result<void> PgMetaStore::heartbeat_broker(NodeId id) {
  // Liveness is not a catalog change: a plain update of last_heartbeat (database clock), in
  // READ COMMITTED. The update comes first: it takes the broker's row lock, which a
  // finalize holds (FOR SHARE) from its gate to its commit. The feature check after it is a
  // new statement, so it sees a finalize that committed while this waited. Checked first
  // (as before), a broker that lacks a feature finalized meanwhile was brought back to
  // life by the update, and counted as serving, for up to a heartbeat interval.
  return from_unit<void>(run<Unit>(Mode::plain, [&](pqxx::transaction_base& tx) -> Result<Unit> {
    auto r = tx.exec_params(
        "UPDATE brokers SET last_heartbeat = clock_timestamp() WHERE id = $1 RETURNING array_to_string(features, ',')",
        static_cast<std::int64_t>(id.value()));
    if (r.empty())
      return Error(Errc::not_found, "broker " + std::to_string(id.value()) + " is not registered");
    const auto features = split_csv(r[0][0].is_null() ? "" : r[0][0].as<std::string>());
    // A broker that lacks a feature finalized while it was away is not admitted back (the
    // error aborts the update).
    std::set<std::string, std::less<>> fin_set;
    for (auto& [name, at] : read_finalized(tx)) fin_set.insert(name);
    if (auto a = admit_broker(features, fin_set); !a) return a.error();
    return Unit{};
  }));
}

Result<void> PgMetaStore::unregister_broker(NodeId id) {
  return from_unit<void>(run<Unit>(Mode::write, [&](pqxx::transaction_base& tx) -> Result<Unit> {
    auto all = read_brokers(tx);
    auto it = std::find_if(all.begin(), all.end(), [&](auto& b) { return b.id == id; });
    if (it == all.end()) return Error(Errc::not_found, "no broker " + std::to_string(id.value()));
    BrokerInfo b = *it;
    b.live = false;
    const std::uint64_t seq = next_seq(tx);
    tx.exec_params("DELETE FROM brokers WHERE id = $1", static_cast<std::int64_t>(id.value()));
    record_change(tx, seq, ChangeEvent::Kind::broker_unregistered, broker_payload(b));
    return Unit{};
  }));
}

Result<std::vector<BrokerInfo>> PgMetaStore::list_brokers() {
  return run<std::vector<BrokerInfo>>(Mode::read, [&](pqxx::transaction_base& tx)
                                                      -> Result<std::vector<BrokerInfo>> {
    return read_brokers(tx);
  });
}

Result<std::vector<FeatureInfo>> PgMetaStore::list_features() {
  return run<std::vector<FeatureInfo>>(Mode::read, [&](pqxx::transaction_base& tx)
                                                       -> Result<std::vector<FeatureInfo>> {
    auto serving = serving_of(read_brokers(tx));
    auto fin = read_finalized(tx);
    return describe_features(fin, serving);
  });
}

Result<FeatureInfo> PgMetaStore::finalize_feature(const std::string& name) {
  // The gate and the write are one transaction: a registration cannot slip in between (it
  // takes the counter lock too), nor a heartbeat: the brokers are read FOR SHARE, so a
  // heartbeat waits for this commit and then sees the feature, and one in flight makes this
  // read fail to serialize and retry, seeing the broker live.
  return run<FeatureInfo>(Mode::write, [&](pqxx::transaction_base& tx) -> Result<FeatureInfo> {
    auto serving = serving_of(read_brokers(tx, /*lock=*/true));
    auto fin = read_finalized(tx);
    if (fin.count(name)) return describe_feature(name, fin, serving);  // idempotent
    if (!find_feature(name)) return Error(Errc::not_found, "unknown feature '" + name + "'");
    // The group's level: this instance's (a pre-incarnation instance does not know the
    // gate exists; the database's triggers refuse what it writes afterwards).
    if (auto g = check_finalize(name, cfg_.level, serving); !g.ok()) return g.error();
    const std::uint64_t seq = next_seq(tx);
    tx.exec_params("INSERT INTO features(name, finalized_seq) VALUES ($1, $2)", name,
                   static_cast<std::int64_t>(seq));
    record_change(tx, seq, ChangeEvent::Kind::feature_finalized, feature_payload(name));
    fin[name] = ChangeSeq{seq};
    log(LogLevel::info, "feature " + name + " finalized at " + std::to_string(seq));
    return describe_feature(name, fin, serving);
  });
}

}  // namespace sluice::postgres_meta
