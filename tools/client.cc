#include "client.h"

#include <Poco/Net/Context.h>
#include <Poco/Net/HTTPClientSession.h>
#include <Poco/Net/HTTPSClientSession.h>
#include <Poco/Net/RejectCertificateHandler.h>
#include <Poco/Net/SSLManager.h>
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
  return replay == Replay::safe || method == "GET" || method == "HEAD";
}

namespace {
TlsOptions g_tls;
}

void set_tls_options(TlsOptions o) { g_tls = std::move(o); }

// One kept-alive connection. Exposes what the retry policy needs from Poco's session.
class Connection {
 public:
  virtual ~Connection() = default;
  virtual Poco::Net::HTTPClientSession& session() = 0;
  virtual bool mustReconnect() const = 0;  // the server answered "Connection: close"
  // Connects if not connected. Throws before a single byte of a request is written.
  virtual void open() = 0;
  // An idle kept-alive connection that is readable was closed (or reset) by the server:
  // it must not carry a request that cannot be retried. (Over TLS a readable socket may
  // also hold a session ticket; treating it as closed only costs a reconnect.)
  virtual bool peer_closed() = 0;
};

namespace {

// Session: Poco's HTTPClientSession or HTTPSClientSession.
template <class Session>
class ConnectionOf final : public Connection, public Session {
 public:
  template <class... A>
  explicit ConnectionOf(A&&... a) : Session(std::forward<A>(a)...) {
    this->setKeepAlive(true);
    this->setTimeout(Poco::Timespan(120, 0));
    // Staleness is detected by peer_closed(), not by a clock.
    this->setKeepAliveTimeout(Poco::Timespan(24 * 3600, 0));
  }
  Poco::Net::HTTPClientSession& session() override { return *this; }
  bool mustReconnect() const override { return Session::mustReconnect(); }
  void open() override {
    if (!this->connected()) this->reconnect();
  }
  bool peer_closed() override {
    return this->connected() && this->socket().poll(Poco::Timespan(0), Poco::Net::Socket::SELECT_READ);
  }
};

// The client TLS context: the server's certificate is verified against --cacert (or the
// system's CAs), and its name against the URL's host.
Poco::Net::Context::Ptr tls_context() {
  static Poco::Net::Context::Ptr ctx = [] {
    Poco::Net::initializeSSL();
    Poco::Net::Context::Params p;
    p.caLocation = g_tls.cacert;
    p.loadDefaultCAs = g_tls.cacert.empty();
    p.certificateFile = g_tls.cert;
    p.privateKeyFile = g_tls.key;
    p.verificationMode = Poco::Net::Context::VERIFY_RELAXED;
    Poco::Net::Context::Ptr c = new Poco::Net::Context(Poco::Net::Context::TLS_CLIENT_USE, p);
    c->disableProtocols(Poco::Net::Context::PROTO_SSLV2 | Poco::Net::Context::PROTO_SSLV3 |
                        Poco::Net::Context::PROTO_TLSV1 | Poco::Net::Context::PROTO_TLSV1_1);
    // An untrusted certificate fails the call (Poco would otherwise look for a handler in
    // an application configuration this tool does not have).
    Poco::Net::SSLManager::instance().initializeClient(nullptr, new Poco::Net::RejectCertificateHandler(false), c);
    return c;
  }();
  return ctx;
}

std::unique_ptr<Connection> connect_to(const Poco::URI& uri) {
  if (uri.getScheme() == "https")
    return std::make_unique<ConnectionOf<Poco::Net::HTTPSClientSession>>(uri.getHost(), uri.getPort(),
                                                                         tls_context());
  return std::make_unique<ConnectionOf<Poco::Net::HTTPClientSession>>(uri.getHost(), uri.getPort());
}

}  // namespace

std::unique_ptr<Poco::Net::HTTPClientSession> open_session(const Poco::URI& uri) {
  if (uri.getScheme() == "https")
    return std::make_unique<Poco::Net::HTTPSClientSession>(uri.getHost(), uri.getPort(), tls_context());
  return std::make_unique<Poco::Net::HTTPClientSession>(uri.getHost(), uri.getPort());
}

Client::Client(const std::string& url, std::string token) : uri_(url), token_(std::move(token)) {
  if (uri_.getScheme() != "http" && uri_.getScheme() != "https")
    usage_error("sluice", "only http:// and https:// URLs are supported, got " + url);
  if (uri_.getScheme() == "http" && (!g_tls.cacert.empty() || !g_tls.cert.empty()))
    usage_error("sluice", "--cacert, --cert and --key need an https:// URL, got " + url);
  if (g_tls.cert.empty() != g_tls.key.empty()) usage_error("sluice", "--cert and --key go together");
}

Client::~Client() = default;

namespace {
bool g_progress_open = false;
std::function<std::string()> g_failure_note;
bool g_failure_uncertain = false;  // the failed call may have taken effect

void end_progress_line() {
  if (g_progress_open) std::fputc('\n', stderr);
  g_progress_open = false;
}
[[noreturn]] void exit_failed() {
  if (g_failure_note)
    if (const std::string note = g_failure_note(); !note.empty()) std::fprintf(stderr, "sluice: %s\n", note.c_str());
  std::exit(1);
}
}  // namespace

