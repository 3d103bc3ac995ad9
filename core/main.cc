// sluiced: the Sluice node.
//
// Start-up order (each step fails with one line on stderr and a non-zero exit):
//   1. configuration (file + --set), checked against the documented keys   exit 2
//   2. data directory: lock, then meta.properties (node.id, directory.id)   exit 1
//   3. plugins: storage, metadata, api; descriptors checked before use     exit 1 (3: corrupt data)
//   4. metadata start: the cluster id is learned and persisted before use  exit 1 (3: refused)
//   5. broker: catalog snapshot applied, every shard opened (recovery)     exit 1 (3: corrupt, refused)
//   6. API bound; "ready" logged
//   5b. (brokers) the peer transport binds transport.address                exit 1
// SIGTERM/SIGINT shut down in reverse order: API, peer transport, broker, storage, metadata.
// A plugin's PluginHost::stop_node (a corrupt batch found by storage's background
// verification) and a fencing by the control plane take the same path, then exit 3.
// SIGHUP reloads (ApiServer::reload(): the tokens file and HTTPS certificates; the peer
// transport's certificates; MetadataStore::reload(): the controller RPC's certificates;
// docs/security.md) and keeps running.
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "broker.h"
#include "cli_options.h"
#include "config.h"
#include "fresh_paths.h"
#include "identity.h"
#include "node_host.h"
#include "offline_commands.h"
#include "peer_transport.h"
#include "plugin_loader.h"
#include "sluice/durable_fs.h"
#include "sluice/features.h"
#include "sluice/log.h"
#include "sluice/metadata.h"
#include "controller.h"
#include "sluice/node.h"
#include "sluice/storage.h"
#include "sluice/strings.h"
#include "systemd_notify.h"

namespace fs = std::filesystem;
using namespace sluice;

namespace {

// Set when the node must stop because the control plane refused it while running.
std::atomic<bool> g_fenced{false};

// Exit status 3: the node needs an operator, and restarting it will not help: damaged data
// (a corrupt batch found at start or by the background check), or the control plane
// refuses this node (a finalized feature it lacks, another cluster's id). systemd does not
// restart on it (RestartPreventExitStatus, docs/configuration.md "Exit status"); with 1 it
// restarted the node every 2 s for ever.
constexpr int kExitNeedsOperator = 3;
int start_failure_status(const Error& e) {
  return e.code == Errc::corrupt_data || e.code == Errc::conflict || e.code == Errc::cluster_id_mismatch
             ? kExitNeedsOperator
             : 1;
}
// A plugin's constructor that refuses to start on damaged data throws an exception whose
// message starts with "corrupt_data: " (docs/plugin-sdk.md).
int exception_status(const std::exception& e) {
  return std::string_view(e.what()).starts_with("corrupt_data: ") ? kExitNeedsOperator : 1;
}

// What this start has created so far; set from the first disk access until "ready".
core::FreshPaths* g_fresh = nullptr;

// A refused start changes nothing on disk: what it created is removed (durably) first.
[[noreturn]] void die(int code, const std::string& msg) {
  log_line(LogLevel::error, "sluiced", msg);
  if (g_fresh && !g_fresh->paths().empty()) {
    std::string what;
    for (const auto& p : g_fresh->paths()) what += (what.empty() ? "" : ", ") + p;
    auto r = g_fresh->undo();
    g_fresh = nullptr;
    if (r)
      log_line(LogLevel::info, "sluiced", "start refused: removed what this start created: " + what);
    else
      log_line(LogLevel::error, "sluiced", "start refused, and cleaning up failed: " + r.error().message);
  }
  std::exit(code);
}

fs::path default_plugins_dir() {
  std::error_code ec;
  auto exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "plugins";
  return exe.parent_path().parent_path() / "lib" / "sluice" / "plugins";
}

bool roles_have(const std::string& roles, const std::string& role);

// A configuration list, sorted (roles and features are sets).
std::vector<std::string> sorted_list(const std::string& s) {
  auto out = split_list(s);
  std::sort(out.begin(), out.end());
  return out;
}

// Why a private key file may not be used, or nullopt. PostgreSQL's rule for its own key:
// readable by its owner only (0600), or by a group too when root owns it (0640 root:sluice,
// as the package installs /etc/sluice): never by others, never writable by the group.
std::optional<std::string> key_file_mode_error(const std::string& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) return std::string("cannot be read: ") + std::strerror(errno);
  const mode_t m = st.st_mode & 0777;
  if ((m & 0007) != 0 || (m & 0030) != 0 || ((m & 0040) != 0 && st.st_uid != 0)) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(m));
    return std::string("has mode ") + mode +
           ": a private key must be readable by its owner only (chmod 600), or by a group too when root "
           "owns it (chmod 640)";
  }
  return std::nullopt;
}

