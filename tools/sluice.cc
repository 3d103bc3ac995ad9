// sluice: the command-line client, over the REST API (ARCHITECTURE.md §8).
//
// Every command answers --help. Errors from the server are printed as
// "sluice: <status> <code>: <detail>" and exit 1; usage errors exit 2.
#include <Poco/Net/HTTPClientSession.h>
#include <Poco/Net/HTTPRequest.h>
#include <Poco/Net/HTTPResponse.h>
#include <Poco/Net/NetException.h>
#include <Poco/Net/Socket.h>
#include <Poco/URI.h>

#include <boost/json.hpp>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace json = boost::json;

namespace {

constexpr const char* kMainHelp = R"(Usage: sluice [--url URL] COMMAND [ARGS]

Talks to a Sluice node over HTTP. URL defaults to $SLUICE_URL, else http://127.0.0.1:8080.
A stream is named TENANT/NAMESPACE/STREAM.

Commands:
  cluster                         show the cluster id, backend, node and roles
  tenant create|list|delete       manage tenants
  namespace create|list|delete    manage namespaces
  stream create|list|get|delete   manage streams
  shards STREAM                   show a stream's shards (incarnation, high watermark, ...)
  publish STREAM                  publish lines from standard input, one record per line
  consume STREAM                  print records to standard output
  group consume|ack|positions     consumer groups: at-least-once delivery with acks
  dead-letters list|replay        a group's dead letters
  feature list|finalize NAME      fleet features (finalizing is one-way)
  brokers                         registered brokers and their features
  tombstones                      deleted names and the incarnations they cover
  members list|remove ID          metadata members (raft-meta): role, level, held, state

Run `sluice COMMAND --help` for a command's options.
)";

struct Response {
  int status = 0;
  std::string body;
  std::string content_type;
};

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "sluice: %s (see --help)\n", msg.c_str());
  std::exit(2);
}

// Whether a call may be sent again after the connection failed (docs/api.md, "Errors").
//   by_method  GET, HEAD, PUT and DELETE are idempotent; any other method is not, and is
//              never re-sent once its request may have been written.
//   safe       a POST the API documents as idempotent: a publish carrying producer_id and
//              sequence (docs/api.md, "Idempotent producers") or a feature finalize.
enum class Replay { by_method, safe };

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
  // An idle kept-alive connection that is readable was closed (or reset) by the server.
  bool peer_closed() {
    return connected() && socket().poll(Poco::Timespan(0), Poco::Net::Socket::SELECT_READ);
  }
};

class Client {
 public:
  explicit Client(const std::string& url) : uri_(url) {
    if (uri_.getScheme() != "http") usage_error("only http:// URLs are supported, got " + url);
  }

  // Sends one request. A network error after the request may have been written is retried
  // once, on a fresh connection, only when the call is replayable(); otherwise the
  // outcome is uncertain and sluice exits 1 saying so, without sending it again.
  Response call(const std::string& method, const std::string& path, const std::string& body = "",
                const std::string& content_type = "application/json", Replay replay = Replay::by_method) {
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
          std::fprintf(stderr, "sluice: cannot reach %s: %s\n", uri_.toString().c_str(),
                       e.displayText().c_str());
        }
        std::exit(1);
      }
    }
  }

  // Calls and exits with the server's problem details on a non-2xx answer.
  json::value call_ok(const std::string& method, const std::string& path, const std::string& body = "",
                      const std::string& content_type = "application/json", Replay replay = Replay::by_method) {
    Response r = call(method, path, body, content_type, replay);
    if (r.status < 200 || r.status > 299) fail(r);
    if (r.body.empty()) return nullptr;
    return json::parse(r.body);
  }

  [[noreturn]] static void fail(const Response& r) {
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

 private:
  Poco::URI uri_;
  std::unique_ptr<Connection> conn_;
};

struct StreamPath {
  std::string tenant, ns, name;
  std::string ns_path() const { return "/v1/tenants/" + tenant + "/namespaces/" + ns; }
  std::string path() const { return ns_path() + "/streams/" + name; }
};

StreamPath parse_stream(const std::string& s) {
  StreamPath p;
  auto a = s.find('/');
  auto b = a == std::string::npos ? a : s.find('/', a + 1);
  if (a == std::string::npos || b == std::string::npos || s.find('/', b + 1) != std::string::npos)
    usage_error("a stream is TENANT/NAMESPACE/STREAM, got '" + s + "'");
  p.tenant = s.substr(0, a);
  p.ns = s.substr(a + 1, b - a - 1);
  p.name = s.substr(b + 1);
  return p;
}

