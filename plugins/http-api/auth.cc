#include "auth.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "sluice/names.h"

namespace sluice::http_api {

bool origin_allowed(std::string_view origin, std::string_view host, const std::vector<std::string>& allowed) {
  if (origin.empty()) return true;
  auto same = [](std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
             return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
           });
  };
  for (const auto& a : allowed)
    if (a == "*" || same(a, origin)) return true;
  const auto scheme = origin.find("://");
  if (scheme == std::string_view::npos || host.empty()) return false;  // "null": an opaque origin
  return same(origin.substr(scheme + 3), host);
}

bool is_loopback(const std::string& address) {
  unsigned char b[16];
  if (::inet_pton(AF_INET, address.c_str(), b) == 1) return b[0] == 127;
  if (::inet_pton(AF_INET6, address.c_str(), b) != 1) return false;
  static constexpr unsigned char v6_loopback[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  static constexpr unsigned char v4_mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(b, v6_loopback, 16) == 0) return true;
  return std::memcmp(b, v4_mapped, 12) == 0 && b[12] == 127;
}

bool local_host_header(std::string_view host) {
  if (host.empty()) return true;
  std::string_view name = host;
  if (name.front() == '[') {
    const auto close = name.find(']');
    if (close == std::string_view::npos) return false;
    const std::string_view rest = name.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') return false;
    name = name.substr(1, close - 1);
  } else if (const auto colon = name.find(':'); colon != std::string_view::npos) {
    if (name.find(':', colon + 1) != std::string_view::npos) return false;  // not host:port
    name = name.substr(0, colon);
  }
  std::string lower(name);
  for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (!lower.empty() && lower.back() == '.') lower.pop_back();  // "localhost." is localhost
  return lower == "localhost" || is_loopback(lower);
}

namespace {

constexpr std::size_t kMaxFileBytes = 16u << 20;
constexpr std::size_t kMaxTokenBytes = 4096;

Error bad_line(std::size_t n, const std::string& msg) {
  return Error(Errc::invalid_argument, "line " + std::to_string(n) + ": " + msg);
}

bool valid_label(std::string_view s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') return false;
  return true;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// "ROLE[:SCOPE]" -> Grant.
Result<Grant> parse_grant(std::string_view word) {
  const auto colon = word.find(':');
  const std::string_view role = word.substr(0, colon);
  const std::string_view scope = colon == std::string_view::npos ? std::string_view{} : word.substr(colon + 1);
  Grant g;
  if (role == "admin" || role == "metrics") {
    g.role = role == "admin" ? Role::admin : Role::metrics;
    if (colon != std::string_view::npos)
      return Error(Errc::invalid_argument, "role '" + std::string(role) + "' takes no scope");
    return g;
  }
  if (role == "tenant-admin") g.role = Role::tenant_admin;
  else if (role == "produce") g.role = Role::produce;
  else if (role == "consume") g.role = Role::consume;
  else
    return Error(Errc::invalid_argument, "unknown role '" + std::string(role) +
                                             "' (roles: admin, metrics, tenant-admin, produce, consume)");
  if (colon == std::string_view::npos || scope.empty())
    return Error(Errc::invalid_argument, "role '" + std::string(role) + "' needs a scope, e.g. " +
                                             std::string(role) + ":TENANT");
  std::vector<std::string_view> parts;
  for (std::string_view rest = scope;;) {
    const auto slash = rest.find('/');
    parts.push_back(rest.substr(0, slash));
    if (slash == std::string_view::npos) break;
    rest.remove_prefix(slash + 1);
  }
  if (parts.size() > 3 || (g.role == Role::tenant_admin && parts.size() != 1))
    return Error(Errc::invalid_argument,
                 g.role == Role::tenant_admin ? "tenant-admin's scope is one tenant"
                                              : "a scope is TENANT, TENANT/NAMESPACE or TENANT/NAMESPACE/STREAM");
  static constexpr NameKind kinds[] = {NameKind::tenant, NameKind::ns, NameKind::stream};
  for (std::size_t i = 0; i < parts.size(); ++i)
    if (auto r = validate_name(kinds[i], parts[i]); !r) return r.error();
  g.tenant = std::string(parts[0]);
  if (parts.size() > 1) g.ns = std::string(parts[1]);
  if (parts.size() > 2) g.stream = std::string(parts[2]);
  return g;
}

// True if the grant's scope contains the path (tenant[/ns[/stream]]) the need names.
bool covers(const Grant& g, const Need& n) {
  if (g.tenant != n.tenant) return false;
  if (g.ns.empty()) return true;
  if (g.ns != n.ns) return false;
  if (g.stream.empty()) return true;
  return g.stream == n.stream;
}

}  // namespace

std::string_view to_string(Role r) {
  switch (r) {
    case Role::admin: return "admin";
    case Role::metrics: return "metrics";
    case Role::tenant_admin: return "tenant-admin";
    case Role::produce: return "produce";
    case Role::consume: return "consume";
  }
  return "?";
}

TokenHash sha256(std::string_view token) {
  TokenHash h{};
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), h.data());
  return h;
}

