#include "replica_manager_internal.h"

#include <pthread.h>
#include <algorithm>
#include <optional>
#include <utility>

namespace sluice::fs_storage {

using namespace std::chrono_literals;

ReplicaManager::ReplicaManager(PeerTransport& transport, NodeId self, std::string directory_id,
                               UpdateShard update_shard, Logger log, ReplicaOptions opts)
    : transport_(transport),
      self_(self),
      directory_id_(std::move(directory_id)),
      update_shard_(std::move(update_shard)),
      log_(std::move(log)),
      opts_(opts),
      exec_(std::make_shared<Exec>()) {
  if (opts_.workers == 0) opts_.workers = 1;
  if (opts_.check_interval.count() < 0)
    opts_.check_interval = std::clamp<std::chrono::milliseconds>(opts_.max_lag / 4, 10ms, 1000ms);
}

ReplicaManager::~ReplicaManager() { stop(); }

Result<void> ReplicaManager::start() {
  if (started_) return {};
  auto on_fetch = [this](const PeerIdentity& from, std::string payload, PeerResponder respond) {
    this->on_fetch(from, std::move(payload), std::move(respond));
  };
  auto on_epoch_end = [this](const PeerIdentity& from, std::string payload,
                             PeerResponder respond) {
    this->on_epoch_end(from, std::move(payload), std::move(respond));
  };
  if (auto r = transport_.handle(kReplicaFetch, on_fetch); !r) return r.error();
  if (auto r = transport_.handle(kReplicaEpochEnd, on_epoch_end); !r) {
    transport_.unhandle(kReplicaFetch);
    return r.error();
  }
  started_ = true;
  for (unsigned i = 0; i < opts_.workers; ++i) workers_.emplace_back([this] {
      pthread_setname_np(pthread_self(), "repl-worker");
      worker_loop();
    });
  timer_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "repl-timer");
    timer_loop();
  });
  catalog_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "repl-catalog");
    catalog_loop();
  });
  return {};
}

void ReplicaManager::stop() {
  if (!started_) return;
  started_ = false;
  transport_.unhandle(kReplicaFetch);
  transport_.unhandle(kReplicaEpochEnd);
  std::deque<std::function<void()>> queued;
  std::map<TimerKey, std::function<void()>> timers;
  {
    std::lock_guard lk(exec_->mu);
    exec_->stopping = true;
  }
  exec_->q_cv.notify_all();
  exec_->timer_cv.notify_all();
  exec_->catalog_cv.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
  if (timer_.joinable()) timer_.join();
  if (catalog_.joinable()) catalog_.join();
  std::deque<std::function<void()>> catalog_queued;
  {
    std::lock_guard lk(exec_->mu);
    queued.swap(exec_->queue);
    timers.swap(exec_->timers);
    catalog_queued.swap(exec_->catalog_queue);
    exec_->check_queued = exec_->expiry_queued = false;
  }
  queued.clear();  // their responders answer unavailable
  catalog_queued.clear();
  timers.clear();
  std::map<Key, std::shared_ptr<Shard>> shards;
  {
    std::lock_guard lk(mu_);
    shards.swap(shards_);
  }
  for (auto& [_, s] : shards) {
    std::lock_guard lk(s->mu);
    s->removed = true;
    ++s->gen;
    drop_parked(*s);
  }
}

void ReplicaManager::post(std::function<void()> fn) { exec_->post(std::move(fn)); }
void ReplicaManager::post_catalog(std::function<void()> fn, bool front) {
  exec_->post_catalog(std::move(fn), front);
}

void ReplicaManager::queue_check_pass() {
  std::vector<std::shared_ptr<Shard>> shards;
  {
    std::lock_guard lk(mu_);
    for (auto& [_, s] : shards_) shards.push_back(s);
  }
  for (auto& s : shards) post_catalog([this, s] { check_shard(s, Clock::now()); });
  post_catalog([this] {
    std::lock_guard lk(exec_->mu);
    exec_->check_queued = false;
  });
}

void ReplicaManager::catalog_loop() {
  auto& ex = *exec_;
  for (;;) {
    std::function<void()> fn;
    {
      std::unique_lock lk(ex.mu);
      ex.catalog_cv.wait(lk, [&] { return ex.stopping || !ex.catalog_queue.empty(); });
      if (ex.stopping) return;
      fn = std::move(ex.catalog_queue.front());
      ex.catalog_queue.pop_front();
    }
    fn();
  }
}

