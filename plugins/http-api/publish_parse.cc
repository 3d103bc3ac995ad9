// The publish bodies (publish_parse.h).
#include "publish_parse.h"

#include <cstring>

#include <boost/json/object.hpp>
#include <boost/json/string.hpp>

#include "codec.h"
#include "handlers.h"

namespace sluice::http_api {

namespace json = boost::json;

namespace {

Error too_many(std::size_t limit) {
  return Error(Errc::invalid_argument, "a publish may hold at most " + std::to_string(limit) +
                                           " records (broker.max_records_per_publish)");
}

std::string_view sv(const json::string& s) { return {s.data(), s.size()}; }

Error bad(std::size_t i, const std::string& what) {
  return Error(Errc::invalid_argument, "records[" + std::to_string(i) + "]: " + what);
}

// Bytes the records need beyond the parsed document (decoded base64, encoded headers)
// are carved from the same monotonic arena as the document: no per-record heap
// allocation, and everything lives until the handler returns.
class Arena {
 public:
  explicit Arena(json::monotonic_resource& mr) : mr_(mr) {}
  char* alloc(std::size_t n) { return n ? static_cast<char*>(mr_.allocate(n, 1)) : nullptr; }
  // nullopt if `b64` is not valid base64.
  std::optional<std::string_view> decode_base64(std::string_view b64) {
    char* out = alloc(b64.size() / 4 * 3 + 3);
    auto n = base64_decode_to(b64, out);
    if (!n) return std::nullopt;
    return std::string_view(out, *n);
  }

