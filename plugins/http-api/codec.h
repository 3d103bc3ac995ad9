// JSON shapes of the API (README.md "JSON shapes") and the small encodings they need.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <boost/json/fwd.hpp>
#include <boost/json/object.hpp>

#include "http_types.h"
#include "sluice/node.h"

namespace sluice::http_api {

bool valid_utf8(std::string_view s);
std::string base64_encode(std::string_view in);
// Standard alphabet, '=' padding optional. nullopt on a bad character or length.
std::optional<std::string> base64_decode(std::string_view in);
// Decodes into `out`, which has room for in.size() / 4 * 3 + 3 bytes. Returns the size.
std::optional<std::size_t> base64_decode_to(std::string_view in, char* out);

boost::json::object tenant_json(const TenantInfo& t);
boost::json::object namespace_json(const NamespaceInfo& n);
boost::json::object stream_json(const StreamInfo& s);
boost::json::object shard_status_json(const ShardStatus& s);
// A shard's replica state as the catalog holds it (a leader move's answer).
boost::json::object assignment_json(const Assignment& a);
boost::json::object cluster_json(const NodeInfo& i);

HttpResponse json_response(int status, const boost::json::value& v);
HttpResponse json_response(int status, const boost::json::object& v);

}  // namespace sluice::http_api
