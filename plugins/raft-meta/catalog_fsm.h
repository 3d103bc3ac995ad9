// The catalog state machine of raft-meta: a deterministic function from (replicated state,
// committed entry) to (new state, result). No libraft dependency, so it is tested alone.
//
// State lives in an in-memory SQLite database (schema below). The database *is* the
// snapshot: snapshot() is sqlite3_serialize, restore() is sqlite3_deserialize.
//
//   meta(key PRIMARY KEY, value)      schema_version, cluster_id, applied_index,
//                                     level (group metadata level), level_floor,
//                                     changes_pruned_up_to, applied_seq (level 19: the
//                                     last change sequence, written only once batches
//                                     made sequences run ahead of indexes)
//   tenants(name, created_seq)
//   namespaces(tenant, name, created_seq)
//   streams(tenant, ns, name, incarnation, shards, retention_max_bytes,
//           retention_max_age_ms, default_ack, created_seq, created_at_us,
//           replication_factor, min_insync)
//   changes(seq, kind, payload)       the change feed for watchers; the newest
//                                     `change_retention` rows are kept
//   tombstones(tenant, ns, name, deleted_up_to, seq)   one row per name, kept forever
//   features(name, finalized_seq)                      finalized fleet features
//   brokers(id, address, directory_id, version, features, registered_seq, peer_address)
//   assignments(tenant, ns, name, shard, incarnation, generation, leader, replicas,
//               leader_epoch, in_sync, version)
//
// Determinism (docs/metadata-levels.md, felix post-mortem): apply() reads only the entry, its
// index and the database. It never reads this member's configured level, build, clock
// or any other local input. An entry that fails to decode or validate is rejected with a
// definite error and changes nothing but applied_index, identically on every member.
//
// Error policy (docs/metadata-raft-design.md "Error policy"): the rules' refusals are
// values (ApplyResult::error, decided alike everywhere). A failure that is not a decision
// of the entry -- an exception from SQLite, a state that cannot be -- holds the member at
// that entry, exactly like an entry above its level: applied_index never moves past an
// entry this member did not apply, and no entry is ever skipped. Nothing throws out of
// apply().
// (Caveat: validate_name / validate_stream_spec come from the SDK, so a future build that
// relaxes them must gate the change behind a metadata level.)
//
// Files: catalog_fsm.cc (database, change log, apply and its dispatch), one file per
// concern for the commands (catalog_fsm_names / _streams / _caches / _fleet / _members.cc),
// catalog_fsm_reads.cc, catalog_fsm_snapshot.cc (image and state hash), and the SQLite
// plumbing they share in catalog_fsm_db.h.
//
// Thread-safety: none. The owner serializes every call (raft-meta: RaftMetaStore::fsm_mu_).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "command.h"
#include "sluice/error.h"
#include "sluice/levels.h"
#include "sluice/metadata.h"
#include "sluice/types.h"

struct sqlite3;

namespace sluice::raft_meta {

// Schema version of the catalog database (stored in meta.schema_version). Restore refuses
// a database with another version.
// Version 2 added tombstones.seq, features, brokers and assignments; restore() upgrades a
// version-1 image in place (deterministically: every member upgrades alike).
// Version 3 added members, caches and cache_tombstones (a version-2 image is upgraded).
// Version 4 (level 16) added streams.replication_factor/min_insync,
// assignments.leader_epoch/in_sync/version and brokers.peer_address, with defaults that
// mean what older rows meant (a version-3 image is upgraded).
// Version 5 (level 17) added assignments.target_replicas ('' for rows written before; a
// version-4 image is upgraded).
// Version 6 (level 18) added counters and counter_tombstones (a version-5 image is upgraded).
inline constexpr int kCatalogSchemaVersion = 6;
// How many changes the change log keeps. Part of what apply computes, so it must be the
// same on every member: only tests pass another value.
inline constexpr std::size_t kDefaultChangeRetention = 10000;

// What applying one entry produced; the proposer receives it.
struct ApplyResult {
  ChangeSeq seq;                // the entry's index
  std::optional<Error> error;   // set: rejected, nothing but applied_index changed
  std::string cluster_id;       // init_cluster: the group's cluster id (also when rejected)
  TenantInfo tenant;            // create_tenant
  NamespaceInfo ns;             // create_namespace
  StreamInfo stream;            // create_stream / delete_stream (the deleted stream)
  std::vector<Assignment> assignments;  // create_stream: written; delete_stream: removed;
                                        // update_shard: the one assignment as stored after it
  std::optional<Tombstone> tombstone;   // delete_stream/delete_cache: the tombstone written
  CacheInfo cache;                      // create_cache / delete_cache (the deleted cache)
  CounterInfo counter;                  // create_counter / delete_counter (the deleted one)
  BrokerInfo broker;                    // register_broker (live is not replicated: false)
  std::string feature;                  // finalize_feature
  ChangeSeq finalized_seq;              // finalize_feature: when it was finalized (also
                                        // for an already finalized one)
  // A batch entry (level 19) that was applied: one result per command, in order (each with
  // its own seq). Empty for a lone command, and for a batch refused or held as a whole
  // (`error` says why; nothing of it was applied).
  std::vector<ApplyResult> inner;
  bool ok() const { return !error.has_value(); }
};

// Changes after a cursor, or the news that the cursor is too old.
struct ChangeBatch {
  bool resync = false;  // changes after the cursor were pruned: take a snapshot instead
  std::vector<ChangeEvent> events;
  // A stored change that does not decode (an unknown kind, say, from a newer build's
  // snapshot): `events` stops before it, and it is never guessed at.
  std::optional<Error> error;
};

class CatalogFsm {
 public:
  // Throws std::runtime_error only if SQLite cannot open an in-memory database.
  // `capability` is the level this member runs at (its build, or lower by configuration).
  // It decides only whether an entry is applied at all (an entry above it holds the member),
  // never what an entry means.
  explicit CatalogFsm(std::size_t change_retention = kDefaultChangeRetention,
                      MetadataLevel capability = kBuildMetadataLevel);
  ~CatalogFsm();
  CatalogFsm(const CatalogFsm&) = delete;
  CatalogFsm& operator=(const CatalogFsm&) = delete;