// The first private key named in the config whose file may not be used, or nullopt: checked
// at start and again before every SIGHUP reload (a key made world-readable since the start
// is refused then too).
std::optional<std::string> private_keys_error(const core::Config& cfg) {
  for (const char* key : {"tls.key_file", "transport.tls.key_file", "metadata.rpc_tls.key_file"})
    if (const auto path = cfg.get_string(key, ""); !path.empty())
      if (auto why = key_file_mode_error(path)) return std::string(key) + " '" + path + "' " + *why;
  return std::nullopt;
}

// Whether the host of a host:port address is loopback ("localhost", 127.0.0.0/8, ::1).
bool loopback_host(const std::string& address) {
  std::string host = address.substr(0, address.rfind(':'));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host == "localhost") return true;
  unsigned char b[16];
  if (::inet_pton(AF_INET, host.c_str(), b) == 1) return b[0] == 127;
  if (::inet_pton(AF_INET6, host.c_str(), b) == 1) {
    static constexpr unsigned char v6_loopback[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    return std::memcmp(b, v6_loopback, 16) == 0;
  }
  return false;
}

bool roles_have(const std::string& roles, const std::string& role) {
  auto v = sorted_list(roles);
  return std::find(v.begin(), v.end(), role) != v.end();
}

// The features this broker reports: every feature the build implements, unless
// `broker.features` names a subset (how an older build is emulated in upgrade tests).
std::vector<std::string> parse_features(const core::Config& cfg) {
  if (!cfg.has("broker.features")) return core::implemented_features();
  auto want = sorted_list(cfg.get_string("broker.features", ""));
  for (const auto& f : want)
    if (!find_feature(f))
      throw std::invalid_argument("broker.features: '" + f + "' is not a feature this build implements");
  return want;
}

// Holds an exclusive flock on <data.dir>/.lock for the life of the process, so two nodes
// can never share a data directory. A missing data directory is created durably: each new
// level and its parent are fsynced, so a power cut cannot drop it (docs/operations.md).
int lock_data_dir(const std::string& dir) {
  if (auto made = create_directories_durably(dir); !made)
    die(1, "cannot create data directory " + dir + ": " + made.error().message);
  const std::string path = (fs::path(dir) / ".lock").string();
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) die(1, "cannot open " + path + ": " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0)
    die(1, "data directory " + dir + " is in use by another sluiced process (" + path + " is locked)");
  return fd;
}

}  // namespace

