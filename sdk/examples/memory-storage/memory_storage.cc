// The plugin boundary of memory-storage (sluice/plugin.h): create() builds the engine of
// memory_engine.h; nothing thrown inside crosses the boundary.
#include <exception>
#include <string>

#include "memory_engine.h"
#include "sluice/plugin.h"

namespace {

void* create(sluice::PluginHost& host, std::string* error) {
  try {
    return static_cast<void*>(memory_storage::make_memory_engine(host).release());
  } catch (const std::exception& e) {
    *error = e.what();
    return nullptr;
  }
}
void destroy(void* p) { delete static_cast<sluice::StorageEngine*>(p); }

}  // namespace

SLUICE_PLUGIN(sluice::PluginKind::storage, "memory-storage", &create, &destroy)
