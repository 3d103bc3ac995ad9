// The broker runtime: keeps the set of open shards equal to this broker's assignments in
// the catalog, serves publish, fetch and consumer groups on them, and implements
// sluice::Node for the API plugin.
//
// Catalog application (docs/architecture.md "Broker runtime", felix post-mortem). What to
// open, close and delete is decided by one pure function, plan_serving (serving_plan.h),
// from the catalog image (catalog_image.h) this broker has applied, what it holds, and its
// durable floors (serving_floors.h). The broker only applies plans:
//
//   start():  load <data.dir>/broker/floors (before anything is opened)
//             snapshot() -> image -> plan (every name)
//               ├─ 1. persist the raised floors (fsync), close what the plan closes
//               ├─ 2. apply EVERY delete word: delete incarnations <= it on disk (a broker
//               │     that slept through a delete and a recreate removes the old data
//               │     before it serves anything)
//               ├─ 3. check the registration's rule (a missing finalized feature: exit);
//               │     a broker back with another directory registers here
//               ├─ 4. open the shards assigned to this broker (recovery runs here)
//               ├─ 5. a copy this disk lost leaves the in-sync set (ShardLog::copy_lost)
//               ├─ 6. register with the features it implements (refused -> node exits);
//               │     only now is the broker live, so eligible for the controller to elect
//               └─ 7. watch(snapshot.seq), heartbeat thread
//
//   change feed (metadata thread) ──enqueue──> control thread, in seq order:
//     each change   replay it into the image, plan the name it touches, apply the plan
//     resync        snapshot(), plan every name against what is held and the floors (the
//                   guard holds across a resync: nothing is dropped before it is
//                   planned), watch again
//
// A refused incarnation (deleted, lower than one served, or a level-8 create after the
// finalize) is known but not served: every data call answers 409 conflict with the reason.
//
// Without the broker role (node.roles = controller) there is no storage: catalog calls
// work, data calls answer `unavailable`, and no floors are kept.
//
// Read-your-writes: catalog().create_stream / delete_stream answer only once this node has
// applied the change, so a 201 means the stream is servable here.
//
// Forwarding (docs/replication.md "Forwarding"): a client call for a shard another broker
// leads is sent to that leader over the peer transport (forwarding.h has the messages); the
// leader runs it as a local call and never forwards it again. No leader: shard_unavailable.
//
// Hot path: publish takes a shared lock to find the stream, builds one batch per shard
// touched (one allocation per batch, none per record) and appends. No lock is held across
// storage calls.
//
// Thread-safety: every public method may be called from any thread.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "catalog_image.h"
#include "forwarding.h"
#include "latency_histogram.h"
#include "peer_directory.h"
#include "serving_plan.h"
#include "sluice/host.h"
#include "sluice/metadata.h"
#include "sluice/node.h"
#include "sluice/storage.h"

namespace sluice::core {

// A catalog answer worth asking again: a transient outcome, or a metadata store between
// leaders, unreachable or slow.
bool transient_catalog_error(const Error& e);

// Every fleet feature this build implements (sluice/features.h known_features).
std::vector<std::string> implemented_features();

struct BrokerOptions {
  std::uint32_t max_records_per_publish = 100000;
  std::int64_t catalog_timeout_ms = 10000;
  std::int64_t heartbeat_interval_ms = 2000;
  std::string advertised_address;      // host:port of this node's API, for not_leader answers
  // What this broker reports (sorted): every feature this build implements, unless
  // `broker.features` names a subset (main.cc).
  std::vector<std::string> features = implemented_features();
  std::string peer_address;            // transport.address, registered as its peer_address
  // Filled from the catalog's broker registrations (snapshots and changes); may be null.
  std::shared_ptr<PeerDirectory> peers;
  // A forwarded call (fetch, group calls, one shard's publish) fails `timeout` after this.
  std::int64_t forward_timeout_ms = 10000;
  // How long the leader holds a forwarded long-poll wait before it answers "nothing new";
  // the forwarding broker then asks again until its client's poll ends.
  std::int64_t forward_wait_hold_ms = 20000;
  // Called (from the heartbeat thread) when the control plane refuses this broker while it
  // runs, e.g. a feature it lacks was finalized while it was paused. The node must stop.
  std::function<void(const std::string&)> on_fenced;
  // The first pause before a shard that did not open (or a delete that failed) is tried
  // again; it doubles with every failure, up to 30 s.
  std::chrono::milliseconds retry_min_ms{1000};
};

class BrokerRuntime final : public Node {
 public:
  // `storage` is null on a node without the broker role.
  BrokerRuntime(NodeInfo info, MetadataStore& catalog, StorageEngine* storage, BrokerOptions opts,
                PluginHost& host);
  ~BrokerRuntime() override;

