// MetadataStore on a Raft group (docs/architecture.md "Metadata"): one to five controller members,
// durable on disk (libraft's uv io), surviving SIGKILL, leader loss and partitions.
//
// Membership: the first member bootstraps a one-voter group; others start with
// `metadata.join` and ask any member (join_member over the controller RPC, carrying the
// cluster id and their level). The leader records the member (a replicated join_member
// entry, refused below the level floor or for a taken id), then adds it to libraft's
// configuration and promotes it to voter once it caught up. A restarted member announces
// its level again the same way, so a rolling upgrade changes the group level.
//
// Followers forward every write and every read that must be current to the leader over
// the controller RPC (a forwarded request is never forwarded again: it answers not_leader
// naming the leader instead). Watches are served from the member's own applied log.
//
// Thread model
//   - raft thread (RaftNode): libraft, the uv io, CatalogFsm::apply, snapshot, restore.
//     apply holds fsm_mu_ only while touching the catalog, then wakes the delivery thread.
//   - delivery thread: one per store; runs every watch callback (WatchRegistry::deliver),
//     one at a time, in ChangeSeq order, reading the `changes` table under fsm_mu_ but
//     calling user code with no lock held.
//   - callers: any thread. Mutations block on RaftNode::apply (metadata.timeout_ms).
//     What a proposal reads from the catalog (proposal_context) is kept per
//     CatalogFsm::generation(), so a proposal takes fsm_mu_ only after that moved.
//     Reads are linearizable: a raft_barrier first (every entry committed before the read
//     began is applied), then a read of the applied state under fsm_mu_.
//
// Lock order: watch_mu_ and fsm_mu_ are never held together.
//
// Files: raft_meta_config.cc, raft_meta_bootstrap.cc (start/stop), raft_meta_members.cc
// (members, forwarding), raft_meta_catalog.cc (apply, catalog calls), raft_meta_feed.cc
// (watches).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "catalog_fsm.h"
#include "proposer.h"
#include "raft_node.h"
#include "sluice/host.h"
#include "sluice/levels.h"
#include "sluice/metadata.h"
#include "sluice/watch_registry.h"

namespace sluice::raft_meta {

class RpcTls;

// Configuration read from the host (documented in README.md).
struct RaftMetaConfig {
  std::string raft_dir;                        // raft.dir, default <data_dir>/raft
  std::string address = "127.0.0.1:7800";      // raft.address (raft.port overrides the port)
  unsigned snapshot_threshold = 1024;          // raft.snapshot_threshold
  unsigned snapshot_trailing = 128;            // raft.snapshot_trailing
  unsigned election_timeout_ms = 1000;         // raft.election_timeout_ms
  unsigned heartbeat_timeout_ms = 100;         // raft.heartbeat_timeout_ms
  std::chrono::milliseconds timeout{10000};    // metadata.timeout_ms
  std::chrono::milliseconds start_timeout{30000};  // metadata.start_timeout_ms
  // metadata.level: the level this member runs (and proposes) at, kLowestMetadataLevel..
  // kBuildMetadataLevel. Below a feature's required level the member behaves as a build
  // that has never heard of it: it bootstraps without it and proposes incarnation 0.
  MetadataLevel level = kBuildMetadataLevel;
  // metadata.bootstrap_hold_back: features a new cluster does NOT finalize at bootstrap.
  std::vector<std::string> bootstrap_hold_back;
  // broker.session_timeout_ms: a broker is live if it registered or heartbeated within it.
  std::chrono::milliseconds session_timeout{10000};
  // metadata.rpc_address: the controller RPC listener (rpc.h); empty string disables it.
  std::string rpc_address = "127.0.0.1:7801";
  // metadata.join: controller RPC addresses of existing members. Set: a member with an
  // empty raft directory joins that group instead of bootstrapping its own.
  std::vector<std::string> join;
  // raft.cluster_secret_file's secret (cluster_auth.h; never logged), and raft.require_auth.
  std::string cluster_secret;
  bool require_auth = false;
  // metadata.rpc_tls.*: the controller RPC's TLS, server and clients alike; null: plain.
  std::shared_ptr<RpcTls> rpc_tls;
  // Liveness clock (leader memory only; never reaches apply). Tests inject one.
  std::function<std::chrono::steady_clock::time_point()> clock;
  // Changes kept for watchers. Part of the replicated state's meaning, so it is not read
  // from configuration: only tests change it, and all members must agree.
  std::size_t change_retention = kDefaultChangeRetention;

