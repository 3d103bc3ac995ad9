// The leader side of the replication manager: answering fetches and epoch-end questions,
// the high watermark, and the in-sync set (docs/replication.md "The replication manager").
#include "replica_manager_internal.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "sluice/catalog_rules.h"

namespace sluice::fs_storage {

using namespace std::chrono_literals;


void ReplicaManager::drop_parked(Shard& s) {
  // Called with s.mu held. Answers nothing itself: a dropped responder answers unavailable.
  for (auto& p : s.parked) {
    std::uint64_t handle = 0;
    std::optional<TimerKey> timer;
    PeerResponder r;
    {
      std::lock_guard lk(p->mu);
      if (p->done) continue;
      p->done = true;
      handle = p->notify;
      timer = p->timer;
      r = std::move(p->respond);
    }
    if (handle != 0 && s.log) s.log->cancel_end_notify(handle);
    if (timer) cancel_timer(*timer);
    r(Error(Errc::not_leader, "broker " + std::to_string(self_.value()) +
                                  " stopped leading " + shard_name(s.ref, s.kind)));
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
  auto s = find(env.ref.stream, env.ref.shard, env.log);
  std::shared_ptr<Shard> group_log;
  if (env.log == LogKind::data) group_log = find(env.ref.stream, env.ref.shard, LogKind::groups);
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
                                     " is not a replica of " + shard_name(s->ref, s->kind));
  if (env.leader_epoch < s->epoch)
    return Error(Errc::fenced, "leader epoch " + std::to_string(env.leader_epoch.value()) +
                                   " is older than " + me + "'s epoch " +
                                   std::to_string(s->epoch.value()) + " for " +
                                   shard_name(s->ref, s->kind));
  if (env.leader_epoch > s->epoch) {
    // A newer leader exists: this broker was deposed, whatever the catalog has told it so far.
    if (s->role == Role::leader) {
      log_(LogLevel::warn, shard_name(s->ref, s->kind) + ": broker " + std::to_string(env.sender.value()) +
                               " speaks in epoch " + std::to_string(env.leader_epoch.value()) +
                               "; this leader (epoch " + std::to_string(s->epoch.value()) +
                               ") fences itself");
      ++s->gen;
      drop_parked(*s);
      s->role = Role::none;
      s->epoch = env.leader_epoch;
      if (auto r = s->log->fence(env.leader_epoch); !r)
        log_(LogLevel::error, shard_name(s->ref, s->kind) + ": fence: " + r.error().message);
      if (group_log) fence_group_log(*s, group_log, env.leader_epoch);
    }
    return Error(Errc::not_leader, me + " does not lead " + shard_name(s->ref, s->kind) + " in epoch " +
                                       std::to_string(env.leader_epoch.value()));
  }
  if (leader_only && s->role != Role::leader)
    return Error(Errc::not_leader, me + " does not lead " + shard_name(s->ref, s->kind) + " in epoch " +
                                       std::to_string(env.leader_epoch.value()));
  return s;
}

void ReplicaManager::on_fetch(const PeerIdentity& from, std::string payload,
                              PeerResponder respond) {
  auto req = decode_fetch_request(payload);
  if (!req) return respond(req.error());
  // The steady state, a follower of this leader's epoch fetching at or above the high
  // watermark, is served on the transport's thread: it is parked, or answered from what was
  // just written (in the page cache). Handing it to a worker would cost a wake-up per fetch.
  // Anything that may block on the disk goes to a worker: a catch-up read, and a fetch in a
  // newer epoch, which fences this replica (an fsync of its epoch file).
  if (fetch_at_tail(req->env, req->fetch_offset)) {
    auto s = check_envelope(from, req->env, true);
    if (!s) return respond(s.error());
    return serve_fetch(*s, std::move(*req), std::move(respond));
  }
  auto rp = std::make_shared<PeerResponder>(std::move(respond));
  post([this, from, req = std::move(*req), rp]() mutable {
    auto s = check_envelope(from, req.env, true);
    if (!s) return (*rp)(s.error());
    serve_fetch(*s, std::move(req), std::move(*rp));
  });
}

bool ReplicaManager::fetch_at_tail(const Incarnated& env, Offset fetch_offset) {
  auto s = find(env.ref.stream, env.ref.shard, env.log);
  if (!s) return true;  // answered at once: holds no incarnation
  // Only tries: a role change holds this lock across the log's epoch save (an fsync), and
  // waiting here would stall every peer message of every shard behind one disk write. Held,
  // the fetch goes to a worker, which may wait.
  std::unique_lock lk(s->mu, std::try_to_lock);
  if (!lk.owns_lock()) return false;
  return s->role == Role::leader && s->epoch == env.leader_epoch &&
         s->ref.incarnation == env.ref.incarnation && fetch_offset >= s->log->high_watermark();
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
                                     Offset durable_end, bool says_lost, Clock::time_point now) {
  const Offset leader_end = s.log->written_end();
  auto [it, fresh] = s.followers.try_emplace(follower);
  auto& f = it->second;
  if (fresh || f.directory_id != dir) {
    // A new directory is a new, empty replica: nothing it said before counts.
    f = Shard::Follower{};
    f.directory_id = dir;
    f.last_caught_up = s.leading_since;
    fresh = true;
  }
  // A replica reports only what it synced, and within one leadership its log never gets
  // shorter (truncation comes with a new epoch, and the map is cleared then): a shorter one
  // lost data on its disk.
  // One such report may be a stale one (a fetch handled after its retry): two in a row
  // below the highest position it reported are not.
  const Offset peak = f.peak;
  if (!fresh && f.reported && durable_end < peak) f.reports_below = std::min(f.reports_below + 1, 2);
  else f.reports_below = 0;
  f.peak = std::max(f.peak, durable_end);
  if (f.reports_below >= 2) {
    if (f.lost_below.value() == 0)
      log_(LogLevel::warn, shard_name(s.ref, s.kind) + ": broker " + std::to_string(follower.value()) +
                               " reports durable end " + std::to_string(durable_end.value()) +
                               " after " + std::to_string(peak.value()) +
                               " under the same directory: its copy lost data; it counts for nothing "
                               "until it holds that again, and leaves the in-sync set");
    f.lost_below = peak;
  }
  if (f.lost_below.value() != 0 && durable_end >= f.lost_below) f.lost_below = Offset{0};
  // Kafka's rule: caught up now, or caught up to where the leader was at its last fetch.
  if (durable_end >= leader_end)
    f.last_caught_up = now;
  else if (!fresh && f.reported && durable_end >= f.leader_end_at_last_fetch)
    f.last_caught_up = std::max(f.last_caught_up, f.last_fetch);
  // A lost copy says so until it holds what this leader held when it began to fetch
  // (lost_copy_fetched): it does not join before, even at the high watermark.
  if (says_lost && !f.says_lost)
    log_(LogLevel::info, shard_name(s.ref, s.kind) + ": broker " + std::to_string(follower.value()) +
                             " says its copy was lost: it joins the in-sync set only once it has "
                             "caught up and no longer says so");
  f.says_lost = says_lost;
  f.durable_end = durable_end;
  f.reported = true;
  f.last_fetch = now;
  f.leader_end_at_last_fetch = leader_end;
}

void ReplicaManager::update_high_watermark(Shard& s) {
  if (s.role != Role::leader) return;
  // The followers' lowest durable end; the log caps it at its own durable end, now and
  // after each later sync (followers may sync what the leader shipped before the leader's
  // own sync is done: docs/replication.md "Shipping before the leader's sync").
  Offset hwm = s.log->written_end();
  // While a change of the in-sync set is being written to the catalog, the members of
  // both the current and the proposed set count (Kafka's "maximal ISR"): a replica that is
  // joining holds the high watermark back from the moment it is proposed, so no record is
  // acknowledged past it once the catalog names it a member.
  auto member_position = [&](const InSyncReplica& m) -> std::optional<Offset> {
    auto it = s.followers.find(m.broker);
    // A member counts only with the directory the catalog recorded (seed kafka-15495).
    if (it == s.followers.end() || !it->second.reported ||
        it->second.directory_id != m.directory_id || it->second.lost_below.value() != 0)
      return std::nullopt;
    return it->second.durable_end;
  };
  for (const auto* set : {&s.ra.in_sync, &s.proposed_in_sync}) {
    for (const auto& m : *set) {
      if (m.broker == self_) continue;
      auto pos = member_position(m);
      if (!pos) {
        // Its position is unknown (not reported yet, or under another directory than
        // recorded: a wiped disk): the high watermark stays where it is. The target too: one
        // set while the member still counted would let the log go on raising the mark after
        // its own syncs, acknowledging records the member no longer holds (review finding).
        s.log->hold_high_watermark();
        return;
      }
      hwm = std::min(hwm, *pos);
    }
  }
  s.log->advance_high_watermark(hwm);
}

void ReplicaManager::serve_fetch(const std::shared_ptr<Shard>& s, FetchRequest req,
                                 PeerResponder respond) {
  std::unique_lock lk(s->mu);
  if (s->role != Role::leader)
    return respond(Error(Errc::not_leader, "broker " + std::to_string(self_.value()) +
                                               " no longer leads " + shard_name(s->ref, s->kind)));
  // check_envelope looked under this lock, but released it: an assignment in between may
  // have taken the sender off the replica list (and forgotten its progress) or begun
  // another epoch. Recording this fetch then would bring back a position that no longer
  // holds (late review).
  if (s->epoch != req.env.leader_epoch)
    return respond(Error(Errc::not_leader, "broker " + std::to_string(self_.value()) +
                                               " no longer leads " + shard_name(s->ref, s->kind) +
                                               " in epoch " +
                                               std::to_string(req.env.leader_epoch.value())));
  if (!holds(s->ra.replicas, req.env.sender))
    return respond(Error(Errc::conflict, "broker " + std::to_string(req.env.sender.value()) +
                                             " is no longer a replica of " +
                                             shard_name(s->ref, s->kind)));
  // A follower that holds more than this leader wrote holds a tail this leader does not
  // have: its position says nothing about what it shares with this log, so it is not
  // recorded (it would count as caught up and, in the in-sync set, toward the high
  // watermark) until it has truncated.
  const Offset end = s->log->written_end();
  if (req.fetch_offset > end || req.durable_end > end)
    return respond(Error(Errc::conflict, "fetch offset " +
                                             std::to_string(req.fetch_offset.value()) +
                                             " is beyond the leader's log end " +
                                             std::to_string(end.value()) + " of " +
                                             shard_name(s->ref, s->kind) + "; truncate first"));
  record_progress(*s, req.env.sender, req.env.directory_id, req.durable_end, req.copy_lost, Clock::now());
  update_high_watermark(*s);
  // Anything below the end is answered at once, an offset below the log start included
  // (the log start is never above the end): answer_fetch tells that follower where the log
  // starts (docs/replication.md "Below the leader's log start").
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
  // The notification comes from the log's flusher right after it wrote (before its sync):
  // answered there when possible, so the follower gets the data without a worker's
  // wake-up (try_finish_parked_here), else by a worker.
  const auto handle = s->log->notify_when_end_beyond(p->req.fetch_offset, [this, exec, p] {
    if (t_notifier_holds_no_manager_lock && try_finish_parked_here(p)) return;
    exec->post([this, p] { finish_parked(p); });
  });
  {
    std::lock_guard plk(p->mu);
    p->notify = handle;
  }
  lk.unlock();
  if (handle == 0) post([this, p] { finish_parked(p); });
  const TimerKey timer = after(wait, [this, p] { finish_parked(p); });
  bool answered;
  {
    std::lock_guard plk(p->mu);
    answered = p->done;
    if (!answered) p->timer = timer;
  }
  if (answered) cancel_timer(timer);  // answered meanwhile: its deadline is not needed
}

bool ReplicaManager::try_finish_parked_here(const std::shared_ptr<Parked>& p) {
  auto s = p->shard.lock();
  if (!s) return false;
  // Never wait for the shard's lock here: its holder may be waiting for this very flush
  // (the log's writer token). A worker answers instead.
  std::unique_lock lk(s->mu, std::try_to_lock);
  if (!lk.owns_lock()) return false;
  PeerResponder respond;
  std::optional<TimerKey> timer;
  {
    std::lock_guard plk(p->mu);
    if (p->done) return true;
    p->done = true;
    timer = p->timer;
    respond = std::move(p->respond);
  }
  if (timer) cancel_timer(*timer);
  auto& v = s->parked;
  v.erase(std::remove(v.begin(), v.end(), p), v.end());
  // The notification fired, so there is nothing to cancel.
  if (s->role != Role::leader || s->epoch != p->req.env.leader_epoch) {
    lk.unlock();
    respond(Error(Errc::not_leader, "broker " + std::to_string(self_.value()) +
                                        " no longer leads " + shard_name(s->ref, s->kind)));
    return true;
  }
  auto log = s->log;
  const LeaderEpoch epoch = s->epoch;
  std::size_t chunk_size = 0;
  auto answer = read_fetch_answer(*log, epoch, p->req, chunk_size);
  if (answer) {
    if (auto it = s->followers.find(p->req.env.sender); it != s->followers.end())
      it->second.hwm_sent = std::max(it->second.hwm_sent, answer->second);
  }
  lk.unlock();
  if (!answer) {
    respond(answer.error());
    return true;
  }
  count_fetch_served(chunk_size);
  respond(std::move(answer->first));
  return true;
}

void ReplicaManager::finish_parked(const std::shared_ptr<Parked>& p) {
  auto s = p->shard.lock();
  std::uint64_t handle = 0;
  std::optional<TimerKey> timer;
  PeerResponder respond;
  {
    std::lock_guard lk(p->mu);
    if (p->done) return;
    p->done = true;
    handle = p->notify;
    timer = p->timer;
    respond = std::move(p->respond);
  }
  // Answered before its deadline: take the deadline back (a no-op when it is the caller).
  if (timer) cancel_timer(*timer);
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
                                                 " no longer leads " + shard_name(s->ref, s->kind)));
    log = s->log;
    epoch = s->epoch;
  }
  std::size_t chunk_size = 0;
  auto answer = read_fetch_answer(*log, epoch, req, chunk_size);
  if (!answer) return respond(answer.error());
  {
    std::lock_guard lk(s->mu);
    if (auto it = s->followers.find(req.env.sender); it != s->followers.end())
      it->second.hwm_sent = std::max(it->second.hwm_sent, answer->second);
  }
  count_fetch_served(chunk_size);
  respond(std::move(answer->first));
}