  // Applies tombstones, registers, opens assigned shards, follows the change feed. Fails if
  // registration is refused, a delete the catalog asks for fails, or a shard's data is
  // damaged (corrupt_data). A shard that cannot be opened for another reason does not fail
  // the start: the node serves the rest, is not ready, and retries it.
  Result<void> start();
  // Closes shards. The broker stays registered (its heartbeats lapse; see stop()).
  void stop();
  // Whether the fleet feature is finalized in the catalog as this broker applied it (what
  // PluginHost::feature_finalized answers plugins; known before start() opens a shard, and
  // never taken back). Any thread.
  bool feature_finalized(std::string_view feature) const;

  NodeInfo info() override;
  bool ready(std::string* why) override;
  std::string metrics_text() override;
  MetadataStore& catalog() override;
  Result<StreamInfo> create_stream(const StreamKey& key, const StreamSpec& spec) override;
  Result<StreamInfo> stream(const StreamKey& key) override;
  void publish(const StreamKey& key, const std::vector<PublishRecord>& records,
               const PublishOptions& opts, PublishCallback cb) override;
  Result<FetchResult> fetch(const StreamKey& key, ShardIndex shard, Offset from,
                            std::uint32_t max_records, std::size_t max_bytes) override;
  Result<ShardStats> shard_stats(const StreamKey& key, ShardIndex shard) override;
  Result<std::uint64_t> notify_when_beyond(const StreamKey& key, ShardIndex shard, Offset offset,
                                           std::function<void()> cb) override;
  void cancel_notify(const StreamKey& key, ShardIndex shard, std::uint64_t handle) override;
  Result<std::vector<ShardStatus>> shards(const StreamKey& key) override;
  std::string leader_address(const StreamKey& key, ShardIndex shard) override;
  bool serves_locally(const StreamKey& key, ShardIndex shard) override;
  Result<Offset> roll_shard(const StreamKey& key, ShardIndex shard) override;
  Result<Offset> trim_shard(const StreamKey& key, ShardIndex shard, Offset before) override;
  Result<Assignment> move_leader(const StreamKey& key, ShardIndex shard, NodeId broker) override;
  Result<Assignment> elect_leader(const StreamKey& key, ShardIndex shard, Election kind,
                                  NodeId broker) override;
  Result<Assignment> reassign_shard(const StreamKey& key, ShardIndex shard,
                                    const std::vector<NodeId>& target) override;
  Result<DrainPlan> drain_broker(NodeId broker) override;
  Result<GroupDelivery> group_fetch(const StreamKey& key, ShardIndex shard, const std::string& group,
                                    std::uint32_t max_records, const GroupOptions& opts,
                                    std::optional<Incarnation> incarnation = std::nullopt) override;
  Result<void> group_ack(const StreamKey& key, ShardIndex shard, const std::string& group,
                         const std::vector<Offset>& offsets,
                         std::optional<Incarnation> incarnation = std::nullopt) override;
  Result<void> group_nack(const StreamKey& key, ShardIndex shard, const std::string& group,
                          const std::vector<Offset>& offsets,
                          std::optional<Incarnation> incarnation = std::nullopt) override;
  Result<std::vector<GroupPosition>> group_positions(const StreamKey& key,
                                                     const std::string& group) override;
  Result<std::vector<std::string>> groups(const StreamKey& key) override;
  Result<FetchResult> dead_letters(const StreamKey& key, ShardIndex shard, const std::string& group,
                                   Offset from, std::uint32_t max_records,
                                   std::size_t max_bytes) override;
  Result<std::uint64_t> replay_dead_letters(const StreamKey& key, ShardIndex shard,
                                            const std::string& group, Offset from, Offset to,
                                            std::optional<Incarnation> incarnation = std::nullopt) override;

