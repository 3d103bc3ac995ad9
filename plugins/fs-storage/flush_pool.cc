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

void FlushPool::stop() {
  {
    std::lock_guard lk(mu_);
    if (stopping_) return;
    stopping_ = true;
    cv_.notify_all();
  }
  for (auto& t : threads_) t.join();
  threads_.clear();
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
