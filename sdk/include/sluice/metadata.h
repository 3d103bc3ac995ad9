// The metadata (catalog) contract: tenants, namespaces and streams, with a totally ordered
// change feed. Implemented by raft-meta and postgres-meta with identical meaning.
//
// Every successful mutation is durable in the store and has a ChangeSeq. Reads reflect
// at least every mutation this node has acknowledged (read-your-writes); cross-node
// linearizability is the backend's job (a Raft barrier, a Postgres transaction).
//
// Incarnations (level 10, docs/architecture.md "Names and incarnations", docs/metadata-levels.md, felix post-mortem): until the fleet
// feature `stream_incarnations` is finalized, creates store incarnation 0 and deletes write
// no tombstone (the level-8 behaviour). After it, a create decides
// max(proposed, tombstone + 1) inside its own write, and a delete records a tombstone and
// an assignment change. The rules are the pure functions of features.h.
//
// Errors: not_found, already_exists, conflict, invalid_name/argument (definite);
// unavailable/not_leader (transient); timeout (uncertain: the change may have committed).
//
// Thread-safety: all methods may be called from any thread; they block for at most the
// configured metadata timeout. Watch callbacks run on a backend thread, in ChangeSeq
// order, one at a time, and must not block for long.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sluice/error.h"
#include "sluice/fleet_info.h"
#include "sluice/types.h"