Result<std::pair<std::string, Offset>> ReplicaManager::read_fetch_answer(
    ReplicaLog& log, LeaderEpoch epoch, const FetchRequest& req, std::size_t& chunk_size) {
  const std::size_t max_bytes =
      std::min<std::size_t>(req.max_bytes ? req.max_bytes : opts_.fetch_max_bytes,
                            opts_.fetch_max_bytes);
  FetchResponse out;
  ReplicaChunk chunk;
  // The chunk is read from disk straight behind room for the answer's header, which is
  // written in place: the bytes are copied once from the page cache, then once into the
  // socket (the transport sends its frame header as a separate buffer).
  // A fetch below the log start (retention removed it here) gets no chunk, only the log
  // start: the follower starts its log over there (replica_follower.cc).
  Offset start = log.log_start();
  if (req.fetch_offset >= start && req.fetch_offset < log.written_end()) {
    auto c = log.read_raw(req.fetch_offset, max_bytes, kFetchResponseHeaderBytes);
    if (c) {
      chunk = std::move(*c);
    } else {
      // Retention may have moved the log start past the offset since it was read.
      start = log.log_start();
      if (c.error().code != Errc::offset_out_of_range || req.fetch_offset >= start)
        return c.error();
    }
  }
  if (chunk.bytes.size() < kFetchResponseHeaderBytes) chunk.bytes.assign(kFetchResponseHeaderBytes, '\0');
  chunk_size = chunk.bytes.size() - kFetchResponseHeaderBytes;
  out.leader_epoch = epoch;
  out.high_watermark = log.high_watermark();
  out.log_start = start;
  out.log_end = log.written_end();
  out.chunk_base = req.fetch_offset;
  out.chunk_epoch = chunk.epoch;
  encode_fetch_response_header(out, chunk_size, chunk.bytes.data());
  return std::pair<std::string, Offset>(std::move(chunk.bytes), out.high_watermark);
}

