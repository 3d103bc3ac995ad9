#include "cache_codec.h"

#include <cstring>

#include "sluice/hash.h"
#include "sluice/names.h"

namespace sluice::http_api {

void put_u64_le(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
std::uint64_t get_u64_le(const char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

std::string hidden_stream_name(std::string_view prefix, std::string_view name, Incarnation incarnation,
                               ChangeSeq created_seq) {
  std::string head = std::string(prefix) + "." + std::to_string(incarnation.value()) + "." +
                     std::to_string(created_seq.value()) + ".";
  if (head.size() + 2 + name.size() <= kMaxNameBytes) return head + "n." + std::string(name);
  static const char* hex = "0123456789abcdef";
  std::uint64_t h = fnv1a64(name);
  std::string out = head + "h.";
  for (int i = 15; i >= 0; --i) out.push_back(hex[(h >> (4 * i)) & 15]);
  return out;
}

std::string backing_stream_name(std::string_view cache_name, Incarnation incarnation, ChangeSeq created_seq) {
  return hidden_stream_name("__cache", cache_name, incarnation, created_seq);
}

Result<void> validate_cache_key(std::string_view key, std::size_t max_bytes) {
  if (key.empty()) return Error(Errc::invalid_argument, "cache key is empty");
  if (key.size() > max_bytes)
    return Error(Errc::invalid_argument, "cache key is " + std::to_string(key.size()) +
                                             " bytes; the limit is " + std::to_string(max_bytes) +
                                             " (cache.max_key_bytes)");
  for (std::size_t i = 0; i < key.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(key[i]);
    if (c < 0x21 || c > 0x7e) {
      static const char* hex = "0123456789abcdef";
      return Error(Errc::invalid_argument, std::string("cache key has byte 0x") + hex[c >> 4] + hex[c & 15] +
                                               " at position " + std::to_string(i) +
                                               "; keys are visible ASCII (0x21..0x7e)");
    }
  }
  return {};
}

Result<void> validate_cache_key_segment(std::string_view key, std::size_t max_bytes) {
  if (key == "." || key == "..")
    return Error(Errc::invalid_argument, "cache key \"" + std::string(key) +
                                             "\" is a dot segment, which clients and proxies remove from URLs");
  return validate_cache_key(key, max_bytes);
}

std::string encode_cache_record(const CacheRecord& r) {
  std::string out;
  out.reserve(kRestateRecordHeader + r.value.size());
  out.push_back(static_cast<char>(r.op));
  put_u64_le(out, r.nonce);
  put_u64_le(out, static_cast<std::uint64_t>(r.expires_at_ms));
  if (r.op == CacheRecord::Op::restate) put_u64_le(out, r.revision);
  out.append(r.value);
  return out;
}

std::optional<CacheRecord> decode_cache_record(std::string_view b) {
  if (b.size() < kCacheRecordHeader) return std::nullopt;
  CacheRecord r;
  const auto op = static_cast<std::uint8_t>(b[0]);
  if (op < 1 || op > 4) return std::nullopt;
  r.op = static_cast<CacheRecord::Op>(op);
  r.nonce = get_u64_le(b.data() + 1);
  r.expires_at_ms = static_cast<std::int64_t>(get_u64_le(b.data() + 9));
  if (r.op == CacheRecord::Op::restate) {
    if (b.size() < kRestateRecordHeader) return std::nullopt;
    r.revision = get_u64_le(b.data() + kCacheRecordHeader);
    if (r.revision == 0 || r.expires_at_ms < -1) return std::nullopt;
    r.value = b.substr(kRestateRecordHeader);
    return r;
  }
  r.value = b.substr(kCacheRecordHeader);
  if (r.op == CacheRecord::Op::del && !r.value.empty()) return std::nullopt;
  if (r.op == CacheRecord::Op::put_ttl && r.expires_at_ms <= 0) return std::nullopt;
  return r;
}

void CacheIndex::apply(std::string_view key, const CacheRecord& r, std::uint64_t offset, std::int64_t now_ms,
                       std::int64_t stamped_ms) {
  auto it = map_.find(key);
  const std::int64_t expires_at_ms = expiry(r, stamped_ms);
  const bool expired = expires_at_ms >= 0 && expires_at_ms <= now_ms;
  if (r.op == CacheRecord::Op::del || expired) {
    if (it != map_.end()) erase(it);
    return;
  }
  if (it == map_.end()) {
    it = map_.emplace(std::string(key), CacheEntry{}).first;
    live_bytes_ += it->first.size();
  }
  // A restate keeps the key's original revision (docs/architecture.md "Cache compaction").
  it->second.revision = r.op == CacheRecord::Op::restate ? r.revision : offset + 1;
  it->second.expires_at_ms = expires_at_ms;
  live_bytes_ -= it->second.value.size();
  it->second.value.assign(r.value);
  live_bytes_ += it->second.value.size();
}

const CacheEntry* CacheIndex::find(std::string_view key, std::int64_t now_ms) {
  auto it = map_.find(key);
  if (it == map_.end()) return nullptr;
  if (it->second.expired(now_ms)) {
    erase(it);
    return nullptr;
  }
  return &it->second;
}

}  // namespace sluice::http_api
