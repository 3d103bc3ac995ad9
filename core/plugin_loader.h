// Loads plugins with Boost.DLL and checks their descriptor before touching anything else.
//
//   load("fs-storage", PluginKind::storage)
//     1. file  <plugins.dir>/libsluice-fs-storage.so must exist and load;
//     2. it must export `sluice_plugin_entry`;
//     3. abi_version == kPluginAbiVersion, struct_size matches;
//     4. compiler and standard-library identity equal the host's;
//     5. kind equals the expected kind;
//     6. create() returns an object or an error string.
// Each loaded plugin is logged (INFO, component "plugins"): name, kind, SDK version, file.
// Any failure is a PluginError whose what() is one line naming the file and the reason.
//
// Ownership: the returned object's deleter calls the plugin's destroy() and then drops
// its reference to the library, so no object outlives the code that implements it.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

#include "sluice/plugin.h"

namespace sluice::core {

class PluginError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct LoadedPluginInfo {
  std::string name;
  std::string path;
  std::string sdk_version;
};

class PluginLoader {
 public:
  explicit PluginLoader(std::filesystem::path dir) : dir_(std::move(dir)) {}

  std::filesystem::path path_for(const std::string& name) const {
    return dir_ / ("libsluice-" + name + ".so");
  }

  // T is the kind's interface (StorageEngine, MetadataStore, ApiServer).
  template <class T>
  std::shared_ptr<T> load(const std::string& name, PluginKind kind, PluginHost& host,
                          LoadedPluginInfo* info = nullptr) {
    auto [obj, del] = load_raw(name, kind, host, info);
    return std::shared_ptr<T>(static_cast<T*>(obj), del);
  }

 private:
  using Deleter = std::function<void(void*)>;
  std::pair<void*, std::function<void(void*)>> load_raw(const std::string& name, PluginKind kind,
                                                        PluginHost& host, LoadedPluginInfo* info);
  std::filesystem::path dir_;
};

}  // namespace sluice::core
