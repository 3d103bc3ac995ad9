// Request-target parsing: path segments (percent-decoded, one at a time, so an encoded
// '/' stays inside its segment and is later refused by validate_name) and query params.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::http_api {

struct Target {
  std::vector<std::string> segments;  // decoded; "/a/b" -> {"a","b"}; "/" -> {}
  std::vector<std::pair<std::string, std::string>> query;  // decoded, in order

  // The last value of `name`, if present.
  std::optional<std::string_view> param(std::string_view name) const;
};

// Percent-decodes `in`. Returns nullopt on a malformed escape ("%zz", "%4").
// `plus_is_space` is for query strings (application/x-www-form-urlencoded).
std::optional<std::string> percent_decode(std::string_view in, bool plus_is_space);

// Returns nullopt if the target is not origin-form ("/...") or has a bad escape.
std::optional<Target> parse_target(std::string_view target);

}  // namespace sluice::http_api
