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


}  // namespace sluice::json_detail
