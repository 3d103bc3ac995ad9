// The replication manager's test harness (replica_manager_test.cc,
// replica_manager_log_start_test.cc, replica_lost_copy_test.cc): the model log
// (model_log.h), an in-process peer network, and a cluster of managers with a fake catalog
// doing the compare-and-set.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "model_log.h"
#include "replica_manager.h"
#include "replication_wire.h"

namespace sluice::fs_storage::replica_test {

inline bool eventually(const std::function<bool()>& pred,
                       std::chrono::milliseconds limit = 30s) {
  const auto until = Clock::now() + limit;
  while (Clock::now() < until) {
    if (pred()) return true;
    std::this_thread::sleep_for(2ms);
  }
  return pred();
}

// An in-process network of peer transports. Every delivery runs on the network's thread.
class Network {
 public:
  Network() : thread_([this] { run(); }) {}
  ~Network() { shutdown(); }
  // Stops delivering; whatever is still queued is dropped (its callbacks answer nothing).
  void shutdown() {
    {
      std::lock_guard lk(mu_);
      if (stop_) return;
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    std::lock_guard lk(mu_);
    q_.clear();
  }
  void post(std::function<void()> fn) {
    {
      std::lock_guard lk(mu_);
      q_.push_back(std::move(fn));
    }
    cv_.notify_one();
  }
  std::atomic<bool> cut[8][8] = {};  // cut[a][b]: a cannot reach b

 private:
  void run() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock lk(mu_);
        cv_.wait(lk, [&] { return stop_ || !q_.empty(); });
        if (stop_) return;
        fn = std::move(q_.front());
        q_.pop_front();
      }
      fn();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> q_;
  bool stop_ = false;
  std::thread thread_;
};

class FakeTransport : public PeerTransport {
 public:
  FakeTransport(Network& net, NodeId self, std::string dir)
      : net_(net), self_(self), dir_(std::move(dir)) {}
  NodeId self() const override { return self_; }
  Result<void> handle(PeerMessageType t, PeerHandler h) override {
    std::lock_guard lk(mu_);
    if (handlers_.count(t)) return Error(Errc::conflict, "handled");
    handlers_[t] = std::move(h);
    return {};
  }
  void unhandle(PeerMessageType t) override {
    std::lock_guard lk(mu_);
    handlers_.erase(t);
  }
  void request(NodeId peer, PeerMessageType type, std::string payload,
               std::chrono::milliseconds, PeerCallback cb) override {
    auto* to = peers ? (*peers)[peer.value()] : nullptr;
    if (!to || net_.cut[self_.value()][peer.value()] || net_.cut[peer.value()][self_.value()]) {
      net_.post([cb] { cb(Error(Errc::unavailable, "unreachable")); });
      return;
    }
    PeerIdentity from{self_, dir_};
    net_.post([to, from, type, payload = std::move(payload), cb]() mutable {
      PeerHandler h;
      {
        std::lock_guard lk(to->mu_);
        auto it = to->handlers_.find(type);
        if (it != to->handlers_.end()) h = it->second;
      }
      if (!h) return cb(Error(Errc::not_supported, "no handler"));
      h(from, std::move(payload), PeerResponder([cb](Result<std::string> r) { cb(std::move(r)); }));
    });
  }
  void set_dir(std::string d) { dir_ = std::move(d); }
  std::map<std::uint32_t, FakeTransport*>* peers = nullptr;

 private:
  Network& net_;
  NodeId self_;
  std::string dir_;
  std::mutex mu_;
  std::map<PeerMessageType, PeerHandler> handlers_;
};

inline ShardRef shard_ref(std::uint64_t inc = 7) {
  return ShardRef{StreamKey{"t", "n", "s"}, ShardIndex{0}, Incarnation{inc}};
}

inline std::string dir_of(std::uint32_t b) { return "dir-" + std::to_string(b); }

// A cluster of brokers 1..n holding one shard, with a fake catalog doing the compare-and-set.
class Cluster {
 public:
  explicit Cluster(std::uint32_t n, ReplicaOptions opts = fast_options()) : opts_(opts) {
    for (std::uint32_t b = 1; b <= n; ++b) {
      dirs_[b] = dir_of(b);
      transports_[b] = std::make_unique<FakeTransport>(net_, NodeId{b}, dirs_[b]);
      raw_[b] = transports_[b].get();
      transports_[b]->peers = &raw_;
      logs_[b] = std::make_shared<ModelLog>(shard_ref());
      start_manager(b);
    }
    catalog_.replicas.clear();
    for (std::uint32_t b = 1; b <= n; ++b) {
      catalog_.replicas.push_back(NodeId{b});
      catalog_.in_sync.push_back(InSyncReplica{NodeId{b}, dirs_[b]});
    }
    catalog_.leader = NodeId{1};
    catalog_.leader_epoch = LeaderEpoch{1};
    catalog_.version = ShardVersion{1};
    catalog_.min_insync = (n / 2) + 1;
  }
  ~Cluster() {
    for (auto& [b, m] : managers_) m->stop();
    net_.shutdown();
  }

