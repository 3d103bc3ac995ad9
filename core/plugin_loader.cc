#include "plugin_loader.h"

#include <boost/dll/shared_library.hpp>

#include "sluice/host.h"

namespace sluice::core {

std::pair<void*, std::function<void(void*)>> PluginLoader::load_raw(const std::string& name,
                                                                    PluginKind kind,
                                                                    PluginHost& host,
                                                                    LoadedPluginInfo* info) {
  const auto path = path_for(name);
  const std::string file = path.string();
  auto fail = [&](const std::string& why) -> PluginError {
    return PluginError("plugin " + file + ": " + why);
  };
  if (name.empty() || name.find('/') != std::string::npos)
    throw PluginError("plugin name '" + name + "' is not a plain name");
  std::error_code fec;
  if (!std::filesystem::exists(path, fec))
    throw fail("not found (expected plugin '" + name + "' of kind " +
               std::string(to_string(kind)) + "; check plugins.dir)");

  auto lib = std::make_shared<boost::dll::shared_library>();
  boost::dll::fs::error_code ec;
  lib->load(boost::dll::fs::path(file), boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local, ec);
  if (ec) throw fail("cannot load: " + ec.message());
  if (!lib->has(SLUICE_PLUGIN_ENTRY_SYMBOL))
    throw fail("not a Sluice plugin: it does not export " SLUICE_PLUGIN_ENTRY_SYMBOL);
  auto entry = lib->get<const sluice_plugin_descriptor*()>(SLUICE_PLUGIN_ENTRY_SYMBOL);
  const sluice_plugin_descriptor* d = entry();
  if (!d) throw fail("entry point returned no descriptor");
  if (d->abi_version != kPluginAbiVersion)
    throw fail("ABI mismatch: plugin has ABI version " + std::to_string(d->abi_version) +
               ", this sluiced needs " + std::to_string(kPluginAbiVersion) +
               "; rebuild the plugin against SDK " + kSdkVersion);
  if (d->struct_size != sizeof(sluice_plugin_descriptor))
    throw fail("ABI mismatch: descriptor size " + std::to_string(d->struct_size) + ", expected " +
               std::to_string(sizeof(sluice_plugin_descriptor)));
  if (std::string(d->compiler_id ? d->compiler_id : "") != SLUICE_COMPILER_ID)
    throw fail(std::string("ABI mismatch: built with compiler '") + (d->compiler_id ? d->compiler_id : "?") +
               "', this sluiced with '" SLUICE_COMPILER_ID "'");
  if (std::string(d->stdlib_id ? d->stdlib_id : "") != SLUICE_STDLIB_ID)
    throw fail(std::string("ABI mismatch: built with standard library '") +
               (d->stdlib_id ? d->stdlib_id : "?") + "', this sluiced with '" SLUICE_STDLIB_ID "'");
  if (d->kind != static_cast<std::uint32_t>(kind))
    throw fail("wrong kind: '" + std::string(d->name ? d->name : "?") + "' is of kind " +
               std::string(to_string(static_cast<PluginKind>(d->kind))) + ", but kind " +
               std::string(to_string(kind)) + " is needed here");
  if (!d->create || !d->destroy) throw fail("descriptor lacks create/destroy");

  std::string error;
  void* obj = d->create(host, &error);
  if (!obj) throw fail("create failed: " + (error.empty() ? std::string("no reason given") : error));
  const LoadedPluginInfo loaded{d->name ? d->name : name, file, d->sdk_version ? d->sdk_version : ""};
  host.log(LogLevel::info, "plugins",
           "loaded plugin " + loaded.name + " (kind " + std::string(to_string(kind)) + ", SDK " +
               (loaded.sdk_version.empty() ? std::string("unknown") : loaded.sdk_version) + ") from " + file);
  if (info) *info = loaded;
  auto destroy = d->destroy;
  // The deleter owns the library: destroy runs while the code is still mapped.
  return {obj, [lib, destroy](void* p) mutable {
            destroy(p);
            lib.reset();
          }};
}

}  // namespace sluice::core