namespace sluice {

// "Every incarnation of this name up to and including deleted_up_to is deleted."
// One per name, overwritten by the next delete, kept forever.
struct Tombstone {
  StreamKey key;
  Incarnation deleted_up_to;
  ChangeSeq seq;  // the delete that wrote it
};

// Which brokers hold one shard of one stream incarnation, and which leads it. Ownership
// compares (incarnation, generation); see assignment_supersedes().
//
// Replication state (docs/replication.md): `replicas` are the brokers holding a copy (the
// first is the preferred leader); `leader` is 0 when the shard has no leader; `in_sync` is
// the in-sync set as (broker, directory.id) pairs; `version` rises with every change to
// leader, leader_epoch or in_sync, each a compare-and-set (update_shard).
//
// Reassignment (docs/replication.md "Reassignment", level 17): while `target_replicas` is
// not empty the shard is moving to that replica list. `replicas` then holds the old list
// followed by the new brokers, which follow the leader and join the in-sync set as they
// catch up; the controller moves leadership into the target if needed, then makes
// `replicas` the target (in its order) and empties `target_replicas`.
struct Assignment {
  StreamKey key;
  ShardIndex shard;
  Incarnation incarnation;
  Generation generation;
  NodeId leader;
  std::vector<NodeId> replicas;
  LeaderEpoch leader_epoch;
  std::vector<InSyncReplica> in_sync;
  ShardVersion version;
  std::vector<NodeId> target_replicas;  // empty: no reassignment in progress
};

// A compare-and-set on one shard incarnation's replica state. Applied only when the stored
// version equals `expected_version` (else conflict naming the stored version) and the
// incarnation is the current one (else not_found, or stale_route for another
// incarnation). The rules (catalog_rules.h check_shard_update) hold in both backends:
// the leader is 0 or a replica; the leader epoch never falls, and rises when the leader
// changes; in_sync is a set of replicas and holds the leader.
//
// With `replicas` set (a reassignment step, metadata level 17 and the fleet feature
// shard_reassignment) the update also replaces the replica list and the target
// (`target_replicas`, empty when the reassignment ends), and the rules above apply to the
// new list. Without it the replica list and the target stay as stored.
struct ShardUpdate {
  StreamKey key;
  ShardIndex shard;
  Incarnation incarnation;
  ShardVersion expected_version;
  NodeId leader;
  LeaderEpoch leader_epoch;
  std::vector<InSyncReplica> in_sync;
  std::optional<std::vector<NodeId>> replicas;
  std::vector<NodeId> target_replicas;  // only with `replicas`
};

// A cache (docs/api.md): keys with values and a TTL, known like a stream by
// (tenant, namespace, name) plus an incarnation. Cache incarnations follow the stream rules
// under the fleet feature `cache_incarnations` (metadata level 14).
struct CacheSpec {
  std::int64_t default_ttl_ms = -1;  // -1: entries do not expire unless a put says so
  bool operator==(const CacheSpec&) const = default;
};

struct CacheInfo {
  StreamKey key;
  Incarnation incarnation;
  CacheSpec spec;
  ChangeSeq created_seq;
};

// A counter (docs/api.md "Counters"): named int64 values by key, known like a cache by
// (tenant, namespace, name) plus an incarnation. Counters exist from metadata level 18 on
// (fleet feature `counters`); their incarnations follow the cache rules and never repeat
// (a counter is created only once `counters` is finalized, so it is always incarnated).
struct CounterInfo {
  StreamKey key;
  Incarnation incarnation;
  ChangeSeq created_seq;
  bool operator==(const CounterInfo&) const = default;
};

struct ChangeEvent {
  enum class Kind { tenant_created, tenant_deleted, namespace_created, namespace_deleted,
                    stream_created, stream_deleted, feature_finalized, broker_registered,
                    broker_unregistered, cache_created, cache_deleted, shard_changed,
                    counter_created, counter_deleted };
  Kind kind;
  ChangeSeq seq;
  std::string tenant;
  std::string ns;
  StreamInfo stream;  // stream events: the stream (for a delete, the deleted incarnation)
  // stream_created: the new assignments. stream_deleted: the assignments it removes
  // (a delete always records this change, so brokers drop what they held).
  // shard_changed: the one assignment as the update left it (`stream.key` is its stream).
  std::vector<Assignment> assignments;
  std::optional<Tombstone> tombstone;  // stream_deleted: the tombstone written, if any
  std::string feature;                 // feature_finalized
  BrokerInfo broker;                   // broker_registered / broker_unregistered
  CacheInfo cache;                     // cache events (for a delete, the deleted incarnation)
  // cache_deleted: the cache tombstone written, if any (ChangeEvent::tombstone stays empty).
  std::optional<Tombstone> cache_tombstone;
  CounterInfo counter;                 // counter events (for a delete, the deleted incarnation)
  std::optional<Tombstone> counter_tombstone;  // counter_deleted: the tombstone written
};
std::string_view to_string(ChangeEvent::Kind);

struct CatalogSnapshot {
  ChangeSeq seq;  // the snapshot reflects every change up to and including seq
  std::vector<TenantInfo> tenants;
  std::vector<NamespaceInfo> namespaces;
  std::vector<StreamInfo> streams;
  std::vector<Tombstone> tombstones;          // all of them: a broker applies these first
  std::vector<Assignment> assignments;
  std::vector<std::string> finalized_features;
  std::vector<BrokerInfo> brokers;            // registered (live is the leader's view)
  std::vector<CacheInfo> caches;
  std::vector<Tombstone> cache_tombstones;    // one per deleted cache name, kept forever
  std::vector<CounterInfo> counters;          // level 18
  std::vector<Tombstone> counter_tombstones;  // one per deleted counter name, kept forever
};

// One metadata member (a Raft voter). `level`, the addresses and joined_seq are replicated
// state; role, held and applied are what the member itself reported when asked (a member
// that did not answer shows role "unreachable").
struct MemberInfo {
  NodeId id;
  std::string raft_address;  // libraft transport
  std::string rpc_address;   // controller RPC (joins, forwarding, brokers)
  MetadataLevel level{0};    // the level it runs at, as it declared when it (re)joined
  ChangeSeq joined_seq;      // the entry that recorded it (or its last level change)
  std::string role;          // leader, follower, candidate, unavailable, unreachable
  bool held = false;         // stopped applying: met an entry above its level
  ChangeSeq held_index;      // the entry it is held at
  MetadataLevel held_required_level{0};
  std::string held_reason;
  ChangeSeq applied;         // its last applied change sequence (raft-meta: types.h ChangeSeq)
  // FNV-1a 64 of its catalog (every table): members at the same `applied` must agree.
  std::uint64_t state_hash = 0;
};

struct MembersView {
  std::vector<MemberInfo> members;  // by id
  NodeId leader;                    // 0 if unknown
  MetadataLevel group_level{0};     // the lowest member's level
  MetadataLevel level_floor{0};     // raised to 14 by the first flagged entry; joins below fail
};

// What a joining (or restarting) member declares.
struct JoinRequest {
  NodeId id;
  std::string raft_address;
  std::string rpc_address;
  MetadataLevel level{0};
};

// What a broker reports when it registers (docs/metadata-levels.md).
struct BrokerRegistration {
  NodeId id;
  std::string address;
  std::string directory_id;
  std::string version;
  std::vector<std::string> features;  // implemented features, sorted
  std::string peer_address;  // host:port of its peer transport (transport.address); may be empty
};

struct MetadataStatus {
  std::string backend;       // "raft" or "postgres"
  std::string cluster_id;    // empty until known
  bool ready = false;        // can serve reads and writes
  std::string detail;        // human-readable state ("leader", "catching up", ...)
  MetadataLevel level{0};    // the group's level
  ChangeSeq applied;         // highest applied change
};

// Cancels the watch when destroyed. Every backend implements these rules with the one
// fan-out of watch_registry.h.
//
// Destruction rules:
//   - Destroy it before the MetadataStore that returned it.
//   - From any thread other than the one running the watch's callbacks: once the
//     destructor returns, no callback of this watch runs or will run; a callback running
//     at the time is waited for (so do not destroy a handle while holding a lock that
//     callback takes).
//   - From inside the watch's own on_change or resync: allowed and safe. The destructor
//     returns at once (no wait, no deadlock); the running callback is the last, and the
//     backend touches nothing of the handle after it returns.
//   - From inside another watch's callback: as from another thread (that watch's
//     callbacks are not running, as one backend thread runs them one at a time).
class WatchHandle {
 public:
  virtual ~WatchHandle() = default;
};

class MetadataStore {
 public:
  virtual ~MetadataStore() = default;

