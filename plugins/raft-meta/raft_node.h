// One libraft server on the libuv io (raft_uv + raft_uv_tcp), on its own thread.
//
// Thread model
//   - The node owns one thread ("raft thread") running a uv loop. libraft, the uv io, the
//     TCP transport and every StateMachine callback run only on that thread.
//   - Other threads reach it through a mutex-protected task queue and uv_async_send.
//     apply() and barrier() block the caller on a std::future for at most `timeout`.
//     Every raft request (ApplyReq / raft_barrier) is heap-allocated and owned by libraft
//     until its callback runs, even when the caller has already timed out.
//   - role(), last_applied(), commit_index() and leader() are atomics refreshed by a 20 ms uv timer.
//
// Lifecycle: start() once, stop() once (idempotent; the destructor calls it). stop() calls
// raft_close from a uv_async callback (never from an apply callback), closes the uv io and
// transport in raft's close callback, then joins the thread.
//
// Errors: apply() returns the StateMachine's ApplyResult (which may itself carry a definite
// error) or: not_leader (transient, nothing appended), unavailable (stopped or leadership
// lost / shutdown after proposing: Outcome::uncertain), timeout (Outcome::uncertain).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "catalog_fsm.h"
#include "sluice/error.h"
#include "sluice/host.h"

namespace sluice::raft_meta {

// What the node drives. Called only on the raft thread, in log order.
class RaftStateMachine {
 public:
  virtual ~RaftStateMachine() = default;
  virtual ApplyResult apply(std::uint64_t index, std::string_view entry) = 0;
  virtual std::string snapshot() = 0;  // empty = failure
  virtual Result<void> restore(std::string_view image) = 0;
};

struct RaftNodeOptions {
  std::uint64_t id = 1;
  std::string address = "127.0.0.1:7800";  // advertised and bound (IPv4 "a.b.c.d:port")
  std::string dir;                         // libraft's directory; must exist
  unsigned snapshot_threshold = 1024;
  unsigned snapshot_trailing = 128;
  unsigned election_timeout_ms = 1000;
  unsigned heartbeat_timeout_ms = 100;
  // Bootstrap a one-voter configuration on first start. False for a member that joins an
  // existing group: it starts with an empty configuration and waits to be added.
  bool bootstrap = true;
  // The cluster id every transport connection presents first (cluster_transport.h); read
  // on the raft thread. Empty function: libraft's stock TCP transport (no id).
  std::function<std::string()> cluster_id;
  // The members' shared secret and whether to require it (ClusterTransportOptions).
  std::string cluster_secret;
  bool require_auth = false;
  std::function<void(LogLevel, const std::string&)> log;  // may be empty
  // Group commit (docs/architecture.md "Metadata", batch entries): set, apply(..., batchable
  // = true) proposals that arrive while the leader's previous append is still being written
  // are held, then proposed together as one entry built by `combine` (their entries, in
  // order) once it is stored. Empty: every proposal is its own entry.
  std::function<std::string(const std::vector<std::string>&)> combine;
  // Asked on the raft thread just before combining (never for a lone proposal): false
  // proposes the held proposals one entry each (raft-meta: the group is below level 19).
  // Empty: always true.
  std::function<bool()> may_combine;
  std::size_t max_batch_commands = 64;     // bounds of one combined entry
  std::size_t max_batch_bytes = 256 * 1024;
  // Asked on the raft thread every 20 ms while this node leads (must not block): true hands
  // leadership to the most up-to-date voting follower (raft_transfer), one transfer at a
  // time. raft-meta: a held member cannot serve, and as leader it made the whole group
  // unavailable (it wins elections like any member: its log is complete). Empty: never.
  std::function<bool()> step_down_wanted;
};

// One server of the Raft configuration, as libraft has it.
struct RaftServer {
  std::uint64_t id = 0;
  std::string address;
  int role = 0;  // RAFT_STANDBY / RAFT_VOTER / RAFT_SPARE
  bool voter = false;
};

enum class RaftRole { unavailable, follower, candidate, leader };
std::string_view to_string(RaftRole);

class RaftNode {
 public:
  RaftNode(RaftNodeOptions options, RaftStateMachine& sm);
  ~RaftNode();
  RaftNode(const RaftNode&) = delete;
  RaftNode& operator=(const RaftNode&) = delete;

