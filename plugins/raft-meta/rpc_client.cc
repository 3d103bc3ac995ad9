// The controller RPC client (rpc.h): RemoteMetadataStore's requests and connection.
#include "rpc.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <cerrno>
#include <cstring>

#include "rpc_socket.h"
#include "rpc_codec.h"
#include "rpc_tls.h"
namespace sluice::raft_meta {

namespace json = boost::json;
using namespace rpc;
using namespace rpc_socket;

// --- client ---------------------------------------------------------------------------------

RemoteConfig RemoteConfig::from_host(const PluginHost& host) {
  RemoteConfig c;
  std::string list = host.config_string("metadata.controllers", "127.0.0.1:7801");
  std::size_t i = 0;
  while (i <= list.size()) {
    auto j = list.find(',', i);
    if (j == std::string::npos) j = list.size();
    std::string a = list.substr(i, j - i);
    a.erase(0, a.find_first_not_of(' '));
    a.erase(a.find_last_not_of(' ') + 1);
    if (!a.empty()) {
      std::string ip;
      int port = 0;
      if (!split_host_port(a, ip, port) || port == 0)
        throw std::invalid_argument("metadata.controllers: '" + a + "' is not ip:port");
      c.controllers.push_back(a);
    }
    i = j + 1;
  }
  if (c.controllers.empty()) throw std::invalid_argument("metadata.controllers is empty");
  std::int64_t t = host.config_int("metadata.timeout_ms", 10000);
  if (t < 1) throw std::invalid_argument("metadata.timeout_ms must be >= 1");
  c.timeout = std::chrono::milliseconds(t);
  c.tls = RpcTls::from_host(host);
  return c;
}

RemoteMetadataStore::Conn::Conn() = default;
RemoteMetadataStore::Conn::~Conn() { close(); }
void RemoteMetadataStore::Conn::close() {
  io.reset();  // a TLS stream says close_notify on the still-open socket
  std::lock_guard lk(fd_mu);
  if (fd >= 0) ::close(fd);
  fd = -1;
}
void RemoteMetadataStore::Conn::interrupt() {
  std::lock_guard lk(fd_mu);
  if (fd >= 0) ::shutdown(fd, SHUT_RDWR);
}
void RemoteMetadataStore::Conn::set_fd(int new_fd) {
  std::lock_guard lk(fd_mu);
  fd = new_fd;
}

RemoteMetadataStore::RemoteMetadataStore(PluginHost& host)
    : RemoteMetadataStore(host, RemoteConfig::from_host(host)) {}
RemoteMetadataStore::RemoteMetadataStore(PluginHost& host, RemoteConfig cfg)
    : host_(host), cfg_(std::move(cfg)) {}
RemoteMetadataStore::~RemoteMetadataStore() {
  stop();
  join_retired(/*only_done=*/false);  // watch threads whose handles ended on them
}

namespace {
// ::connect, bounded by `timeout`: an address that drops SYNs (a leader's host gone, a
// partition) costs at most that, not the kernel's two minutes of retries. The socket is
// left blocking. On failure errno says why (ETIMEDOUT for the bound).
bool connect_within(int fd, const sockaddr_in& sa, std::chrono::milliseconds timeout) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) return false;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0) {
    if (errno != EINPROGRESS) return false;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    pollfd p{fd, POLLOUT, 0};
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                            deadline - std::chrono::steady_clock::now()).count();
      if (left <= 0) {
        errno = ETIMEDOUT;
        return false;
      }
      const int n = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1 << 30)));
      if (n > 0) break;
      if (n < 0 && errno != EINTR) return false;
    }
    int err = 0;
    socklen_t len = sizeof err;
    if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return false;
    if (err != 0) {
      errno = err;
      return false;
    }
  }
  return ::fcntl(fd, F_SETFL, flags) == 0;
}
}  // namespace

