// The peer directory: NodeId -> host:port of that broker's peer transport
// (docs/replication.md "Peer transport").
//
// Two sources, the first wins:
//   * static entries from `transport.peers` ("1=127.0.0.1:7802,2=..."), for tests and for
//     backends that do not keep peer addresses;
//   * what the catalog says: the `peer_address` of every registered broker, learned by the
//     broker runtime from its snapshots and from broker_registered / broker_unregistered
//     changes.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "sluice/error.h"
#include "sluice/features.h"
#include "sluice/types.h"

namespace sluice::core {

class PeerDirectory {
 public:
  // Parses "1=host:port,2=host:port" (spaces around entries allowed). invalid_argument
  // naming the bad entry.
  static Result<std::map<NodeId, std::string>> parse_static(const std::string& spec);

  void set_static(std::map<NodeId, std::string> entries) {
    std::lock_guard lk(mu_);
    static_ = std::move(entries);
  }
  // A snapshot: replaces what the catalog said before.
  void replace_from_catalog(const std::vector<BrokerInfo>& brokers) {
    std::lock_guard lk(mu_);
    catalog_.clear();
    for (const auto& b : brokers)
      if (!b.peer_address.empty()) catalog_[b.id] = b.peer_address;
  }
  void learn(const BrokerInfo& b) {
    std::lock_guard lk(mu_);
    if (b.peer_address.empty())
      catalog_.erase(b.id);
    else
      catalog_[b.id] = b.peer_address;
  }
  void forget(NodeId id) {
    std::lock_guard lk(mu_);
    catalog_.erase(id);
  }
  std::optional<std::string> lookup(NodeId id) const {
    std::lock_guard lk(mu_);
    if (auto it = static_.find(id); it != static_.end()) return it->second;
    if (auto it = catalog_.find(id); it != catalog_.end()) return it->second;
    return std::nullopt;
  }

 private:
  mutable std::mutex mu_;
  std::map<NodeId, std::string> static_;
  std::map<NodeId, std::string> catalog_;
};

}  // namespace sluice::core