ReplicaManager::TimerKey ReplicaManager::after(std::chrono::milliseconds delay,
                                               std::function<void()> fn) {
  bool earliest = false;
  TimerKey key;
  {
    std::lock_guard lk(exec_->mu);
    key = TimerKey(Clock::now() + delay, ++exec_->next_timer);
    if (exec_->stopping) return key;
    const auto it = exec_->timers.emplace(key, std::move(fn)).first;
    earliest = it == exec_->timers.begin();
  }
  // The timer thread sleeps until the earliest timer (or the next check): only a new
  // earliest one needs to wake it. Every parked fetch adds a timer, so this saves a
  // wake-up per fetch.
  if (earliest) exec_->timer_cv.notify_one();
  return key;
}

void ReplicaManager::cancel_timer(const TimerKey& key) {
  std::function<void()> dropped;  // destroyed after the lock (it may own anything)
  std::lock_guard lk(exec_->mu);
  auto it = exec_->timers.find(key);
  if (it == exec_->timers.end()) return;  // fired already (or never armed: stopping)
  dropped = std::move(it->second);
  exec_->timers.erase(it);
  // A cancelled earliest timer wakes the timer thread once, at its deadline, for nothing;
  // waking it now to re-aim would cost the same wake-up.
}

std::size_t ReplicaManager::pending_timers() {
  std::lock_guard lk(exec_->mu);
  return exec_->timers.size();
}

void ReplicaManager::worker_loop() {
  auto& ex = *exec_;
  for (;;) {
    std::function<void()> fn;
    {
      std::unique_lock lk(ex.mu);
      ex.q_cv.wait(lk, [&] { return ex.stopping || !ex.queue.empty(); });
      if (ex.stopping) return;
      fn = std::move(ex.queue.front());
      ex.queue.pop_front();
    }
    fn();
  }
}

void ReplicaManager::timer_loop() {
  auto& ex = *exec_;
  auto next_check = Clock::now() + opts_.check_interval;
  std::unique_lock lk(ex.mu);
  while (!ex.stopping) {
    auto wake = ex.timers.empty() ? Clock::time_point::max() : ex.timers.begin()->first.first;
    if (opts_.check_interval.count() > 0) wake = std::min(wake, next_check);
    if (wake == Clock::time_point::max())
      ex.timer_cv.wait(lk);
    else
      ex.timer_cv.wait_until(lk, wake);
    if (ex.stopping) return;
    const auto now = Clock::now();
    bool posted = false;
    while (!ex.timers.empty() && ex.timers.begin()->first.first <= now) {
      ex.queue.push_back(std::move(ex.timers.begin()->second));
      ex.timers.erase(ex.timers.begin());
      posted = true;
    }
    bool check = false;
    if (opts_.check_interval.count() > 0 && now >= next_check) {
      next_check = now + opts_.check_interval;
      // At most one of each queued or running: a check that waits on the metadata store
      // for longer than the interval is not joined by more of itself.
      if (!ex.check_queued) {
        ex.check_queued = check = true;
        ex.catalog_queue.push_back([this] { queue_check_pass(); });
      }
      if (!ex.expiry_queued) {
        ex.expiry_queued = posted = true;
        ex.queue.push_back([this] {
          expire_now();
          std::lock_guard lk(exec_->mu);
          exec_->expiry_queued = false;
        });
      }
    }
    if (posted) ex.q_cv.notify_all();
    if (check) ex.catalog_cv.notify_one();
  }
}

std::shared_ptr<ReplicaManager::Shard> ReplicaManager::find(const StreamKey& key,
                                                             ShardIndex shard, LogKind kind) {
  std::lock_guard lk(mu_);
  auto it = shards_.find({key, shard, kind});
  return it == shards_.end() ? nullptr : it->second;
}

ReplicaManager::Counters ReplicaManager::counters() {
  std::lock_guard lk(mu_);
  return counters_;
}

// --- assignment ------------------------------------------------------------------------

