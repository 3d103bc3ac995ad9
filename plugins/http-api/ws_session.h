// The WebSocket side of subscribe: session.cc hands an upgraded connection over here.
// Only session.cc and ws_session.cc include this (it names Beast types); Beast's websocket
// headers stay in ws_session.cc.
#pragma once

#include <functional>
#include <memory>

#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

#include "config.h"
#include "gate.h"
#include "metrics.h"
#include "subscribe.h"
#include "sluice/node.h"

namespace sluice::http_api {

// What a subscription session needs from the server; everything outlives the session
// while `gate` is open (server.h "Lifetime").
struct WsContext {
  Node* node = nullptr;
  const HttpConfig* cfg = nullptr;
  HttpMetrics* metrics = nullptr;
  std::shared_ptr<Gate> gate;
  // Runs `fn` on the blocking pool; drops it after stop().
  std::function<void(std::function<void()>)> run_blocking;
};

using UpgradeRequest = boost::beast::http::request<boost::beast::http::string_body>;

// RFC 6455 upgrade headers (GET, HTTP/1.1, Connection: upgrade, Upgrade: websocket).
bool is_websocket_upgrade(const boost::beast::http::request_header<>& req);

// Completes the handshake on `stream` (on its strand) and runs the subscription until
// either side closes it. `stream` must have no operation pending.
void start_websocket(boost::beast::tcp_stream stream, UpgradeRequest req, Subscription sub, WsContext ctx);
// The same over TLS (wss://): `stream` has completed its TLS handshake; `tls` is its context,
// kept alive as long as the session.
void start_websocket(boost::beast::ssl_stream<boost::beast::tcp_stream> stream, UpgradeRequest req,
                     Subscription sub, WsContext ctx, std::shared_ptr<boost::asio::ssl::context> tls);

}  // namespace sluice::http_api
