// The two publish bodies of POST {ns}/streams/{s}/records, as PublishRecord views. Pure:
// the handler (publish.cc) and the fuzz target (tests/fuzz/) call the same functions.
//
// Binary batch (Content-Type: application/vnd.sluice.batch), all integers little-endian:
//   repeated until the end of the body:
//     u32 key_len (0xffffffff = no key) | u32 value_len | key bytes | value bytes
// Records become PublishRecord views into the request body (no copies, one vector
// allocation). The body lives in the Exchange, which outlives the publish() call.
//
// JSON: {"records":[{"key"|"key_base64","value"|"value_base64","headers","shard",
// "timestamp"}, ...]} (docs/api.md).
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include <boost/json/monotonic_resource.hpp>
#include <boost/json/value.hpp>

#include "sluice/node.h"

namespace sluice::http_api {

inline constexpr std::string_view kBatchMedia = "application/vnd.sluice.batch";

// malformed_body when the framing is wrong, invalid_argument when there are no records or
// more than `limit`. On error `out` holds nothing the caller may use.
Result<void> parse_publish_binary(std::string_view body, std::size_t limit,
                                  std::vector<PublishRecord>& out);
// `doc` (allocated from `mr`) holds the parsed document; records view it and `mr` (decoded
// base64, encoded headers), so both must outlive `out`'s use.
Result<void> parse_publish_json(std::string_view body, std::size_t limit,
                                boost::json::monotonic_resource& mr, boost::json::value& doc,
                                std::vector<PublishRecord>& out);

}  // namespace sluice::http_api
