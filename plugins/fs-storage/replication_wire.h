// The replication messages that fs-storage replicas exchange over the peer transport
// (docs/replication.md "Replication messages"). Every message starts with an `Incarnated`
// envelope naming exactly which shard incarnation, in which leader epoch, from which replica
// (broker and data directory) it speaks of.
//
// Encoding: little-endian fixed-width integers, strings as u16 length + bytes. Decoding is
// strict: a truncated message, an over-long string or trailing bytes are malformed_body.
// A fetch answer carries whole stored batches as one chunk; decoding leaves the chunk as a
// view into the received payload (no copy, no per-record work).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "sluice/error.h"
#include "sluice/transport.h"
#include "sluice/types.h"

namespace sluice::fs_storage {

inline constexpr PeerMessageType kReplicaFetch = 0x0101;
inline constexpr PeerMessageType kReplicaEpochEnd = 0x0102;

// The logs a replicated shard incarnation keeps in step: its records, and the op log of its
// consumer groups (group_ops.h). Each is replicated on its own, under the same assignment.
enum class LogKind : std::uint8_t { data = 0, groups = 1 };

struct Incarnated {
  ShardRef ref;
  LeaderEpoch leader_epoch;
  NodeId sender;
  std::string directory_id;
  LogKind log = LogKind::data;  // encoded last, as one byte; other values are malformed
};

// Follower -> leader: "send me what you hold from fetch_offset; I hold durable_end on disk".
struct FetchRequest {
  Incarnated env;
  Offset fetch_offset;   // the follower's log end: the next offset it needs
  Offset durable_end;    // synced on the follower's disk (== fetch_offset after each append)
  std::uint32_t max_bytes = 0;
  std::uint32_t wait_ms = 0;  // long poll: hold the request this long if nothing is new
  // The follower's copy was lost and has not caught up yet (docs/replication.md "A lost
  // shard copy"): the leader must not add it to the in-sync set. Sent only once the fleet
  // feature lost_copy_fetch is finalized, as a trailing flags byte: a request without it is
  // byte for byte what older builds send, and the only one they accept.
  bool copy_lost = false;
};

struct FetchResponse {
  LeaderEpoch leader_epoch;
  Offset high_watermark;
  Offset log_start;
  Offset log_end;          // the leader's log end when it answered
  Offset chunk_base;       // the first offset in `chunk` (== the request's fetch_offset)
  LeaderEpoch chunk_epoch; // the epoch every batch of `chunk` was written in (one per chunk)
  std::string_view chunk;  // whole stored batches, as on disk; a view into the payload
};

// Follower -> leader: "where does epoch `epoch` end in your log?" (KIP-279).
struct EpochEndRequest {
  Incarnated env;
  LeaderEpoch epoch;
};

struct EpochEndResponse {
  LeaderEpoch epoch;  // the largest epoch <= the requested one in the leader's history
  Offset end;         // where it ends (the leader's log end for its current epoch)
};

std::string encode(const FetchRequest&);
std::string encode(const FetchResponse&);
// A fetch answer is its fixed header, then the chunk. The leader reads the chunk from disk
// straight behind room for the header and writes the header in place (no copy of the chunk).
inline constexpr std::size_t kFetchResponseHeaderBytes = 52;
// Writes the header of `m` for a chunk of `chunk_size` bytes (m.chunk is ignored) into `out`.
void encode_fetch_response_header(const FetchResponse& m, std::size_t chunk_size, char* out);
std::string encode(const EpochEndRequest&);
std::string encode(const EpochEndResponse&);

// `payload` must outlive the decoded FetchResponse (its chunk points into it).
Result<FetchRequest> decode_fetch_request(std::string_view payload);
Result<FetchResponse> decode_fetch_response(std::string_view payload);
Result<EpochEndRequest> decode_epoch_end_request(std::string_view payload);
Result<EpochEndResponse> decode_epoch_end_response(std::string_view payload);

}  // namespace sluice::fs_storage
