// The follower side of the replication manager: KIP-279 truncation, the fetch loop, and
// starting over at the leader's log start (docs/replication.md "The replication manager",
// "Below the leader's log start").
#include "replica_manager_internal.h"

#include <algorithm>
#include <optional>
#include <utility>

namespace sluice::fs_storage {

using namespace std::chrono_literals;


Incarnated ReplicaManager::envelope(const Shard& s) const {
  return Incarnated{s.ref, s.epoch, self_, directory_id_, s.kind};
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
      log_(LogLevel::warn, shard_name(s->ref, s->kind) + ": replicating from broker " +
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
      [this, exec, s, gen, asked = req.epoch, decided_in = req.env.leader_epoch](Result<std::string> answer) {
        exec->post([this, s, gen, asked, decided_in, answer = std::move(answer)] {
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
          bool ask_again = false;
          if (resp->epoch < asked) {
            auto mine = log->end_offset_for(resp->epoch);
            if (!mine) return retry(s, gen, mine.error());
            target = std::min(target, mine->end);
            // This replica never held the leader's epoch: cut to where its own largest
            // epoch below it ends, and ask again with that epoch (KIP-279's iteration; it
            // once cut to its own high watermark instead, which may lag the leader's and so
            // cut committed records from an in-sync replica).
            ask_again = mine->epoch != resp->epoch;
          }
          const Offset hwm = log->high_watermark();
          // The leader lacks records below this replica's high watermark: committed here,
          // absent there (an unclean election, or a leader that lost data). They are kept,
          // and this replica stops following: fetching on, it would append the leader's
          // records after its own once the leader's log passed its end, and the two logs
          // would hold different records at the same offsets (review finding). It asks
          // again after each backoff: a leader that holds them ends the hold.
          std::optional<std::string> diverged;
          if (target < hwm) {
            const std::string msg = shard_name(s->ref, s->kind) + ": the leader's history would cut this replica to " +
                                    std::to_string(target.value()) + ", below its high watermark " +
                                    std::to_string(hwm.value()) + "; keeping everything below it and not "
                                    "following this leader (docs/replication.md \"Truncation\")";
            diverged = msg;
            bool fresh = false;  // logged once, not at every round of a replica stuck here
            {
              std::lock_guard lk(s->mu);
              fresh = s->last_hold != msg;
              if (fresh) s->last_hold = msg;
            }
            if (fresh) log_(LogLevel::error, msg);
          }
          // A held replica cuts nothing, not even above its high watermark: that lags the
          // old leader's by a fetch round (after a crash it is the close-time checkpoint),
          // so records there may be committed too, and they are the evidence of what the
          // election lost. It does not follow, so nothing lands after them (review).
          if (!diverged && target < log->durable_end()) {
            const auto from = log->durable_end();
            // In the epoch the question was asked in, or not at all: the gen check above
            // and this cut are not atomic, and a cut decided for the old leader could drop
            // records the new one already counted toward its high watermark (review).
            if (auto r = log->truncate_to(target, decided_in); !r) return retry(s, gen, r.error());
            log_(LogLevel::info, shard_name(s->ref, s->kind) + ": truncated the divergent suffix [" +
                                     std::to_string(target.value()) + ", " +
                                     std::to_string(from.value()) + ")");
            std::lock_guard clk(mu_);
            ++counters_.truncations;
          }
          if (diverged) {
            {
              std::lock_guard clk(mu_);
              ++counters_.diverged_holds;
            }
            return retry(s, gen, Error(Errc::conflict, *diverged));
          }
          // Each round asks a lower epoch, so this ends.
          if (ask_again && log->last_data_epoch() < asked) return truncate_step(s, gen);
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
  // Not before every serving broker can read it: an older leader refuses the flag.
  req.copy_lost = log->copy_lost() && opts_.lost_copy_fetch && opts_.lost_copy_fetch();
  auto exec = exec_;
  transport_.request(
      leader, kReplicaFetch, encode(req), opts_.fetch_wait + opts_.request_timeout,
      [this, exec, s, gen, base = req.fetch_offset, asked_in = req.env.leader_epoch](Result<std::string> answer) {
        exec->post([this, s, gen, base, asked_in, answer = std::move(answer)] {
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
          if (resp->log_start > base) {
            // The leader's log starts beyond everything this replica holds: retention
            // removed the rest there, once committed. Kafka's rule: drop the whole log,
            // below the high watermark too, and start over at the leader's log start
            // (docs/replication.md "Below the leader's log start").
            const std::string start = std::to_string(resp->log_start.value());
            if (!resp->chunk.empty())
              return retry(s, gen, Error(Errc::internal, "the leader sent a chunk at " +
                                                             std::to_string(base.value()) +
                                                             ", below its log start " + start));
            const Offset held_from = log->log_start();
            if (auto r = log->restart_at(resp->log_start, asked_in); !r) return retry(s, gen, r.error());
            log_(LogLevel::info, shard_name(s->ref, s->kind) + ": the leader's log starts at " +
                                     start + ", beyond this replica's [" +
                                     std::to_string(held_from.value()) + ", " +
                                     std::to_string(base.value()) +
                                     "): dropped it and started the log over there");
            std::lock_guard clk(mu_);
            ++counters_.log_restarts;
          }
          if (!resp->chunk.empty()) {
            if (auto r = log->append_replica(resp->chunk, base, resp->chunk_epoch, asked_in); !r) {
              if (r.error().code == Errc::conflict) {
                std::lock_guard lk(s->mu);
                if (s->gen == gen) s->truncated = false;  // not where the leader's log goes on: find the cut again
              }
              return retry(s, gen, r.error());
            }
            std::lock_guard clk(mu_);
            ++counters_.chunks_appended;
            counters_.bytes_appended += resp->chunk.size();
          }
          log->advance_high_watermark(std::min(resp->high_watermark, log->durable_end()));
          if (log->copy_lost()) lost_copy_fetched(s, asked_in, resp->log_end);
          // The leader dropped old segments (retention, or a cache compaction that restated
          // their live state at the log end): drop ours below min(its log start, our high
          // watermark) too (docs/architecture.md "Cache compaction"). A failure only keeps
          // more data here; the next answer tries again.
          if (resp->log_start > log->log_start()) {
            const Offset before = std::min(resp->log_start, log->high_watermark());
            if (auto t = log->trim_before(before); !t)
              log_(LogLevel::warn, shard_name(s->ref, s->kind) + ": could not trim below " +
                                       std::to_string(before.value()) + ": " + t.error().message);
          }
          {
            std::lock_guard lk(s->mu);
            if (s->gen != gen) return;
            s->last_error.clear();
          }
          fetch_step(s, gen);
        });
      });
}

void ReplicaManager::lost_copy_fetched(const std::shared_ptr<Shard>& s, LeaderEpoch asked_in,
                                       Offset leader_end) {
  // Both logs of the shard lost their copy with the directory, and each must hold what its
  // leader held before the loss is forgotten. Lock order: the manager's mu_ (find), then
  // the data log's entry, then its group log's.
  auto d = s->kind == LogKind::data ? s : find(s->ref.stream, s->ref.shard, LogKind::data);
  auto g = s->kind == LogKind::groups ? s : find(s->ref.stream, s->ref.shard, LogKind::groups);
  if (!d) return;
  std::shared_ptr<ReplicaLog> forget;
  std::string name, what;
  {
    std::unique_lock dlk(d->mu);
    std::unique_lock<std::mutex> glk;
    if (g) glk = std::unique_lock(g->mu);
    if (d->removed || d->ref.incarnation != s->ref.incarnation || !d->log || !d->log->copy_lost()) return;
    // The leader's log end in the first answer of its epoch holds every record acknowledged
    // so far: those acknowledged while this copy was counted (on what it really held, or on
    // an older leader's record from before the loss, which lies below that end too). A new
    // epoch takes the mark again: its leader may have cut what the last one had not
    // committed.
    if (!s->lost_catch_up_to || s->lost_catch_up_to->first != asked_in) {
      s->lost_catch_up_to = std::make_pair(asked_in, leader_end);
      s->lost_caught_up = false;
    }
    if (s->role == Role::follower && s->epoch == asked_in && s->log->durable_end() >= s->lost_catch_up_to->second)
      s->lost_caught_up = true;
    auto caught_up = [](const Shard& x) {
      return !x.removed && x.log && x.lost_caught_up && x.role == Role::follower && x.lost_catch_up_to &&
             x.lost_catch_up_to->first == x.epoch;
    };
    if (!caught_up(*d)) return;
    // The group log is assigned right after the data log: not there yet, it has not caught up.
    const bool group_expected = d->log->has_group_log();
    if (group_expected && (!g || g->ref.incarnation != d->ref.incarnation || !caught_up(*g))) return;
    forget = d->log;
    name = shard_name(d->ref, d->kind);
    what = name + ": this lost copy now holds everything its leader held when it began "
           "to fetch in epoch " + std::to_string(d->epoch.value()) + " (offset " +
           std::to_string(d->lost_catch_up_to->second.value()) +
           (group_expected ? ", and its group log too" : "") +
           "): it is an ordinary replica again, which the leader adds back to the in-sync set";
  }
  // Outside the locks (the removal syncs a directory). Safe whatever came meanwhile: the
  // copy holds every record acknowledged while it was counted.
  if (auto r = forget->forget_copy_lost(); !r) {
    // Tried again at the next answer; said once per distinct error.
    std::lock_guard lk(d->mu);
    if (d->lost_forget_error != r.error().message) {
      d->lost_forget_error = r.error().message;
      log_(LogLevel::warn, name + ": cannot forget the loss of this copy (tried again at each fetch): " +
                               r.error().message);
    }
    return;
  }
  log_(LogLevel::info, what);
}

}  // namespace sluice::fs_storage