  static ReplicaOptions fast_options() {
    ReplicaOptions o;
    o.max_lag = 400ms;
    o.fetch_wait = 50ms;
    o.request_timeout = 2s;
    o.retry_backoff = 10ms;
    o.check_interval = 0ms;  // the tests call check_now()
    return o;
  }

  void start_manager(std::uint32_t b) {
    auto update = [this](const ShardUpdate& u) -> Result<Assignment> {
      {
        // A metadata store that does not answer (block_updates): the call waits.
        std::unique_lock lk(cat_mu_);
        ++update_calls_;
        cat_cv_.notify_all();
        cat_cv_.wait(lk, [&] { return !block_updates_; });
      }
      std::lock_guard lk(cat_mu_);
      if (u.incarnation != shard_ref().incarnation) return Error(Errc::stale_route, "other");
      if (u.expected_version != catalog_.version)
        return Error(Errc::conflict, "version " + std::to_string(catalog_.version.value()));
      catalog_.leader = u.leader;
      catalog_.leader_epoch = u.leader_epoch;
      catalog_.in_sync = u.in_sync;
      catalog_.version = ShardVersion{catalog_.version.value() + 1};
      ++updates_;
      if (lose_answers_)  // applied, but the answer never reaches the leader
        return Error(Errc::timeout, "the catalog's answer was lost", Outcome::uncertain);
      Assignment a;
      a.key = u.key;
      a.shard = u.shard;
      a.incarnation = u.incarnation;
      a.leader = catalog_.leader;
      a.replicas = catalog_.replicas;
      a.leader_epoch = catalog_.leader_epoch;
      a.in_sync = catalog_.in_sync;
      a.version = catalog_.version;
      return a;
    };
    auto logger = [b](LogLevel, std::string_view m) {
      std::fprintf(stderr, "[broker %u] %.*s\n", b, static_cast<int>(m.size()), m.data());
    };
    managers_[b] = std::make_unique<ReplicaManager>(*transports_[b], NodeId{b}, dirs_[b],
                                                    update, logger, opts_);
    ASSERT_TRUE(managers_[b]->start());
  }

  // Tells `brokers` (default: all) the catalog's current word.
  void tell(std::vector<std::uint32_t> brokers = {}) {
    if (brokers.empty())
      for (auto& [b, _] : managers_) brokers.push_back(b);
    ReplicaAssignment ra;
    {
      std::lock_guard lk(cat_mu_);
      ra = catalog_;
    }
    for (auto b : brokers) (void)managers_[b]->assign(logs_[b], ra);
  }
  ReplicaAssignment catalog() {
    std::lock_guard lk(cat_mu_);
    return catalog_;
  }
  void set_catalog(const std::function<void(ReplicaAssignment&)>& fn) {
    std::lock_guard lk(cat_mu_);
    fn(catalog_);
    catalog_.version = ShardVersion{catalog_.version.value() + 1};
  }

  Network net_;
  ReplicaOptions opts_;
  std::map<std::uint32_t, std::string> dirs_;
  std::map<std::uint32_t, std::unique_ptr<FakeTransport>> transports_;
  std::map<std::uint32_t, FakeTransport*> raw_;
  std::map<std::uint32_t, std::shared_ptr<ModelLog>> logs_;
  std::map<std::uint32_t, std::unique_ptr<ReplicaManager>> managers_;
  void block_updates(bool block) {
    std::lock_guard lk(cat_mu_);
    block_updates_ = block;
    cat_cv_.notify_all();
  }
  int update_calls() {
    std::lock_guard lk(cat_mu_);
    return update_calls_;
  }

  std::mutex cat_mu_;
  std::condition_variable cat_cv_;
  bool block_updates_ = false;  // under cat_mu_
  int update_calls_ = 0;        // under cat_mu_: calls made, answered or not
  ReplicaAssignment catalog_;
  int updates_ = 0;
  bool lose_answers_ = false;  // under cat_mu_: update_shard applies, then answers timeout
};

// The model log's entries from `from` up to `to` (exclusive).
inline std::vector<std::uint64_t> values(std::uint64_t from, std::uint64_t to) {
  std::vector<std::uint64_t> v(to - from);
  for (std::uint64_t i = from; i < to; ++i) v[i - from] = i;
  return v;
}

inline bool ready(std::future<Result<Offset>>& f) {
  return f.wait_for(0s) == std::future_status::ready;
}

}  // namespace sluice::fs_storage::replica_test
