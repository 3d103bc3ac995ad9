// FNV-1a 64: the hash behind key partitioning and shard placement. Part of the product's
// contract (changing it re-routes every keyed stream and moves placements), so it is
// written once, here.
#pragma once

#include <cstdint>
#include <string_view>

namespace sluice {

constexpr std::uint64_t fnv1a64(std::string_view s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace sluice
