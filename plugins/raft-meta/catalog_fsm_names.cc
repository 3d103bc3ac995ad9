// CatalogFsm: tenants and namespaces.
#include "catalog_fsm.h"

#include "catalog_fsm_db.h"

namespace sluice::raft_meta {

using namespace catalog_db;

ApplyResult CatalogFsm::apply_create_tenant(std::uint64_t index, const Command& c) {
  ApplyResult r;
  r.seq = ChangeSeq{index};
  const auto seq = static_cast<std::int64_t>(index);
  if (tenant_exists(c.tenant)) return refuse(index, Errc::already_exists, "tenant " + c.tenant + " exists");
  Stmt s(db_, "INSERT INTO tenants(name, created_seq) VALUES(?, ?)");
  s.bind(1, c.tenant).bind(2, seq);
  s.step();
  record_change(names_change(index, ChangeEvent::Kind::tenant_created, c.tenant));
  r.tenant = TenantInfo{c.tenant, ChangeSeq{index}};
  return r;
}

ApplyResult CatalogFsm::apply_delete_tenant(std::uint64_t index, const Command& c) {
  ApplyResult r;
  r.seq = ChangeSeq{index};
  if (!tenant_exists(c.tenant)) return refuse(index, Errc::not_found, "no tenant " + c.tenant);
  Stmt has(db_, "SELECT 1 FROM namespaces WHERE tenant = ? LIMIT 1");
  has.bind(1, c.tenant);
  if (has.step())
    return refuse(index, Errc::conflict, "tenant " + c.tenant + " still has namespaces");
  Stmt s(db_, "DELETE FROM tenants WHERE name = ?");
  s.bind(1, c.tenant);
  s.step();
  record_change(names_change(index, ChangeEvent::Kind::tenant_deleted, c.tenant));
  return r;
}

ApplyResult CatalogFsm::apply_create_namespace(std::uint64_t index, const Command& c) {
  ApplyResult r;
  r.seq = ChangeSeq{index};
  const auto seq = static_cast<std::int64_t>(index);
  if (!tenant_exists(c.tenant)) return refuse(index, Errc::not_found, "no tenant " + c.tenant);
  if (namespace_exists(c.tenant, c.ns))
    return refuse(index, Errc::already_exists, "namespace " + c.tenant + "/" + c.ns + " exists");
  Stmt s(db_, "INSERT INTO namespaces(tenant, name, created_seq) VALUES(?, ?, ?)");
  s.bind(1, c.tenant).bind(2, c.ns).bind(3, seq);
  s.step();
  record_change(names_change(index, ChangeEvent::Kind::namespace_created, c.tenant, c.ns));
  r.ns = NamespaceInfo{c.tenant, c.ns, ChangeSeq{index}};
  return r;
}

ApplyResult CatalogFsm::apply_delete_namespace(std::uint64_t index, const Command& c) {
  ApplyResult r;
  r.seq = ChangeSeq{index};
  if (!namespace_exists(c.tenant, c.ns))
    return refuse(index, Errc::not_found, "no namespace " + c.tenant + "/" + c.ns);
  Stmt has(db_, "SELECT 1 FROM streams WHERE tenant = ? AND ns = ? UNION ALL"
                " SELECT 1 FROM caches WHERE tenant = ? AND ns = ? UNION ALL"
                " SELECT 1 FROM counters WHERE tenant = ? AND ns = ? LIMIT 1");
  has.bind(1, c.tenant).bind(2, c.ns).bind(3, c.tenant).bind(4, c.ns).bind(5, c.tenant).bind(6, c.ns);
  if (has.step())
    return refuse(index, Errc::conflict, "namespace " + c.tenant + "/" + c.ns +
                                             " still has streams, caches or counters");
  Stmt s(db_, "DELETE FROM namespaces WHERE tenant = ? AND name = ?");
  s.bind(1, c.tenant).bind(2, c.ns);
  s.step();
  record_change(names_change(index, ChangeEvent::Kind::namespace_deleted, c.tenant, c.ns));
  return r;
}

bool CatalogFsm::tenant_exists(const std::string& tenant) const {
  Stmt s(db_, "SELECT 1 FROM tenants WHERE name = ?");
  s.bind(1, tenant);
  return s.step();
}

bool CatalogFsm::namespace_exists(const std::string& tenant, const std::string& ns) const {
  Stmt s(db_, "SELECT 1 FROM namespaces WHERE tenant = ? AND name = ?");
  s.bind(1, tenant).bind(2, ns);
  return s.step();
}

}  // namespace sluice::raft_meta