  // Back to the empty catalog (before a raft node replays its snapshot and log again).
  void reset();

  // Applies the committed entry at `index` (> applied()). Deterministic. Never throws: a
  // failure holds the member (error policy above).
  ApplyResult apply(std::uint64_t index, std::string_view entry);

  // The whole database (sqlite3_serialize). Empty on failure.
  // Empty while held: a snapshot would claim entries this member did not apply.
  std::string snapshot() const;

  // Held (docs/metadata-levels.md): this member met an entry above its level (a flagged
  // level-14 create/delete, or a command of a newer build), or failed to apply one (the
  // error policy above; `required` is then its own level: a restart, not an upgrade, is
  // what it needs). It stops applying — later entries change nothing and applied() stays
  // before that entry — and the store serves nothing until the member is upgraded (or
  // restarted). Deterministic: replaying the log holds again at the same index.
  struct Held {
    std::uint64_t index = 0;
    std::string reason;
    MetadataLevel required{0};  // the level the entry needs
  };
  MetadataLevel capability() const { return capability_; }
  // Changes the capability for the next reset() (a member restarted at another level).
  void set_capability(MetadataLevel l) { capability_ = l; }
  std::optional<Held> held() const { return held_; }
  // Replaces the state with a snapshot() image. On failure the old state is kept.
  Result<void> restore(std::string_view image);

  // Changes before anything a proposer reads besides names may change: the members and
  // their levels, the finalized features, the registered brokers, and held(). Bumped by
  // every entry with a command other than a name or shard command (and by a malformed
  // one), by a hold, and by reset() and restore(); a name or shard command never bumps
  // it. The only member safe to call without the owner's lock: a proposer keeps what it
  // read under the lock, with the generation it read it at, and reads again only once
  // this moved (RaftMetaStore::proposal_context).
  std::uint64_t generation() const { return generation_.load(std::memory_order_acquire); }

  // Reads of the applied state.
  std::string cluster_id() const;
  // The last change sequence applied: the raft index of the last entry applied, or beyond
  // it once batch entries (level 19) have given several commands one entry each.
  ChangeSeq applied() const;
  // The raft index of the last entry applied.
  std::uint64_t applied_index() const;
  MetadataLevel level() const;
  MetadataLevel level_floor() const;
  Result<std::vector<TenantInfo>> list_tenants() const;
  Result<std::vector<NamespaceInfo>> list_namespaces(const std::string& tenant) const;
  Result<StreamInfo> get_stream(const StreamKey& key) const;
  Result<std::vector<StreamInfo>> list_streams(const std::string& tenant,
                                               const std::string& ns) const;
  // brokers[].live is false: liveness is the leader's memory, not replicated state.
  CatalogSnapshot catalog_snapshot() const;
  std::size_t tombstone_count() const;
  std::vector<Tombstone> list_tombstones() const;
  std::optional<Tombstone> tombstone(const StreamKey& key) const;
  std::vector<Assignment> assignments(const StreamKey& key) const;
  std::vector<BrokerInfo> list_brokers() const;
  std::optional<BrokerInfo> broker(NodeId id) const;
  // Finalized features: name -> finalized_seq.
  std::map<std::string, ChangeSeq, std::less<>> finalized_features() const;
  bool is_finalized(std::string_view feature) const;
  std::size_t change_count() const;

  // Caches.
  std::optional<CacheInfo> cache(const StreamKey& key) const;
  Result<std::vector<CacheInfo>> list_caches(const std::string& tenant, const std::string& ns) const;
  std::vector<Tombstone> list_cache_tombstones() const;
  std::optional<Tombstone> cache_tombstone(const StreamKey& key) const;

