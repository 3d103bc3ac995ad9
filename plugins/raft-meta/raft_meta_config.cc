// RaftMetaConfig::from_host (raft_meta_store.h; the keys are documented in README.md).
#include "cluster_auth.h"
#include "rpc_tls.h"
#include "raft_meta_store.h"
#include "raft_meta_store_internal.h"

#include "rpc.h"

#include "sluice/durable_fs.h"
#include "sluice/uuid.h"
#include "sluice/strings.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <random>
#include <stdexcept>

#include "sluice/catalog_rules.h"
#include "sluice/features.h"
#include "sluice/names.h"

namespace sluice::raft_meta {

namespace {

unsigned checked_unsigned(const PluginHost& host, std::string_view key, std::int64_t def,
                          std::int64_t min) {
  std::int64_t v = host.config_int(key, def);
  if (v < min || v > 0x7fffffff)
    throw std::invalid_argument(std::string(key) + " must be between " + std::to_string(min) +
                                " and 2147483647, got " + std::to_string(v));
  return static_cast<unsigned>(v);
}

}  // namespace

RaftMetaConfig RaftMetaConfig::from_host(const PluginHost& host) {
  RaftMetaConfig c;
  c.raft_dir = host.config_string("raft.dir", "");
  if (c.raft_dir.empty()) c.raft_dir = (std::filesystem::path(host.data_dir()) / "raft").string();
  c.address = host.config_string("raft.address", "127.0.0.1:7800");
  if (host.config_has("raft.port")) {
    unsigned port = checked_unsigned(host, "raft.port", 7800, 0);
    if (port > 65535) throw std::invalid_argument("raft.port must be 0..65535");
    auto colon = c.address.rfind(':');
    std::string ip = colon == std::string::npos ? c.address : c.address.substr(0, colon);
    c.address = ip + ":" + std::to_string(port);
  }
  if (c.address.find(':') == std::string::npos)
    throw std::invalid_argument("raft.address must be ip:port, got '" + c.address + "'");
  c.snapshot_threshold = checked_unsigned(host, "raft.snapshot_threshold", 1024, 1);
  c.snapshot_trailing = checked_unsigned(host, "raft.snapshot_trailing", 128, 0);
  c.election_timeout_ms = checked_unsigned(host, "raft.election_timeout_ms", 1000, 10);
  c.heartbeat_timeout_ms = checked_unsigned(host, "raft.heartbeat_timeout_ms", 100, 1);
  c.timeout = std::chrono::milliseconds(checked_unsigned(host, "metadata.timeout_ms", 10000, 1));
  c.start_timeout =
      std::chrono::milliseconds(checked_unsigned(host, "metadata.start_timeout_ms", 30000, 1));
  {
    std::int64_t lv = host.config_int("metadata.level", kBuildMetadataLevel.value());
    // The product's levels: 8 (baseline), 10 (stream incarnations), 14 (cache incarnations
    // and the flag), 16 (replicated shards), 17 (reassignment), 18 (counters), 19 (batch
    // entries). 9, 11..13 and 15 never shipped, so no member may claim them.
    if (lv != 8 && lv != 10 && lv != 14 && lv != 16 && lv != 17 && lv != 18 && lv != 19)
      throw std::invalid_argument("metadata.level must be 8, 10, 14, 16, 17, 18 or 19 (this build's level is " +
                                  std::to_string(kBuildMetadataLevel.value()) + "), got " +
                                  std::to_string(lv));
    c.level = MetadataLevel{static_cast<std::uint32_t>(lv)};
  }
  {
    auto held = parse_feature_list(host.config_string("metadata.bootstrap_hold_back", ""));
    if (!held) throw std::invalid_argument("metadata.bootstrap_hold_back: " + held.error().message);
    c.bootstrap_hold_back = std::move(*held);
  }
  c.rpc_address = host.config_string("metadata.rpc_address", "127.0.0.1:7801");
  c.join = split_list(host.config_string("metadata.join", ""));
  if (!c.join.empty() && c.rpc_address.empty())
    throw std::invalid_argument("metadata.join needs metadata.rpc_address (members talk over it)");
  c.session_timeout =
      std::chrono::milliseconds(checked_unsigned(host, "broker.session_timeout_ms", 10000, 1));
  // Members prove a shared secret to each other (docs/security.md "Raft members").
  if (auto path = host.config_string("raft.cluster_secret_file", ""); !path.empty()) {
    auto secret = load_cluster_secret(path);
    if (!secret) throw std::invalid_argument(secret.error().message);
    c.cluster_secret = std::move(*secret);
  }
  c.require_auth = host.config_bool("raft.require_auth", false);
  c.rpc_tls = RpcTls::from_host(host);
  if (c.require_auth && c.cluster_secret.empty())
    throw std::invalid_argument("raft.require_auth=true needs raft.cluster_secret_file");
  return c;
}

}  // namespace sluice::raft_meta