int main(int argc, char** argv) {
  // Large buffers (fetch answers, request bodies, replication chunks) are allocated and freed
  // at a high rate. By default glibc gives such memory back to the kernel (munmap, trimming)
  // and every reuse then page-faults it in again: 12% of a replicating broker's CPU in a
  // profile (docs/benchmarks.md). Keep freed memory in the process instead.
  ::mallopt(M_MMAP_THRESHOLD, 32 << 20);
  ::mallopt(M_TRIM_THRESHOLD, 256 << 20);
  // Usage errors exit 2 here; --help, --version and --help-config are answered here.
  const core::CommandLine cli = core::parse_command_line(argc, argv);
  const std::string& config_file = cli.config_file;
  const std::vector<std::string>& overrides = cli.overrides;
  const std::vector<std::string>& admin = cli.admin;  // "admin" and its arguments
  const bool print_config = cli.print_config;

  std::unique_ptr<core::Config> cfg;
  try {
    cfg = std::make_unique<core::Config>(core::Config::load(config_file, overrides));
  } catch (const std::exception& e) {
    die(2, e.what());
  }
  if (print_config) {
    for (const auto& [k, v] : cfg->effective()) std::printf("%s = %s\n", k.c_str(), v.c_str());
    return 0;
  }

  if (!cli.probe.empty()) return core::run_probe(cli.probe, *cfg);

  // Validate the node-level keys before touching the disk.
  NodeId node_id{0};
  std::string data_dir, backend, plugins_dir;
  std::vector<std::string> roles;
  core::BrokerOptions bopts;
  MetadataLevel metadata_level = kBuildMetadataLevel;
  try {
    auto log_level = parse_log_level(cfg->get_string("log.level", "info"));
    if (!log_level) throw std::invalid_argument(log_level.error().message);
    set_log_threshold(*log_level);
    const auto nid = cfg->get_int("node.id", 1);
    if (nid < 1 || nid > 0x7fffffff) throw std::invalid_argument("node.id must be between 1 and 2147483647");
    node_id = NodeId{static_cast<std::uint32_t>(nid)};
    data_dir = cfg->get_string("data.dir", "./data");
    backend = cfg->get_string("metadata.backend", "raft");
    roles = sorted_list(cfg->get_string("node.roles", "controller,broker"));
    plugins_dir = cfg->get_string("plugins.dir", "");
    if (plugins_dir.empty()) plugins_dir = default_plugins_dir().string();
    const auto level = cfg->get_int("metadata.level", kBuildMetadataLevel.value());
    if (level < kLowestMetadataLevel.value() || level > kBuildMetadataLevel.value())
      throw std::invalid_argument("metadata.level " + std::to_string(level) +
                                  " is not supported: this build runs at levels " +
                                  std::to_string(kLowestMetadataLevel.value()) + " to " +
                                  std::to_string(kBuildMetadataLevel.value()));
    metadata_level = MetadataLevel{static_cast<std::uint32_t>(level)};
    bopts.features = parse_features(*cfg);
    // Ranged here, as a config error (exit 2): out of range, these keys were truncated or
    // made the controller spin (interval 0) or every catalog call time out (timeout 0).
    auto ranged = [&](const char* key, std::int64_t def, std::int64_t lo, std::int64_t hi) {
      const auto v = cfg->get_int(key, def);
      if (v < lo || v > hi)
        throw std::invalid_argument(std::string(key) + " must be between " + std::to_string(lo) + " and " +
                                    std::to_string(hi) + ", got " + std::to_string(v));
      return v;
    };
    bopts.max_records_per_publish =
        static_cast<std::uint32_t>(ranged("broker.max_records_per_publish", 100000, 1, 10'000'000));
    bopts.catalog_timeout_ms = ranged("metadata.timeout_ms", 10000, 1, 3'600'000);
    ranged("controller.interval_ms", 500, 10, 3'600'000);
    ranged("controller.preferred_leader_interval_ms", 300000, 0, 86'400'000);
    bopts.heartbeat_interval_ms = cfg->get_int("broker.heartbeat_interval_ms", 2000);
    if (auto peers = core::PeerDirectory::parse_static(cfg->get_string("transport.peers", "")); !peers)
      throw std::invalid_argument(peers.error().message);
    if (const auto ta = cfg->get_string("transport.address", "127.0.0.1:7802");
        ta.rfind(':') == std::string::npos || ta.rfind(':') == 0 || ta.rfind(':') + 1 == ta.size())
      throw std::invalid_argument("transport.address must be host:port, got '" + ta + "'");
    // The peer transport's hello carries the cluster id, which is no secret: without TLS
    // anyone who reaches transport.address may publish, read and ack on any shard, past
    // every token (review finding). With authentication on, a reachable one needs TLS.
    if (const auto ta = cfg->get_string("transport.address", "127.0.0.1:7802");
        roles_have(cfg->get_string("node.roles", "controller,broker"), "broker") &&
        cfg->get_bool("auth.enabled", false) && !cfg->get_bool("auth.allow_insecure", false) &&
        cfg->get_string("transport.tls.cert_file", "").empty() && !loopback_host(ta))
      throw std::invalid_argument(
          "refusing to serve the peer transport on " + ta +
          " without TLS while auth.enabled = true: its only check is the cluster id, which is no secret, so anyone "
          "who reaches it could read and write every stream past the tokens. Set transport.tls.cert_file, "
          "transport.tls.key_file and transport.tls.ca_file, or auth.allow_insecure = true to accept the risk "
          "(docs/security.md)");
    if (bopts.heartbeat_interval_ms < 10) throw std::invalid_argument("broker.heartbeat_interval_ms must be at least 10");
    // Private keys are checked here, for every plugin that reads one (docs/security.md "Files").
    if (auto why = private_keys_error(*cfg)) throw std::invalid_argument(*why);
    if (backend != "raft" && backend != "postgres")
      throw std::invalid_argument("metadata.backend must be raft or postgres, got '" + backend + "'");
    if (backend == "postgres" && roles_have(cfg->get_string("node.roles", "controller,broker"), "controller"))
      throw std::invalid_argument("with metadata.backend = postgres there are no controllers: the database is the "
                                  "control plane; set node.roles = broker");
    for (const auto& r : roles)
      if (r != "broker" && r != "controller")
        throw std::invalid_argument("node.roles: unknown role '" + r + "' (roles are controller and broker)");
    if (roles.empty()) throw std::invalid_argument("node.roles must name at least one role");
  } catch (const std::exception& e) {
    die(2, e.what());
  }

  if (!admin.empty() && !fs::exists(fs::path(data_dir) / "meta.properties"))
    die(1, "no formatted data directory at " + data_dir + " (meta.properties is missing)");
  // Everything a start may create, noted before it touches the disk, so that a refused
  // start can take it back (docs/operations.md, "Starting"). Armed only once the lock is
  // held: a start that loses the lock to another process must not remove that process's
  // directory. Admin commands need an existing data directory and create nothing of this.
  core::FreshPaths fresh;
  const std::string storage_dir = [&] {
    const std::string d = cfg->get_string("storage.dir", "");
    return d.empty() ? (fs::path(data_dir) / "shards").string() : d;
  }();
  if (admin.empty()) {
    fresh.note(data_dir);
    fresh.note((fs::path(data_dir) / ".lock").string());
  }
  const int lock_fd = lock_data_dir(data_dir);
  (void)lock_fd;  // held until exit
  if (admin.empty()) {
    const fs::path meta = fs::path(data_dir) / "meta.properties";
    if (fs::exists(meta)) fresh.forget();  // another start formatted it between the note and the lock
    fresh.note(meta.string());
    const std::string raft_dir = cfg->get_string("raft.dir", "");
    fresh.note(raft_dir.empty() ? (fs::path(data_dir) / "raft").string() : raft_dir);
    fresh.note(storage_dir);
    g_fresh = &fresh;
  }

  std::unique_ptr<core::DataDirIdentity> identity;
  try {
    identity = std::make_unique<core::DataDirIdentity>(core::DataDirIdentity::open_or_format(data_dir, node_id));
  } catch (const std::exception& e) {
    die(1, e.what());
  }
  if (identity->freshly_formatted())
    log_line(LogLevel::info, "sluiced",
             "formatted data directory " + data_dir + " (node.id " + std::to_string(node_id.value()) +
                 ", directory.id " + identity->directory_id() + ")");

  // Brokers hold shard copies; a controller-only node has none to lose.
  if (admin.empty() && roles_have(cfg->get_string("node.roles", "controller,broker"), "broker")) {
    try {
      const std::string before = identity->directory_id();
      const std::string what =
          identity->bind_storage_dir(storage_dir, !cfg->get_string("storage.dir", "").empty());
      // A new directory.id, or old copies under a new data.dir, is news; an adoption is not.
      if (!what.empty())
        log_line(identity->directory_id() != before || identity->freshly_formatted() ? LogLevel::warn
                                                                                     : LogLevel::info,
                 "sluiced", what);
    } catch (const std::exception& e) {
      die(1, e.what());
    }
  }

  core::NodeHost host(*cfg, *identity);
  core::PluginLoader loader(plugins_dir);
  if (!admin.empty())
    return core::run_admin(admin, *cfg, host, loader,
                           roles_have(cfg->get_string("node.roles", "controller,broker"), "controller"), die);

  // Block the shutdown and reload signals before any plugin starts a thread, so that only
  // sigwait below receives them.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);

  const bool broker_role = std::find(roles.begin(), roles.end(), "broker") != roles.end();
  std::shared_ptr<StorageEngine> storage;
  std::shared_ptr<MetadataStore> metadata;
  std::shared_ptr<ApiServer> api;
  try {
    if (broker_role)
      storage = loader.load<StorageEngine>(cfg->get_string("storage.plugin", "fs-storage"),
                                           PluginKind::storage, host);
    std::string meta_plugin = cfg->get_string("metadata.plugin", "");
    if (meta_plugin.empty()) meta_plugin = backend == "raft" ? "raft-meta" : "postgres-meta";
    metadata = loader.load<MetadataStore>(meta_plugin, PluginKind::metadata, host);
    api = loader.load<ApiServer>(cfg->get_string("api.plugin", "http-api"), PluginKind::api, host);
  } catch (const std::exception& e) {
    die(exception_status(e), e.what());
  }

  core::systemd_notify("STATUS=starting the metadata store (" + backend + ")");
  if (auto r = metadata->start(); !r) die(start_failure_status(r.error()), "metadata: " + r.error().message);
  host.set_metadata(metadata.get());  // shard leaders shrink/grow their in-sync sets through it
  // Every node runs the controller loop; it acts only while its store is the controller.
  core::ControllerOptions copts;
  copts.interval = std::chrono::milliseconds(cfg->get_int("controller.interval_ms", 500));
  copts.preferred_interval =
      std::chrono::milliseconds(cfg->get_int("controller.preferred_leader_interval_ms", 300000));
  core::Controller controller(*metadata, host, copts);
  controller.start();
  // From here on the metadata store may have acknowledged writes (a controller that joined
  // or bootstrapped counts toward commits): nothing it wrote is taken back any more.
  g_fresh = nullptr;
  fresh.forget();
  // Now that the start stands, before any shard opens: storage.dir's marker.
  try {
    identity->commit_storage_dir();
  } catch (const std::exception& e) {
    die(1, std::string("storage.dir: ") + e.what());
  }

  NodeInfo info;
  info.cluster_id = host.cluster_id();
  info.metadata_backend = backend;
  info.node_id = node_id;
  info.directory_id = identity->directory_id();
  info.roles = roles;
  info.version = SLUICE_VERSION;
  info.metadata_level = metadata_level;
  bopts.advertised_address = cfg->get_string("http.address", "127.0.0.1") + ":" +
                             std::to_string(cfg->get_int("http.port", 8080));
  bopts.on_fenced = [](const std::string& why) {
    log_line(LogLevel::error, "sluiced", "stopping: the control plane refuses this broker: " + why);
    g_fenced = true;
    ::kill(::getpid(), SIGTERM);
  };
  // The peer transport, on brokers only, once the cluster id is known (the hello carries it).
  std::unique_ptr<core::AsioPeerTransport> transport;
  if (broker_role) {
    auto peers = std::make_shared<core::PeerDirectory>();
    peers->set_static(core::PeerDirectory::parse_static(cfg->get_string("transport.peers", "")).value());
    core::PeerTransportOptions topts;
    topts.self = node_id;
    topts.cluster_id = host.cluster_id();
    topts.directory_id = identity->directory_id();
    topts.listen_address = cfg->get_string("transport.address", "127.0.0.1:7802");
    topts.failpoint_file = cfg->get_string("transport.failpoint_file", "");
    topts.handlers_registered_later = true;  // the broker registers its own in start()
    topts.tls_cert_file = cfg->get_string("transport.tls.cert_file", "");
    topts.tls_key_file = cfg->get_string("transport.tls.key_file", "");
    topts.tls_ca_file = cfg->get_string("transport.tls.ca_file", "");
    topts.tls_require_node_id = cfg->get_bool("transport.tls.require_node_id", false);
    topts.log = [&host](LogLevel l, const std::string& m) { host.log(l, "transport", m); };
    auto t = core::AsioPeerTransport::start(topts, peers);
    if (!t) die(1, "transport: " + t.error().message);
    transport = std::move(t.value());
    host.set_peer_transport(transport.get());
    // What peers dial: the configured address, with the bound port (transport.address may say 0).
    const auto& la = topts.listen_address;
    bopts.peer_address = la.substr(0, la.rfind(':') + 1) + std::to_string(transport->port());
    bopts.peers = peers;
  }
  core::systemd_notify("STATUS=opening this node's shards (recovery)");
  auto broker = std::make_unique<core::BrokerRuntime>(info, *metadata, storage.get(), bopts, host);
  host.set_feature_source([b = broker.get()](std::string_view f) { return b->feature_finalized(f); });
  if (auto r = broker->start(); !r) {
    // The shards this start opened close cleanly, so the clean-shutdown marker it took goes
    // back (storage shutdown): the next start, once the operator has acted, is as fast as
    // this one would have been. The marker is a hint; recovery still checks each log's
    // recovery point against its files (docs/architecture.md "Restart").
    if (transport) transport->stop();
    broker->stop();
    if (storage) storage->shutdown();
    die(start_failure_status(r.error()), "broker: " + r.error().message);
  }
  if (transport) transport->handlers_registered();
  if (auto r = api->start(*broker); !r) die(1, "api: " + r.error().message);

  log_line(LogLevel::info, "sluiced",
           "ready: node.id " + std::to_string(node_id.value()) + ", cluster.id " + host.cluster_id() +
               ", http " + cfg->get_string("http.address", "127.0.0.1") + ":" +
               std::to_string(api->port()) + ", data " + data_dir);
  g_fresh = nullptr;  // started: what it created is the node's now
  fresh.forget();
  core::systemd_notify("READY=1\nSTATUS=serving on http port " + std::to_string(api->port()));

  // SIGHUP reloads what can be reloaded without a restart (the API server's tokens file and
  // certificates, the peer transport's and the controller RPC's certificates;
  // docs/security.md); each part that
  // fails keeps its previous state, and the failures are logged. SIGINT and
  // SIGTERM stop the node.
  int sig = 0;
  for (;;) {
    sig = 0;
    if (sigwait(&sigs, &sig) != 0) continue;
    if (sig != SIGHUP) break;
    log_line(LogLevel::info, "sluiced", "SIGHUP: reloading");
    if (auto why = private_keys_error(*cfg)) {
      log_line(LogLevel::error, "sluiced", "reload failed, the previous state stays in force: " + *why);
      continue;
    }
    std::string failed;
    if (auto r = api->reload(); !r) failed = r.error().message;
    // The peer transport's certificates, when transport.tls.* is set.
    const bool peer_tls = !cfg->get_string("transport.tls.cert_file", "").empty();
    if (transport && peer_tls)
      if (auto r = transport->reload_certificates(); !r) failed += (failed.empty() ? "" : "; ") + r.error().message;
    // The controller RPC's certificates (metadata.rpc_tls.*), on controllers and brokers.
    if (auto r = metadata->reload(); !r) failed += (failed.empty() ? "" : "; ") + r.error().message;
    if (!failed.empty())
      log_line(LogLevel::error, "sluiced", "reload failed, the previous state stays in force: " + failed);
    else
      log_line(LogLevel::info, "sluiced", "reload done");
  }
  log_line(LogLevel::info, "sluiced", std::string("shutting down on ") + strsignal(sig));
  core::systemd_notify("STOPPING=1\nSTATUS=draining: pending appends finish, then shards close");
  api->stop();
  // No peer request is served or sent once shards start closing; requests after this fail
  // unavailable. The object stays valid for the storage plugin until it is destroyed.
  if (transport) transport->stop();
  broker->stop();
  if (storage) storage->shutdown();
  controller.stop();
  host.set_metadata(nullptr);
  metadata->stop();
  // Release in dependency order: storage may still hold callbacks whose code lives in the
  // API plugin (long-poll waiters), so the API library is unloaded only after storage.
  host.set_feature_source(nullptr);
  broker.reset();
  storage.reset();
  host.set_peer_transport(nullptr);
  transport.reset();
  api.reset();
  metadata.reset();
  log_line(LogLevel::info, "sluiced", "stopped");
  // Fenced, or stopped by a plugin (PluginHost::stop_node: a corrupt batch found).
  return g_fenced || host.stop_requested() ? kExitNeedsOperator : 0;
}