  // Counters (level 18).
  std::optional<CounterInfo> counter(const StreamKey& key) const;
  Result<std::vector<CounterInfo>> list_counters(const std::string& tenant, const std::string& ns) const;
  std::vector<Tombstone> list_counter_tombstones() const;
  std::optional<Tombstone> counter_tombstone(const StreamKey& key) const;

  // Members (replicated records; role/held/applied are left empty).
  std::vector<MemberInfo> list_members() const;
  std::optional<MemberInfo> member(NodeId id) const;
  // The lowest recorded member level; nullopt while no member is recorded.
  std::optional<MetadataLevel> recorded_group_level() const;
  std::size_t members_below(MetadataLevel level) const;

  // Up to `limit` changes with seq > after, in order; resync if any of them were pruned.
  ChangeBatch changes_after(ChangeSeq after, std::size_t limit) const;

  // FNV-1a 64 over a canonical dump of every catalog table (meta included), for
  // divergence checks between members.
  std::uint64_t state_hash() const;

 private:
  std::optional<Held> held_;
  std::atomic<std::uint64_t> generation_{0};
  void bump_generation() { generation_.fetch_add(1, std::memory_order_acq_rel); }
  // Whether applying `e` may change what generation() covers.
  static bool touches_fleet(const DecodedEntry& e);
  bool seq_ahead_ = false;  // meta.applied_seq exists (a batch ran sequences ahead of indexes)
  std::optional<Held> hold_reason(const DecodedEntry& e) const;
  std::uint64_t next_seq(std::uint64_t index) const;
  ApplyResult apply_one(std::uint64_t seq, const DecodedEntry& e, bool nested);
  void create_schema();
  void upgrade_schema_1_to_2();
  void upgrade_schema_2_to_3();
  void upgrade_schema_3_to_4();
  void upgrade_schema_4_to_5();
  void upgrade_schema_5_to_6();
  void update_group_level();
  bool flagged_refused(const Command& c) const;
  // Level 16: an update_shard entry, or a create_stream with replication_factor > 1.
  static bool needs_replicated_shards(const Command& c);
  // Level 18: a create_counter or delete_counter entry.
  static bool is_counter_entry(const Command& c);
  // `index` here and in the functions below is the command's change sequence (the entry's
  // raft index for a lone command; see applied()).
  ApplyResult apply_command(std::uint64_t index, const Command& c);
  ApplyResult apply_to_cluster(std::uint64_t index, const Command& c);
  // One function per command, in catalog_fsm_<concern>.cc. Each returns the result or a
  // refusal (catalog_db::refuse); SQLite failures throw and hold the member.
  ApplyResult apply_init_cluster(std::uint64_t index, const Command& c, const std::string& cluster);
  ApplyResult apply_register_broker(std::uint64_t index, const Command& c);    // fleet
  ApplyResult apply_unregister_broker(std::uint64_t index, const Command& c);
  ApplyResult apply_finalize_feature(std::uint64_t index, const Command& c);
  ApplyResult apply_join_member(std::uint64_t index, const Command& c);        // members
  ApplyResult apply_leave_member(std::uint64_t index, const Command& c);
  ApplyResult apply_create_tenant(std::uint64_t index, const Command& c);      // names
  ApplyResult apply_delete_tenant(std::uint64_t index, const Command& c);
  ApplyResult apply_create_namespace(std::uint64_t index, const Command& c);
  ApplyResult apply_delete_namespace(std::uint64_t index, const Command& c);
  ApplyResult apply_create_stream(std::uint64_t index, const Command& c);      // streams
  ApplyResult apply_delete_stream(std::uint64_t index, const Command& c);
  ApplyResult apply_update_shard(std::uint64_t index, const Command& c);       // level 16
  ApplyResult apply_create_cache(std::uint64_t index, const Command& c);       // caches
  ApplyResult apply_delete_cache(std::uint64_t index, const Command& c);
  ApplyResult apply_create_counter(std::uint64_t index, const Command& c);     // level 18
  ApplyResult apply_delete_counter(std::uint64_t index, const Command& c);
  // Writes the name's tombstone at `up_to` (never lowering one already there); the delete
  // at `index` is its seq.
  enum class TombstoneTable { streams, caches, counters };
  Tombstone raise_tombstone(TombstoneTable table, const StreamKey& key, Incarnation up_to,
                            std::uint64_t index);
  bool tenant_exists(const std::string& tenant) const;
  bool namespace_exists(const std::string& tenant, const std::string& ns) const;
  ApplyResult hold_after_failure(std::uint64_t index, const std::string& what);
  std::string meta_get(const char* key) const;
  void meta_set(const char* key, const std::string& value);
  void record_change(const ChangeEvent& e);

  sqlite3* db_ = nullptr;
  std::size_t change_retention_;
  MetadataLevel capability_;
};

}  // namespace sluice::raft_meta
