// Internal to the SDK's catalog codec (not installed): the strict field readers and
// writers shared by catalog_json.cc and catalog_json_payload.cc. Readers throw
// std::invalid_argument; decode_json and decode_change_payload turn that into
// malformed_body, so nothing throws past the codec.
#pragma once

#include <boost/json.hpp>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/catalog_json.h"

namespace sluice::json_detail {

namespace json = boost::json;

[[noreturn]] inline void refuse(std::string_view what) { throw std::invalid_argument(std::string(what)); }

inline const json::object& as_object(const json::value& v, std::string_view what) {
  if (!v.is_object()) refuse(std::string(what) + " must be an object");
  return v.get_object();
}

inline const json::value& field(const json::object& o, std::string_view k) {
  auto* p = o.if_contains(k);
  if (!p) refuse("missing field \"" + std::string(k) + "\"");
  return *p;
}

inline std::uint64_t u64_of(const json::value& v, std::string_view k) {
  if (v.is_uint64()) return v.get_uint64();
  if (v.is_int64() && v.get_int64() >= 0) return static_cast<std::uint64_t>(v.get_int64());
  refuse("\"" + std::string(k) + "\" must be an unsigned integer");
}

inline std::uint32_t u32_of(const json::value& v, std::string_view k) {
  std::uint64_t x = u64_of(v, k);
  if (x > std::numeric_limits<std::uint32_t>::max()) refuse("\"" + std::string(k) + "\" is out of range");
  return static_cast<std::uint32_t>(x);
}

inline std::uint64_t u64(const json::object& o, std::string_view k) { return u64_of(field(o, k), k); }
inline std::uint32_t u32(const json::object& o, std::string_view k) { return u32_of(field(o, k), k); }

inline std::int64_t i64(const json::object& o, std::string_view k) {
  auto& v = field(o, k);
  if (v.is_int64()) return v.get_int64();
  if (v.is_uint64() && v.get_uint64() <= static_cast<std::uint64_t>(INT64_MAX))
    return static_cast<std::int64_t>(v.get_uint64());
  refuse("\"" + std::string(k) + "\" must be an integer");
}

inline std::string str(const json::object& o, std::string_view k) {
  auto& v = field(o, k);
  if (!v.is_string()) refuse("\"" + std::string(k) + "\" must be a string");
  return std::string(v.get_string());
}

inline bool boolean(const json::object& o, std::string_view k) {
  auto& v = field(o, k);
  if (!v.is_bool()) refuse("\"" + std::string(k) + "\" must be a boolean");
  return v.get_bool();
}

inline const json::array& arr(const json::object& o, std::string_view k) {
  auto& v = field(o, k);
  if (!v.is_array()) refuse("\"" + std::string(k) + "\" must be an array");
  return v.get_array();
}

inline std::vector<std::string> strings(const json::object& o, std::string_view k) {
  std::vector<std::string> out;
  for (auto& e : arr(o, k)) {
    if (!e.is_string()) refuse("\"" + std::string(k) + "\" must hold strings");
    out.emplace_back(e.get_string());
  }
  return out;
}

inline std::vector<NodeId> node_ids(const json::object& o, std::string_view k) {
  std::vector<NodeId> out;
  for (auto& e : arr(o, k)) out.push_back(NodeId{u32_of(e, k)});
  return out;
}

template <class T>
inline std::vector<T> list(const json::object& o, std::string_view k) {
  std::vector<T> out;
  for (auto& e : arr(o, k)) out.push_back(json::value_to<T>(e));
  return out;
}

template <class T>
inline std::vector<T> optional_list(const json::object& o, std::string_view k) {
  return o.contains(k) ? list<T>(o, k) : std::vector<T>{};
}

inline json::array ids_json(const std::vector<NodeId>& v) {
  json::array a;
  for (auto x : v) a.emplace_back(x.value());
  return a;
}

inline json::array strings_json(const std::vector<std::string>& v) {
  json::array a;
  for (auto& x : v) a.emplace_back(x);
  return a;
}

// Level 16 (replicated shards): written only when set, so RF-1 values stay byte-identical.
inline bool has_replica_state(const Assignment& a) {
  return a.leader_epoch.value() != 0 || a.version.value() != 0 || !a.in_sync.empty();
}
inline bool has_replication(const StreamSpec& sp) {
  return sp.replication_factor != 1 || sp.min_insync != 1;
}
inline json::array in_sync_json(const std::vector<InSyncReplica>& v) {
  json::array a;
  for (auto& r : v) a.push_back(json::object{{"broker", r.broker.value()}, {"directory_id", r.directory_id}});
  return a;
}
inline std::vector<InSyncReplica> in_sync_of(const json::object& o, std::string_view k) {
  std::vector<InSyncReplica> out;
  for (auto& e : arr(o, k)) {
    auto& r = as_object(e, "in_sync entry");
    out.push_back(InSyncReplica{NodeId{u32(r, "broker")}, str(r, "directory_id")});
  }
  return out;
}
inline void put_replica_state(json::object& o, const Assignment& a) {
  if (!has_replica_state(a)) return;
  o["leader_epoch"] = a.leader_epoch.value();
  o["in_sync"] = in_sync_json(a.in_sync);
  o["version"] = a.version.value();
  if (!a.target_replicas.empty()) o["target_replicas"] = ids_json(a.target_replicas);
}
inline void get_replica_state(const json::object& o, Assignment& a) {
  if (o.contains("leader_epoch")) a.leader_epoch = LeaderEpoch{u64(o, "leader_epoch")};
  if (o.contains("in_sync")) a.in_sync = in_sync_of(o, "in_sync");
  if (o.contains("version")) a.version = ShardVersion{u64(o, "version")};
  if (o.contains("target_replicas")) a.target_replicas = node_ids(o, "target_replicas");
}
inline void put_replication(json::object& o, const StreamSpec& sp) {
  if (!has_replication(sp)) return;
  o["replication_factor"] = sp.replication_factor;
  o["min_insync"] = sp.min_insync;
}
inline void get_replication(const json::object& o, StreamSpec& sp) {
  if (o.contains("replication_factor")) sp.replication_factor = u32(o, "replication_factor");
  if (o.contains("min_insync")) sp.min_insync = u32(o, "min_insync");
}
inline std::string opt_str(const json::object& o, std::string_view k) {
  return o.contains(k) ? str(o, k) : std::string();
}

}  // namespace sluice::json_detail
