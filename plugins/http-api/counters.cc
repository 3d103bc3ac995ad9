// Counters in the catalog (docs/api.md "Counters"; metadata level 18, fleet feature
// `counters`):
//
//   GET    {ns}/counters          {"counters":[counter]}
//   POST   {ns}/counters          {"name"} -> 201 counter; 409 conflict until `counters` is
//                                  finalized (or while a metadata member is below level 18)
//   GET    {ns}/counters/{c}      counter {"tenant","namespace","name","incarnation","created_seq"}
//   DELETE {ns}/counters/{c}      200 the deleted counter
//
// Backends without counters answer 501 not_supported. The counter data plane (add/get of
// keys) is not served yet.
#include <boost/json/array.hpp>
#include <boost/json/monotonic_resource.hpp>
#include <boost/json/object.hpp>

#include "codec.h"
#include "handlers.h"
#include "problem.h"
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
  json::monotonic_resource mr;
  json::value v(json::storage_ptr{&mr});
  if (auto r = parse_json_object(body, v); !r) return r.error();
  const auto& o = v.get_object();
  if (auto r = check_fields(o, {"name"}, ""); !r) return r.error();
  const auto* n = o.if_contains("name");
  if (!n) return Error(Errc::invalid_argument, "field \"name\" is required");
  if (!n->is_string()) return Error(Errc::invalid_argument, "field \"name\" must be a string");
  std::string name(n->get_string());
  if (auto r = validate_name(NameKind::counter, name); !r) return r.error();
  return name;
}

}  // namespace

void handle_counters(Node& node, const std::shared_ptr<Exchange>& ex, const std::vector<std::string>& seg,
                     std::string_view method, std::string_view body) {
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
    return respond_blocking(ex, [&node, key = std::move(key)]() -> HttpResponse {
      auto r = node.catalog().create_counter(key);
      return r ? json_response(201, counter_json(*r)) : problem(r.error());
    });
  }
  StreamKey key{t, n, seg[6]};
  if (auto r = validate_name(NameKind::counter, key.name); !r) return ex->respond(problem(r.error()));
  if (method == "GET")
    return respond_blocking(ex, [&node, key = std::move(key)]() -> HttpResponse {
      auto r = node.catalog().get_counter(key);
      return r ? json_response(200, counter_json(*r)) : problem(r.error());
    });
  respond_blocking(ex, [&node, key = std::move(key)]() -> HttpResponse {
    auto r = node.catalog().delete_counter(key);
    return r ? json_response(200, counter_json(*r)) : problem(r.error());
  });
}

}  // namespace sluice::http_api