  // Starts the backend. Blocks until the store is usable and the cluster id has been
  // adopted through PluginHost::adopt_cluster_id, or fails (e.g. cluster_id_mismatch).
  virtual Result<void> start() = 0;
  virtual void stop() = 0;
  virtual MetadataStatus status() = 0;

  virtual Result<TenantInfo> create_tenant(const std::string& name) = 0;
  virtual Result<void> delete_tenant(const std::string& name) = 0;  // conflict if non-empty
  virtual Result<std::vector<TenantInfo>> list_tenants() = 0;

  virtual Result<NamespaceInfo> create_namespace(const std::string& tenant,
                                                 const std::string& name) = 0;
  virtual Result<void> delete_namespace(const std::string& tenant, const std::string& name) = 0;
  virtual Result<std::vector<NamespaceInfo>> list_namespaces(const std::string& tenant) = 0;

  // `spec` is validated by the caller (core) and again by the backend's apply.
  virtual Result<StreamInfo> create_stream(const StreamKey& key, const StreamSpec& spec) = 0;
  virtual Result<StreamInfo> delete_stream(const StreamKey& key) = 0;  // the deleted stream
  virtual Result<StreamInfo> get_stream(const StreamKey& key) = 0;
  virtual Result<std::vector<StreamInfo>> list_streams(const std::string& tenant,
                                                       const std::string& ns) = 0;

  virtual Result<CatalogSnapshot> snapshot() = 0;

