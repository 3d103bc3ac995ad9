// sluice counter (docs/api.md "Counters"): create, delete, list and show counters; add to
// and get their keys.
#include <boost/json.hpp>

#include <cctype>
#include <cstdint>
#include <string>

#include "command_line.h"
#include "commands.h"

namespace json = boost::json;

namespace sluice::cli {
namespace {

const Usage kCounter{"counter", R"(Usage: sluice counter create TENANT/NS/COUNTER
       sluice counter show   TENANT/NS/COUNTER
       sluice counter list   TENANT/NS
       sluice counter delete TENANT/NS/COUNTER
       sluice counter add    TENANT/NS/COUNTER KEY DELTA [--producer-id P --sequence S] [--if-incarnation I]
       sluice counter get    TENANT/NS/COUNTER KEY

Counters need metadata level 18 and the fleet feature counters finalized
(sluice feature finalize counters). create prints the counter with its incarnation;
delete prints the deleted one; list prints one counter per line.
add adds DELTA (a signed 64-bit integer; write a negative one after --, as in
`add t/n/c k -- -5`) to KEY and prints {"key","value"}; with --producer-id and --sequence
a retry of one of the producer's last 5 sequences answers the original value
("duplicate": true) and adds nothing, another sequence is 409 sequence_gap. get prints
{"key","value"} (0 for a key never added to). Both also print "incarnation": the counter
incarnation that answered. --if-incarnation I adds only to that incarnation (409 conflict
if the counter was deleted and created again): retry an uncertain add with the
incarnation, producer and sequence of the first attempt, so that it can never land on a
new counter of the same name.
)"};

// The answer with the counter incarnation that gave it (Sluice-Counter-Incarnation).
json::value with_incarnation(Client& c, const std::string& method, const std::string& path, const std::string& body) {
  Response r = c.call(method, path, body);
  if (r.status < 200 || r.status > 299) Client::fail(r);
  json::value v = json::parse(r.body);
  if (const std::string inc = r.header("Sluice-Counter-Incarnation"); !inc.empty() && v.is_object()) {
    try {
      v.as_object()["incarnation"] = std::stoull(inc);
    } catch (const std::exception&) {
      v.as_object()["incarnation"] = inc;
    }
  }
  return v;
}

std::string counter_path(const Args& a) {
  auto k = parse_stream(kCounter, a.pos()[0]);
  return k.ns_path() + "/counters/" + encode_segment(k.name);
}

std::string key_path(const Args& a) { return counter_path(a) + "/keys/" + encode_segment(a.pos()[1]); }

// DELTA: a signed 64-bit integer, as the server takes it.
std::int64_t parse_delta(const std::string& s) {
  std::size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(s, &used, 10);
  } catch (const std::exception&) {
    used = 0;
  }
  if (s.empty() || used != s.size() || std::isspace(static_cast<unsigned char>(s[0])))
    usage_error(kCounter, "DELTA must be a signed 64-bit integer, got '" + s + "'");
  return v;
}

// TENANT/NS -> its REST path (the server checks the names).
std::string ns_path(const std::string& s) {
  const auto slash = s.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == s.size() ||
      s.find('/', slash + 1) != std::string::npos)
    usage_error(kCounter, "expected TENANT/NS, got '" + s + "'");
  return "/v1/tenants/" + encode_segment(s.substr(0, slash)) + "/namespaces/" + encode_segment(s.substr(slash + 1));
}

}  // namespace

int cmd_counter(Client& c, const Words& words) {
  const std::string op = subcommand(kCounter, words);
  if (op == "create") {
    Args a(kCounter, rest(words), {.min_args = 1, .max_args = 1});
    auto k = parse_stream(kCounter, a.pos()[0]);
    json::object body{{"name", k.name}};
    print_json(c.call_ok("POST", k.ns_path() + "/counters", json::serialize(body)));
  } else if (op == "show") {
    Args a(kCounter, rest(words), {.min_args = 1, .max_args = 1});
    print_json(c.call_ok("GET", counter_path(a)));
  } else if (op == "delete") {
    Args a(kCounter, rest(words), {.min_args = 1, .max_args = 1});
    print_json(c.call_ok("DELETE", counter_path(a)));
  } else if (op == "add") {
    Args a(kCounter, rest(words),
           {.values = {"producer-id", "sequence", "if-incarnation"}, .min_args = 3, .max_args = 3});
    json::object body{{"delta", parse_delta(a.pos()[2])}};
    std::string q;
    auto add = [&](const std::string& k, std::uint64_t v) { q += (q.empty() ? "?" : "&") + k + "=" + std::to_string(v); };
    if (a.has("producer-id") != a.has("sequence")) a.error("--producer-id and --sequence go together");
    if (a.has("producer-id")) {
      add("producer_id", a.get_u64("producer-id", 0));
      add("sequence", a.get_u64("sequence", 0));
    }
    if (a.has("if-incarnation")) add("if_incarnation", a.get_u64("if-incarnation", 0));
    print_json(with_incarnation(c, "POST", key_path(a) + "/add" + q, json::serialize(body)));
  } else if (op == "get") {
    Args a(kCounter, rest(words), {.min_args = 2, .max_args = 2});
    print_json(with_incarnation(c, "GET", key_path(a), ""));
  } else if (op == "list") {
    Args a(kCounter, rest(words), {.min_args = 1, .max_args = 1});
    auto r = c.call_ok("GET", ns_path(a.pos()[0]) + "/counters");
    for (auto& x : r.as_object().at("counters").as_array()) print_json(x);
  } else {
    usage_error(kCounter, "unknown operation '" + op + "'");
  }
  return 0;
}

}  // namespace sluice::cli
