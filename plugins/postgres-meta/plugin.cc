// Plugin entry point of postgres-meta (sdk/include/sluice/plugin.h). Nothing throws across
// the boundary: configuration errors become `*error` and a nullptr.
#include <exception>
#include <string>

#include "pg_meta_store.h"
#include "sluice/plugin.h"

namespace {

void* create(sluice::PluginHost& host, std::string* error) {
  try {
    auto* store = new sluice::postgres_meta::PgMetaStore(host);
    return static_cast<void*>(static_cast<sluice::MetadataStore*>(store));
  } catch (const std::exception& e) {
    if (error) *error = std::string("postgres-meta: ") + e.what();
  } catch (...) {
    if (error) *error = "postgres-meta: unknown error in create";
  }
  return nullptr;
}

void destroy(void* object) { delete static_cast<sluice::MetadataStore*>(object); }

}  // namespace

SLUICE_PLUGIN(sluice::PluginKind::metadata, "postgres-meta", &create, &destroy)
