// sluice tenant | namespace | stream | shards (docs/api.md, "Catalog").
#include <boost/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "command_line.h"
#include "commands.h"

namespace json = boost::json;

namespace sluice::cli {
namespace {

const Usage kTenant{"tenant", "Usage: sluice tenant create NAME | list | delete NAME\n"};

const Usage kNamespace{"namespace",
                       "Usage: sluice namespace create TENANT NAME | list TENANT | delete TENANT NAME\n"};

const Usage kStream{"stream", R"(Usage: sluice stream create TENANT/NS/STREAM [--shards N] [--ack none|leader|quorum]
                          [--replication-factor N] [--min-insync N]
                          [--retention-bytes B] [--retention-ms MS] [--no-create-parents]
       sluice stream list TENANT/NS
       sluice stream get TENANT/NS/STREAM
       sluice stream delete TENANT/NS/STREAM
       sluice stream reassign TENANT/NS/STREAM --shard K --replicas B1,B2,... (see --help of it)

create makes the tenant and namespace first if they do not exist, unless
--no-create-parents is given.
)"};

const Usage kShards{"shards", R"(Usage: sluice shards TENANT/NS/STREAM [--json]
       sluice shards move-leader TENANT/NS/STREAM SHARD BROKER
       sluice shards elect TENANT/NS/STREAM SHARD --unclean --broker BROKER [--yes]
       sluice shards elect TENANT/NS/STREAM SHARD --preferred

The first form prints a table of the shards: leader, leader epoch, replicas, in-sync set,
and the answering node's replica (high watermark, log end); where that node leads, one
line per replica with its durable end, lag and directory. --json prints the API's answer. move-leader makes BROKER, an in-sync replica, lead SHARD in the next leader
epoch; the old leader stops acknowledging at once (docs/replication.md).

elect --unclean repairs a shard that has no eligible leader (every in-sync replica is down,
or came back with a new disk): BROKER leads it with itself alone in sync. It first asks
every live broker what it holds and prints the records the election would lose; without
--yes it stops there. The election is logged by the broker that makes it. elect --preferred
makes the shard's first replica lead again, once it is an eligible in-sync replica (the
controller does the same every controller.preferred_leader_interval_ms).
)"};

// Creates tenant and namespace if missing (409 = already there).
void ensure_parents(Client& c, const StreamPath& p) {
  json::object t{{"name", p.tenant}};
  auto r = c.call("POST", "/v1/tenants", json::serialize(t));
  if (r.status != 201 && r.status != 409) Client::fail(r);
  json::object n{{"name", p.ns}};
  r = c.call("POST", "/v1/tenants/" + encode_segment(p.tenant) + "/namespaces", json::serialize(n));
  if (r.status != 201 && r.status != 409) Client::fail(r);
}

}  // namespace

int cmd_tenant(Client& c, const Words& words) {
  const std::string op = subcommand(kTenant, words);
  if (op == "list") {
    Args(kTenant, rest(words), {});
    print_json(c.call_ok("GET", "/v1/tenants"));
  } else if (op == "create") {
    Args a(kTenant, rest(words), {.min_args = 1, .max_args = 1});
    print_json(c.call_ok("POST", "/v1/tenants", json::serialize(json::object{{"name", a.pos()[0]}})));
  } else if (op == "delete") {
    Args a(kTenant, rest(words), {.min_args = 1, .max_args = 1});
    c.call_ok("DELETE", "/v1/tenants/" + encode_segment(a.pos()[0]));
  } else {
    usage_error(kTenant, "unknown operation '" + op + "'");
  }
  return 0;
}

int cmd_namespace(Client& c, const Words& words) {
  const std::string op = subcommand(kNamespace, words);
  if (op == "list") {
    Args a(kNamespace, rest(words), {.min_args = 1, .max_args = 1});
    print_json(c.call_ok("GET", "/v1/tenants/" + encode_segment(a.pos()[0]) + "/namespaces"));
  } else if (op == "create" || op == "delete") {
    Args a(kNamespace, rest(words), {.min_args = 2, .max_args = 2});
    const std::string base = "/v1/tenants/" + encode_segment(a.pos()[0]) + "/namespaces";
    if (op == "create") print_json(c.call_ok("POST", base, json::serialize(json::object{{"name", a.pos()[1]}})));
    else c.call_ok("DELETE", base + "/" + encode_segment(a.pos()[1]));
  } else {
    usage_error(kNamespace, "unknown operation '" + op + "'");
  }
  return 0;
}

