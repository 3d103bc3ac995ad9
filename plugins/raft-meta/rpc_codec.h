// JSON encodings of the MetadataStore value types for the controller RPC (rpc.h), and the
// frame format: u32 little-endian length (max kMaxFrame) | JSON object.
//
// Thread-safety: pure functions.
#pragma once

#include <boost/json.hpp>
#include <cstdint>
#include <string>

#include "sluice/metadata.h"

namespace sluice::raft_meta::rpc {

inline constexpr std::uint32_t kMaxFrame = 8u << 20;  // 8 MiB

boost::json::value to_json(const TenantInfo&);
boost::json::value to_json(const NamespaceInfo&);
boost::json::value to_json(const StreamKey&);
boost::json::value to_json(const StreamSpec&);
boost::json::value to_json(const StreamInfo&);
boost::json::value to_json(const Tombstone&);
boost::json::value to_json(const Assignment&);
boost::json::value to_json(const BrokerInfo&);
boost::json::value to_json(const BrokerRegistration&);
boost::json::value to_json(const FeatureInfo&);
boost::json::value to_json(const ChangeEvent&);
boost::json::value to_json(const CatalogSnapshot&);
boost::json::value to_json(const MetadataStatus&);
boost::json::value to_json(const Error&);
boost::json::value to_json(const CacheSpec&);
boost::json::value to_json(const CacheInfo&);
boost::json::value to_json(const MemberInfo&);
boost::json::value to_json(const MembersView&);
boost::json::value to_json(const JoinRequest&);

// Each throws std::exception (boost::system::system_error / std::invalid_argument) on a
// malformed value; callers turn that into Errc::malformed_body.
TenantInfo tenant_from(const boost::json::value&);
NamespaceInfo namespace_from(const boost::json::value&);
StreamKey key_from(const boost::json::value&);
StreamSpec spec_from(const boost::json::value&);
StreamInfo stream_from(const boost::json::value&);
Tombstone tombstone_from(const boost::json::value&);
Assignment assignment_from(const boost::json::value&);
BrokerInfo broker_from(const boost::json::value&);
BrokerRegistration registration_from(const boost::json::value&);
FeatureInfo feature_from(const boost::json::value&);
ChangeEvent event_from(const boost::json::value&);
CatalogSnapshot snapshot_from(const boost::json::value&);
MetadataStatus status_from(const boost::json::value&);
Error error_from(const boost::json::value&);
CacheSpec cache_spec_from(const boost::json::value&);
CacheInfo cache_from(const boost::json::value&);
MemberInfo member_from(const boost::json::value&);
MembersView members_from(const boost::json::value&);
JoinRequest join_from(const boost::json::value&);

// Frame I/O on a blocking socket. false: closed, error or timeout; `why` says which.
bool write_frame(int fd, const std::string& json, std::string* why);
// Reads one frame; refuses a length above kMaxFrame (oversized) without reading the body.
bool read_frame(int fd, std::string& out, std::string* why);

}  // namespace sluice::raft_meta::rpc
