#include "counter_codec.h"

#include "cache_codec.h"

#include "sluice/hash.h"
#include "sluice/names.h"

namespace sluice::http_api {

namespace {
constexpr unsigned char kFormat = 1;
}  // namespace

std::string counter_backing_stream_name(std::string_view counter_name, Incarnation incarnation,
                                        ChangeSeq created_seq) {
  return hidden_stream_name("__counter", counter_name, incarnation, created_seq);
}

std::string encode_counter_record(const CounterRecord& r) {
  std::string out;
  out.reserve(kCounterRecordBytes);
  out.push_back(static_cast<char>(kFormat));
  put_u64_le(out, r.nonce);
  put_u64_le(out, r.producer_id);
  put_u64_le(out, r.sequence);
  put_u64_le(out, static_cast<std::uint64_t>(r.delta));
  return out;
}

std::optional<CounterRecord> decode_counter_record(std::string_view b) {
  if (b.size() != kCounterRecordBytes || static_cast<unsigned char>(b[0]) != kFormat) return std::nullopt;
  CounterRecord r;
  r.nonce = get_u64_le(b.data() + 1);
  r.producer_id = get_u64_le(b.data() + 9);
  r.sequence = get_u64_le(b.data() + 17);
  r.delta = static_cast<std::int64_t>(get_u64_le(b.data() + 25));
  return r;
}

std::optional<std::int64_t> checked_add(std::int64_t a, std::int64_t b) {
  std::int64_t out = 0;
  if (__builtin_add_overflow(a, b, &out)) return std::nullopt;
  return out;
}

AddDecision decide_add(const CounterKeyState* st, const CounterRecord& r) {
  AddDecision d;
  const std::int64_t current = st ? st->value : 0;
  if (r.producer_id != 0) {
    const CounterKeyState::Producer* p = nullptr;
    if (st)
      if (auto it = st->producers.find(r.producer_id); it != st->producers.end()) p = &it->second;
    const std::uint64_t next = p ? p->next : 0;
    if (r.sequence != next) {
      if (p)
        if (auto a = p->answered.find(r.sequence); a != p->answered.end()) {
          d.kind = AddDecision::Kind::duplicate;
          d.value = a->second;
          return d;
        }
      d.kind = AddDecision::Kind::sequence_gap;
      d.expected = next;
      return d;
    }
  }
  auto v = checked_add(current, r.delta);
  if (!v) {
    d.kind = AddDecision::Kind::overflow;
    d.value = current;
    return d;
  }
  d.kind = AddDecision::Kind::apply;
  d.value = *v;
  return d;
}

void apply_add(CounterKeyState& st, const CounterRecord& r, const AddDecision& d) {
  st.value = d.value;
  if (r.producer_id == 0) return;
  auto& p = st.producers[r.producer_id];
  p.next = r.sequence + 1;
  p.answered[r.sequence] = d.value;
  p.used = ++st.tick;
  while (p.answered.size() > kProducerWindow) p.answered.erase(p.answered.begin());
  if (st.producers.size() > kMaxProducersPerKey) {
    auto lru = st.producers.begin();
    for (auto it = st.producers.begin(); it != st.producers.end(); ++it)
      if (it->second.used < lru->second.used) lru = it;
    st.producers.erase(lru);
  }
}

namespace {
constexpr unsigned char kStateFormat = 2;
}  // namespace

std::string encode_counter_state(const CounterKeyState& st) {
  std::string out;
  out.reserve(21 + st.producers.size() * (25 + kProducerWindow * 16));
  out.push_back(static_cast<char>(kStateFormat));
  put_u64_le(out, static_cast<std::uint64_t>(st.value));
  put_u64_le(out, st.tick);
  const auto n = static_cast<std::uint32_t>(st.producers.size());
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  for (const auto& [id, p] : st.producers) {
    put_u64_le(out, id);
    put_u64_le(out, p.next);
    put_u64_le(out, p.used);
    out.push_back(static_cast<char>(p.answered.size()));
    for (const auto& [seq, v] : p.answered) {
      put_u64_le(out, seq);
      put_u64_le(out, static_cast<std::uint64_t>(v));
    }
  }
  return out;
}

std::optional<CounterKeyState> decode_counter_state(std::string_view b) {
  if (b.size() < 21 || static_cast<unsigned char>(b[0]) != kStateFormat) return std::nullopt;
  CounterKeyState st;
  st.value = static_cast<std::int64_t>(get_u64_le(b.data() + 1));
  st.tick = get_u64_le(b.data() + 9);
  std::uint32_t n = 0;
  for (int i = 3; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(b[17 + i]);
  std::size_t at = 21;
  for (std::uint32_t i = 0; i < n; ++i) {
    if (b.size() - at < 25) return std::nullopt;
    const std::uint64_t id = get_u64_le(b.data() + at);
    CounterKeyState::Producer p;
    p.next = get_u64_le(b.data() + at + 8);
    p.used = get_u64_le(b.data() + at + 16);
    const std::size_t k = static_cast<unsigned char>(b[at + 24]);
    at += 25;
    if (k > kProducerWindow || b.size() - at < k * 16) return std::nullopt;
    for (std::size_t j = 0; j < k; ++j, at += 16)
      p.answered[get_u64_le(b.data() + at)] = static_cast<std::int64_t>(get_u64_le(b.data() + at + 8));
    if (!st.producers.emplace(id, std::move(p)).second) return std::nullopt;
  }
  if (at != b.size()) return std::nullopt;
  return st;
}

StoredAdd decide_stored_add(const std::string* stored, const CounterRecord& r) {
  StoredAdd out;
  std::optional<CounterKeyState> st;
  if (stored && !(st = decode_counter_state(*stored))) {
    out.corrupt = true;
    return out;
  }
  out.decision = decide_add(st ? &*st : nullptr, r);
  if (out.decision.kind != AddDecision::Kind::apply || (r.producer_id == 0 && r.delta == 0)) return out;
  if (!st) st.emplace();
  apply_add(*st, r, out.decision);
  out.write = encode_counter_state(*st);
  return out;
}

AddDecision CounterIndex::apply(std::string_view key, const CounterRecord& r) {
  auto it = keys_.find(key);
  AddDecision d = decide_add(it == keys_.end() ? nullptr : &it->second, r);
  if (d.kind != AddDecision::Kind::apply) return d;
  if (it == keys_.end()) it = keys_.emplace(std::string(key), CounterKeyState{}).first;
  apply_add(it->second, r, d);
  return d;
}

std::int64_t CounterIndex::value(std::string_view key) const {
  auto it = keys_.find(key);
  return it == keys_.end() ? 0 : it->second.value;
}

const CounterKeyState* CounterIndex::find(std::string_view key) const {
  auto it = keys_.find(key);
  return it == keys_.end() ? nullptr : &it->second;
}

}  // namespace sluice::http_api
