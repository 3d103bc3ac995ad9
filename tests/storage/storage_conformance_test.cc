// fs-storage against the storage conformance kit (sdk/conformance, docs/plugin-sdk.md
// "Checking a storage engine"), on the fault-injection file system: the crash hook drops
// every unsynced byte (or, in FsStorageTornCrash, keeps a torn part of them plus garbage),
// the I/O hook fails every fdatasync. Segments are preallocated, as on a node, except in
// FsStoragePlainSegments.
#include <map>
#include <memory>
#include <mutex>

#include "engine.h"
#include "fault_file_system.h"
#include "sluice/testing/storage_conformance.h"

namespace sluice::fs_storage::testing {
namespace {

// One fault file system per test directory: the hooks name the directory.
class FaultFileSystems {
 public:
  std::shared_ptr<FaultFileSystem> at(const std::string& dir) {
    std::lock_guard lk(mu_);
    auto& fs = by_dir_[dir];
    if (!fs) fs = std::make_shared<FaultFileSystem>();
    return fs;
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<FaultFileSystem>> by_dir_;
};

FaultFileSystems& file_systems() {
  static FaultFileSystems f;
  return f;
}

sluice::testing::StorageConformanceParams fs_storage_params(unsigned flush_threads,
                                                            CrashOptions crash = {},
                                                            bool preallocate = true) {
  sluice::testing::StorageConformanceParams p;
  p.name = "fs-storage";
  p.config = {{"storage.retention_interval_ms", "0"},
              {"storage.segment_bytes", "4096"},
              {"storage.flush_threads", std::to_string(flush_threads)},
              {"storage.preallocate_segments", preallocate ? "true" : "false"}};
  p.open = [](PluginHost& host, const std::string& dir) {
    auto fs = file_systems().at(dir);
    fs->restart();  // a new process: what is on disk now counts as durable
    return std::unique_ptr<StorageEngine>(new FsStorageEngine(host, fs));
  };
  p.crash = [crash](const std::string& dir) { file_systems().at(dir)->crash(1, crash); };
  p.fail_io = [](const std::string& dir, bool fail) { file_systems().at(dir)->fail_syncs(fail); };
  return p;
}

INSTANTIATE_STORAGE_CONFORMANCE(FsStorage, fs_storage_params(1));
INSTANTIATE_STORAGE_CONFORMANCE(FsStorageFlushThreads, fs_storage_params(4));
// Segments that grow as they are written (a node's default preallocates them).
INSTANTIATE_STORAGE_CONFORMANCE(FsStoragePlainSegments, fs_storage_params(1, {}, false));
// A power loss that keeps a torn prefix of the unsynced bytes and adds garbage after it.
INSTANTIATE_STORAGE_CONFORMANCE(FsStorageTornCrash,
                                fs_storage_params(1, CrashOptions{.keep_unsynced_prefix = true,
                                                                  .append_garbage = true}));

}  // namespace
}  // namespace sluice::fs_storage::testing
