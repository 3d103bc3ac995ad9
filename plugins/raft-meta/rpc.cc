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

#include "raft_meta_store.h"
#include "rpc_codec.h"

namespace sluice::raft_meta {

namespace json = boost::json;
using namespace rpc;

namespace {

constexpr std::string_view kComponent = "raft-meta-rpc";
constexpr std::int64_t kMaxWaitMs = 30000;

bool split_host_port(const std::string& a, std::string& ip, int& port) {
  auto colon = a.rfind(':');
  if (colon == std::string::npos) return false;
  ip = a.substr(0, colon);
  try {
    port = std::stoi(a.substr(colon + 1));
  } catch (...) {
    return false;
  }
  return port >= 0 && port <= 65535;
}

void set_timeouts(int fd, std::chrono::milliseconds t) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(t.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((t.count() % 1000) * 1000);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

std::string ok_response(json::value result) {
  return json::serialize(json::object{{"ok", true}, {"result", std::move(result)}});
}
std::string error_response(const Error& e) {
  return json::serialize(json::object{{"ok", false}, {"error", to_json(e)}});
}
template <class T, class F>
std::string respond(const Result<T>& r, F f) {
  if (!r.ok()) return error_response(r.error());
  return ok_response(f(r.value()));
}
std::string respond_void(const Result<void>& r) {
  if (!r.ok()) return error_response(r.error());
  return ok_response(nullptr);
}
template <class T>
json::array to_array(const std::vector<T>& v) {
  json::array a;
  for (auto& x : v) a.push_back(to_json(x));
  return a;
}

}  // namespace

// --- server ---------------------------------------------------------------------------------

RpcServer::RpcServer(RaftMetaStore& store, PluginHost& host, std::string address)
    : store_(store), host_(host), address_(std::move(address)) {}

RpcServer::~RpcServer() { stop(); }

Result<void> RpcServer::start() {
  std::string ip;
  int port = 0;
  if (!split_host_port(address_, ip, port))
    return Error(Errc::invalid_argument, "metadata.rpc_address must be ip:port, got '" + address_ + "'");
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<std::uint16_t>(port));
  if (inet_pton(AF_INET, ip.c_str(), &sa.sin_addr) != 1)
    return Error(Errc::invalid_argument, "metadata.rpc_address: bad IPv4 address '" + ip + "'");
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
      ::listen(listen_fd_, 64) != 0) {
    std::string why = std::strerror(errno);
    ::close(listen_fd_);
    listen_fd_ = -1;
    return Error(Errc::unavailable, "cannot listen on metadata.rpc_address " + address_ + ": " + why);
  }
  socklen_t len = sizeof sa;
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&sa), &len);
  port_ = ntohs(sa.sin_port);
  if (::pipe2(wake_, O_CLOEXEC) != 0) {
    ::close(listen_fd_);
    listen_fd_ = -1;
    return Error(Errc::internal, "pipe2 failed");
  }
  stopping_ = false;
  acceptor_ = std::thread([this] { accept_main(); });
  host_.log(LogLevel::info, kComponent, "serving the catalog on " + ip + ":" + std::to_string(port_));
  return {};
}

void RpcServer::stop() {
  if (listen_fd_ < 0) return;
  stopping_ = true;
  char b = 1;
  (void)!::write(wake_[1], &b, 1);
  if (acceptor_.joinable()) acceptor_.join();
  std::map<int, std::thread> conns;
  std::vector<std::thread> done;
  {
    std::lock_guard lk(mu_);
    for (auto& [fd, t] : conns_) ::shutdown(fd, SHUT_RDWR);
    conns.swap(conns_);
    done.swap(finished_);
  }
  for (auto& [fd, t] : conns) t.join();
  for (auto& t : done) t.join();
  ::close(listen_fd_);
  ::close(wake_[0]);
  ::close(wake_[1]);
  listen_fd_ = -1;
}

void RpcServer::accept_main() {
  for (;;) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (::poll(p, 2, -1) < 0 && errno != EINTR) return;
    if (stopping_) return;
    if (!(p[0].revents & POLLIN)) continue;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::lock_guard lk(mu_);
    // Reap finished connection threads.
    for (auto& t : finished_) t.join();
    finished_.clear();
    conns_[fd] = std::thread([this, fd] { serve(fd); });
  }
}

