// Bearer-token authentication and role-based authorization of the HTTP API
// (docs/security.md is the contract: the tokens file format, the roles table, the order of
// checks). Beast-free and pure apart from TokenStore's file reads.
//
// The tokens file holds one token per line, as the SHA-256 of the token, a name (for logs;
// never the token) and its grants:
//
//   sha256:<64 hex digits>  NAME  ROLE[:SCOPE] [ROLE[:SCOPE] ...]
//
// ROLE is admin | metrics (no scope), tenant-admin:TENANT, produce:SCOPE or consume:SCOPE
// where SCOPE is TENANT, TENANT/NAMESPACE or TENANT/NAMESPACE/STREAM. '#' starts a comment
// line. Any malformed line rejects the whole file (with its line number).
//
// Authorization is decided from the route and its path segments alone, before anything
// looks the resource up, so a refusal never tells whether the resource exists.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "routes.h"
#include "sluice/error.h"

namespace sluice::http_api {

enum class Role { admin, metrics, tenant_admin, produce, consume };

// May a WebSocket upgrade with this Origin header go on? Browsers apply no same-origin
// policy to WebSockets, so without this any web page a user opens could subscribe, with
// the user's network position (and, without auth, no token at all). Yes when there is no
// Origin, when it names the Host header's authority (several non-browser client libraries
// send the URL as their Origin), or when `allowed` lists it (ASCII case-insensitive) or
// holds "*". Under DNS rebinding Origin and Host both name the attacker's site; a node
// without auth refuses such a Host before this (local_host_header), and a node with auth
// has no ambient credential a page could use (tokens are not cookies).
bool origin_allowed(std::string_view origin, std::string_view host, const std::vector<std::string>& allowed);

// Does this Host header name the local machine (127.0.0.0/8, ::1, localhost, any port)?
// A node without auth serves only such requests (Router::dispatch): a web page that
// rebinds its own name to 127.0.0.1 (DNS rebinding) sends its own name as the Host.
// An absent Host (HTTP/1.0; never a browser) counts as local.
bool local_host_header(std::string_view host);

// True for an IPv4 address in 127.0.0.0/8, ::1 and ::ffff:127.x.y.z.
bool is_loopback(const std::string& address);
std::string_view to_string(Role);

// A role on a scope: tenant, tenant/ns or tenant/ns/stream (empty levels are wildcards;
// admin and metrics have no scope).
struct Grant {
  Role role = Role::admin;
  std::string tenant, ns, stream;
};

using TokenHash = std::array<unsigned char, 32>;

struct TokenEntry {
  TokenHash hash{};
  std::string name;
  std::vector<Grant> grants;
};

// SHA-256 of `token`, raw and as 64 lowercase hex digits.
TokenHash sha256(std::string_view token);
std::string to_hex(const TokenHash& h);

// A parsed tokens file. Immutable once built.
class TokenTable {
 public:
  // Errc::invalid_argument naming the first bad line ("line N: ...").
  static Result<TokenTable> parse(std::string_view text);
  // Reads and parses `path` (at most 16 MiB).
  static Result<TokenTable> load(const std::string& path);

  // The entry whose hash is SHA-256(token), or null: one SHA-256 and a hash-table probe
  // (about 0.5 us whatever the number of tokens). The probe is keyed by the SHA-256 of what
  // the client sent, never by a secret, and hashes are compared with CRYPTO_memcmp
  // (constant time), so timing tells nothing about the stored tokens (docs/security.md).
  const TokenEntry* find(std::string_view token) const;
  const TokenEntry* find_hash(const TokenHash& hash) const;  // by the token's SHA-256
  std::size_t size() const { return entries_.size(); }

 private:
  struct HashOf {
    std::size_t operator()(const TokenHash& h) const noexcept;
  };
  struct SameHash {
    bool operator()(const TokenHash& a, const TokenHash& b) const noexcept;
  };
  std::vector<TokenEntry> entries_;
  std::unordered_map<TokenHash, std::size_t, HashOf, SameHash> index_;  // hash -> entries_ index
};

// What a request needs, from its route, method and path segments.
struct Need {
  enum Kind {
    open,          // no token (healthz, readyz; metrics with auth.metrics_open)
    any,           // any valid token (cluster info, openapi.yaml)
    admin,         // the admin role
    metrics,       // admin or metrics
    tenant_admin,  // tenant-admin of `tenant` (or admin)
    produce,       // produce covering the path (or tenant-admin of its tenant, or admin)
    consume,       // consume covering the path (...)
    read,          // produce or consume covering the path (...): catalog reads
  } kind = admin;
  // The resource the path names, as far as it goes (empty levels are absent). Owned: a
  // subscription keeps its Need to check again long after the request's path is gone
  // (review finding: views into it were read after it was freed).
  std::string tenant, ns, stream;
};
Need required(Route route, const std::vector<std::string>& segments, std::string_view method,
              bool metrics_open);
// True if one of the entry's grants covers `need`.
bool allows(const TokenEntry& entry, const Need& need);
// How docs/security.md names a Need in a 403's detail ("the produce role on this stream").
std::string describe(const Need& need);

// The token of an "Authorization: Bearer <token>" header value. Errors (Errc::unauthorized)
// say what is wrong without echoing the header.
Result<std::string_view> bearer_token(std::string_view authorization);

// The tokens file currently in force; swapped whole by reload(). Thread-safe.
class TokenStore {
 public:
  explicit TokenStore(std::string path) : path_(std::move(path)) {}
  // Loads the file; on error the previous table (if any) stays in force.
  Result<std::size_t> reload();
  std::shared_ptr<const TokenTable> current() const { return table_.load(std::memory_order_acquire); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::atomic<std::shared_ptr<const TokenTable>> table_;
};

}  // namespace sluice::http_api
