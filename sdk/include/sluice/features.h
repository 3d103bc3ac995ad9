// Fleet features and the catalog rules around incarnations, as pure functions
// (STYLE.md "Decisions are pure functions"; felix post-mortem; docs/architecture.md "Names and incarnations", docs/metadata-levels.md).
// Both metadata backends call these, so Raft and Postgres decide alike, and each rule is
// testable without a cluster.
//
// Feature lifecycle (one-way):
//
//      known to some brokers                finalize (gate below)
//   ┌──────────────────────────┐   ──────────────────────────────►  ┌───────────┐
//   │ not finalized            │                                    │ finalized │
//   │ old behaviour everywhere │   never back                       │ new rules │
//   └──────────────────────────┘  ◄──────── x ───────────────────── └───────────┘
//
//   gate:  the feature is known; every metadata member is at its required level; every
//          serving broker reports it.  (409 conflict with the reason otherwise)
//   after: registering a broker that lacks a finalized feature is refused (409).
//
// A new cluster finalizes every feature its bootstrapping proposer knows, unless held
// back by configuration (how upgrades from level 8 are tested).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/error.h"
#include "sluice/fleet_info.h"
#include "sluice/levels.h"
#include "sluice/types.h"

namespace sluice {

struct FeatureSpec {
  std::string_view name;
  MetadataLevel required_level;  // every metadata member must be at this level or higher
  std::string_view description;
};

// Every feature this build implements, in the order they were introduced.
std::span<const FeatureSpec> known_features();

// A fleet feature name as the catalog accepts it: 1..64 of [a-z0-9_]. Structural and
// stable forever: Raft apply uses it, so it must not depend on the build.
bool valid_feature_name(std::string_view name);
const FeatureSpec* find_feature(std::string_view name);

// A comma list of feature names as a config key takes it (metadata.bootstrap_hold_back):
// blanks around names are ignored, and "*" alone means every feature this build knows, so
// a test or an upgrade rehearsal that wants a level-8 cluster need not name them all.
// invalid_argument for an unknown name (or "*" beside names); the names in list order.
Result<std::vector<std::string>> parse_feature_list(std::string_view list);

// One feature as GET /v1/features shows it: its required level (0 if this build does not
// know it), whether it is finalized, and which of the `serving` brokers implement it.
FeatureInfo describe_feature(std::string_view name, const FinalizedFeatures& finalized,
                             const std::vector<BrokerInfo>& serving);
// Every feature this build knows, then each finalized one it does not (finalized by a
// newer build), described.
std::vector<FeatureInfo> describe_features(const FinalizedFeatures& finalized,
                                           const std::vector<BrokerInfo>& serving);

// The finalize gate. `serving` are the brokers counted as serving (registered and live).
// not_found for an unknown feature; conflict (naming the level or the brokers) when refused.
Result<void> check_finalize(std::string_view feature, MetadataLevel group_level,
                            const std::vector<BrokerInfo>& serving);

// Admission of a broker registration: conflict if it lacks any finalized feature.
Result<void> admit_broker(const std::vector<std::string>& broker_features,
                          const std::set<std::string, std::less<>>& finalized);

// --- incarnations -----------------------------------------------------------------------

// max(proposed, tombstone + 1): a name's incarnations only go up, even if the proposer's
// clock went backwards or a restore rewound sequences.
Incarnation next_incarnation(std::uint64_t proposed, std::optional<Incarnation> tombstone);

// How apply decides a create's incarnation (felix post-mortem, "The fix for the rollout").
// Reads only the entry (proposed, flagged) and replicated state (finalized, tombstone):
//   not finalized                 -> 0          (level 8 behaviour)
//   unflagged entry proposing 0   -> 0          (what a level-8 proposer wrote; finalized or not)
//   otherwise                     -> next_incarnation(proposed, tombstone)
Incarnation decide_create_incarnation(std::uint64_t proposed, bool flagged, bool finalized,
                                      std::optional<Incarnation> tombstone);

// The tombstone a delete writes, if any: an unflagged delete of a stream at 0 writes none
// (what level 8 stores); any other delete records "every incarnation up to `deleted`".
std::optional<Incarnation> decide_delete_tombstone(Incarnation deleted, bool flagged);
// The same with the feature's state (replicated): a flagged delete of a stream (or cache) at
// 0 writes a tombstone only once the feature is finalized -- before it, a recreate stays
// at 0 (the legacy behaviour) and a tombstone at 0 would stop brokers serving it.
// Unflagged entries ignore `finalized` (what level 8 stores).
std::optional<Incarnation> decide_delete_tombstone(Incarnation deleted, bool flagged, bool finalized);

// What a proposer puts in a create: the control plane clock (µs) once the feature is
// finalized as the proposer sees it, else 0. A level-8 proposer always writes 0.
std::uint64_t propose_incarnation(bool finalized_here, std::int64_t clock_us);

// --- ownership ------------------------------------------------------------------------

// Shard ownership compares (incarnation, generation), incarnation first (felix #1245):
// true if an assignment at (inc, gen) replaces one held at (held_inc, held_gen).
bool assignment_supersedes(Incarnation inc, Generation gen, Incarnation held_inc,
                           Generation held_gen);

// Where a new stream's shards go: the leader of each shard, in shard order. Candidates are
// the brokers that implement every finalized feature (a broker that lacks one must never
// get data: it would open incarnated streams the old way); among them the live ones, or if
// none is live the registered ones (a shard placed on a broker id is served when it comes
// back). Round robin by id from an offset of fnv1a64("tenant/ns/name"). NodeId{0} for every
// shard when there is no candidate.
std::vector<NodeId> place_shards(const StreamKey& key, std::uint32_t shards,
                                 const std::vector<BrokerInfo>& registered,
                                 const std::set<std::string, std::less<>>& finalized);

// A stream's first generation is the change sequence of its create (felix #1245: never 0,
// so on one timeline a recreate's first assignment lands above the deleted stream's). We
// use it for legacy (incarnation 0) streams too.
Generation first_generation(ChangeSeq create_seq);

}  // namespace sluice
