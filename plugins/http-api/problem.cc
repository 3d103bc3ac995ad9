#include "problem.h"

#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

namespace sluice::http_api {

namespace {
std::string_view title_of(Errc c) {
  switch (c) {
    case Errc::invalid_name: return "Invalid name";
    case Errc::invalid_argument: return "Invalid argument";
    case Errc::malformed_body: return "Malformed body";
    case Errc::unknown_field: return "Unknown field";
    case Errc::body_too_large: return "Body too large";
    case Errc::unsupported_media: return "Unsupported media type";
    case Errc::not_found: return "Not found";
    case Errc::already_exists: return "Already exists";
    case Errc::conflict: return "Conflict";
    case Errc::offset_out_of_range: return "Offset out of range";
    case Errc::corrupt_data: return "Corrupt data";
    case Errc::storage_failure: return "Storage failure";
    case Errc::fenced: return "Fenced";
    case Errc::stale_route: return "Stale route";
    case Errc::not_leader: return "Not leader";
    case Errc::cluster_id_mismatch: return "Cluster id mismatch";
    case Errc::unavailable: return "Unavailable";
    case Errc::timeout: return "Timeout";
    case Errc::unauthorized: return "Unauthorized";
    case Errc::internal: return "Internal error";
    case Errc::sequence_gap: return "Sequence gap";
    case Errc::method_not_allowed: return "Method not allowed";
    case Errc::not_supported: return "Not supported";
    case Errc::not_enough_replicas: return "Not enough replicas";
    case Errc::shard_unavailable: return "Shard unavailable";
  }
  return "Error";
}
}  // namespace

namespace {
HttpResponse render_problem(int status, std::string_view code, std::string_view title,
                            std::string_view detail, std::string_view outcome) {
  boost::json::object o;
  o["type"] = std::string("https://sluice.dev/errors/") + std::string(code);
  o["title"] = title;
  o["status"] = status;
  o["code"] = code;
  o["detail"] = detail;
  if (!outcome.empty()) o["outcome"] = outcome;
  HttpResponse r;
  r.status = status;
  r.content_type = std::string(kProblemJson);
  r.body = boost::json::serialize(o);
  return r;
}
}  // namespace

HttpResponse problem(int status, std::string_view code, std::string_view title,
                     std::string_view detail) {
  return render_problem(status, code, title, detail, "");
}

HttpResponse problem(const Error& e) {
  // The outcome tells a client whether the operation may have happened (error.h): a
  // client must not blindly retry an `uncertain` publish.
  const std::string_view outcome = e.outcome == Outcome::definite    ? "definite"
                                   : e.outcome == Outcome::transient ? "transient"
                                                                     : "uncertain";
  HttpResponse r =
      render_problem(http_status(e.code), errc_name(e.code), title_of(e.code), e.message, outcome);
  if (e.outcome == Outcome::transient) r.headers.emplace_back("Retry-After", "1");
  return r;
}

}  // namespace sluice::http_api