  // Blocks until this node has applied every change up to `seq`, or the timeout.
  bool wait_applied(ChangeSeq seq, std::int64_t timeout_ms);
  // Blocks until this node no longer serves `key` at `incarnation` and no plan touching the
  // name is in progress (the delete's storage work is done too), or the timeout. The delete's own change seq is not part of the catalog contract, and a
  // store's status().applied can lag its own commit (postgres-meta learns of it through
  // its feed), so a wait on that returned before the delete was applied.
  bool wait_forgotten(const StreamKey& key, Incarnation incarnation, std::int64_t timeout_ms);

 private:
  // One stream incarnation as this broker knows it. `held[i]` is the open log of shard i when
  // this broker holds a replica of it; `shards[i]` is the same log when this broker also
  // leads it (serves clients), else null.
  struct StreamState {
    StreamInfo info;
    std::vector<Assignment> assignments;
    std::vector<std::shared_ptr<ShardLog>> held;
    std::vector<std::shared_ptr<ShardLog>> shards;
    std::atomic<std::uint32_t> sticky{0};
    // Non-empty: known but not served, and why (every data call answers conflict).
    std::string refused;
    // Per shard: why this broker could not open its replica (empty: opened, or not its to
    // open). The other shards are served; the failed ones are retried (retry_failed()).
    std::vector<std::string> open_failed;
  };
  struct Task {
    enum class Kind { change, resync } kind;
    ChangeEvent event;
  };

