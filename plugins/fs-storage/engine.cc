#include "engine.h"

#include <chrono>

#include "layout.h"
#include "recovery.h"

namespace sluice::fs_storage {

namespace {
constexpr std::string_view kComponent = "fs-storage";

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}
}  // namespace

FsStorageEngine::FsStorageEngine(PluginHost& host, std::shared_ptr<FileSystem> fs)
    : FsStorageEngine(host, std::move(fs), Options::from_host(host)) {}

FsStorageEngine::FsStorageEngine(PluginHost& host, std::shared_ptr<FileSystem> fs, Options opts)
    : host_(host), fs_(std::move(fs)), opts_(std::move(opts)), pool_(opts_.flush_threads) {
  if (opts_.fsync == FsyncPolicy::never)
    host_.log(LogLevel::warn, kComponent,
              "storage.fsync=never: acknowledgements do NOT imply durability (benchmarks only)");
  if (opts_.retention_interval_ms > 0)
    retention_thread_ = std::thread([this] { retention_loop(); });
}

FsStorageEngine::~FsStorageEngine() { shutdown(); }

Result<std::string> FsStorageEngine::shard_directory(const ShardRef& ref) const {
  return shard_dir(opts_.dir, ref);
}

// Creates every missing component of `path`; each new directory's parent is fsynced so
// the entry survives a crash.
Result<void> FsStorageEngine::make_dirs(const std::string& path) {
  std::size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    const std::string prefix = path.substr(0, pos);
    if (prefix.empty()) continue;
    auto created = fs_->mkdir(prefix);
    if (!created) return created.error();
    if (*created) {
      const auto slash = prefix.find_last_of('/');
      const std::string parent = slash == 0 ? "/" : prefix.substr(0, slash);
      if (slash != std::string::npos)
        if (auto r = fs_->sync_dir(parent); !r) return r;
    }
  }
  return {};
}

Result<std::shared_ptr<ShardLog>> FsStorageEngine::open_shard(const ShardRef& ref,
                                                              const StreamSpec& spec) {
  auto dir = shard_dir(opts_.dir, ref);
  if (!dir) return dir.error();
  std::lock_guard lk(mu_);
  if (shut_down_) return Error(Errc::unavailable, "storage engine is shut down");
  if (auto it = shards_.find(ref); it != shards_.end()) {
    it->second->set_retention(spec.retention);
    return std::shared_ptr<ShardLog>(it->second);
  }
  const std::string ldir = log_dir(*dir);
  if (auto r = make_dirs(ldir); !r) return r.error();
  auto recovered = recover_log(*fs_, host_, opts_, ldir, ref.incarnation);
  if (!recovered) {
    host_.log(LogLevel::error, kComponent,
              "cannot open shard " + ref.to_string() + ": " + recovered.error().message);
    return recovered.error();
  }
  auto shard = std::make_shared<ShardLogImpl>(ref, spec.retention, *dir, opts_, fs_, host_, pool_,
                                              std::move(recovered).value());
  shards_.emplace(ref, shard);
  return std::shared_ptr<ShardLog>(shard);
}

void FsStorageEngine::close_shard(const ShardRef& ref) {
  std::shared_ptr<ShardLogImpl> shard;
  {
    std::lock_guard lk(mu_);
    auto it = shards_.find(ref);
    if (it == shards_.end()) return;
    shard = std::move(it->second);
    shards_.erase(it);
  }
  shard->close();
}

void FsStorageEngine::shutdown() {
  {
    std::lock_guard lk(retention_mu_);
    stop_retention_ = true;
    retention_cv_.notify_all();
  }
  if (retention_thread_.joinable()) retention_thread_.join();
  std::map<ShardRef, std::shared_ptr<ShardLogImpl>> shards;
  {
    std::lock_guard lk(mu_);
    shut_down_ = true;
    shards.swap(shards_);
  }
  for (auto& [ref, shard] : shards) shard->close();  // drains: every callback completes
  pool_.stop();
}

void FsStorageEngine::run_retention_once() { run_retention_once(now_ms()); }

void FsStorageEngine::run_retention_once(std::int64_t now) {
  std::vector<std::shared_ptr<ShardLogImpl>> shards;
  {
    std::lock_guard lk(mu_);
    for (auto& [ref, s] : shards_) shards.push_back(s);
  }
  for (auto& s : shards) s->apply_retention(now);
}

void FsStorageEngine::retention_loop() {
  std::unique_lock lk(retention_mu_);
  for (;;) {
    retention_cv_.wait_for(lk, std::chrono::milliseconds(opts_.retention_interval_ms),
                           [&] { return stop_retention_; });
    if (stop_retention_) return;
    lk.unlock();
    run_retention_once();
    lk.lock();
  }
}

}  // namespace sluice::fs_storage
