// The HTTP client of `sluice`, with its retry policy (docs/api.md, "Errors").
//
// One kept-alive connection, used from one thread. A network error after a request may
// have been written is retried once, on a fresh connection, only for a call the API
// defines as idempotent; any other call reports "outcome uncertain" and is never sent
// twice, so a publish without a producer id cannot be written twice by the client.
//
// Failures end the process (this is a command-line tool): exit 1 with one line on stderr,
// for an unreachable node, an uncertain outcome, or (call_ok) a non-2xx answer.
#pragma once

#include <boost/json.hpp>

#include <Poco/URI.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace Poco::Net {
class HTTPClientSession;
}

namespace sluice::cli {

struct Response {
  int status = 0;
  std::string body;
  std::string content_type;
  std::vector<std::pair<std::string, std::string>> headers;  // as received
  // The value of header `name` (case-insensitive), or "".
  std::string header(const std::string& name) const;
};

// Whether a call may be sent again after the connection failed.
//   by_method  GET and HEAD are retried once; any other method is never re-sent once its
//              request may have been written. PUT and DELETE are not idempotent here: a
//              delete re-sent after its stream was created again deletes the new incarnation,
//              and a re-sent `cache put --if-revision` fails on its own first write.
//   safe       a POST the API documents as idempotent: a publish carrying producer_id and
//              sequence (docs/api.md, "Idempotent producers"), a feature finalize.
enum class Replay { by_method, safe };

// True when a failed call of `method` under `replay` may be sent again.
bool replayable(const std::string& method, Replay replay);

class Connection;

// https:// URLs (docs/security.md "TLS"): the CA that signed the node's certificate
// (--cacert; empty: the system's CAs) and, for a node that requires client certificates,
// ours (--cert and --key). The node's certificate must name the URL's host.
struct TlsOptions {
  std::string cacert, cert, key;
};
// Set once in main(), before the first Client: every Client of the process uses them.
void set_tls_options(TlsOptions o);

// For a long operation that prints progress on stderr. While `open` is true the progress
// line has no newline yet, so a failure's message first ends it. The note (if set) is
// printed after a failed call's message, before exit 1: what the operation had done by
// then (e.g. how many records a publish had acknowledged).
void set_progress_line_open(bool open);
void set_failure_note(std::function<std::string()> note);
// Whether the call that failed may have taken effect (a server's "outcome":"uncertain", or
// a connection lost after a request that is not re-sent). For failure notes.
bool failure_uncertain();

// A bare session to the URL's node (HTTPS for https://, with the options above), for a
// WebSocket subscription.
std::unique_ptr<Poco::Net::HTTPClientSession> open_session(const Poco::URI& uri);

class Client {
 public:
  // Exits 2 for a URL that is not http:// or https://. A non-empty `token` is sent on every
  // call as "Authorization: Bearer <token>" (docs/security.md).
  explicit Client(const std::string& url, std::string token = "");
  ~Client();

  // Sends one request and returns the answer, whatever its status.
  Response call(const std::string& method, const std::string& path, const std::string& body = "",
                const std::string& content_type = "application/json", Replay replay = Replay::by_method);

  // One GET that does not end the process when the node cannot be reached or the connection
  // fails (nullopt, with the reason in *error): for probing nodes of which some may be down.
  std::optional<Response> try_get(const std::string& path, std::string* error = nullptr);

  // Calls and exits with the server's problem details on a non-2xx answer; returns the
  // parsed body (null when empty).
  boost::json::value call_ok(const std::string& method, const std::string& path, const std::string& body = "",
                             const std::string& content_type = "application/json",
                             Replay replay = Replay::by_method);

  // The node's URL (a subscription opens its own connection to it).
  const Poco::URI& uri() const { return uri_; }
  const std::string& token() const { return token_; }

  // Prints "sluice: <status> <code>: <detail>" from a problem-details answer, exits 1.
  [[noreturn]] static void fail(const Response& r);

 private:
  struct Failure {
    bool sent = false;     // the request may have been written
    bool network = false;  // a network error (a retry on a fresh connection may succeed)
    std::string message;
  };
  // One try on the kept connection (reconnecting first if it is closed); nullopt on failure.
  std::optional<Response> attempt(const std::string& method, const std::string& path, const std::string& body,
                                  const std::string& content_type, Failure& why);

  Poco::URI uri_;
  std::string token_;
  std::unique_ptr<Connection> conn_;
};

}  // namespace sluice::cli
