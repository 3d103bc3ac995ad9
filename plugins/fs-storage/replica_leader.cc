// The leader side of the replication manager: answering fetches and epoch-end questions,
// and the high watermark (docs/replication.md "The replication manager"). The in-sync set
// is replica_in_sync.cc's.
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
