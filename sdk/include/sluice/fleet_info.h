// What the control plane knows of brokers and fleet features, as the metadata contract
// (metadata.h) returns it. The feature rules that use these are in features.h.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "sluice/types.h"

namespace sluice {

// A broker as the control plane sees it.
struct BrokerInfo {
  NodeId id;
  std::string address;       // host:port of its API
  std::string directory_id;  // the data directory it registered with
  std::string version;
  std::vector<std::string> features;  // what it implements (sorted)
  bool live = false;                  // heartbeat within the session timeout (leader's view)
  ChangeSeq registered_seq;
  std::string peer_address;  // host:port of its peer transport; empty if it has none
};

struct FeatureInfo {
  std::string name;
  MetadataLevel required_level;
  bool finalized = false;
  ChangeSeq finalized_seq;             // 0 while not finalized
  std::vector<NodeId> supported_by;    // serving brokers that implement it
  std::vector<NodeId> lacking;         // serving brokers that do not
};

// The features a store has finalized, by name, with the change that finalized each.
using FinalizedFeatures = std::map<std::string, ChangeSeq, std::less<>>;

}  // namespace sluice
