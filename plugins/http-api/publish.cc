// POST {ns}/streams/{s}/records: JSON or binary batch -> Node::publish. The bodies are
// parsed by publish_parse.h.
#include <charconv>
#include <algorithm>
#include <cstring>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

#include "codec.h"
#include "handlers.h"
#include "problem.h"
#include "quotas.h"
#include "publish_parse.h"

namespace sluice::http_api {

namespace json = boost::json;

namespace {

// {"results":[{"shard":S,"offset":O},...]}, written straight into one reserved string: a
// json::object per record cost a few allocations each, a tenth of the server's CPU on a
// 64-record publish (docs/benchmarks.md "Measured here (issue 12)").
HttpResponse render_results(const std::vector<PublishedRecord>& rs) {
  HttpResponse r;
  r.status = 200;
  r.content_type = "application/json";
  std::string& b = r.body;
  b.reserve(16 + rs.size() * 48);
  b += "{\"results\":[";
  char num[24];
  auto put = [&](std::uint64_t v) {
    auto res = std::to_chars(num, num + sizeof num, v);
    b.append(num, res.ptr);
  };
  for (std::size_t i = 0; i < rs.size(); ++i) {
    b += i == 0 ? "{\"shard\":" : ",{\"shard\":";
    put(rs[i].shard.value());
    b += ",\"offset\":";
    put(rs[i].offset.value());
    b += '}';
  }
  b += "]}";
  return r;
}

}  // namespace

void handle_publish(Node& node, const HttpConfig& cfg, PublishQuotas& quotas, const std::shared_ptr<Exchange>& ex,
                    const StreamKey& key, const Target& target) {
  const HttpRequest& req = ex->request();
  const std::string media = media_type(req.content_type);
  const bool binary = media == kBatchMedia;
  if (!binary && media != "application/json") {
    ex->respond(problem(Error(Errc::unsupported_media,
                              "publish takes application/json or " + std::string(kBatchMedia) +
                                  ", not '" + (media.empty() ? "(none)" : media) + "'")));
    return;
  }
  auto over_quota = [&](std::uint32_t wait) {
    HttpResponse r = problem(429, "quota_exceeded", "Quota exceeded",
                             "tenant '" + key.tenant + "' is over its publish quota of " +
                                 std::to_string(quotas.rate()) +
                                 " bytes/s on this broker (quota.publish_bytes_per_s); retry after " +
                                 std::to_string(wait) + " s");
    r.headers.emplace_back("Retry-After", std::to_string(wait));
    ex->respond(std::move(r));
  };
  // A tenant already in debt is refused before its body is parsed (charging nothing): the
  // parse is the expensive part of a refusal.
  if (const std::uint32_t wait = quotas.charge(key.tenant, 0)) return over_quota(wait);
  std::optional<AckMode> ack;
  if (auto a = target.param("ack")) {
    ack = parse_ack_mode(*a);  // quorum is passed on; core refuses what it cannot do
    if (!ack)
      return ex->respond(
          problem(Error(Errc::invalid_argument, "ack must be none, leader or quorum")));
  }

  std::vector<PublishRecord> records;
  // One arena for the whole parse, sized from the body (JSON is rarely smaller parsed).
  json::monotonic_resource mr(binary ? 256 : std::max<std::size_t>(1024, req.body.size()));
  json::value doc(json::storage_ptr{&mr});
  auto parsed =
      binary ? parse_publish_binary(req.body, cfg.max_records, records)
             : parse_publish_json(req.body, cfg.max_records, mr, doc, records);
  if (!parsed) return ex->respond(problem(parsed.error()));

  if (!ack) {
    auto s = node.stream(key);
    if (!s) return ex->respond(problem(s.error()));
    ack = s->spec.default_ack;
  }
  // Core copies the records before publish() returns; `records`, `doc` and the arena may
  // go away afterwards. The callback runs on a storage thread: render on the strand. With
  // no other request in flight, this thread may write and sync the batch itself and answer
  // at once (docs/architecture.md "Inline appends").
  PublishOptions opts;
  opts.ack = *ack;
  opts.caller_may_block = cfg.inline_appends && ex->only_request_in_flight();
  auto pid = target.param("producer_id");
  auto seq = target.param("sequence");
  if (pid || seq) {
    auto parse = [](std::string_view v) -> std::optional<std::uint64_t> {
      std::uint64_t x = 0;
      auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
      if (ec != std::errc() || p != v.data() + v.size() || v.empty()) return std::nullopt;
      return x;
    };
    auto p = pid ? parse(*pid) : std::nullopt;
    auto q = seq ? parse(*seq) : std::nullopt;
    if (!p || !q || *p == 0)
      return ex->respond(problem(Error(Errc::invalid_argument,
                                       "an idempotent publish needs producer_id (a positive integer) "
                                       "and sequence (a non-negative integer) together")));
    opts.producer_id = *p;
    opts.sequence = *q;
  }
  // Charged last, once the request is one the node would take: a client retrying a
  // malformed body or a bad parameter got only 400s, yet drained its tenant's bucket by
  // each body's size, and the tenant's valid publishes got 429 (review finding).
  if (const std::uint32_t wait = quotas.charge(key.tenant, req.body.size())) return over_quota(wait);
  // Sluice-Leader names the leader of the first record's shard (its explicit shard when
  // the publish failed; none when that is not known).
  const std::optional<std::uint32_t> first_shard = records.front().shard;
  node.publish(key, records, opts, [ex, &node, key, first_shard](Result<std::vector<PublishedRecord>> r) {
    auto answer = [ex, &node, key, first_shard](Result<std::vector<PublishedRecord>> r) {
      if (r) return ex->respond_here(with_leader(render_results(r.value()), node, key, r->front().shard));
      HttpResponse resp = problem(r.error());
      if (first_shard) resp = with_leader(std::move(resp), node, key, ShardIndex{*first_shard});
      ex->respond_here(std::move(resp));
    };
    if (ex->on_strand()) return answer(std::move(r));  // completed inline
    ex->post([answer, r = std::move(r)]() mutable { answer(std::move(r)); });
  });
}

}  // namespace sluice::http_api
