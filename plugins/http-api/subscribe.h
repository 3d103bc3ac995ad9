// WebSocket subscribe (docs/api.md "Subscribe"): what the router checks before the
// upgrade, the client's credit message and the close codes. Beast-free: the session that
// runs after the upgrade is ws_session.cc, the only file that includes Beast's websocket.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>

#include "config.h"
#include "http_types.h"
#include "path.h"
#include "sluice/node.h"

namespace sluice::http_api {

// One accepted subscription: where it starts and how it delivers.
struct Subscription {
  StreamKey key;
  ShardIndex shard{0};
  Offset from{0};
  bool binary = false;        // format=binary: one stored batch per binary frame
  std::int64_t credit = 0;    // initial credit, in records (`credit` query parameter)
  bool remote = false;        // another broker leads the shard: reads run on the blocking pool
  std::string group;          // a group subscription when not empty
  GroupOptions opts;          // the group's max_deliveries and ack_timeout_ms
  // The stream's incarnation when the subscription began: a subscription ends with it. A
  // name deleted and created again is another stream, whose offsets (and groups) have
  // nothing to do with this one's (docs/api.md "Subscribe").
  Incarnation incarnation{0};
  // With authentication on: whether the upgrade's token still allows the subscription
  // (docs/security.md "Tokens file": a reload revokes). Empty when authentication is off.
  std::function<bool()> still_authorized;
};

// Whether `sub`'s stream still is the incarnation it subscribed to, on this broker: a
// not_found error (close 4404) says it was deleted, or deleted and created again. Reads
// and group calls are bracketed by it: incarnations never come back, so a check that
// passes before and after a call proves the call went to the subscribed incarnation.
Result<void> check_incarnation(Node& node, const Subscription& sub);
// The same for any read pinned to `incarnation` of `key` (a fetch, a long poll).
Result<void> check_incarnation(Node& node, const StreamKey& key, Incarnation incarnation);

// Limits of the credit protocol.
inline constexpr std::uint64_t kDefaultCredit = 1000;           // `credit` when absent
inline constexpr std::uint64_t kMaxCreditGrant = 1'000'000;     // one message, or the parameter
inline constexpr std::int64_t kMaxCredit = 1'000'000'000;       // what credit accumulates to
inline constexpr std::size_t kMaxClientMessage = 4096;          // bytes; larger is closed with 1009
inline constexpr std::uint32_t kMaxRecordsPerFrame = 1000;      // JSON frames

// Close codes (RFC 6455 private range 4000-4999); docs/api.md lists them all.
inline constexpr std::uint16_t kCloseBadMessage = 4400;    // a client message that is not {"credit": N}
inline constexpr std::uint16_t kCloseSlowConsumer = 4408;  // no credit, or a stalled write, too long
inline constexpr std::uint16_t kCloseErrorBase = 4000;     // + the HTTP status of a read error

// GET {ns}/streams/{s}/shards/{n}/subscribe?offset=&format=json|binary&credit=
// Answers a problem (the same the fetch at that offset would answer, or 426 for a request
// that is not a WebSocket upgrade) or hands the connection over with Exchange::upgrade.
void handle_subscribe(Node& node, const std::shared_ptr<Exchange>& ex, const StreamKey& key,
                      ShardIndex shard, const Target& target);

// GET {ns}/streams/{s}/groups/{g}/shards/{n}/subscribe?credit=&max_deliveries=&ack_timeout_ms=
// The group's records (JSON frames only), acked and nacked on the same socket.
void handle_group_subscribe(Node& node, const std::shared_ptr<Exchange>& ex, const StreamKey& key,
                            ShardIndex shard, const std::string& group, const Target& target);

// One text message from the subscriber. A shard subscription takes {"credit": N}; a group
// subscription any of {"credit": N, "ack": [offsets], "nack": [offsets]}, at least one.
// N is in 1..kMaxCreditGrant. The error says what is wrong (sent as the close reason).
struct ClientMessage {
  std::uint64_t credit = 0;
  std::vector<Offset> ack, nack;
};
Result<ClientMessage> parse_client_message(std::string_view text, bool group);

}  // namespace sluice::http_api