// Tiny option parser: --name value, --flag, and positionals, per command.
struct Args {
  std::vector<std::string> pos;
  std::map<std::string, std::string> opt;
  bool has(const std::string& k) const { return opt.count(k) > 0; }
  std::string get(const std::string& k, const std::string& d = "") const {
    auto it = opt.find(k);
    return it == opt.end() ? d : it->second;
  }
};

Args parse_args(int argc, char** argv, int from, const std::vector<std::string>& flags) {
  Args a;
  for (int i = from; i < argc; ++i) {
    std::string s = argv[i];
    if (s.starts_with("--")) {
      std::string k = s.substr(2), v;
      if (auto eq = k.find('='); eq != std::string::npos) {
        v = k.substr(eq + 1);
        k = k.substr(0, eq);
      } else if (std::find(flags.begin(), flags.end(), k) == flags.end() && k != "help") {
        if (i + 1 >= argc) usage_error("--" + k + " needs a value");
        v = argv[++i];
      }
      a.opt[k] = v;
    } else {
      a.pos.push_back(s);
    }
  }
  return a;
}

void print_json(const json::value& v) { std::cout << json::serialize(v) << "\n"; }

std::uint64_t parse_u64(const std::string& what, const std::string& s) {
  try {
    std::size_t n = 0;
    auto v = std::stoull(s, &n);
    if (n != s.size()) throw std::invalid_argument(s);
    return v;
  } catch (...) {
    usage_error(what + " must be a non-negative integer, got '" + s + "'");
  }
}

void put_u32(std::string& out, std::uint32_t v) {
  char b[4];
  std::memcpy(b, &v, 4);
  out.append(b, 4);
}

// Creates tenant and namespace if missing (409 = already there).
void ensure_parents(Client& c, const StreamPath& p) {
  json::object t{{"name", p.tenant}};
  auto r = c.call("POST", "/v1/tenants", json::serialize(t));
  if (r.status != 201 && r.status != 409) Client::fail(r);
  json::object n{{"name", p.ns}};
  r = c.call("POST", "/v1/tenants/" + p.tenant + "/namespaces", json::serialize(n));
  if (r.status != 201 && r.status != 409) Client::fail(r);
}

int cmd_tenant(Client& c, int argc, char** argv) {
  Args a = parse_args(argc, argv, 2, {});
  if (a.has("help") || a.pos.empty()) {
    std::puts("Usage: sluice tenant create NAME | list | delete NAME");
    return a.has("help") ? 0 : 2;
  }
  const auto& op = a.pos[0];
  if (op == "list") {
    print_json(c.call_ok("GET", "/v1/tenants"));
  } else if (op == "create" && a.pos.size() == 2) {
    print_json(c.call_ok("POST", "/v1/tenants", json::serialize(json::object{{"name", a.pos[1]}})));
  } else if (op == "delete" && a.pos.size() == 2) {
    c.call_ok("DELETE", "/v1/tenants/" + a.pos[1]);
  } else {
    usage_error("tenant: expected create NAME, list, or delete NAME");
  }
  return 0;
}

int cmd_namespace(Client& c, int argc, char** argv) {
  Args a = parse_args(argc, argv, 2, {});
  if (a.has("help") || a.pos.size() < 2) {
    std::puts("Usage: sluice namespace create TENANT NAME | list TENANT | delete TENANT NAME");
    return a.has("help") ? 0 : 2;
  }
  const auto& op = a.pos[0];
  const std::string base = "/v1/tenants/" + a.pos[1] + "/namespaces";
  if (op == "list") {
    print_json(c.call_ok("GET", base));
  } else if (op == "create" && a.pos.size() == 3) {
    print_json(c.call_ok("POST", base, json::serialize(json::object{{"name", a.pos[2]}})));
  } else if (op == "delete" && a.pos.size() == 3) {
    c.call_ok("DELETE", base + "/" + a.pos[2]);
  } else {
    usage_error("namespace: expected create TENANT NAME, list TENANT, or delete TENANT NAME");
  }
  return 0;
}

