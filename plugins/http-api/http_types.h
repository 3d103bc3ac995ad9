// The plain request/response types shared by the Beast connection code (session.cc) and
// the Beast-free routing and rendering code (router.cc, publish.cc, fetch.cc). Keeping
// Beast out of everything but the connection code keeps the build cheap (docs/dependencies.md).
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace sluice::http_api {

struct Subscription;  // subscribe.h

struct HttpRequest {
  std::string method;        // "GET", "POST", ...
  std::string target;        // raw request-target, still percent-encoded
  std::string content_type;  // raw Content-Type header ("" if absent)
  std::string authorization; // raw Authorization header ("" if absent); never logged
  std::string body;          // owned; publish builds views into it
  bool websocket = false;    // a WebSocket upgrade request (RFC 6455 handshake headers)
  std::string origin;        // upgrade requests only: the Origin header ("" if absent)
  std::string host;          // the Host header ("" if absent)
};

struct HttpResponse {
  int status = 200;
  std::string content_type;  // empty: no Content-Type (e.g. 204)
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers (Allow, ...)
  bool close = false;        // close the connection after sending
};

// One request in flight, as the router sees it. Implemented by the connection (session.cc).
//
// Threading: request() and start_timer() are for the connection's strand (the thread the
// router's handle() is called on, or a function given to post()). respond(), upgrade(), post()
// and run_blocking() may be called from any thread (core, storage or admin-pool threads).
// After stop() they silently drop their argument.
class Exchange {
 public:
  virtual ~Exchange() = default;
  virtual const HttpRequest& request() const = 0;
  // Strand only, before respond(): the route template, used as a metrics label.
  virtual void set_route(std::string route) = 0;
  // Strand only, before upgrade(): whether the request's token still allows it, asked again
  // by a WebSocket session for as long as it lives (tokens are revoked by a reload).
  virtual void set_authorization(std::function<bool()> still_allowed) { (void)still_allowed; }
  // Sends the response on the connection's strand. Only the first call counts.
  virtual void respond(HttpResponse r) = 0;
  // Instead of respond(): accepts the WebSocket upgrade of request() and hands the
  // connection to a subscription session (ws_session.cc). Only the first respond() or
  // upgrade() counts.
  virtual void upgrade(Subscription sub) = 0;
  // Runs `fn` on the connection's strand.
  virtual void post(std::function<void()> fn) = 0;
  // Runs `fn` on the small admin thread pool (for calls that may block, e.g. the catalog).
  virtual void run_blocking(std::function<void()> fn) = 0;
  // Strand only. Runs `fn` on the strand after `d`, unless the returned cancel function
  // is called (also on the strand) first.
  virtual std::function<void()> start_timer(std::chrono::milliseconds d,
                                            std::function<void()> fn) = 0;

  // Inline appends (docs/architecture.md "Inline appends"). Strand only: no other request
  // is being served by this server, so this thread may block for one write and sync
  // without delaying anyone.
  virtual bool only_request_in_flight() const { return false; }
  // Whether the calling thread may act as this connection's strand now (any thread): its
  // io thread, which runs no other handler of the connection meanwhile.
  virtual bool on_strand() const { return false; }
  // respond(), for a caller on the strand (on_strand()) that holds no lock: sends at once
  // instead of from a posted handler, which could wake another thread to send it.
  virtual void respond_here(HttpResponse r) { respond(std::move(r)); }
};

}  // namespace sluice::http_api
