// The plugin boundary of fs-storage: create() builds an FsStorageEngine on the POSIX file
// system; nothing thrown inside ever crosses the boundary (configuration errors become
// *error and nullptr).
#include <exception>
#include <memory>

#include "engine.h"
#include "file_system.h"
#include "sluice/plugin.h"

namespace {

void* create(sluice::PluginHost& host, std::string* error) {
  try {
    auto* engine = new sluice::fs_storage::FsStorageEngine(
        host, std::make_shared<sluice::fs_storage::PosixFileSystem>());
    return static_cast<void*>(static_cast<sluice::StorageEngine*>(engine));
  } catch (const std::exception& e) {
    if (error) *error = std::string("fs-storage: ") + e.what();
  } catch (...) {
    if (error) *error = "fs-storage: unknown error";
  }
  return nullptr;
}

void destroy(void* object) { delete static_cast<sluice::StorageEngine*>(object); }

}  // namespace

SLUICE_PLUGIN(sluice::PluginKind::storage, "fs-storage", &create, &destroy)
