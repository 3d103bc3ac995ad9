// CatalogFsm: reads of the applied state (the catalog, fleet, members and change feed).
#include "catalog_fsm.h"

#include "catalog_fsm_db.h"

#include <sqlite3.h>

#include "sluice/catalog_json.h"

namespace sluice::raft_meta {

using namespace catalog_db;

std::string CatalogFsm::cluster_id() const { return meta_get("cluster_id"); }

std::uint64_t CatalogFsm::applied_index() const { return std::stoull("0" + meta_get("applied_index")); }

ChangeSeq CatalogFsm::applied() const {
  if (seq_ahead_) return ChangeSeq{std::stoull("0" + meta_get("applied_seq"))};
  return ChangeSeq{applied_index()};
}

MetadataLevel CatalogFsm::level() const {
  return MetadataLevel{static_cast<std::uint32_t>(std::stoul("0" + meta_get("level")))};
}

MetadataLevel CatalogFsm::level_floor() const {
  return MetadataLevel{static_cast<std::uint32_t>(std::stoul("0" + meta_get("level_floor")))};
}

Result<std::vector<TenantInfo>> CatalogFsm::list_tenants() const {
  try {
    std::vector<TenantInfo> out;
    Stmt s(db_, "SELECT name, created_seq FROM tenants ORDER BY name");
    while (s.step()) out.push_back(TenantInfo{s.text(0), ChangeSeq{static_cast<std::uint64_t>(s.i64(1))}});
    return out;
  } catch (const std::exception& e) {
    return internal_error(e);
  }
}

Result<std::vector<NamespaceInfo>> CatalogFsm::list_namespaces(const std::string& tenant) const {
  try {
    {
      Stmt t(db_, "SELECT 1 FROM tenants WHERE name = ?");
      t.bind(1, tenant);
      if (!t.step()) return Error(Errc::not_found, "no tenant " + tenant);
    }
    std::vector<NamespaceInfo> out;
    Stmt s(db_, "SELECT tenant, name, created_seq FROM namespaces WHERE tenant = ? ORDER BY name");
    s.bind(1, tenant);
    while (s.step())
      out.push_back(NamespaceInfo{s.text(0), s.text(1), ChangeSeq{static_cast<std::uint64_t>(s.i64(2))}});
    return out;
  } catch (const std::exception& e) {
    return internal_error(e);
  }
}

Result<StreamInfo> CatalogFsm::get_stream(const StreamKey& key) const {
  try {
    std::string sql = std::string("SELECT ") + kStreamColumns +
                      " FROM streams WHERE tenant = ? AND ns = ? AND name = ?";
    Stmt s(db_, sql.c_str());
    s.bind(1, key.tenant).bind(2, key.ns).bind(3, key.name);
    if (!s.step()) return Error(Errc::not_found, "no stream " + key.to_string());
    return read_stream(s);
  } catch (const std::exception& e) {
    return internal_error(e);
  }
}

Result<std::vector<StreamInfo>> CatalogFsm::list_streams(const std::string& tenant,
                                                         const std::string& ns) const {
  try {
    {
      Stmt t(db_, "SELECT 1 FROM namespaces WHERE tenant = ? AND name = ?");
      t.bind(1, tenant).bind(2, ns);
      if (!t.step()) return Error(Errc::not_found, "no namespace " + tenant + "/" + ns);
    }
    std::string sql = std::string("SELECT ") + kStreamColumns +
                      " FROM streams WHERE tenant = ? AND ns = ? ORDER BY name";
    Stmt s(db_, sql.c_str());
    s.bind(1, tenant).bind(2, ns);
    std::vector<StreamInfo> out;
    while (s.step()) out.push_back(read_stream(s));
    return out;
  } catch (const std::exception& e) {
    return internal_error(e);
  }
}

CatalogSnapshot CatalogFsm::catalog_snapshot() const {
  CatalogSnapshot snap;
  snap.seq = applied();
  if (auto t = list_tenants(); t.ok()) snap.tenants = std::move(t.value());
  {
    Stmt s(db_, "SELECT tenant, name, created_seq FROM namespaces ORDER BY tenant, name");
    while (s.step())
      snap.namespaces.push_back(
          NamespaceInfo{s.text(0), s.text(1), ChangeSeq{static_cast<std::uint64_t>(s.i64(2))}});
  }
  std::string sql = std::string("SELECT ") + kStreamColumns +
                    " FROM streams ORDER BY tenant, ns, name";
  {
    Stmt s(db_, sql.c_str());
    while (s.step()) snap.streams.push_back(read_stream(s));
  }
  snap.tombstones = list_tombstones();
  {
    std::string q = std::string("SELECT ") + kAssignmentColumns +
                    " FROM assignments ORDER BY tenant, ns, name, shard";
    Stmt s(db_, q.c_str());
    while (s.step()) snap.assignments.push_back(read_assignment(s));
  }
  for (auto& [name, at] : finalized_features()) snap.finalized_features.push_back(name);
  snap.brokers = list_brokers();
  {
    std::string q = std::string("SELECT ") + kCacheColumns + " FROM caches ORDER BY tenant, ns, name";
    Stmt s(db_, q.c_str());
    while (s.step()) snap.caches.push_back(read_cache(s));
  }
  snap.cache_tombstones = list_cache_tombstones();
  {
    std::string q = std::string("SELECT ") + kCounterColumns + " FROM counters ORDER BY tenant, ns, name";
    Stmt s(db_, q.c_str());
    while (s.step()) snap.counters.push_back(read_counter(s));
  }
  snap.counter_tombstones = list_counter_tombstones();
  return snap;
}

std::vector<Tombstone> CatalogFsm::list_counter_tombstones() const {
  std::vector<Tombstone> out;
  Stmt s(db_, "SELECT tenant, ns, name, deleted_up_to, seq FROM counter_tombstones"
              " ORDER BY tenant, ns, name");
  while (s.step()) out.push_back(read_tombstone(s));
  return out;
}

std::optional<Tombstone> CatalogFsm::counter_tombstone(const StreamKey& key) const {
  Stmt s(db_, "SELECT tenant, ns, name, deleted_up_to, seq FROM counter_tombstones"
              " WHERE tenant = ? AND ns = ? AND name = ?");
  s.bind(1, key.tenant).bind(2, key.ns).bind(3, key.name);
  if (!s.step()) return std::nullopt;
  return read_tombstone(s);
}

std::optional<CounterInfo> CatalogFsm::counter(const StreamKey& key) const {
  std::string q = std::string("SELECT ") + kCounterColumns +
                  " FROM counters WHERE tenant = ? AND ns = ? AND name = ?";
  Stmt s(db_, q.c_str());
  s.bind(1, key.tenant).bind(2, key.ns).bind(3, key.name);
  if (!s.step()) return std::nullopt;
  return read_counter(s);
}

Result<std::vector<CounterInfo>> CatalogFsm::list_counters(const std::string& tenant,
                                                          const std::string& ns) const {
  try {
    {
      Stmt t(db_, "SELECT 1 FROM namespaces WHERE tenant = ? AND name = ?");
      t.bind(1, tenant).bind(2, ns);
      if (!t.step()) return Error(Errc::not_found, "no namespace " + tenant + "/" + ns);
    }
    std::string q = std::string("SELECT ") + kCounterColumns +
                    " FROM counters WHERE tenant = ? AND ns = ? ORDER BY name";
    Stmt s(db_, q.c_str());
    s.bind(1, tenant).bind(2, ns);
    std::vector<CounterInfo> out;
    while (s.step()) out.push_back(read_counter(s));
    return out;
  } catch (const std::exception& e) {
    return internal_error(e);
  }
}

std::vector<Tombstone> CatalogFsm::list_cache_tombstones() const {
  std::vector<Tombstone> out;
  Stmt s(db_, "SELECT tenant, ns, name, deleted_up_to, seq FROM cache_tombstones"
              " ORDER BY tenant, ns, name");
  while (s.step()) out.push_back(read_tombstone(s));
  return out;
}

std::optional<Tombstone> CatalogFsm::cache_tombstone(const StreamKey& key) const {
  Stmt s(db_, "SELECT tenant, ns, name, deleted_up_to, seq FROM cache_tombstones"
              " WHERE tenant = ? AND ns = ? AND name = ?");
  s.bind(1, key.tenant).bind(2, key.ns).bind(3, key.name);
  if (!s.step()) return std::nullopt;
  return read_tombstone(s);
}

std::optional<CacheInfo> CatalogFsm::cache(const StreamKey& key) const {
  std::string q = std::string("SELECT ") + kCacheColumns +
                  " FROM caches WHERE tenant = ? AND ns = ? AND name = ?";
  Stmt s(db_, q.c_str());
  s.bind(1, key.tenant).bind(2, key.ns).bind(3, key.name);
  if (!s.step()) return std::nullopt;
  return read_cache(s);
}

Result<std::vector<CacheInfo>> CatalogFsm::list_caches(const std::string& tenant,
                                                      const std::string& ns) const {
  try {
    {
      Stmt t(db_, "SELECT 1 FROM namespaces WHERE tenant = ? AND name = ?");
      t.bind(1, tenant).bind(2, ns);
      if (!t.step()) return Error(Errc::not_found, "no namespace " + tenant + "/" + ns);
    }
    std::string q = std::string("SELECT ") + kCacheColumns +
                    " FROM caches WHERE tenant = ? AND ns = ? ORDER BY name";
    Stmt s(db_, q.c_str());
    s.bind(1, tenant).bind(2, ns);
    std::vector<CacheInfo> out;
    while (s.step()) out.push_back(read_cache(s));
    return out;
  } catch (const std::exception& e) {
    return internal_error(e);
  }
}

std::vector<MemberInfo> CatalogFsm::list_members() const {
  std::vector<MemberInfo> out;
  Stmt s(db_, "SELECT id, raft_address, rpc_address, level, joined_seq FROM members ORDER BY id");
  while (s.step()) {
    MemberInfo m;
    m.id = NodeId{static_cast<std::uint32_t>(s.i64(0))};
    m.raft_address = s.text(1);
    m.rpc_address = s.text(2);
    m.level = MetadataLevel{static_cast<std::uint32_t>(s.i64(3))};
    m.joined_seq = ChangeSeq{static_cast<std::uint64_t>(s.i64(4))};
    out.push_back(std::move(m));
  }
  return out;
}

std::optional<MemberInfo> CatalogFsm::member(NodeId id) const {
  for (auto& m : list_members())
    if (m.id == id) return m;
  return std::nullopt;
}

std::optional<MetadataLevel> CatalogFsm::recorded_group_level() const {
  Stmt s(db_, "SELECT MIN(level) FROM members");
  if (!s.step() || sqlite3_column_type(s.raw(), 0) == SQLITE_NULL) return std::nullopt;
  return MetadataLevel{static_cast<std::uint32_t>(s.i64(0))};
}

std::size_t CatalogFsm::members_below(MetadataLevel level) const {
  Stmt s(db_, "SELECT COUNT(*) FROM members WHERE level < ?");
  s.bind(1, static_cast<std::int64_t>(level.value()));
  return s.step() ? static_cast<std::size_t>(s.i64(0)) : 0;
}

std::vector<Tombstone> CatalogFsm::list_tombstones() const {
  std::vector<Tombstone> out;
  out.reserve(tombstone_count());  // a start reads them all: no regrowth copies
  Stmt s(db_, "SELECT tenant, ns, name, deleted_up_to, seq FROM tombstones"
              " ORDER BY tenant, ns, name");
  while (s.step()) out.push_back(read_tombstone(s));
  return out;
}

std::optional<Tombstone> CatalogFsm::tombstone(const StreamKey& key) const {
  Stmt s(db_, "SELECT tenant, ns, name, deleted_up_to, seq FROM tombstones"
              " WHERE tenant = ? AND ns = ? AND name = ?");
  s.bind(1, key.tenant).bind(2, key.ns).bind(3, key.name);
  if (!s.step()) return std::nullopt;
  return read_tombstone(s);
}

std::vector<Assignment> CatalogFsm::assignments(const StreamKey& key) const {
  std::vector<Assignment> out;
  std::string q = std::string("SELECT ") + kAssignmentColumns +
                  " FROM assignments WHERE tenant = ? AND ns = ? AND name = ? ORDER BY shard";
  Stmt s(db_, q.c_str());
  s.bind(1, key.tenant).bind(2, key.ns).bind(3, key.name);
  while (s.step()) out.push_back(read_assignment(s));
  return out;
}

std::vector<BrokerInfo> CatalogFsm::list_brokers() const {
  std::vector<BrokerInfo> out;
  std::string q = std::string("SELECT ") + kBrokerColumns + " FROM brokers ORDER BY id";
  Stmt s(db_, q.c_str());
  while (s.step()) out.push_back(read_broker(s));
  return out;
}

std::optional<BrokerInfo> CatalogFsm::broker(NodeId id) const {
  std::string q = std::string("SELECT ") + kBrokerColumns + " FROM brokers WHERE id = ?";
  Stmt s(db_, q.c_str());
  s.bind(1, static_cast<std::int64_t>(id.value()));
  if (!s.step()) return std::nullopt;
  return read_broker(s);
}

std::map<std::string, ChangeSeq, std::less<>> CatalogFsm::finalized_features() const {
  std::map<std::string, ChangeSeq, std::less<>> out;
  Stmt s(db_, "SELECT name, finalized_seq FROM features ORDER BY name");
  while (s.step()) out.emplace(s.text(0), ChangeSeq{static_cast<std::uint64_t>(s.i64(1))});
  return out;
}

bool CatalogFsm::is_finalized(std::string_view feature) const {
  Stmt s(db_, "SELECT 1 FROM features WHERE name = ?");
  s.bind(1, feature);
  return s.step();
}

std::size_t CatalogFsm::tombstone_count() const {
  Stmt s(db_, "SELECT COUNT(*) FROM tombstones");
  return s.step() ? static_cast<std::size_t>(s.i64(0)) : 0;
}

std::size_t CatalogFsm::change_count() const {
  Stmt s(db_, "SELECT COUNT(*) FROM changes");
  return s.step() ? static_cast<std::size_t>(s.i64(0)) : 0;
}

ChangeBatch CatalogFsm::changes_after(ChangeSeq after, std::size_t limit) const {
  ChangeBatch b;
  std::uint64_t pruned = std::stoull("0" + meta_get("changes_pruned_up_to"));
  if (after.value() < pruned) {
    b.resync = true;
    return b;
  }
  Stmt s(db_, "SELECT seq, kind, payload FROM changes WHERE seq > ? ORDER BY seq LIMIT ?");
  s.bind(1, static_cast<std::int64_t>(after.value())).bind(2, static_cast<std::int64_t>(limit));
  while (s.step()) {
    auto e = decode_change_payload(ChangeSeq{static_cast<std::uint64_t>(s.i64(0))}, s.text(1), s.text(2));
    if (!e.ok()) {  // never guess: the watcher stops before a change it cannot read
      b.error = e.error();
      break;
    }
    b.events.push_back(std::move(e.value()));
  }
  return b;
}

}  // namespace sluice::raft_meta
