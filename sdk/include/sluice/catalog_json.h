// The one JSON codec of the catalog value types (docs/metadata-raft-design.md "Encodings").
// raft-meta's log, snapshots and controller RPC, and postgres-meta's change rows, all
// encode through this file, so the backends cannot drift apart.
//
// Two shapes:
//   * The value shape: Boost.JSON `value_from` / `value_to` for each type below (through
//     the `tag_invoke` overloads). Nested objects, e.g. a StreamInfo is
//       {"key":{"tenant","ns","name"},"incarnation","spec":{"shards","max_bytes",
//        "max_age_ms","ack"},"created_seq","created_at_us"}
//     The controller RPC and the raft-meta commands use it.
//   * The change-payload shape: what a change row stores next to its kind (the raft-meta
//     `changes` table inside every snapshot, postgres-meta's `changes.payload`). Flat, per
//     kind; see encode_change_payload. Its bytes are part of raft-meta's state hash, so the
//     encoder writes the same fields in the same order as it always has.
//
// Decoding is strict: a missing required field, a field of the wrong JSON type, a number
// out of range or an unknown enum string (change kind, ack mode) is refused. Nothing
// decodes to a default. `value_to` throws std::invalid_argument (or Boost's system_error)
// on such a value; the `decode_json` / `decode_change_payload` wrappers catch and return
// Errc::malformed_body instead, for callers that must not throw (the data path).
//
// Fields that older writers did not write are optional and say so below; everything else
// is required.
//
// Thread-safety: pure functions.
#pragma once

#include <boost/json/fwd.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/error.h"
#include "sluice/fleet_info.h"
#include "sluice/metadata.h"
#include "sluice/types.h"

