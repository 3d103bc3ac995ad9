// What an API plugin (http-api) serves: the node's catalog, broker runtime, status and
// metrics, as implemented by the host (core/). The API plugin only translates: it parses
// requests, calls these methods and renders the results. Every rule lives in core.
//
// Thread-safety: every method may be called from any thread. Methods that take a
// callback return at once; the callback runs exactly once, on a core or storage thread,
// and must not block.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/catalog_rules.h"
#include "sluice/error.h"
#include "sluice/metadata.h"
#include "sluice/record_batch.h"
#include "sluice/storage.h"
#include "sluice/types.h"

namespace sluice {

// One record of a publish request. Views must stay valid for the duration of the
// publish() call only (core copies them into batches before it returns).
struct PublishRecord {
  std::optional<std::string_view> key;
  std::string_view value;
  std::string_view headers;            // encoded (record_batch.h)
  std::int64_t timestamp_ms = 0;        // 0 = now
  std::optional<std::uint32_t> shard;  // explicit shard; else by key hash, else round robin
};

struct PublishedRecord {
  ShardIndex shard;
  Offset offset;
};

// Per-request publish options.
struct PublishOptions {
  AckMode ack = AckMode::leader;
  // Idempotent producer (storage.h): producer_id != 0 makes the request one batch with this
  // sequence; every record must then land on one shard (explicit, or all keys hashing to
  // it). A retry answers the original offsets; a skipped sequence is sequence_gap.
  std::uint64_t producer_id = 0;
  std::uint64_t sequence = 0;
  // The calling thread may block in publish() for one write and sync (ShardLog::
  // append_may_block), and the callback may run before publish() returns. Set by a caller
  // with nothing else to do meanwhile (the HTTP server with no other request in flight);
  // used for a request whose records all go to one shard led here.
  bool caller_may_block = false;
};
// Results are in request order.
using PublishCallback = std::function<void(Result<std::vector<PublishedRecord>>)>;

struct ShardStatus {
  ShardIndex shard;
  Incarnation incarnation;
  Generation generation;
  NodeId leader;
  std::vector<NodeId> replicas;
  LeaderEpoch leader_epoch;            // replication state (docs/replication.md)
  std::vector<InSyncReplica> in_sync;
  ShardVersion version;
  ShardStats stats;                    // this node's replica, if it holds one
  bool held = false;                   // this node holds a replica (stats are filled)
  std::string unavailable_reason;      // why it has no leader (unavailable_reason); else empty
  std::vector<NodeId> target_replicas; // a running reassignment's target; else empty
  std::string reassignment;            // its progress (plan_reassignment_step); else empty
};

struct NodeInfo {
  std::string cluster_id;
  std::string metadata_backend;
  NodeId node_id;
  std::string directory_id;
  std::vector<std::string> roles;
  std::string version;
  MetadataLevel metadata_level{0};
};

class Node {
 public:
  virtual ~Node() = default;

  virtual NodeInfo info() = 0;
  // Liveness: the process serves. Readiness: the catalog is usable and every assigned
  // shard is open. `why` says what is missing when not ready.
  virtual bool ready(std::string* why) = 0;
  // Prometheus text exposition of the host's and plugins' metrics.
  virtual std::string metrics_text() = 0;

  virtual MetadataStore& catalog() = 0;

  // Validates names and spec (shard count 1..1024, retention, ack), then creates.
  virtual Result<StreamInfo> create_stream(const StreamKey& key, const StreamSpec& spec) = 0;

  // Looks the stream up in the broker's applied catalog (not the metadata store).
  virtual Result<StreamInfo> stream(const StreamKey& key) = 0;

  virtual void publish(const StreamKey& key, const std::vector<PublishRecord>& records,
                       const PublishOptions& opts, PublishCallback cb) = 0;

  virtual Result<FetchResult> fetch(const StreamKey& key, ShardIndex shard, Offset from,
                                    std::uint32_t max_records, std::size_t max_bytes) = 0;
  // Resolves "earliest"/"latest" to offsets.
  virtual Result<ShardStats> shard_stats(const StreamKey& key, ShardIndex shard) = 0;
  // Long poll: `cb` runs once data beyond `offset` is visible, or the shard closes.
  // Returns the handle for cancel_notify (0 if `cb` already ran).
  virtual Result<std::uint64_t> notify_when_beyond(const StreamKey& key, ShardIndex shard,
                                                   Offset offset, std::function<void()> cb) = 0;
  virtual void cancel_notify(const StreamKey& key, ShardIndex shard, std::uint64_t handle) = 0;

