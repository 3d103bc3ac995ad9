// Plugin entry point of raft-meta (sdk/include/sluice/plugin.h). Nothing throws across the
// boundary: configuration errors become `*error` and a nullptr.
#include <algorithm>
#include <exception>
#include <new>
#include <string>

#include "raft_meta_store.h"
#include "rpc.h"
#include "sluice/plugin.h"

namespace {

void* create(sluice::PluginHost& host, std::string* error) {
  try {
    // A node without the controller role is no Raft member: it reaches a controller's
    // catalog over the RPC (metadata.controllers).
    std::string roles = "," + host.config_string("node.roles", "controller,broker") + ",";
    roles.erase(std::remove(roles.begin(), roles.end(), ' '), roles.end());
    if (roles.find(",controller,") == std::string::npos) {
      auto* remote = new sluice::raft_meta::RemoteMetadataStore(host);
      return static_cast<void*>(static_cast<sluice::MetadataStore*>(remote));
    }
    auto* store = new sluice::raft_meta::RaftMetaStore(host);
    return static_cast<void*>(static_cast<sluice::MetadataStore*>(store));
  } catch (const std::exception& e) {
    if (error) *error = std::string("raft-meta: ") + e.what();
  } catch (...) {
    if (error) *error = "raft-meta: unknown error in create";
  }
  return nullptr;
}

void destroy(void* object) {
  delete static_cast<sluice::MetadataStore*>(object);
}

}  // namespace

SLUICE_PLUGIN(sluice::PluginKind::metadata, "raft-meta", &create, &destroy)
