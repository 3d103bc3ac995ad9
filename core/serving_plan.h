// The broker's serving decisions as one pure function (STYLE.md "Decisions are pure
// functions"; felix post-mortem; docs/architecture.md "Broker runtime"):
//
//   plan_serving(image, node, held, floors) -> {floors to persist, close, delete, open,
//                                               what each name is served as}
//
// No I/O. The broker applies a plan in this order: persist the raised floors (fsync), close,
// delete, drop, open, then at start (lost copies leave their in-sync sets and) register; a
// broker the catalog records under another directory registers before it opens (broker.h).
// Because the floors are durable before anything is acted on, a restart or a resync can
// never undo them.
//
// Rules, per name (tenant, namespace, stream):
//
//   delete word   W = max(image tombstone, image untombstoned delete, floor.deleted)
//                 -> delete every incarnation <= W on disk. Only the control plane's word
//                    (a tombstone, or a delete after the stream_incarnations finalize)
//                    ever raises W; a restored control plane cannot lower it (the floor).
//                    Emitted on a full plan (start, resync) and whenever W rises.
//   refusals      the image's incarnation I of the name is known but not served, every
//                 data call answers 409 with the reason, when:
//                   I <= W                          deleted (at or below the tombstone)
//                   I <  max(floor.served, held)    lower than one this broker served
//                                                   (e.g. a control-plane restore)
//                   I == 0, created after the stream_incarnations finalize (both seqs
//                   known): a level-8 proposer's create, never served over legacy data
//   serving       otherwise: per shard, the image's assignment unless the held one (same
//                 incarnation) is not superseded by it (assignment_supersedes: incarnation
//                 first, then generation, then the shard version of its replica state).
//                 Shards this node holds a replica of (it leads them or is in their
//                 replica list) are open; only those it leads are served to clients; the
//                 rest are closed. A held incarnation other than I is closed (not deleted).
//                 floor.served rises to I.
//   dropped       a shard of a stream with replication_factor > 1 whose replica list (the
//                 catalog's, after a reassignment) no longer names this node: its copy
//                 here is removed (StorageEngine::remove_replica) when it was open, and on
//                 every full plan (a node that was down when the reassignment finished).
//                 The new replicas were in sync before the list changed, so this copy is
//                 not needed (docs/replication.md "Reassignment").
//   gone          a held name the image no longer has is closed and forgotten (its data
//                 stays: deletes happen only on the control plane's word).
//   no data role  (node.role == none): nothing is opened or deleted, no floor rises; the
//                 refusals still hold, so every node answers alike.
//
// Legacy data (incarnation 0): before the finalize a delete leaves no word, so a recreate
// at 0 reopens it (the level-8 behaviour); after it, the delete's word is 0 and the data
// goes; a later 0 is then refused.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "catalog_image.h"

namespace sluice::core {

// The durable guard of one name (persisted by serving_floors.h): what this broker has
// served and what it has deleted, never lowered.
struct ServingFloor {
  std::optional<Incarnation> served;   // highest incarnation this broker has served
  std::optional<Incarnation> deleted;  // every incarnation <= it was deleted on the control plane's word
  bool operator==(const ServingFloor&) const = default;
};
using ServingFloors = std::map<StreamKey, ServingFloor>;

// What the node serves of one name now: an accepted (not refused) incarnation, its effective
// assignments and which shards are open (indexed by shard).
struct HeldStream {
  Incarnation incarnation;
  std::vector<Assignment> assignments;
  std::vector<bool> open;
};
using HeldStreams = std::map<StreamKey, HeldStream>;

enum class DataRole { none, broker };

struct ServingNode {
  NodeId id;
  DataRole role = DataRole::broker;
};

struct ShardAction {
  ShardRef ref;
  std::string reason;
};

struct DataDelete {
  StreamKey key;
  Incarnation up_to;
  std::string reason;
};

// How one name is served after the plan.
struct StreamServing {
  StreamInfo info;
  std::vector<Assignment> assignments;  // effective assignments, in shard order
  std::vector<bool> hold;               // per shard: open here after the plan (a replica)
  std::vector<bool> serve;              // per shard: served to clients here (the leader)
  std::string refused;                  // non-empty: known but not served, and why
};

struct ServingPlan {
  ServingFloors floors;                        // raised floors (only those that changed): persist first
  std::vector<ShardAction> close;
  std::vector<DataDelete> remove;
  std::vector<ShardAction> drop;  // copies of replicated shards whose replica list left this node
  std::vector<ShardAction> open;
  std::map<StreamKey, StreamServing> streams;  // every in-scope name the image has
  std::vector<StreamKey> forget;               // in-scope held names the image no longer has
};

// `only`: plan one name (a change event); empty: every name of the image, held and floors
// (start, resync).
ServingPlan plan_serving(const CatalogImage& image, const ServingNode& node, const HeldStreams& held,
                         const ServingFloors& floors, const std::optional<StreamKey>& only = std::nullopt);

}  // namespace sluice::core
