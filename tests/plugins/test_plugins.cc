// Plugins that are wrong on purpose, one per failure the loader must report clearly.
// Built several times with a different TEST_PLUGIN_VARIANT each.
#include <string>

#include "sluice/host.h"
#include "sluice/plugin.h"
#include "sluice/storage.h"

namespace {

// A storage engine that only proves its lifetime: it logs from its destructor, which
// must run while the library is still loaded.
class LifetimeEngine final : public sluice::StorageEngine {
 public:
  explicit LifetimeEngine(sluice::PluginHost& h) : host_(h) {}
  ~LifetimeEngine() override { host_.log(sluice::LogLevel::info, "test-plugin", "engine destroyed"); }
  sluice::Result<std::shared_ptr<sluice::ShardLog>> open_shard(const sluice::ShardRef&,
                                                               const sluice::StreamSpec&) override {
    return sluice::Error(sluice::Errc::unavailable, "test engine holds no data");
  }
  void close_shard(const sluice::ShardRef&) override {}
  void shutdown() override {}
  sluice::Result<std::uint32_t> delete_incarnations(const sluice::StreamKey&, sluice::Incarnation) override {
    return sluice::Error(sluice::Errc::unavailable, "test engine holds no data");
  }
  sluice::Result<std::vector<sluice::ShardRef>> list_on_disk() override {
    return std::vector<sluice::ShardRef>{};
  }

 private:
  sluice::PluginHost& host_;
};

[[maybe_unused]] void* create(sluice::PluginHost& host, std::string* error) {
#if TEST_PLUGIN_VARIANT == 4
  *error = "refusing on purpose: storage.dir is not writable";
  return nullptr;
#else
  return static_cast<void*>(static_cast<sluice::StorageEngine*>(new LifetimeEngine(host)));
#endif
}
[[maybe_unused]] void destroy(void* p) { delete static_cast<sluice::StorageEngine*>(p); }

}  // namespace

#if TEST_PLUGIN_VARIANT == 0
// A correct storage plugin.
SLUICE_PLUGIN(sluice::PluginKind::storage, "test-good", &create, &destroy)
#elif TEST_PLUGIN_VARIANT == 1
// An api plugin: loading it as storage is the "wrong kind" case.
SLUICE_PLUGIN(sluice::PluginKind::api, "test-api-kind", &create, &destroy)
#elif TEST_PLUGIN_VARIANT == 2
// A plugin built against a future ABI.
extern "C" BOOST_SYMBOL_EXPORT const sluice_plugin_descriptor* sluice_plugin_entry() {
  static const sluice_plugin_descriptor d = {999, sizeof(sluice_plugin_descriptor), "9.0.0",
                                             SLUICE_COMPILER_ID, SLUICE_STDLIB_ID,
                                             static_cast<std::uint32_t>(sluice::PluginKind::storage),
                                             "test-bad-abi", &create, &destroy};
  return &d;
}
#elif TEST_PLUGIN_VARIANT == 3
// Same ABI number, other standard library: C++ objects would not be layout-compatible.
extern "C" BOOST_SYMBOL_EXPORT const sluice_plugin_descriptor* sluice_plugin_entry() {
  static const sluice_plugin_descriptor d = {
      sluice::kPluginAbiVersion, sizeof(sluice_plugin_descriptor), sluice::kSdkVersion,
      SLUICE_COMPILER_ID, "libc++ 15000", static_cast<std::uint32_t>(sluice::PluginKind::storage),
      "test-bad-stdlib", &create, &destroy};
  return &d;
}
#elif TEST_PLUGIN_VARIANT == 4
SLUICE_PLUGIN(sluice::PluginKind::storage, "test-create-fails", &create, &destroy)
#elif TEST_PLUGIN_VARIANT == 5
// A shared library that is not a Sluice plugin at all.
extern "C" BOOST_SYMBOL_EXPORT int not_a_plugin() { return 42; }
#endif
