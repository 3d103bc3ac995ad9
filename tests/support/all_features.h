// Every fleet feature this build knows (sluice/features.h known_features), by name: what a
// broker of this build reports, and what a cluster must hold back at bootstrap to look like
// one upgraded from level 8. Tests build their lists from it, so a new feature needs no
// change to them.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "sluice/features.h"

namespace sluice::testing {

// Sorted, as a broker registration lists them.
inline std::vector<std::string> all_features() {
  std::vector<std::string> out;
  for (const auto& f : known_features()) out.emplace_back(f.name);
  std::sort(out.begin(), out.end());
  return out;
}

// Comma-joined, as metadata.bootstrap_hold_back takes them.
inline std::string all_features_joined() {
  std::string out;
  for (const auto& f : all_features()) out += (out.empty() ? "" : ",") + f;
  return out;
}

}  // namespace sluice::testing