std::string to_hex(const TokenHash& h) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(64);
  for (unsigned char b : h) {
    out.push_back(digits[b >> 4]);
    out.push_back(digits[b & 15]);
  }
  return out;
}

Result<TokenTable> TokenTable::parse(std::string_view text) {
  TokenTable t;
  std::set<std::string, std::less<>> names;
  std::size_t line_no = 0;
  while (!text.empty()) {
    ++line_no;
    const auto eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text.remove_prefix(eol == std::string_view::npos ? text.size() : eol + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    for (char ch : line) {
      const unsigned char c = static_cast<unsigned char>(ch);
      if ((c < 0x20 && c != '\t') || c == 0x7f) return bad_line(line_no, "control character");
    }
    std::vector<std::string_view> words;
    for (std::size_t i = 0; i < line.size();) {
      if (line[i] == ' ' || line[i] == '\t') {
        ++i;
        continue;
      }
      std::size_t j = i;
      while (j < line.size() && line[j] != ' ' && line[j] != '\t') ++j;
      words.push_back(line.substr(i, j - i));
      i = j;
    }
    if (words.empty() || words[0].starts_with("#")) continue;
    if (words.size() < 3)
      return bad_line(line_no, "expected 'sha256:<64 hex digits> NAME ROLE[:SCOPE] ...'");
    const std::string_view h = words[0];
    if (!h.starts_with("sha256:") || h.size() != 7 + 64)
      return bad_line(line_no, "the first field must be sha256: and 64 hex digits (the token's SHA-256; "
                               "`sluice token hash` prints the line)");
    TokenEntry e;
    for (std::size_t i = 0; i < 32; ++i) {
      const int hi = hex_digit(h[7 + 2 * i]), lo = hex_digit(h[8 + 2 * i]);
      if (hi < 0 || lo < 0) return bad_line(line_no, "the hash has a character that is not a hex digit");
      e.hash[i] = static_cast<unsigned char>(hi * 16 + lo);
    }
    if (!valid_label(words[1]))
      return bad_line(line_no, "NAME must be 1 to 64 characters of [A-Za-z0-9._-]");
    e.name = std::string(words[1]);
    for (std::size_t i = 2; i < words.size(); ++i) {
      auto g = parse_grant(words[i]);
      if (!g) return bad_line(line_no, g.error().message);
      e.grants.push_back(std::move(*g));
    }
    if (!t.index_.emplace(e.hash, t.entries_.size()).second)
      return bad_line(line_no, "the same token hash appears twice");
    if (!names.insert(e.name).second) return bad_line(line_no, "the name '" + e.name + "' appears twice");
    t.entries_.push_back(std::move(e));
  }
  return t;
}

Result<TokenTable> TokenTable::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error(Errc::invalid_argument, "cannot read auth.tokens_file " + path);
  std::string text;
  char buf[65536];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    text.append(buf, static_cast<std::size_t>(in.gcount()));
    if (text.size() > kMaxFileBytes)
      return Error(Errc::invalid_argument, "auth.tokens_file " + path + " is larger than 16 MiB");
  }
  if (in.bad()) return Error(Errc::invalid_argument, "cannot read auth.tokens_file " + path);
  auto t = parse(text);
  if (!t) return Error(Errc::invalid_argument, "auth.tokens_file " + path + ": " + t.error().message);
  return t;
}

std::size_t TokenTable::HashOf::operator()(const TokenHash& h) const noexcept {
  std::size_t v;
  std::memcpy(&v, h.data(), sizeof v);  // already uniformly distributed
  return v;
}

