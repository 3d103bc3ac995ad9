// Counters in the catalog (docs/api.md "Counters"; metadata level 18, fleet feature
// `counters`):
//
//   GET    {ns}/counters          {"counters":[counter]}
//   POST   {ns}/counters          {"name"} -> 201 counter; 409 conflict until `counters` is
//                                  finalized (or while a metadata member is below level 18)
//   GET    {ns}/counters/{c}      counter {"tenant","namespace","name","incarnation","created_seq"}
//   DELETE {ns}/counters/{c}      200 the deleted counter
//   GET    {ns}/counters/{c}/keys/{k}      -> 200 {"key","value"} (0: never added to)
//   POST   {ns}/counters/{c}/keys/{k}/add?producer_id=&sequence=&if_incarnation=&ack=
//            body {"delta": int64}
//            -> 200 {"key","value"[,"duplicate":true]}; 409 sequence_gap {"expected_sequence"};
//               409 counter_overflow {"value"}; 409 conflict (if_incarnation: the counter is
//               another one now)
//   Both answer the counter's incarnation in Sluice-Counter-Incarnation (values and
//   producer windows mean something only within one incarnation).
//
// Backends without counters answer 501 not_supported. The keys live in the counter store
// (a CacheStore of flavor counters(), cache_store.h); an add is a read-modify-write of the
// key's state (counter_codec.h).
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

#include "cache_store.h"
#include "codec.h"
#include "counter_codec.h"
#include "handlers.h"
#include "problem.h"
#include "sluice/failpoint.h"
#include "sluice/names.h"