int cmd_stream(Client& c, const Words& words) {
  const std::string op = subcommand(kStream, words);
  if (op == "list") {
    Args a(kStream, rest(words), {.min_args = 1, .max_args = 1});
    const std::string& ns = a.pos()[0];
    auto slash = ns.find('/');
    if (slash == std::string::npos || ns.find('/', slash + 1) != std::string::npos)
      a.error("stream list expects TENANT/NAMESPACE, got '" + ns + "'");
    print_json(c.call_ok("GET", "/v1/tenants/" + encode_segment(ns.substr(0, slash)) + "/namespaces/" + encode_segment(ns.substr(slash + 1)) +
                                    "/streams"));
  } else if (op == "create") {
    Args a(kStream, rest(words),
           {.values = {"shards", "ack", "retention-bytes", "retention-ms", "replication-factor", "min-insync"},
            .flags = {"no-create-parents"},
            .min_args = 1,
            .max_args = 1});
    StreamPath p = parse_stream(kStream, a.pos()[0]);
    json::object body{{"name", p.name}};
    body["shards"] = a.get_u64("shards", 1);
    if (a.has("ack")) body["ack"] = a.get("ack");
    if (a.has("replication-factor")) body["replication_factor"] = a.get_u64("replication-factor", 1);
    if (a.has("min-insync")) body["min_insync"] = a.get_u64("min-insync", 1);
    json::object ret;
    if (a.has("retention-bytes")) ret["max_bytes"] = a.get_u64("retention-bytes", 0);
    if (a.has("retention-ms")) ret["max_age_ms"] = a.get_u64("retention-ms", 0);
    if (!ret.empty()) body["retention"] = ret;
    if (!a.has("no-create-parents")) ensure_parents(c, p);
    print_json(c.call_ok("POST", p.ns_path() + "/streams", json::serialize(body)));
  } else if (op == "reassign") {
    return reassign(c, words);
  } else if (op == "get" || op == "delete") {
    Args a(kStream, rest(words), {.min_args = 1, .max_args = 1});
    StreamPath p = parse_stream(kStream, a.pos()[0]);
    print_json(c.call_ok(op == "get" ? "GET" : "DELETE", p.path()));
  } else {
    usage_error(kStream, "unknown operation '" + op + "'");
  }
  return 0;
}

