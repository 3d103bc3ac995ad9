// sluice publish | consume (docs/api.md, "Records" and "Idempotent producers").
#include <boost/json.hpp>

#include <Poco/Buffer.h>
#include <Poco/Net/HTTPClientSession.h>
#include <Poco/Net/HTTPRequest.h>
#include <Poco/Net/HTTPResponse.h>
#include <Poco/Net/NetException.h>
#include <Poco/Net/WebSocket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "command_line.h"
#include "commands.h"

namespace json = boost::json;

namespace sluice::cli {
namespace {

const Usage kPublish{"publish",
                     R"(Usage: sluice publish TENANT/NS/STREAM [--key KEY] [--ack none|leader] [--batch N] [--quiet]
                      [--producer-id ID --sequence S]

Reads standard input and publishes each line (without its newline) as one record,
N lines (and at most 1 MiB) per request (default 500 lines), over the binary batch API. With --key every record
gets KEY (so all land on one shard, in order). Prints progress and a summary on stderr.

With --producer-id the publish is idempotent: request k carries sequence S+k, so a
retried request is answered with its original offsets instead of being written twice.
--sequence is required: the first run of a producer starts at 0, a later run where the
last one ended (the node answers a sequence it has seen as a duplicate and writes nothing,
so a second run from 0 would drop its input). Every request must then land on one shard: give --key, or use a
one-shard stream.

After a network error only a publish with --producer-id is sent again; without it the
error says "outcome uncertain": the request may or may not have been written.
)"};

const Usage kConsume{"consume", R"(Usage: sluice consume TENANT/NS/STREAM [--shard N] [--from earliest|latest|OFFSET]
                      [--follow] [--max N] [--offsets]

Prints each record's value on its own line. Without --shard, reads every shard in turn.
--from defaults to earliest. --max stops after N records. --offsets prefixes
"shard offset " to each line.

--follow keeps printing new records until interrupted (Ctrl-C) or --max: it subscribes
to each shard over a WebSocket (GET .../shards/N/subscribe, docs/api.md "Subscribe"), so
records arrive as soon as they are visible, in offset order per shard, and it grants the
server credit for each batch it has printed. If the server closes a subscription (the
shard's stream deleted, a slow consumer, ...) it prints the close code and reason and
exits 1.
)"};

volatile std::sig_atomic_t g_stop = 0;

// A publish request is sent once it holds --batch lines or this many bytes.
constexpr std::size_t kMaxRequestBytes = 1 << 20;

void put_u32(std::string& out, std::uint32_t v) {
  char b[4];
  std::memcpy(b, &v, 4);
  out.append(b, 4);
}

}  // namespace

int cmd_publish(Client& c, const Words& words) {
  Args a(kPublish, words,
         {.values = {"key", "ack", "batch", "producer-id", "sequence"}, .flags = {"quiet"}, .min_args = 1, .max_args = 1});
  StreamPath p = parse_stream(kPublish, a.pos()[0]);
  const std::uint64_t batch = std::max<std::uint64_t>(1, a.get_u64("batch", 500));
  if (a.has("sequence") && !a.has("producer-id")) a.error("--sequence needs --producer-id");
  if (a.has("producer-id") && !a.has("sequence"))
    a.error("--producer-id needs --sequence (0 for the producer's first run; a run from a sequence the node "
            "has seen is answered with the original offsets and writes nothing)");
  std::string query;
  auto add_param = [&](const std::string& k, const std::string& v) {
    query += (query.empty() ? "?" : "&") + k + "=" + v;
  };
  if (a.has("ack")) add_param("ack", a.get("ack"));
  const bool idempotent = a.has("producer-id");
  std::uint64_t sequence = a.get_u64("sequence", 0);
  if (idempotent) add_param("producer_id", std::to_string(a.get_u64("producer-id", 0)));
  const std::string path = p.path() + "/records" + query;
  const bool has_key = a.has("key");
  const std::string key = a.get("key");
  const bool quiet = a.has("quiet");
  std::string body;
  std::uint64_t in_body = 0, total = 0, requests = 0;
  auto t0 = std::chrono::steady_clock::now();
  // A failed request ends the command (exit 1); this says how far it got, so the operator
  // knows which lines to send again (and, with --producer-id, from which sequence).
  set_failure_note([&] {
    std::string note = total == 0 ? std::string("no record was acknowledged")
                                  : std::to_string(total) + " record(s) (input lines 1.." + std::to_string(total) +
                                        ") were acknowledged in " + std::to_string(requests) + " request(s)";
    note += "; the request with input lines " + std::to_string(total + 1) + ".." + std::to_string(total + in_body);
    if (idempotent) note += " (sequence " + std::to_string(sequence) + ")";
    if (failure_uncertain())
      return note + " may or may not have been written (outcome uncertain), and nothing after it was sent";
    return note + " failed, and nothing after it was sent";
  });
  auto flush = [&] {
    if (!in_body) return;
    const std::string target =
        idempotent ? path + (query.empty() ? "?" : "&") + "sequence=" + std::to_string(sequence) : path;
    // Only a sequenced publish may be re-sent: the server answers a repeat with the
    // original offsets instead of writing it twice.
    c.call_ok("POST", target, body, "application/vnd.sluice.batch", idempotent ? Replay::safe : Replay::by_method);
    ++sequence;
    total += in_body;
    ++requests;
    body.clear();
    in_body = 0;
    if (!quiet && requests % 20 == 0) {
      std::fprintf(stderr, "\rpublished %llu records", (unsigned long long)total);
      set_progress_line_open(true);
    }
  };
  std::string line;
  while (std::getline(std::cin, line)) {
    put_u32(body, has_key ? static_cast<std::uint32_t>(key.size()) : 0xffffffffu);
    put_u32(body, static_cast<std::uint32_t>(line.size()));
    if (has_key) body += key;
    body += line;
    // Bounded by bytes too, well under the server's http.max_body_bytes (8 MiB by default).
    if (++in_body >= batch || body.size() >= kMaxRequestBytes) flush();
  }
  flush();
  set_failure_note(nullptr);
  set_progress_line_open(false);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!quiet)
    std::fprintf(stderr, "\rpublished %llu records in %llu requests (%.1f s, %.0f records/s)\n",
                 (unsigned long long)total, (unsigned long long)requests, secs, secs > 0 ? total / secs : 0.0);
  return 0;
}

namespace {

// One record as consume prints it.
void print_record(std::ostream& out, std::uint32_t shard, const json::object& r, bool offsets) {
  if (offsets) out << shard << " " << r.at("offset").to_number<std::uint64_t>() << " ";
  if (auto* v = r.if_contains("value")) out << json::value_to<std::string>(*v);
  else if (auto* b = r.if_contains("value_base64")) out << "base64:" << json::value_to<std::string>(*b);
  out << "\n";
}

// What the subscriptions of one `consume --follow` share.
struct Follow {
  std::mutex mu;  // stdout and `printed`
  std::uint64_t printed = 0;
  std::uint64_t max = UINT64_MAX;
  bool offsets = false;
  std::atomic<int> failed{0};
  bool done() {
    std::lock_guard lk(mu);
    return printed >= max || g_stop || failed;
  }
};

void follow_frames(Poco::Net::WebSocket& ws, std::uint32_t shard, Follow& f);

// Follows one shard over a WebSocket subscription until interrupted or --max. A refused
// upgrade is explained by the same GET without the upgrade: its problem details.
void follow_shard(const std::string& url, const std::string& token, const std::string& shard_path,
                  std::uint32_t shard, const std::string& from, Follow& f) {
  namespace pn = Poco::Net;
  const Poco::URI uri(url);
  const std::string target = shard_path + "/subscribe?format=json&credit=1000&offset=" + from;
  auto session = open_session(uri);
  pn::HTTPRequest req(pn::HTTPRequest::HTTP_GET, target, pn::HTTPMessage::HTTP_1_1);
  if (!token.empty()) req.setCredentials("Bearer", token);  // checked before the upgrade
  pn::HTTPResponse res;
  std::unique_ptr<pn::WebSocket> ws;
  try {
    ws = std::make_unique<pn::WebSocket>(*session, req, res);
  } catch (const Poco::Exception& e) {
    Client plain(url, token);
    Response r = plain.call("GET", target);
    if (r.status >= 300) Client::fail(r);
    std::fprintf(stderr, "sluice: shard %u: cannot subscribe: %s\n", shard, e.displayText().c_str());
    std::exit(1);
  }
  ws->setReceiveTimeout(Poco::Timespan(120, 0));  // a frame that started arrives whole
  // Anything this thread cannot go on from (a reset while answering a ping or granting
  // credit, a frame that is not the JSON it should be) ends this shard's follow with a
  // message and exit 1, never std::terminate.
  try {
    follow_frames(*ws, shard, f);
  } catch (const Poco::Exception& e) {
    std::fprintf(stderr, "sluice: shard %u: subscription lost: %s\n", shard, e.displayText().c_str());
    f.failed = 1;
    return;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice: shard %u: subscription lost: %s\n", shard, e.what());
    f.failed = 1;
    return;
  }
  try {
    ws->shutdown();  // close 1000
  } catch (const Poco::Exception&) {
  }
}

void follow_frames(Poco::Net::WebSocket& socket, std::uint32_t shard, Follow& f) {
  namespace pn = Poco::Net;
  pn::WebSocket* ws = &socket;
  Poco::Buffer<char> buf(0);
  while (!f.done()) {
    if (!ws->poll(Poco::Timespan(0, 300000), pn::Socket::SELECT_READ)) continue;
    int flags = 0;
    buf.resize(0);
    const int n = ws->receiveFrame(buf, flags);
    const int op = flags & pn::WebSocket::FRAME_OP_BITMASK;
    if (op == pn::WebSocket::FRAME_OP_PING) {
      ws->sendFrame(buf.begin(), n, static_cast<int>(pn::WebSocket::FRAME_FLAG_FIN) | static_cast<int>(pn::WebSocket::FRAME_OP_PONG));
      continue;
    }
    if (op == pn::WebSocket::FRAME_OP_CLOSE || (n == 0 && flags == 0)) {
      const unsigned code = n >= 2 ? (static_cast<unsigned char>(buf[0]) << 8) | static_cast<unsigned char>(buf[1]) : 1005;
      const std::string reason = n > 2 ? std::string(buf.begin() + 2, n - 2) : "";
      std::fprintf(stderr, "sluice: shard %u: the server closed the subscription: %u %s\n", shard, code, reason.c_str());
      f.failed = 1;
      return;
    }
    if (op != pn::WebSocket::FRAME_OP_TEXT) continue;
    auto page = json::parse(std::string_view(buf.begin(), static_cast<std::size_t>(n))).as_object();
    std::uint64_t got = 0;
    {
      std::lock_guard lk(f.mu);
      for (auto& rv : page.at("records").as_array()) {
        if (f.printed >= f.max) break;
        print_record(std::cout, shard, rv.as_object(), f.offsets);
        ++f.printed;
        ++got;
      }
      std::cout.flush();
    }
    if (got) {
      const std::string credit = "{\"credit\": " + std::to_string(got) + "}";
      ws->sendFrame(credit.data(), static_cast<int>(credit.size()), pn::WebSocket::FRAME_TEXT);
    }
  }
}

}  // namespace

int cmd_consume(Client& c, const Words& words) {
  Args a(kConsume, words,
         {.values = {"shard", "from", "max"}, .flags = {"follow", "offsets"}, .min_args = 1, .max_args = 1});
  StreamPath p = parse_stream(kConsume, a.pos()[0]);
  const bool follow = a.has("follow"), offsets = a.has("offsets");
  const std::uint64_t max = a.get_u64("max", UINT64_MAX);
  const std::string from = a.get("from", "earliest");
  if (from != "earliest" && from != "latest") parse_u64(kConsume, "--from", from);
  std::vector<std::uint32_t> shard_list;
  if (a.has("shard")) {
    const std::uint64_t shard = a.get_u64("shard", 0);
    if (shard > UINT32_MAX) a.error("--shard must be at most " + std::to_string(UINT32_MAX));
    shard_list.push_back(static_cast<std::uint32_t>(shard));
  } else {
    auto info = c.call_ok("GET", p.path()).as_object();
    auto n = info.at("shards").to_number<std::uint32_t>();
    for (std::uint32_t i = 0; i < n; ++i) shard_list.push_back(i);
  }
  std::signal(SIGINT, [](int) { g_stop = 1; });
  if (follow) {
    Follow f;
    f.max = max;
    f.offsets = offsets;
    std::vector<std::thread> threads;
    const std::string url = c.uri().toString();
    for (auto s : shard_list)
      threads.emplace_back(follow_shard, url, c.token(), p.path() + "/shards/" + std::to_string(s), s, from, std::ref(f));
    for (auto& t : threads) t.join();
    return f.failed ? 1 : 0;
  }
  std::vector<std::string> pos(shard_list.size(), from);
  std::uint64_t printed = 0;
  while (!g_stop && printed < max) {
    bool any = false;
    for (std::size_t i = 0; i < shard_list.size() && printed < max && !g_stop; ++i) {
      std::string q = p.path() + "/shards/" + std::to_string(shard_list[i]) + "/records?offset=" + pos[i] +
                      "&max=" + std::to_string(std::min<std::uint64_t>(1000, max - printed));
      auto res = c.call_ok("GET", q).as_object();
      for (auto& rv : res.at("records").as_array()) {
        print_record(std::cout, shard_list[i], rv.as_object(), offsets);
        ++printed;
        any = true;
      }
      pos[i] = std::to_string(res.at("next_offset").to_number<std::uint64_t>());
    }
    std::cout.flush();
    if (!any) break;
  }
  return 0;
}

}  // namespace sluice::cli
