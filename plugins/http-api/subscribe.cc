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

Result<std::uint64_t> parse_credit_message(std::string_view text) {
  json::monotonic_resource mr;
  json::value v(json::storage_ptr{&mr});
  if (auto r = parse_json_object(text, v); !r) {
    // parse_json_object speaks of a request body; this is a message.
    std::string m = r.error().message;
    if (m.rfind("request body", 0) == 0) m.replace(0, 12, "message");
    return Error(r.error().code, std::move(m));
  }
  const auto& o = v.get_object();
  if (auto r = check_fields(o, {"credit"}, ""); !r) return r.error();
  const auto* c = o.if_contains("credit");
  const auto range = "a subscriber's message is {\"credit\": N}, N an integer from 1 to " +
                     std::to_string(kMaxCreditGrant);
  if (!c) return Error(Errc::invalid_argument, range);
  if (c->is_int64() && c->get_int64() >= 1 && static_cast<std::uint64_t>(c->get_int64()) <= kMaxCreditGrant)
    return static_cast<std::uint64_t>(c->get_int64());
  if (c->is_uint64() && c->get_uint64() >= 1 && c->get_uint64() <= kMaxCreditGrant) return c->get_uint64();
  return Error(Errc::invalid_argument, range);
}

void handle_subscribe(Node& node, const std::shared_ptr<Exchange>& ex, const StreamKey& key,
                      ShardIndex shard, const Target& target) {
  Subscription sub;
  sub.key = key;
  sub.shard = shard;
  const std::string_view format = target.param("format").value_or("json");
  if (format != "json" && format != "binary")
    return ex->respond(problem(Error(Errc::invalid_argument, "format must be json or binary")));
  sub.binary = format == "binary";
  auto credit = u64_param(target, "credit", kDefaultCredit, 0, kMaxCreditGrant);
  if (!credit) return ex->respond(problem(credit.error()));
  sub.credit = static_cast<std::int64_t>(*credit);
  const std::string off(target.param("offset").value_or("earliest"));
  if (auto p = parse_offset_param(off); !p) return ex->respond(problem(p.error()));
  sub.remote = !node.serves_locally(key, shard);
  const bool upgrade = ex->request().websocket;
  auto check = [&node, ex, sub = std::move(sub), off, upgrade]() mutable {
    auto fail = [&](const Error& e) { ex->respond(with_leader(problem(e), node, sub.key, sub.shard)); };
    auto from = resolve_offset(node, sub.key, sub.shard, off);
    if (!from) return fail(from.error());
    // The read a fetch at this offset makes, for the same answers (one record, any size).
    if (auto r = node.fetch(sub.key, sub.shard, *from, 1, 1); !r) return fail(r.error());
    if (!upgrade) {
      HttpResponse r = problem(426, "upgrade_required", "Upgrade required",
                               "subscribe is a WebSocket endpoint: send a GET with \"Connection: Upgrade\" "
                               "and \"Upgrade: websocket\" (RFC 6455); GET .../records is the REST fetch");
      r.headers.emplace_back("Upgrade", "websocket");
      r.headers.emplace_back("Connection", "Upgrade");
      return ex->respond(std::move(r));
    }
    sub.from = *from;
    ex->upgrade(std::move(sub));
  };
  // Another broker leads the shard: the checks are round trips to it, off the I/O thread.
  if (sub.remote) return ex->run_blocking(std::move(check));
  check();
}

}  // namespace sluice::http_api