bool TokenTable::SameHash::operator()(const TokenHash& a, const TokenHash& b) const noexcept {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

const TokenEntry* TokenTable::find(std::string_view token) const { return find_hash(sha256(token)); }

const TokenEntry* TokenTable::find_hash(const TokenHash& hash) const {
  const auto it = index_.find(hash);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

Need required(Route route, const std::vector<std::string>& s, std::string_view method, bool metrics_open) {
  Need n;
  const bool get = method == "GET";
  if (s.size() > 2 && s[1] == "tenants") n.tenant = s[2];
  if (s.size() > 4 && s[3] == "namespaces") n.ns = s[4];
  if (s.size() > 6 && s[5] == "streams") n.stream = s[6];
  switch (route) {
    case Route::healthz:
    case Route::readyz: n.kind = Need::open; break;
    case Route::metrics: n.kind = metrics_open ? Need::open : Need::metrics; break;
    case Route::cluster:
    case Route::openapi: n.kind = Need::any; break;
    case Route::fleet:
    case Route::members:
    case Route::tenants:
    case Route::shard_leader:
    case Route::shard_elect:
    case Route::shard_reassign: n.kind = Need::admin; break;
    case Route::tenant: n.kind = get ? Need::tenant_admin : Need::admin; break;
    case Route::namespaces:
      n.kind = get ? Need::read : Need::tenant_admin;
      break;
    case Route::namespace_:
    case Route::caches:
    case Route::counters:
    case Route::streams:
    case Route::stream:
      // Reads name the object; create and delete need the tenant's admin.
      n.kind = get ? Need::read : Need::tenant_admin;
      break;
    case Route::cache_keys:
    case Route::counter_keys:
      // A cache's or counter's keys: reading them is consuming, writing (adding) producing,
      // scoped to the tenant and namespace (a stream-level grant does not name either).
      n.kind = get ? Need::consume : Need::produce;
      break;
    case Route::shards: n.kind = Need::read; break;
    case Route::records: n.kind = Need::produce; break;
    case Route::shard_records:
    case Route::shard_subscribe:
    case Route::groups: n.kind = Need::consume; break;
  }
  if (n.kind == Need::tenant_admin) n.ns = n.stream = {};  // the tenant is the scope
  return n;
}

bool allows(const TokenEntry& e, const Need& n) {
  for (const auto& g : e.grants) {
    if (g.role == Role::admin) return true;
    switch (n.kind) {
      case Need::open:
      case Need::any: return true;
      case Need::admin: break;
      case Need::metrics:
        if (g.role == Role::metrics) return true;
        break;
      case Need::tenant_admin:
        if (g.role == Role::tenant_admin && g.tenant == n.tenant) return true;
        break;
      case Need::produce:
      case Need::consume:
      case Need::read:
        if (g.role == Role::tenant_admin && g.tenant == n.tenant) return true;
        if ((g.role == Role::produce && n.kind != Need::consume) ||
            (g.role == Role::consume && n.kind != Need::produce)) {
          if (covers(g, n)) return true;
        }
        break;
    }
  }
  return false;
}

std::string describe(const Need& n) {
  const std::string what = !n.stream.empty() ? "this stream" : !n.ns.empty() ? "this namespace" : "this tenant";
  switch (n.kind) {
    case Need::open:
    case Need::any: return "a valid token";
    case Need::admin: return "the admin role";
    case Need::metrics: return "the metrics or admin role";
    case Need::tenant_admin: return "the tenant-admin role on this tenant (or admin)";
    case Need::produce: return "the produce role on " + what + " (or tenant-admin of its tenant, or admin)";
    case Need::consume: return "the consume role on " + what + " (or tenant-admin of its tenant, or admin)";
    case Need::read:
      return "a produce or consume role on " + what + " (or tenant-admin of its tenant, or admin)";
  }
  return "?";
}

Result<std::string_view> bearer_token(std::string_view a) {
  if (a.empty()) return Error(Errc::unauthorized, "this request needs an 'Authorization: Bearer <token>' header");
  const auto sp = a.find(' ');
  std::string_view scheme = a.substr(0, sp);
  auto lower_eq = [](std::string_view x, std::string_view y) {
    if (x.size() != y.size()) return false;
    for (std::size_t i = 0; i < x.size(); ++i)
      if (std::tolower(static_cast<unsigned char>(x[i])) != y[i]) return false;
    return true;
  };
  if (!lower_eq(scheme, "bearer"))
    return Error(Errc::unauthorized, "the Authorization header's scheme is not Bearer");
  std::string_view tok = sp == std::string_view::npos ? std::string_view{} : a.substr(sp + 1);
  while (!tok.empty() && tok.front() == ' ') tok.remove_prefix(1);
  while (!tok.empty() && tok.back() == ' ') tok.remove_suffix(1);
  if (tok.empty() || tok.size() > kMaxTokenBytes)
    return Error(Errc::unauthorized, "the Authorization header carries no token, or one longer than 4096 bytes");
  for (char c : tok)
    if (static_cast<unsigned char>(c) <= 0x20 || static_cast<unsigned char>(c) >= 0x7f)
      return Error(Errc::unauthorized, "the bearer token has a character outside printable ASCII");
  return tok;
}

Result<std::size_t> TokenStore::reload() {
  auto t = TokenTable::load(path_);
  if (!t) return t.error();
  const std::size_t n = t->size();
  table_.store(std::make_shared<const TokenTable>(std::move(*t)), std::memory_order_release);
  return n;
}

}  // namespace sluice::http_api
