// The cache data plane's HTTP side (docs/api.md "Caches"); the rules are in cache_store.h.
//
//   PUT    {ns}/caches/{c}/keys/{k}?ttl_ms=&if_revision=&if_incarnation=&ack=   body: the value
//            -> 200 {"revision","expires_at_ms"?,"incarnation"}; 409 revision_mismatch
//            {"current_revision"}; 409 conflict (if_incarnation: the cache is another one now)
//   GET    {ns}/caches/{c}/keys/{k}  -> 200 the value (application/octet-stream) with
//            Sluice-Revision, Sluice-Cache-Incarnation and Sluice-Expires-At (absent when
//            it does not expire); 404
//   DELETE {ns}/caches/{c}/keys/{k}?if_revision=&if_incarnation=&ack=  -> 200 {"revision","incarnation"}; 404; 409
//   GET    {ns}/caches/{c}/keys?prefix=&after=&limit=  -> 200 {"keys":[...],"next"?}
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

#include "cache_store.h"
#include "codec.h"
#include "handlers.h"
#include "problem.h"

namespace sluice::http_api {

namespace json = boost::json;

namespace {

HttpResponse mismatch(const CacheStore::Write& w, std::string_view key) {
  json::object o;
  o["type"] = "https://sluice.dev/errors/revision_mismatch";
  o["title"] = "Revision mismatch";
  o["status"] = 409;
  o["code"] = "revision_mismatch";
  o["detail"] = w.revision == 0 ? "key '" + std::string(key) + "' is absent; nothing was written"
                                : "key '" + std::string(key) + "' is at revision " + std::to_string(w.revision) +
                                      "; nothing was written";
  o["outcome"] = "definite";
  o["current_revision"] = w.revision;
  HttpResponse r;
  r.status = 409;
  r.content_type = std::string(kProblemJson);
  r.body = json::serialize(o);
  return r;
}

HttpResponse write_json(const CacheStore::Write& w) {
  json::object o;
  o["revision"] = w.revision;
  if (w.expires_at_ms >= 0) o["expires_at_ms"] = w.expires_at_ms;
  o["incarnation"] = w.incarnation.value();
  return json_response(200, o);
}

// The shared query parameters of writes.
struct WriteParams {
  std::optional<std::uint64_t> if_revision;
  std::optional<Incarnation> if_incarnation;
  std::optional<AckMode> ack;
  std::optional<std::int64_t> ttl_ms;
};
Result<WriteParams> write_params(const Target& t, bool put) {
  WriteParams p;
  if (auto v = t.param("if_revision")) {
    auto x = parse_u64(*v);
    if (!x || *x > static_cast<std::uint64_t>(INT64_MAX))
      return Error(Errc::invalid_argument, "if_revision must be a non-negative integer (0: only if absent)");
    p.if_revision = *x;
  }
  if (auto v = t.param("if_incarnation")) {
    auto x = parse_u64(*v);
    if (!x) return Error(Errc::invalid_argument, "if_incarnation must be a non-negative integer (Sluice-Cache-Incarnation)");
    p.if_incarnation = Incarnation{*x};
  }
  if (auto a = t.param("ack")) {
    p.ack = parse_ack_mode(*a);
    if (!p.ack || *p.ack == AckMode::none)
      return Error(Errc::invalid_argument, "ack must be leader or quorum for a cache write");
  }
  if (auto v = t.param("ttl_ms")) {
    if (!put) return Error(Errc::invalid_argument, "ttl_ms applies to PUT only");
    auto x = parse_u64(*v);
    constexpr std::uint64_t kMax = 10ULL * 365 * 24 * 3600 * 1000;
    if (!x || *x == 0 || *x > kMax)
      return Error(Errc::invalid_argument, "ttl_ms must be an integer from 1 to " + std::to_string(kMax) +
                                               " (leave it out for the cache's default_ttl_ms)");
    p.ttl_ms = static_cast<std::int64_t>(*x);
  }
  return p;
}

}  // namespace

HttpResponse invalid_key(const Error& e) { return problem(400, "invalid_key", "Invalid key", e.message); }

void respond_on_store(CacheStore& store, const std::shared_ptr<Exchange>& ex, std::function<HttpResponse()> fn) {
  store.submit([ex, fn = std::move(fn)]() mutable {
    try {
      ex->respond(fn());
    } catch (const std::exception& e) {
      ex->respond(problem(Error(Errc::internal, std::string("unexpected exception: ") + e.what())));
    }
  });
}

void handle_cache_keys(CacheStore& store, const std::shared_ptr<Exchange>& ex, const std::vector<std::string>& seg,
                       const Target& target) {
  const HttpRequest& req = ex->request();
  StreamKey cache{seg[2], seg[4], seg[6]};
  auto run = [&store, ex](std::function<HttpResponse()> fn) { respond_on_store(store, ex, std::move(fn)); };
  if (seg.size() == 8) {  // GET keys
    const std::string prefix(target.param("prefix").value_or(""));
    const std::string after(target.param("after").value_or(""));
    for (const std::string* s : {&prefix, &after})
      if (!s->empty())
        if (auto r = validate_cache_key(*s, store.config().max_key_bytes); !r) return ex->respond(invalid_key(r.error()));
    auto limit = u64_param(target, "limit", 100, 1, 1000);
    if (!limit) return ex->respond(problem(limit.error()));
    return run([&store, cache, prefix, after, limit = *limit]() -> HttpResponse {
      auto r = store.list(cache, prefix, after, limit);
      if (!r) return problem(r.error());
      json::array a;
      for (auto& [k, e] : r->keys) {
        json::object o;
        o["key"] = k;
        o["revision"] = e.revision;
        if (e.expires_at_ms >= 0) o["expires_at_ms"] = e.expires_at_ms;
        a.push_back(std::move(o));
      }
      json::object o;
      o["keys"] = std::move(a);
      if (r->next) o["next"] = *r->next;
      return json_response(200, o);
    });
  }
  std::string key = seg[8];
  if (auto r = validate_cache_key_segment(key, store.config().max_key_bytes); !r) return ex->respond(invalid_key(r.error()));
  if (req.method == "GET") {
    return run([&store, cache, key]() -> HttpResponse {
      Incarnation incarnation{0};
      auto r = store.get(cache, key, &incarnation);
      if (!r) return problem(r.error());
      HttpResponse resp;
      resp.content_type = "application/octet-stream";
      resp.body = std::move(r->value);
      resp.headers.emplace_back("Sluice-Revision", std::to_string(r->revision));
      resp.headers.emplace_back("Sluice-Cache-Incarnation", std::to_string(incarnation.value()));
      if (r->expires_at_ms >= 0) resp.headers.emplace_back("Sluice-Expires-At", std::to_string(r->expires_at_ms));
      return resp;
    });
  }
  const bool put = req.method == "PUT";
  auto p = write_params(target, put);
  if (!p) return ex->respond(problem(p.error()));
  if (put) {
    if (req.body.size() > store.config().max_value_bytes)
      return ex->respond(problem(Error(Errc::body_too_large, "the value is " + std::to_string(req.body.size()) +
                                                                 " bytes; the limit is " +
                                                                 std::to_string(store.config().max_value_bytes) +
                                                                 " (cache.max_value_bytes)")));
    // The request (and its body) lives as long as the exchange, which the task holds.
    return run([&store, ex, cache, key, p = *p]() -> HttpResponse {
      auto r = store.put(cache, key, ex->request().body, p.ttl_ms, p.if_revision, p.ack, p.if_incarnation);
      if (!r) return problem(r.error());
      if (r->status == CacheStore::Write::Status::mismatch) return mismatch(*r, key);
      return write_json(*r);
    });
  }
  run([&store, cache, key, p = *p]() -> HttpResponse {
    auto r = store.erase(cache, key, p.if_revision, p.ack, p.if_incarnation);
    if (!r) return problem(r.error());
    if (r->status == CacheStore::Write::Status::mismatch) return mismatch(*r, key);
    if (r->status == CacheStore::Write::Status::absent)
      return problem(Error(Errc::not_found, "cache '" + cache.name + "' has no key '" + key + "'"));
    return write_json(*r);
  });
}

}  // namespace sluice::http_api