  std::shared_ptr<StreamState> find(const StreamKey& key);
  // The answer for a name find() does not know: not_found, "does not exist"; but from a
  // broker that closed everything (fenced, or stopping) unavailable, naming why: its empty
  // map says nothing of what the catalog holds (review finding).
  Error no_stream(const StreamKey& key);
  // Takes every stream out of service, then closes its shards (stop, fencing).
  void close_all_shards();
  // The shard's log when this broker leads it, else not_leader: what a forwarded call runs
  // on (it is never forwarded again).
  Result<std::shared_ptr<ShardLog>> find_shard(const StreamKey& key, ShardIndex shard);
  // The same for a state already looked up (and its incarnation checked): a second lookup
  // could find the next incarnation.
  Result<std::shared_ptr<ShardLog>> shard_in(const StreamState& st, const StreamKey& key, ShardIndex shard);
  // Where a client's call for the shard goes: `log` when this broker leads it, else the
  // leader to forward to. shard_unavailable when the shard has no leader; not_leader when
  // this node has no peer transport.
  struct ShardRoute {
    std::shared_ptr<ShardLog> log;
    NodeId leader{0};
    Incarnation incarnation;
  };
  // `expected`: the incarnation the caller's call is for; another one is conflict. The
  // route's log (or the forwarded header) is that incarnation's, so the call stays pinned.
  Result<ShardRoute> route(const StreamKey& key, ShardIndex shard,
                           std::optional<Incarnation> expected = std::nullopt);
  // The same for a state already looked up: a call spanning shards routes them all in it.
  Result<ShardRoute> route_in(const StreamState& st, const StreamKey& key, ShardIndex shard);
  Error not_led_here(const StreamState& st, const StreamKey& key, std::uint32_t shard) const;
  // --- forwarding (broker_forward.cc) ---
  void start_forwarding();
  void stop_forwarding();
  // Sends one forwarded call and waits for its answer (not from a transport thread).
  Result<std::string> forward(NodeId leader, PeerMessageType type, std::string payload,
                              std::int64_t timeout_ms);
  // forward() for a call that changes nothing: a call lost after it was sent answers
  // "transient", not "uncertain".
  Result<std::string> forward_read(NodeId leader, PeerMessageType type, std::string payload, std::int64_t timeout_ms);
  void serve_forwarded(PeerMessageType type, NodeId from, std::string payload, PeerResponder respond);
  void hold_wait(NodeId from, const fwd::ShardHeader& h, std::shared_ptr<ShardLog> log, Offset offset,
                 std::uint32_t hold_ms, std::uint64_t wait_id, PeerResponder respond);
  Result<std::shared_ptr<ShardLog>> forwarded_shard(const fwd::ShardHeader& h);
  std::string shard_header(const StreamKey& key, const ShardRoute& r, ShardIndex shard,
                           std::size_t extra = 0) const;
  Result<FetchResult> forward_fetch(const StreamKey& key, ShardIndex shard, const ShardRoute& r,
                                    Offset from, std::uint32_t max_records, std::size_t max_bytes);
  // A long-poll wait on a shard another broker leads (notify_when_beyond's handle).
  struct ForwardedWait {
    NodeId leader;
    std::string request;  // the kWait payload, sent again after each hold
    std::mutex mu;
    std::function<void()> cb;  // empty once fired or cancelled
  };
  void arm_forwarded_wait(std::uint64_t id, std::shared_ptr<ForwardedWait> w);
  void fire_forwarded_wait(std::uint64_t id);
  HeldStreams held();
  ServingNode serving_node() const;
  // Applies a plan (serving_plan.h) in its order. `registration`: at start, register after
  // the deletes and the opens, once the lost copies left their in-sync sets. Fails if the floors cannot be persisted (then nothing was
  // acted on) or, only with Registration::at_start, if registration or a delete fails or
  // a shard's data is damaged. Otherwise a shard that does not open is a failure of that
  // shard alone: the name's other shards are served, the node is not ready, and the name is
  // planned again after a pause.
  enum class Registration { at_start, done };
  Result<void> apply_plan(const ServingPlan& plan, Registration registration);
  // Makes the raised floors durable (an append, or a rewrite when the file is missing, torn
  // or mostly superseded lines) and then takes them into floors_; unchanged on failure.
  Result<void> persist_floors(const ServingFloors& raised);
  // A full plan (start, resync) names every delete word; only names with data on disk need
  // the storage engine's delete (one listing instead of a call per tombstone).
  void skip_removes_without_data(ServingPlan& plan);
  // Steps 3-5 of a plan outside start: per name its deletes, drops and opens, in order, the
  // names on up to kStorageWorkers threads. Failures are noted (the node is not ready).
  void act_per_name(const ServingPlan& plan, std::map<ShardRef, std::shared_ptr<ShardLog>>& opened,
                    std::map<ShardRef, std::string>& open_errors);
  void close_shard(const ShardAction& c);
  Result<void> delete_data(const DataDelete& d);
  // Applies changes queued together, in order: each is replayed into the image, then the
  // names they touch are planned once and the merged plan is applied (one floors sync for
  // all of them). Marks the last one applied.
  void forget_refused_deleted(const std::set<StreamKey>* scope);  // nullptr: every name
  void apply_changes(const std::vector<ChangeEvent>& events);
  Result<void> resync();
  // The plans of `names` against the image, merged into one (one floors sync).
  ServingPlan plan_names(const std::set<StreamKey>& names);
  // Runs the failed deletes again and plans the names of the shards that did not open again,
  // once retry_at_ has come (even while changes keep arriving); a failure again doubles the
  // pause, up to 30 s.
  void retry_failed();
  // After a plan: the next retry's time if a name failed, else none.
  void schedule_retry();
  Result<void> register_self();
  void control_loop();
  bool fenced();  // the control plane refused this broker (fenced_)
  // Why a leaderless shard has no leader (unavailable_reason, catalog_rules.h), from the
  // registered brokers read at most once a second (every call to such a shard asks).
  // `may_ask` false: from the last list only (a data call, perhaps on an HTTP I/O thread,
  // must not wait for the metadata store; a thread of its own keeps the list fresh).
  std::string leaderless_reason(const Assignment& a, bool may_ask = true) const;
  void drop_replica(const ShardAction& d);
  // The registered brokers with their liveness, refreshed from the catalog at most once a
  // second (the reasons and progress the shards listing shows).
  std::vector<BrokerInfo> known_brokers(bool may_ask = true) const;
  mutable std::mutex brokers_mu_;
  mutable std::vector<BrokerInfo> brokers_cache_;
  mutable std::chrono::steady_clock::time_point brokers_at_{};
  void heartbeat_loop();
  void enqueue(Task t);
  void mark_applied(ChangeSeq seq);
  void note_failure(const std::string& what);
  // Storage work that failed for one incarnation (logged; the node is not ready until it is
  // done, and retry_failed() tries it again). A delete is retried as it was asked, until it
  // succeeds: a later create of the name does not clear it (the new incarnation is above its
  // up_to). A shard that did not open is retried while a plan still wants that very shard
  // (same incarnation) here; see settle_opens().
  void note_failed_delete(const DataDelete& d, const std::string& what);
  void note_failed_open(const ShardRef& ref, const std::string& what);
  // After a plan acted: forgets the failed opens it carried out or no longer wants (another
  // incarnation, a shard no longer held here, a forgotten name), notes the new ones.
  void settle_opens(const ServingPlan& plan, const std::map<ShardRef, std::shared_ptr<ShardLog>>& opened,
                    const std::map<ShardRef, std::string>& open_errors);
  Error no_broker_role() const;
  // register_self() at start, retried on transient errors for metadata.timeout_ms.
  Result<void> register_at_start();
  // Runs `step` until it succeeds, fails for good (not transient_catalog_error), or
  // metadata.timeout_ms has passed; the first transient failure is logged as `what`.
  Result<void> while_transient(const std::string& what, const std::function<Result<void>()>& step);
  // At start: the catalog records this broker under another directory (set by the first
  // resync); it then registers before its opens (apply_plan).
  bool register_before_opens_ = false;
  // At start, before registering: the lost copies (ShardLog::copy_lost) that the catalog
  // counts in the in-sync set leave it (broker_shard_admin.cc). Answers each such shard's
  // assignment as the catalog last answered, newer than the plan's.
  std::map<ShardRef, Assignment> leave_in_sync_sets_of_lost_copies(
      const ServingPlan& plan, const std::map<ShardRef, std::shared_ptr<ShardLog>>& opened);

