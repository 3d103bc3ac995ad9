// GET {ns}/streams/{s}/shards/{n}/subscribe: the checks before the WebSocket upgrade.
//
// Order: query parameters (400) -> the read a fetch at that offset makes (an unknown stream
// or shard 404, beyond the high watermark 400 invalid_argument, before the log start 416
// offset_out_of_range, no leader 503: the fetch's answers, with Sluice-Leader) -> a request
// that is not a WebSocket upgrade (426 upgrade_required) -> Exchange::upgrade. So a plain
// GET learns what is wrong with the stream before it learns it must upgrade.
#include "subscribe.h"

#include <boost/json/monotonic_resource.hpp>
#include <boost/json/value.hpp>

#include "handlers.h"
#include "problem.h"

namespace sluice::http_api {

namespace json = boost::json;

Result<ClientMessage> parse_client_message(std::string_view text, bool group) {
  json::monotonic_resource mr;
  json::value v(json::storage_ptr{&mr});
  if (auto r = parse_json_object(text, v); !r) {
    // parse_json_object speaks of a request body; this is a message.
    std::string m = r.error().message;
    if (m.rfind("request body", 0) == 0) m.replace(0, 12, "message");
    return Error(r.error().code, std::move(m));
  }
  const auto& o = v.get_object();
  if (auto r = group ? check_fields(o, {"credit", "ack", "nack"}, "") : check_fields(o, {"credit"}, ""); !r)
    return r.error();
  const std::string shape = group ? "a group subscriber's message has \"credit\": N, \"ack\": [offsets] or "
                                    "\"nack\": [offsets]"
                                  : "a subscriber's message is {\"credit\": N}";
  const auto range = shape + ", N an integer from 1 to " + std::to_string(kMaxCreditGrant);
  ClientMessage m;
  if (o.empty() || (!group && !o.if_contains("credit"))) return Error(Errc::invalid_argument, range);
  if (const auto* c = o.if_contains("credit")) {
    if (c->is_int64() && c->get_int64() >= 1 && static_cast<std::uint64_t>(c->get_int64()) <= kMaxCreditGrant)
      m.credit = static_cast<std::uint64_t>(c->get_int64());
    else if (c->is_uint64() && c->get_uint64() >= 1 && c->get_uint64() <= kMaxCreditGrant)
      m.credit = c->get_uint64();
    else
      return Error(Errc::invalid_argument, range);
  }
  for (auto [name, out] : {std::pair{"ack", &m.ack}, std::pair{"nack", &m.nack}}) {
    if (!o.if_contains(name)) continue;
    auto offs = offsets_array(o.if_contains(name), name);
    if (!offs) return offs.error();
    *out = std::move(*offs);
  }
  return m;
}

namespace {

// The answer to a valid subscribe that is not a WebSocket upgrade.
HttpResponse upgrade_required() {
  HttpResponse r = problem(426, "upgrade_required", "Upgrade required",
                           "subscribe is a WebSocket endpoint: send a GET with \"Connection: Upgrade\" and "
                           "\"Upgrade: websocket\" (RFC 6455); the REST calls are GET .../records");
  r.headers.emplace_back("Upgrade", "websocket");
  r.headers.emplace_back("Connection", "Upgrade");
  return r;
}

// The query parameters both subscriptions take: format and credit.
Result<void> common_params(const Target& target, Subscription& sub) {
  const std::string_view format = target.param("format").value_or("json");
  if (format != "json" && (format != "binary" || !sub.group.empty()))
    return Error(Errc::invalid_argument,
                 sub.group.empty() ? "format must be json or binary" : "a group subscription sends JSON frames only");
  sub.binary = format == "binary";
  auto credit = u64_param(target, "credit", kDefaultCredit, 0, kMaxCreditGrant);
  if (!credit) return credit.error();
  sub.credit = static_cast<std::int64_t>(*credit);
  return {};
}

}  // namespace

Result<void> check_incarnation(Node& node, const StreamKey& key, Incarnation incarnation) {
  auto si = node.stream(key);
  if (!si) {
    if (si.error().code != Errc::not_found) return si.error();
    return Error(Errc::not_found, "stream " + key.to_string() + " was deleted");
  }
  if (si->incarnation != incarnation)
    return Error(Errc::not_found, "stream " + key.to_string() + " was deleted and created again (incarnation " +
                                      std::to_string(incarnation.value()) + ", now " +
                                      std::to_string(si->incarnation.value()) + ")");
  return {};
}

Result<void> check_incarnation(Node& node, const Subscription& sub) {
  return check_incarnation(node, sub.key, sub.incarnation);
}

void handle_group_subscribe(Node& node, const std::shared_ptr<Exchange>& ex, const StreamKey& key,
                            ShardIndex shard, const std::string& group, const Target& target) {
  Subscription sub;
  sub.key = key;
  sub.shard = shard;
  sub.group = group;
  if (auto r = common_params(target, sub); !r) return ex->respond(problem(r.error()));
  auto opts = group_options(target);
  if (!opts) return ex->respond(problem(opts.error()));
  sub.opts = *opts;
  sub.remote = true;  // group calls may sync to disk: always on the blocking pool
  const bool upgrade = ex->request().websocket;
  // Group calls run on the blocking pool; an unknown stream or shard is the group fetch's 404.
  ex->run_blocking([&node, ex, sub = std::move(sub), upgrade]() mutable {
    auto si = node.stream(sub.key);
    if (!si) return ex->respond(problem(si.error()));
    sub.incarnation = si->incarnation;
    auto st = node.shard_stats(sub.key, sub.shard);
    if (!st) return ex->respond(with_leader(problem(st.error()), node, sub.key, sub.shard));
    if (auto c = check_incarnation(node, sub); !c) return ex->respond(problem(c.error()));
    if (!upgrade) return ex->respond(upgrade_required());
    ex->upgrade(std::move(sub));
  });
}

void handle_subscribe(Node& node, const std::shared_ptr<Exchange>& ex, const StreamKey& key,
                      ShardIndex shard, const Target& target) {
  Subscription sub;
  sub.key = key;
  sub.shard = shard;
  if (auto r = common_params(target, sub); !r) return ex->respond(problem(r.error()));
  const std::string off(target.param("offset").value_or("earliest"));
  if (auto p = parse_offset_param(off); !p) return ex->respond(problem(p.error()));
  sub.remote = !node.serves_locally(key, shard);
  const bool upgrade = ex->request().websocket;
  auto check = [&node, ex, sub = std::move(sub), off, upgrade]() mutable {
    auto fail = [&](const Error& e) { ex->respond(with_leader(problem(e), node, sub.key, sub.shard)); };
    auto si = node.stream(sub.key);
    if (!si) return fail(si.error());
    sub.incarnation = si->incarnation;
    auto from = resolve_offset(node, sub.key, sub.shard, off);
    if (!from) return fail(from.error());
    // The read a fetch at this offset makes, for the same answers (one record, any size).
    if (auto r = node.fetch(sub.key, sub.shard, *from, 1, 1); !r) return fail(r.error());
    // The offset was resolved on the incarnation subscribed to, not on a newer one.
    if (auto c = check_incarnation(node, sub); !c) return fail(c.error());
    if (!upgrade) return ex->respond(upgrade_required());
    sub.from = *from;
    ex->upgrade(std::move(sub));
  };
  // Another broker leads the shard: the checks are round trips to it, off the I/O thread.
  if (sub.remote) return ex->run_blocking(std::move(check));
  check();
}

}  // namespace sluice::http_api
