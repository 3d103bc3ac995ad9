#include "layout.h"

#include <cinttypes>
#include <cstdio>

#include "sluice/names.h"

namespace sluice::fs_storage {

std::string shard_dir_name(ShardIndex shard, Incarnation incarnation) {
  char buf[64];
  if (incarnation.value() == 0)
    std::snprintf(buf, sizeof buf, "%" PRIu32, shard.value());
  else
    std::snprintf(buf, sizeof buf, "%" PRIu32 "-%016" PRIx64, shard.value(), incarnation.value());
  return buf;
}

Result<std::string> shard_dir(const std::string& root, const ShardRef& ref) {
  // Defence in depth: callers validated already, but a bug above must never become a
  // path traversal.
  if (auto r = validate_name(NameKind::tenant, ref.stream.tenant); !r) return r.error();
  if (auto r = validate_name(NameKind::ns, ref.stream.ns); !r) return r.error();
  if (auto r = validate_name(NameKind::stream, ref.stream.name); !r) return r.error();
  return root + "/" + ref.stream.tenant + "/" + ref.stream.ns + "/" + ref.stream.name + "/" +
         shard_dir_name(ref.shard, ref.incarnation);
}

Result<std::string> replica_mark(const std::string& root, const ShardRef& ref) {
  return shard_dir(root + "/" + std::string(kReplicasDir), ref);
}

std::optional<std::pair<ShardIndex, Incarnation>> parse_shard_dir_name(std::string_view name) {
  const auto dash = name.find('-');
  const std::string_view dec = name.substr(0, dash);
  if (dec.empty() || dec.size() > 10 || (dec.size() > 1 && dec[0] == '0')) return std::nullopt;
  std::uint64_t shard = 0;
  for (char c : dec) {
    if (c < '0' || c > '9') return std::nullopt;
    shard = shard * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (shard > UINT32_MAX) return std::nullopt;
  std::uint64_t inc = 0;
  if (dash != std::string_view::npos) {
    const std::string_view hex = name.substr(dash + 1);
    if (hex.size() != 16) return std::nullopt;
    for (char c : hex) {
      std::uint64_t d;
      if (c >= '0' && c <= '9') d = static_cast<std::uint64_t>(c - '0');
      else if (c >= 'a' && c <= 'f') d = static_cast<std::uint64_t>(c - 'a' + 10);
      else return std::nullopt;
      inc = inc << 4 | d;
    }
    if (inc == 0) return std::nullopt;  // incarnation 0 never has a suffix
  }
  return std::pair{ShardIndex(static_cast<std::uint32_t>(shard)), Incarnation(inc)};
}

namespace {
std::string offset_name(std::uint64_t base, const char* ext) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%020" PRIu64 "%s", base, ext);
  return buf;
}
}  // namespace

std::string segment_file_name(std::uint64_t base_offset) { return offset_name(base_offset, ".log"); }
std::string index_file_name(std::uint64_t base_offset) { return offset_name(base_offset, ".idx"); }

std::optional<std::uint64_t> parse_offset_file_name(std::string_view name, std::string_view ext) {
  if (name.size() != 20 + ext.size() || name.substr(20) != ext) return std::nullopt;
  std::uint64_t v = 0;
  for (char c : name.substr(0, 20)) {
    if (c < '0' || c > '9') return std::nullopt;
    std::uint64_t d = static_cast<std::uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return std::nullopt;
    v = v * 10 + d;
  }
  return v;
}

}  // namespace sluice::fs_storage
