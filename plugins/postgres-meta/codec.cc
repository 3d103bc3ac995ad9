#include "codec.h"

#include <libpq-fe.h>

#include <boost/json.hpp>

#include "sluice/catalog_json.h"

namespace sluice::postgres_meta {

// The payloads are the SDK's change-payload encoding (sluice/catalog_json.h), the one
// raft-meta stores too.
std::string names_payload(const std::string& tenant, const std::string* ns) {
  ChangeEvent e{};
  e.kind = ns ? ChangeEvent::Kind::namespace_created : ChangeEvent::Kind::tenant_created;
  e.tenant = tenant;
  if (ns) e.ns = *ns;
  return encode_change_payload(e);
}

std::string stream_change_payload(const StreamInfo& s, const std::vector<Assignment>& as,
                                  const std::optional<Tombstone>& t) {
  ChangeEvent e{};
  e.kind = ChangeEvent::Kind::stream_created;
  e.stream = s;
  e.assignments = as;
  e.tombstone = t;
  return encode_change_payload(e);
}

std::string counter_change_payload(const CounterInfo& c, const std::optional<Tombstone>& t) {
  ChangeEvent e{};
  e.kind = ChangeEvent::Kind::counter_created;
  e.tenant = c.key.tenant;
  e.ns = c.key.ns;
  e.counter = c;
  e.counter_tombstone = t;
  return encode_change_payload(e);
}

std::string cache_change_payload(const CacheInfo& c, const std::optional<Tombstone>& t) {
  ChangeEvent e{};
  e.kind = ChangeEvent::Kind::cache_created;
  e.tenant = c.key.tenant;
  e.ns = c.key.ns;
  e.cache = c;
  e.cache_tombstone = t;
  return encode_change_payload(e);
}

std::string broker_payload(const BrokerInfo& b) {
  ChangeEvent e{};
  e.kind = ChangeEvent::Kind::broker_registered;
  e.broker = b;
  return encode_change_payload(e);
}

std::string feature_payload(const std::string& name) {
  ChangeEvent e{};
  e.kind = ChangeEvent::Kind::feature_finalized;
  e.feature = name;
  return encode_change_payload(e);
}

std::string shard_payload(const Assignment& a) {
  ChangeEvent e{};
  e.kind = ChangeEvent::Kind::shard_changed;
  e.tenant = a.key.tenant;
  e.ns = a.key.ns;
  e.stream.key = a.key;
  e.stream.incarnation = a.incarnation;
  e.assignments = {a};
  return encode_change_payload(e);
}

std::string encode_in_sync(const std::vector<InSyncReplica>& v) {
  if (v.empty()) return {};
  return boost::json::serialize(boost::json::value_from(v));
}

std::vector<InSyncReplica> decode_in_sync(const std::string& s) {
  if (s.empty()) return {};
  return boost::json::value_to<std::vector<InSyncReplica>>(boost::json::parse(s));
}

Result<ChangeEvent> decode_change(std::int64_t seq, std::string_view kind,
                                  std::string_view payload) {
  if (seq < 0) return Error(Errc::malformed_body, "change with negative seq " + std::to_string(seq));
  return decode_change_payload(ChangeSeq{static_cast<std::uint64_t>(seq)}, kind, payload);
}

namespace {
struct ParsedConninfo {
  PQconninfoOption* opts = nullptr;
  ~ParsedConninfo() {
    if (opts) PQconninfoFree(opts);
  }
};
}  // namespace

Result<std::string> describe_conninfo(const std::string& conninfo) {
  ParsedConninfo p;
  char* err = nullptr;
  p.opts = PQconninfoParse(conninfo.c_str(), &err);
  if (!p.opts) {
    // libpq's message may quote the string (and so a password): never echo it.
    if (err) PQfreemem(err);
    return Error(Errc::invalid_argument,
                 "metadata.postgres.url is not a valid libpq connection string or URI "
                 "(expected e.g. postgresql://user@host:5432/db or 'host=... dbname=...'; "
                 "the value is not shown because it may contain a password)");
  }
  std::string out;
  for (auto* o = p.opts; o->keyword; ++o) {
    std::string_view k = o->keyword;
    if (!o->val || !*o->val) continue;
    if (k == "host" || k == "hostaddr" || k == "port" || k == "dbname" || k == "user") {
      if (!out.empty()) out += " ";
      out += std::string(k) + "=" + o->val;
    }
  }
  if (out.empty()) out = "(libpq defaults)";
  return out;
}

std::string conninfo_password(const std::string& conninfo) {
  ParsedConninfo p;
  char* err = nullptr;
  p.opts = PQconninfoParse(conninfo.c_str(), &err);
  if (err) PQfreemem(err);
  if (!p.opts) return {};
  for (auto* o = p.opts; o->keyword; ++o)
    if (std::string_view(o->keyword) == "password" && o->val) return o->val;
  return {};
}

std::string scrub(std::string msg, const std::string& secret) {
  if (secret.empty()) return msg;
  for (std::size_t pos = msg.find(secret); pos != std::string::npos;
       pos = msg.find(secret, pos + 3))
    msg.replace(pos, secret.size(), "***");
  return msg;
}

}  // namespace sluice::postgres_meta
