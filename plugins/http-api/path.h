// Request-target parsing: path segments (percent-decoded, one at a time, so an encoded
// '/' stays inside its segment and is later refused by validate_name) and query params.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sluice/error.h"

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

// A whole string of decimal digits as a u64; nullopt otherwise (empty, sign, junk, overflow).
std::optional<std::uint64_t> parse_u64(std::string_view s);
// The query parameter `name` as an integer in [lo, hi], `def` when absent; invalid_argument
// naming the range otherwise.
Result<std::uint64_t> u64_param(const Target& t, const char* name, std::uint64_t def,
                                std::uint64_t lo, std::uint64_t hi);

// Returns nullopt if the target is not origin-form ("/...") or has a bad escape.
std::optional<Target> parse_target(std::string_view target);

}  // namespace sluice::http_api
