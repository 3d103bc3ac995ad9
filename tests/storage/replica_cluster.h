// The replication manager's test harness (replica_manager_test.cc,
// replica_log_start_test.cc): a model log behind the ReplicaLog seam, an in-process peer
// network, and a cluster of managers with a fake catalog doing the compare-and-set.
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

#include "replica_manager.h"
#include "replication_wire.h"

namespace sluice::fs_storage::replica_test {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

inline bool eventually(const std::function<bool()>& pred,
                       std::chrono::milliseconds limit = 30s) {
  const auto until = Clock::now() + limit;
  while (Clock::now() < until) {
    if (pred()) return true;
    std::this_thread::sleep_for(2ms);
  }
  return pred();
}

// One entry per offset from the log start: (epoch, value). A chunk is 16 bytes per entry:
// epoch, value.
class ModelLog : public ReplicaLog {
 public:
  explicit ModelLog(ShardRef ref) : ref_(std::move(ref)) {}

  const ShardRef& ref() const override { return ref_; }
  Offset log_start() override {
    std::lock_guard lk(mu_);
    return Offset{start_};
  }
  Offset durable_end() override {
    std::lock_guard lk(mu_);
    return Offset{end()};
  }
  Offset written_end() override { return durable_end(); }  // the model syncs as it writes
  Offset high_watermark() override {
    std::lock_guard lk(mu_);
    return hwm_;
  }
  LeaderEpoch leader_epoch() override {
    std::lock_guard lk(mu_);
    return epoch_;
  }
  LeaderEpoch last_data_epoch() override {
    std::lock_guard lk(mu_);
    return entries_.empty() ? LeaderEpoch{0} : entries_.back().first;
  }
  Result<EpochEnd> end_offset_for(LeaderEpoch e) override {
    std::lock_guard lk(mu_);
    if (e >= epoch_) return EpochEnd{epoch_, Offset{end()}};
    LeaderEpoch best{0};
    bool found = false;
    for (auto& [ep, v] : entries_)
      if (ep <= e) best = std::max(best, ep), found = true;
    if (!found) return EpochEnd{LeaderEpoch{0}, Offset{start_}};
    std::uint64_t last = start_;
    for (std::size_t i = 0; i < entries_.size(); ++i)
      if (entries_[i].first <= best) last = start_ + i + 1;
    return EpochEnd{best, Offset{last}};
  }
  Result<void> become_leader(LeaderEpoch e) override { return take_epoch(e, true); }
  bool led_before_reopen(LeaderEpoch) override { return false; }  // the model never reopens
  bool copy_lost() override { return lost_.load(); }
  Result<void> forget_copy_lost() override {
    lost_.store(false);
    return {};
  }
  void set_lost() { lost_.store(true); }  // a copy its disk lost (docs/replication.md)
  bool ever_led() {
    std::lock_guard lk(mu_);
    return ever_led_;
  }
  Result<void> become_follower(LeaderEpoch e, NodeId) override { return take_epoch(e, false); }
  Result<void> fence(LeaderEpoch e) override {
    std::lock_guard lk(mu_);
    if (e > epoch_) epoch_ = e;
    leading_ = false;
    fail_waiters(Error(Errc::fenced, "fenced by epoch " + std::to_string(e.value())));
    return {};
  }
  void set_in_sync(std::size_t members, std::uint32_t min_insync) override {
    std::lock_guard lk(mu_);
    members_ = members;
    min_insync_ = min_insync;
    complete_waiters();
  }
  void hold_high_watermark() override {
    std::lock_guard lk(mu_);
    target_ = hwm_;
  }
  void advance_high_watermark(Offset hwm) override {
    std::lock_guard lk(mu_);
    if (sync_before_lowering_ && hwm < target_) {  // the leader's own sync completes first (below)
      sync_before_lowering_ = false;
      own_sync_at_.reset();
      raise_locked();
    }
    target_ = hwm;  // as the real log: the manager's latest word, which may be lower
    raise_locked();
  }
  // The real log caps the high watermark at its own synced end and raises it toward the
  // manager's target after each of its own syncs, without the manager's lock. Hold that
  // sync at `at`; then let it complete right before the manager next lowers the target (a
  // joiner proposed): the race between the manager reading the high watermark and
  // lowering the target.
  void hold_own_sync_at(Offset at) {
    std::lock_guard lk(mu_);
    own_sync_at_ = at;
  }
  void finish_own_sync_before_the_target_is_lowered() {
    std::lock_guard lk(mu_);
    sync_before_lowering_ = true;
  }
  void finish_own_sync() {
    std::lock_guard lk(mu_);
    own_sync_at_.reset();
    raise_locked();
  }
  // Holds every become_leader / become_follower at its epoch-history save until reopened.
  void block_epoch_changes() {
    std::lock_guard lk(gate_mu_);
    gate_closed_ = true;
  }
  void unblock_epoch_changes() {
    {
      std::lock_guard lk(gate_mu_);
      gate_closed_ = false;
    }
    gate_cv_.notify_all();
  }
  int blocked_epoch_changes() {
    std::lock_guard lk(gate_mu_);
    return gate_waiters_;
  }
  // A follower whose appends fail (it keeps fetching and reporting the same end).
  void refuse_appends(bool on) {
    std::lock_guard lk(mu_);
    refuse_appends_ = on;
  }
  void expire_quorum_waiters(Clock::time_point now) override {
    std::lock_guard lk(mu_);
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->deadline <= now) {
        it->done.set_value(Error(Errc::not_enough_replicas, "quorum timeout"));
        it = waiters_.erase(it);
      } else {
        ++it;
      }
    }
  }
  Result<ReplicaChunk> read_raw(Offset from, std::size_t max_bytes,
                                std::size_t headroom = 0) override {
    std::lock_guard lk(mu_);
    if (from.value() < start_)
      return Error(Errc::offset_out_of_range, "offset " + std::to_string(from.value()) +
                                                  " is before the log start " +
                                                  std::to_string(start_));
    ReplicaChunk c;
    c.bytes.assign(headroom, '\x5a');  // the caller's, like the real log's unspecified bytes
    std::uint64_t i = from.value() - start_;
    if (i < entries_.size()) c.epoch = entries_[i].first;
    // Like the real log: a chunk never spans two epochs.
    while (i < entries_.size() && entries_[i].first == c.epoch &&
           (c.bytes.size() == headroom || c.bytes.size() - headroom + 16 <= max_bytes)) {
      put(c.bytes, entries_[i].first.value());
      put(c.bytes, entries_[i].second);
      ++i;
    }
    c.next = Offset{start_ + i};
    return c;
  }
  void raise_locked() {
    Offset h = std::min(target_, Offset{end()});
    if (own_sync_at_) h = std::min(h, *own_sync_at_);
    if (h > hwm_) hwm_ = h;
    complete_waiters();
  }
  Result<void> append_replica(std::string_view chunk, Offset base, LeaderEpoch, LeaderEpoch) override {
    std::unique_lock lk(mu_);
    if (refuse_appends_) return Error(Errc::storage_failure, "appends refused (test)");
    if (base.value() != end())
      return Error(Errc::conflict, "chunk at " + std::to_string(base.value()) + ", log end " +
                                       std::to_string(end()));
    if (chunk.size() % 16 != 0) return Error(Errc::corrupt_data, "bad chunk");
    for (std::size_t i = 0; i < chunk.size(); i += 16)
      entries_.emplace_back(LeaderEpoch{get(chunk.data() + i)}, get(chunk.data() + i + 8));
    auto ready = take_fired();
    lk.unlock();
    for (auto& cb : ready) cb();
    return {};
  }
  Result<void> truncate_to(Offset end, LeaderEpoch decided_in) override {
    std::lock_guard lk(mu_);
    if (decided_in != epoch_) return Error(Errc::conflict, "decided in another epoch");
    if (end < hwm_) return Error(Errc::conflict, "below the high watermark");
    if (end.value() < start_) return Error(Errc::offset_out_of_range, "below the log start");
    if (end.value() < this->end()) entries_.resize(end.value() - start_);
    ++truncations_;
    lowest_cut_ = std::min(lowest_cut_, end);
    return {};
  }
  Result<void> restart_at(Offset start, LeaderEpoch decided_in) override {
    std::unique_lock lk(mu_);
    if (leading_) return Error(Errc::conflict, "a leader never starts its log over");
    if (decided_in != epoch_) return Error(Errc::conflict, "decided in another epoch");
    if (start.value() < end()) return Error(Errc::conflict, "the log ends beyond " +
                                                             std::to_string(start.value()));
    entries_.clear();
    start_ = start.value();
    hwm_ = start;
    ++restarts_;
    auto ready = take_fired();
    lk.unlock();
    for (auto& cb : ready) cb();
    return {};
  }
  std::uint64_t notify_when_end_beyond(Offset off, std::function<void()> cb) override {
    std::unique_lock lk(mu_);
    if (end() > off.value()) {
      lk.unlock();
      cb();
      return 0;
    }
    notifies_[++next_handle_] = {off, std::move(cb)};
    return next_handle_;
  }
  void cancel_end_notify(std::uint64_t h) override {
    std::lock_guard lk(mu_);
    notifies_.erase(h);
  }

  // A client append on the leader. Returns a future that completes like ack=quorum.
  std::future<Result<Offset>> append(std::uint64_t value,
                                     std::chrono::milliseconds timeout = 30s) {
    std::unique_lock lk(mu_);
    Waiter w;
    auto f = w.done.get_future();
    if (!leading_) {
      w.done.set_value(Error(Errc::not_leader, "not leading"));
      return f;
    }
    entries_.emplace_back(epoch_, value);
    w.end = Offset{end()};
    w.deadline = Clock::now() + timeout;
    waiters_.push_back(std::move(w));
    complete_waiters();
    auto ready = take_fired();
    lk.unlock();
    for (auto& cb : ready) cb();
    return f;
  }
  // Writes entries directly (history set-up for truncation tests).
  void put_entries(LeaderEpoch epoch, std::vector<std::uint64_t> values) {
    std::lock_guard lk(mu_);
    for (auto v : values) entries_.emplace_back(epoch, v);
    if (epoch > epoch_) epoch_ = epoch;
  }
  void set_hwm(Offset o) {
    std::lock_guard lk(mu_);
    hwm_ = o;
  }
  // Retention: entries below `start` (which must not pass the high watermark) are gone.
  void expire_below(Offset start) {
    std::lock_guard lk(mu_);
    ASSERT_LE(start, hwm_) << "retention never passes the high watermark";
    ASSERT_LE(start.value(), end());
    entries_.erase(entries_.begin(),
                   entries_.begin() + static_cast<std::ptrdiff_t>(start.value() - start_));
    start_ = start.value();
  }
  std::vector<std::pair<LeaderEpoch, std::uint64_t>> entries() {
    std::lock_guard lk(mu_);
    return entries_;
  }
  int truncations() {
    std::lock_guard lk(mu_);
    return truncations_;
  }
  Offset lowest_cut() {  // the lowest end any truncation cut to (max: none)
    std::lock_guard lk(mu_);
    return lowest_cut_;
  }
  int restarts() {
    std::lock_guard lk(mu_);
    return restarts_;
  }

 private:
  struct Waiter {
    Offset end;
    Clock::time_point deadline;
    std::promise<Result<Offset>> done;
  };
  std::uint64_t end() const { return start_ + entries_.size(); }  // mu_ held
  static void put(std::string& s, std::uint64_t v) { s.append(reinterpret_cast<char*>(&v), 8); }
  static std::uint64_t get(const char* p) {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
  }
  Result<void> take_epoch(LeaderEpoch e, bool lead) {
    {
      // The real log saves its epoch history here (an fsync); block_epoch_changes() holds
      // it there, as a slow disk would.
      std::unique_lock glk(gate_mu_);
      ++gate_waiters_;
      gate_cv_.wait(glk, [&] { return !gate_closed_; });
      --gate_waiters_;
    }
    std::lock_guard lk(mu_);
    if (e < epoch_)
      return Error(Errc::fenced, "epoch " + std::to_string(e.value()) + " is older than " +
                                     std::to_string(epoch_.value()));
    if (!lead) fail_waiters(Error(Errc::fenced, "now a follower"));
    epoch_ = e;
    leading_ = lead;
    ever_led_ = ever_led_ || lead;
    return {};
  }
  // Like the real log, end notifications run with no lock of the log held (the manager may
  // answer a parked fetch from inside one, reading this log): taken under mu_, run after.
  std::vector<std::function<void()>> take_fired() {
    std::vector<std::function<void()>> ready;
    for (auto it = notifies_.begin(); it != notifies_.end();) {
      if (end() > it->second.first.value()) {
        ready.push_back(std::move(it->second.second));
        it = notifies_.erase(it);
      } else {
        ++it;
      }
    }
    return ready;
  }
  void complete_waiters() {
    if (members_ < min_insync_) return;
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->end <= hwm_) {
        it->done.set_value(it->end);
        it = waiters_.erase(it);
      } else {
        ++it;
      }
    }
  }
  void fail_waiters(const Error& e) {
    for (auto& w : waiters_) w.done.set_value(e);
    waiters_.clear();
  }

  std::mutex mu_;
  ShardRef ref_;
  std::uint64_t start_ = 0;
  std::vector<std::pair<LeaderEpoch, std::uint64_t>> entries_;
  Offset hwm_{0};
  Offset target_{0};
  std::optional<Offset> own_sync_at_;
  bool sync_before_lowering_ = false;
  bool refuse_appends_ = false;
  LeaderEpoch epoch_{0};
  bool leading_ = false;
  bool ever_led_ = false;
  std::atomic<bool> lost_{false};
  std::size_t members_ = 1;
  std::uint32_t min_insync_ = 1;
  std::deque<Waiter> waiters_;
  std::map<std::uint64_t, std::pair<Offset, std::function<void()>>> notifies_;
  std::uint64_t next_handle_ = 0;
  int truncations_ = 0;
  Offset lowest_cut_{UINT64_MAX};
  int restarts_ = 0;
  std::mutex gate_mu_;
  std::condition_variable gate_cv_;
  bool gate_closed_ = false;
  int gate_waiters_ = 0;
};

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

inline bool ready(std::future<Result<Offset>>& f) {
  return f.wait_for(0s) == std::future_status::ready;
}

}  // namespace sluice::fs_storage::replica_test
