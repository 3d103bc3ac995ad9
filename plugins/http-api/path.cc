#include "path.h"

#include <charconv>
#include <string>

namespace sluice::http_api {

namespace {
int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
}  // namespace

std::optional<std::string> percent_decode(std::string_view in, bool plus_is_space) {
  std::string out;
  out.reserve(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    const char c = in[i];
    if (c == '%') {
      if (i + 2 >= in.size()) return std::nullopt;
      const int hi = hexval(in[i + 1]);
      const int lo = hexval(in[i + 2]);
      if (hi < 0 || lo < 0) return std::nullopt;
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::optional<std::string_view> Target::param(std::string_view name) const {
  std::optional<std::string_view> v;
  for (auto& [k, val] : query)
    if (k == name) v = val;
  return v;
}

std::optional<Target> parse_target(std::string_view target) {
  if (target.empty() || target.front() != '/') return std::nullopt;
  Target t;
  std::string_view path = target, query;
  if (auto q = target.find('?'); q != std::string_view::npos) {
    path = target.substr(0, q);
    query = target.substr(q + 1);
  }
  if (auto h = query.find('#'); h != std::string_view::npos) query = query.substr(0, h);
  path.remove_prefix(1);
  if (!path.empty()) {
    while (true) {
      const auto slash = path.find('/');
      auto dec = percent_decode(path.substr(0, slash), false);
      if (!dec) return std::nullopt;
      t.segments.push_back(std::move(*dec));
      if (slash == std::string_view::npos) break;
      path.remove_prefix(slash + 1);
    }
  }
  while (!query.empty()) {
    const auto amp = query.find('&');
    std::string_view kv = query.substr(0, amp);
    if (!kv.empty()) {
      const auto eq = kv.find('=');
      auto k = percent_decode(kv.substr(0, eq), true);
      auto v = percent_decode(eq == std::string_view::npos ? std::string_view{} : kv.substr(eq + 1),
                              true);
      if (!k || !v) return std::nullopt;
      t.query.emplace_back(std::move(*k), std::move(*v));
    }
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return t;
}

std::optional<std::uint64_t> parse_u64(std::string_view s) {
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

Result<std::uint64_t> u64_param(const Target& t, const char* name, std::uint64_t def,
                                std::uint64_t lo, std::uint64_t hi) {
  auto p = t.param(name);
  if (!p) return def;
  auto v = parse_u64(*p);
  if (!v || *v < lo || *v > hi)
    return Error(Errc::invalid_argument, std::string(name) + " must be an integer between " +
                                             std::to_string(lo) + " and " + std::to_string(hi));
  return *v;
}

}  // namespace sluice::http_api
