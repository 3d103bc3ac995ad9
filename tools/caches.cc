// sluice cache (docs/api.md, "Caches (catalog)" and "Caches (keys)").
#include <boost/json.hpp>

#include <cstdint>
#include <iostream>
#include <iterator>
#include <string>

#include "command_line.h"
#include "commands.h"

namespace json = boost::json;

namespace sluice::cli {
namespace {

const Usage kCache{"cache", R"(Usage: sluice cache create TENANT/NS/CACHE [--default-ttl-ms MS]
       sluice cache list   TENANT/NS/CACHE [--prefix P] [--limit N]
       sluice cache get    TENANT/NS/CACHE KEY [--json]
       sluice cache put    TENANT/NS/CACHE KEY [VALUE] [--ttl-ms MS] [--if-revision R] [--if-incarnation I]
                           [--ack leader|quorum]
       sluice cache delete TENANT/NS/CACHE KEY [--if-revision R] [--if-incarnation I] [--ack leader|quorum]
       sluice cache drop   TENANT/NS/CACHE

get prints the value as stored (no newline added); --json prints
{"value","revision","incarnation","expires_at_ms"?} instead (the value must then be UTF-8).
put stores VALUE, or standard input when VALUE is left out, and prints
{"revision","expires_at_ms"?,"incarnation"}. --if-revision R writes only if the key is at
revision R (0: only if absent); otherwise the answer is 409 revision_mismatch and nothing is
written. Revisions count within one incarnation of the cache: --if-incarnation I (the
incarnation a get or write printed) writes only if the cache was not deleted and created
again since (else 409 conflict, nothing written). list prints every live key with
its revision, following the pages. drop deletes the cache and everything in it.
)"};

std::string cache_path(const Args& a) { return parse_stream(kCache, a.pos()[0]).ns_path() + "/caches/" + encode_segment(parse_stream(kCache, a.pos()[0]).name); }

std::string key_path(const Args& a) { return cache_path(a) + "/keys/" + encode_segment(a.pos()[1]); }

std::string write_query(const Args& a, bool put) {
  std::string q;
  auto add = [&](const std::string& k, const std::string& v) { q += (q.empty() ? "?" : "&") + k + "=" + v; };
  if (put && a.has("ttl-ms")) add("ttl_ms", std::to_string(a.get_u64("ttl-ms", 0)));
  if (a.has("if-revision")) add("if_revision", std::to_string(a.get_u64("if-revision", 0)));
  if (a.has("if-incarnation")) add("if_incarnation", std::to_string(a.get_u64("if-incarnation", 0)));
  if (a.has("ack")) {
    const std::string ack = a.get("ack");
    if (ack != "leader" && ack != "quorum") a.error("--ack is leader or quorum");
    add("ack", ack);
  }
  return q;
}

}  // namespace

int cmd_cache(Client& c, const Words& words) {
  const std::string op = subcommand(kCache, words);
  if (op == "create") {
    Args a(kCache, rest(words), {.values = {"default-ttl-ms"}, .min_args = 1, .max_args = 1});
    json::object body{{"name", parse_stream(kCache, a.pos()[0]).name}};
    if (a.has("default-ttl-ms")) body["default_ttl_ms"] = a.get_u64("default-ttl-ms", 0);
    print_json(c.call_ok("POST", parse_stream(kCache, a.pos()[0]).ns_path() + "/caches", json::serialize(body)));
  } else if (op == "drop") {
    Args a(kCache, rest(words), {.min_args = 1, .max_args = 1});
    print_json(c.call_ok("DELETE", cache_path(a)));
  } else if (op == "list") {
    Args a(kCache, rest(words), {.values = {"prefix", "limit"}, .min_args = 1, .max_args = 1});
    const std::uint64_t limit = a.get_u64("limit", 0);  // 0: all
    std::uint64_t printed = 0;
    std::string after;
    for (;;) {
      std::string q = cache_path(a) + "/keys?limit=1000";
      if (a.has("prefix")) q += "&prefix=" + encode_query_value(a.get("prefix"));
      if (!after.empty()) q += "&after=" + encode_query_value(after);
      auto page = c.call_ok("GET", q).as_object();
      for (auto& k : page.at("keys").as_array()) {
        if (limit && printed == limit) return 0;
        print_json(k);
        ++printed;
      }
      const auto* next = page.if_contains("next");
      if (!next) return 0;
      after = json::value_to<std::string>(*next);
    }
  } else if (op == "get") {
    Args a(kCache, rest(words), {.flags = {"json"}, .min_args = 2, .max_args = 2});
    Response r = c.call("GET", key_path(a));
    if (r.status != 200) Client::fail(r);
    if (a.has("json")) {
      json::object o{{"value", r.body}, {"revision", std::stoull(r.header("Sluice-Revision"))}};
      if (auto i = r.header("Sluice-Cache-Incarnation"); !i.empty()) o["incarnation"] = std::stoull(i);
      if (auto e = r.header("Sluice-Expires-At"); !e.empty()) o["expires_at_ms"] = std::stoll(e);
      print_json(o);
    } else {
      std::cout.write(r.body.data(), static_cast<std::streamsize>(r.body.size()));
      std::cout.flush();
    }
  } else if (op == "put") {
    Args a(kCache, rest(words), {.values = {"ttl-ms", "if-revision", "if-incarnation", "ack"}, .min_args = 2, .max_args = 3});
    std::string value;
    if (a.pos().size() == 3) {
      value = a.pos()[2];
    } else {
      value.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    }
    print_json(c.call_ok("PUT", key_path(a) + write_query(a, true), value, "application/octet-stream"));
  } else if (op == "delete") {
    Args a(kCache, rest(words), {.values = {"if-revision", "if-incarnation", "ack"}, .min_args = 2, .max_args = 2});
    print_json(c.call_ok("DELETE", key_path(a) + write_query(a, false)));
  } else {
    usage_error(kCache, "unknown operation '" + op + "'");
  }
  return 0;
}

}  // namespace sluice::cli
