#include "replica_manager.h"

#include <algorithm>
#include <optional>
#include <utility>

namespace sluice::fs_storage {

using namespace std::chrono_literals;

struct ReplicaManager::Exec {
  std::mutex mu;
  std::condition_variable q_cv;      // workers: a task was queued, or stopping
  std::condition_variable timer_cv;  // timer thread: a timer was added, or stopping
  std::deque<std::function<void()>> queue;
  std::multimap<Clock::time_point, std::function<void()>> timers;
  bool stopping = false;

  void post(std::function<void()> fn) {
    {
      std::lock_guard lk(mu);
      if (stopping) return;  // fn (and any responder it holds) is destroyed here
      queue.push_back(std::move(fn));
    }
    q_cv.notify_one();
  }
};

enum class Role { none, leader, follower };

struct ReplicaManager::Shard {
  std::mutex mu;
  ShardRef ref;
  std::shared_ptr<ReplicaLog> log;
  ReplicaAssignment ra;
  Role role = Role::none;
  LeaderEpoch epoch;       // the epoch of `role`
  std::uint64_t gen = 1;   // rises with every role change and at remove: stale work stops
  bool removed = false;

  // Leader: what each follower last reported.
  struct Follower {
    std::string directory_id;
    Offset durable_end;
    bool reported = false;
    Clock::time_point last_caught_up;
    Clock::time_point last_fetch;
    Offset leader_end_at_last_fetch;
  };
  std::map<NodeId, Follower> followers;
  Clock::time_point leading_since;
  std::vector<std::shared_ptr<Parked>> parked;
  bool in_sync_change_in_flight = false;
  // The catalog refused a change at this version: someone else moved the shard on, and
  // their assignment is on its way. No further change is tried until it arrives.
  std::optional<ShardVersion> refused_at;

  // Follower.
  bool truncated = false;  // the epoch-end truncation ran in this generation
  std::string last_error;  // logged once per distinct error, not once per retry
};

struct ReplicaManager::Parked {
  std::mutex mu;
  bool done = false;
  std::weak_ptr<Shard> shard;
  FetchRequest req;
  PeerResponder respond;
  std::uint64_t notify = 0;
};

namespace {

std::string shard_name(const ShardRef& r) { return r.to_string(); }

bool holds(const std::vector<NodeId>& v, NodeId n) {
  return std::find(v.begin(), v.end(), n) != v.end();
}

}  // namespace

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
  for (unsigned i = 0; i < opts_.workers; ++i) workers_.emplace_back([this] { worker_loop(); });
  timer_ = std::thread([this] { timer_loop(); });
  return {};
}

void ReplicaManager::stop() {
  if (!started_) return;
  started_ = false;
  transport_.unhandle(kReplicaFetch);
  transport_.unhandle(kReplicaEpochEnd);
  std::deque<std::function<void()>> queued;
  std::multimap<Clock::time_point, std::function<void()>> timers;
  {
    std::lock_guard lk(exec_->mu);
    exec_->stopping = true;
  }
  exec_->q_cv.notify_all();
  exec_->timer_cv.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
  if (timer_.joinable()) timer_.join();
  {
    std::lock_guard lk(exec_->mu);
    queued.swap(exec_->queue);
    timers.swap(exec_->timers);
  }
  queued.clear();  // their responders answer unavailable
  timers.clear();
  std::map<std::pair<StreamKey, ShardIndex>, std::shared_ptr<Shard>> shards;
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

void ReplicaManager::after(std::chrono::milliseconds delay, std::function<void()> fn) {
  {
    std::lock_guard lk(exec_->mu);
    if (exec_->stopping) return;
    exec_->timers.emplace(Clock::now() + delay, std::move(fn));
  }
  exec_->timer_cv.notify_one();
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
    auto wake = ex.timers.empty() ? Clock::time_point::max() : ex.timers.begin()->first;
    if (opts_.check_interval.count() > 0) wake = std::min(wake, next_check);
    if (wake == Clock::time_point::max())
      ex.timer_cv.wait(lk);
    else
      ex.timer_cv.wait_until(lk, wake);
    if (ex.stopping) return;
    const auto now = Clock::now();
    bool posted = false;
    while (!ex.timers.empty() && ex.timers.begin()->first <= now) {
      ex.queue.push_back(std::move(ex.timers.begin()->second));
      ex.timers.erase(ex.timers.begin());
      posted = true;
    }
    if (opts_.check_interval.count() > 0 && now >= next_check) {
      next_check = now + opts_.check_interval;
      ex.queue.push_back([this] { check_now(); });
      posted = true;
    }
    if (posted) ex.q_cv.notify_all();
  }
}

