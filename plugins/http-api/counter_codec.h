// Counters (docs/api.md "Counters"): the pure parts of a counter data plane, for a store on
// the cache machinery (cache_store.h) and its unit tests. NOT SERVED YET: no route uses
// these; they pin the rules such a store decides with, so that every broker replaying a
// counter's keyed log computes the same values.
//
// A counter incarnation's adds would live in a hidden backing stream
// (counter_backing_stream_name), one record per add, sharded by key hash: the record key is
// the counter key, the record value an encoded CounterRecord. Replaying the log through
// CounterIndex::apply gives every key's value; an add is decided against the index
// (decide_add) before it is appended, and re-decided identically on replay.
//
// Idempotent adds, per (counter incarnation, key, producer): a producer's first sequence is
// 0 and each add takes the next; a retry of one of its last kProducerWindow sequences
// answers the original value and changes nothing; any other sequence is sequence_gap,
// naming the expected one. An add that would leave int64 is counter_overflow. Neither is
// applied (on replay either: decide_add is a pure function of the index and the record).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "sluice/types.h"

namespace sluice::http_api {

// "__counter.<incarnation>.<created_seq>.n.<name>", or "h.<fnv1a64 hex>" in place of
// "n.<name>" when that would pass kMaxNameBytes (the cache rule, cache_codec.h). A recreated
// counter (a new incarnation) never reads the old one's records.
std::string counter_backing_stream_name(std::string_view counter_name, Incarnation incarnation,
                                        ChangeSeq created_seq);

// One add as stored in the backing stream's record value (33 bytes, integers LE):
//   byte 0       format 1
//   bytes 1..8   nonce (the writer's, as CacheRecord's)
//   bytes 9..16  producer id (0: none)
//   bytes 17..24 sequence (ignored without a producer id)
//   bytes 25..32 delta (i64)
struct CounterRecord {
  std::uint64_t nonce = 0;
  std::uint64_t producer_id = 0;
  std::uint64_t sequence = 0;
  std::int64_t delta = 0;
  bool operator==(const CounterRecord&) const = default;
};
inline constexpr std::size_t kCounterRecordBytes = 33;
std::string encode_counter_record(const CounterRecord& r);
// nullopt when `bytes` is not a CounterRecord (wrong size or format).
std::optional<CounterRecord> decode_counter_record(std::string_view bytes);

// a + b, or nullopt when it leaves int64.
std::optional<std::int64_t> checked_add(std::int64_t a, std::int64_t b);

inline constexpr std::size_t kProducerWindow = 5;  // as the streams' idempotent producers

// One key's state: its value and, per producer, the next sequence and the values its last
// kProducerWindow adds answered.
struct CounterKeyState {
  std::int64_t value = 0;
  struct Producer {
    std::uint64_t next = 0;
    std::map<std::uint64_t, std::int64_t> answered;  // sequence -> value after that add
  };
  std::map<std::uint64_t, Producer> producers;
};

struct AddDecision {
  enum class Kind { apply, duplicate, sequence_gap, overflow };
  Kind kind = Kind::apply;
  std::int64_t value = 0;       // apply: the new value; duplicate: the original answer;
                                // overflow: the current value
  std::uint64_t expected = 0;   // sequence_gap: the sequence the producer must send next
};
// How an add is decided against the key's state (null: the key has never been added to).
AddDecision decide_add(const CounterKeyState* st, const CounterRecord& r);

class CounterIndex {
 public:
  // Decides `r` (decide_add) and applies it when the decision is `apply`. Returns the decision.
  AddDecision apply(std::string_view key, const CounterRecord& r);
  // The key's value (0 when never added to).
  std::int64_t value(std::string_view key) const;
  const CounterKeyState* find(std::string_view key) const;
  std::size_t size() const { return keys_.size(); }

 private:
  std::map<std::string, CounterKeyState, std::less<>> keys_;
};

}  // namespace sluice::http_api
