#include "sluice/error.h"

namespace sluice {

std::string_view errc_name(Errc c) {
  switch (c) {
    case Errc::invalid_name: return "invalid_name";
    case Errc::invalid_argument: return "invalid_argument";
    case Errc::malformed_body: return "malformed_body";
    case Errc::unknown_field: return "unknown_field";
    case Errc::body_too_large: return "body_too_large";
    case Errc::unsupported_media: return "unsupported_media";
    case Errc::not_found: return "not_found";
    case Errc::already_exists: return "already_exists";
    case Errc::conflict: return "conflict";
    case Errc::offset_out_of_range: return "offset_out_of_range";
    case Errc::corrupt_data: return "corrupt_data";
    case Errc::storage_failure: return "storage_failure";
    case Errc::fenced: return "fenced";
    case Errc::stale_route: return "stale_route";
    case Errc::not_leader: return "not_leader";
    case Errc::cluster_id_mismatch: return "cluster_id_mismatch";
    case Errc::unavailable: return "unavailable";
    case Errc::timeout: return "timeout";
    case Errc::unauthorized: return "unauthorized";
    case Errc::internal: return "internal";
    case Errc::sequence_gap: return "sequence_gap";
    case Errc::method_not_allowed: return "method_not_allowed";
    case Errc::not_supported: return "not_supported";
    case Errc::not_enough_replicas: return "not_enough_replicas";
    case Errc::shard_unavailable: return "shard_unavailable";
  }
  return "internal";
}

int http_status(Errc c) {
  switch (c) {
    case Errc::invalid_name:
    case Errc::invalid_argument:
    case Errc::malformed_body:
    case Errc::unknown_field: return 400;
    case Errc::body_too_large: return 413;
    case Errc::unsupported_media: return 415;
    case Errc::not_found: return 404;
    case Errc::already_exists:
    case Errc::conflict:
    case Errc::fenced:
    case Errc::stale_route:
    case Errc::sequence_gap: return 409;
    case Errc::method_not_allowed: return 405;
    case Errc::not_supported: return 501;
    case Errc::offset_out_of_range: return 416;
    case Errc::not_leader: return 421;
    case Errc::cluster_id_mismatch: return 403;
    case Errc::unavailable:
    case Errc::not_enough_replicas:
    case Errc::shard_unavailable: return 503;
    case Errc::timeout: return 504;
    case Errc::unauthorized: return 401;
    case Errc::corrupt_data:
    case Errc::storage_failure:
    case Errc::internal: return 500;
  }
  return 500;
}

Outcome default_outcome(Errc c) {
  switch (c) {
    case Errc::unavailable:
    case Errc::not_enough_replicas:
    case Errc::shard_unavailable:
    case Errc::not_leader:
    case Errc::stale_route:
    case Errc::storage_failure: return Outcome::transient;
    case Errc::timeout: return Outcome::uncertain;
    default: return Outcome::definite;
  }
}

}  // namespace sluice
