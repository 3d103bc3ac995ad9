// memory-storage against the SDK's storage conformance kit (docs/plugin-sdk.md "Checking
// a storage engine"). The opt-outs are exactly what memory_engine.h says it leaves out;
// the kit checks that each is answered with not_supported and reports those tests SKIPPED.
// There is no crash or I/O-failure hook: nothing is written anywhere.
#include "memory_engine.h"
#include "sluice/testing/storage_conformance.h"

namespace {

sluice::testing::StorageConformanceParams memory_storage_params() {
  sluice::testing::StorageConformanceParams p;
  p.name = "memory-storage";
  p.open = [](sluice::PluginHost& host, const std::string& /*dir*/) {
    return memory_storage::make_memory_engine(host);
  };
  p.opt_outs.no_restart_persistence = true;  // memory only
  p.opt_outs.no_groups = true;
  return p;
}

INSTANTIATE_STORAGE_CONFORMANCE(MemoryStorage, memory_storage_params());

}  // namespace