  // Throws std::invalid_argument on a malformed value (a configuration boundary).
  static RaftMetaConfig from_host(const PluginHost& host);
};

class RaftMetaStore final : public MetadataStore {
 public:
  // Reads the configuration (may throw std::invalid_argument); does no I/O.
  explicit RaftMetaStore(PluginHost& host);
  RaftMetaStore(PluginHost& host, RaftMetaConfig config);
  ~RaftMetaStore() override;

  Result<void> start() override;
  void stop() override;
  MetadataStatus status() override;
  bool is_controller() override;
  // SIGHUP: the controller RPC's certificates (metadata.rpc_tls.*), if set.
  Result<void> reload() override;

  Result<TenantInfo> create_tenant(const std::string& name) override;
  Result<void> delete_tenant(const std::string& name) override;
  Result<std::vector<TenantInfo>> list_tenants() override;
  Result<NamespaceInfo> create_namespace(const std::string& tenant, const std::string& name) override;
  Result<void> delete_namespace(const std::string& tenant, const std::string& name) override;
  Result<std::vector<NamespaceInfo>> list_namespaces(const std::string& tenant) override;
  Result<StreamInfo> create_stream(const StreamKey& key, const StreamSpec& spec) override;
  Result<StreamInfo> delete_stream(const StreamKey& key) override;
  Result<StreamInfo> get_stream(const StreamKey& key) override;
  Result<std::vector<StreamInfo>> list_streams(const std::string& tenant,
                                               const std::string& ns) override;
  Result<CatalogSnapshot> snapshot() override;

  Result<BrokerInfo> register_broker(const BrokerRegistration& reg) override;
  Result<void> heartbeat_broker(NodeId id) override;
  Result<void> unregister_broker(NodeId id) override;
  Result<std::vector<BrokerInfo>> list_brokers() override;
  Result<std::vector<FeatureInfo>> list_features() override;
  Result<FeatureInfo> finalize_feature(const std::string& name) override;
  Result<std::vector<Tombstone>> list_tombstones() override;
  Result<Assignment> update_shard(const ShardUpdate& update) override;

  Result<CacheInfo> create_cache(const StreamKey& key, const CacheSpec& spec) override;
  Result<CacheInfo> delete_cache(const StreamKey& key) override;
  Result<CacheInfo> get_cache(const StreamKey& key) override;
  Result<std::vector<CacheInfo>> list_caches(const std::string& tenant, const std::string& ns) override;
  Result<CounterInfo> create_counter(const StreamKey& key) override;
  Result<CounterInfo> delete_counter(const StreamKey& key) override;
  Result<CounterInfo> get_counter(const StreamKey& key) override;
  Result<std::vector<CounterInfo>> list_counters(const std::string& tenant, const std::string& ns) override;

  Result<MembersView> list_members() override;
  Result<MemberInfo> join_member(const JoinRequest& req) override;
  Result<void> remove_member(NodeId id) override;
  // This member's own view (never forwarded): role, level, held state, applied index.
  MemberInfo local_member_status();
  // On the leader only (never forwarded): the change sequence applied once a barrier has
  // committed, which covers everything committed before the call (a read index: Raft
  // thesis 6.4). Elsewhere not_leader. Restarted followers catch up to it before they check
  // their level (raft_meta_bootstrap.cc).
  Result<ChangeSeq> read_index();
  // Set while the catalog is held (CatalogFsm::held): the member serves nothing from its
  // state, the change feed included.
  std::optional<Error> held_error();

  // While alive on a thread, calls on that thread are not forwarded to the leader (the RPC
  // server sets it for requests that were forwarded to it: no forwarding loops).
  struct NoForward {
    NoForward();
    ~NoForward();
    bool prev;
  };

