// Fleet administration: features (list, finalize), brokers, tombstones.
//
//   GET  /v1/features                  {"features":[{"name","required_level","finalized",
//                                       "finalized_seq","supported_by":[ids],"lacking":[ids]}]}
//   POST /v1/features/{f}/finalize     200 feature (idempotent: finalizing twice answers the
//                                       same); 404 unknown feature; 409 with the reason
//   GET  /v1/brokers                   {"brokers":[{"id","address","directory_id","version",
//                                       "features","live","registered_seq"}]}
//   GET  /v1/tombstones                {"tombstones":[{"tenant","namespace","name",
//                                       "deleted_up_to","seq"}]}
#include <algorithm>

#include <boost/json/array.hpp>
#include <boost/json/monotonic_resource.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "codec.h"
#include "handlers.h"
#include "problem.h"

namespace sluice::http_api {

namespace json = boost::json;

namespace {

json::array ids(const std::vector<NodeId>& v) {
  json::array a;
  for (auto id : v) a.push_back(id.value());
  return a;
}

json::object feature_json(const FeatureInfo& f) {
  json::object o;
  o["name"] = f.name;
  o["required_level"] = f.required_level.value();
  o["finalized"] = f.finalized;
  o["finalized_seq"] = f.finalized_seq.value();
  o["supported_by"] = ids(f.supported_by);
  o["lacking"] = ids(f.lacking);
  return o;
}

json::object broker_json(const BrokerInfo& b) {
  json::object o;
  o["id"] = b.id.value();
  o["address"] = b.address;
  o["directory_id"] = b.directory_id;
  o["version"] = b.version;
  json::array f;
  for (auto& x : b.features) f.push_back(json::string(x));
  o["features"] = std::move(f);
  o["live"] = b.live;
  o["registered_seq"] = b.registered_seq.value();
  return o;
}

json::object tombstone_json(const Tombstone& t) {
  json::object o;
  o["tenant"] = t.key.tenant;
  o["namespace"] = t.key.ns;
  o["name"] = t.key.name;
  o["deleted_up_to"] = t.deleted_up_to.value();
  o["seq"] = t.seq.value();
  return o;
}

template <class T, class F>
HttpResponse list_response(const Result<std::vector<T>>& r, const char* field, F render) {
  if (!r) return problem(r.error());
  json::array a;
  for (const auto& x : *r) a.push_back(render(x));
  json::object o;
  o[field] = std::move(a);
  return json_response(200, o);
}

bool plain_feature_name(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}


}  // namespace

void handle_fleet(Node& node, const std::shared_ptr<Exchange>& ex, const std::vector<std::string>& seg,
                  std::string_view body) {
  const std::string& what = seg[1];
  if (what == "features" && seg.size() == 2) {
    return respond_blocking(ex, [&node] {
      return list_response(node.catalog().list_features(), "features", feature_json);
    });
  }
  if (what == "features" && seg.size() == 4) {
    const std::string name = seg[2];
    if (!plain_feature_name(name))
      return ex->respond(problem(Error(Errc::invalid_argument,
                                       "a feature name is 1..64 characters of [a-z0-9_]")));
    return respond_blocking(ex, [&node, name] {
      auto r = node.catalog().finalize_feature(name);
      return r ? json_response(200, feature_json(*r)) : problem(r.error());
    });
  }
  if (what == "brokers" && seg.size() == 2)
    return respond_blocking(ex, [&node] {
      return list_response(node.catalog().list_brokers(), "brokers", broker_json);
    });
  if (what == "brokers" && seg.size() == 4) {
    const std::string& id = seg[2];
    if (id.empty() || id.size() > 10 || !std::all_of(id.begin(), id.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
        std::stoull(id) == 0 || std::stoull(id) > 0xffffffffULL)
      return ex->respond(problem(Error(Errc::invalid_argument, "a broker id is an integer from 1 to 4294967295")));
    const NodeId broker{static_cast<std::uint32_t>(std::stoull(id))};
    if (!body.empty()) {  // nothing to say but `{}`: any field is one we do not know
      json::monotonic_resource mr;
      json::value v(json::storage_ptr{&mr});
      if (auto r = parse_json_object(body, v); !r) return ex->respond(problem(r.error()));
      if (auto r = check_fields(v.get_object(), {}, ""); !r) return ex->respond(problem(r.error()));
    }
    return respond_blocking(ex, [&node, broker] {
      auto r = node.drain_broker(broker);
      if (!r) return problem(r.error());
      json::object o;
      o["broker"] = broker.value();
      json::array moves;
      std::size_t started = 0;
      for (const auto& m : r->moves) {
        json::object e;
        e["stream"] = m.assignment.key.to_string();
        e["shard"] = m.assignment.shard.value();
        json::array from;
        for (auto b : m.assignment.replicas) from.push_back(b.value());
        e["replicas"] = std::move(from);
        if (m.refused.empty()) {
          json::array to;
          for (auto b : m.target) to.push_back(b.value());
          e["target_replicas"] = std::move(to);
          ++started;
        } else {
          e["refused"] = m.refused;
        }
        moves.push_back(std::move(e));
      }
      o["moves"] = std::move(moves);
      o["started"] = started;
      return json_response(started ? 202 : 200, o);
    });
  }
  if (what == "tombstones")
    return respond_blocking(ex, [&node] {
      return list_response(node.catalog().list_tombstones(), "tombstones", tombstone_json);
    });
  ex->respond(problem(Error(Errc::not_found, "no such route")));
}

}  // namespace sluice::http_api
