#include "sluice/features.h"

#include "sluice/hash.h"
#include "sluice/strings.h"

#include <algorithm>

namespace sluice {

namespace {
constexpr FeatureSpec kKnown[] = {
    {kStreamIncarnations, MetadataLevel{10},
     "every stream creation gets an incarnation that never repeats; deletes leave tombstones"},
    {kCacheIncarnations, MetadataLevel{14},
     "every cache creation gets an incarnation that never repeats; deletes leave tombstones"},
    {kReplicatedShards, MetadataLevel{16},
     "streams may have replication_factor above 1: replica placement, leader epochs, in-sync "
     "sets and their compare-and-set (update_shard)"},
    {kShardReassignment, MetadataLevel{17},
     "a shard's replica list may change: reassignment to other brokers and broker drains; "
     "a broker removed from a replica list removes its copy"},
    {kCounters, MetadataLevel{18},
     "counters: named int64 values by key with idempotent adds, per incarnation "
     "(create_counter / delete_counter)"},
    {kCacheCompaction, MetadataLevel{18},
     "cache and counter backing streams are compacted in the background: restate records at "
     "the log end, whole old segments dropped"},
    {kLostCopyFetch, MetadataLevel{18},
     "a lost shard copy says so in its fetches, and its leader adds it back to the in-sync "
     "set only once it has caught up to where the leader was when it began to fetch"},
};

std::string join_ids(const std::vector<NodeId>& ids) {
  std::string out;
  for (auto id : ids) {
    if (!out.empty()) out += ", ";
    out += std::to_string(id.value());
  }
  return out;
}
}  // namespace

std::span<const FeatureSpec> known_features() { return kKnown; }

const FeatureSpec* find_feature(std::string_view name) {
  for (const auto& f : kKnown)
    if (f.name == name) return &f;
  return nullptr;
}

Result<std::vector<std::string>> parse_feature_list(std::string_view list) {
  std::vector<std::string> names = split_list(list);
  if (names.size() == 1 && names[0] == "*") {
    names.clear();
    for (const auto& f : kKnown) names.emplace_back(f.name);
    return names;
  }
  for (const auto& n : names) {
    if (n == "*") return Error(Errc::invalid_argument, "'*' (every feature) must stand alone");
    if (!find_feature(n)) return Error(Errc::invalid_argument, "unknown feature '" + n + "'");
  }
  return names;
}

Result<void> check_finalize(std::string_view feature, MetadataLevel group_level,
                            const std::vector<BrokerInfo>& serving) {
  const FeatureSpec* spec = find_feature(feature);
  if (!spec) return Error(Errc::not_found, "unknown feature '" + std::string(feature) + "'");
  if (group_level < spec->required_level)
    return Error(Errc::conflict, "cannot finalize " + std::string(feature) +
                                     ": every metadata member must be at level " +
                                     std::to_string(spec->required_level.value()) +
                                     " or higher, and the group is at level " +
                                     std::to_string(group_level.value()));
  std::vector<NodeId> lacking;
  for (const auto& b : serving)
    if (std::find(b.features.begin(), b.features.end(), feature) == b.features.end())
      lacking.push_back(b.id);
  if (!lacking.empty())
    return Error(Errc::conflict, "cannot finalize " + std::string(feature) +
                                     ": serving brokers lack it: " + join_ids(lacking) +
                                     " (upgrade or stop them first)");
  return {};
}

Result<void> admit_broker(const std::vector<std::string>& broker_features,
                          const std::set<std::string, std::less<>>& finalized) {
  // Every missing feature is named, so one refusal tells the operator everything.
  std::string missing;
  for (const auto& f : finalized)
    if (std::find(broker_features.begin(), broker_features.end(), f) == broker_features.end())
      missing += "feature " + f + " is finalized in this cluster and this broker does not implement it; ";
  if (!missing.empty()) return Error(Errc::conflict, missing + "upgrade the broker");
  return {};
}

Incarnation next_incarnation(std::uint64_t proposed, std::optional<Incarnation> tombstone) {
  const std::uint64_t floor = tombstone ? tombstone->value() + 1 : 0;
  return Incarnation{std::max(proposed, floor)};
}

Incarnation decide_create_incarnation(std::uint64_t proposed, bool flagged, bool finalized,
                                      std::optional<Incarnation> tombstone) {
  if (!finalized || (!flagged && proposed == 0)) return Incarnation{0};
  return next_incarnation(proposed, tombstone);
}

std::optional<Incarnation> decide_delete_tombstone(Incarnation deleted, bool flagged) {
  if (deleted.value() == 0 && !flagged) return std::nullopt;
  return deleted;
}

std::optional<Incarnation> decide_delete_tombstone(Incarnation deleted, bool flagged, bool finalized) {
  if (deleted.value() == 0 && (!flagged || !finalized)) return std::nullopt;
  return deleted;
}

std::uint64_t propose_incarnation(bool finalized_here, std::int64_t clock_us) {
  if (!finalized_here) return 0;
  return clock_us > 0 ? static_cast<std::uint64_t>(clock_us) : 1;
}

bool assignment_supersedes(Incarnation inc, Generation gen, Incarnation held_inc,
                           Generation held_gen) {
  if (inc != held_inc) return inc > held_inc;
  return gen > held_gen;
}

std::vector<NodeId> place_shards(const StreamKey& key, std::uint32_t shards,
                                 const std::vector<BrokerInfo>& registered,
                                 const std::set<std::string, std::less<>>& finalized) {
  std::vector<BrokerInfo> admitted, live;
  for (const auto& b : registered)
    if (admit_broker(b.features, finalized).ok()) admitted.push_back(b);
  for (const auto& b : admitted)
    if (b.live) live.push_back(b);
  std::vector<BrokerInfo>& from = live.empty() ? admitted : live;
  std::sort(from.begin(), from.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  std::vector<NodeId> out(shards, NodeId{0});
  if (from.empty()) return out;
  const std::uint64_t offset = fnv1a64(key.to_string()) % from.size();
  for (std::uint32_t i = 0; i < shards; ++i) out[i] = from[(offset + i) % from.size()].id;
  return out;
}

Generation first_generation(ChangeSeq create_seq) { return Generation{create_seq.value()}; }

bool valid_feature_name(std::string_view n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}

FeatureInfo describe_feature(std::string_view name, const FinalizedFeatures& finalized,
                             const std::vector<BrokerInfo>& serving) {
  FeatureInfo fi;
  fi.name = std::string(name);
  const FeatureSpec* spec = find_feature(name);
  fi.required_level = spec ? spec->required_level : MetadataLevel{0};
  if (auto it = finalized.find(name); it != finalized.end()) {
    fi.finalized = true;
    fi.finalized_seq = it->second;
  }
  for (const auto& b : serving) {
    if (std::find(b.features.begin(), b.features.end(), name) != b.features.end())
      fi.supported_by.push_back(b.id);
    else
      fi.lacking.push_back(b.id);
  }
  return fi;
}

std::vector<FeatureInfo> describe_features(const FinalizedFeatures& finalized,
                                           const std::vector<BrokerInfo>& serving) {
  std::vector<FeatureInfo> out;
  for (const auto& f : known_features()) out.push_back(describe_feature(f.name, finalized, serving));
  for (const auto& [name, at] : finalized)
    if (!find_feature(name)) out.push_back(describe_feature(name, finalized, serving));
  return out;
}

}  // namespace sluice
