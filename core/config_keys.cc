#include "config.h"

namespace sluice::core {

namespace {
// The single list of documented keys. docs/configuration.md mirrors it; keep them equal.
constexpr ConfigKey kConfigKeys[] = {
    {"node.id", "1", "Numeric id of this node (1..2^31). Must match meta.properties once formatted."},
    {"node.roles", "controller,broker", "Comma-separated roles: controller (Raft member), broker (holds shards)."},
    {"data.dir", "./data", "Data directory: meta.properties, raft/, shards/. Created and formatted on first start."},
    {"log.level", "info", "Lowest level logged: debug, info, warn or error. Lines below it are dropped."},
    {"plugins.dir", "", "Directory holding plugin libraries. Default: <sluiced dir>/../lib/sluice/plugins."},
    {"metadata.backend", "raft", "raft (plugin raft-meta) or postgres (plugin postgres-meta; broker-only nodes)."},
    {"metadata.postgres.url", "", "libpq connection string or URI of the catalog database (metadata.backend = postgres). Never printed."},
    {"metadata.postgres.schema", "sluice", "Schema holding the catalog tables."},
    {"metadata.postgres.change_retention", "100000", "Change-feed rows kept; a watcher behind them resyncs from a snapshot."},
    {"metadata.postgres.poll_interval_ms", "1000", "Change-feed poll interval when no NOTIFY arrives (a safety net)."},
    {"metadata.plugin", "", "Override the metadata plugin name (default from metadata.backend)."},
    {"metadata.level", "", "Metadata level this member runs at (default: the backend's highest, 16 for both). raft-meta takes 8, 10, 14 or 16, postgres-meta 8, 10 or 16. A lower level proposes and reports exactly as that older build would."},
    {"metadata.timeout_ms", "10000", "How long a catalog call waits before answering timeout (outcome uncertain)."},
    {"raft.address", "127.0.0.1:7800", "host:port this controller's Raft transport binds."},
    {"raft.port", "", "Overrides the port of raft.address."},
    {"raft.election_timeout_ms", "1000", "Raft election timeout."},
    {"raft.heartbeat_timeout_ms", "100", "Raft heartbeat interval."},
    {"metadata.start_timeout_ms", "30000", "How long start-up waits for the metadata store to elect a leader and apply its log."},
    {"raft.dir", "", "Raft log and snapshots. Default: <data.dir>/raft."},
    {"raft.snapshot_threshold", "1024", "Entries between automatic snapshots."},
    {"raft.snapshot_trailing", "128", "Entries kept in the log behind a snapshot."},
    {"storage.plugin", "fs-storage", "Storage plugin name (file libsluice-<name>.so in plugins.dir)."},
    {"storage.dir", "", "Shard data. Default: <data.dir>/shards."},
    {"storage.segment_bytes", "67108864", "Roll the active segment beyond this size."},
    {"storage.index_interval_bytes", "4096", "Bytes of log between sparse index entries."},
    {"storage.fsync", "always", "always: acks wait for fdatasync (group commit). never: benchmarks only, acks do not imply durability."},
    {"storage.verify_on_start", "all", "all: CRC-check every segment at start; tail: only the active segment."},
    {"storage.repair", "false", "Operator flag: truncate at the first corrupt batch instead of refusing to start."},
    {"storage.retention_interval_ms", "30000", "How often retention by size and age runs (0 disables it)."},
    {"storage.flush_threads", "1", "Group-commit flusher threads serving all shards (1..8)."},
    {"storage.group_journal_compact_bytes", "1048576", "Compact a consumer group's journal into a snapshot beyond this size."},
    {"api.plugin", "http-api", "API plugin name."},
    {"http.address", "127.0.0.1", "Address the HTTP API binds."},
    {"http.port", "8080", "Port the HTTP API binds (0 = ephemeral; the bound port is logged)."},
    {"http.threads", "2", "HTTP I/O threads."},
    {"http.max_body_bytes", "8388608", "Largest accepted request body; larger gets 413."},
    {"http.max_wait_ms", "30000", "Longest long-poll wait a fetch may ask for."},
    {"http.idle_timeout_ms", "60000", "Close idle keep-alive connections after this long."},
    {"http.admin_threads", "2", "Threads for catalog calls, which may block on the metadata store."},
    {"http.fetch_max_bytes", "1048576", "Most batch bytes one fetch reads (at least one batch is returned)."},
    {"broker.features", "", "Features this broker reports at registration. Default: all this build implements. A subset emulates an older build."},
    {"broker.heartbeat_interval_ms", "2000", "How often a broker heartbeats to the control plane."},
    {"broker.session_timeout_ms", "10000", "A broker without a heartbeat for this long stops counting as serving."},
    {"metadata.bootstrap_hold_back", "", "Features a new cluster does NOT finalize at bootstrap (comma list), to test upgrades from level 8."},
    {"metadata.rpc_address", "127.0.0.1:7801", "host:port a controller serves the metadata RPC on (brokers connect here; empty disables it)."},
    {"metadata.controllers", "127.0.0.1:7801", "Comma list of controller RPC addresses, for nodes without the controller role."},
    {"metadata.join", "", "Comma list of controller RPC addresses of an existing raft-meta group: a controller with an empty raft directory joins it instead of bootstrapping a new one."},
    {"transport.address", "127.0.0.1:7802", "host:port the broker's peer transport binds (replication between brokers); registered as the broker's peer_address."},
    {"transport.peers", "", "Optional static peer directory, NODE_ID=HOST:PORT comma list; wins over the peer addresses the catalog holds."},
    {"transport.failpoint_file", "", "Test-only: a file of 'drop N' / 'delay N MS' lines dropping or delaying every peer frame this node sends to node N."},
    {"broker.max_records_per_publish", "100000", "Largest number of records in one publish request."},
    {"stream.default_replication_factor", "1", "replication_factor of a stream create that names none (1..5); min_insync defaults to a majority of it. Above 1 needs the fleet feature replicated_shards (metadata level 16)."},
};
}  // namespace

std::span<const ConfigKey> config_keys() { return kConfigKeys; }

}  // namespace sluice::core