bool RemoteMetadataStore::connect(Conn& c, std::string& why) {
  c.close();
  const std::size_t n = cfg_.controllers.size();
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t at = (c.first + i) % n;
    const std::string& a = cfg_.controllers[at];
    std::string ip;
    int port = 0;
    split_host_port(a, ip, port);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<std::uint16_t>(port));
    if (inet_pton(AF_INET, ip.c_str(), &sa.sin_addr) != 1) {
      why = "bad address " + a;
      continue;
    }
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const auto connect_timeout =
        c.moving_on ? std::min<std::chrono::milliseconds>(cfg_.timeout, std::chrono::milliseconds(1000)) : cfg_.timeout;
    if (connect_within(fd, sa, connect_timeout)) {
      // Long polls wait up to kMaxWaitMs on the server: allow for it.
      set_timeouts(fd, cfg_.timeout + std::chrono::milliseconds(kMaxWaitMs));
      if (cfg_.tls) {
        // The handshake waits at most metadata.timeout_ms.
        auto s = cfg_.tls->connect(fd, cfg_.timeout);
        if (!s) {
          why = "controller RPC " + a + ": " + s.error().message;
          host_.log(LogLevel::warn, "raft-meta-remote", why);
          ::close(fd);
          continue;
        }
        c.io = std::move(*s);
      } else {
        c.io = std::make_unique<rpc::PlainStream>(fd);
      }
      c.set_fd(fd);
      c.first = at;
      c.moving_on = false;
      return true;
    }
    why = "connect " + a + ": " + std::strerror(errno);
    ::close(fd);
  }
  c.moving_on = false;
  return false;
}

namespace {
// Methods whose repetition changes nothing more than the first call did.
bool idempotent_method(const std::string& m) {
  static const char* const kSafe[] = {
      "hello", "status", "member_status", "read_index", "list_tenants", "list_namespaces", "get_stream",
      "list_streams", "snapshot", "list_brokers", "list_features", "list_tombstones",
      "changes_after", "get_cache", "list_caches", "get_counter", "list_counters", "list_members", "heartbeat_broker",
      "register_broker", "finalize_feature", "join_member"};
  for (const char* x : kSafe)
    if (m == x) return true;
  return false;
}
// Answers that say this member cannot serve the call, where another member may. A member
// that is not the leader forwards; it answers `not_leader` only when it cannot reach one.
bool moves_on(Errc code) {
  return code == Errc::unavailable || code == Errc::not_leader || code == Errc::cluster_id_mismatch;
}
}  // namespace

Result<std::string> RemoteMetadataStore::call_on(Conn& c, const std::string& method,
                                                 const std::string& params_json, bool retry) {
  std::string cid;
  {
    std::lock_guard lk(id_mu_);
    cid = cluster_id_;
  }
  if (cid.empty() && method != "hello")
    return Error(Errc::unavailable, "not connected to a controller yet (start() first)");
  const std::string body = encode_request(Request{cid, method, json::parse(params_json), cfg_.forwarded});
  // Nothing is sent: a definite refusal, not "unavailable, uncertain" (review finding).
  if (body.size() > kMaxFrame)
    return Error(Errc::invalid_argument, "the " + method + " request is " + std::to_string(body.size()) +
                                             " bytes; a controller call carries at most " +
                                             std::to_string(kMaxFrame) + " (nothing was sent)");
  std::string why;
  // One retry on a fresh connection: the old one may have been closed by the controller.
  // A request that changes the catalog and is not idempotent is re-sent only if it never
  // left (connect or write failed): once written, a lost answer may hide a change that
  // happened, and re-sending it would turn "created" into "already exists".
  const bool resend_safe = idempotent_method(method);
  for (int attempt = 0; attempt < (retry ? 2 : 1); ++attempt) {
    // A reused connection the controller closed while idle (a restart) is readable now
    // (EOF): the server never sends unasked, so reconnect before writing anything.
    if (c.fd >= 0) {
      pollfd p{c.fd, POLLIN | POLLRDHUP, 0};
      if (::poll(&p, 1, 0) > 0) c.close();
    }
    if (c.fd < 0 && !connect(c, why)) break;
    // Only a long poll may wait kMaxWaitMs more; any other call at most metadata.timeout_ms
    // plus 5 s (the controller answers its own timeout by then). It was 30 s more for every
    // call, with call_mu_ held: a hung controller held every caller 40 s (review).
    set_timeouts(c.fd, cfg_.timeout + std::chrono::milliseconds(method == "changes_after" ? kMaxWaitMs : 5000));
    std::string resp;
    if (!write_frame(*c.io, body, &why)) {
      c.close();
      continue;
    }
    if (!read_frame(*c.io, resp, &why)) {
      c.close();
      if (resend_safe) continue;
      ready_ = false;
      return Error(Errc::unavailable,
                   "the controller did not answer " + method + " (" + why + "); it may have happened",
                   Outcome::uncertain);
    }
    ready_ = true;
    bool malformed = false;
    auto answer = decode_response(resp, &malformed);
    if (malformed || (!answer && answer.error().code == Errc::cluster_id_mismatch)) c.close();
    if (!malformed && !answer && moves_on(answer.error().code) && cfg_.controllers.size() > 1) {
      // This member cannot serve (held at a change above its level, no quorum, stopping; not
      // the leader and cannot reach it; of another cluster): the next call starts at the next
      // controller instead of asking it again for ever.
      c.close();
      c.first = (c.first + 1) % cfg_.controllers.size();
      c.moving_on = true;
    }
    return answer;
  }
  ready_ = false;
  {
    std::lock_guard lk(id_mu_);
    last_error_ = why;
  }
  // A request may have reached the controller before the connection failed.
  return Error(Errc::unavailable, "no controller reachable (" + why + ")", Outcome::uncertain);
}