void set_progress_line_open(bool open) { g_progress_open = open; }
bool failure_uncertain() { return g_failure_uncertain; }
void set_failure_note(std::function<std::string()> note) { g_failure_note = std::move(note); }

Response Client::call(const std::string& method, const std::string& path, const std::string& body,
                      const std::string& content_type, Replay replay) {
  // A write sent once and then lost is uncertain however the next attempt ends: a re-sent
  // sequenced publish that cannot connect does not undo the first one.
  bool sent_before = false;
  const bool reads_only = method == "GET" || method == "HEAD";
  for (int tries = 0;; ++tries) {
    Failure why;
    if (auto r = attempt(method, path, body, content_type, why)) return std::move(*r);
    end_progress_line();
    if (!why.sent && !sent_before) {
      std::fprintf(stderr, "sluice: cannot reach %s: %s (nothing was sent)\n", uri_.toString().c_str(),
                   why.message.c_str());
      exit_failed();
    }
    sent_before = sent_before || why.sent;
    const bool replay_ok = replayable(method, replay);
    if (tries == 0 && replay_ok && why.network) continue;
    if (!reads_only) {
      g_failure_uncertain = true;
      const char* resend = !replay_ok           ? ", and was not re-sent"
                           : tries > 0 && why.sent ? " (sent again once; sending it again is safe)"
                           : tries > 0            ? " (a second attempt could not connect; sending it again is safe)"
                                                  : " (sending it again is safe)";
      std::fprintf(stderr,
                   "sluice: %s %s: the connection to %s failed after the request was sent: %s; "
                   "outcome uncertain: it may or may not have taken effect%s\n",
                   method.c_str(), path.c_str(), uri_.toString().c_str(), why.message.c_str(), resend);
    } else {
      std::fprintf(stderr, "sluice: cannot reach %s: %s\n", uri_.toString().c_str(), why.message.c_str());
    }
    exit_failed();
  }
}

std::optional<Response> Client::try_get(const std::string& path, std::string* error) {
  Failure why;
  auto r = attempt("GET", path, "", "application/json", why);
  if (!r && error) *error = why.message;
  return r;
}

std::optional<Response> Client::attempt(const std::string& method, const std::string& path, const std::string& body,
                                        const std::string& content_type, Failure& why) {
  if (!conn_ || conn_->mustReconnect() || conn_->peer_closed()) conn_ = connect_to(uri_);
  try {
    conn_->open();
  } catch (const Poco::Exception& e) {
    conn_.reset();
    why = Failure{false, true, e.displayText()};
    return std::nullopt;
  }
  try {
    Poco::Net::HTTPRequest req(method, path, Poco::Net::HTTPMessage::HTTP_1_1);
    req.setKeepAlive(true);
    if (!token_.empty()) req.setCredentials("Bearer", token_);
    if (!body.empty() || method == "POST") {
      req.setContentType(content_type);
      req.setContentLength(static_cast<std::streamsize>(body.size()));
    }
    std::ostream& os = conn_->session().sendRequest(req);
    os.write(body.data(), static_cast<std::streamsize>(body.size()));
    Poco::Net::HTTPResponse res;
    std::istream& is = conn_->session().receiveResponse(res);
    Response out;
    out.status = res.getStatus();
    out.content_type = res.getContentType();
    for (const auto& [k, v] : res) out.headers.emplace_back(k, v);
    // Bounded: a misbehaving server or proxy must not exhaust this process's memory. The
    // node's largest answer, a fetch of http.fetch_max_bytes (at most 1 GiB) rendered as
    // JSON with base64 values, stays below 2 GiB.
    constexpr std::size_t kMaxAnswerBytes = std::size_t{2} << 30;
    char buf[64 * 1024];
    while (is.read(buf, sizeof buf) || is.gcount() > 0) {
      out.body.append(buf, static_cast<std::size_t>(is.gcount()));
      if (out.body.size() > kMaxAnswerBytes)
        throw Poco::ProtocolException("the answer is larger than 2 GiB; refusing to read on");
    }
    return out;
  } catch (const Poco::Exception& e) {
    conn_.reset();
    why = Failure{true, dynamic_cast<const Poco::Net::NetException*>(&e) != nullptr, e.displayText()};
    return std::nullopt;
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
  std::string code = "error", detail = r.body, outcome;
  try {
    auto v = json::parse(r.body).as_object();
    if (auto* c = v.if_contains("code")) code = json::value_to<std::string>(*c);
    if (auto* d = v.if_contains("detail")) detail = json::value_to<std::string>(*d);
    if (auto* o = v.if_contains("outcome")) outcome = json::value_to<std::string>(*o);
  } catch (...) {
  }
  end_progress_line();
  // The problem's outcome (docs/api.md "Errors"): "uncertain" means the call may have taken
  // effect; a script that read only "failed" would retry it (review finding).
  g_failure_uncertain = outcome == "uncertain";
  std::fprintf(stderr, "sluice: %d %s: %s%s\n", r.status, code.c_str(), detail.c_str(),
               g_failure_uncertain ? " (outcome uncertain: it may or may not have taken effect)" : "");
  exit_failed();
}

}  // namespace sluice::cli