  NodeInfo info_;
  MetadataStore& catalog_;
  StorageEngine* storage_;  // null without the broker role
  BrokerOptions opts_;
  PluginHost& host_;
  std::unique_ptr<MetadataStore> facade_;

  std::shared_mutex streams_mu_;
  std::map<StreamKey, std::shared_ptr<StreamState>> streams_;
  // The catalog as applied, and the durable floors: the control thread's (and start()'s,
  // before the watch exists).
  CatalogImage image_;
  // image_'s finalized features, for other threads (feature_finalized).
  mutable std::mutex finalized_mu_;
  std::set<std::string, std::less<>> finalized_;
  void publish_finalized();  // control thread: image_.finalized into finalized_
  ServingFloors floors_;
  std::string floors_path_;  // empty without the broker role
  bool floors_appendable_ = false;  // the file exists whole: appends may follow (serving_floors.h)
  std::size_t floors_lines_ = 0;    // name lines in the file
  ChangeSeq snapshot_seq_;   // the last snapshot's: changes up to it are in image_
  // Control thread only. Set when a change could not be carried out (floors not saved, a
  // shard not opened): later changes wait for the resync it queued, and none is marked
  // applied before it, so wait_applied never answers for a change that did not happen.
  bool resync_pending_ = false;

  std::mutex applied_mu_;
  std::condition_variable applied_cv_;
  ChangeSeq applied_{0};
  std::string failure_;  // non-empty: something could not be applied; not ready (a resync clears it)
  std::string fenced_;   // non-empty: the control plane refused this broker; never cleared
  // What retry_failed() tries again (note_failed_delete, note_failed_open): per name, the
  // delete that failed and why; per shard incarnation, why it did not open.
  std::map<StreamKey, std::pair<DataDelete, std::string>> failed_deletes_;
  std::map<ShardRef, std::string> failed_opens_;
  // Names a plan is acting on (from before it takes them out of service until its storage
  // work is done), and how many plans have finished: wait_forgotten's "done" (a name leaves
  // service before its data is deleted).
  std::map<StreamKey, int> applying_;
  std::uint64_t plans_done_ = 0;
  // Guarded by tasks_mu_: when retry_failed() runs next on the control thread (none while
  // nothing failed), and the pause before it.
  std::optional<std::chrono::steady_clock::time_point> retry_at_;
  std::chrono::milliseconds retry_pause_{0};

