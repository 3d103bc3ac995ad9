// The model log for the replication manager's tests (replica_cluster.h): one replica's
// log behind the ReplicaLog seam, in memory, with the hooks the tests steer it by.
#pragma once

#include <atomic>
#include <chrono>
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

namespace sluice::fs_storage::replica_test {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

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
  bool copy_lost() override { return owner_ ? owner_->copy_lost() : lost_.load(); }
  Result<void> forget_copy_lost() override {
    if (owner_) return owner_->forget_copy_lost();
    lost_.store(false);
    return {};
  }
  void set_lost() { lost_.store(true); }  // a copy its disk lost (docs/replication.md)
  // A group op log: its lost-copy mark is its data log's (as in fs-storage).
  void group_log_of(std::shared_ptr<ModelLog> data) {
    data->has_group_ = true;
    owner_ = std::move(data);
  }
  bool has_group_log() override { return has_group_; }
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
  bool own_sync_held() {
    std::lock_guard lk(mu_);
    return own_sync_at_.has_value();
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
  // A follower that takes chunks below `at` only (nullopt: all).
  void refuse_appends_from(std::optional<Offset> at) {
    std::lock_guard lk(mu_);
    refuse_from_ = at;
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
    if (refuse_appends_ || (refuse_from_ && base >= *refuse_from_))
      return Error(Errc::storage_failure, "appends refused (test)");
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
  std::optional<Offset> refuse_from_;
  std::shared_ptr<ModelLog> owner_;  // set before the log is shared (group_log_of)
  bool has_group_ = false;           // likewise
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

}  // namespace sluice::fs_storage::replica_test
