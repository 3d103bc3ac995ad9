// The host side of PluginHost: configuration from Config, identity from meta.properties,
// logging to stderr (journald picks it up under systemd).
#pragma once

#include <atomic>
#include <functional>
#include <mutex>

#include "config.h"
#include "identity.h"
#include "sluice/host.h"
#include "sluice/metadata.h"
#include "sluice/transport.h"

namespace sluice::core {

class NodeHost final : public PluginHost {
 public:
  NodeHost(const Config& config, DataDirIdentity& identity) : config_(config), id_(identity) {}

  // An absent key gives the caller's `def`, as sluice/host.h promises (not the documented
  // default of core/config_keys.cc: the plugin owns its defaults; the two are kept equal).
  std::string config_string(std::string_view key, std::string_view def) const override;
  std::int64_t config_int(std::string_view key, std::int64_t def) const override;
  bool config_bool(std::string_view key, bool def) const override;
  bool config_has(std::string_view key) const override { return config_.has(key); }
  NodeId node_id() const override { return id_.node_id(); }
  std::string directory_id() const override { return id_.directory_id(); }
  std::string data_dir() const override { return id_.dir(); }
  Result<void> adopt_cluster_id(const std::string& cluster_id) override;
  std::string cluster_id() const override { return id_.cluster_id(); }
  void log(LogLevel level, std::string_view component, std::string_view message) override;
  // The broker's peer transport (core/peer_transport.h), or null: set by main once the
  // cluster id is known, on nodes with the broker role; cleared before it is destroyed.
  PeerTransport* peer_transport() override { return transport_.load(); }
  void set_peer_transport(PeerTransport* t) { transport_.store(t); }
  // The shard compare-and-set goes to the metadata store: set by main once it has started,
  // cleared before it stops. Without one: unavailable.
  Result<Assignment> update_shard(const ShardUpdate& update) override {
    auto* m = metadata_.load();
    if (!m) return Error(Errc::unavailable, "the metadata store is not running");
    return m->update_shard(update);
  }
  void set_metadata(MetadataStore* m) { metadata_.store(m); }
  // The broker's word on fleet features (BrokerRuntime::feature_finalized): set by main
  // before the broker starts, cleared before it is destroyed. Without one: false.
  bool feature_finalized(std::string_view feature) const override {
    std::lock_guard lk(features_mu_);
    return features_ && features_(feature);
  }
  void set_feature_source(std::function<bool(std::string_view)> source) {
    std::lock_guard lk(features_mu_);
    features_ = std::move(source);
  }
  // Logs the reason and raises SIGTERM, which main's sigwait turns into the usual ordered
  // shutdown (a request during start-up waits, blocked, until the start finishes); main
  // then exits 1 (stop_requested()).
  void stop_node(std::string_view reason) override;
  bool stop_requested() const { return stop_requested_.load(); }

 private:
  const Config& config_;
  DataDirIdentity& id_;
  std::atomic<PeerTransport*> transport_{nullptr};
  std::atomic<MetadataStore*> metadata_{nullptr};
  std::atomic<bool> stop_requested_{false};
  mutable std::mutex features_mu_;
  std::function<bool(std::string_view)> features_;
};

}  // namespace sluice::core