int cmd_stream(Client& c, int argc, char** argv) {
  Args a = parse_args(argc, argv, 2, {"no-create-parents"});
  if (a.has("help") || a.pos.size() < 2) {
    std::puts(R"(Usage: sluice stream create TENANT/NS/STREAM [--shards N] [--ack none|leader]
                          [--retention-bytes B] [--retention-ms MS] [--no-create-parents]
       sluice stream list TENANT/NS
       sluice stream get TENANT/NS/STREAM
       sluice stream delete TENANT/NS/STREAM

create makes the tenant and namespace first if they do not exist, unless
--no-create-parents is given.)");
    return a.has("help") ? 0 : 2;
  }
  const auto& op = a.pos[0];
  if (op == "list") {
    auto slash = a.pos[1].find('/');
    if (slash == std::string::npos) usage_error("stream list expects TENANT/NAMESPACE");
    print_json(c.call_ok("GET", "/v1/tenants/" + a.pos[1].substr(0, slash) + "/namespaces/" +
                                    a.pos[1].substr(slash + 1) + "/streams"));
    return 0;
  }
  StreamPath p = parse_stream(a.pos[1]);
  if (op == "create") {
    json::object body{{"name", p.name}};
    body["shards"] = parse_u64("--shards", a.get("shards", "1"));
    if (a.has("ack")) body["ack"] = a.get("ack");
    json::object ret;
    if (a.has("retention-bytes")) ret["max_bytes"] = parse_u64("--retention-bytes", a.get("retention-bytes"));
    if (a.has("retention-ms")) ret["max_age_ms"] = parse_u64("--retention-ms", a.get("retention-ms"));
    if (!ret.empty()) body["retention"] = ret;
    if (!a.has("no-create-parents")) ensure_parents(c, p);
    print_json(c.call_ok("POST", p.ns_path() + "/streams", json::serialize(body)));
  } else if (op == "get") {
    print_json(c.call_ok("GET", p.path()));
  } else if (op == "delete") {
    print_json(c.call_ok("DELETE", p.path()));
  } else {
    usage_error("stream: unknown operation '" + op + "'");
  }
  return 0;
}

int cmd_shards(Client& c, int argc, char** argv) {
  Args a = parse_args(argc, argv, 2, {});
  if (a.has("help") || a.pos.size() != 1) {
    std::puts("Usage: sluice shards TENANT/NS/STREAM");
    return a.has("help") ? 0 : 2;
  }
  print_json(c.call_ok("GET", parse_stream(a.pos[0]).path() + "/shards"));
  return 0;
}

int cmd_publish(Client& c, int argc, char** argv) {
  Args a = parse_args(argc, argv, 2, {"quiet"});
  if (a.has("help") || a.pos.size() != 1) {
    std::puts(R"(Usage: sluice publish TENANT/NS/STREAM [--key KEY] [--ack none|leader] [--batch N] [--quiet]
                      [--producer-id ID [--sequence S]]

Reads standard input and publishes each line (without its newline) as one record,
N lines per request (default 500), over the binary batch API. With --key every record
gets KEY (so all land on one shard, in order). Prints progress and a summary on stderr.

With --producer-id the publish is idempotent: request k carries sequence S+k (S defaults
to 0), so a retried request is answered with its original offsets instead of being
written twice. Every request must then land on one shard: give --key, or use a
one-shard stream.)");
    return a.has("help") ? 0 : 2;
  }
  StreamPath p = parse_stream(a.pos[0]);
  const std::uint64_t batch = std::max<std::uint64_t>(1, parse_u64("--batch", a.get("batch", "500")));
  std::string query;
  auto add_param = [&](const std::string& k, const std::string& v) {
    query += (query.empty() ? "?" : "&") + k + "=" + v;
  };
  if (a.has("ack")) add_param("ack", a.get("ack"));
  const bool idempotent = a.has("producer-id");
  std::uint64_t sequence = idempotent ? parse_u64("--sequence", a.get("sequence", "0")) : 0;
  if (idempotent) {
    parse_u64("--producer-id", a.get("producer-id"));
    add_param("producer_id", a.get("producer-id"));
  }
  const std::string path = p.path() + "/records" + query;
  const bool has_key = a.has("key");
  const std::string key = a.get("key");
  const bool quiet = a.has("quiet");
  std::string body;
  std::uint64_t in_body = 0, total = 0, requests = 0;
  auto t0 = std::chrono::steady_clock::now();
  auto flush = [&] {
    if (!in_body) return;
    const std::string target =
        idempotent ? path + (query.empty() ? "?" : "&") + "sequence=" + std::to_string(sequence++) : path;
    // Only a sequenced publish may be re-sent: the server answers a repeat with the
    // original offsets instead of writing it twice (docs/api.md, "Idempotent producers").
    c.call_ok("POST", target, body, "application/vnd.sluice.batch", idempotent ? Replay::safe : Replay::by_method);
    total += in_body;
    ++requests;
    body.clear();
    in_body = 0;
    if (!quiet && requests % 20 == 0) std::fprintf(stderr, "\rpublished %llu records", (unsigned long long)total);
  };
  std::string line;
  while (std::getline(std::cin, line)) {
    put_u32(body, has_key ? static_cast<std::uint32_t>(key.size()) : 0xffffffffu);
    put_u32(body, static_cast<std::uint32_t>(line.size()));
    if (has_key) body += key;
    body += line;
    if (++in_body >= batch) flush();
  }
  flush();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!quiet)
    std::fprintf(stderr, "\rpublished %llu records in %llu requests (%.1f s, %.0f records/s)\n",
                 (unsigned long long)total, (unsigned long long)requests, secs,
                 secs > 0 ? total / secs : 0.0);
  return 0;
}

