#include "client.h"

#include <Poco/Net/HTTPClientSession.h>
#include <Poco/Net/HTTPRequest.h>
#include <Poco/Net/HTTPResponse.h>
#include <Poco/Net/NetException.h>
#include <Poco/Net/Socket.h>
#include <Poco/String.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "command_line.h"

namespace json = boost::json;

namespace sluice::cli {

bool replayable(const std::string& method, Replay replay) {
  return replay == Replay::safe || method == "GET" || method == "HEAD" || method == "PUT" ||
         method == "DELETE";
}

// One kept-alive connection. Exposes what the retry policy needs from Poco's session.
class Connection : public Poco::Net::HTTPClientSession {
 public:
  Connection(const std::string& host, Poco::UInt16 port) : HTTPClientSession(host, port) {
    setKeepAlive(true);
    setTimeout(Poco::Timespan(120, 0));
    // Staleness is detected by peer_closed(), not by a clock.
    setKeepAliveTimeout(Poco::Timespan(24 * 3600, 0));
  }
  using HTTPClientSession::mustReconnect;  // the server answered "Connection: close"
  // Connects if not connected. Throws before a single byte of a request is written.
  void open() {
    if (!connected()) reconnect();
  }
  // An idle kept-alive connection that is readable was closed (or reset) by the server:
  // it must not carry a request that cannot be retried.
  bool peer_closed() {
    return connected() && socket().poll(Poco::Timespan(0), Poco::Net::Socket::SELECT_READ);
  }
};

Client::Client(const std::string& url) : uri_(url) {
  if (uri_.getScheme() != "http") usage_error("sluice", "only http:// URLs are supported, got " + url);
}

Client::~Client() = default;

Response Client::call(const std::string& method, const std::string& path, const std::string& body,
                      const std::string& content_type, Replay replay) {
  for (int attempt = 0;; ++attempt) {
    if (!conn_ || conn_->mustReconnect() || conn_->peer_closed())
      conn_ = std::make_unique<Connection>(uri_.getHost(), uri_.getPort());
    try {
      conn_->open();
    } catch (const Poco::Exception& e) {
      conn_.reset();
      std::fprintf(stderr, "sluice: cannot reach %s: %s (nothing was sent)\n", uri_.toString().c_str(),
                   e.displayText().c_str());
      std::exit(1);
    }
    try {
      Poco::Net::HTTPRequest req(method, path, Poco::Net::HTTPMessage::HTTP_1_1);
      req.setKeepAlive(true);
      if (!body.empty() || method == "POST") {
        req.setContentType(content_type);
        req.setContentLength(static_cast<std::streamsize>(body.size()));
      }
      std::ostream& os = conn_->sendRequest(req);
      os.write(body.data(), static_cast<std::streamsize>(body.size()));
      Poco::Net::HTTPResponse res;
      std::istream& is = conn_->receiveResponse(res);
      Response out;
      out.status = res.getStatus();
      out.content_type = res.getContentType();
      for (const auto& [k, v] : res) out.headers.emplace_back(k, v);
      std::ostringstream ss;
      ss << is.rdbuf();
      out.body = ss.str();
      return out;
    } catch (const Poco::Exception& e) {
      conn_.reset();
      const bool replay_ok = replayable(method, replay);
      if (attempt == 0 && replay_ok && dynamic_cast<const Poco::Net::NetException*>(&e)) continue;
      if (!replay_ok) {
        std::fprintf(stderr,
                     "sluice: %s %s: the connection to %s failed after the request was sent: %s; "
                     "outcome uncertain: it may or may not have taken effect, and was not re-sent\n",
                     method.c_str(), path.c_str(), uri_.toString().c_str(), e.displayText().c_str());
      } else {
        std::fprintf(stderr, "sluice: cannot reach %s: %s\n", uri_.toString().c_str(), e.displayText().c_str());
      }
      std::exit(1);
    }
  }
}

std::string Response::header(const std::string& name) const {
  for (const auto& [k, v] : headers)
    if (Poco::icompare(k, name) == 0) return v;
  return "";
}

json::value Client::call_ok(const std::string& method, const std::string& path, const std::string& body,
                            const std::string& content_type, Replay replay) {
  Response r = call(method, path, body, content_type, replay);
  if (r.status < 200 || r.status > 299) fail(r);
  if (r.body.empty()) return nullptr;
  return json::parse(r.body);
}

void Client::fail(const Response& r) {
  std::string code = "error", detail = r.body;
  try {
    auto v = json::parse(r.body).as_object();
    if (auto* c = v.if_contains("code")) code = json::value_to<std::string>(*c);
    if (auto* d = v.if_contains("detail")) detail = json::value_to<std::string>(*d);
  } catch (...) {
  }
  std::fprintf(stderr, "sluice: %d %s: %s\n", r.status, code.c_str(), detail.c_str());
  std::exit(1);
}

}  // namespace sluice::cli
