// sluiced's offline commands (docs/operations.md): `sluiced admin ...` (list-data,
// delete-data, rebuild-metadata), run with the data directory locked so that no node runs
// on it, and `sluiced probe-peer`, which touches no data directory.
#pragma once

#include <string>
#include <vector>

#include "config.h"
#include "plugin_loader.h"
#include "sluice/host.h"

namespace sluice::core {

// Logs `msg`, removes what this start created, and exits with `code` (main's die).
using Die = void (*)(int code, const std::string& msg);

// sluiced admin ARGS (args[0] is "admin"). `controller`: node.roles has controller
// (rebuild-metadata is for raft-meta controllers only). The exit status.
int run_admin(const std::vector<std::string>& args, const Config& cfg, PluginHost& host, PluginLoader& loader,
              bool controller, Die die);

// sluiced probe-peer HOST:PORT [--cluster-id ID] (probe = {address, cluster id or ""}):
// one hello and ping to a broker's peer transport. The exit status.
int run_probe(const std::vector<std::string>& probe, const Config& cfg);

}  // namespace sluice::core