volatile std::sig_atomic_t g_stop = 0;

int cmd_consume(Client& c, int argc, char** argv) {
  Args a = parse_args(argc, argv, 2, {"follow", "offsets"});
  if (a.has("help") || a.pos.size() != 1) {
    std::puts(R"(Usage: sluice consume TENANT/NS/STREAM [--shard N] [--from earliest|latest|OFFSET]
                      [--follow] [--max N] [--offsets]

Prints each record's value on its own line. Without --shard, reads every shard in turn.
--from defaults to earliest. --follow keeps waiting for new records (long poll) until
interrupted. --max stops after N records. --offsets prefixes "shard offset " to each line.)");
    return a.has("help") ? 0 : 2;
  }
  StreamPath p = parse_stream(a.pos[0]);
  const bool follow = a.has("follow"), offsets = a.has("offsets");
  const std::uint64_t max = a.has("max") ? parse_u64("--max", a.get("max")) : UINT64_MAX;
  const std::string from = a.get("from", "earliest");
  if (from != "earliest" && from != "latest") parse_u64("--from", from);
  std::vector<std::uint32_t> shard_list;
  if (a.has("shard")) {
    shard_list.push_back(static_cast<std::uint32_t>(parse_u64("--shard", a.get("shard"))));
  } else {
    auto info = c.call_ok("GET", p.path()).as_object();
    auto n = info.at("shards").to_number<std::uint32_t>();
    for (std::uint32_t i = 0; i < n; ++i) shard_list.push_back(i);
  }
  std::signal(SIGINT, [](int) { g_stop = 1; });
  std::vector<std::string> pos(shard_list.size(), from);
  std::uint64_t printed = 0;
  const int wait_ms = shard_list.size() == 1 ? 10000 : 500;
  while (!g_stop && printed < max) {
    bool any = false;
    for (std::size_t i = 0; i < shard_list.size() && printed < max && !g_stop; ++i) {
      std::string q = p.path() + "/shards/" + std::to_string(shard_list[i]) + "/records?offset=" + pos[i] +
                      "&max=" + std::to_string(std::min<std::uint64_t>(1000, max - printed)) +
                      (follow ? "&wait_ms=" + std::to_string(wait_ms) : "");
      auto res = c.call_ok("GET", q).as_object();
      for (auto& rv : res.at("records").as_array()) {
        auto& r = rv.as_object();
        if (offsets) std::cout << shard_list[i] << " " << r.at("offset").to_number<std::uint64_t>() << " ";
        if (auto* v = r.if_contains("value")) std::cout << json::value_to<std::string>(*v);
        else if (auto* b = r.if_contains("value_base64")) std::cout << "base64:" << json::value_to<std::string>(*b);
        std::cout << "\n";
        ++printed;
        any = true;
      }
      pos[i] = std::to_string(res.at("next_offset").to_number<std::uint64_t>());
    }
    std::cout.flush();
    if (!follow && !any) break;
  }
  return 0;
}

