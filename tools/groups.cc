// sluice group | dead-letters (docs/api.md, "Consumer groups and dead letters").
#include <boost/json.hpp>

#include <csignal>
#include <cstdint>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "command_line.h"
#include "commands.h"

namespace json = boost::json;

namespace sluice::cli {
namespace {

const Usage kGroup{"group", R"(Usage: sluice group consume TENANT/NS/STREAM GROUP --shard N [--max N] [--ack]
                           [--follow] [--max-deliveries N] [--ack-timeout-ms MS]
       sluice group ack  TENANT/NS/STREAM GROUP --shard N [--incarnation I] OFFSET...
       sluice group nack TENANT/NS/STREAM GROUP --shard N [--incarnation I] OFFSET...
       sluice group positions TENANT/NS/STREAM GROUP

consume prints "offset delivery value" per record, and "incarnation I" on stderr: the
stream incarnation that delivered them. With --ack it acknowledges each batch after
printing it, for that incarnation; without, records are redelivered after the ack timeout.
Give ack and nack the --incarnation consume printed: if the stream was deleted and created
again since, the answer is 409 conflict and nothing changes (without it, the offsets are
taken as the current stream's).
)"};

const Usage kDeadLetters{"dead-letters",
                         R"(Usage: sluice dead-letters list   TENANT/NS/STREAM GROUP --shard N [--from OFFSET]
       sluice dead-letters replay TENANT/NS/STREAM GROUP --shard N --from A --to B [--incarnation I]

list prints the page with the stream's "incarnation". replay publishes dead letters [A, B)
to the stream again, as new records; with --incarnation (the list's), a stream deleted and
created again since is refused (409 conflict) and nothing is replayed.
)"};

volatile std::sig_atomic_t g_stop = 0;

// {"offsets":[...],"incarnation"?}: with the incarnation, the broker refuses (409) offsets
// delivered by a stream that has since been deleted and created again.
std::string offsets_json(const std::vector<std::string>& offs, std::size_t from,
                         std::optional<std::uint64_t> incarnation) {
  json::array arr;
  for (std::size_t i = from; i < offs.size(); ++i) arr.push_back(parse_u64(kGroup, "offset", offs[i]));
  json::object body{{"offsets", arr}};
  if (incarnation) body["incarnation"] = *incarnation;
  return json::serialize(body);
}

// GROUP under STREAM: ".../streams/s/groups/g".
std::string group_path(const Usage& usage, const Args& a) {
  return parse_stream(usage, a.pos()[0]).path() + "/groups/" + encode_segment(a.pos()[1]);
}

std::string shard_path(const Usage& usage, const Args& a) {
  if (!a.has("shard")) a.error("needs --shard N");
  return group_path(usage, a) + "/shards/" + std::to_string(a.get_u64("shard", 0));
}

int group_consume(Client& c, const Args& a) {
  const std::string shard_base = shard_path(kGroup, a);
  std::string q = shard_base + "/records?max=" + std::to_string(a.get_u64("max", 100));
  if (a.has("max-deliveries")) q += "&max_deliveries=" + std::to_string(a.get_u64("max-deliveries", 0));
  if (a.has("ack-timeout-ms")) q += "&ack_timeout_ms=" + std::to_string(a.get_u64("ack-timeout-ms", 0));
  const bool follow = a.has("follow");
  if (follow) q += "&wait_ms=10000";
  std::signal(SIGINT, [](int) { g_stop = 1; });
  std::optional<std::uint64_t> shown;
  do {
    auto res = c.call_ok("GET", q).as_object();
    const auto incarnation = res.at("incarnation").to_number<std::uint64_t>();
    if (shown != incarnation) std::cerr << "incarnation " << incarnation << std::endl;
    shown = incarnation;
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
    if (a.has("ack") && !offs.empty()) c.call_ok("POST", shard_base + "/ack", offsets_json(offs, 0, incarnation));
  } while (follow && !g_stop);
  return 0;
}

}  // namespace

int cmd_group(Client& c, const Words& words) {
  const std::string op = subcommand(kGroup, words);
  if (op == "positions") {
    Args a(kGroup, rest(words), {.min_args = 2, .max_args = 2});
    print_json(c.call_ok("GET", group_path(kGroup, a)));
  } else if (op == "ack" || op == "nack") {
    Args a(kGroup, rest(words), {.values = {"shard", "incarnation"}, .min_args = 3, .max_args = SIZE_MAX});
    std::optional<std::uint64_t> incarnation;
    if (a.has("incarnation")) incarnation = a.get_u64("incarnation", 0);
    c.call_ok("POST", shard_path(kGroup, a) + "/" + op, offsets_json(a.pos(), 2, incarnation));
  } else if (op == "consume") {
    Args a(kGroup, rest(words),
           {.values = {"shard", "max", "max-deliveries", "ack-timeout-ms"},
            .flags = {"ack", "follow"},
            .min_args = 2,
            .max_args = 2});
    return group_consume(c, a);
  } else {
    usage_error(kGroup, "unknown operation '" + op + "'");
  }
  return 0;
}

int cmd_dead_letters(Client& c, const Words& words) {
  const std::string op = subcommand(kDeadLetters, words);
  if (op == "list") {
    Args a(kDeadLetters, rest(words), {.values = {"shard", "from"}, .min_args = 2, .max_args = 2});
    print_json(c.call_ok("GET", shard_path(kDeadLetters, a) + "/dead-letters?offset=" +
                                    std::to_string(a.get_u64("from", 0))));
  } else if (op == "replay") {
    Args a(kDeadLetters, rest(words), {.values = {"shard", "from", "to", "incarnation"}, .min_args = 2, .max_args = 2});
    if (!a.has("from") || !a.has("to")) a.error("replay needs --from A --to B");
    json::object body{{"from", a.get_u64("from", 0)}, {"to", a.get_u64("to", 0)}};
    if (a.has("incarnation")) body["incarnation"] = a.get_u64("incarnation", 0);
    print_json(c.call_ok("POST", shard_path(kDeadLetters, a) + "/dead-letters/replay", json::serialize(body)));
  } else {
    usage_error(kDeadLetters, "unknown operation '" + op + "'");
  }
  return 0;
}

}  // namespace sluice::cli
