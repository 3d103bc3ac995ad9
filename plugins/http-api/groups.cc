// Consumer groups and dead letters, per stream shard (storage.h has the semantics).
//
//   GET  {ns}/streams/{s}/groups                                  {"groups":[names]}
//   GET  {ns}/streams/{s}/groups/{g}                              {"group","positions":[...]}
//   GET  {ns}/streams/{s}/groups/{g}/shards/{n}/records?max=&wait_ms=&max_deliveries=&ack_timeout_ms=
//        {"records":[{...record, "delivery"}],"incarnation"}   (long poll like fetch)
//   POST {ns}/streams/{s}/groups/{g}/shards/{n}/ack   {"offsets":[...],"incarnation"?} -> 204 / 409
//   POST {ns}/streams/{s}/groups/{g}/shards/{n}/nack  {"offsets":[...]}   -> 204
//   GET  {ns}/streams/{s}/groups/{g}/shards/{n}/dead-letters?offset=&max=
//        {"records":[...],"next_offset","incarnation"}
//   POST {ns}/streams/{s}/groups/{g}/shards/{n}/dead-letters/replay {"from","to","incarnation"?}
//        -> {"replayed": n} / 409
//
// Group calls may sync to disk (acks, dead letters), so they run on the blocking pool.
// Answers about one shard carry Sluice-Leader (the leader's HTTP address) when known; a
// shard another broker leads is served through it (the core forwards the call).

#include <chrono>
#include <optional>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>

#include "codec.h"
#include "handlers.h"
#include "problem.h"
#include "sluice/names.h"
#include "subscribe.h"