int cmd_feature(Client& c, int argc, char** argv) {
  Args a = parse_args(argc, argv, 2, {});
  if (a.has("help") || a.pos.empty()) {
    std::puts(R"(Usage: sluice feature list
       sluice feature finalize NAME

Finalizing is one-way. The control plane refuses it (409, with the reason) while a
metadata member is below the feature's level or a serving broker lacks it; see
docs/upgrades.md before finalizing stream_incarnations.)");
    return a.has("help") ? 0 : 2;
  }
  if (a.pos[0] == "list") print_json(c.call_ok("GET", "/v1/features"));
  else if (a.pos[0] == "finalize" && a.pos.size() == 2)
    print_json(c.call_ok("POST", "/v1/features/" + a.pos[1] + "/finalize", "{}", "application/json",
                         Replay::safe));  // idempotent: docs/api.md, "Fleet"
  else usage_error("feature: expected list or finalize NAME");
  return 0;
}

int cmd_members(Client& c, int argc, char** argv) {
  Args a = parse_args(argc, argv, 2, {});
  if (a.has("help") || a.pos.empty()) {
    std::puts(R"(Usage: sluice members list
       sluice members remove ID

list shows every metadata member with its role, metadata level, held state, applied index
and state hash, and the group's level and level floor. remove takes a member out of the
Raft group (stop its process afterwards); the last voter cannot be removed. Members join
by starting with metadata.join; see docs/upgrades.md.)");
    return a.has("help") ? 0 : 2;
  }
  if (a.pos[0] == "list" && a.pos.size() == 1) {
    print_json(c.call_ok("GET", "/v1/metadata/members"));
  } else if (a.pos[0] == "remove" && a.pos.size() == 2) {
    c.call_ok("DELETE", "/v1/metadata/members/" + std::to_string(parse_u64("member id", a.pos[1])));
    std::printf("member %s removed\n", a.pos[1].c_str());
  } else {
    usage_error("members: expected list or remove ID");
  }
  return 0;
}

int cmd_simple_get(Client& c, int argc, char** argv, const char* path, const char* usage) {
  Args a = parse_args(argc, argv, 2, {});
  if (a.has("help")) {
    std::puts(usage);
    return 0;
  }
  print_json(c.call_ok("GET", path));
  return 0;
}

std::string offsets_json(const std::vector<std::string>& offs, std::size_t from) {
  json::array arr;
  for (std::size_t i = from; i < offs.size(); ++i) arr.push_back(parse_u64("offset", offs[i]));
  return json::serialize(json::object{{"offsets", arr}});
}

int cmd_group(Client& c, int argc, char** argv) {
  Args a = parse_args(argc, argv, 2, {"ack", "follow"});
  if (a.has("help") || a.pos.size() < 3) {
    std::puts(R"(Usage: sluice group consume TENANT/NS/STREAM GROUP --shard N [--max N] [--ack]
                           [--follow] [--max-deliveries N] [--ack-timeout-ms MS]
       sluice group ack  TENANT/NS/STREAM GROUP --shard N OFFSET...
       sluice group nack TENANT/NS/STREAM GROUP --shard N OFFSET...
       sluice group positions TENANT/NS/STREAM GROUP

consume prints "offset delivery value" per record. With --ack it acknowledges each batch
after printing it; without, records are redelivered after the ack timeout.)");
    return a.has("help") ? 0 : 2;
  }
  const std::string op = a.pos[0];
  StreamPath p = parse_stream(a.pos[1]);
  const std::string base = p.path() + "/groups/" + a.pos[2];
  if (op == "positions") {
    print_json(c.call_ok("GET", base));
    return 0;
  }
  if (!a.has("shard")) usage_error("group " + op + " needs --shard N");
  const std::string shard_base = base + "/shards/" + std::to_string(parse_u64("--shard", a.get("shard")));
  if (op == "ack" || op == "nack") {
    if (a.pos.size() < 4) usage_error("group " + op + " needs at least one offset");
    c.call_ok("POST", shard_base + "/" + op, offsets_json(a.pos, 3));
    return 0;
  }
  if (op != "consume") usage_error("group: unknown operation '" + op + "'");
  std::string q = shard_base + "/records?max=" + a.get("max", "100");
  if (a.has("max-deliveries")) q += "&max_deliveries=" + a.get("max-deliveries");
  if (a.has("ack-timeout-ms")) q += "&ack_timeout_ms=" + a.get("ack-timeout-ms");
  if (a.has("follow")) q += "&wait_ms=10000";
  std::signal(SIGINT, [](int) { g_stop = 1; });
  do {
    auto res = c.call_ok("GET", q).as_object();
    std::vector<std::string> offs;
    for (auto& rv : res.at("records").as_array()) {
      auto& r = rv.as_object();
      const auto off = r.at("offset").to_number<std::uint64_t>();
      std::cout << off << " " << r.at("delivery").to_number<std::uint64_t>() << " ";
      if (auto* v = r.if_contains("value")) std::cout << json::value_to<std::string>(*v);
      else if (auto* b = r.if_contains("value_base64")) std::cout << "base64:" << json::value_to<std::string>(*b);
      std::cout << "\n";
      offs.push_back(std::to_string(off));
    }
    std::cout.flush();
    if (a.has("ack") && !offs.empty()) c.call_ok("POST", shard_base + "/ack", offsets_json(offs, 0));
    if (!a.has("follow") && offs.empty()) break;
    if (!a.has("follow")) break;
  } while (!g_stop);
  return 0;
}