Result<void> ReplicaManager::assign(std::shared_ptr<ReplicaLog> log,
                                    const ReplicaAssignment& ra, LogKind kind) {
  const ShardRef ref = log->ref();
  std::shared_ptr<Shard> s;
  {
    std::lock_guard lk(mu_);
    auto& slot = shards_[{ref.stream, ref.shard, kind}];
    if (slot && slot->ref.incarnation != ref.incarnation) {
      std::lock_guard slk(slot->mu);
      slot->removed = true;
      ++slot->gen;
      drop_parked(*slot);
      slot.reset();
    }
    if (!slot) {
      slot = std::make_shared<Shard>();
      slot->ref = ref;
      slot->kind = kind;
    }
    s = slot;
  }

  std::lock_guard lk(s->mu);
  if (s->log && ra.version < s->ra.version) return {};  // an older word than one applied
  // A member the catalog no longer counts reports afresh before the lag check may add it
  // back: the record may hold a position from before its copy was lost (a lost copy leaves
  // the in-sync set at once, and its old record would bring it back before its first
  // fetch; docs/replication.md "A lost shard copy").
  for (const auto& m : s->ra.in_sync)
    if (std::none_of(ra.in_sync.begin(), ra.in_sync.end(), [&](const InSyncReplica& x) { return x.broker == m.broker; }))
      s->followers.erase(m.broker);
  s->log = std::move(log);
  s->ra = ra;
  s->log->set_in_sync(ra.in_sync.size(), ra.min_insync);
  // The catalog's word after an in-sync change whose outcome was unknown: it now says
  // which members count (replica_in_sync.cc change_in_sync).
  if (s->proposed_at && ra.version > *s->proposed_at) {
    s->proposed_at.reset();
    if (!s->in_sync_change_in_flight) s->proposed_in_sync.clear();
  }

  Role want = Role::none;
  // A replica is (broker, directory): this broker leads only with the directory the
  // catalog recorded for it in the in-sync set. Back with an empty or replaced disk, it
  // holds a new, empty replica that must never serve as the leader (seed kafka-15495),
  // whatever the catalog's leader field still says.
  const bool recorded = std::any_of(ra.in_sync.begin(), ra.in_sync.end(), [&](const InSyncReplica& m) {
    return m.broker == self_ && m.directory_id == directory_id_;
  });
  // A copy this disk lost (docs/replication.md "A lost shard copy") is a new replica under
  // the old directory id, so the catalog's record of it is not its own. Until it holds
  // everything its leader held when it began to fetch, in both logs (lost_copy_fetched), it
  // leads nothing, and whenever the catalog counts it in the in-sync set it asks, once per
  // assignment version, to leave it: also after the catalog counted it again too early (a
  // leader of an older build, on its record from before the loss). It may follow
  // meanwhile: a leader counts its position, so its short log only holds the high watermark
  // back.
  bool lost = s->log->copy_lost();
  if (lost && !recorded && kind == LogKind::data && !s->left_in_sync_at) s->left_in_sync_at = ra.version;
  // With no leader to catch up from, a copy the catalog no longer counts forgets its loss
  // at once: else an operator could not elect it uncleanly when every other copy is gone
  // too. Safe: whoever leads next begins a new epoch with no record of this copy (the record
  // that could count it again is a leader's that kept leading across the loss; the dead
  // process's fetches carry an older epoch, which the new leader refuses). The group log
  // shares the mark, and is assigned this version right after. The removal syncs a
  // directory under this shard's lock, as become_leader's epoch save does: once per copy.
  if (lost && !recorded && kind == LogKind::data && ra.leader.value() == 0) {
    if (auto r = s->log->forget_copy_lost(); !r) {
      log_(LogLevel::warn, shard_name(ref, kind) + ": cannot forget the loss of this copy: " + r.error().message);
    } else {
      log_(LogLevel::info, shard_name(ref, kind) + ": the catalog no longer counts this lost copy and names no "
                                                   "leader: it is an ordinary replica again");
      lost = false;
    }
  }
  if (lost && recorded && kind == LogKind::data && s->leave_asked_at != ra.version) {
    const bool again = s->left_in_sync_at && ra.version > *s->left_in_sync_at;
    s->leave_asked_at = ra.version;
    log_(LogLevel::error, shard_name(ref, kind) + ": this disk lost its copy, which the catalog " +
                              (again ? "counts before this copy caught up" : "still counts") +
                              " in the in-sync set (version " + std::to_string(ra.version.value()) +
                              "); asking to leave it" +
                          (ra.leader == self_ ? " and the leadership of epoch " +
                                                    std::to_string(ra.leader_epoch.value())
                                              : std::string()));
    auto self = s;
    post_catalog([this, self, ra] { request_leave_in_sync(self, ra); }, true);
  }
  if (ra.leader == self_ && lost) {
    if (s->role != Role::none || s->epoch != ra.leader_epoch)
      log_(LogLevel::error, shard_name(ref, kind) + ": the catalog names this broker leader in epoch " +
                                std::to_string(ra.leader_epoch.value()) + ", but its copy was lost: not leading");
  } else if (ra.leader == self_ && !recorded) {
    if (s->role != Role::none || s->epoch != ra.leader_epoch)
      log_(LogLevel::error,
           shard_name(ref, kind) + ": the catalog names this broker leader in epoch " +
               std::to_string(ra.leader_epoch.value()) + ", but its in-sync set does not hold "
               "this broker's directory " + directory_id_ +
               " (a new or replaced disk): not leading; the controller elects another replica");
  } else if (ra.leader == self_)
    want = Role::leader;
  else if (ra.leader.value() != 0 && holds(ra.replicas, self_))
    want = Role::follower;

  if (want == s->role && ra.leader_epoch == s->epoch) {
    if (want == Role::leader) {
      // A broker taken off the replica list (a reassignment) removes its copy: what it
      // reported is no longer true, and if it is added back it starts as a new follower.
      for (auto it = s->followers.begin(); it != s->followers.end();)
        it = holds(ra.replicas, it->first) ? std::next(it) : s->followers.erase(it);
      update_high_watermark(*s);
    }
    return {};
  }

  const Role was = s->role;
  ++s->gen;
  drop_parked(*s);
  s->followers.clear();
  s->truncated = false;
  s->last_error.clear();
  s->role = Role::none;
  s->epoch = ra.leader_epoch;
  const auto name = shard_name(ref, kind);

  switch (want) {
    case Role::leader: {
      // A restarted leader never continues its epoch (docs/replication.md "Shipping before
      // the leader's sync"): it waits, leading nothing, for the next one.
      if (s->log->led_before_reopen(ra.leader_epoch)) {
        if (s->new_epoch_asked_at != ra.version) {
          s->new_epoch_asked_at = ra.version;
          log_(LogLevel::info, name + ": led epoch " + std::to_string(ra.leader_epoch.value()) +
                                   " before this restart; asking the catalog for epoch " +
                                   std::to_string(ra.leader_epoch.value() + 1));
          auto self = s;
          post_catalog([this, self, ra] { request_new_epoch(self, ra); }, true);
        }
        return {};
      }
      if (auto r = s->log->become_leader(ra.leader_epoch); !r) {
        log_(LogLevel::error, name + ": cannot lead in epoch " +
                                  std::to_string(ra.leader_epoch.value()) + ": " +
                                  r.error().message);
        return r.error();
      }
      s->role = Role::leader;
      s->leading_since = Clock::now();
      s->epoch_start = s->log->durable_end();
      update_high_watermark(*s);
      log_(LogLevel::info, name + ": leading in epoch " + std::to_string(ra.leader_epoch.value()));
      return {};
    }
    case Role::follower: {
      if (auto r = s->log->become_follower(ra.leader_epoch, ra.leader); !r) {
        log_(LogLevel::error, name + ": cannot follow broker " +
                                  std::to_string(ra.leader.value()) + " in epoch " +
                                  std::to_string(ra.leader_epoch.value()) + ": " +
                                  r.error().message);
        return r.error();
      }
      s->role = Role::follower;
      log_(LogLevel::info, name + ": following broker " + std::to_string(ra.leader.value()) +
                               " in epoch " + std::to_string(ra.leader_epoch.value()));
      follow(s, s->gen);
      return {};
    }
    case Role::none:
      // Deposed or leaderless: pending quorum appends must never complete.
      if (was == Role::leader || ra.leader_epoch > s->log->leader_epoch()) {
        if (auto r = s->log->fence(ra.leader_epoch); !r)
          log_(LogLevel::warn, name + ": fence: " + r.error().message);
      }
      return {};
  }
  return {};
}

