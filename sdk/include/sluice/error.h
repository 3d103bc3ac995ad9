// Expected failures are values (STYLE.md "Errors"). Each has a stable code that clients
// may switch on (it appears verbatim as `code` in HTTP problem details), an HTTP mapping,
// and an outcome class that tells a caller whether retrying can help.
//
// Exceptions are used only at startup/configuration boundaries, never across the plugin
// boundary and never on the data path.
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace sluice {

// Stable codes. Never renumber or rename: the names are part of the HTTP contract.
enum class Errc {
  invalid_name,         // 400: a tenant/namespace/stream name failed validation
  invalid_argument,     // 400: a parameter is out of range or malformed
  malformed_body,       // 400: the request body does not parse
  unknown_field,        // 400: the JSON body has a field we do not know
  body_too_large,       // 413
  unsupported_media,    // 415
  not_found,            // 404: no such tenant/namespace/stream/shard/route
  already_exists,       // 409
  conflict,             // 409: refused because of current state (e.g. non-empty tenant)
  offset_out_of_range,  // 416: before the retained start of a shard
  corrupt_data,         // 500: a CRC check failed; names the file and position
  storage_failure,      // 500: an I/O error; the shard refuses writes until reopened
  fenced,               // 409: this writer was deposed; the write was NOT acknowledged
  stale_route,          // 409: the request names another incarnation than the one held
  not_leader,           // 421: ask another node (carries its address when known)
  cluster_id_mismatch,  // 403: a peer or directory belongs to another cluster
  unavailable,          // 503: not ready yet, or shutting down
  timeout,              // 504: outcome unknown
  unauthorized,         // 401
  internal,             // 500: a bug
  sequence_gap,         // 409: an idempotent producer skipped or reordered a sequence
  method_not_allowed,   // 405
  not_supported,        // 501: this backend or build does not implement the operation
  not_enough_replicas,  // 503: the in-sync set is below min_insync; the write was NOT acknowledged
  shard_unavailable,    // 503: the shard has no eligible leader (names the reason)
};

// Whether the operation may have happened.
enum class Outcome {
  definite,   // it did not happen; retrying the same request gives the same answer
  transient,  // it did not happen; retrying later may succeed
  uncertain,  // it may or may not have happened (e.g. timed out after proposing)
};

std::string_view errc_name(Errc);  // "invalid_name", ...
int http_status(Errc);
Outcome default_outcome(Errc);

struct Error {
  Errc code;
  std::string message;
  Outcome outcome;

  Error(Errc c, std::string msg) : code(c), message(std::move(msg)), outcome(default_outcome(c)) {}
  Error(Errc c, std::string msg, Outcome o) : code(c), message(std::move(msg)), outcome(o) {}
  std::string to_string() const { return std::string(errc_name(code)) + ": " + message; }
};

// Result<T>: a value or an Error. Result<void> carries only success or an Error.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T v) : v_(std::in_place_index<0>, std::move(v)) {}
  Result(Error e) : v_(std::in_place_index<1>, std::move(e)) {}
  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { assert(ok()); return std::get<0>(v_); }
  const T& value() const& { assert(ok()); return std::get<0>(v_); }
  T&& value() && { assert(ok()); return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() { return value(); }
  const T& operator*() const { return value(); }
  const Error& error() const { assert(!ok()); return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error e) : e_(std::move(e)), ok_(false) {}
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { assert(!ok_); return e_; }

 private:
  Error e_{Errc::internal, ""};
  bool ok_ = true;
};

inline Result<void> ok_result() { return {}; }

}  // namespace sluice