// `sluice shards elect`: what BROKER holds of the shard, against the highest high watermark
// any live replica reports (records acknowledged there but missing on BROKER are lost).
int elect(Client& c, const Words& words) {
  Args a(kShards, rest(words),
         {.values = {"broker"}, .flags = {"unclean", "yes", "preferred"}, .min_args = 2, .max_args = 2});
  const StreamPath p = parse_stream(kShards, a.pos()[0]);
  const auto shard = parse_u64(kShards, "SHARD", a.pos()[1]);
  if (a.has("preferred")) {
    if (a.has("unclean") || a.has("broker")) a.error("--preferred takes neither --unclean nor --broker");
    print_json(c.call_ok("POST", p.path() + "/shards/" + std::to_string(shard) + "/elect",
                         boost::json::serialize(boost::json::object{{"preferred", true}})));
    return 0;
  }
  if (!a.has("unclean"))
    a.error("say --preferred, or --unclean --broker B (the controller elects eligible replicas by itself)");
  if (!a.has("broker")) a.error("--broker is required");
  const auto broker = a.get_u64("broker", 0);
  const auto brokers = c.call_ok("GET", "/v1/brokers");
  std::optional<std::uint64_t> end, start;
  bool lost = false;  // the named broker's copy is a lost one that has not caught up
  std::uint64_t best_hwm = 0;
  std::uint64_t best_from = 0;
  std::vector<std::uint64_t> unanswered;  // live brokers whose high watermark is unknown
  for (const auto& b : brokers.as_object().at("brokers").as_array()) {
    const auto& bo = b.as_object();
    const auto id = bo.at("id").to_number<std::uint64_t>();
    if (const auto* live = bo.if_contains("live"); live && live->is_bool() && !live->get_bool()) continue;
    const auto* addr = bo.if_contains("address");
    if (!addr || !addr->is_string()) continue;
    // The scheme of --url (the brokers of a cluster serve the same one); a broker that does
    // not answer is skipped: what it holds is not known.
    Client peer(c.uri().getScheme() + "://" + std::string(addr->get_string()), c.token());
    std::string why;
    auto r = peer.try_get(p.path() + "/shards", &why);
    if (!r || r->status != 200) {
      std::fprintf(stderr, "sluice: broker %llu (%s) did not answer: %s\n", static_cast<unsigned long long>(id),
                   std::string(addr->get_string()).c_str(), r ? ("status " + std::to_string(r->status)).c_str() : why.c_str());
      unanswered.push_back(id);
      continue;
    }
    boost::json::value v;
    try {
      v = boost::json::parse(r->body);
    } catch (const std::exception&) {
      unanswered.push_back(id);
      continue;
    }
    const auto& shards = v.as_object().at("shards").as_array();
    if (shard >= shards.size()) continue;
    const auto& so = shards[shard].as_object();
    if (!so.if_contains("log_end")) continue;  // holds no replica
    const auto hwm = so.at("high_watermark").to_number<std::uint64_t>();
    if (hwm > best_hwm) {
      best_hwm = hwm;
      best_from = id;
    }
    if (id == broker) {
      end = so.at("log_end").to_number<std::uint64_t>();
      start = so.at("log_start").to_number<std::uint64_t>();
      if (const auto* cl = so.if_contains("copy_lost"); cl && cl->is_bool()) lost = cl->get_bool();
    }
  }
  const std::string what = "shard " + std::to_string(shard) + " of " + p.tenant + "/" + p.ns + "/" + p.name;
  if (!end) {
    std::printf("broker %llu did not answer for %s (down, or it holds no replica): nothing is known of what it holds\n",
                static_cast<unsigned long long>(broker), what.c_str());
  } else {
    std::printf("broker %llu holds offsets [%llu, %llu) of %s\n", static_cast<unsigned long long>(broker),
                static_cast<unsigned long long>(*start), static_cast<unsigned long long>(*end), what.c_str());
    if (best_hwm > *end)
      std::printf("LOST: records [%llu, %llu) were acknowledged (broker %llu's high watermark) and are not on broker %llu\n",
                  static_cast<unsigned long long>(*end), static_cast<unsigned long long>(best_hwm),
                  static_cast<unsigned long long>(best_from), static_cast<unsigned long long>(broker));
    else
      std::printf("no live replica reports an acknowledged record beyond offset %llu; records only a lost replica "
                  "acknowledged cannot be counted\n",
                  static_cast<unsigned long long>(*end));
  }
  if (lost)
    std::printf("LOST COPY: broker %llu's copy of %s was lost (its directory gone) and its broker has not "
                "forgotten the loss yet: an election of it now is given back; once the in-sync set no longer "
                "counts it and the shard has no leader, it forgets the loss, and an election holds "
                "(docs/replication.md \"Runbook: a shard without a leader after a disk loss\", step 4)\n",
                static_cast<unsigned long long>(broker), what.c_str());
  if (!unanswered.empty()) {
    std::string ids;
    for (auto id : unanswered) ids += (ids.empty() ? "" : ", ") + std::to_string(id);
    std::printf("WARNING: the loss estimate is incomplete: live broker(s) %s did not answer, and may hold "
                "acknowledged records beyond what is reported above\n",
                ids.c_str());
  }
  if (!a.has("yes")) {
    std::fprintf(stderr, "sluice shards elect: refused without --yes (an unclean election may lose acknowledged records)\n");
    return 1;
  }
  print_json(c.call_ok("POST", p.path() + "/shards/" + std::to_string(shard) + "/elect",
                       boost::json::serialize(boost::json::object{{"broker", broker}, {"unclean", true}})));
  return 0;
}

