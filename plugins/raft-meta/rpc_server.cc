// The controller RPC server (rpc.h): acceptor, one thread per connection, dispatch.
#include "rpc.h"

#include <pthread.h>
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
#include <system_error>

#include "raft_meta_store.h"
#include "rpc_socket.h"
#include "rpc_codec.h"
#include "rpc_tls.h"
namespace sluice::raft_meta {

namespace json = boost::json;
using namespace rpc;
using namespace rpc_socket;

namespace {

std::string peer_name(const sockaddr_in& sa) {
  if (sa.sin_family != AF_INET) return "an unknown peer";
  char ip[INET_ADDRSTRLEN] = {0};
  inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof ip);
  return std::string(ip) + ":" + std::to_string(ntohs(sa.sin_port));
}

constexpr std::string_view kComponent = "raft-meta-rpc";

// Text a peer chose (its cluster id, what made its request malformed), for a log line:
// control bytes escaped, at most 200 bytes, so nobody forges or floods log lines (review).
std::string log_text(std::string_view s) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < s.size() && out.size() < 200; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      out += "\\x";
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  if (out.size() >= 200) out += "...";
  return out;
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

RpcServer::RpcServer(RaftMetaStore& store, PluginHost& host, std::string address,
                     std::shared_ptr<RpcTls> tls)
    : store_(store), host_(host), address_(std::move(address)), tls_(std::move(tls)) {}

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
  acceptor_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "meta-rpc-accept");
    accept_main();
  });
  host_.log(LogLevel::info, kComponent,
            "serving the catalog on " + ip + ":" + std::to_string(port_) +
                (tls_ ? " (TLS, client certificates required)" : ""));
  return {};
}

void RpcServer::stop() {
  if (listen_fd_ < 0) return;
  stopping_ = true;
  store_.wake_long_polls();  // held changes_after polls answer now
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
    if (::poll(p, 2, 1000) < 0 && errno != EINTR) return;
    if (stopping_) return;
    {
      // A connection without a whole first request by its deadline is shut down; its
      // thread sees the socket end and finishes (review: a per-read timeout let a client
      // that trickles a byte every few seconds hold its slot for ever).
      std::lock_guard lk(mu_);
      const auto now = std::chrono::steady_clock::now();
      for (auto it = awaiting_first_.begin(); it != awaiting_first_.end();) {
        if (it->second > now) {
          ++it;
          continue;
        }
        ::shutdown(it->first, SHUT_RDWR);
        host_.log(LogLevel::warn, kComponent, "closing a connection that sent no whole request within " +
                                                  std::to_string(kFirstRequest.count()) + " s");
        it = awaiting_first_.erase(it);
      }
    }
    if (!(p[0].revents & POLLIN)) continue;
    sockaddr_in peer{};
    socklen_t peer_len = sizeof peer;
    int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &peer_len, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::string from = peer_name(peer);
    std::lock_guard lk(mu_);
    // Reap finished connection threads.
    for (auto& t : finished_) t.join();
    finished_.clear();
    // A thread per connection, up to a bound: a flood of connections (authenticated or
    // not) cannot exhaust the process's threads.
    if (conns_.size() >= kMaxConnections) {
      ::close(fd);
      host_.log(LogLevel::warn, kComponent,
                "refused a connection from " + from + ": already " +
                    std::to_string(kMaxConnections) + " connections");
      continue;
    }
    try {
      std::thread t([this, fd, from] {
        pthread_setname_np(pthread_self(), "meta-rpc-conn");
        serve(fd, from);
      });
      conns_.emplace(fd, std::move(t));
      awaiting_first_[fd] = std::chrono::steady_clock::now() + kFirstRequest;
    } catch (const std::system_error& e) {
      ::close(fd);
      host_.log(LogLevel::warn, kComponent,
                "refused a connection from " + from + ": no thread for it: " + e.what());
    }
  }
}

void RpcServer::serve(int fd, const std::string& from) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  // A client whose machine vanished (no FIN) frees its connection slot in about a minute,
  // not the kernel's two hours (review).
  int idle = 30, intvl = 10, cnt = 3;
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
  // Its whole first request (and a TLS handshake) within kFirstRequest: the acceptor shuts
  // down a connection past that (awaiting_first_). After it a connection may stay idle, a
  // broker's between its calls.
  bool first = true;
  std::unique_ptr<rpc::ByteStream> io;
  if (tls_) {
    // A client that never completes the handshake holds this thread for 10 s at most.
    auto s = tls_->accept(fd, std::chrono::seconds(10));
    if (!s) {
      if (!stopping_) host_.log(LogLevel::warn, kComponent, "refused a connection from " +
                                                                from + ": " +
                                                                s.error().message);
    } else {
      io = std::move(*s);
    }
  } else {
    io = std::make_unique<rpc::PlainStream>(fd);
  }
  for (; io;) {
    std::string req, why;
    if (!read_frame(*io, req, &why)) {
      if (why != "closed" && !stopping_)
        host_.log(LogLevel::warn, kComponent, "closing connection: " + log_text(why));
      break;
    }
    if (first) {
      first = false;
      std::lock_guard lk(mu_);
      awaiting_first_.erase(fd);
    }
    bool close_after = false;
    std::string resp = handle(req, close_after);
    if (resp.size() > kMaxFrame) {
      // An answer over the frame limit (a snapshot or listing of a very large catalog) was
      // dropped with the connection, silently: the caller saw "closed" and retried for ever
      // (review finding). It gets an error naming the size instead, and the log says so.
      const Error big(Errc::internal, "the answer is " + std::to_string(resp.size()) +
                                          " bytes, above the controller call limit of " +
                                          std::to_string(kMaxFrame));
      host_.log(LogLevel::error, kComponent, big.message);
      resp = error_response(big);
    }
    if (!write_frame(*io, resp, &why)) break;
    if (close_after) break;
  }
  io.reset();
  std::lock_guard lk(mu_);
  awaiting_first_.erase(fd);  // before the fd is closed and its number reused
  auto it = conns_.find(fd);
  ::close(fd);
  if (it != conns_.end()) {
    finished_.push_back(std::move(it->second));
    conns_.erase(it);
  }
}