  // --- fleet ---------------------------------------------------------------------------
  // Registers (or re-registers) a broker. Refused with conflict if it lacks a finalized
  // feature (admit_broker); the broker must then exit. Registration makes it live.
  virtual Result<BrokerInfo> register_broker(const BrokerRegistration& reg) = 0;
  // Keeps a registered broker live; not_found if it is not registered.
  virtual Result<void> heartbeat_broker(NodeId id) = 0;
  // A clean shutdown: the broker stops counting as serving at once.
  virtual Result<void> unregister_broker(NodeId id) = 0;
  virtual Result<std::vector<BrokerInfo>> list_brokers() = 0;

  virtual Result<std::vector<FeatureInfo>> list_features() = 0;
  // One-way and idempotent (finalizing twice answers the same FeatureInfo). not_found for
  // an unknown feature; conflict with the reason while the gate refuses (check_finalize).
  virtual Result<FeatureInfo> finalize_feature(const std::string& name) = 0;

  virtual Result<std::vector<Tombstone>> list_tombstones() = 0;

  // --- replicated shards (docs/replication.md) ----------------------------------------
  // The compare-and-set of ShardUpdate. Answers the assignment as stored after it, and
  // records a shard_changed change. Backends without it answer not_supported.
  virtual Result<Assignment> update_shard(const ShardUpdate& update);
  // True while this instance should run the controller loop (core/controller.h):
  // raft-meta on the Raft leader, postgres-meta on the holder of the controller lease.
  // A deposed controller's late decision still fails: each is a compare-and-set.
  virtual bool is_controller() { return false; }

  // Re-reads what the backend may reload without a restart (sluiced calls it on SIGHUP):
  // raft-meta's controller RPC certificates (docs/security.md "Controller RPC"). On error
  // the previous state stays in force and the error says why. Never called concurrently
  // with itself. Default: nothing to reload.
  virtual Result<void> reload() { return {}; }

  // --- caches (catalog entries; the cache data plane is the storage plugin's) ---------
  // Backends without caches answer not_supported.
  virtual Result<CacheInfo> create_cache(const StreamKey& key, const CacheSpec& spec);
  virtual Result<CacheInfo> delete_cache(const StreamKey& key);  // the deleted cache
  virtual Result<CacheInfo> get_cache(const StreamKey& key);
  virtual Result<std::vector<CacheInfo>> list_caches(const std::string& tenant,
                                                     const std::string& ns);

  // --- counters (level 18, fleet feature `counters`; docs/api.md "Counters") ------------
  // Backends without counters answer not_supported. A create is refused (409 conflict)
  // until `counters` is finalized; every counter gets an incarnation that never repeats.
  virtual Result<CounterInfo> create_counter(const StreamKey& key);
  virtual Result<CounterInfo> delete_counter(const StreamKey& key);  // the deleted counter
  virtual Result<CounterInfo> get_counter(const StreamKey& key);
  virtual Result<std::vector<CounterInfo>> list_counters(const std::string& tenant,
                                                         const std::string& ns);

  // --- metadata members (raft-meta; other backends answer not_supported) ---------------
  virtual Result<MembersView> list_members();
  // Adds (or, for a known id at the same addresses, re-admits with its new level) a member.
  // conflict: the id is taken by other addresses, or the level is below the group's floor;
  // cluster_id_mismatch is the RPC layer's.
  virtual Result<MemberInfo> join_member(const JoinRequest& req);
  // conflict when it is the last voter.
  virtual Result<void> remove_member(NodeId id);

  // Delivers every change with seq > after, in order, starting with those already in the
  // store. If `after` is too old to replay, delivers nothing and calls `resync` instead;
  // the caller then takes a snapshot() and watches again from its seq.
  virtual std::unique_ptr<WatchHandle> watch(ChangeSeq after,
                                             std::function<void(const ChangeEvent&)> on_change,
                                             std::function<void()> resync) = 0;
};

}  // namespace sluice
