// The publish body parsers (plugins/http-api/publish_parse.h), both media types, on every
// input: a request body is whatever a client sends.
//
// Properties: an error is one of the 400 codes, never a crash or an exception. A binary
// body that parses re-encodes to the same bytes, and its records are views inside the
// body. A JSON body that parses re-encodes (every key and value as base64, headers,
// shard, timestamp) to a document that parses to the same records, and its headers are
// well-formed record_batch.h encodings.
#include <boost/json.hpp>
#include <string>
#include <vector>

#include "codec.h"
#include "fuzz_check.h"
#include "publish_parse.h"

using namespace sluice;
using namespace sluice::http_api;
namespace json = boost::json;

namespace {

constexpr std::size_t kLimit = 64;  // small, so the limit's own path is reached

bool expected_error(const Error& e) {
  return e.code == Errc::invalid_argument || e.code == Errc::malformed_body ||
         e.code == Errc::unknown_field;
}

bool inside(std::string_view part, std::string_view whole) {
  return part.empty() || (part.data() >= whole.data() && part.data() + part.size() <= whole.data() + whole.size());
}

struct Rec {
  std::optional<std::string> key;
  std::string value;
  std::vector<std::pair<std::string, std::string>> headers;
  std::int64_t ts;
  std::optional<std::uint32_t> shard;
  bool operator==(const Rec&) const = default;
};

Rec own(const PublishRecord& r) {
  Rec x{r.key ? std::optional<std::string>(*r.key) : std::nullopt, std::string(r.value), {}, r.timestamp_ms,
        r.shard};
  std::vector<Header> hs;
  FUZZ_CHECK(decode_headers(r.headers, hs));
  for (auto& h : hs) x.headers.emplace_back(h.name, h.value);
  return x;
}

void binary(std::string_view body) {
  std::vector<PublishRecord> out;
  auto r = parse_publish_binary(body, kLimit, out);
  if (!r) {
    FUZZ_CHECK(expected_error(r.error()));
    return;
  }
  FUZZ_CHECK(!out.empty() && out.size() <= kLimit);
  std::string again;
  for (auto& rec : out) {
    FUZZ_CHECK(inside(rec.value, body) && (!rec.key || inside(*rec.key, body)));
    FUZZ_CHECK(rec.headers.empty() && !rec.shard && rec.timestamp_ms == 0);
    char n[4];
    wire::put_u32(n, rec.key ? static_cast<std::uint32_t>(rec.key->size()) : kNoKey);
    again.append(n, 4);
    wire::put_u32(n, static_cast<std::uint32_t>(rec.value.size()));
    again.append(n, 4);
    if (rec.key) again.append(*rec.key);
    again.append(rec.value);
  }
  FUZZ_CHECK(again == body);
}

std::vector<Rec> json_records(std::string_view body, bool must_parse) {
  json::monotonic_resource mr;
  json::value doc(json::storage_ptr{&mr});
  std::vector<PublishRecord> out;
  auto r = parse_publish_json(body, kLimit, mr, doc, out);
  if (!r) {
    FUZZ_CHECK(!must_parse);
    FUZZ_CHECK(expected_error(r.error()));
    return {};
  }
  FUZZ_CHECK(!out.empty() && out.size() <= kLimit);
  std::vector<Rec> recs;
  for (auto& rec : out) recs.push_back(own(rec));
  return recs;
}

std::string render(const std::vector<Rec>& recs) {
  json::array a;
  for (auto& r : recs) {
    json::object o;
    if (r.key) o["key_base64"] = base64_encode(*r.key);
    o["value_base64"] = base64_encode(r.value);
    if (!r.headers.empty()) {
      json::object h;
      for (auto& [k, v] : r.headers) h[k] = v;
      o["headers"] = std::move(h);
    }
    if (r.shard) o["shard"] = *r.shard;
    if (r.ts) o["timestamp"] = r.ts;
    a.push_back(std::move(o));
  }
  return json::serialize(json::object{{"records", std::move(a)}});
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  binary(body);
  const auto recs = json_records(body, false);
  if (recs.empty()) return 0;
  // A JSON object keeps one value per name (the last, as Boost.JSON parses): compare with
  // what was parsed, not with the input text.
  FUZZ_CHECK(json_records(render(recs), true) == recs);
  return 0;
}