int cmd_dead_letters(Client& c, int argc, char** argv) {
  Args a = parse_args(argc, argv, 2, {});
  if (a.has("help") || a.pos.size() < 3 || !a.has("shard")) {
    std::puts(R"(Usage: sluice dead-letters list   TENANT/NS/STREAM GROUP --shard N [--from OFFSET]
       sluice dead-letters replay TENANT/NS/STREAM GROUP --shard N --from A --to B

replay publishes dead letters [A, B) to the stream again, as new records.)");
    return a.has("help") ? 0 : 2;
  }
  StreamPath p = parse_stream(a.pos[1]);
  const std::string base = p.path() + "/groups/" + a.pos[2] + "/shards/" +
                           std::to_string(parse_u64("--shard", a.get("shard"))) + "/dead-letters";
  if (a.pos[0] == "list") {
    print_json(c.call_ok("GET", base + "?offset=" + std::to_string(parse_u64("--from", a.get("from", "0")))));
  } else if (a.pos[0] == "replay") {
    json::object body{{"from", parse_u64("--from", a.get("from"))}, {"to", parse_u64("--to", a.get("to"))}};
    print_json(c.call_ok("POST", base + "/replay", json::serialize(body)));
  } else {
    usage_error("dead-letters: expected list or replay");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string url = std::getenv("SLUICE_URL") ? std::getenv("SLUICE_URL") : "http://127.0.0.1:8080";
  int i = 1;
  for (; i < argc; ++i) {
    std::string s = argv[i];
    if (s == "--url" && i + 1 < argc) url = argv[++i];
    else if (s.starts_with("--url=")) url = s.substr(6);
    else if (s == "-h" || s == "--help") { std::fputs(kMainHelp, stdout); return 0; }
    else break;
  }
  if (i >= argc) {
    std::fputs(kMainHelp, stderr);
    return 2;
  }
  // Shift so that argv[1] is the command.
  argv += i - 1;
  argc -= i - 1;
  const std::string cmd = argv[1];
  Client c(url);
  try {
    if (cmd == "cluster") {
      Args a = parse_args(argc, argv, 2, {});
      if (a.has("help")) { std::puts("Usage: sluice cluster"); return 0; }
      print_json(c.call_ok("GET", "/v1/cluster"));
      return 0;
    }
    if (cmd == "tenant") return cmd_tenant(c, argc, argv);
    if (cmd == "namespace" || cmd == "ns") return cmd_namespace(c, argc, argv);
    if (cmd == "stream") return cmd_stream(c, argc, argv);
    if (cmd == "shards") return cmd_shards(c, argc, argv);
    if (cmd == "publish") return cmd_publish(c, argc, argv);
    if (cmd == "consume") return cmd_consume(c, argc, argv);
    if (cmd == "feature") return cmd_feature(c, argc, argv);
    if (cmd == "group") return cmd_group(c, argc, argv);
    if (cmd == "members") return cmd_members(c, argc, argv);
    if (cmd == "dead-letters") return cmd_dead_letters(c, argc, argv);
    if (cmd == "brokers")
      return cmd_simple_get(c, argc, argv, "/v1/brokers", "Usage: sluice brokers");
    if (cmd == "tombstones")
      return cmd_simple_get(c, argc, argv, "/v1/tombstones", "Usage: sluice tombstones");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice: unexpected answer from the server: %s\n", e.what());
    return 1;
  }
  usage_error("unknown command '" + cmd + "'");
}
