// The replication manager's shared state (replica_manager.h): its work queue, and what it
// keeps per shard. Included by replica_manager.cc (assignment, threads), replica_leader.cc
// (answering followers, the high watermark), replica_in_sync.cc (the lag check, in-sync
// changes and this replica's own catalog requests) and replica_follower.cc (truncation and
// the fetch loop). Not part of the engine's interface.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "replica_manager.h"

namespace sluice::fs_storage {

struct ReplicaManager::Exec {
  std::mutex mu;
  std::condition_variable q_cv;      // workers: a task was queued, or stopping
  std::condition_variable timer_cv;  // timer thread: a timer was added, or stopping
  std::condition_variable catalog_cv;  // catalog thread: a task was queued, or stopping
  std::deque<std::function<void()>> queue;
  // Work that waits on the metadata store (update_shard: the periodic check's in-sync
  // changes, new-epoch requests), on its own thread: a metadata outage blocks it for up to
  // the metadata timeout per call, and the workers serving fetches, follower appends and
  // quorum deadlines must not wait behind it (review finding).
  std::deque<std::function<void()>> catalog_queue;
  bool check_queued = false;   // the periodic check is queued or running: never two
  bool expiry_queued = false;  // the periodic quorum-deadline pass, likewise
  std::map<TimerKey, std::function<void()>> timers;  // by deadline, then id
  std::uint64_t next_timer = 0;
  bool stopping = false;

  void post(std::function<void()> fn) {
    {
      std::lock_guard lk(mu);
      if (stopping) return;  // fn (and any responder it holds) is destroyed here
      queue.push_back(std::move(fn));
    }
    q_cv.notify_one();
  }
  // `front`: ahead of the check's per-shard steps (a new-epoch request: its shard has no
  // leader until it is answered).
  void post_catalog(std::function<void()> fn, bool front = false) {
    {
      std::lock_guard lk(mu);
      if (stopping) return;
      if (front) catalog_queue.push_front(std::move(fn));
      else catalog_queue.push_back(std::move(fn));
    }
    catalog_cv.notify_one();
  }
};

enum class Role { none, leader, follower };

struct ReplicaManager::Shard {
  std::mutex mu;
  ShardRef ref;
  LogKind kind = LogKind::data;
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
    Offset hwm_sent;  // the high watermark the last answer told it
    // Its durable end went backwards under the same directory during this leadership (its
    // disk lost what it had synced: a repair, a damaged or removed shard directory): what it
    // had reported. Until it holds that much again it counts for nothing and is dropped
    // from the in-sync set, where it stays electable (review finding). 0: never.
    Offset lost_below;
    // Reports in a row below what it had reported. One alone may be a stale request (a
    // retried fetch's original handled late): lost_below needs two.
    int reports_below = 0;
    Offset peak;  // the highest durable end it reported in this leadership
    // Its last fetch said that its copy was lost and has not caught up yet (the fleet
    // feature lost_copy_fetch): it does not join the in-sync set.
    bool says_lost = false;
  };
  std::map<NodeId, Follower> followers;
  Clock::time_point leading_since;
  Offset epoch_start;  // the log end when this leadership began
  std::vector<std::shared_ptr<Parked>> parked;
  bool in_sync_change_in_flight = false;
  // While a change is in flight (leader), and after one whose outcome is unknown (a
  // timeout: the catalog may have applied it) until an assignment above `proposed_at`
  // arrives: its members count toward the high watermark (maximal ISR). Mirrored on the
  // shard's group log.
  std::vector<InSyncReplica> proposed_in_sync;
  std::optional<ShardVersion> proposed_at;  // set while an unknown outcome keeps it counting
  // The catalog refused a change at this version: someone else moved the shard on, and
  // their assignment is on its way. No further change is tried until it arrives.
  std::optional<ShardVersion> refused_at;
  // The assignment version at which this replica asked the catalog for a new epoch
  // because it led the current one before it was reopened (request_new_epoch).
  std::optional<ShardVersion> new_epoch_asked_at;
  // The assignment version at which this lost copy asked to leave the in-sync set
  // (request_leave_in_sync).
  std::optional<ShardVersion> leave_asked_at;
  // The version at which the catalog applied that leave.
  std::optional<ShardVersion> left_in_sync_at;
  // A lost copy forgets its loss once it holds everything its leader held at the first
  // fetch answer of the leader's epoch (both logs; lost_copy_fetched): the
  // leader's log end in that answer, and the epoch it was given in. Reset with the epoch.
  std::optional<std::pair<LeaderEpoch, Offset>> lost_catch_up_to;
  bool lost_caught_up = false;
  std::string lost_forget_error;  // the last failure to forget it, logged once

  // Follower.
  bool truncated = false;  // the epoch-end truncation ran in this generation
  std::string last_error;  // logged once per distinct error, not once per retry
  std::string last_hold;   // the last "keeping everything below the high watermark" logged
};

struct ReplicaManager::Parked {
  std::mutex mu;
  bool done = false;
  std::weak_ptr<Shard> shard;
  FetchRequest req;
  PeerResponder respond;
  std::uint64_t notify = 0;
  // The wait_ms deadline, cancelled by whoever answers first (else its timer would wake
  // the timer thread and a worker wait_ms later, for nothing: one per parked fetch).
  std::optional<TimerKey> timer;
};


inline std::string shard_name(const ShardRef& r) { return r.to_string(); }
inline std::string shard_name(const ShardRef& r, LogKind kind) {
  return kind == LogKind::groups ? r.to_string() + " (group log)" : r.to_string();
}

inline bool holds(const std::vector<NodeId>& v, NodeId n) {
  return std::find(v.begin(), v.end(), n) != v.end();
}

}  // namespace sluice::fs_storage
