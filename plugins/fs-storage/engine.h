// FsStorageEngine: the fs-storage implementation of sluice::StorageEngine.
//
// Threads owned by one engine:
//   * FlushPool: storage.flush_threads flushers (default 1) doing all writes and syncs.
//   * retention: one thread, every storage.retention_interval_ms (off if <= 0), calls
//     apply_retention on every open shard; tests call run_retention_once() instead.
//
// Ownership: the engine owns the map of open shards (shared_ptr; callers may hold theirs
// longer, after close they answer unavailable). `host` must outlive the engine; `fs` is
// shared with every shard.
//
// Errors: the constructor throws std::invalid_argument for bad configuration (a startup
// boundary). Everything else returns Result.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "file_system.h"
#include "flush_pool.h"
#include "options.h"
#include "shard_log.h"
#include "sluice/host.h"
#include "sluice/storage.h"

namespace sluice::fs_storage {

class FsStorageEngine final : public StorageEngine {
 public:
  // Reads Options::from_host(host).
  FsStorageEngine(PluginHost& host, std::shared_ptr<FileSystem> fs);
  FsStorageEngine(PluginHost& host, std::shared_ptr<FileSystem> fs, Options opts);
  ~FsStorageEngine() override;  // shutdown()

  Result<std::shared_ptr<ShardLog>> open_shard(const ShardRef& ref, const StreamSpec& spec) override;
  void close_shard(const ShardRef& ref) override;
  void shutdown() override;

  // Applies retention to every open shard now, on the calling thread.
  void run_retention_once();
  // Same, with an explicit clock (ms since epoch) for tests of age retention.
  void run_retention_once(std::int64_t now_ms);

  const Options& options() const { return opts_; }
  // The directory of a shard incarnation (invalid_name if a name fails validation).
  Result<std::string> shard_directory(const ShardRef& ref) const;

 private:
  Result<void> make_dirs(const std::string& path);
  void retention_loop();

  PluginHost& host_;
  const std::shared_ptr<FileSystem> fs_;
  const Options opts_;
  FlushPool pool_;

  std::mutex mu_;  // shards_, shut_down_; held across recovery in open_shard
  std::map<ShardRef, std::shared_ptr<ShardLogImpl>> shards_;
  bool shut_down_ = false;

  std::mutex retention_mu_;
  std::condition_variable retention_cv_;
  bool stop_retention_ = false;
  std::thread retention_thread_;
};

}  // namespace sluice::fs_storage
