// The controller RPC (phase 2): lets a broker-only sluiced reach the catalog of a
// controller process.
//
// Wire: TCP, frames `u32 length (little-endian, max 8 MiB) | JSON object`.
//   request  {"cluster_id": "<id or empty>", "method": "...", "params": {...}}
//   response {"ok": true, "result": ...} | {"ok": false, "error": {"code","message","outcome"}}
// Only `hello` may be sent with an empty cluster_id (it answers the controller's id); every
// other request must carry the controller's cluster id, else the answer is
// cluster_id_mismatch naming both ids and the connection is closed. A malformed, truncated
// or oversized frame closes that connection with a logged reason; the server keeps serving.
//
// Thread model (RpcServer): one acceptor thread (poll on the listening socket and a wake
// pipe) and one thread per connection with blocking sockets. Requests call the
// RaftMetaStore's public methods, which hand work to the raft thread as any caller does.
// `changes_after(seq, wait_ms)` long-polls on the connection's own thread. stop() shuts
// every socket down and joins every thread.
//
// RemoteMetadataStore: MetadataStore over that RPC. One request connection (requests are
// serialized by a mutex), reconnecting over `metadata.controllers` on failure; each watch
// has its own delivery thread and connection, long-polling changes_after, reconnecting with
// backoff (100 ms doubling to 2 s). ready=false while no controller answers.
//
// Files: rpc_server.cc (RpcServer), rpc_client.cc (requests), remote_watch.cc (watches,
// with the SDK fan-out of watch_registry.h), rpc_socket.h (shared socket helpers).
#pragma once

#include <atomic>
#include <condition_variable>
#include <list>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sluice/host.h"
#include "sluice/metadata.h"

namespace sluice::raft_meta {

class RaftMetaStore;
class RpcTls;
namespace rpc {
struct ByteStream;
}

class RpcServer {
 public:
  // `tls` null: plain TCP; else TLS with client certificates only (rpc_tls.h).
  RpcServer(RaftMetaStore& store, PluginHost& host, std::string address,
            std::shared_ptr<RpcTls> tls = nullptr);
  ~RpcServer();
  // Binds and starts serving. The bound port is port() (useful with port 0).
  Result<void> start();
  void stop();
  int port() const { return port_; }

 private:
  // Connections served at once (each has a thread); more are closed at once, logged.
  static constexpr std::size_t kMaxConnections = 1024;
  static constexpr std::chrono::seconds kFirstRequest{10};
  void accept_main();
  void serve(int fd, const std::string& from);  // `from`: the peer's ip:port
  std::string handle(const std::string& request, bool& close_after);

  RaftMetaStore& store_;
  PluginHost& host_;
  std::string address_;
  std::shared_ptr<RpcTls> tls_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  std::mutex mu_;
  std::map<int, std::thread> conns_;  // guarded by mu_
  // Connections that have not sent a whole first request, and when they must have: the
  // acceptor shuts down those past it (a client that trickles its first frame, or sends
  // nothing, holds a slot and a thread for 10 s at most). Guarded by mu_.
  std::map<int, std::chrono::steady_clock::time_point> awaiting_first_;
  std::vector<std::thread> finished_;  // guarded by mu_
};

struct RemoteConfig {
  std::vector<std::string> controllers;  // metadata.controllers
  std::chrono::milliseconds timeout{10000};  // metadata.timeout_ms (socket timeouts)
  // Requests say they were forwarded by a member: the receiver does not forward them again.
  bool forwarded = false;
  // metadata.rpc_tls.*: null for plain TCP (rpc_tls.h).
  std::shared_ptr<RpcTls> tls;
  // A short-lived probe (a member's status, a read index): no "connected" line per call.
  bool quiet = false;
  static RemoteConfig from_host(const PluginHost& host);
};

class RemoteMetadataStore final : public MetadataStore {
 public:
  explicit RemoteMetadataStore(PluginHost& host);
  RemoteMetadataStore(PluginHost& host, RemoteConfig cfg);
  ~RemoteMetadataStore() override;