std::shared_ptr<ReplicaManager::Shard> ReplicaManager::find(const StreamKey& key,
                                                             ShardIndex shard) {
  std::lock_guard lk(mu_);
  auto it = shards_.find({key, shard});
  return it == shards_.end() ? nullptr : it->second;
}

ReplicaManager::Counters ReplicaManager::counters() {
  std::lock_guard lk(mu_);
  return counters_;
}

// --- assignment ------------------------------------------------------------------------

Result<void> ReplicaManager::assign(std::shared_ptr<ReplicaLog> log,
                                    const ReplicaAssignment& ra) {
  const ShardRef ref = log->ref();
  std::shared_ptr<Shard> s;
  {
    std::lock_guard lk(mu_);
    auto& slot = shards_[{ref.stream, ref.shard}];
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
    }
    s = slot;
  }

  std::lock_guard lk(s->mu);
  if (s->log && ra.version < s->ra.version) return {};  // an older word than one applied
  s->log = std::move(log);
  s->ra = ra;
  s->log->set_in_sync(ra.in_sync.size(), ra.min_insync);

  Role want = Role::none;
  if (ra.leader == self_)
    want = Role::leader;
  else if (ra.leader.value() != 0 && holds(ra.replicas, self_))
    want = Role::follower;

  if (want == s->role && ra.leader_epoch == s->epoch) {
    if (want == Role::leader) update_high_watermark(*s);
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
  const auto name = shard_name(ref);

  switch (want) {
    case Role::leader: {
      if (auto r = s->log->become_leader(ra.leader_epoch); !r) {
        log_(LogLevel::error, name + ": cannot lead in epoch " +
                                  std::to_string(ra.leader_epoch.value()) + ": " +
                                  r.error().message);
        return r.error();
      }
      s->role = Role::leader;
      s->leading_since = Clock::now();
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
  std::shared_ptr<Shard> s;
  {
    std::lock_guard lk(mu_);
    auto it = shards_.find({ref.stream, ref.shard});
    if (it == shards_.end() || it->second->ref.incarnation != ref.incarnation) return;
    s = it->second;
    shards_.erase(it);
  }
  std::lock_guard lk(s->mu);
  s->removed = true;
  ++s->gen;
  drop_parked(*s);
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
    } else if (auto it = s->followers.find(b); it != s->followers.end()) {
      p.directory_id = it->second.directory_id;
      p.durable_end = it->second.durable_end;
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

// --- leader ----------------------------------------------------------------------------

void ReplicaManager::drop_parked(Shard& s) {
  // Called with s.mu held. Answers nothing itself: a dropped responder answers unavailable.
  for (auto& p : s.parked) {
    std::uint64_t handle = 0;
    PeerResponder r;
    {
      std::lock_guard lk(p->mu);
      if (p->done) continue;
      p->done = true;
      handle = p->notify;
      r = std::move(p->respond);
    }
    if (handle != 0 && s.log) s.log->cancel_end_notify(handle);
    r(Error(Errc::not_leader, "broker " + std::to_string(self_.value()) +
                                  " stopped leading " + shard_name(s.ref)));
  }
  s.parked.clear();
}

Result<std::shared_ptr<ReplicaManager::Shard>> ReplicaManager::check_envelope(
    const PeerIdentity& from, const Incarnated& env, bool leader_only) {
  if (env.sender != from.node || env.directory_id != from.directory_id)
    return Error(Errc::invalid_argument,
                 "the envelope names broker " + std::to_string(env.sender.value()) +
                     " (directory " + env.directory_id + ") but the connection's hello named " +
                     std::to_string(from.node.value()) + " (directory " + from.directory_id + ")");
  auto s = find(env.ref.stream, env.ref.shard);
  const std::string me = "broker " + std::to_string(self_.value());
  if (!s)
    return Error(Errc::not_found, me + " holds no incarnation of " + env.ref.stream.to_string() +
                                      " shard " + std::to_string(env.ref.shard.value()));
  std::lock_guard lk(s->mu);
  if (s->ref.incarnation != env.ref.incarnation)
    return Error(Errc::stale_route,
                 me + " holds incarnation " + std::to_string(s->ref.incarnation.value()) +
                     " of " + env.ref.stream.to_string() + ", not " +
                     std::to_string(env.ref.incarnation.value()));
  if (!holds(s->ra.replicas, env.sender))
    return Error(Errc::conflict, "broker " + std::to_string(env.sender.value()) +
                                     " is not a replica of " + shard_name(s->ref));
  if (env.leader_epoch < s->epoch)
    return Error(Errc::fenced, "leader epoch " + std::to_string(env.leader_epoch.value()) +
                                   " is older than " + me + "'s epoch " +
                                   std::to_string(s->epoch.value()) + " for " +
                                   shard_name(s->ref));
  if (env.leader_epoch > s->epoch) {
    // A newer leader exists: this broker was deposed, whatever the catalog has told it so far.
    if (s->role == Role::leader) {
      log_(LogLevel::warn, shard_name(s->ref) + ": broker " + std::to_string(env.sender.value()) +
                               " speaks in epoch " + std::to_string(env.leader_epoch.value()) +
                               "; this leader (epoch " + std::to_string(s->epoch.value()) +
                               ") fences itself");
      ++s->gen;
      drop_parked(*s);
      s->role = Role::none;
      s->epoch = env.leader_epoch;
      if (auto r = s->log->fence(env.leader_epoch); !r)
        log_(LogLevel::error, shard_name(s->ref) + ": fence: " + r.error().message);
    }
    return Error(Errc::not_leader, me + " does not lead " + shard_name(s->ref) + " in epoch " +
                                       std::to_string(env.leader_epoch.value()));
  }
  if (leader_only && s->role != Role::leader)
    return Error(Errc::not_leader, me + " does not lead " + shard_name(s->ref) + " in epoch " +
                                       std::to_string(env.leader_epoch.value()));
  return s;
}

void ReplicaManager::on_fetch(const PeerIdentity& from, std::string payload,
                              PeerResponder respond) {
  auto req = decode_fetch_request(payload);
  if (!req) return respond(req.error());
  auto rp = std::make_shared<PeerResponder>(std::move(respond));
  post([this, from, req = std::move(*req), rp]() mutable {
    auto s = check_envelope(from, req.env, true);
    if (!s) return (*rp)(s.error());
    serve_fetch(*s, std::move(req), std::move(*rp));
  });
}

void ReplicaManager::on_epoch_end(const PeerIdentity& from, std::string payload,
                                  PeerResponder respond) {
  auto req = decode_epoch_end_request(payload);
  if (!req) return respond(req.error());
  auto rp = std::make_shared<PeerResponder>(std::move(respond));
  post([this, from, req = std::move(*req), rp]() mutable {
    auto& respond = *rp;
    auto s = check_envelope(from, req.env, true);
    if (!s) return respond(s.error());
    std::shared_ptr<ReplicaLog> log;
    {
      std::lock_guard lk((*s)->mu);
      log = (*s)->log;
    }
    auto end = log->end_offset_for(req.epoch);
    if (!end) return respond(end.error());
    respond(encode(EpochEndResponse{end->epoch, end->end}));
  });
}

void ReplicaManager::record_progress(Shard& s, NodeId follower, const std::string& dir,
                                     Offset durable_end, Clock::time_point now) {
  const Offset leader_end = s.log->durable_end();
  auto [it, fresh] = s.followers.try_emplace(follower);
  auto& f = it->second;
  if (fresh || f.directory_id != dir) {
    // A new directory is a new, empty replica: nothing it said before counts.
    f = Shard::Follower{};
    f.directory_id = dir;
    f.last_caught_up = s.leading_since;
    fresh = true;
  }
  // Kafka's rule: caught up now, or caught up to where the leader was at its last fetch.
  if (durable_end >= leader_end)
    f.last_caught_up = now;
  else if (!fresh && f.reported && durable_end >= f.leader_end_at_last_fetch)
    f.last_caught_up = std::max(f.last_caught_up, f.last_fetch);
  f.durable_end = durable_end;
  f.reported = true;
  f.last_fetch = now;
  f.leader_end_at_last_fetch = leader_end;
}

void ReplicaManager::update_high_watermark(Shard& s) {
  if (s.role != Role::leader) return;
  Offset hwm = s.log->durable_end();
  for (const auto& m : s.ra.in_sync) {
    if (m.broker == self_) continue;
    auto it = s.followers.find(m.broker);
    // A member counts only with the directory the catalog recorded (seed kafka-15495).
    if (it == s.followers.end() || !it->second.reported ||
        it->second.directory_id != m.directory_id)
      return;  // its position is unknown: the high watermark stays where it is
    hwm = std::min(hwm, it->second.durable_end);
  }
  s.log->advance_high_watermark(hwm);
}

void ReplicaManager::serve_fetch(const std::shared_ptr<Shard>& s, FetchRequest req,
                                 PeerResponder respond) {
  std::unique_lock lk(s->mu);
  if (s->role != Role::leader)
    return respond(Error(Errc::not_leader, "broker " + std::to_string(self_.value()) +
                                               " no longer leads " + shard_name(s->ref)));
  record_progress(*s, req.env.sender, req.env.directory_id, req.durable_end, Clock::now());
  update_high_watermark(*s);
  const Offset end = s->log->durable_end();
  const Offset start = s->log->log_start();
  if (req.fetch_offset < start)
    return respond(Error(Errc::offset_out_of_range,
                         "fetch offset " + std::to_string(req.fetch_offset.value()) +
                             " is below the log start " + std::to_string(start.value()) +
                             " of " + shard_name(s->ref)));
  if (req.fetch_offset > end)
    return respond(Error(Errc::conflict, "fetch offset " +
                                             std::to_string(req.fetch_offset.value()) +
                                             " is beyond the leader's log end " +
                                             std::to_string(end.value()) + " of " +
                                             shard_name(s->ref) + "; truncate first"));
  if (req.fetch_offset < end || req.wait_ms == 0) {
    lk.unlock();
    return answer_fetch(s, req, respond);
  }
  // Nothing new: hold the request until the log grows or the wait passes.
  auto p = std::make_shared<Parked>();
  p->shard = s;
  p->req = std::move(req);
  p->respond = std::move(respond);
  s->parked.push_back(p);
  auto exec = exec_;
  const auto wait = std::chrono::milliseconds(p->req.wait_ms);
  const auto handle = s->log->notify_when_end_beyond(
      p->req.fetch_offset, [this, exec, p] { exec->post([this, p] { finish_parked(p); }); });
  {
    std::lock_guard plk(p->mu);
    p->notify = handle;
  }
  lk.unlock();
  if (handle == 0) post([this, p] { finish_parked(p); });
  after(wait, [this, p] { finish_parked(p); });
}

void ReplicaManager::finish_parked(const std::shared_ptr<Parked>& p) {
  auto s = p->shard.lock();
  std::uint64_t handle = 0;
  PeerResponder respond;
  {
    std::lock_guard lk(p->mu);
    if (p->done) return;
    p->done = true;
    handle = p->notify;
    respond = std::move(p->respond);
  }
  if (!s) return;  // the responder answers unavailable
  std::shared_ptr<ReplicaLog> log;
  {
    std::lock_guard lk(s->mu);
    auto& v = s->parked;
    v.erase(std::remove(v.begin(), v.end(), p), v.end());
    log = s->log;
  }
  if (handle != 0) log->cancel_end_notify(handle);
  answer_fetch(s, p->req, respond);
}

void ReplicaManager::answer_fetch(const std::shared_ptr<Shard>& s, const FetchRequest& req,
                                  PeerResponder& respond) {
  std::shared_ptr<ReplicaLog> log;
  LeaderEpoch epoch;
  {
    std::lock_guard lk(s->mu);
    if (s->role != Role::leader || s->epoch != req.env.leader_epoch)
      return respond(Error(Errc::not_leader, "broker " + std::to_string(self_.value()) +
                                                 " no longer leads " + shard_name(s->ref)));
    log = s->log;
    epoch = s->epoch;
  }
  const std::size_t max_bytes =
      std::min<std::size_t>(req.max_bytes ? req.max_bytes : opts_.fetch_max_bytes,
                            opts_.fetch_max_bytes);
  FetchResponse out;
  ReplicaChunk chunk;
  if (req.fetch_offset < log->durable_end()) {
    auto c = log->read_raw(req.fetch_offset, max_bytes);
    if (!c) return respond(c.error());
    chunk = std::move(*c);
  }
  out.leader_epoch = epoch;
  out.high_watermark = log->high_watermark();
  out.log_start = log->log_start();
  out.log_end = log->durable_end();
  out.chunk_base = req.fetch_offset;
  out.chunk_epoch = chunk.epoch;
  out.chunk = chunk.bytes;
  std::string payload = encode(out);
  {
    std::lock_guard lk(mu_);
    ++counters_.fetches_served;
    counters_.bytes_served += chunk.bytes.size();
  }
  respond(std::move(payload));
}

void ReplicaManager::check_now() {
  std::vector<std::shared_ptr<Shard>> shards;
  {
    std::lock_guard lk(mu_);
    for (auto& [_, s] : shards_) shards.push_back(s);
  }
  const auto now = Clock::now();
  for (auto& s : shards) check_shard(s, now);
}

void ReplicaManager::check_shard(const std::shared_ptr<Shard>& s, Clock::time_point now) {
  std::unique_lock lk(s->mu);
  if (s->role != Role::leader || s->removed) return;
  s->log->expire_quorum_waiters(now);
  update_high_watermark(*s);
  if (s->in_sync_change_in_flight || s->refused_at == s->ra.version) return;

  const Offset leader_end = s->log->durable_end();
  const Offset hwm = s->log->high_watermark();
  auto lag_of = [&](NodeId b) -> std::chrono::milliseconds {
    auto it = s->followers.find(b);
    if (it == s->followers.end())
      return std::chrono::duration_cast<std::chrono::milliseconds>(now - s->leading_since);
    if (it->second.durable_end >= leader_end) return 0ms;
    return std::chrono::duration_cast<std::chrono::milliseconds>(now - it->second.last_caught_up);
  };

  std::vector<InSyncReplica> next = s->ra.in_sync;
  bool changed = false;
  const char* why = "";

  // Shrink: members that lag too long, or answer with another directory than recorded;
  // the most lagging first, never below min_insync.
  std::vector<std::pair<std::chrono::milliseconds, NodeId>> out;
  for (const auto& m : next) {
    if (m.broker == self_) continue;
    auto it = s->followers.find(m.broker);
    const bool other_dir = it != s->followers.end() && it->second.directory_id != m.directory_id;
    const auto lag = lag_of(m.broker);
    if (lag > opts_.max_lag || (other_dir && now - s->leading_since > opts_.max_lag))
      out.emplace_back(lag, m.broker);
  }
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.first > b.first; });
  for (const auto& [lag, b] : out) {
    if (next.size() <= s->ra.min_insync) break;
    next.erase(std::remove_if(next.begin(), next.end(),
                              [&](const InSyncReplica& m) { return m.broker == b; }),
               next.end());
    changed = true;
    why = "a member lagged longer than replication.max_lag_ms";
  }

  // Grow: a replica whose disk holds everything up to the high watermark joins, with the
  // directory it fetched from (replacing a stale entry for that broker).
  if (!changed) {
    for (NodeId b : s->ra.replicas) {
      if (b == self_) continue;
      auto it = s->followers.find(b);
      if (it == s->followers.end() || !it->second.reported) continue;
      const auto& f = it->second;
      const bool member = std::any_of(next.begin(), next.end(), [&](const InSyncReplica& m) {
        return m.broker == b && m.directory_id == f.directory_id;
      });
      if (member || f.durable_end < hwm || lag_of(b) > opts_.max_lag) continue;
      next.erase(std::remove_if(next.begin(), next.end(),
                                [&](const InSyncReplica& m) { return m.broker == b; }),
                 next.end());
      next.push_back(InSyncReplica{b, f.directory_id});
      changed = true;
      why = "a replica caught up";
    }
  }
  if (!changed) return;
  s->in_sync_change_in_flight = true;
  lk.unlock();
  change_in_sync(s, std::move(next), why);
}

void ReplicaManager::change_in_sync(const std::shared_ptr<Shard>& s,
                                    std::vector<InSyncReplica> in_sync, const char* why) {
  ShardUpdate u;
  std::uint64_t gen = 0;
  std::size_t before = 0;
  {
    std::lock_guard lk(s->mu);
    u.key = s->ref.stream;
    u.shard = s->ref.shard;
    u.incarnation = s->ref.incarnation;
    u.expected_version = s->ra.version;
    u.leader = self_;
    u.leader_epoch = s->ra.leader_epoch;
    u.in_sync = in_sync;
    gen = s->gen;
    before = s->ra.in_sync.size();
  }
  auto describe = [](const std::vector<InSyncReplica>& v) {
    std::string out = "[";
    for (const auto& m : v) {
      if (out.size() > 1) out += ",";
      out += std::to_string(m.broker.value());
    }
    return out + "]";
  };
  auto r = update_shard_(u);  // blocks for at most the metadata timeout; no lock held
  std::lock_guard lk(s->mu);
  s->in_sync_change_in_flight = false;
  if (!r) {
    if (r.error().code == Errc::conflict || r.error().code == Errc::stale_route)
      s->refused_at = u.expected_version;
    // A conflict means someone else changed the shard: their assignment is on its way.
    log_(LogLevel::warn, shard_name(s->ref) + ": in-sync set change to " + describe(in_sync) +
                             " refused: " + r.error().message);
    return;
  }
  log_(LogLevel::info, shard_name(s->ref) + ": in-sync set is now " + describe(r->in_sync) +
                           " (version " + std::to_string(r->version.value()) + "): " + why);
  {
    std::lock_guard clk(mu_);
    if (r->in_sync.size() < before)
      ++counters_.isr_shrinks;
    else
      ++counters_.isr_expands;
  }
  if (s->gen != gen || r->version <= s->ra.version) return;
  s->ra.in_sync = r->in_sync;
  s->ra.version = r->version;
  s->log->set_in_sync(s->ra.in_sync.size(), s->ra.min_insync);
  update_high_watermark(*s);
}

// --- follower --------------------------------------------------------------------------

Incarnated ReplicaManager::envelope(const Shard& s) const {
  return Incarnated{s.ref, s.epoch, self_, directory_id_};
}

void ReplicaManager::follow(const std::shared_ptr<Shard>& s, std::uint64_t gen) {
  post([this, s, gen] { truncate_step(s, gen); });
}

void ReplicaManager::retry(const std::shared_ptr<Shard>& s, std::uint64_t gen, const Error& why) {
  {
    std::lock_guard lk(s->mu);
    if (s->gen != gen) return;
    if (why.message != s->last_error) {
      s->last_error = why.message;
      log_(LogLevel::warn, shard_name(s->ref) + ": replicating from broker " +
                               std::to_string(s->ra.leader.value()) + ": " + why.message +
                               " (retrying)");
    }
  }
  after(opts_.retry_backoff, [this, s, gen] {
    bool truncated = false;
    {
      std::lock_guard lk(s->mu);
      if (s->gen != gen) return;
      truncated = s->truncated;
    }
    if (truncated)
      fetch_step(s, gen);
    else
      truncate_step(s, gen);
  });
}

void ReplicaManager::truncate_step(const std::shared_ptr<Shard>& s, std::uint64_t gen) {
  EpochEndRequest req;
  NodeId leader;
  {
    std::lock_guard lk(s->mu);
    if (s->gen != gen || s->role != Role::follower) return;
    if (s->log->durable_end() <= s->log->log_start()) {
      s->truncated = true;  // nothing held: nothing can diverge
    } else {
      req.env = envelope(*s);
      req.epoch = s->log->last_data_epoch();
      leader = s->ra.leader;
    }
  }
  if (leader.value() == 0) return fetch_step(s, gen);
  auto exec = exec_;
  transport_.request(
      leader, kReplicaEpochEnd, encode(req), opts_.request_timeout,
      [this, exec, s, gen, asked = req.epoch](Result<std::string> answer) {
        exec->post([this, s, gen, asked, answer = std::move(answer)] {
          if (!answer) return retry(s, gen, answer.error());
          auto resp = decode_epoch_end_response(*answer);
          if (!resp) return retry(s, gen, resp.error());
          std::shared_ptr<ReplicaLog> log;
          {
            std::lock_guard lk(s->mu);
            if (s->gen != gen) return;
            log = s->log;
          }
          // KIP-279: keep what both logs hold in the same epoch; cut the rest.
          Offset target = std::min(resp->end, log->durable_end());
          if (resp->epoch < asked) {
            auto mine = log->end_offset_for(resp->epoch);
            if (!mine) return retry(s, gen, mine.error());
            if (mine->epoch == resp->epoch)
              target = std::min(target, mine->end);
            else
              target = std::min(target, log->high_watermark());
          }
          const Offset hwm = log->high_watermark();
          if (target < hwm) {
            log_(LogLevel::error,
                 shard_name(s->ref) + ": the leader's history would cut this replica to " +
                     std::to_string(target.value()) + ", below its high watermark " +
                     std::to_string(hwm.value()) + "; keeping everything below it");
            target = hwm;
          }
          if (target < log->durable_end()) {
            const auto from = log->durable_end();
            if (auto r = log->truncate_to(target); !r) return retry(s, gen, r.error());
            log_(LogLevel::info, shard_name(s->ref) + ": truncated the divergent suffix [" +
                                     std::to_string(target.value()) + ", " +
                                     std::to_string(from.value()) + ")");
            std::lock_guard clk(mu_);
            ++counters_.truncations;
          }
          {
            std::lock_guard lk(s->mu);
            if (s->gen != gen) return;
            s->truncated = true;
          }
          fetch_step(s, gen);
        });
      });
}

void ReplicaManager::fetch_step(const std::shared_ptr<Shard>& s, std::uint64_t gen) {
  FetchRequest req;
  NodeId leader;
  std::shared_ptr<ReplicaLog> log;
  {
    std::lock_guard lk(s->mu);
    if (s->gen != gen || s->role != Role::follower) return;
    log = s->log;
    req.env = envelope(*s);
    leader = s->ra.leader;
  }
  req.fetch_offset = log->durable_end();
  req.durable_end = req.fetch_offset;  // append_replica synced everything it wrote
  req.max_bytes = opts_.fetch_max_bytes;
  req.wait_ms = static_cast<std::uint32_t>(opts_.fetch_wait.count());
  auto exec = exec_;
  transport_.request(
      leader, kReplicaFetch, encode(req), opts_.fetch_wait + opts_.request_timeout,
      [this, exec, s, gen, base = req.fetch_offset](Result<std::string> answer) {
        exec->post([this, s, gen, base, answer = std::move(answer)] {
          if (!answer) {
            if (answer.error().code == Errc::conflict) {
              std::lock_guard lk(s->mu);
              if (s->gen == gen) s->truncated = false;  // diverged: find the cut again
            }
            return retry(s, gen, answer.error());
          }
          auto resp = decode_fetch_response(*answer);
          if (!resp) return retry(s, gen, resp.error());
          std::shared_ptr<ReplicaLog> log;
          {
            std::lock_guard lk(s->mu);
            if (s->gen != gen) return;
            log = s->log;
          }
          if (resp->chunk_base != base)
            return retry(s, gen, Error(Errc::internal, "the leader answered offset " +
                                                           std::to_string(resp->chunk_base.value()) +
                                                           " to a fetch at " +
                                                           std::to_string(base.value())));
          if (!resp->chunk.empty()) {
            if (auto r = log->append_replica(resp->chunk, base, resp->chunk_epoch); !r)
              return retry(s, gen, r.error());
            std::lock_guard clk(mu_);
            ++counters_.chunks_appended;
            counters_.bytes_appended += resp->chunk.size();
          }
          log->advance_high_watermark(std::min(resp->high_watermark, log->durable_end()));
          {
            std::lock_guard lk(s->mu);
            if (s->gen != gen) return;
            s->last_error.clear();
          }
          fetch_step(s, gen);
        });
      });
}

}  // namespace sluice::fs_storage
