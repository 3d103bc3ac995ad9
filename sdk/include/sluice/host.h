// What the host offers every plugin: configuration, identity, logging, and to a storage
// plugin the peer transport and the catalog's shard compare-and-set (docs/replication.md).
//
// Thread-safety: all methods may be called from any thread, at any time between the
// plugin's create() and destroy().
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "sluice/error.h"
#include "sluice/metadata.h"
#include "sluice/types.h"

namespace sluice {

class PeerTransport;

enum class LogLevel { debug, info, warn, error };

class PluginHost {
 public:
  virtual ~PluginHost() = default;

  // Configuration lookups by documented key (docs/configuration.md). Typed getters
  // return `def` when the key is absent and throw std::invalid_argument only from
  // create() when a value does not parse (a configuration boundary).
  virtual std::string config_string(std::string_view key, std::string_view def) const = 0;
  virtual std::int64_t config_int(std::string_view key, std::int64_t def) const = 0;
  virtual bool config_bool(std::string_view key, bool def) const = 0;
  virtual bool config_has(std::string_view key) const = 0;

  // The node's identity. data_dir() is the directory holding meta.properties; a plugin
  // keeps its files under a subdirectory named after itself.
  virtual NodeId node_id() const = 0;
  virtual std::string directory_id() const = 0;
  virtual std::string data_dir() const = 0;

  // Called by the metadata plugin once it has learned the cluster id from its store.
  // The host persists it to meta.properties (fsynced) before returning, and refuses a
  // mismatch with an error naming both ids. Only after an ok result may the id be used.
  virtual Result<void> adopt_cluster_id(const std::string& cluster_id) = 0;
  virtual std::string cluster_id() const = 0;  // empty until adopted

  // One line, prefixed with time, level and `component`.
  virtual void log(LogLevel level, std::string_view component, std::string_view message) = 0;

  // --- replication (docs/replication.md) -------------------------------------------
  // The broker-to-broker transport (transport.h), or null on a node without one (no broker
  // role, or a host that offers none: the default). Valid until the plugin is destroyed.
  virtual PeerTransport* peer_transport();
  // The catalog's compare-and-set on a shard's replica state (MetadataStore::update_shard):
  // how a shard leader shrinks or grows its in-sync set. Blocks for at most the metadata
  // timeout. Default: not_supported.
  virtual Result<Assignment> update_shard(const ShardUpdate& update);
  // Whether the fleet feature `feature` (features.h) is finalized, as this node's broker
  // has applied the catalog so far: a plugin switches on new wire behaviour only once
  // every serving broker implements it (docs/upgrades.md). Known before the broker opens
  // its first shard, and true for ever once true. Safe from any plugin thread. Default (a
  // host without a broker): false.
  virtual bool feature_finalized(std::string_view feature) const;

  // --- stopping the node ----------------------------------------------------------
  // Asks the node to stop because this plugin found something it must not serve on (a
  // storage plugin's background check found a corrupt batch; docs/architecture.md
  // "Restart"). The host logs `reason` at error level and shuts the node down in its usual
  // order, as SIGTERM does, and the process exits non-zero. Returns at once; safe from any
  // plugin thread, more than once. Default (a host that cannot stop): logs only.
  virtual void stop_node(std::string_view reason);
};

}  // namespace sluice