  std::unique_ptr<WatchHandle> watch(ChangeSeq after,
                                     std::function<void(const ChangeEvent&)> on_change,
                                     std::function<void()> resync) override;

  // The bound port of the controller RPC listener (0 when not serving).
  int rpc_port() const;

  // For tests: the catalog's state hash (divergence checks).
  std::uint64_t state_hash();
  // For tests and the RPC server: the changes after `after` (at most `limit`).
  ChangeBatch changes_after(ChangeSeq after, std::size_t limit);
  // The RPC server's long poll: the changes after `after` as soon as there are any (woken
  // by every apply and restore, never by a timer), else an empty batch at `deadline`, or
  // at once when `stop` is set (wake_long_polls wakes the waiters to see it).
  ChangeBatch wait_changes_after(ChangeSeq after, std::size_t limit,
                                 std::chrono::steady_clock::time_point deadline,
                                 const std::atomic<bool>& stop);
  void wake_long_polls();
  // The features this member's level knows (required_level <= metadata.level).
  std::vector<std::string> features_known_at_level() const;
  // The create_stream command this member would propose now (placement, incarnation).
  // With replication_factor > 1 the placement comes from place_replicas; when that fails
  // (too few live brokers) the placement is left unassigned, which apply refuses.
  Command stream_create_command(const StreamKey& key, const StreamSpec& spec);
  // place_replicas over the registered brokers with this leader's view of liveness.
  Result<std::vector<std::vector<NodeId>>> replica_placement(const StreamKey& key,
                                                             const StreamSpec& spec);

 private:
  // The RaftStateMachine the node drives (raft thread): forwards to the catalog.
  class FsmAdapter final : public RaftStateMachine {
   public:
    explicit FsmAdapter(RaftMetaStore& s) : s_(s) {}
    ApplyResult apply(std::uint64_t index, std::string_view entry) override;
    std::string snapshot() override;
    Result<void> restore(std::string_view image) override;

   private:
    RaftMetaStore& s_;
  };
  void catalog_changed();  // wakes the delivery thread

  Result<ApplyResult> propose(const Command& c);
  // Level 19: whether the group (every recorded member) is at 19, so that batchable
  // proposals may share an entry. Asked by RaftNode on the raft thread before combining.
  bool group_allows_batches();
  // The leader's client when this member is a follower that knows its leader (and the call
  // is not itself forwarded); null: handle locally.
  std::shared_ptr<MetadataStore> leader_client();
  Error not_leader_error();
  ProposerView proposer_view();
  // What a proposal reads from the catalog besides its own entry: the proposer view, the
  // registered brokers, the finalized features, and whether this member is held. Read
  // under fsm_mu_ once per CatalogFsm::generation() and then shared, so a create on the
  // leader neither runs catalog queries nor waits for the fsm lock while an entry is being
  // applied (docs/benchmarks.md "sluice-raft-bench"). As current as a read under the lock:
  // those tables change only after the generation moved.
  struct ProposalContext {
    std::uint64_t generation = 0;
    ProposerView view;
    std::optional<MetadataLevel> recorded_group;  // nullopt: no member recorded yet
    std::vector<BrokerInfo> brokers;              // registered (live is not filled in)
    std::set<std::string, std::less<>> finalized;
    std::optional<Error> held;
  };
  std::shared_ptr<const ProposalContext> proposal_context();
  void note_leadership();  // a new leader starts the brokers' liveness grace period
  Result<MemberInfo> announce(const std::vector<std::string>& via);  // join or re-join
  std::vector<std::string> peer_rpc_addresses();
  Result<void> read_barrier();
  Result<void> read_barrier_any();
  void log(LogLevel level, const std::string& msg);
  void delivery_main();
  std::chrono::steady_clock::time_point now() const;
  // Registered brokers with `live` filled from leader memory. Caller holds no lock.
  std::vector<BrokerInfo> brokers_with_liveness(std::vector<BrokerInfo> registered);
  std::vector<BrokerInfo> serving_brokers(const std::vector<BrokerInfo>& registered);

  PluginHost& host_;
  RaftMetaConfig cfg_;

