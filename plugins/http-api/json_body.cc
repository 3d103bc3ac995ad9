// The JSON body helpers declared in handlers.h: Beast-free and Node-free, so the publish
// parser (publish_parse.cc) and its fuzz target link them without the router.
#include <algorithm>
#include <cctype>

#include <boost/json/parse.hpp>

#include "codec.h"
#include "sluice/catalog_json.h"
#include "handlers.h"

namespace sluice::http_api {

namespace json = boost::json;

Result<void> parse_json_object(std::string_view body, json::value& out) {
  boost::system::error_code ec;
  // Same storage as `out`, so the assignment moves instead of copying out of the arena.
  out = json::parse(body, ec, out.storage());
  if (ec) return Error(Errc::malformed_body, "request body is not valid JSON: " + ec.message());
  if (!out.is_object()) return Error(Errc::invalid_argument, "request body must be a JSON object");
  if (!json_numbers_finite(out))
    return Error(Errc::malformed_body, "request body holds a number out of range");
  return {};
}

Result<void> check_fields(const json::object& o, std::initializer_list<std::string_view> allowed,
                          std::string_view where) {
  for (auto& kv : o) {
    const std::string_view k(kv.key().data(), kv.key().size());
    if (std::find(allowed.begin(), allowed.end(), k) == allowed.end()) {
      std::string shown = valid_utf8(k) ? std::string(k) : "(non-UTF-8 name)";
      return Error(Errc::unknown_field,
                   "unknown field \"" + std::string(where) + shown + "\"");
    }
  }
  return {};
}

Result<json::value> only_field(std::string_view body, std::string_view name) {
  json::monotonic_resource mr;
  json::value out(json::storage_ptr{&mr});
  if (auto r = parse_json_object(body, out); !r) return r.error();
  const auto& o = out.get_object();
  if (auto r = check_fields(o, {name}, ""); !r) return r.error();
  const auto* v = o.if_contains(name);
  if (!v) return Error(Errc::invalid_argument, "field \"" + std::string(name) + "\" is required");
  return json::value(*v, json::storage_ptr{});
}

std::string media_type(std::string_view ct) {
  if (auto semi = ct.find(';'); semi != std::string_view::npos) ct = ct.substr(0, semi);
  while (!ct.empty() && (ct.front() == ' ' || ct.front() == '\t')) ct.remove_prefix(1);
  while (!ct.empty() && (ct.back() == ' ' || ct.back() == '\t')) ct.remove_suffix(1);
  std::string out(ct);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace sluice::http_api