Result<std::string> RemoteMetadataStore::call(const std::string& method, const std::string& params) {
  std::lock_guard lk(call_mu_);
  return call_on(conn_, method, params);
}

Result<void> RemoteMetadataStore::start() {
  Result<std::string> r = Error(Errc::unavailable, "");
  {
    std::lock_guard lk(call_mu_);
    r = call_on(conn_, "hello", "{}");
  }
  if (!r.ok()) return Error(Errc::unavailable, "cannot reach a controller in metadata.controllers: " + r.error().message);
  std::string id;
  try {
    id = std::string(json::parse(r.value()).as_object().at("cluster_id").as_string());
  } catch (const std::exception& e) {
    return Error(Errc::internal, std::string("hello: ") + e.what());
  }
  if (id.empty()) return Error(Errc::unavailable, "the controller has no cluster id yet");
  // Adopt before use (docs/architecture.md "Identity"): the host persists it, or refuses another id.
  if (auto a = host_.adopt_cluster_id(id); !a.ok()) {
    ready_ = false;
    return Error(Errc::cluster_id_mismatch,
                 "controller belongs to cluster " + id + ", this node to " + host_.cluster_id() +
                     " (" + a.error().message + ")");
  }
  {
    std::lock_guard lk(id_mu_);
    cluster_id_ = id;
  }
  started_ = true;
  if (!cfg_.quiet) host_.log(LogLevel::info, "raft-meta-remote", "connected to cluster " + id);
  return {};
}

void RemoteMetadataStore::stop() {
  started_ = false;
  ready_ = false;
  std::lock_guard lk(call_mu_);
  conn_.close();
}

Result<void> RemoteMetadataStore::reload() {
  // The pooled connection keeps its session; the next connection presents the new pair.
  return cfg_.tls ? cfg_.tls->reload() : Result<void>{};
}

MetadataStatus RemoteMetadataStore::status() {
  MetadataStatus s;
  s.backend = "raft-remote";
  {
    std::lock_guard lk(id_mu_);
    s.cluster_id = cluster_id_;
  }
  if (!started_) {
    s.detail = "stopped";
    return s;
  }
  auto r = call("status", "{}");
  if (!r.ok()) {
    s.ready = false;
    s.detail = "controller unreachable: " + r.error().message;
    return s;
  }
  try {
    auto remote = status_from(json::parse(r.value()));
    s.ready = remote.ready;
    s.level = remote.level;
    s.applied = remote.applied;
    s.detail = "remote: " + remote.detail;
  } catch (const std::exception& e) {
    s.detail = e.what();
  }
  return s;
}

