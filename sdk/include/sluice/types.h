// Value types shared by the host and every plugin.
//
// Nothing in Sluice is known by its name alone (docs/architecture.md "Identity", felix post-mortem):
// a stream is (tenant, namespace, name) *plus* an Incarnation. Every key, path and record
// format carries the incarnation from the start, even while it is always 0 (level 8).
//
// Thread-safety: all types here are plain values; copy freely.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace sluice {

// A strongly typed integer. Different tags never convert into each other, so an
// Offset cannot be passed where a Generation is expected.
template <class Tag, class Rep = std::uint64_t>
class Strong {
 public:
  using rep = Rep;
  constexpr Strong() = default;
  constexpr explicit Strong(Rep v) : v_(v) {}
  constexpr Rep value() const { return v_; }
  constexpr auto operator<=>(const Strong&) const = default;

 private:
  Rep v_{};
};

// Every creation of a stream gets an incarnation that never repeats. 0 is the legacy
// (pre-`stream_incarnations`) incarnation and keeps the legacy directory name.
using Incarnation = Strong<struct IncarnationTag>;
// Ownership generation of a shard assignment; compared after the incarnation.
using Generation = Strong<struct GenerationTag>;
// Position of a record inside one shard incarnation. Starts at 0 for every incarnation.
using Offset = Strong<struct OffsetTag>;
// Catalog change sequence (raft-meta: the entry's Raft index, or beyond it once level-19
// batch entries gave several commands one entry each; postgres-meta: a Postgres sequence).
using ChangeSeq = Strong<struct ChangeSeqTag>;
using NodeId = Strong<struct NodeIdTag, std::uint32_t>;
using ShardIndex = Strong<struct ShardIndexTag, std::uint32_t>;
using MetadataLevel = Strong<struct MetadataLevelTag, std::uint32_t>;
// The epoch of a shard incarnation's leadership (docs/replication.md). Raised by every
// change of leader; a replica refuses every replication message of a lower epoch
// (`fenced`) and remembers the highest it has acted in across restarts.
using LeaderEpoch = Strong<struct LeaderEpochTag>;
// Version of one shard incarnation's replica state in the catalog. Every change (leader,
// epoch, in-sync set) is a compare-and-set on it, so a stale writer's change fails.
using ShardVersion = Strong<struct ShardVersionTag>;

// The metadata levels this build knows are in sluice/levels.h.

// (tenant, namespace, name). Validated by sluice::validate_name (names.h) before it is
// ever used in a path.
struct StreamKey {
  std::string tenant;
  std::string ns;
  std::string name;
  auto operator<=>(const StreamKey&) const = default;
  std::string to_string() const { return tenant + "/" + ns + "/" + name; }
};

// One shard of one incarnation of a stream: the unit that holds data.
struct ShardRef {
  StreamKey stream;
  ShardIndex shard;
  Incarnation incarnation;
  auto operator<=>(const ShardRef&) const = default;
  std::string to_string() const {
    return stream.to_string() + "#" + std::to_string(shard.value()) + "@" +
           std::to_string(incarnation.value());
  }
};

enum class AckMode : std::uint8_t {
  none,    // answered once offsets are assigned; the write may be lost in a crash
  leader,  // answered after the leader's fdatasync (group commit)
  quorum,  // answered after a quorum of replicas synced (replication issue)
};
std::string_view to_string(AckMode);
std::optional<AckMode> parse_ack_mode(std::string_view);

struct RetentionPolicy {
  std::int64_t max_bytes = -1;  // per shard; -1 = unlimited
  std::int64_t max_age_ms = -1; // -1 = unlimited
  auto operator<=>(const RetentionPolicy&) const = default;
};

inline constexpr std::uint32_t kMaxReplicationFactor = 5;

struct StreamSpec {
  std::uint32_t shards = 1;
  RetentionPolicy retention;
  AckMode default_ack = AckMode::leader;
  // Copies of each shard, on distinct brokers: 1..kMaxReplicationFactor.
  std::uint32_t replication_factor = 1;
  // In-sync replicas an ack=quorum append needs: 1..replication_factor. Core fills in a
  // majority of the replication factor when a create leaves it out.
  std::uint32_t min_insync = 1;
  auto operator<=>(const StreamSpec&) const = default;
};

// A member of a shard's in-sync set. A replica is a (broker, data directory) pair: a broker
// that comes back with a new directory.id holds a new, empty replica (seed
// kafka-15495-empty-disk-truncation).
struct InSyncReplica {
  NodeId broker;
  std::string directory_id;
  auto operator<=>(const InSyncReplica&) const = default;
};

// A stream as the catalog knows it.
struct StreamInfo {
  StreamKey key;
  Incarnation incarnation;
  StreamSpec spec;
  ChangeSeq created_seq;           // change sequence of the create
  std::int64_t created_at_us = 0;  // control plane clock at create
};

struct TenantInfo {
  std::string name;
  ChangeSeq created_seq;
};

struct NamespaceInfo {
  std::string tenant;
  std::string name;
  ChangeSeq created_seq;
};

}  // namespace sluice

template <class Tag, class Rep>
struct std::hash<sluice::Strong<Tag, Rep>> {
  std::size_t operator()(const sluice::Strong<Tag, Rep>& s) const noexcept {
    return std::hash<Rep>{}(s.value());
  }
};
