// sluiced's offline commands (offline_commands.h).
#include "offline_commands.h"

#include <charconv>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>

#include "peer_transport.h"
#include "sluice/durable_fs.h"
#include "sluice/storage.h"

namespace sluice::core {

namespace fs = std::filesystem;

namespace {

// admin rebuild-metadata: moves raft.dir aside (renamed, never deleted) so that the next
// start joins through metadata.join with an empty log and receives the leader's snapshot.
int rebuild_metadata(const Config& cfg, const std::string& data_dir, bool controller, Die die) {
  if (cfg.get_string("metadata.backend", "raft") != "raft") {
    std::fprintf(stderr, "sluiced: rebuild-metadata is for raft-meta members (metadata.backend = raft)\n");
    return 2;
  }
  if (!controller) {
    std::fprintf(stderr, "sluiced: rebuild-metadata is for controllers (node.roles has no controller)\n");
    return 2;
  }
  const std::string join = cfg.get_string("metadata.join", "");
  if (join.empty()) {
    std::fprintf(stderr,
                 "sluiced: rebuild-metadata needs metadata.join (the controller RPC addresses of the other "
                 "members): the rebuilt member fetches the catalog from their leader\n");
    return 2;
  }
  std::string raft_dir = cfg.get_string("raft.dir", "");
  if (raft_dir.empty()) raft_dir = (fs::path(data_dir) / "raft").string();
  if (!fs::exists(raft_dir)) {
    std::printf("no raft directory at %s: the next start joins through %s\n", raft_dir.c_str(), join.c_str());
    return 0;
  }
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", std::gmtime(&now));
  const std::string aside = raft_dir + ".old-" + stamp;
  std::error_code ec;
  fs::rename(raft_dir, aside, ec);
  if (ec) die(1, "cannot move " + raft_dir + " to " + aside + ": " + ec.message());
  // Make the rename durable before anyone relies on it (a failed fsync is an error, not
  // something to skip: the next start would otherwise trust a rename a power cut can undo).
  fs::path moved = fs::absolute(raft_dir).lexically_normal();
  if (!moved.has_filename()) moved = moved.parent_path();  // a trailing slash
  if (auto r = fsync_directory(moved.parent_path().string()); !r)
    die(1, "moved " + raft_dir + " to " + aside + ", but cannot make it durable: " + r.error().message);
  std::printf("moved %s to %s\n", raft_dir.c_str(), aside.c_str());
  const long long id = cfg.get_int("node.id", 1);
  std::printf("next: remove this member from the group (sluice members remove %lld, against a running member),\n"
              "then start sluiced with the same configuration (metadata.join = %s); it joins with an\n"
              "empty log and installs the leader's snapshot. Check GET /v1/metadata/members shows this\n"
              "member with the group's applied index and state hash, then remove %s.\n",
              id, join.c_str(), aside.c_str());
  return 0;
}

}  // namespace

int run_admin(const std::vector<std::string>& args, const Config& cfg, PluginHost& host, PluginLoader& loader,
              bool controller, Die die) {
  const std::string cmd = args.size() > 1 ? args[1] : "";
  if (cmd == "rebuild-metadata") {
    if (args.size() != 2) {
      std::fprintf(stderr, "sluiced: admin rebuild-metadata takes no arguments\n");
      return 2;
    }
    return rebuild_metadata(cfg, host.data_dir(), controller, die);
  }
  std::shared_ptr<StorageEngine> storage;
  try {
    storage = loader.load<StorageEngine>(cfg.get_string("storage.plugin", "fs-storage"),
                                         PluginKind::storage, host);
  } catch (const std::exception& e) {
    die(1, e.what());
    return 1;  // not reached: die exits (a function pointer cannot say [[noreturn]])
  }
  int rc = 0;
  if (cmd == "list-data" && args.size() == 2) {
    auto r = storage->list_on_disk();
    if (!r) die(1, r.error().message);
    for (const auto& ref : *r)
      std::printf("%s/%s/%s shard %u incarnation %llu\n", ref.stream.tenant.c_str(), ref.stream.ns.c_str(),
                  ref.stream.name.c_str(), ref.shard.value(),
                  static_cast<unsigned long long>(ref.incarnation.value()));
  } else if (cmd == "delete-data" && args.size() == 5 && args[3] == "--up-to") {
    const std::string& path = args[2];
    const auto a = path.find('/'), b = a == std::string::npos ? a : path.find('/', a + 1);
    if (b == std::string::npos || path.find('/', b + 1) != std::string::npos) {
      std::fprintf(stderr, "sluiced: admin delete-data expects TENANT/NS/STREAM, got '%s'\n", path.c_str());
      return 2;
    }
    StreamKey key{path.substr(0, a), path.substr(a + 1, b - a - 1), path.substr(b + 1)};
    // Digits only: stoull would take "-1" (every incarnation, the live one too) and " 5".
    std::uint64_t up_to = 0;
    const std::string& text = args[4];
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), up_to);
    if (text.empty() || text[0] < '0' || text[0] > '9' || ec != std::errc() || end != text.data() + text.size()) {
      std::fprintf(stderr, "sluiced: --up-to expects an incarnation number, got '%s'\n", text.c_str());
      return 2;
    }
    auto r = storage->delete_incarnations(key, Incarnation{up_to});
    if (!r) die(1, r.error().message);
    std::printf("deleted %u shard directories of %s (incarnations up to %llu)\n", r.value(),
                key.to_string().c_str(), static_cast<unsigned long long>(up_to));
  } else {
    std::fprintf(stderr, "sluiced: admin expects list-data, delete-data TENANT/NS/STREAM --up-to N, or "
                         "rebuild-metadata (see --help)\n");
    rc = 2;
  }
  storage->shutdown();
  return rc;
}

namespace {
// <data.dir>/meta.properties as key -> value, read only (no lock: the node may be running).
std::map<std::string, std::string> read_meta_properties(const std::string& data_dir) {
  std::map<std::string, std::string> out;
  std::ifstream in(fs::path(data_dir) / "meta.properties");
  std::string line;
  while (std::getline(in, line)) {
    const auto eq = line.find('=');
    if (eq != std::string::npos && !line.starts_with("#")) out[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return out;
}

}  // namespace

int run_probe(const std::vector<std::string>& probe, const Config& cfg) {
  const std::string& address = probe[0];
  std::string cluster_id = probe[1];
  auto meta = read_meta_properties(cfg.get_string("data.dir", "./data"));
  if (cluster_id.empty()) cluster_id = meta["cluster.id"];
  if (cluster_id.empty()) {
    std::fprintf(stderr, "sluiced: probe-peer needs a cluster id: --cluster-id ID, or a data.dir whose "
                         "meta.properties holds cluster.id\n");
    return 2;
  }
  peerwire::Hello self;
  // Node 0: a probe, not a broker (it may only ping). With this machine's node.id, a probe
  // of another node with the same id would be refused as a duplicate node.id.
  self.node = NodeId{0};
  self.cluster_id = cluster_id;
  self.directory_id = meta.count("directory.id") ? meta["directory.id"] : "probe";
  auto r = probe_peer(address, self, std::chrono::milliseconds(10000));
  if (!r) {
    std::fprintf(stderr, "sluiced: probe-peer %s: %s\n", address.c_str(), r.error().to_string().c_str());
    return 1;
  }
  std::printf("peer %s: node.id %u, directory.id %s, cluster.id %s (ping answered)\n", address.c_str(),
              r->peer.node.value(), r->peer.directory_id.c_str(), r->cluster_id.c_str());
  return 0;
}

}  // namespace sluice::core
