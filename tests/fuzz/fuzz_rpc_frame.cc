// The controller RPC's wire (plugins/raft-meta/rpc_codec.h): a byte stream cut into
// frames by decode_frame_header, each body read as the server reads a request
// (decode_request, then the SDK catalog decoders on its params) and as the client reads a
// response (decode_response).
//
// Properties: a header re-encodes to its bytes; an oversized length is refused; a request
// that decodes re-encodes (encode_request) to one that decodes to the same envelope; a
// catalog value that decodes re-encodes (to_json) to JSON that decodes to the same JSON
// again; malformed input is an Error or a std::exception (what the server catches), never
// a crash.
#include <boost/json.hpp>
#include <cstring>
#include <string>

#include "fuzz_check.h"
#include "rpc_codec.h"

using namespace sluice;
using namespace sluice::raft_meta;
namespace json = boost::json;

namespace {

// decode -> to_json -> decode -> to_json gives the same JSON twice.
template <class Decode>
void round_trip(const json::value& v, Decode decode) {
  std::string first;
  try {
    first = json::serialize(rpc::to_json(decode(v)));
  } catch (const std::exception&) {
    return;  // refused: the server answers malformed_body
  }
  const json::value again = json::parse(first);
  FUZZ_CHECK(json::serialize(rpc::to_json(decode(again))) == first);
}

// The params the server reads, by field name (rpc_server.cc).
void params(const json::value& p) {
  if (!p.is_object()) return;
  const auto& o = p.get_object();
  if (auto* k = o.if_contains("key")) round_trip(*k, rpc::key_from);
  if (auto* s = o.if_contains("spec")) {
    round_trip(*s, rpc::spec_from);
    round_trip(*s, rpc::cache_spec_from);
  }
  if (auto* b = o.if_contains("broker")) round_trip(*b, rpc::registration_from);
  if (auto* m = o.if_contains("member")) round_trip(*m, rpc::join_from);
  if (auto* u = o.if_contains("update"))
    round_trip(*u, [](const json::value& v) { return json::value_to<ShardUpdate>(v); });
}

void request(std::string_view body) {
  auto r = rpc::decode_request(body);
  if (!r) {
    FUZZ_CHECK(r.error().code == Errc::malformed_body);
    return;
  }
  const std::string enc = rpc::encode_request(*r);
  auto r2 = rpc::decode_request(enc);
  FUZZ_CHECK(r2.ok());
  FUZZ_CHECK(r2->cluster_id == r->cluster_id && r2->method == r->method && r2->forwarded == r->forwarded);
  FUZZ_CHECK(json::serialize(r2->params) == json::serialize(r->params));
  params(r->params);
}

void response(std::string_view body) {
  bool malformed = true;
  auto r = rpc::decode_response(body, &malformed);
  if (malformed) {
    FUZZ_CHECK(!r && r.error().code == Errc::internal);
    return;
  }
  if (!r) return;
  boost::system::error_code ec;
  const json::value v = json::parse(*r, ec);
  FUZZ_CHECK(!ec);  // the result is handed on as JSON text
  // The client's decoders (rpc_client.cc) on the result.
  round_trip(v, rpc::stream_from);
  round_trip(v, rpc::snapshot_from);
  round_trip(v, rpc::members_from);
  round_trip(v, rpc::event_from);
  round_trip(v, rpc::assignment_from);
  round_trip(v, rpc::status_from);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::size_t at = 0;
  while (size - at >= 4) {
    std::string why;
    const auto n = rpc::decode_frame_header(data + at, &why);
    if (!n) {
      FUZZ_CHECK(why.find("oversized") == 0);
      return 0;
    }
    FUZZ_CHECK(*n <= rpc::kMaxFrame);
    FUZZ_CHECK(std::memcmp(rpc::encode_frame_header(*n).data(), data + at, 4) == 0);
    at += 4;
    if (size - at < *n) return 0;  // truncated: read_frame gives up
    const std::string_view body(reinterpret_cast<const char*>(data + at), *n);
    at += *n;
    request(body);
    response(body);
  }
  return 0;
}
