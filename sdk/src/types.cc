#include "sluice/host.h"
#include "sluice/metadata.h"
#include "sluice/node.h"
#include "sluice/plugin.h"
#include "sluice/storage.h"
#include "sluice/types.h"

namespace sluice {

std::string_view to_string(AckMode m) {
  switch (m) {
    case AckMode::none: return "none";
    case AckMode::leader: return "leader";
    case AckMode::quorum: return "quorum";
  }
  return "leader";
}

std::optional<AckMode> parse_ack_mode(std::string_view s) {
  if (s == "none") return AckMode::none;
  if (s == "leader") return AckMode::leader;
  if (s == "quorum") return AckMode::quorum;
  return std::nullopt;
}

std::string_view to_string(PluginKind k) {
  switch (k) {
    case PluginKind::metadata: return "metadata";
    case PluginKind::storage: return "storage";
    case PluginKind::api: return "api";
  }
  return "unknown";
}

std::string_view to_string(ChangeEvent::Kind k) {
  switch (k) {
    case ChangeEvent::Kind::tenant_created: return "tenant_created";
    case ChangeEvent::Kind::tenant_deleted: return "tenant_deleted";
    case ChangeEvent::Kind::namespace_created: return "namespace_created";
    case ChangeEvent::Kind::namespace_deleted: return "namespace_deleted";
    case ChangeEvent::Kind::stream_created: return "stream_created";
    case ChangeEvent::Kind::stream_deleted: return "stream_deleted";
    case ChangeEvent::Kind::feature_finalized: return "feature_finalized";
    case ChangeEvent::Kind::broker_registered: return "broker_registered";
    case ChangeEvent::Kind::broker_unregistered: return "broker_unregistered";
    case ChangeEvent::Kind::cache_created: return "cache_created";
    case ChangeEvent::Kind::cache_deleted: return "cache_deleted";
    case ChangeEvent::Kind::counter_created: return "counter_created";
    case ChangeEvent::Kind::counter_deleted: return "counter_deleted";
    case ChangeEvent::Kind::shard_changed: return "shard_changed";
  }
  return "unknown";
}

// Defaults for backends without caches or metadata members.
namespace {
Error unsupported(const char* what) {
  return Error(Errc::not_supported, std::string(what) + " is not supported by this metadata backend");
}
}  // namespace
Result<CacheInfo> MetadataStore::create_cache(const StreamKey&, const CacheSpec&) { return unsupported("caches"); }
Result<CacheInfo> MetadataStore::delete_cache(const StreamKey&) { return unsupported("caches"); }
Result<CacheInfo> MetadataStore::get_cache(const StreamKey&) { return unsupported("caches"); }
Result<std::vector<CacheInfo>> MetadataStore::list_caches(const std::string&, const std::string&) {
  return unsupported("caches");
}
Result<CounterInfo> MetadataStore::create_counter(const StreamKey&) { return unsupported("counters"); }
Result<CounterInfo> MetadataStore::delete_counter(const StreamKey&) { return unsupported("counters"); }
Result<CounterInfo> MetadataStore::get_counter(const StreamKey&) { return unsupported("counters"); }
Result<std::vector<CounterInfo>> MetadataStore::list_counters(const std::string&, const std::string&) {
  return unsupported("counters");
}
Result<MembersView> MetadataStore::list_members() { return unsupported("metadata members"); }
Result<MemberInfo> MetadataStore::join_member(const JoinRequest&) { return unsupported("metadata members"); }
Result<void> MetadataStore::remove_member(NodeId) { return unsupported("metadata members"); }
Result<Assignment> MetadataStore::update_shard(const ShardUpdate&) {
  return unsupported("replicated shard state");
}
Result<Assignment> PluginHost::update_shard(const ShardUpdate&) {
  return Error(Errc::not_supported, "this host does not offer catalog shard updates");
}
PeerTransport* PluginHost::peer_transport() { return nullptr; }
bool PluginHost::feature_finalized(std::string_view) const { return false; }
void PluginHost::stop_node(std::string_view reason) {
  log(LogLevel::error, "host", "a plugin asked to stop the node, and this host cannot: " + std::string(reason));
}
std::string Node::leader_address(const StreamKey&, ShardIndex) { return {}; }
bool Node::serves_locally(const StreamKey&, ShardIndex) { return true; }
Result<Assignment> Node::move_leader(const StreamKey&, ShardIndex, NodeId) {
  return Error(Errc::not_supported, "this node does not move shard leaders");
}
Result<Assignment> Node::elect_leader(const StreamKey&, ShardIndex, Election, NodeId) {
  return Error(Errc::not_supported, "this node does not elect shard leaders");
}
Result<Assignment> Node::reassign_shard(const StreamKey&, ShardIndex, const std::vector<NodeId>&) {
  return Error(Errc::not_supported, "this node does not reassign shards");
}
Result<DrainPlan> Node::drain_broker(NodeId) {
  return Error(Errc::not_supported, "this node does not drain brokers");
}
Result<Offset> Node::roll_shard(const StreamKey&, ShardIndex) {
  return Error(Errc::not_supported, "this node does not roll shard segments");
}
Result<Offset> Node::trim_shard(const StreamKey&, ShardIndex, Offset) {
  return Error(Errc::not_supported, "this node does not trim shard logs");
}
void ShardLog::append_may_block(std::string batch, AckMode ack, AppendCallback cb) {
  append(std::move(batch), ack, std::move(cb));
}

Result<Offset> ShardLog::roll_segment() {
  return Error(Errc::not_supported, "this storage engine does not roll segments on request (" +
                                        ref().to_string() + ")");
}
Result<Offset> ShardLog::trim_before(Offset) {
  return Error(Errc::not_supported, "this storage engine does not trim logs on request (" +
                                        ref().to_string() + ")");
}
Result<bool> StorageEngine::remove_replica(const ShardRef& ref) {
  return Error(Errc::not_supported, "this storage engine does not remove replicas (" +
                                        ref.to_string() + ")");
}
Result<void> StorageEngine::assign(const ShardRef& ref, const ReplicaAssignment& a) {
  if (a.replicas.size() <= 1) return ok_result();
  return Error(Errc::not_supported, "this storage engine keeps one copy of a shard; " +
                                        ref.to_string() + " asks for " +
                                        std::to_string(a.replicas.size()));
}

}  // namespace sluice