  std::mutex tasks_mu_;
  std::condition_variable tasks_cv_;
  std::deque<Task> tasks_;
  bool stopping_ = false;
  std::thread control_;
  std::thread heartbeat_;
  std::thread brokers_refresh_;  // known_brokers() once a second
  std::unique_ptr<WatchHandle> watch_;
  std::atomic<bool> started_{false};
  std::atomic<bool> registered_{false};

  // The leader's held waits, by (forwarding broker, its wait id), so that a wait its client
  // gave up on is dropped at once (kCancelWait). Declared before timers_, which outlives
  // none of them.
  struct HeldWait;
  std::mutex held_mu_;
  std::map<std::pair<std::uint32_t, std::uint64_t>, std::shared_ptr<HeldWait>> held_waits_;

  // Forwarding: the transport (null without the broker role or in tests without one), the
  // leader's hold timers and a small pool for forwarded calls that may block (reads, group
  // calls that sync), so none runs on the transport's I/O thread.
  PeerTransport* transport_ = nullptr;
  bool serving_forwarded_ = false;  // our handlers are registered with transport_
  // A forwarded ack=quorum publish may wait for the leader's replication.quorum_timeout_ms:
  // it gets that plus forward_timeout_ms (set when forwarding starts).
  std::int64_t quorum_forward_timeout_ms_ = 40000;
  std::shared_ptr<fwd::Timers> timers_;
  std::unique_ptr<fwd::Workers> workers_;
  // Group fetch/ack/nack/replay on a replicated shard wait for a quorum commit (up to
  // replication.quorum_timeout_ms): their own pool, so they never hold up forwarded reads.
  std::unique_ptr<fwd::Workers> group_workers_;
  std::atomic<bool> closed_all_{false};  // close_all_shards() ran: find() knows nothing
  std::atomic<bool> reregister_wanted_{false};  // the heartbeat thread registers this broker again
  std::mutex waits_mu_;
  std::map<std::uint64_t, std::shared_ptr<ForwardedWait>> waits_;  // forwarded notify handles
  std::uint64_t next_wait_ = 1ull << 62;  // above any storage handle

  // Metrics (monotonic counters).
  std::atomic<std::uint64_t> m_publish_requests_{0}, m_publish_records_{0}, m_publish_bytes_{0},
      m_publish_errors_{0}, m_publish_duplicates_{0}, m_publish_inline_{0}, m_fetch_requests_{0},
      m_fetch_errors_{0}, m_deleted_dirs_{0};
  // Publish requests from arrival to answer, per ack mode (indexed by AckMode), successes only.
  std::array<LatencyHistogram, 3> m_publish_seconds_;
};

}  // namespace sluice::core