 private:
  json::monotonic_resource& mr_;
};

}  // namespace

Result<void> parse_publish_binary(std::string_view body, std::size_t limit, std::vector<PublishRecord>& out) {
  // Pass 1: validate framing and count, so the vector is allocated exactly once, and never
  // beyond the record limit (a body of empty records would otherwise cost 10x its size).
  std::size_t count = 0;
  for (std::size_t pos = 0; pos < body.size(); ++count) {
    if (count == limit) return too_many(limit);
    if (body.size() - pos < 8)
      return Error(Errc::malformed_body, "binary batch: truncated record header at byte " +
                                             std::to_string(pos));
    const std::uint32_t kl = wire::get_u32(body.data() + pos);
    const std::uint32_t vl = wire::get_u32(body.data() + pos + 4);
    const std::uint64_t need = 8ull + (kl == kNoKey ? 0ull : kl) + vl;
    if (body.size() - pos < need)
      return Error(Errc::malformed_body, "binary batch: record " + std::to_string(count) +
                                             " at byte " + std::to_string(pos) +
                                             " runs past the end of the body");
    pos += need;
  }
  if (count == 0) return Error(Errc::invalid_argument, "no records to publish");
  out.reserve(count);
  for (std::size_t pos = 0; pos < body.size();) {
    const std::uint32_t kl = wire::get_u32(body.data() + pos);
    const std::uint32_t vl = wire::get_u32(body.data() + pos + 4);
    pos += 8;
    PublishRecord& r = out.emplace_back();
    if (kl != kNoKey) {
      r.key = body.substr(pos, kl);
      pos += kl;
    }
    r.value = body.substr(pos, vl);
    pos += vl;
  }
  return {};
}

Result<void> parse_publish_json(std::string_view body, std::size_t limit, json::monotonic_resource& mr,
                                json::value& doc, std::vector<PublishRecord>& out) {
  Arena arena(mr);
  if (auto r = parse_json_object(body, doc); !r) return r;
  const auto& o = doc.get_object();
  if (auto r = check_fields(o, {"records"}, ""); !r) return r;
  const auto* recs = o.if_contains("records");
  if (!recs) return Error(Errc::invalid_argument, "field \"records\" is required");
  if (!recs->is_array()) return Error(Errc::invalid_argument, "field \"records\" must be an array");
  const auto& arr = recs->get_array();
  if (arr.empty()) return Error(Errc::invalid_argument, "no records to publish");
  if (arr.size() > limit) return too_many(limit);
  out.reserve(arr.size());
  for (std::size_t i = 0; i < arr.size(); ++i) {
    if (!arr[i].is_object()) return bad(i, "must be an object");
    const auto& ro = arr[i].get_object();
    const std::string where = "records[" + std::to_string(i) + "].";
    if (auto r = check_fields(ro, {"key", "key_base64", "value", "value_base64", "headers",
                                   "shard", "timestamp"},
                              where);
        !r)
      return r;
    PublishRecord& rec = out.emplace_back();
    const auto* key = ro.if_contains("key");
    const auto* key64 = ro.if_contains("key_base64");
    if (key && key64) return bad(i, "give \"key\" or \"key_base64\", not both");
    if (key) {
      if (!key->is_string()) return bad(i, "\"key\" must be a string");
      rec.key = sv(key->get_string());
    } else if (key64) {
      if (!key64->is_string()) return bad(i, "\"key_base64\" must be a string");
      auto d = arena.decode_base64(sv(key64->get_string()));
      if (!d) return bad(i, "\"key_base64\" is not valid base64");
      rec.key = *d;
    }
    const auto* val = ro.if_contains("value");
    const auto* val64 = ro.if_contains("value_base64");
    if (val && val64) return bad(i, "give \"value\" or \"value_base64\", not both");
    if (!val && !val64) return bad(i, "\"value\" or \"value_base64\" is required");
    if (val) {
      if (!val->is_string()) return bad(i, "\"value\" must be a string");
      rec.value = sv(val->get_string());
    } else {
      if (!val64->is_string()) return bad(i, "\"value_base64\" must be a string");
      auto d = arena.decode_base64(sv(val64->get_string()));
      if (!d) return bad(i, "\"value_base64\" is not valid base64");
      rec.value = *d;
    }
    if (const auto* h = ro.if_contains("headers")) {
      if (!h->is_object()) return bad(i, "\"headers\" must be an object of strings");
      // Encoded as record_batch.h says: (u16 name_len | name | u32 value_len | value)*.
      std::size_t size = 0;
      for (auto& kv : h->get_object()) {
        if (!kv.value().is_string()) return bad(i, "\"headers\" values must be strings");
        if (kv.key().size() > 0xffff) return bad(i, "header name longer than 65535 bytes");
        size += 6 + kv.key().size() + kv.value().get_string().size();
      }
      char* p = arena.alloc(size);
      rec.headers = std::string_view(p, size);
      for (auto& kv : h->get_object()) {
        const auto& v = kv.value().get_string();
        wire::put_u16(p, static_cast<std::uint16_t>(kv.key().size()));
        std::memcpy(p + 2, kv.key().data(), kv.key().size());
        p += 2 + kv.key().size();
        wire::put_u32(p, static_cast<std::uint32_t>(v.size()));
        std::memcpy(p + 4, v.data(), v.size());
        p += 4 + v.size();
      }
    }
    if (const auto* s = ro.if_contains("shard")) {
      if (s->is_int64() && s->get_int64() >= 0 && s->get_int64() <= 0xffffffffLL)
        rec.shard = static_cast<std::uint32_t>(s->get_int64());
      else if (s->is_uint64() && s->get_uint64() <= 0xffffffffULL)
        rec.shard = static_cast<std::uint32_t>(s->get_uint64());
      else
        return bad(i, "\"shard\" must be a non-negative integer");
    }
    if (const auto* t = ro.if_contains("timestamp")) {
      if (t->is_int64() && t->get_int64() >= 0)
        rec.timestamp_ms = t->get_int64();
      else if (t->is_uint64() && t->get_uint64() <= static_cast<std::uint64_t>(INT64_MAX))
        rec.timestamp_ms = static_cast<std::int64_t>(t->get_uint64());
      else
        return bad(i, "\"timestamp\" must be a non-negative integer (ms since epoch)");
    }
  }
  return {};
}

}  // namespace sluice::http_api