namespace sluice::http_api {

namespace json = boost::json;

Result<std::vector<Offset>> offsets_array(const json::value* arr, std::string_view name) {
  const std::string n(name);
  if (!arr || !arr->is_array() || arr->as_array().empty())
    return Error(Errc::invalid_argument, n + " must be a non-empty array of offsets");
  if (arr->as_array().size() > kMaxGroupOffsets)
    return Error(Errc::invalid_argument, "at most " + std::to_string(kMaxGroupOffsets) + " offsets per call");
  std::vector<Offset> out;
  out.reserve(arr->as_array().size());
  for (const auto& x : arr->as_array()) {
    if (x.is_uint64()) out.push_back(Offset{x.as_uint64()});
    else if (x.is_int64() && x.as_int64() >= 0) out.push_back(Offset{static_cast<std::uint64_t>(x.as_int64())});
    else return Error(Errc::invalid_argument, n + " must be non-negative integers");
  }
  return out;
}

json::object delivery_json(const GroupDelivery& d) {
  json::array recs;
  std::vector<Header> scratch;
  std::size_t next = 0;  // d.records is in offset order; batches are in offset order
  for (const auto& b : d.batches) {
    BatchReader reader(b.data(), b.size());
    RecordView rv;
    while (reader.next(rv) && next < d.records.size()) {
      while (next < d.records.size() && d.records[next].offset.value() < rv.offset) ++next;
      if (next < d.records.size() && d.records[next].offset.value() == rv.offset) {
        json::object o = record_json(rv, scratch);
        o["delivery"] = d.records[next].delivery;
        recs.push_back(std::move(o));
        ++next;
      }
    }
  }
  json::object out;
  out["records"] = std::move(recs);
  // A bound stopped the delivery with more ready (GroupDelivery::more): fetch again now.
  out["more"] = d.more;
  return out;
}

Result<GroupOptions> group_options(const Target& target) {
  auto maxd = u64_param(target, "max_deliveries", 5, 1, 1000);
  if (!maxd) return maxd.error();
  auto tmo = u64_param(target, "ack_timeout_ms", 30000, 1, 86'400'000);
  if (!tmo) return tmo.error();
  GroupOptions opts;
  opts.max_deliveries = static_cast<std::uint32_t>(*maxd);
  opts.ack_timeout_ms = static_cast<std::int64_t>(*tmo);
  return opts;
}

namespace {

constexpr std::uint32_t kDefaultMax = 100;
constexpr std::uint32_t kMaxMax = 10000;

Result<ShardIndex> shard_of(const std::string& s) {
  auto v = parse_u64(s);
  if (!v || *v > 0xffffffffULL) return Error(Errc::invalid_argument, "shard must be a non-negative integer");
  return ShardIndex{static_cast<std::uint32_t>(*v)};
}

json::object position_json(const GroupPosition& p) {
  json::object o;
  o["committed"] = p.committed.value();
  o["outstanding"] = p.outstanding;
  o["dead_letter_start"] = p.dead_letter_start.value();
  o["dead_letter_end"] = p.dead_letter_end.value();
  return o;
}

// An ack or nack body: the offsets, and optionally the incarnation that delivered them
// (the group fetch's `incarnation`).
struct OffsetsBody {
  std::vector<Offset> offsets;
  std::optional<Incarnation> incarnation;
};

Result<OffsetsBody> offsets_body(std::string_view body) {
  json::monotonic_resource mr;
  json::value v(json::storage_ptr{&mr});
  if (auto r = parse_json_object(body, v); !r) return r.error();
  const auto& o = v.as_object();
  if (auto r = check_fields(o, {"offsets", "incarnation"}, ""); !r) return r.error();
  auto offs = offsets_array(o.if_contains("offsets"), "offsets");
  if (!offs) return offs.error();
  OffsetsBody out{std::move(*offs), std::nullopt};
  if (const auto* x = o.if_contains("incarnation")) {
    if (x->is_uint64()) out.incarnation = Incarnation{x->as_uint64()};
    else if (x->is_int64() && x->as_int64() >= 0) out.incarnation = Incarnation{static_cast<std::uint64_t>(x->as_int64())};
    else return Error(Errc::invalid_argument, "incarnation must be a non-negative integer (the group fetch's)");
  }
  return out;
}

// A call naming an incarnation newer than the one this broker holds: its change feed lags
// the broker that answered the client before (incarnations only grow). Transient, not
// "deleted and created again", which would make the client drop live records (review).
HttpResponse not_applied_yet(const StreamKey& key, Incarnation named, Incarnation held) {
  return problem(Error(Errc::unavailable,
                       "this broker has not applied incarnation " + std::to_string(named.value()) + " of " +
                           key.to_string() + " yet (it holds " + std::to_string(held.value()) + "); retry",
                       Outcome::transient));
}

// The stream's incarnation on this broker, for a group call to be pinned to.
Result<Incarnation> current_incarnation(Node& n, const StreamKey& key) {
  auto si = n.stream(key);
  if (!si) return si.error();
  return si->incarnation;
}

// A group fetch answered with the incarnation that delivered it, read before and after the
// call: incarnations never come back, so equal readings prove which stream it was. A
// recreate during the call answers 503 (transient: fetch again; what was delivered is
// delivered again after its ack timeout).
HttpResponse pinned_delivery(Node& n, const StreamKey& key, ShardIndex shard, Incarnation before,
                             const Result<GroupDelivery>& r) {
  // The fetch itself was pinned to `before` (Node::group_fetch's incarnation): a recreate
  // in between made it answer conflict, and nothing of the new stream was delivered.
  auto after = current_incarnation(n, key);
  if (!after || *after != before)
    return problem(Error(Errc::unavailable,
                         "stream " + key.to_string() + " was deleted or created again during the group fetch; fetch again",
                         Outcome::transient));
  if (!r) return with_leader(problem(r.error()), n, key, shard);
  json::object out = delivery_json(*r);
  out["incarnation"] = before.value();
  return with_leader(json_response(200, out), n, key, shard);
}

// A replay body: the range, and optionally the incarnation whose dead letters were listed
// (the dead-letters answer's `incarnation`).
struct RangeBody {
  Offset from, to;
  std::optional<Incarnation> incarnation;
};

Result<RangeBody> range_body(std::string_view body) {
  json::monotonic_resource mr;
  json::value v(json::storage_ptr{&mr});
  if (auto r = parse_json_object(body, v); !r) return r.error();
  const auto& o = v.as_object();
  if (auto r = check_fields(o, {"from", "to", "incarnation"}, ""); !r) return r.error();
  auto get = [&](const char* k) -> std::optional<std::uint64_t> {
    const auto* x = o.if_contains(k);
    if (!x) return std::nullopt;
    if (x->is_uint64()) return x->as_uint64();
    if (x->is_int64() && x->as_int64() >= 0) return static_cast<std::uint64_t>(x->as_int64());
    return std::nullopt;
  };
  auto from = get("from"), to = get("to");
  if (!from || !to || *to < *from)
    return Error(Errc::invalid_argument, "replay needs integer offsets from <= to (to is exclusive)");
  RangeBody out{Offset{*from}, Offset{*to}, std::nullopt};
  if (o.if_contains("incarnation")) {
    auto inc = get("incarnation");
    if (!inc) return Error(Errc::invalid_argument, "incarnation must be a non-negative integer (the dead-letters answer's)");
    out.incarnation = Incarnation{*inc};
  }
  return out;
}


HttpResponse render_dead_letters(const FetchResult& r, Offset from, std::uint32_t max, Incarnation incarnation) {
  json::array recs;
  std::vector<Header> scratch;
  std::uint64_t next = from.value();
  for (const auto& b : r.batches) {
    BatchReader reader(b.data(), b.size());
    RecordView rv;
    while (reader.next(rv) && recs.size() < max) {
      if (rv.offset < from.value()) continue;
      recs.push_back(record_json(rv, scratch));
      next = rv.offset + 1;
    }
  }
  // Nothing left to show (the rest of the log was replayed already): storage read up to
  // r.next_offset; answering `from` again would page a client in a loop (review finding).
  if (recs.empty()) next = std::max(next, r.next_offset.value());
  json::object out;
  out["records"] = std::move(recs);
  out["next_offset"] = std::max(next, r.log_start.value());
  out["incarnation"] = incarnation.value();
  out["end"] = r.high_watermark.value();
  return json_response(200, out);
}

template <class Fn>
void blocking_call(const std::shared_ptr<Exchange>& ex, Fn fn) {
  ex->run_blocking([ex, fn = std::move(fn)]() mutable {
    try {
      ex->respond(fn());
    } catch (const std::exception& e) {
      ex->respond(problem(Error(Errc::internal, std::string("unexpected exception: ") + e.what())));
    }
  });
}

// A group fetch that found nothing waits for new data (or the timeout), then tries once more.
struct GroupPoll {
  std::shared_ptr<Exchange> ex;
  Node* node;
  StreamKey key;
  ShardIndex shard;
  std::string group;
  std::uint32_t max;
  GroupOptions opts;
  Incarnation incarnation{0};  // the stream's when the poll began
  bool done = false;
  std::function<void()> cancel_timer;
  std::uint64_t notify_handle = 0;
  void finish() {  // strand only
    if (done) return;
    done = true;
    if (cancel_timer) std::exchange(cancel_timer, nullptr)();
    if (notify_handle) node->cancel_notify(key, shard, std::exchange(notify_handle, 0));
    Node* n = node;
    // A recreate during the poll answers as during an immediate fetch (pinned_delivery: 503,
    // transient), not 404, which a client takes for "the stream is gone" (review finding).
    blocking_call(ex, [n, key = key, shard = shard, group = group, max = max, opts = opts, inc = incarnation] {
      return pinned_delivery(*n, key, shard, inc, n->group_fetch(key, shard, group, max, opts, inc));
    });
  }
};

}  // namespace

void handle_groups(Node& node, const HttpConfig& cfg, const std::shared_ptr<Exchange>& ex,
                   const std::vector<std::string>& seg, const Target& target) {
  const HttpRequest& req = ex->request();
  const bool get = req.method == "GET";
  StreamKey key{seg[2], seg[4], seg[6]};
  if (seg.size() == 8) {
    return blocking_call(ex, [&node, key] {
      auto r = node.groups(key);
      if (!r) return problem(r.error());
      json::array a;
      for (auto& g : *r) a.push_back(json::string(g));
      json::object o;
      o["groups"] = std::move(a);
      return json_response(200, o);
    });
  }
  const std::string group = seg[8];
  if (auto v = validate_name(NameKind::group, group); !v) return ex->respond(problem(v.error()));
  if (seg.size() == 9) {
    return blocking_call(ex, [&node, key, group] {
      auto r = node.group_positions(key, group);
      if (!r) return problem(r.error());
      json::array a;
      std::uint32_t i = 0;
      for (auto& p : *r) {
        json::object o = position_json(p);
        o["shard"] = i++;
        a.push_back(std::move(o));
      }
      json::object out;
      out["group"] = group;
      out["positions"] = std::move(a);
      return json_response(200, out);
    });
  }
  auto shard = shard_of(seg[10]);
  if (!shard) return ex->respond(problem(shard.error()));
  const std::string& op = seg[11];
  if (op == "records") {
    // Capped, not refused, as a plain fetch caps them (docs/api.md "Fetch").
    auto max = u64_param(target, "max", kDefaultMax, 1, UINT64_MAX);
    auto wait = u64_param(target, "wait_ms", 0, 0, UINT64_MAX);
    for (auto* r : {&max, &wait})
      if (!*r) return ex->respond(problem(r->error()));
    *max = std::min<std::uint64_t>(*max, kMaxMax);
    *wait = std::min<std::uint64_t>(*wait, static_cast<std::uint64_t>(cfg.max_wait.count()));
    auto group_opts = group_options(target);
    if (!group_opts) return ex->respond(problem(group_opts.error()));
    const GroupOptions opts = *group_opts;
    const auto m = static_cast<std::uint32_t>(*max);
    const auto w = std::chrono::milliseconds(*wait);
    Node* n = &node;
    ex->run_blocking([n, ex, key, shard = *shard, group, m, opts, w] {
      // The wait counts from here: time spent in the reads below is part of it.
      const auto until = std::chrono::steady_clock::now() + w;
      // A poll that may wait reads the high watermark before it fetches: a record published
      // between the two is then either delivered by the fetch or beyond the mark waited
      // for. Read after an empty fetch, the mark could include a record the fetch missed,
      // and the poll would sleep to its timeout with a record ready (review finding).
      auto inc = current_incarnation(*n, key);
      if (!inc) return ex->respond(with_leader(problem(inc.error()), *n, key, shard));
      Result<ShardStats> stats = ShardStats{};
      if (w.count() > 0) {
        stats = n->shard_stats(key, shard);
        if (!stats) return ex->respond(with_leader(problem(stats.error()), *n, key, shard));
      }
      auto r = n->group_fetch(key, shard, group, m, opts, *inc);
      // Empty but stopped at a bound (acked batches scanned, dead letters moved): more is
      // ready now, so fetch again rather than park on the high watermark for the whole
      // wait. Each such fetch makes progress; the wait bounds the loop.
      while (r && r->records.empty() && r->more && std::chrono::steady_clock::now() < until)
        r = n->group_fetch(key, shard, group, m, opts, *inc);
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      if (!r || !r->records.empty() || r->more || w.count() == 0 || left.count() <= 0)
        return ex->respond(pinned_delivery(*n, key, shard, *inc, r));
      // Nothing to deliver: park until a new record or the timeout, then try once more.
      auto poll = std::make_shared<GroupPoll>(GroupPoll{ex, n, key, shard, group, m, opts, *inc});
      ex->post([poll, w = left, hwm = stats->high_watermark] {
        poll->cancel_timer = poll->ex->start_timer(w, [poll] { poll->finish(); });
        std::weak_ptr<GroupPoll> weak = poll;
        auto nr = poll->node->notify_when_beyond(poll->key, poll->shard, hwm, [weak] {
          if (auto p = weak.lock()) p->ex->post([p] { p->finish(); });
        });
        if (!nr) return poll->finish();
        poll->notify_handle = nr.value();
      });
    });
    return;
  }
  if (op == "subscribe") return handle_group_subscribe(node, ex, key, *shard, group, target);
  if (op == "ack" || op == "nack") {
    auto body = offsets_body(req.body);
    if (!body) return ex->respond(problem(body.error()));
    const bool ack = op == "ack";
    return blocking_call(ex, [&node, key, shard = *shard, group, ack, body = std::move(*body)] {
      // Offsets a deleted stream delivered must not settle the recreated stream's group
      // (docs/api.md "Consumer groups and dead letters").
      if (body.incarnation) {
        auto now = current_incarnation(node, key);
        if (!now) return with_leader(problem(now.error()), node, key, shard);
        if (*now < *body.incarnation) return not_applied_yet(key, *body.incarnation, *now);
        if (*now != *body.incarnation)
          return problem(Error(Errc::conflict, "stream " + key.to_string() + " was deleted and created again "
                                               "(the offsets came from incarnation " +
                                                   std::to_string(body.incarnation->value()) + "; it is now " +
                                                   std::to_string(now->value()) + "): nothing was " +
                                                   (ack ? "acked" : "nacked")));
      }
      const auto& offs = body.offsets;
      // Pinned all the way to the shard: a recreate after the check above is refused too.
      auto r = ack ? node.group_ack(key, shard, group, offs, body.incarnation)
                   : node.group_nack(key, shard, group, offs, body.incarnation);
      if (!r) return with_leader(problem(r.error()), node, key, shard);
      HttpResponse resp;
      resp.status = 204;
      return with_leader(std::move(resp), node, key, shard);
    });
  }
  if (op == "dead-letters" && seg.size() == 12 && get) {
    auto off = u64_param(target, "offset", 0, 0, UINT64_MAX);
    auto max = u64_param(target, "max", kDefaultMax, 1, UINT64_MAX);
    if (!off) return ex->respond(problem(off.error()));
    if (!max) return ex->respond(problem(max.error()));
    *max = std::min<std::uint64_t>(*max, kMaxMax);
    return blocking_call(ex, [&node, &cfg, key, shard = *shard, group, from = Offset{*off},
                              m = static_cast<std::uint32_t>(*max)] {
      // Answered with the incarnation they belong to, read before and after (incarnations
      // never come back), so a replay can name it.
      auto before = current_incarnation(node, key);
      if (!before) return with_leader(problem(before.error()), node, key, shard);
      auto r = node.dead_letters(key, shard, group, from, m, cfg.fetch_max_bytes);
      auto after = current_incarnation(node, key);
      if (!after || *after != *before)
        return problem(Error(Errc::unavailable,
                             "stream " + key.to_string() + " was deleted or created again while its dead letters "
                             "were read; read again",
                             Outcome::transient));
      if (!r) return with_leader(problem(r.error()), node, key, shard);
      return with_leader(render_dead_letters(*r, from, m, *before), node, key, shard);
    });
  }
  if (op == "dead-letters" && seg.size() == 13) {
    auto range = range_body(req.body);
    if (!range) return ex->respond(problem(range.error()));
    return blocking_call(ex, [&node, key, shard = *shard, group, range = *range] {
      // Dead letters listed from a deleted stream must not replay the recreated stream's
      // (docs/api.md "Consumer groups and dead letters").
      if (range.incarnation) {
        auto now = current_incarnation(node, key);
        if (!now) return with_leader(problem(now.error()), node, key, shard);
        if (*now < *range.incarnation) return not_applied_yet(key, *range.incarnation, *now);
        if (*now != *range.incarnation)
          return problem(Error(Errc::conflict, "stream " + key.to_string() +
                                                   " was deleted and created again (the dead letters came from "
                                                   "incarnation " +
                                                   std::to_string(range.incarnation->value()) + "; it is now " +
                                                   std::to_string(now->value()) + "): nothing was replayed"));
      }
      // Pinned all the way to the shard, like ack: a recreate after the check above is
      // refused too, and replays nothing of the new stream's (review).
      auto r = node.replay_dead_letters(key, shard, group, range.from, range.to, range.incarnation);
      if (!r) return with_leader(problem(r.error()), node, key, shard);
      json::object o;
      o["replayed"] = *r;
      return with_leader(json_response(200, o), node, key, shard);
    });
  }
  ex->respond(problem(Error(Errc::not_found, "no such route")));
}

}  // namespace sluice::http_api
