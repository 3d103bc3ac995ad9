// sluice stream reassign | broker drain (docs/replication.md "Reassignment"; docs/api.md).
// Both start the move with one call and, unless --no-wait, poll the shards listing and print
// each shard's progress until every move is done (or --timeout-s passes: exit 1).
#include <boost/json.hpp>

#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "command_line.h"
#include "commands.h"

namespace json = boost::json;

namespace sluice::cli {

const Usage kReassign{"stream", R"(Usage: sluice stream reassign TENANT/NS/STREAM --shard K --replicas B1,B2,...
                          [--no-wait] [--timeout-s S]

Moves shard K to the brokers B1,B2,... (as many as the stream's replication factor; B1
becomes its preferred leader). The new brokers copy the shard from its leader; once all of
them are in sync, leadership moves into the new list if needed, and the old replicas leave
and remove their copies. Progress is printed until the move is done (default timeout 600 s);
--no-wait returns once it has started. `sluice shards STREAM` shows the same progress.
)"};

const Usage kBroker{"broker", R"(Usage: sluice broker drain BROKER [--no-wait] [--timeout-s S]
       sluice brokers

drain moves every shard copy off BROKER: each shard is reassigned with BROKER replaced by the
live broker holding the fewest copies. Shards that cannot move (replication factor 1, no
other live broker) are listed and make the command exit 1. Progress is printed until every
move is done (default timeout 600 s). The broker may be stopped once it holds nothing.
)"};

namespace {

std::string ids_text(const json::array& a) {
  std::string out = "[";
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (i) out += ",";
    out += std::to_string(a[i].to_number<std::uint64_t>());
  }
  return out + "]";
}

// Longer would overflow the clock's nanoseconds (a wait that ended at once).
constexpr std::uint64_t kMaxTimeoutS = 30ull * 24 * 3600;

struct Watch {
  std::string stream;  // tenant/ns/name
  std::uint64_t shard;
  std::string target;  // "[4,2,3]"
  bool seen_moving = false;
};

// Polls the shards listing of each watched shard until none has a target; prints a line
// whenever a shard's progress text changes. false on timeout, and when a move did not end
// with the replicas asked for (the shard is gone, or someone changed it): the command
// exits 1 then, not 0 as if it had done what it was asked.
bool wait_done(Client& c, std::vector<Watch> watch, std::uint64_t timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  std::map<std::string, std::string> last;
  std::size_t not_as_asked = 0;
  while (!watch.empty()) {
    std::vector<Watch> left;
    for (const auto& w : watch) {
      auto p = parse_stream(kReassign, w.stream);
      auto v = c.call_ok("GET", p.path() + "/shards");
      const json::object* shard = nullptr;
      for (const auto& s : v.as_object().at("shards").as_array())
        if (s.as_object().at("shard").to_number<std::uint64_t>() == w.shard) shard = &s.as_object();
      const std::string id = w.stream + " shard " + std::to_string(w.shard);
      if (!shard) {
        std::printf("%s: gone\n", id.c_str());
        ++not_as_asked;
        continue;
      }
      std::string now;
      const std::string replicas = ids_text(shard->at("replicas").as_array());
      if (const auto* t = shard->if_contains("target_replicas")) {
        now = shard->contains("reassignment") ? std::string(shard->at("reassignment").as_string())
                                              : "moving to " + ids_text(t->as_array());
        left.push_back(w);
        left.back().seen_moving = true;
      } else if (replicas == w.target) {
        now = "done: replicas " + replicas + ", leader " +
              std::to_string(shard->at("leader").to_number<std::uint64_t>());
      } else if (w.seen_moving) {
        now = "ended with replicas " + replicas + ", not " + w.target + " (changed by someone else?)";
        ++not_as_asked;
      } else {
        // The answering node has not applied the start of the move yet.
        now = "starting: moving to " + w.target;
        left.push_back(w);
      }
      if (last[id] != now) {
        std::printf("%s: %s\n", id.c_str(), now.c_str());
        std::fflush(stdout);
        last[id] = now;
      }
    }
    watch = std::move(left);
    if (watch.empty()) break;
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "sluice: %zu move(s) still running after %llu s; they go on (sluice shards shows them)\n",
                   watch.size(), static_cast<unsigned long long>(timeout_s));
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  if (not_as_asked > 0) {
    std::fprintf(stderr, "sluice: %zu move(s) did not end with the replicas asked for (above)\n", not_as_asked);
    return false;
  }
  return true;
}

}  // namespace

