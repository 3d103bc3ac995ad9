#include "codec.h"

#include <boost/json/array.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <boost/json/value_from.hpp>

#include "sluice/catalog_json.h"

namespace sluice::http_api {

namespace json = boost::json;

bool valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const auto* end = p + s.size();
  while (p < end) {
    const unsigned char c = *p;
    if (c < 0x80) { ++p; continue; }
    int n;
    std::uint32_t cp;
    if ((c & 0xe0) == 0xc0) { n = 1; cp = c & 0x1f; }
    else if ((c & 0xf0) == 0xe0) { n = 2; cp = c & 0x0f; }
    else if ((c & 0xf8) == 0xf0) { n = 3; cp = c & 0x07; }
    else return false;
    if (end - p < n + 1) return false;
    for (int i = 1; i <= n; ++i) {
      if ((p[i] & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (p[i] & 0x3f);
    }
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000)) return false;
    if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    p += n + 1;
  }
  return true;
}

namespace {
constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
int b64val(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}
}  // namespace

std::string base64_encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  std::size_t i = 0;
  const auto* p = reinterpret_cast<const unsigned char*>(in.data());
  for (; i + 3 <= in.size(); i += 3) {
    const std::uint32_t v = (p[i] << 16) | (p[i + 1] << 8) | p[i + 2];
    out.push_back(kB64[v >> 18]);
    out.push_back(kB64[(v >> 12) & 63]);
    out.push_back(kB64[(v >> 6) & 63]);
    out.push_back(kB64[v & 63]);
  }
  if (const std::size_t rest = in.size() - i; rest) {
    std::uint32_t v = p[i] << 16;
    if (rest == 2) v |= p[i + 1] << 8;
    out.push_back(kB64[v >> 18]);
    out.push_back(kB64[(v >> 12) & 63]);
    out.push_back(rest == 2 ? kB64[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

std::optional<std::size_t> base64_decode_to(std::string_view in, char* out) {
  while (!in.empty() && in.back() == '=') in.remove_suffix(1);
  if (in.size() % 4 == 1) return std::nullopt;
  std::size_t n = 0;
  std::uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    const int v = b64val(c);
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[n++] = static_cast<char>((acc >> bits) & 0xff);
    }
  }
  return n;
}

std::optional<std::string> base64_decode(std::string_view in) {
  std::string out(in.size() / 4 * 3 + 3, '\0');
  auto n = base64_decode_to(in, out.data());
  if (!n) return std::nullopt;
  out.resize(*n);
  return out;
}

// A tenant and a namespace have the SDK's shape (sluice/catalog_json.h): {"name",
// "created_seq"} and {"tenant","name","created_seq"}. The other REST shapes differ from it
// ("namespace" for "ns", a nested retention, a string state hash) and stay here.
json::object tenant_json(const TenantInfo& t) { return json::value_from(t).as_object(); }

json::object namespace_json(const NamespaceInfo& n) { return json::value_from(n).as_object(); }

json::object stream_json(const StreamInfo& s) {
  json::object o;
  o["tenant"] = s.key.tenant;
  o["namespace"] = s.key.ns;
  o["name"] = s.key.name;
  o["incarnation"] = s.incarnation.value();
  o["shards"] = s.spec.shards;
  json::object r;
  r["max_bytes"] = s.spec.retention.max_bytes;
  r["max_age_ms"] = s.spec.retention.max_age_ms;
  o["retention"] = std::move(r);
  o["ack"] = to_string(s.spec.default_ack);
  o["replication_factor"] = s.spec.replication_factor;
  o["min_insync"] = s.spec.min_insync;
  o["created_seq"] = s.created_seq.value();
  return o;
}

namespace {
json::array in_sync_json(const std::vector<InSyncReplica>& v) {
  json::array isr;
  for (auto& m : v) {
    json::object e;
    e["broker"] = m.broker.value();
    e["directory_id"] = m.directory_id;
    isr.push_back(std::move(e));
  }
  return isr;
}
}  // namespace

json::object assignment_json(const Assignment& a) {
  json::object o;
  o["shard"] = a.shard.value();
  o["incarnation"] = a.incarnation.value();
  o["generation"] = a.generation.value();
  o["leader"] = a.leader.value();
  json::array reps;
  for (auto& r : a.replicas) reps.push_back(r.value());
  o["replicas"] = std::move(reps);
  o["leader_epoch"] = a.leader_epoch.value();
  o["version"] = a.version.value();
  o["in_sync"] = in_sync_json(a.in_sync);
  if (!a.target_replicas.empty()) {
    json::array t;
    for (auto& r : a.target_replicas) t.push_back(r.value());
    o["target_replicas"] = std::move(t);
  }
  return o;
}

json::object shard_status_json(const ShardStatus& s) {
  json::object o;
  o["shard"] = s.shard.value();
  o["incarnation"] = s.incarnation.value();
  o["generation"] = s.generation.value();
  o["leader"] = s.leader.value();
  json::array reps;
  for (auto& r : s.replicas) reps.push_back(r.value());
  o["replicas"] = std::move(reps);
  o["leader_epoch"] = s.leader_epoch.value();
  o["version"] = s.version.value();
  o["in_sync"] = in_sync_json(s.in_sync);
  if (!s.unavailable_reason.empty()) o["unavailable_reason"] = s.unavailable_reason;
  if (!s.target_replicas.empty()) {
    json::array t;
    for (auto& r : s.target_replicas) t.push_back(r.value());
    o["target_replicas"] = std::move(t);
    o["reassignment"] = s.reassignment;
  }
  o["log_start"] = s.stats.log_start.value();
  o["high_watermark"] = s.stats.high_watermark.value();
  o["size_bytes"] = s.stats.size_bytes;
  if (s.held) {
    // This node's replica (a follower's figures are its own; the leader's include the others).
    o["log_end"] = s.stats.log_end.value();
    o["leading"] = s.stats.leading;
    o["copy_lost"] = s.stats.copy_lost;
    if (!s.stats.replicas.empty()) {
      json::array prog;
      for (const auto& p : s.stats.replicas) {
        json::object e;
        e["broker"] = p.broker.value();
        e["directory_id"] = p.directory_id;
        e["durable_end"] = p.durable_end.value();
        e["high_watermark"] = p.high_watermark.value();
        // A follower holds only synced data; the leader's log end includes what it has
        // not synced yet.
        e["log_end"] = p.broker == s.leader ? s.stats.log_end.value() : p.durable_end.value();
        e["lag_ms"] = p.lag_ms;
        e["in_sync"] = p.in_sync;
        prog.push_back(std::move(e));
      }
      o["replica_progress"] = std::move(prog);
    }
  }
  return o;
}

json::object cluster_json(const NodeInfo& i) {
  json::object o;
  o["cluster_id"] = i.cluster_id;
  o["metadata_backend"] = i.metadata_backend;
  o["node_id"] = i.node_id.value();
  o["directory_id"] = i.directory_id;
  json::array roles;
  for (auto& r : i.roles) roles.push_back(json::string_view(r));
  o["roles"] = std::move(roles);
  o["version"] = i.version;
  o["metadata_level"] = i.metadata_level.value();
  return o;
}

HttpResponse json_response(int status, const json::value& v) {
  HttpResponse r;
  r.status = status;
  r.content_type = "application/json";
  r.body = json::serialize(v);
  return r;
}

HttpResponse json_response(int status, const json::object& v) {
  HttpResponse r;
  r.status = status;
  r.content_type = "application/json";
  r.body = json::serialize(v);
  return r;
}

}  // namespace sluice::http_api