int cmd_shards(Client& c, const Words& words) {
  if (!words.empty() && words.front() == "elect") return elect(c, words);
  if (!words.empty() && words.front() == "move-leader") {
    Args a(kShards, rest(words), {.min_args = 3, .max_args = 3});
    const StreamPath p = parse_stream(kShards, a.pos()[0]);
    auto number = [&](const std::string& s, const char* what) -> std::uint64_t {
      if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos || s.size() > 9)
        a.error(std::string(what) + " must be a number, got '" + s + "'");
      return std::stoull(s);
    };
    const auto shard = number(a.pos()[1], "SHARD");
    const auto broker = number(a.pos()[2], "BROKER");
    print_json(c.call_ok("POST", p.path() + "/shards/" + std::to_string(shard) + "/leader",
                         json::serialize(json::object{{"broker", broker}})));
    return 0;
  }
  Args a(kShards, words, {.flags = {"json"}, .min_args = 1, .max_args = 1});
  const auto v = c.call_ok("GET", parse_stream(kShards, a.pos()[0]).path() + "/shards");
  if (a.has("json")) {
    print_json(v);
    return 0;
  }
  // A table: one line per shard, then the leader's view of each replica.
  auto u = [](const json::object& o, const char* k) -> std::string {
    const auto* f = o.if_contains(k);
    if (!f) return "-";
    if (f->is_int64()) return std::to_string(f->get_int64());
    if (f->is_uint64()) return std::to_string(f->get_uint64());
    if (f->is_bool()) return f->get_bool() ? "yes" : "no";
    return "-";
  };
  auto ids = [](const json::value* arr, const char* field) {
    std::string out;
    if (!arr || !arr->is_array()) return std::string("-");
    for (const auto& e : arr->get_array()) {
      if (!out.empty()) out += ",";
      const json::value& id = field ? e.as_object().at(field) : e;
      out += std::to_string(id.is_int64() ? id.get_int64() : static_cast<std::int64_t>(id.get_uint64()));
    }
    return out.empty() ? std::string("-") : out;
  };
  std::printf("%-6s %-7s %-6s %-12s %-12s %-14s %-14s\n", "SHARD", "LEADER", "EPOCH", "REPLICAS", "IN-SYNC",
              "HIGH-WATERMARK", "LOG-END");
  for (const auto& s : v.as_object().at("shards").as_array()) {
    const auto& o = s.as_object();
    std::printf("%-6s %-7s %-6s %-12s %-12s %-14s %-14s\n", u(o, "shard").c_str(), u(o, "leader").c_str(),
                u(o, "leader_epoch").c_str(), ids(o.if_contains("replicas"), nullptr).c_str(),
                ids(o.if_contains("in_sync"), "broker").c_str(), u(o, "high_watermark").c_str(),
                u(o, "log_end").c_str());
    if (const auto* why = o.if_contains("unavailable_reason"); why && why->is_string())
      std::printf("         NO LEADER: %s\n", std::string(why->get_string()).c_str());
    if (const auto* re = o.if_contains("reassignment"); re && re->is_string())
      std::printf("         REASSIGNING: %s\n", std::string(re->get_string()).c_str());
    if (const auto* cl = o.if_contains("copy_lost"); cl && cl->is_bool() && cl->get_bool())
      std::printf("         LOST COPY: this broker's copy was lost and has not caught up yet; it leads nothing "
                  "meanwhile (docs/replication.md \"A lost shard copy\")\n");
    if (const auto* prog = o.if_contains("replica_progress"); prog && prog->is_array())
      for (const auto& p : prog->get_array()) {
        const auto& po = p.as_object();
        std::printf("         replica %-4s high-watermark %-12s log-end %-12s durable-end %-12s lag %sms%s  directory %s\n",
                    u(po, "broker").c_str(), u(po, "high_watermark").c_str(), u(po, "log_end").c_str(),
                    u(po, "durable_end").c_str(), u(po, "lag_ms").c_str(),
                    po.at("in_sync").as_bool() ? "" : "  (not in sync)",
                    json::value_to<std::string>(po.at("directory_id")).c_str());
      }
  }
  return 0;
}

}  // namespace sluice::cli