  // Starts the thread, opens the raft directory, bootstraps a single-member configuration
  // on first start (RAFT_CANTBOOTSTRAP on a restart is expected) and calls raft_start,
  // which loads the snapshot and log. Returns once raft_start has returned.
  Result<void> start();
  void stop();

  // Proposes `entry` as a RAFT_COMMAND and waits until it is applied. The entry is padded
  // with ASCII spaces to a multiple of 8 bytes (a libraft uv requirement), so the state
  // machine must ignore trailing spaces.
  // `batchable` (with options.combine set): the entry may be proposed inside a combined
  // entry with others; its result is then the state machine's ApplyResult::inner entry for
  // it. A combined entry refused as a whole with `conflict` (ApplyResult::inner empty) is
  // proposed again as separate entries, which is safe because it changed nothing.
  Result<ApplyResult> apply(std::string_view entry, std::chrono::milliseconds timeout,
                            bool batchable = false);
  // Appends a barrier and waits until it (and so everything before it) is applied.
  Result<void> barrier(std::chrono::milliseconds timeout);

  // Leader only. Adds `id` at `address` and promotes it to voter once it has caught up
  // (raft_add, then raft_assign). Already a voter at that address: nothing to do.
  Result<void> add_voter(std::uint64_t id, const std::string& address,
                         std::chrono::milliseconds timeout);
  // Leader only. Removes `id` from the configuration.
  Result<void> remove_server(std::uint64_t id, std::chrono::milliseconds timeout);
  // The current configuration (as this server knows it).
  Result<std::vector<RaftServer>> configuration(std::chrono::milliseconds timeout);
  // Apply results kept for proposals in flight (tests: none is kept for entries nobody
  // here proposed).
  Result<std::size_t> unclaimed_results(std::chrono::milliseconds timeout);

  // Tasks submitted and not yet taken by the raft thread (tests: a proposal has reached
  // the node while the raft thread is busy).
  std::size_t queued_tasks() {
    std::lock_guard lk(q_mu_);
    return queue_.size();
  }

  RaftRole role() const { return role_.load(); }
  std::uint64_t last_applied() const { return last_applied_.load(); }
  // The highest index known committed (on a follower: what the leader's last message said).
  std::uint64_t commit_index() const { return commit_index_.load(); }
  std::uint64_t leader_id() const { return leader_id_.load(); }
  bool running() const { return started_.load() && !stopping_.load(); }

  struct Impl;  // libraft / libuv state; defined in raft_node.cc

 private:
  // Runs `task` on the raft thread. `closing` is true when the node is shutting down and
  // the task must only fail its promise. Returns false if the node no longer accepts tasks.
  bool submit(std::function<void(bool closing)> task);
  void thread_main(std::promise<Result<void>>* started);
  void log(LogLevel level, const std::string& msg) const;

  friend struct Impl;
  RaftNodeOptions opts_;
  RaftStateMachine& sm_;
  std::unique_ptr<Impl> impl_;
  std::thread thread_;

  std::mutex q_mu_;
  std::deque<std::function<void(bool)>> queue_;  // guarded by q_mu_
  bool accepting_ = false;                        // guarded by q_mu_

  std::atomic<bool> started_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<RaftRole> role_{RaftRole::unavailable};
  std::atomic<std::uint64_t> last_applied_{0};
  std::atomic<std::uint64_t> commit_index_{0};
  std::atomic<std::uint64_t> leader_id_{0};
};

}  // namespace sluice::raft_meta
