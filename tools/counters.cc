// sluice counter (docs/api.md "Counters (catalog)"): create, delete, list and show counters.
// The counter data plane (add, get of keys) is not served yet, so neither are those verbs.
#include <boost/json.hpp>

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

Counters need metadata level 18 and the fleet feature counters finalized
(sluice feature finalize counters). create prints the counter with its incarnation;
delete prints the deleted one; list prints one counter per line.
)"};

std::string counter_path(const Args& a) {
  auto k = parse_stream(kCounter, a.pos()[0]);
  return k.ns_path() + "/counters/" + k.name;
}

// TENANT/NS -> its REST path (the server checks the names).
std::string ns_path(const std::string& s) {
  const auto slash = s.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == s.size() ||
      s.find('/', slash + 1) != std::string::npos)
    usage_error(kCounter, "expected TENANT/NS, got '" + s + "'");
  return "/v1/tenants/" + s.substr(0, slash) + "/namespaces/" + s.substr(slash + 1);
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
