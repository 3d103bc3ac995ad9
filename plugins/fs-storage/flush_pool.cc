#include "flush_pool.h"

#include "replica_manager.h"
#include "shard_log.h"

#include <pthread.h>

namespace sluice::fs_storage {

FlushPool::FlushPool(unsigned threads) {
  for (unsigned i = 0; i < threads; ++i) threads_.emplace_back([this] {
      pthread_setname_np(pthread_self(), "flusher");
      t_notifier_holds_no_manager_lock = true;
      run();
    });
}

FlushPool::~FlushPool() { stop(); }

void FlushPool::schedule(std::shared_ptr<ShardLogImpl> shard) {
  {
    std::lock_guard lk(mu_);
    if (!stopping_) {
      ready_.push_back(std::move(shard));
      cv_.notify_one();
      return;
    }
  }
  shard->flush();  // after stop(): nobody else will
}

void FlushPool::prepare_spare(std::weak_ptr<ShardLogImpl> shard) {
  std::lock_guard lk(mu_);
  if (stopping_) return;
  spares_.push_back(std::move(shard));
  if (!spare_thread_.joinable())
    spare_thread_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "spare-segment");
      run_spares();
    });
  spare_cv_.notify_one();
}

void FlushPool::stop() {
  {
    std::lock_guard lk(mu_);
    if (stopping_) return;
    stopping_ = true;
    spare_stop_.store(true);
    cv_.notify_all();
    spare_cv_.notify_all();
  }
  for (auto& t : threads_) t.join();
  threads_.clear();
  if (spare_thread_.joinable()) spare_thread_.join();
}

void FlushPool::run_spares() {
  std::unique_lock lk(mu_);
  for (;;) {
    spare_cv_.wait(lk, [&] { return stopping_ || !spares_.empty(); });
    if (stopping_) return;
    auto shard = spares_.front().lock();
    spares_.pop_front();
    if (!shard) continue;
    lk.unlock();
    shard->prepare_spare(spare_stop_);
    shard.reset();
    lk.lock();
  }
}

void FlushPool::run() {
  std::unique_lock lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return stopping_ || !ready_.empty(); });
    if (ready_.empty()) return;  // stopping and drained
    auto shard = std::move(ready_.front());
    ready_.pop_front();
    lk.unlock();
    shard->flush();
    shard.reset();
    lk.lock();
  }
}

}  // namespace sluice::fs_storage