void RpcServer::serve(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  for (;;) {
    std::string req, why;
    if (!read_frame(fd, req, &why)) {
      if (why != "closed" && !stopping_)
        host_.log(LogLevel::warn, kComponent, "closing connection: " + why);
      break;
    }
    bool close_after = false;
    std::string resp = handle(req, close_after);
    if (!write_frame(fd, resp, &why)) break;
    if (close_after) break;
  }
  std::lock_guard lk(mu_);
  auto it = conns_.find(fd);
  ::close(fd);
  if (it != conns_.end()) {
    finished_.push_back(std::move(it->second));
    conns_.erase(it);
  }
}

std::string RpcServer::handle(const std::string& request, bool& close_after) {
  boost::system::error_code ec;
  json::value v = json::parse(request, ec);
  if (ec || !v.is_object()) {
    close_after = true;
    host_.log(LogLevel::warn, kComponent, "closing connection: request is not a JSON object");
    return error_response(Error(Errc::malformed_body, "request is not a JSON object"));
  }
  try {
    auto& o = v.as_object();
    std::string method(o.at("method").as_string());
    std::string cid(o.at("cluster_id").as_string());
    const json::value empty = json::object{};
    const json::value& p = o.contains("params") ? o.at("params") : empty;
    const std::string mine = host_.cluster_id();
    if (method == "hello" && cid.empty()) return ok_response(json::object{{"cluster_id", mine}});
    if (cid != mine) {
      close_after = true;
      host_.log(LogLevel::warn, kComponent,
                "refused a request for cluster " + cid + " (this is cluster " + mine + ")");
      return error_response(Error(Errc::cluster_id_mismatch,
                                  "request names cluster '" + cid + "', this controller belongs to cluster '" +
                                      mine + "'"));
    }
    auto& po = p.as_object();
    // A request a member forwarded is answered here, never forwarded again.
    std::optional<RaftMetaStore::NoForward> no_forward;
    if (auto* f = o.if_contains("forwarded"); f && f->is_bool() && f->as_bool()) no_forward.emplace();
    auto str = [&](const char* k) { return std::string(po.at(k).as_string()); };
    auto node = [&] { return NodeId{po.at("id").to_number<std::uint32_t>()}; };
    if (method == "hello") return ok_response(json::object{{"cluster_id", mine}});
    if (method == "status") return ok_response(to_json(store_.status()));
    if (method == "create_tenant") return respond(store_.create_tenant(str("name")), [](auto& x) { return to_json(x); });
    if (method == "delete_tenant") return respond_void(store_.delete_tenant(str("name")));
    if (method == "list_tenants") return respond(store_.list_tenants(), [](auto& x) { return to_array(x); });
    if (method == "create_namespace")
      return respond(store_.create_namespace(str("tenant"), str("name")), [](auto& x) { return to_json(x); });
    if (method == "delete_namespace") return respond_void(store_.delete_namespace(str("tenant"), str("name")));
    if (method == "list_namespaces")
      return respond(store_.list_namespaces(str("tenant")), [](auto& x) { return to_array(x); });
    if (method == "create_stream")
      return respond(store_.create_stream(key_from(po.at("key")), spec_from(po.at("spec"))),
                     [](auto& x) { return to_json(x); });
    if (method == "delete_stream")
      return respond(store_.delete_stream(key_from(po.at("key"))), [](auto& x) { return to_json(x); });
    if (method == "get_stream")
      return respond(store_.get_stream(key_from(po.at("key"))), [](auto& x) { return to_json(x); });
    if (method == "list_streams")
      return respond(store_.list_streams(str("tenant"), str("ns")), [](auto& x) { return to_array(x); });
    if (method == "snapshot") return respond(store_.snapshot(), [](auto& x) { return to_json(x); });
    if (method == "register_broker")
      return respond(store_.register_broker(registration_from(po.at("broker"))), [](auto& x) { return to_json(x); });
    if (method == "heartbeat_broker") return respond_void(store_.heartbeat_broker(node()));
    if (method == "unregister_broker") return respond_void(store_.unregister_broker(node()));
    if (method == "list_brokers") return respond(store_.list_brokers(), [](auto& x) { return to_array(x); });
    if (method == "list_features") return respond(store_.list_features(), [](auto& x) { return to_array(x); });
    if (method == "finalize_feature")
      return respond(store_.finalize_feature(str("name")), [](auto& x) { return to_json(x); });
    if (method == "list_tombstones") return respond(store_.list_tombstones(), [](auto& x) { return to_array(x); });
    if (method == "create_cache")
      return respond(store_.create_cache(key_from(po.at("key")), cache_spec_from(po.at("spec"))),
                     [](auto& x) { return to_json(x); });
    if (method == "delete_cache")
      return respond(store_.delete_cache(key_from(po.at("key"))), [](auto& x) { return to_json(x); });
    if (method == "get_cache")
      return respond(store_.get_cache(key_from(po.at("key"))), [](auto& x) { return to_json(x); });
    if (method == "list_caches")
      return respond(store_.list_caches(str("tenant"), str("ns")), [](auto& x) { return to_array(x); });
    if (method == "list_members") return respond(store_.list_members(), [](auto& x) { return to_json(x); });
    if (method == "join_member")
      return respond(store_.join_member(join_from(po.at("member"))), [](auto& x) { return to_json(x); });
    if (method == "remove_member") return respond_void(store_.remove_member(node()));
    if (method == "member_status") return ok_response(to_json(store_.local_member_status()));
    if (method == "changes_after") {
      // A held member serves nothing from its state: a broker following it must move on.
      if (auto h = store_.held_error()) return error_response(*h);
      ChangeSeq after{po.at("seq").to_number<std::uint64_t>()};
      std::int64_t wait = std::clamp<std::int64_t>(po.at("wait_ms").to_number<std::int64_t>(), 0, kMaxWaitMs);
      auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait);
      for (;;) {
        // Long poll. A simple 5 ms re-check (no coupling to the apply path); see README.
        auto b = store_.changes_after(after, 256);
        if (b.resync || !b.events.empty() || std::chrono::steady_clock::now() >= deadline || stopping_) {
          json::array evs;
          for (auto& e : b.events) evs.push_back(to_json(e));
          return ok_response(json::object{{"resync", b.resync}, {"events", std::move(evs)}});
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
    return error_response(Error(Errc::invalid_argument, "unknown method '" + method + "'"));
  } catch (const std::exception& e) {
    close_after = true;
    host_.log(LogLevel::warn, kComponent, std::string("closing connection: malformed request: ") + e.what());
    return error_response(Error(Errc::malformed_body, std::string("malformed request: ") + e.what()));
  }
}

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
  return c;
}

RemoteMetadataStore::Conn::~Conn() { close(); }
void RemoteMetadataStore::Conn::close() {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

RemoteMetadataStore::RemoteMetadataStore(PluginHost& host)
    : RemoteMetadataStore(host, RemoteConfig::from_host(host)) {}
RemoteMetadataStore::RemoteMetadataStore(PluginHost& host, RemoteConfig cfg)
    : host_(host), cfg_(std::move(cfg)) {}
RemoteMetadataStore::~RemoteMetadataStore() { stop(); }

bool RemoteMetadataStore::connect(Conn& c, std::string& why) {
  c.close();
  for (auto& a : cfg_.controllers) {
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
    if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) {
      // Long polls wait up to kMaxWaitMs on the server: allow for it.
      set_timeouts(fd, cfg_.timeout + std::chrono::milliseconds(kMaxWaitMs));
      c.fd = fd;
      return true;
    }
    why = "connect " + a + ": " + std::strerror(errno);
    ::close(fd);
  }
  return false;
}

namespace {
// Methods whose repetition changes nothing more than the first call did.
bool idempotent_method(const std::string& m) {
  static const char* const kSafe[] = {
      "hello", "status", "member_status", "list_tenants", "list_namespaces", "get_stream",
      "list_streams", "snapshot", "list_brokers", "list_features", "list_tombstones",
      "changes_after", "get_cache", "list_caches", "list_members", "heartbeat_broker",
      "register_broker", "finalize_feature", "join_member"};
  for (const char* x : kSafe)
    if (m == x) return true;
  return false;
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
  json::object req{{"cluster_id", cid}, {"method", method}, {"params", json::parse(params_json)}};
  if (cfg_.forwarded) req["forwarded"] = true;
  const std::string body = json::serialize(req);
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
    std::string resp;
    if (!write_frame(c.fd, body, &why)) {
      c.close();
      continue;
    }
    if (!read_frame(c.fd, resp, &why)) {
      c.close();
      if (resend_safe) continue;
      ready_ = false;
      return Error(Errc::unavailable,
                   "the controller did not answer " + method + " (" + why + "); it may have happened",
                   Outcome::uncertain);
    }
    ready_ = true;
    boost::system::error_code ec;
    json::value v = json::parse(resp, ec);
    if (ec || !v.is_object()) {
      c.close();
      return Error(Errc::internal, "controller sent a malformed response");
    }
    auto& o = v.as_object();
    try {
      if (o.at("ok").as_bool()) return json::serialize(o.at("result"));
      Error e = error_from(o.at("error"));
      if (e.code == Errc::cluster_id_mismatch) c.close();
      return e;
    } catch (const std::exception& ex) {
      c.close();
      return Error(Errc::internal, std::string("controller response: ") + ex.what());
    }
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
  // Adopt before use (ARCHITECTURE.md §3): the host persists it, or refuses another id.
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
  host_.log(LogLevel::info, "raft-meta-remote", "connected to cluster " + id);
  return {};
}

void RemoteMetadataStore::stop() {
  started_ = false;
  ready_ = false;
  std::lock_guard lk(call_mu_);
  conn_.close();
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
    return Error(Errc::internal, std::string("controller response: ") + e.what());
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

Result<MemberInfo> probe_member_status(const std::string& rpc_address, PluginHost& host,
                                       std::chrono::milliseconds timeout) {
  RemoteConfig rc;
  rc.controllers = {rpc_address};
  rc.timeout = timeout;
  RemoteMetadataStore c(host, rc);
  if (auto r = c.start(); !r.ok()) return r.error();
  return c.member_status();
}

// --- remote watch ---------------------------------------------------------------------------

namespace {
class RemoteWatch final : public WatchHandle {
 public:
  RemoteWatch(RemoteMetadataStore& store, ChangeSeq after, std::function<void(const ChangeEvent&)> on_change,
              std::function<void()> resync)
      : store_(store), cursor_(after), on_change_(std::move(on_change)), resync_(std::move(resync)) {
    thread_ = std::thread([this] { run(); });
  }
  ~RemoteWatch() override {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
      if (conn_.fd >= 0) ::shutdown(conn_.fd, SHUT_RDWR);
    }
    cv_.notify_all();
    if (std::this_thread::get_id() == thread_.get_id())
      thread_.detach();  // destroyed from inside its own callback: it is the last one
    else
      thread_.join();
  }

 private:
  void run() {
    auto backoff = std::chrono::milliseconds(100);
    for (;;) {
      {
        std::lock_guard lk(mu_);
        if (stop_) return;
      }
      auto r = store_.call_on(conn_, "changes_after",
                              json::serialize(json::object{{"seq", cursor_.value()}, {"wait_ms", 1000}}),
                              /*retry=*/false);
      if (!r.ok()) {
        std::unique_lock lk(mu_);
        cv_.wait_for(lk, backoff, [&] { return stop_; });
        backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
        continue;
      }
      backoff = std::chrono::milliseconds(100);
      try {
        auto v = json::parse(r.value());
        auto& o = v.as_object();
        if (o.at("resync").as_bool()) {
          if (!stopped() && resync_) resync_();
          return;  // a resync ends the watch (as in RaftMetaStore)
        }
        for (auto& e : o.at("events").as_array()) {
          if (stopped()) return;
          auto ev = rpc::event_from(e);
          if (on_change_) on_change_(ev);
          cursor_ = ev.seq;
        }
      } catch (const std::exception&) {
        std::unique_lock lk(mu_);
        cv_.wait_for(lk, backoff, [&] { return stop_; });
      }
    }
  }
  bool stopped() {
    std::lock_guard lk(mu_);
    return stop_;
  }

  RemoteMetadataStore& store_;
  ChangeSeq cursor_;
  std::function<void(const ChangeEvent&)> on_change_;
  std::function<void()> resync_;
  RemoteMetadataStore::Conn conn_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};
}  // namespace

std::unique_ptr<WatchHandle> RemoteMetadataStore::watch(ChangeSeq after,
                                                        std::function<void(const ChangeEvent&)> on_change,
                                                        std::function<void()> resync) {
  return std::make_unique<RemoteWatch>(*this, after, std::move(on_change), std::move(resync));
}

}  // namespace sluice::raft_meta