  virtual Result<std::vector<ShardStatus>> shards(const StreamKey& key) = 0;
  // The HTTP address (host:port, as the broker registered it) of the broker that leads
  // `shard`, as this node knows it; empty when unknown (no leader, an unknown stream or
  // broker). An API plugin names it in its answers (http-api: the Sluice-Leader header).
  // Any broker serves any shard: a call for a shard another broker leads is forwarded to
  // it over the peer transport (docs/replication.md "Forwarding"). Default: empty.
  virtual std::string leader_address(const StreamKey& key, ShardIndex shard);
  // False when calls for `shard` go to another broker (forwarded: fetch, shard_stats and
  // the group calls then wait for a network round trip, so an API plugin makes them off its
  // I/O threads); true when this node serves them itself or answers at once (an unknown
  // stream or shard). Default: true.
  virtual bool serves_locally(const StreamKey& key, ShardIndex shard);
  // ShardLog::roll_segment / trim_before of `shard`, only where this node leads it and
  // serves it itself (never forwarded; not_leader otherwise). The cache compactor's calls
  // (docs/architecture.md "Cache compaction"). Default: not_supported.
  virtual Result<Offset> roll_shard(const StreamKey& key, ShardIndex shard);
  virtual Result<Offset> trim_shard(const StreamKey& key, ShardIndex shard, Offset before);
  // An operator's leader move (plan_leader_move, catalog_rules.h) as one compare-and-set on
  // the catalog. Returns the shard's new state. Default: not_supported.
  virtual Result<Assignment> move_leader(const StreamKey& key, ShardIndex shard, NodeId broker);
  // An operator's election (catalog_rules.h), one compare-and-set:
  //   unclean: `broker` leads a shard that has no eligible leader, with itself alone in
  //            sync (plan_unclean_election); records acknowledged beyond its log end are lost;
  //   preferred: the first replica in the list leads, if it is an eligible in-sync member
  //            (plan_preferred_election); `broker` must be 0.
  // Default: not_supported.
  enum class Election { unclean, preferred };
  virtual Result<Assignment> elect_leader(const StreamKey& key, ShardIndex shard, Election kind,
                                          NodeId broker);

  // Starts moving one shard to the replica list `target` (docs/replication.md
  // "Reassignment"; plan_reassignment has the rules and errors). Answers the assignment as
  // stored: the controller finishes the move. Default: not_supported.
  virtual Result<Assignment> reassign_shard(const StreamKey& key, ShardIndex shard,
                                            const std::vector<NodeId>& target);
  // Starts moving every copy off `broker` (plan_drain): one reassignment per shard. Answers
  // the plan with each shard's outcome in `refused` (empty when it started). Default:
  // not_supported.
  virtual Result<DrainPlan> drain_broker(NodeId broker);

  // --- consumer groups and dead letters (storage.h has the semantics) -----------------
  // With `incarnation`, the call acts only on that incarnation of the stream, pinned from
  // the check to the shard it reaches (a forwarded call carries it): once the name is
  // another stream (deleted and created again), it answers conflict naming both, and
  // nothing of the new stream's group changes. Without it, the current incarnation.
  virtual Result<GroupDelivery> group_fetch(const StreamKey& key, ShardIndex shard,
                                            const std::string& group, std::uint32_t max_records,
                                            const GroupOptions& opts,
                                            std::optional<Incarnation> incarnation = std::nullopt) = 0;
  virtual Result<void> group_ack(const StreamKey& key, ShardIndex shard, const std::string& group,
                                 const std::vector<Offset>& offsets,
                                 std::optional<Incarnation> incarnation = std::nullopt) = 0;
  virtual Result<void> group_nack(const StreamKey& key, ShardIndex shard, const std::string& group,
                                  const std::vector<Offset>& offsets,
                                  std::optional<Incarnation> incarnation = std::nullopt) = 0;
  // One position per shard.
  virtual Result<std::vector<GroupPosition>> group_positions(const StreamKey& key,
                                                             const std::string& group) = 0;
  virtual Result<std::vector<std::string>> groups(const StreamKey& key) = 0;
  virtual Result<FetchResult> dead_letters(const StreamKey& key, ShardIndex shard,
                                           const std::string& group, Offset from,
                                           std::uint32_t max_records, std::size_t max_bytes) = 0;
  // `incarnation`: as for group_ack; a replay read from a deleted stream's dead letters is
  // refused (conflict) and replays nothing of the new stream's.
  virtual Result<std::uint64_t> replay_dead_letters(const StreamKey& key, ShardIndex shard,
                                                    const std::string& group, Offset from, Offset to,
                                                    std::optional<Incarnation> incarnation = std::nullopt) = 0;
};

// The kind of object an api plugin's create() returns.
class ApiServer {
 public:
  virtual ~ApiServer() = default;
  // Binds and starts serving. Fails (e.g. address in use) with a clear message.
  virtual Result<void> start(Node& node) = 0;
  // The bound port (useful when configured with port 0).
  virtual std::uint16_t port() const = 0;
  // Stops accepting, finishes or aborts in-flight requests, joins its threads.
  virtual void stop() = 0;
  // Re-reads what the server may reload without a restart (sluiced calls it on SIGHUP):
  // e.g. the http-api's tokens file (docs/security.md) and TLS certificates. On an error the
  // server keeps serving with what it had and the message says what was refused. Any thread;
  // not concurrently with itself. Default: nothing to reload.
  virtual Result<void> reload() { return {}; }
};

}  // namespace sluice
