// Counters (docs/api.md "Counters"): the pure parts of the counter data plane, served by
// counters.cc on the cache machinery (cache_store.h), and their unit tests.
//
// A counter incarnation's keys live in a hidden backing stream (counter_backing_stream_name)
// kept by a CacheStore: one cache record per applied add, whose value is the key's whole
// state after the add (encode_counter_state: the value and its producers' windows). An add
// is a read-modify-write decided against the caught-up index (CacheStore::update,
// decide_add + apply_add), so every broker reading the log sees the same state without
// re-deciding anything on replay. (CounterRecord and CounterIndex express the same rules
// over a log of deltas; the store does not write CounterRecords.)
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
    std::uint64_t used = 0;  // the key's `tick` at this producer's last add
  };
  std::map<std::uint64_t, Producer> producers;
  std::uint64_t tick = 0;  // adds with a producer id applied to this key
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

// A key remembers its kMaxProducersPerKey most recently used producers; the least recently
// used one is forgotten when another comes (it then starts again at sequence 0, and a
// retry of its old sequences is sequence_gap). This bounds a key's state (and so each
// record written) to about 100 bytes per producer.
inline constexpr std::size_t kMaxProducersPerKey = 64;

// Applies an `apply` decision of decide_add(&st, r) to `st`.
void apply_add(CounterKeyState& st, const CounterRecord& r, const AddDecision& d);

// A key's state as stored (the cache record's value; integers LE):
//   byte 0  format 2;  bytes 1..8 value (i64);  bytes 9..16 tick;  bytes 17..20 producer count
//   per producer: id, next, used (u64 each), answered count (u8), then per answer
//   sequence (u64) and value (i64).
std::string encode_counter_state(const CounterKeyState& st);
// nullopt when `bytes` is not an encoded state.
std::optional<CounterKeyState> decode_counter_state(std::string_view bytes);

// An add decided against the key's stored state (null: the key has none): the decision and,
// when it changes the state, the new state's encoding to write. `corrupt`: the stored state
// does not decode (nothing decided). An add of 0 without a producer writes nothing.
struct StoredAdd {
  AddDecision decision;
  bool corrupt = false;
  std::optional<std::string> write;
};
StoredAdd decide_stored_add(const std::string* stored, const CounterRecord& r);

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
