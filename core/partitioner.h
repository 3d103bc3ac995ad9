// Which shard a published record goes to. Pure functions: the mapping is part of the
// product's contract (a key always lands on the same shard while the shard count stays).
//
//   explicit shard  -> that shard (must be < shards)
//   key present     -> fnv1a64(key) % shards
//   no key          -> one shard per request, rotating between requests ("sticky"), so a
//                      keyless request costs one batch and one sync
#pragma once

#include <cstdint>
#include <string_view>

#include "sluice/hash.h"

namespace sluice::core {

using sluice::fnv1a64;

constexpr std::uint32_t shard_for_key(std::string_view key, std::uint32_t shards) {
  return static_cast<std::uint32_t>(fnv1a64(key) % shards);
}

}  // namespace sluice::core