  std::mutex fsm_mu_;
  CatalogFsm fsm_;  // guarded by fsm_mu_
  ChangeSeq hash_at_{~0ull};      // guarded by fsm_mu_: state_hash() cache for member status
  std::uint64_t hash_ = 0;        // guarded by fsm_mu_
  bool hash_dirty_ = true;   // guarded by fsm_mu_: set by restore (same index, new state)
  FsmAdapter adapter_{*this};
  std::mutex ctx_mu_;  // held only to copy ctx_; never with fsm_mu_
  std::shared_ptr<const ProposalContext> ctx_;  // guarded by ctx_mu_

  std::mutex life_mu_;  // serializes start/stop
  std::mutex node_mu_;
  std::shared_ptr<RaftNode> node_;  // guarded by node_mu_; callers keep a copy while waiting
  std::shared_ptr<RaftNode> node();
  std::atomic<bool> ready_{false};
  // The catalog is held (CatalogFsm::held): set after every apply and restore, read by the
  // raft thread, which hands leadership away while it is set (RaftNodeOptions::step_down_wanted).
  std::atomic<bool> held_now_{false};
  std::atomic<bool> starting_{false};
  std::unique_ptr<class RpcServer> rpc_;  // guarded by life_mu_
  std::atomic<int> rpc_port_{0};
  std::string advertised_rpc_;            // set by start(): rpc address with the bound port
  std::mutex fwd_mu_;
  // Clients to the leader's RPC, each one connection that serializes its requests. A
  // forwarded call leases an idle one, or opens another when none is idle, so every
  // concurrent call has a connection of its own (their number is bounded by the callers'
  // threads); at most kForwardIdle are kept idle. A lease taken before the leader moved
  // (or the store stopped: fwd_epoch_) is closed when returned, not kept.
  static constexpr std::size_t kForwardIdle = 32;
  // At most this many open (idle or leased) in the current epoch; more callers wait for one.
  static constexpr std::size_t kForwardOpen = 128;
  std::condition_variable fwd_cv_;  // a connection came back or closed, or the epoch moved
  std::size_t fwd_open_ = 0;        // guarded by fwd_mu_: opened in fwd_epoch_, not yet closed
  bool fwd_stopped_ = false;        // guarded by fwd_mu_: stop() ran; start() clears it
  std::string fwd_addr_;                                            // guarded by fwd_mu_
  std::vector<std::shared_ptr<class RemoteMetadataStore>> fwd_idle_;  // guarded by fwd_mu_
  std::uint64_t fwd_epoch_ = 0;                                     // guarded by fwd_mu_
  void return_forward_client(std::shared_ptr<class RemoteMetadataStore> c, std::uint64_t epoch);
  std::atomic<bool> was_leader_{false};

  // Broker liveness: leader memory, not replicated (docs/architecture.md "Metadata").
  std::mutex live_mu_;
  std::map<std::uint32_t, std::chrono::steady_clock::time_point> last_seen_;  // live_mu_
  std::chrono::steady_clock::time_point grace_until_{};  // live_mu_: restart grace
  // Features a finalize is deciding right now (from before its gate to its commit), with
  // how many finalizes of each: a heartbeat or registration of a broker lacking one is
  // refused (transient) instead of making it live, else it could be serving once the
  // feature is final (docs/upgrades.md). live_mu_. Nothing is held across the proposal.
  std::map<std::string, int, std::less<>> finalizing_;
  std::uint64_t finalizes_ended_ = 0;  // live_mu_: finalizes that left finalizing_
  std::uint64_t finalizes_ended();      // takes live_mu_
  // live_mu_ held; `ended_before`: finalizes_ended() before the caller read the features.
  std::optional<Error> lacks_finalizing(const std::vector<std::string>& features, NodeId id,
                                        std::uint64_t ended_before) const;

  // Watches: the SDK fan-out (watch_registry.h), delivered by delivery_main.
  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  std::uint64_t wake_seq_ = 0;        // bumped on every apply/restore; guarded by watch_mu_
  bool delivery_stop_ = false;        // guarded by watch_mu_
  WatchRegistry watches_{[this] { catalog_changed(); }};
  std::thread delivery_;
};

}  // namespace sluice::raft_meta