  Result<void> start() override;
  void stop() override;
  MetadataStatus status() override;
  Result<TenantInfo> create_tenant(const std::string& name) override;
  Result<void> delete_tenant(const std::string& name) override;
  Result<std::vector<TenantInfo>> list_tenants() override;
  Result<NamespaceInfo> create_namespace(const std::string& tenant, const std::string& name) override;
  Result<void> delete_namespace(const std::string& tenant, const std::string& name) override;
  Result<std::vector<NamespaceInfo>> list_namespaces(const std::string& tenant) override;
  Result<StreamInfo> create_stream(const StreamKey& key, const StreamSpec& spec) override;
  Result<StreamInfo> delete_stream(const StreamKey& key) override;
  Result<StreamInfo> get_stream(const StreamKey& key) override;
  Result<std::vector<StreamInfo>> list_streams(const std::string& tenant, const std::string& ns) override;
  Result<CatalogSnapshot> snapshot() override;
  Result<BrokerInfo> register_broker(const BrokerRegistration& reg) override;
  Result<void> heartbeat_broker(NodeId id) override;
  Result<void> unregister_broker(NodeId id) override;
  Result<std::vector<BrokerInfo>> list_brokers() override;
  Result<std::vector<FeatureInfo>> list_features() override;
  Result<FeatureInfo> finalize_feature(const std::string& name) override;
  Result<std::vector<Tombstone>> list_tombstones() override;
  Result<Assignment> update_shard(const ShardUpdate& update) override;
  Result<CacheInfo> create_cache(const StreamKey& key, const CacheSpec& spec) override;
  Result<CacheInfo> delete_cache(const StreamKey& key) override;
  Result<CacheInfo> get_cache(const StreamKey& key) override;
  Result<std::vector<CacheInfo>> list_caches(const std::string& tenant, const std::string& ns) override;
  Result<CounterInfo> create_counter(const StreamKey& key) override;
  Result<CounterInfo> delete_counter(const StreamKey& key) override;
  Result<CounterInfo> get_counter(const StreamKey& key) override;
  Result<std::vector<CounterInfo>> list_counters(const std::string& tenant, const std::string& ns) override;
  // SIGHUP: the controller RPC's client certificates (metadata.rpc_tls.*), if set.
  Result<void> reload() override;
  Result<MembersView> list_members() override;
  Result<MemberInfo> join_member(const JoinRequest& req) override;
  Result<void> remove_member(NodeId id) override;
  // The answering member's own status (never forwarded).
  Result<MemberInfo> member_status();
  // The leader's read index (RaftMetaStore::read_index); another member answers
  // not_leader.
  Result<ChangeSeq> read_index();
  std::unique_ptr<WatchHandle> watch(ChangeSeq after, std::function<void(const ChangeEvent&)> on_change,
                                     std::function<void()> resync) override;

  // One request on a connection of its own (`fd` is reconnected as needed). Public for
  // the watch threads.
  struct Conn {
    int fd = -1;
    std::unique_ptr<rpc::ByteStream> io;  // over fd: plain or TLS
    // The index in metadata.controllers connect() tries first: the one it last reached, or
    // the next one after a controller that answered `unavailable` (a held member, one
    // without a quorum), so a connection does not stick to a member that cannot serve.
    std::size_t first = 0;
    // Set when moving on from a member that answered unavailable: that one is reachable,
    // so the others get a short connect timeout (1 s), not metadata.timeout_ms each.
    bool moving_on = false;
    Conn();
    ~Conn();
    void close();
    // Ends a blocking call on this connection from another thread (shutdown(2) under the
    // lock that close() and connect() take: never a reused descriptor number).
    void interrupt();
    void set_fd(int new_fd);
    std::mutex fd_mu;
  };
  // `retry`: one more attempt on a fresh connection after an I/O failure.
  Result<std::string> call_on(Conn& c, const std::string& method, const std::string& params_json,
                              bool retry = true);

  // For a watch handle destroyed on its own thread (remote_watch.cc): the store joins that
  // thread later, once `done`, and at the latest in its destructor.
  void retire_watch_thread(std::thread t, std::shared_ptr<const std::atomic<bool>> done);

 private:
  Result<std::string> call(const std::string& method, const std::string& params_json);
  bool connect(Conn& c, std::string& why);

  PluginHost& host_;
  RemoteConfig cfg_;
  std::mutex call_mu_;
  Conn conn_;  // guarded by call_mu_
  std::atomic<bool> ready_{false};
  std::atomic<bool> started_{false};
  std::mutex id_mu_;
  std::string cluster_id_;  // guarded by id_mu_; set only after adopt_cluster_id succeeded
  std::string last_error_;  // guarded by id_mu_

  struct Retired {
    std::thread thread;
    std::shared_ptr<const std::atomic<bool>> done;
  };
  void join_retired(bool only_done);
  std::mutex retired_mu_;
  std::vector<Retired> retired_;  // guarded by retired_mu_
};

// Asks the member at `rpc_address` for its own status (one short-lived connection).
Result<MemberInfo> probe_member_status(const std::string& rpc_address, PluginHost& host,
                                       std::chrono::milliseconds timeout,
                                       std::shared_ptr<RpcTls> tls);

}  // namespace sluice::raft_meta