std::string RpcServer::handle(const std::string& request, bool& close_after) {
  auto req = decode_request(request);
  if (!req) {
    close_after = true;
    host_.log(LogLevel::warn, kComponent, "closing connection: " + log_text(req.error().message));
    return error_response(req.error());
  }
  try {
    const std::string& method = req->method;
    const std::string& cid = req->cluster_id;
    const json::value& p = req->params;
    const std::string mine = host_.cluster_id();
    if (method == "hello" && cid.empty()) return ok_response(json::object{{"cluster_id", mine}});
    if (cid != mine) {
      close_after = true;
      host_.log(LogLevel::warn, kComponent,
                "refused a request for cluster " + log_text(cid) + " (this is cluster " + mine + ")");
      return error_response(Error(Errc::cluster_id_mismatch,
                                  "request names cluster '" + cid + "', this controller belongs to cluster '" +
                                      mine + "'"));
    }
    auto& po = p.as_object();
    // A request a member forwarded is answered here, never forwarded again.
    std::optional<RaftMetaStore::NoForward> no_forward;
    if (req->forwarded) no_forward.emplace();
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
    if (method == "update_shard")
      return respond(store_.update_shard(json::value_to<ShardUpdate>(po.at("update"))),
                     [](auto& x) { return to_json(x); });
    if (method == "create_cache")
      return respond(store_.create_cache(key_from(po.at("key")), cache_spec_from(po.at("spec"))),
                     [](auto& x) { return to_json(x); });
    if (method == "delete_cache")
      return respond(store_.delete_cache(key_from(po.at("key"))), [](auto& x) { return to_json(x); });
    if (method == "get_cache")
      return respond(store_.get_cache(key_from(po.at("key"))), [](auto& x) { return to_json(x); });
    if (method == "list_caches")
      return respond(store_.list_caches(str("tenant"), str("ns")), [](auto& x) { return to_array(x); });
    if (method == "create_counter")
      return respond(store_.create_counter(key_from(po.at("key"))), [](auto& x) { return to_json(x); });
    if (method == "delete_counter")
      return respond(store_.delete_counter(key_from(po.at("key"))), [](auto& x) { return to_json(x); });
    if (method == "get_counter")
      return respond(store_.get_counter(key_from(po.at("key"))), [](auto& x) { return to_json(x); });
    if (method == "list_counters")
      return respond(store_.list_counters(str("tenant"), str("ns")), [](auto& x) { return to_array(x); });
    if (method == "list_members") return respond(store_.list_members(), [](auto& x) { return to_json(x); });
    if (method == "join_member")
      return respond(store_.join_member(join_from(po.at("member"))), [](auto& x) { return to_json(x); });
    if (method == "remove_member") return respond_void(store_.remove_member(node()));
    if (method == "member_status") return ok_response(to_json(store_.local_member_status()));
    if (method == "read_index") {
      auto r = store_.read_index();
      if (!r.ok()) return error_response(r.error());
      return ok_response(json::object{{"applied", r->value()}});
    }
    if (method == "changes_after") {
      // A held member serves nothing from its state: a broker following it must move on.
      if (auto h = store_.held_error()) return error_response(*h);
      ChangeSeq after{po.at("seq").to_number<std::uint64_t>()};
      std::int64_t wait = std::clamp<std::int64_t>(po.at("wait_ms").to_number<std::int64_t>(), 0, kMaxWaitMs);
      auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait);
      // Long poll, woken by the apply path (it used to re-check every 5 ms: 200 catalog
      // reads and wake-ups a second per watching broker; see README).
      auto b = store_.wait_changes_after(after, 256, deadline, stopping_);
      json::array evs;
      for (auto& e : b.events) evs.push_back(to_json(e));
      return ok_response(json::object{{"resync", b.resync}, {"events", std::move(evs)}});
    }
    return error_response(Error(Errc::invalid_argument, "unknown method '" + method + "'"));
  } catch (const std::exception& e) {
    close_after = true;
    host_.log(LogLevel::warn, kComponent, "closing connection: malformed request: " + log_text(e.what()));
    return error_response(Error(Errc::malformed_body, std::string("malformed request: ") + e.what()));
  }
}

}  // namespace sluice::raft_meta
