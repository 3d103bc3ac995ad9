// The HTTP request-target parser (plugins/http-api/path.h) and the route table
// (routes.h) behind it, as the router calls them on every request.
//
// Properties: a target that parses starts with '/'; re-encoding its decoded segments and
// query (every byte outside the unreserved set as %XX) parses to the same Target; a route
// that matches allows at least one method, and its Allow list is honoured by
// method_allowed; the last value of each query name is what param() answers; a segment
// validate_name accepts is a safe path component.
#include <string>

#include "fuzz_check.h"
#include "path.h"
#include "routes.h"
#include "sluice/names.h"

using namespace sluice;
using namespace sluice::http_api;

namespace {

std::string encode(std::string_view s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const auto t = parse_target(in);
  if (!t) return 0;
  FUZZ_CHECK(!in.empty() && in.front() == '/');

  std::string again = "/";
  for (std::size_t i = 0; i < t->segments.size(); ++i) again += (i ? "/" : "") + encode(t->segments[i]);
  for (std::size_t i = 0; i < t->query.size(); ++i)
    again += (i ? "&" : "?") + encode(t->query[i].first) + "=" + encode(t->query[i].second);
  const auto t2 = parse_target(again);
  FUZZ_CHECK(t2.has_value());
  // "/" and "/?" both mean no segments; an empty name=value pair ("&&") is skipped.
  FUZZ_CHECK(t2->segments == t->segments);
  FUZZ_CHECK(t2->query == t->query);
  for (auto& [k, v] : t->query) {
    auto p = t->param(k);
    FUZZ_CHECK(p.has_value());
    std::string_view last;
    for (auto& [k2, v2] : t->query)
      if (k2 == k) last = v2;
    FUZZ_CHECK(*p == last);
  }

  if (auto def = match_route(t->segments)) {
    FUZZ_CHECK(!def->allow.empty() && !def->label.empty());
    bool any = false;
    for (const char* m : {"GET", "POST", "DELETE", "PUT", "PATCH"}) any |= method_allowed(def->allow, m);
    FUZZ_CHECK(any);
    FUZZ_CHECK(!method_allowed(def->allow, ""));
  }
  // Every decoded segment may reach validate_name (router.h): a name it accepts is a safe
  // path component (sluice/names.h).
  for (const auto& seg : t->segments) {
    if (!validate_name(NameKind::stream, seg)) continue;
    FUZZ_CHECK(!seg.empty() && seg.size() <= kMaxNameBytes && seg.front() != '.');
    FUZZ_CHECK(seg.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") ==
               std::string::npos);
  }
  return 0;
}
