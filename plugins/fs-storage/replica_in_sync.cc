// The replication manager and the catalog: a leader's periodic lag check and the in-sync
// changes it proposes (Kafka's shrink and expand, through update_shard's compare-and-set),
// and the requests a replica makes for its own sake (a new epoch for a leader reopened in
// an epoch it led; a lost copy leaving the in-sync set). docs/replication.md "The
// replication manager", "A lost shard copy".
#include "replica_manager_internal.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "sluice/catalog_rules.h"

namespace sluice::fs_storage {

using namespace std::chrono_literals;

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

}  // namespace sluice::fs_storage