namespace sluice {

// True when every number in `v` is finite. Boost.JSON parses a literal beyond the double
// range (1e400) as infinity and serializes it as `Infinity`, which no JSON parser reads
// back, so every parser of untrusted JSON that may serialize what it read (the controller
// RPC, which forwards requests; the HTTP API) refuses such a value as malformed.
bool json_numbers_finite(const boost::json::value& v);

// ChangeEvent::Kind by its to_string name; nullopt for any other string (never a default).
std::optional<ChangeEvent::Kind> parse_change_kind(std::string_view s);

// --- the value shape ---------------------------------------------------------------------
// Optional on decode: ChangeEvent "tombstone", "cache", "cache_tombstone" (absent: none /
// empty); CatalogSnapshot "caches", "cache_tombstones" (absent: empty). The encoder writes
// ChangeEvent "cache" only for cache events, as the RPC always has.
// Level 18 (counters), optional on decode: ChangeEvent "counter" (written for counter
// events), "counter_tombstone"; CatalogSnapshot "counters", "counter_tombstones" (written
// only when not empty).
// Level 16 (replicated shards), optional on decode and written only when they differ from
// what older builds meant, so that everything an older build wrote or reads stays
// byte-identical: StreamSpec "replication_factor","min_insync" (absent: 1, 1; written when
// the factor is above 1), Assignment "leader_epoch","in_sync","version" (absent: 0, [], 0;
// written when any is set), BrokerInfo / BrokerRegistration "peer_address" (absent: "";
// written when set). InSyncReplica is {"broker","directory_id"}; ShardUpdate is
// {"key","shard","incarnation","expected_version","leader","leader_epoch","in_sync"}.
#define SLUICE_JSON_CODEC(T)                                                                  \
  void tag_invoke(const boost::json::value_from_tag&, boost::json::value& jv, const T& x);   \
  T tag_invoke(const boost::json::value_to_tag<T>&, const boost::json::value& jv);
SLUICE_JSON_CODEC(AckMode)
SLUICE_JSON_CODEC(ChangeEvent::Kind)
SLUICE_JSON_CODEC(StreamKey)
SLUICE_JSON_CODEC(StreamSpec)
SLUICE_JSON_CODEC(StreamInfo)
SLUICE_JSON_CODEC(TenantInfo)
SLUICE_JSON_CODEC(NamespaceInfo)
SLUICE_JSON_CODEC(Tombstone)
SLUICE_JSON_CODEC(InSyncReplica)
SLUICE_JSON_CODEC(Assignment)
SLUICE_JSON_CODEC(ShardUpdate)
SLUICE_JSON_CODEC(BrokerInfo)
SLUICE_JSON_CODEC(BrokerRegistration)
SLUICE_JSON_CODEC(FeatureInfo)
SLUICE_JSON_CODEC(CacheSpec)
SLUICE_JSON_CODEC(CacheInfo)
SLUICE_JSON_CODEC(CounterInfo)
SLUICE_JSON_CODEC(MemberInfo)
SLUICE_JSON_CODEC(MembersView)
SLUICE_JSON_CODEC(JoinRequest)
SLUICE_JSON_CODEC(ChangeEvent)
SLUICE_JSON_CODEC(CatalogSnapshot)
#undef SLUICE_JSON_CODEC

// boost::json::value_to<T>(v) as a value: malformed_body naming what was wrong. Defined
// for every T with a codec above.
template <class T>
Result<T> decode_json(const boost::json::value& v);

// Strict readers of one member of an object, for the codecs of types outside the SDK
// (raft-meta's commands) so that they refuse what this file refuses. Each throws
// std::invalid_argument naming the member when it is missing or of another JSON type;
// integers must fit the result type (no doubles, no negative unsigned values).
namespace json_field {
const boost::json::value& required(const boost::json::object& o, std::string_view k);
std::string string(const boost::json::object& o, std::string_view k);
std::uint64_t u64(const boost::json::object& o, std::string_view k);
std::uint32_t u32(const boost::json::object& o, std::string_view k);
std::int64_t i64(const boost::json::object& o, std::string_view k);
bool boolean(const boost::json::object& o, std::string_view k);
std::vector<std::string> strings(const boost::json::object& o, std::string_view k);
std::vector<std::uint32_t> u32s(const boost::json::object& o, std::string_view k);
const boost::json::object& object(const boost::json::value& v, std::string_view what);
}  // namespace json_field

// --- the change-payload shape ------------------------------------------------------------
// Per kind (field order as written):
//   tenant_created/deleted          {"tenant"}
//   namespace_created/deleted       {"tenant","ns"}
//   stream_created/deleted          {"tenant","ns","name","incarnation","shards","max_bytes",
//                                    "max_age_ms","ack","created_seq","created_at_us",
//                                    "assignments":[{"shard","incarnation","generation",
//                                    "leader","replicas"}], "tombstone"?:{"deleted_up_to","seq"}}
//   cache_created/deleted           {"tenant","ns","name","incarnation","default_ttl_ms",
//                                    "created_seq","tombstone"?:{"deleted_up_to","seq"}}
//   counter_created/deleted         {"tenant","ns","name","incarnation","created_seq",
//                                    "tombstone"?:{"deleted_up_to","seq"}}
//   broker_registered/unregistered  {"id","address","directory_id","version","features",
//                                    "registered_seq","peer_address"?}
//   feature_finalized               {"feature"}
//   shard_changed                   {"tenant","ns","name","shard","incarnation","generation",
//                                    "leader","replicas","leader_epoch","in_sync","version"}
// Stream payloads add "replication_factor","min_insync" after "created_at_us" when the factor
// is above 1, and each assignment "leader_epoch","in_sync","version" when any is set (the
// value-shape rule above: RF-1 payloads stay byte-identical).
// Optional on decode: stream "assignments" and "tombstone" (schema-1 snapshots lack them),
// cache "tombstone", the level-16 fields above. The key of an assignment or tombstone is the event's stream or cache;
// `live` of a broker is not stored (false).
std::string encode_change_payload(const ChangeEvent& e);

// A change row back into its event. malformed_body for an unknown kind (never a default
// kind: a member that guessed would deliver a change that did not happen) or a payload
// that does not match its kind.
Result<ChangeEvent> decode_change_payload(ChangeSeq seq, std::string_view kind,
                                          std::string_view payload);

}  // namespace sluice