void ReplicaManager::count_fetch_served(std::size_t chunk_size) {
  std::lock_guard lk(mu_);
  ++counters_.fetches_served;
  counters_.bytes_served += chunk_size;
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

void ReplicaManager::expire_now() {
  std::vector<std::shared_ptr<Shard>> shards;
  {
    std::lock_guard lk(mu_);
    for (auto& [_, s] : shards_) shards.push_back(s);
  }
  const auto now = Clock::now();
  for (auto& s : shards) {
    std::lock_guard lk(s->mu);
    if (s->role == Role::leader && !s->removed) s->log->expire_quorum_waiters(now);
  }
}

void ReplicaManager::check_shard(const std::shared_ptr<Shard>& s, Clock::time_point now) {
  // The group log of a data log, looked up before any shard lock (lock order: the
  // manager's mu_, then a data log's entry, then its group log's).
  std::shared_ptr<Shard> g;
  if (s->kind == LogKind::data) g = find(s->ref.stream, s->ref.shard, LogKind::groups);
  std::unique_lock lk(s->mu);
  if (s->role != Role::leader || s->removed) return;
  s->log->expire_quorum_waiters(now);
  update_high_watermark(*s);
  // The group op log follows the data log's in-sync set (assign, change_in_sync).
  if (s->kind != LogKind::data) return;
  if (s->in_sync_change_in_flight || s->refused_at == s->ra.version) return;
  if (s->proposed_at == s->ra.version) {
    // The last change's outcome is unknown and no newer assignment came: send the same
    // compare-and-set again (applied already, it is refused with conflict, and the
    // assignment that applied it is on its way). Its members keep counting meanwhile.
    s->in_sync_change_in_flight = true;
    auto again = s->proposed_in_sync;
    lk.unlock();
    change_in_sync(s, std::move(again), "retrying an in-sync change whose outcome was unknown");
    return;
  }
  std::unique_lock<std::mutex> glk;
  if (g) {
    glk = std::unique_lock(g->mu);
    if (g->ref.incarnation != s->ref.incarnation || g->removed) {
      glk.unlock();
      g.reset();
    }
  }

  const Offset hwm = s->log->high_watermark();
  // Kafka's rule: the time since it last fetched while caught up. A follower that stops
  // fetching lags even when nothing new was written (a dead replica leaves the set).
  auto lag_in = [&](const Shard& x, NodeId b) -> std::chrono::milliseconds {
    auto it = x.followers.find(b);
    if (it == x.followers.end())
      return std::chrono::duration_cast<std::chrono::milliseconds>(now - x.leading_since);
    if (it->second.last_caught_up >= now) return 0ms;
    return std::chrono::duration_cast<std::chrono::milliseconds>(now - it->second.last_caught_up);
  };
  // A member must keep up with both logs: the group log's committed ops (acks, dead
  // letters) are as much the shard's state as its records.
  auto lag_of = [&](NodeId b) {
    auto lag = lag_in(*s, b);
    if (g && g->role == Role::leader) lag = std::max(lag, lag_in(*g, b));
    return lag;
  };
  // Joining needs the group log caught up too, under the same directory.
  auto group_caught_up = [&](NodeId b, const std::string& dir) {
    if (!g) return true;
    if (g->role != Role::leader) return false;
    auto it = g->followers.find(b);
    return it != g->followers.end() && it->second.reported && it->second.directory_id == dir &&
           it->second.lost_below.value() == 0 && !it->second.says_lost &&
           it->second.durable_end >= std::max(g->log->high_watermark(), g->epoch_start);
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
    // Its copy of either log lost data (the group log's ops are the shard's state too).
    const bool lost_data = (it != s->followers.end() && it->second.lost_below.value() != 0) || [&] {
      if (!g || g->role != Role::leader) return false;
      auto gi = g->followers.find(m.broker);
      return gi != g->followers.end() && gi->second.lost_below.value() != 0;
    }();
    const auto lag = lag_of(m.broker);
    if (lag > opts_.max_lag || (other_dir && now - s->leading_since > opts_.max_lag) || lost_data)
      out.emplace_back(lost_data ? std::chrono::milliseconds::max() : lag, m.broker);
  }
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.first > b.first; });
  for (const auto& [lag, b] : out) {
    if (next.size() <= s->ra.min_insync) break;
    next.erase(std::remove_if(next.begin(), next.end(),
                              [&](const InSyncReplica& m) { return m.broker == b; }),
               next.end());
    changed = true;
    why = lag == std::chrono::milliseconds::max() ? "a member's copy lost data it had synced"
                                                  : "a member lagged longer than replication.max_lag_ms";
  }

  // Grow: a replica whose disk holds everything up to the high watermark, and everything
  // written before this leadership began (KAFKA-7128: after a crash the leader's high
  // watermark may understate what was acknowledged), joins with the directory it fetched
  // from (replacing a stale entry for that broker).
  std::vector<std::pair<NodeId, Offset>> joiners;  // and their durable ends, checked again below
  if (!changed) {
    for (NodeId b : s->ra.replicas) {
      if (b == self_) continue;
      auto it = s->followers.find(b);
      if (it == s->followers.end() || !it->second.reported) continue;
      const auto& f = it->second;
      const bool member = std::any_of(next.begin(), next.end(), [&](const InSyncReplica& m) {
        return m.broker == b && m.directory_id == f.directory_id;
      });
      if (member || f.lost_below.value() != 0 || f.says_lost || f.durable_end < std::max(hwm, s->epoch_start) ||
          lag_of(b) > opts_.max_lag ||
          !group_caught_up(b, f.directory_id))
        continue;
      next.erase(std::remove_if(next.begin(), next.end(),
                                [&](const InSyncReplica& m) { return m.broker == b; }),
                 next.end());
      next.push_back(InSyncReplica{b, f.directory_id});
      joiners.emplace_back(b, f.durable_end);
      changed = true;
      why = "a replica caught up";
    }
  }
  if (!changed) return;
  s->in_sync_change_in_flight = true;
  // The proposed members hold the high watermark back while the change is written, on
  // the group log too: its committed ops (acks, dead letters) are the shard's state as
  // much as its records, and a member the catalog records must hold them.
  auto was_proposed = s->proposed_in_sync;
  auto group_was_proposed = g && glk.owns_lock() ? g->proposed_in_sync : std::vector<InSyncReplica>{};
  s->proposed_in_sync = next;
  update_high_watermark(*s);
  if (g && glk.owns_lock()) {
    g->proposed_in_sync = next;
    update_high_watermark(*g);
  }
  // The joiners were checked against the high watermark read above, but the log raises it
  // on its own, without this lock, up to the target it was given, once its own sync is
  // done. Now that they count (the target is lowered to them), it can rise no further past
  // them: read it again, and a joiner below it lacks records acknowledged meanwhile, so
  // the change waits for the next check (review finding: such a replica was recorded in
  // sync, and could be elected).
  const Offset raised = s->log->high_watermark();
  for (const auto& [b, end] : joiners) {
    const bool group_behind = [&, b = b] {
      if (!g || !glk.owns_lock() || g->role != Role::leader) return false;
      auto it = g->followers.find(b);
      return it == g->followers.end() || it->second.lost_below.value() != 0 ||
             it->second.durable_end < g->log->high_watermark();
    }();
    if (end < raised || group_behind) {
      s->proposed_in_sync = std::move(was_proposed);
      s->in_sync_change_in_flight = false;
      update_high_watermark(*s);
      if (g && glk.owns_lock()) {
        g->proposed_in_sync = std::move(group_was_proposed);
        update_high_watermark(*g);
      }
      return;
    }
  }
  if (glk.owns_lock()) glk.unlock();
  lk.unlock();
  change_in_sync(s, std::move(next), why);
}

