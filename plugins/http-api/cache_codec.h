// Caches (docs/api.md "Caches"): the pure parts of the data plane, shared by the store
// (cache_store.h) and its unit tests.
//
// A cache incarnation's entries live in a hidden backing stream (backing_stream_name), one
// record per write: the record key is the cache key, the record value an encoded
// CacheRecord. Revisions are the record's shard offset + 1.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "sluice/error.h"
#include "sluice/types.h"

namespace sluice::http_api {

// Names starting with this are reserved for backing streams: the API refuses to create,
// show or touch them (docs/api.md "Names").
inline constexpr std::string_view kReservedPrefix = "__";
inline bool reserved_stream_name(std::string_view name) { return name.substr(0, 2) == kReservedPrefix; }

// "__cache.<incarnation>.<created_seq>.n.<name>", or with "h.<fnv1a64 hex of name>" in place
// of "n.<name>" when that would pass kMaxNameBytes. Passes validate_name(NameKind::stream).
// The create's change sequence makes it unique per create even before the fleet feature
// cache_incarnations is finalized (every create then stores incarnation 0).
std::string backing_stream_name(std::string_view cache_name, Incarnation incarnation, ChangeSeq created_seq);
// The same rule under another kind's prefix ("__cache", "__counter", ...).
std::string hidden_stream_name(std::string_view prefix, std::string_view name, Incarnation incarnation,
                               ChangeSeq created_seq);

// Little-endian integers of the stored record formats (caches, counters).
void put_u64_le(std::string& out, std::uint64_t v);
std::uint64_t get_u64_le(const char* p);

// A cache key: 1..max_bytes bytes, each visible ASCII (0x21..0x7e). invalid_argument
// naming the problem otherwise (never echoing a raw control byte).
Result<void> validate_cache_key(std::string_view key, std::size_t max_bytes);
// A key named by a URL path segment ({k}): a cache key, and not "." or "..", which clients
// and proxies normalize away (RFC 3986 dot segments): DELETE .../keys/.. would reach the
// server as DELETE of the cache itself. Prefixes and `after` in the query may be dots.
Result<void> validate_cache_key_segment(std::string_view key, std::size_t max_bytes);

// One write as stored in the backing stream's record value:
//   byte 0      op: 1 put, 2 delete, 3 put with a TTL
//   bytes 1..8  nonce (u64 LE): tells the writer its record from another broker's
//   bytes 9..16 op 1: expires_at_ms (i64 LE, absolute; -1 none; op 1 with an expiry is
//               only in logs written before op 3: the accepting broker's clock);
//               op 3: ttl_ms (> 0): the entry expires at the record's timestamp + ttl_ms,
//               and the record's timestamp is the shard leader's clock when it appended
//               it (published as -1, stamped by the leader: docs/api.md "Expiry")
//   bytes 17..  the value (put only)
// op 4, restate (docs/architecture.md "Cache compaction"): a key's live state restated at
// the log end by the compactor: bytes 9..16 its absolute expires_at_ms (-1 none), bytes
// 17..24 its original revision (u64 LE, >= 1), bytes 25.. its value (a counter's state
// verbatim). Applied like a put, but revision and expiry come from the record.
struct CacheRecord {
  enum class Op : std::uint8_t { put = 1, del = 2, put_ttl = 3, restate = 4 };
  Op op = Op::put;
  std::uint64_t nonce = 0;
  std::int64_t expires_at_ms = -1;  // op put_ttl: the TTL in ms
  std::uint64_t revision = 0;       // op restate only
  std::string_view value;
};
inline constexpr std::size_t kRestateRecordHeader = 25;
inline constexpr std::size_t kCacheRecordHeader = 17;
std::string encode_cache_record(const CacheRecord& r);
// nullopt when `bytes` is not a CacheRecord (too short, unknown op, delete with a value).
std::optional<CacheRecord> decode_cache_record(std::string_view bytes);

// One shard's live entries. Expired entries are dropped when met (expiry is absolute, so
// an expired entry can never become live again).
struct CacheEntry {
  std::uint64_t revision = 0;     // offset + 1
  std::int64_t expires_at_ms = -1;
  std::string value;
  bool expired(std::int64_t now_ms) const { return expires_at_ms >= 0 && expires_at_ms <= now_ms; }
};
class CacheIndex {
 public:
  // Applies the record at `offset` (already decoded), stamped at `stamped_ms` (the
  // record's timestamp: the leader's clock). A put_ttl without a stamp (< 0: an engine
  // that does not stamp leader time) counts as expired: never live longer than asked.
  void apply(std::string_view key, const CacheRecord& r, std::uint64_t offset, std::int64_t now_ms,
             std::int64_t stamped_ms = -1);
  // The absolute expiry of record `r` stamped at `stamped_ms` (-1: none).
  static std::int64_t expiry(const CacheRecord& r, std::int64_t stamped_ms) {
    if (r.op != CacheRecord::Op::put_ttl) return r.expires_at_ms;
    return stamped_ms < 0 ? 0 : stamped_ms + r.expires_at_ms;
  }
  // The live entry of `key`, or null (an expired one is erased).
  const CacheEntry* find(std::string_view key, std::int64_t now_ms);
  // Up to `limit` live keys >= `from` (and > `after` if not empty) starting with `prefix`,
  // in order, appended to `out` with their entries. Returns true if more may follow.
  template <class Fn>
  bool scan(std::string_view prefix, std::string_view after, std::size_t limit, std::int64_t now_ms, Fn&& fn);
  std::size_t size() const { return map_.size(); }
  // Entries with key > `after` in key order, expired ones included (not erased), while
  // fn(key, entry) returns true (the compactor's walk).
  template <class Fn>
  void walk_from(std::string_view after, Fn&& fn) const {
    for (auto it = map_.upper_bound(after); it != map_.end(); ++it)
      if (!fn(it->first, it->second)) return;
  }
  // Key and value bytes held (the compactor's measure of live data).
  std::uint64_t live_bytes() const { return live_bytes_; }
  void clear() {
    map_.clear();
    live_bytes_ = 0;
  }

 private:
  using Map = std::map<std::string, CacheEntry, std::less<>>;
  Map::iterator erase(Map::iterator it) {
    live_bytes_ -= it->first.size() + it->second.value.size();
    return map_.erase(it);
  }
  Map map_;
  std::uint64_t live_bytes_ = 0;
};

template <class Fn>
bool CacheIndex::scan(std::string_view prefix, std::string_view after, std::size_t limit, std::int64_t now_ms,
                      Fn&& fn) {
  auto it = after.empty() || after < prefix ? map_.lower_bound(prefix) : map_.upper_bound(after);
  std::size_t n = 0;
  while (it != map_.end() && std::string_view(it->first).substr(0, prefix.size()) == prefix) {
    if (it->second.expired(now_ms)) {
      it = erase(it);
      continue;
    }
    if (n == limit) return true;
    fn(it->first, it->second);
    ++n;
    ++it;
  }
  return false;
}

}  // namespace sluice::http_api
