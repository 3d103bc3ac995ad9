// Small string helpers shared by the host and the plugins, so each rule is written once.
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace sluice {

// Splits a comma-separated configuration list: items are trimmed of spaces and tabs, and
// empty items are dropped ("a, b,,c " -> {"a","b","c"}). Order is kept.
std::vector<std::string> split_list(std::string_view s);

}  // namespace sluice
