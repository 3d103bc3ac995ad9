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
// It also keeps each registered broker's HTTP address (BrokerInfo.address), from the same
// catalog sources, for the Sluice-Leader header of forwarded answers (api_address).
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "sluice/error.h"
#include "sluice/fleet_info.h"
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
    api_.clear();
    for (const auto& b : brokers) {
      if (!b.peer_address.empty()) catalog_[b.id] = b.peer_address;
      if (!b.address.empty()) api_[b.id] = b.address;
    }
  }
  void learn(const BrokerInfo& b) {
    std::lock_guard lk(mu_);
    if (b.peer_address.empty())
      catalog_.erase(b.id);
    else
      catalog_[b.id] = b.peer_address;
    if (b.address.empty())
      api_.erase(b.id);
    else
      api_[b.id] = b.address;
  }
  void forget(NodeId id) {
    std::lock_guard lk(mu_);
    catalog_.erase(id);
    api_.erase(id);
  }
  std::optional<std::string> lookup(NodeId id) const {
    std::lock_guard lk(mu_);
    if (auto it = static_.find(id); it != static_.end()) return it->second;
    if (auto it = catalog_.find(id); it != catalog_.end()) return it->second;
    return std::nullopt;
  }
  // The broker's HTTP address as the catalog says; empty when unknown.
  std::string api_address(NodeId id) const {
    std::lock_guard lk(mu_);
    auto it = api_.find(id);
    return it == api_.end() ? std::string() : it->second;
  }

 private:
  mutable std::mutex mu_;
  std::map<NodeId, std::string> static_;
  std::map<NodeId, std::string> catalog_;
  std::map<NodeId, std::string> api_;
};

}  // namespace sluice::core
