// Long polls waiting on one shard (http.max_waiters_per_shard, README "Limits"): a fetch
// that would park beyond the limit is answered 503 at once instead, so one shard's
// followers of the tail cannot pile up without bound.
//
// Thread-safety: all methods from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

#include "sluice/types.h"

namespace sluice::http_api {

class ShardWaiters {
 public:
  explicit ShardWaiters(std::size_t max) : max_(max) {}

  // Counts one more waiter on the shard; false (nothing counted) at the limit.
  bool try_add(const StreamKey& key, ShardIndex shard) {
    std::lock_guard lk(mu_);
    auto& n = n_[{key, shard.value()}];
    if (n >= max_) return false;
    ++n;
    return true;
  }
  // A waiter counted by try_add is done.
  void remove(const StreamKey& key, ShardIndex shard) {
    std::lock_guard lk(mu_);
    auto it = n_.find({key, shard.value()});
    if (it != n_.end() && --it->second == 0) n_.erase(it);
  }
  std::size_t max() const { return max_; }

 private:
  std::mutex mu_;
  std::map<std::pair<StreamKey, std::uint32_t>, std::size_t> n_;
  const std::size_t max_;
};

}  // namespace sluice::http_api