void ReplicaManager::remove(const ShardRef& ref) {
  for (LogKind kind : {LogKind::data, LogKind::groups}) {
    std::shared_ptr<Shard> s;
    {
      std::lock_guard lk(mu_);
      auto it = shards_.find({ref.stream, ref.shard, kind});
      if (it == shards_.end() || it->second->ref.incarnation != ref.incarnation) continue;
      s = it->second;
      shards_.erase(it);
    }
    std::lock_guard lk(s->mu);
    s->removed = true;
    ++s->gen;
    drop_parked(*s);
  }
}

std::vector<ReplicaProgress> ReplicaManager::progress(const ShardRef& ref) {
  auto s = find(ref.stream, ref.shard);
  std::vector<ReplicaProgress> out;
  if (!s) return out;
  std::lock_guard lk(s->mu);
  if (s->ref.incarnation != ref.incarnation || s->role != Role::leader) return out;
  const auto now = Clock::now();
  const Offset leader_end = s->log->durable_end();
  auto member = [&](NodeId b, const std::string& dir) {
    for (const auto& m : s->ra.in_sync)
      if (m.broker == b && m.directory_id == dir) return true;
    return false;
  };
  for (NodeId b : s->ra.replicas) {
    ReplicaProgress p;
    p.broker = b;
    if (b == self_) {
      p.directory_id = directory_id_;
      p.durable_end = leader_end;
      p.high_watermark = s->log->high_watermark();
    } else if (auto it = s->followers.find(b); it != s->followers.end()) {
      p.directory_id = it->second.directory_id;
      p.durable_end = it->second.durable_end;
      p.high_watermark = std::min(it->second.hwm_sent, it->second.durable_end);
      if (p.durable_end < leader_end)
        p.lag_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                       now - it->second.last_caught_up)
                       .count();
    } else {
      p.lag_ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - s->leading_since)
                     .count();
    }
    p.in_sync = member(b, p.directory_id);
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace sluice::fs_storage