int reassign(Client& c, const Words& words) {
  Args a(kReassign, rest(words),
         {.values = {"shard", "replicas", "timeout-s"}, .flags = {"no-wait"}, .min_args = 1, .max_args = 1});
  StreamPath p = parse_stream(kReassign, a.pos()[0]);
  if (!a.has("shard")) a.error("--shard K is required");
  if (!a.has("replicas")) a.error("--replicas B1,B2,... is required");
  const std::uint64_t shard = a.get_u64("shard", 0);
  const std::uint64_t timeout_s = a.get_u64("timeout-s", 600);  // every option is checked before the POST
  if (timeout_s > kMaxTimeoutS) a.error("--timeout-s is at most " + std::to_string(kMaxTimeoutS) + " (30 days)");
  json::array reps;
  const std::string list = a.get("replicas");
  std::size_t at = 0;
  while (at <= list.size()) {
    const auto comma = list.find(',', at);
    const std::string one = list.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    reps.push_back(parse_u64(kReassign, "--replicas", one));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  json::object body{{"replicas", reps}};
  auto v = c.call_ok("POST", p.path() + "/shards/" + std::to_string(shard) + "/reassign", json::serialize(body));
  print_json(v);
  if (a.has("no-wait") || !v.as_object().contains("target_replicas")) return 0;
  return wait_done(c, {{p.tenant + "/" + p.ns + "/" + p.name, shard, ids_text(reps)}}, timeout_s)
             ? 0
             : 1;
}

int cmd_broker(Client& c, const Words& words) {
  const std::string op = subcommand(kBroker, words);
  if (op != "drain") usage_error(kBroker, "unknown operation '" + op + "'");
  Args a(kBroker, rest(words), {.values = {"timeout-s"}, .flags = {"no-wait"}, .min_args = 1, .max_args = 1});
  const std::uint64_t broker = parse_u64(kBroker, "BROKER", a.pos()[0]);
  const std::uint64_t timeout_s = a.get_u64("timeout-s", 600);  // every option is checked before the POST
  if (timeout_s > kMaxTimeoutS) a.error("--timeout-s is at most " + std::to_string(kMaxTimeoutS) + " (30 days)");
  auto v = c.call_ok("POST", "/v1/brokers/" + std::to_string(broker) + "/drain", "{}");
  std::vector<Watch> watch;
  std::size_t refused = 0;
  for (const auto& m : v.as_object().at("moves").as_array()) {
    const auto& o = m.as_object();
    const std::string stream(o.at("stream").as_string());
    const auto shard = o.at("shard").to_number<std::uint64_t>();
    if (const auto* r = o.if_contains("refused")) {
      ++refused;
      std::printf("%s shard %llu: NOT MOVED: %s\n", stream.c_str(), static_cast<unsigned long long>(shard),
                  std::string(r->as_string()).c_str());
      continue;
    }
    std::printf("%s shard %llu: %s -> %s\n", stream.c_str(), static_cast<unsigned long long>(shard),
                ids_text(o.at("replicas").as_array()).c_str(), ids_text(o.at("target_replicas").as_array()).c_str());
    watch.push_back({stream, shard, ids_text(o.at("target_replicas").as_array())});
  }
  std::printf("broker %llu: %zu move(s) started, %zu refused\n", static_cast<unsigned long long>(broker),
              watch.size(), refused);
  std::fflush(stdout);
  bool ok = true;
  if (!a.has("no-wait")) ok = wait_done(c, std::move(watch), timeout_s);
  return ok && refused == 0 ? 0 : 1;
}

}  // namespace sluice::cli