namespace sluice::http_api {

namespace json = boost::json;

namespace {

json::object counter_json(const CounterInfo& c) {
  json::object o;
  o["tenant"] = c.key.tenant;
  o["namespace"] = c.key.ns;
  o["name"] = c.key.name;
  o["incarnation"] = c.incarnation.value();
  o["created_seq"] = c.created_seq.value();
  return o;
}

Result<std::string> counter_body(std::string_view body) {
  auto n = only_field(body, "name");
  if (!n) return n.error();
  if (!n->is_string()) return Error(Errc::invalid_argument, "field \"name\" must be a string");
  std::string name(n->get_string());
  if (auto r = validate_name(NameKind::counter, name); !r) return r.error();
  return name;
}

// The add's body: {"delta": int64}.
Result<std::int64_t> add_body(std::string_view body) {
  auto d = only_field(body, "delta");
  if (!d) return d.error();
  if (d->is_int64()) return d->get_int64();
  if (d->is_uint64()) return Error(Errc::invalid_argument, "field \"delta\" must fit in a signed 64-bit integer");
  return Error(Errc::invalid_argument, "field \"delta\" must be an integer");
}

// producer_id (1..2^64-1) and sequence (0..2^64-1) come together or not at all.
Result<std::pair<std::uint64_t, std::uint64_t>> producer_params(const Target& t) {
  auto pid = t.param("producer_id");
  auto seq = t.param("sequence");
  if (!pid && !seq) return std::pair<std::uint64_t, std::uint64_t>{0, 0};
  if (!pid || !seq) return Error(Errc::invalid_argument, "producer_id and sequence go together: give both or neither");
  auto p = parse_u64(*pid);
  if (!p || *p == 0) return Error(Errc::invalid_argument, "producer_id must be an integer from 1 to 2^64-1");
  auto s = parse_u64(*seq);
  if (!s) return Error(Errc::invalid_argument, "sequence must be an integer from 0 to 2^64-1");
  return std::pair<std::uint64_t, std::uint64_t>{*p, *s};
}

HttpResponse conflict(std::string_view code, std::string_view title, std::string detail, std::string_view field,
                      json::value extra) {
  json::object o;
  o["type"] = "https://sluice.dev/errors/" + std::string(code);
  o["title"] = title;
  o["status"] = 409;
  o["code"] = code;
  o["detail"] = std::move(detail);
  o["outcome"] = "definite";
  o[field] = std::move(extra);
  HttpResponse r;
  r.status = 409;
  r.content_type = std::string(kProblemJson);
  r.body = json::serialize(o);
  return r;
}

HttpResponse value_json(std::string_view key, std::int64_t value, bool duplicate = false) {
  json::object o;
  o["key"] = key;
  o["value"] = value;
  if (duplicate) o["duplicate"] = true;
  return json_response(200, o);
}

constexpr std::string_view kIncarnationHeader = "Sluice-Counter-Incarnation";

HttpResponse add_answer(const StreamKey& counter, const std::string& key, const CounterRecord& rec,
                        const StoredAdd& d);

HttpResponse with_incarnation(HttpResponse resp, Incarnation inc) {
  resp.headers.emplace_back(std::string(kIncarnationHeader), std::to_string(inc.value()));
  return resp;
}

HttpResponse add(CacheStore& store, const StreamKey& counter, const std::string& key, const CounterRecord& rec,
                 std::optional<AckMode> ack, std::optional<Incarnation> if_incarnation) {
  StoredAdd d;
  auto r = store.update(
      counter, key, ack,
      [&](const CacheEntry* e, std::optional<std::string>& value) -> std::optional<CacheStore::Write> {
        d = decide_stored_add(e ? &e->value : nullptr, rec);
        // Nothing to write: the answer from the caught-up index is current.
        if (!d.write) return CacheStore::Write{};
        value = std::move(d.write);
        return std::nullopt;
      },
      if_incarnation);
  if (!r) return problem(r.error());
  return with_incarnation(add_answer(counter, key, rec, d), r->incarnation);
}

HttpResponse add_answer(const StreamKey& counter, const std::string& key, const CounterRecord& rec,
                        const StoredAdd& d) {
  const AddDecision& dec = d.decision;
  if (d.corrupt)
    return problem(Error(Errc::corrupt_data, "counter '" + counter.name + "' key '" + key +
                                                 "' holds a state that does not decode; nothing was added"));
  switch (dec.kind) {
    case AddDecision::Kind::apply: return value_json(key, dec.value);
    case AddDecision::Kind::duplicate: return value_json(key, dec.value, true);
    case AddDecision::Kind::sequence_gap:
      return conflict("sequence_gap", "Sequence gap",
                      "producer " + std::to_string(rec.producer_id) + " sent sequence " +
                          std::to_string(rec.sequence) + " for key '" + key + "'; expected sequence " +
                          std::to_string(dec.expected) + " (or a retry of one of its last " +
                          std::to_string(kProducerWindow) + "); nothing was added",
                      "expected_sequence", json::value(dec.expected));
    case AddDecision::Kind::overflow:
      return conflict("counter_overflow", "Counter overflow",
                      "adding " + std::to_string(rec.delta) + " to key '" + key + "' (value " +
                          std::to_string(dec.value) + ") leaves the signed 64-bit range; nothing was added",
                      "value", json::value(dec.value));
  }
  return problem(Error(Errc::internal, "unknown add decision"));
}

}  // namespace

void handle_counter_keys(CacheStore& store, const std::shared_ptr<Exchange>& ex, const std::vector<std::string>& seg,
                         const Target& target, std::string_view body) {
  StreamKey counter{seg[2], seg[4], seg[6]};
  if (auto r = validate_name(NameKind::counter, counter.name); !r) return ex->respond(problem(r.error()));
  std::string key = seg[8];
  if (auto r = validate_cache_key_segment(key, store.config().max_key_bytes); !r) return ex->respond(invalid_key(r.error()));
  if (seg.size() == 9) {  // GET
    return respond_on_store(store, ex, [&store, counter, key]() -> HttpResponse {
      Incarnation inc{0};
      auto r = store.find(counter, key, &inc);
      if (!r) return problem(r.error());
      if (!*r) return with_incarnation(value_json(key, 0), inc);
      auto st = decode_counter_state((*r)->value);
      if (!st)
        return problem(Error(Errc::corrupt_data,
                             "counter '" + counter.name + "' key '" + key + "' holds a state that does not decode"));
      return with_incarnation(value_json(key, st->value), inc);
    });
  }
  auto delta = add_body(body);
  if (!delta) return ex->respond(problem(delta.error()));
  auto prod = producer_params(target);
  if (!prod) return ex->respond(problem(prod.error()));
  std::optional<AckMode> ack;
  if (auto a = target.param("ack")) {
    ack = parse_ack_mode(*a);
    if (!ack || *ack == AckMode::none)
      return ex->respond(problem(Error(Errc::invalid_argument, "ack must be leader or quorum for a counter add")));
  }
  std::optional<Incarnation> if_incarnation;
  if (auto v = target.param("if_incarnation")) {
    auto x = parse_u64(*v);
    if (!x)
      return ex->respond(problem(Error(Errc::invalid_argument,
                                       "if_incarnation must be a non-negative integer (Sluice-Counter-Incarnation)")));
    if_incarnation = Incarnation{*x};
  }
  CounterRecord rec;
  rec.producer_id = prod->first;
  rec.sequence = prod->second;
  rec.delta = *delta;
  respond_on_store(store, ex, [&store, counter, key, rec, ack, if_incarnation]() -> HttpResponse {
    return add(store, counter, key, rec, ack, if_incarnation);
  });
}

void handle_counters(Node& node, CacheStore& store, const std::shared_ptr<Exchange>& ex,
                     const std::vector<std::string>& seg, std::string_view method, std::string_view body) {
  const std::string t = seg[2], n = seg[4];
  if (seg.size() == 6 && method == "GET") {
    return respond_blocking(ex, [&node, t, n]() -> HttpResponse {
      auto r = node.catalog().list_counters(t, n);
      if (!r) return problem(r.error());
      json::array a;
      for (auto& c : *r) a.push_back(counter_json(c));
      json::object o;
      o["counters"] = std::move(a);
      return json_response(200, o);
    });
  }
  if (seg.size() == 6) {  // POST
    auto name = counter_body(body);
    if (!name) return ex->respond(problem(name.error()));
    StreamKey key{t, n, std::move(*name)};
    return respond_blocking(ex, [&node, &store, key = std::move(key)]() -> HttpResponse {
      auto r = node.catalog().create_counter(key);
      if (!r) return problem(r.error());
      // The first add creates it if this fails (or a crash comes first).
      (void)store.ensure_backing(counter_as_cache(*r));
      return json_response(201, counter_json(*r));
    });
  }
  StreamKey key{t, n, seg[6]};
  if (auto r = validate_name(NameKind::counter, key.name); !r) return ex->respond(problem(r.error()));
  if (method == "GET")
    return respond_blocking(ex, [&node, key = std::move(key)]() -> HttpResponse {
      auto r = node.catalog().get_counter(key);
      return r ? json_response(200, counter_json(*r)) : problem(r.error());
    });
  respond_blocking(ex, [&node, &store, key = std::move(key)]() -> HttpResponse {
    auto r = node.catalog().delete_counter(key);
    if (!r) return problem(r.error());
    failpoint("cache.delete.after_catalog");  // crash tests: the backing stream is left
    // Left behind only by a failure here; a recreated counter never adopts it (its
    // created_seq is older than the counter's, cache_store.cc ensure_backing).
    (void)store.delete_backing(counter_as_cache(*r));
    return json_response(200, counter_json(*r));
  });
}

}  // namespace sluice::http_api
