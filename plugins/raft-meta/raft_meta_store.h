// MetadataStore on a Raft group (ARCHITECTURE.md §5). This issue: a single-member group,
// durable on disk (libraft's uv io), surviving SIGKILL. Multi-member joins come later; the
// command format, level fields and cluster-id check are already shaped for them.
//
// Thread model
//   - raft thread (RaftNode): libraft, the uv io, CatalogFsm::apply, snapshot, restore.
//     apply holds fsm_mu_ only while touching the catalog, then wakes the delivery thread.
//   - delivery thread: one per store; runs every watch callback, one at a time, in
//     ChangeSeq order, reading the `changes` table under fsm_mu_ but calling user code
//     with no lock held.
//   - callers: any thread. Mutations block on RaftNode::apply (metadata.timeout_ms).
//     Reads are linearizable: a raft_barrier first (every entry committed before the read
//     began is applied), then a read of the applied state under fsm_mu_.
//
// Lock order: watch_mu_ and fsm_mu_ are never held together.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "catalog_fsm.h"
#include "raft_node.h"
#include "sluice/host.h"
#include "sluice/metadata.h"

namespace sluice::raft_meta {

// Configuration read from the host (documented in README.md).
struct RaftMetaConfig {
  std::string raft_dir;                        // raft.dir, default <data_dir>/raft
  std::string address = "127.0.0.1:7800";      // raft.address (raft.port overrides the port)
  unsigned snapshot_threshold = 1024;          // raft.snapshot_threshold
  unsigned snapshot_trailing = 128;            // raft.snapshot_trailing
  unsigned election_timeout_ms = 1000;         // raft.election_timeout_ms
  unsigned heartbeat_timeout_ms = 100;         // raft.heartbeat_timeout_ms
  std::chrono::milliseconds timeout{10000};    // metadata.timeout_ms
  std::chrono::milliseconds start_timeout{30000};  // metadata.start_timeout_ms
  // Changes kept for watchers. Part of the replicated state's meaning, so it is not read
  // from configuration: only tests change it, and all members must agree.
  std::size_t change_retention = kDefaultChangeRetention;

  // Throws std::invalid_argument on a malformed value (a configuration boundary).
  static RaftMetaConfig from_host(const PluginHost& host);
};

class RaftMetaStore final : public MetadataStore {
 public:
  // Reads the configuration (may throw std::invalid_argument); does no I/O.
  explicit RaftMetaStore(PluginHost& host);
  RaftMetaStore(PluginHost& host, RaftMetaConfig config);
  ~RaftMetaStore() override;

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
  Result<std::vector<StreamInfo>> list_streams(const std::string& tenant,
                                               const std::string& ns) override;
  Result<CatalogSnapshot> snapshot() override;
  std::unique_ptr<WatchHandle> watch(ChangeSeq after,
                                     std::function<void(const ChangeEvent&)> on_change,
                                     std::function<void()> resync) override;

  // For tests: the catalog's state hash (divergence checks).
  std::uint64_t state_hash();

  struct Watcher;  // one registered watch; defined in the .cc

 private:
  // The RaftStateMachine the node drives (raft thread): forwards to the catalog.
  class FsmAdapter final : public RaftStateMachine {
   public:
    explicit FsmAdapter(RaftMetaStore& s) : s_(s) {}
    ApplyResult apply(std::uint64_t index, std::string_view entry) override;
    std::string snapshot() override;
    Result<void> restore(std::string_view image) override;

   private:
    RaftMetaStore& s_;
  };
  void catalog_changed();  // wakes the delivery thread

  Result<ApplyResult> propose(const Command& c);
  Result<void> read_barrier();
  void log(LogLevel level, const std::string& msg);
  void delivery_main();
  void unregister(std::uint64_t id);

  PluginHost& host_;
  RaftMetaConfig cfg_;

  std::mutex fsm_mu_;
  CatalogFsm fsm_;  // guarded by fsm_mu_
  FsmAdapter adapter_{*this};

  std::mutex life_mu_;  // serializes start/stop
  std::mutex node_mu_;
  std::shared_ptr<RaftNode> node_;  // guarded by node_mu_; callers keep a copy while waiting
  std::shared_ptr<RaftNode> node();
  std::atomic<bool> ready_{false};
  std::atomic<bool> starting_{false};

  // Watches.
  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  std::map<std::uint64_t, std::shared_ptr<Watcher>> watchers_;  // guarded by watch_mu_
  std::uint64_t next_watch_id_ = 1;                               // guarded by watch_mu_
  std::uint64_t wake_seq_ = 0;        // bumped on every apply/restore; guarded by watch_mu_
  std::uint64_t delivering_ = 0;      // id whose callback runs now (0: none)
  bool delivery_stop_ = false;        // guarded by watch_mu_
  std::thread delivery_;
  std::thread::id delivery_id_;
};

}  // namespace sluice::raft_meta
