// Internal to http-api: the data-path handlers and JSON body helpers shared by router.cc,
// publish.cc and fetch.cc.
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <string_view>
#include <vector>

#include <boost/json/object.hpp>

#include <boost/json/monotonic_resource.hpp>
#include <boost/json/value.hpp>

#include "config.h"
#include "http_types.h"
#include "path.h"
#include "sluice/node.h"

namespace sluice::http_api {

// Parses `body` as JSON into `out`, allocating from out.storage() (callers give it a
// monotonic_resource). malformed_body if it does not parse; invalid_argument if it is
// not an object.
Result<void> parse_json_object(std::string_view body, boost::json::value& out);
// unknown_field naming the first field of `o` not in `allowed` (`where` prefixes it).
Result<void> check_fields(const boost::json::object& o,
                          std::initializer_list<std::string_view> allowed,
                          std::string_view where);
// A body that is a JSON object with one field, `name`, required: a copy of its value (for
// small bodies: the parse is on a monotonic resource). Errors as parse_json_object and
// check_fields; invalid_argument when the field is missing.
Result<boost::json::value> only_field(std::string_view body, std::string_view name);
// "application/json; charset=utf-8" -> "application/json" (lower-cased, trimmed).
std::string media_type(std::string_view content_type);

// Adds `Sluice-Leader: <host:port>` (the HTTP address of the broker leading the shard, as
// Node::leader_address knows it) to an answer about one shard; nothing when unknown.
HttpResponse with_leader(HttpResponse r, Node& node, const StreamKey& key, ShardIndex shard);

// One stored record as the API shows it: offset, key/key_base64, value/value_base64,
// headers/headers_base64, timestamp. `scratch` is reused between calls.
boost::json::object record_json(const RecordView& rv, std::vector<Header>& scratch);

// The fetch answer's body for the records of `r` at or after `from`, at most `max`:
// {"records":[...],"next_offset","high_watermark"}. `count` is how many records it holds.
struct RecordsPage {
  boost::json::object body;
  std::size_t count = 0;
  Offset next_offset{0};
};
Result<RecordsPage> render_records(const FetchResult& r, Offset from, std::uint32_t max);

// The `offset` query parameter: a number, or nullopt for earliest/latest;
// invalid_argument otherwise.
Result<std::optional<Offset>> parse_offset_param(std::string_view off);
// Resolves it against the shard (earliest = log start, latest = high watermark).
Result<Offset> resolve_offset(Node& node, const StreamKey& key, ShardIndex shard, std::string_view off);

// Runs `fn` (returning an HttpResponse) on the blocking pool and answers with its result;
// an exception becomes a 500 problem.
template <class Fn>
void respond_blocking(const std::shared_ptr<Exchange>& ex, Fn fn);

// GET/POST /v1/metadata/members, DELETE /v1/metadata/members/{id}
void handle_members(Node& node, const std::shared_ptr<Exchange>& ex, const std::vector<std::string>& seg,
                    std::string_view method, std::string_view body);
// GET/POST {ns}/caches, GET/DELETE {ns}/caches/{c}. A create also creates the cache's
// backing stream, a delete deletes it (cache_store.h).
class CacheStore;
void handle_caches(Node& node, CacheStore& store, const std::shared_ptr<Exchange>& ex,
                   const std::vector<std::string>& seg, std::string_view method, std::string_view body);
// GET/POST {ns}/counters, GET/DELETE {ns}/counters/{c} (counters.cc). A create also creates
// the counter's backing stream in `store` (the counter store), a delete deletes it.
void handle_counters(Node& node, CacheStore& store, const std::shared_ptr<Exchange>& ex,
                     const std::vector<std::string>& seg, std::string_view method, std::string_view body);
// {ns}/caches/{c}/keys[/{k}] (cache.cc)
void handle_cache_keys(CacheStore& store, const std::shared_ptr<Exchange>& ex, const std::vector<std::string>& seg,
                       const Target& target);
// GET {ns}/counters/{c}/keys/{k}, POST {ns}/counters/{c}/keys/{k}/add (counters.cc)
void handle_counter_keys(CacheStore& store, const std::shared_ptr<Exchange>& ex, const std::vector<std::string>& seg,
                         const Target& target, std::string_view body);
// Shared by cache and counter keys (cache.cc): a 400 invalid_key problem, and running `fn`
// on the store's pool, answering with its result (an exception becomes a 500 problem).
HttpResponse invalid_key(const Error& e);
void respond_on_store(CacheStore& store, const std::shared_ptr<Exchange>& ex, std::function<HttpResponse()> fn);

// docs/openapi.yaml, compiled in (embed_openapi.cmake).
std::string_view openapi_document();

// GET /v1/features, POST /v1/features/{f}/finalize, GET /v1/brokers, GET /v1/tombstones
// `body`: the request body (a drain takes none, or `{}`).
void handle_fleet(Node& node, const std::shared_ptr<Exchange>& ex, const std::vector<std::string>& seg,
                  std::string_view body);

// Consumer groups (groups.cc), shared with the group subscription (subscribe.cc).
inline constexpr std::size_t kMaxGroupOffsets = 10000;  // per ack or nack
// `arr` (the field `name`) as a non-empty array of at most kMaxGroupOffsets offsets.
Result<std::vector<Offset>> offsets_array(const boost::json::value* arr, std::string_view name);
// {"records":[{...record, "delivery"}]}: the group fetch's answer.
boost::json::object delivery_json(const GroupDelivery& d);
// max_deliveries (1..1000, default 5) and ack_timeout_ms (1..86400000, default 30000).
Result<GroupOptions> group_options(const Target& target);

// {ns}/streams/{s}/groups[/{g}[/shards/{n}/(records|ack|nack|dead-letters[/replay])]]
void handle_groups(Node& node, const HttpConfig& cfg, const std::shared_ptr<Exchange>& ex,
                   const std::vector<std::string>& seg, const Target& target);

// POST {ns}/streams/{s}/records
// `quotas`: the tenant's publish quota (quota.publish_bytes_per_s), charged before parsing.
class PublishQuotas;
void handle_publish(Node& node, const HttpConfig& cfg, PublishQuotas& quotas, const std::shared_ptr<Exchange>& ex,
                    const StreamKey& key, const Target& target);
// GET {ns}/streams/{s}/shards/{n}/records
// `waiters` bounds the long polls parked per shard (http.max_waiters_per_shard).
class ShardWaiters;
void handle_fetch(Node& node, const HttpConfig& cfg, ShardWaiters& waiters, const std::shared_ptr<Exchange>& ex,
                  const StreamKey& key, ShardIndex shard, const Target& target);

}  // namespace sluice::http_api

#include "problem.h"

namespace sluice::http_api {
template <class Fn>
void respond_blocking(const std::shared_ptr<Exchange>& ex, Fn fn) {
  ex->run_blocking([ex, fn = std::move(fn)]() mutable {
    try {
      ex->respond(fn());
    } catch (const std::exception& e) {
      ex->respond(problem(Error(Errc::internal, std::string("unexpected exception: ") + e.what())));
    }
  });
}
}  // namespace sluice::http_api