namespace {
template <class T, class F>
Result<T> decode(const Result<std::string>& r, F f) {
  if (!r.ok()) return r.error();
  try {
    const json::value v = json::parse(r.value());
    return f(v);
  } catch (const std::exception& e) {
    // The controller answered "ok": a write it carried was applied. Not being able to read
    // the answer (a newer controller's shape, a bug) must not say it failed (review).
    return Error(Errc::internal,
                 std::string("the controller answered ok but its answer could not be read (the call may have "
                             "taken effect): ") + e.what(),
                 Outcome::uncertain);
  }
}
Result<void> decode_void(const Result<std::string>& r) {
  if (!r.ok()) return r.error();
  return {};
}
template <class T, class F>
std::vector<T> list_of(const json::value& v, F f) {
  std::vector<T> out;
  for (auto& e : v.as_array()) out.push_back(f(e));
  return out;
}
std::string params(json::object o) { return json::serialize(o); }
}  // namespace

Result<TenantInfo> RemoteMetadataStore::create_tenant(const std::string& name) {
  return decode<TenantInfo>(call("create_tenant", params({{"name", name}})), tenant_from);
}
Result<void> RemoteMetadataStore::delete_tenant(const std::string& name) {
  return decode_void(call("delete_tenant", params({{"name", name}})));
}
Result<std::vector<TenantInfo>> RemoteMetadataStore::list_tenants() {
  return decode<std::vector<TenantInfo>>(call("list_tenants", "{}"),
                                         [](const json::value& v) { return list_of<TenantInfo>(v, tenant_from); });
}
Result<NamespaceInfo> RemoteMetadataStore::create_namespace(const std::string& t, const std::string& n) {
  return decode<NamespaceInfo>(call("create_namespace", params({{"tenant", t}, {"name", n}})), namespace_from);
}
Result<void> RemoteMetadataStore::delete_namespace(const std::string& t, const std::string& n) {
  return decode_void(call("delete_namespace", params({{"tenant", t}, {"name", n}})));
}
Result<std::vector<NamespaceInfo>> RemoteMetadataStore::list_namespaces(const std::string& t) {
  return decode<std::vector<NamespaceInfo>>(call("list_namespaces", params({{"tenant", t}})), [](const json::value& v) {
    return list_of<NamespaceInfo>(v, namespace_from);
  });
}
Result<StreamInfo> RemoteMetadataStore::create_stream(const StreamKey& key, const StreamSpec& spec) {
  return decode<StreamInfo>(call("create_stream", params({{"key", to_json(key)}, {"spec", to_json(spec)}})),
                            stream_from);
}
Result<StreamInfo> RemoteMetadataStore::delete_stream(const StreamKey& key) {
  return decode<StreamInfo>(call("delete_stream", params({{"key", to_json(key)}})), stream_from);
}
Result<StreamInfo> RemoteMetadataStore::get_stream(const StreamKey& key) {
  return decode<StreamInfo>(call("get_stream", params({{"key", to_json(key)}})), stream_from);
}
Result<std::vector<StreamInfo>> RemoteMetadataStore::list_streams(const std::string& t, const std::string& ns) {
  return decode<std::vector<StreamInfo>>(call("list_streams", params({{"tenant", t}, {"ns", ns}})),
                                         [](const json::value& v) { return list_of<StreamInfo>(v, stream_from); });
}
Result<CatalogSnapshot> RemoteMetadataStore::snapshot() {
  return decode<CatalogSnapshot>(call("snapshot", "{}"), snapshot_from);
}
Result<BrokerInfo> RemoteMetadataStore::register_broker(const BrokerRegistration& reg) {
  return decode<BrokerInfo>(call("register_broker", params({{"broker", to_json(reg)}})), broker_from);
}
Result<void> RemoteMetadataStore::heartbeat_broker(NodeId id) {
  return decode_void(call("heartbeat_broker", params({{"id", id.value()}})));
}
Result<void> RemoteMetadataStore::unregister_broker(NodeId id) {
  return decode_void(call("unregister_broker", params({{"id", id.value()}})));
}
Result<std::vector<BrokerInfo>> RemoteMetadataStore::list_brokers() {
  return decode<std::vector<BrokerInfo>>(call("list_brokers", "{}"),
                                         [](const json::value& v) { return list_of<BrokerInfo>(v, broker_from); });
}
Result<std::vector<FeatureInfo>> RemoteMetadataStore::list_features() {
  return decode<std::vector<FeatureInfo>>(call("list_features", "{}"),
                                          [](const json::value& v) { return list_of<FeatureInfo>(v, feature_from); });
}
Result<FeatureInfo> RemoteMetadataStore::finalize_feature(const std::string& name) {
  return decode<FeatureInfo>(call("finalize_feature", params({{"name", name}})), feature_from);
}
Result<std::vector<Tombstone>> RemoteMetadataStore::list_tombstones() {
  return decode<std::vector<Tombstone>>(call("list_tombstones", "{}"),
                                        [](const json::value& v) { return list_of<Tombstone>(v, tombstone_from); });
}