void ReplicaManager::change_in_sync(const std::shared_ptr<Shard>& s,
                                    std::vector<InSyncReplica> in_sync, const char* why) {
  auto g = find(s->ref.stream, s->ref.shard, LogKind::groups);  // before any shard lock
  ShardUpdate u;
  std::uint64_t gen = 0;
  std::size_t before = 0;
  bool retrying = false;
  {
    std::lock_guard lk(s->mu);
    retrying = s->proposed_at.has_value();
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
  // Keeps the proposed set counting (both logs) until an assignment above `at` arrives.
  auto keep_counting = [&](ShardVersion at) {
    s->proposed_at = at;
    if (g) {
      std::lock_guard glk(g->mu);
      if (g->ref.incarnation == s->ref.incarnation) g->proposed_at = at;
    }
  };
  // `may_have_applied`: the group log has not necessarily had the newer assignment yet (the
  // engine assigns the data log first): it keeps counting until its own arrives.
  auto stop_counting = [&](bool may_have_applied = false) {
    s->proposed_in_sync.clear();
    s->proposed_at.reset();
    update_high_watermark(*s);
    if (g) {
      std::lock_guard glk(g->mu);
      if (g->ref.incarnation == s->ref.incarnation) {
        if (may_have_applied && g->ra.version == u.expected_version) {
          g->proposed_at = u.expected_version;
        } else {
          g->proposed_in_sync.clear();
          g->proposed_at.reset();
          update_high_watermark(*g);
        }
      }
    }
  };
  if (!r) {
    const bool refused = r.error().code == Errc::conflict || r.error().code == Errc::stale_route;
    if (refused) s->refused_at = u.expected_version;
    // May the catalog have applied it? Only if this try's outcome is unknown, or an
    // earlier try's was (a retry refused because that one applied, or failing otherwise).
    const bool may_have_applied = r.error().outcome == Outcome::uncertain || retrying;
    // A newer assignment already arrived (or the role changed): the catalog's word after
    // this change is here, and says which members count. Counting on would hold the high
    // watermark for a member that word may not name (a reassignment dropped it) until some
    // unrelated change came (review finding).
    const bool superseded = s->gen != gen || s->ra.version != u.expected_version;
    if (superseded || !may_have_applied) {
      // Not applied, or superseded: the proposed members count no more.
      stop_counting(may_have_applied);
    } else {
      // The catalog may have applied it (a lost answer; or a retry refused because the
      // first try did): acknowledging past a member it may record could lose records
      // once that member leads. Counted until the catalog's next word, retried meanwhile.
      keep_counting(u.expected_version);
    }
    log_(LogLevel::warn, shard_name(s->ref, s->kind) + ": in-sync set change to " + describe(in_sync) +
                             (refused ? " refused: " : " not confirmed (retried): ") + r.error().message);
    return;
  }
  // Applied: the catalog's in-sync set replaces the proposal, on both logs, before either
  // high watermark is computed again (so a joining member never stops counting).
  s->proposed_in_sync.clear();
  s->proposed_at.reset();
  log_(LogLevel::info, shard_name(s->ref, s->kind) + ": in-sync set is now " + describe(r->in_sync) +
                           " (version " + std::to_string(r->version.value()) + "): " + why);
  {
    std::lock_guard clk(mu_);
    if (r->in_sync.size() < before)
      ++counters_.isr_shrinks;
    else
      ++counters_.isr_expands;
  }
  if (s->gen == gen && r->version > s->ra.version) {
    s->ra.in_sync = r->in_sync;
    s->ra.version = r->version;
    s->log->set_in_sync(s->ra.in_sync.size(), s->ra.min_insync);
  }
  update_high_watermark(*s);
  // Lock order: a data log's entry, then its group log's.
  if (g) {
    std::lock_guard glk(g->mu);
    if (g->ref.incarnation == s->ref.incarnation && g->log) {
      if (r->version > g->ra.version) {
        g->ra.in_sync = r->in_sync;
        g->ra.version = r->version;
        g->log->set_in_sync(g->ra.in_sync.size(), g->ra.min_insync);
      }
      g->proposed_in_sync.clear();
      g->proposed_at.reset();
      update_high_watermark(*g);
    }
  }
}

std::optional<ShardVersion> ReplicaManager::ask_catalog(const std::shared_ptr<Shard>& s, const ReplicaAssignment& ra,
                                 const std::function<void(ShardUpdate&)>& fill, const std::string& what,
                                 void (ReplicaManager::*again)(const std::shared_ptr<Shard>&,
                                                               const ReplicaAssignment&)) {
  ShardUpdate u;
  {
    std::lock_guard lk(s->mu);
    if (s->removed || s->ra.version != ra.version) return std::nullopt;  // the shard moved on meanwhile
    u.key = s->ref.stream;
    u.shard = s->ref.shard;
    u.incarnation = s->ref.incarnation;
  }
  u.expected_version = ra.version;
  u.leader = ra.leader;
  u.leader_epoch = ra.leader_epoch;
  u.in_sync = ra.in_sync;
  fill(u);
  auto r = update_shard_(u);  // blocks for at most the metadata timeout; no lock held
  std::lock_guard lk(s->mu);
  const auto name = shard_name(s->ref, s->kind);
  if (!r) {
    // A conflict: the data log and the group op log both ask, or the controller moved the
    // shard; either way a newer assignment is on its way (and assign() asks again if it
    // still needs to). Anything else (the catalog is unreachable) is retried while the
    // assignment stays the same.
    const bool conflict = r.error().code == Errc::conflict || r.error().code == Errc::stale_route;
    log_(conflict ? LogLevel::info : LogLevel::warn,
         name + ": " + what + ": " + r.error().message + (conflict ? "" : " (retrying)"));
    if (!conflict && !s->removed)
      after(opts_.retry_backoff, [this, s, ra, again] { post_catalog([this, s, ra, again] { (this->*again)(s, ra); }, true); });
    return std::nullopt;
  }
  log_(LogLevel::info, name + ": " + what + ": done, the catalog is at version " +
                           std::to_string(r->version.value()) + " (leader " + std::to_string(r->leader.value()) +
                           " in epoch " + std::to_string(r->leader_epoch.value()) + ")");
  return r->version;
}

void ReplicaManager::request_new_epoch(const std::shared_ptr<Shard>& s, const ReplicaAssignment& ra) {
  ask_catalog(
      s, ra,
      [&](ShardUpdate& u) {
        u.leader = self_;
        u.leader_epoch = LeaderEpoch{ra.leader_epoch.value() + 1};
      },
      "asking for epoch " + std::to_string(ra.leader_epoch.value() + 1), &ReplicaManager::request_new_epoch);
}

void ReplicaManager::request_leave_in_sync(const std::shared_ptr<Shard>& s, const ReplicaAssignment& ra) {
  {
    std::lock_guard lk(s->mu);
    if (!s->log || !s->log->copy_lost()) return;  // caught up meanwhile (lost_copy_fetched)
  }
  const auto left = ask_catalog(
      s, ra,
      [&](ShardUpdate& u) { leave_in_sync(u, self_); },
      "this lost copy leaving the in-sync set", &ReplicaManager::request_leave_in_sync);
  if (!left) return;
  // The catalog no longer counts this copy from that version on. The loss is not forgotten
  // here, nor by the assignment that follows, but once the copy has caught up
  // (lost_copy_fetched): a leader of an older build may count it again on its record from
  // before the loss, before its first fetch corrects that record.
  std::lock_guard lk(s->mu);
  s->left_in_sync_at = *left;
}

void ReplicaManager::fence_group_log(Shard& data, const std::shared_ptr<Shard>& g,
                                     LeaderEpoch newer) {
  // Called with data.mu held (lock order: the manager's mu_, data, then groups; `g` was
  // looked up before data.mu was taken).
  std::lock_guard glk(g->mu);
  if (g->ref.incarnation != data.ref.incarnation || g->role != Role::leader) return;
  ++g->gen;
  drop_parked(*g);
  g->role = Role::none;
  g->epoch = newer;
  if (auto r = g->log->fence(newer); !r)
    log_(LogLevel::error, shard_name(g->ref, g->kind) + ": fence: " + r.error().message);
}

}  // namespace sluice::fs_storage
