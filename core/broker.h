// The broker runtime: keeps the set of open shards equal to the catalog, and serves
// publish and fetch on them. It implements sluice::Node for the API plugin.
//
// Catalog application:
//
//   start():  snapshot() ──> open every shard of every stream ──> watch(snapshot.seq)
//                                  (a shard that fails recovery fails start: the node
//                                   exits naming the file and position)
//   watch callback (metadata thread) ──enqueue──> control thread applies, in seq order:
//       stream_created  -> open shards of (key, incarnation)
//       stream_deleted  -> close shards; at level 8 the data stays on disk, so a
//                          recreate reopens it (felix post-mortem, "before")
//       resync          -> snapshot(), reconcile, watch again
//
// Read-your-writes: catalog().create_stream / delete_stream return only after this broker
// has applied the change (or time out), so a 201 means the stream is servable here.
//
// Hot path: publish takes a shared lock to find the stream, builds one batch per shard
// touched (one allocation per batch, none per record) and appends; offsets come back
// through the storage callback. No lock is held across storage calls.
//
// Thread-safety: every public method may be called from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "sluice/metadata.h"
#include "sluice/host.h"
#include "sluice/node.h"
#include "sluice/storage.h"

namespace sluice::core {

struct BrokerOptions {
  std::uint32_t max_records_per_publish = 100000;
  std::int64_t catalog_timeout_ms = 10000;
};

class BrokerRuntime final : public Node {
 public:
  BrokerRuntime(NodeInfo info, MetadataStore& catalog, StorageEngine& storage, BrokerOptions opts,
                PluginHost& host);
  ~BrokerRuntime() override;

  // Applies the catalog snapshot and opens every shard. Fails if a shard cannot be
  // recovered (corruption) or the catalog is unreachable.
  Result<void> start();
  void stop();

  NodeInfo info() override;
  bool ready(std::string* why) override;
  std::string metrics_text() override;
  MetadataStore& catalog() override;
  Result<StreamInfo> create_stream(const StreamKey& key, const StreamSpec& spec) override;
  Result<StreamInfo> stream(const StreamKey& key) override;
  void publish(const StreamKey& key, const std::vector<PublishRecord>& records, AckMode ack,
               PublishCallback cb) override;
  Result<FetchResult> fetch(const StreamKey& key, ShardIndex shard, Offset from,
                            std::uint32_t max_records, std::size_t max_bytes) override;
  Result<ShardStats> shard_stats(const StreamKey& key, ShardIndex shard) override;
  Result<void> notify_when_beyond(const StreamKey& key, ShardIndex shard, Offset offset,
                                  std::function<void()> cb) override;
  Result<std::vector<ShardStatus>> shards(const StreamKey& key) override;

  // Blocks until the broker has applied every change up to `seq`, or the timeout.
  bool wait_applied(ChangeSeq seq, std::int64_t timeout_ms);

 private:
  struct StreamState {
    StreamInfo info;
    std::vector<std::shared_ptr<ShardLog>> shards;
    std::atomic<std::uint32_t> sticky{0};
  };
  struct Task {
    enum class Kind { change, resync } kind;
    ChangeEvent event;
  };
  class CatalogFacade;

  std::shared_ptr<StreamState> find(const StreamKey& key);
  Result<std::shared_ptr<ShardLog>> find_shard(const StreamKey& key, ShardIndex shard);
  Result<void> open_stream(const StreamInfo& info);
  void close_stream(const StreamKey& key, Incarnation inc);
  void apply(const ChangeEvent& ev);
  Result<void> resync();
  void control_loop();
  void enqueue(Task t);
  void mark_applied(ChangeSeq seq);

  NodeInfo info_;
  MetadataStore& catalog_;
  StorageEngine& storage_;
  BrokerOptions opts_;
  PluginHost& host_;
  std::unique_ptr<CatalogFacade> facade_;

  std::shared_mutex streams_mu_;
  std::map<StreamKey, std::shared_ptr<StreamState>> streams_;

  std::mutex applied_mu_;
  std::condition_variable applied_cv_;
  ChangeSeq applied_{0};
  std::string failure_;  // non-empty: a stream could not be opened; not ready

  std::mutex tasks_mu_;
  std::condition_variable tasks_cv_;
  std::deque<Task> tasks_;
  bool stopping_ = false;
  std::thread control_;
  std::unique_ptr<WatchHandle> watch_;
  std::atomic<bool> started_{false};

  // Metrics (monotonic counters).
  std::atomic<std::uint64_t> m_publish_requests_{0}, m_publish_records_{0}, m_publish_bytes_{0},
      m_publish_errors_{0}, m_fetch_requests_{0}, m_fetch_errors_{0};
};

}  // namespace sluice::core