Result<Assignment> RemoteMetadataStore::update_shard(const ShardUpdate& u) {
  return decode<Assignment>(call("update_shard", params({{"update", to_json(u)}})), assignment_from);
}

Result<CacheInfo> RemoteMetadataStore::create_cache(const StreamKey& key, const CacheSpec& spec) {
  return decode<CacheInfo>(call("create_cache", params({{"key", to_json(key)}, {"spec", to_json(spec)}})),
                           cache_from);
}
Result<CacheInfo> RemoteMetadataStore::delete_cache(const StreamKey& key) {
  return decode<CacheInfo>(call("delete_cache", params({{"key", to_json(key)}})), cache_from);
}
Result<CacheInfo> RemoteMetadataStore::get_cache(const StreamKey& key) {
  return decode<CacheInfo>(call("get_cache", params({{"key", to_json(key)}})), cache_from);
}
Result<std::vector<CacheInfo>> RemoteMetadataStore::list_caches(const std::string& t, const std::string& ns) {
  return decode<std::vector<CacheInfo>>(call("list_caches", params({{"tenant", t}, {"ns", ns}})),
                                        [](const json::value& v) { return list_of<CacheInfo>(v, cache_from); });
}
Result<CounterInfo> RemoteMetadataStore::create_counter(const StreamKey& key) {
  return decode<CounterInfo>(call("create_counter", params({{"key", to_json(key)}})), counter_from);
}
Result<CounterInfo> RemoteMetadataStore::delete_counter(const StreamKey& key) {
  return decode<CounterInfo>(call("delete_counter", params({{"key", to_json(key)}})), counter_from);
}
Result<CounterInfo> RemoteMetadataStore::get_counter(const StreamKey& key) {
  return decode<CounterInfo>(call("get_counter", params({{"key", to_json(key)}})), counter_from);
}
Result<std::vector<CounterInfo>> RemoteMetadataStore::list_counters(const std::string& t, const std::string& ns) {
  return decode<std::vector<CounterInfo>>(
      call("list_counters", params({{"tenant", t}, {"ns", ns}})),
      [](const json::value& v) { return list_of<CounterInfo>(v, counter_from); });
}
Result<MembersView> RemoteMetadataStore::list_members() {
  return decode<MembersView>(call("list_members", "{}"), members_from);
}
Result<MemberInfo> RemoteMetadataStore::join_member(const JoinRequest& req) {
  return decode<MemberInfo>(call("join_member", params({{"member", to_json(req)}})), member_from);
}
Result<void> RemoteMetadataStore::remove_member(NodeId id) {
  return decode_void(call("remove_member", params({{"id", id.value()}})));
}
Result<MemberInfo> RemoteMetadataStore::member_status() {
  return decode<MemberInfo>(call("member_status", "{}"), member_from);
}
Result<ChangeSeq> RemoteMetadataStore::read_index() {
  return decode<ChangeSeq>(call("read_index", "{}"), [](const json::value& v) {
    return ChangeSeq{v.as_object().at("applied").to_number<std::uint64_t>()};
  });
}

Result<MemberInfo> probe_member_status(const std::string& rpc_address, PluginHost& host,
                                       std::chrono::milliseconds timeout,
                                       std::shared_ptr<RpcTls> tls) {
  RemoteConfig rc;
  rc.controllers = {rpc_address};
  rc.timeout = timeout;
  rc.tls = std::move(tls);
  rc.quiet = true;
  RemoteMetadataStore c(host, rc);
  if (auto r = c.start(); !r.ok()) return r.error();
  return c.member_status();
}

}  // namespace sluice::raft_meta
