#include "options.h"

#include <stdexcept>

namespace sluice::fs_storage {

Options Options::from_host(const PluginHost& host) {
  Options o;
  o.dir = host.config_string("storage.dir", host.data_dir() + "/shards");
  if (o.dir.empty()) throw std::invalid_argument("storage.dir must not be empty");
  while (o.dir.size() > 1 && o.dir.back() == '/') o.dir.pop_back();

  const std::int64_t seg = host.config_int("storage.segment_bytes", 64ll << 20);
  // Index positions are u32; 1 GiB keeps every batch start far below that.
  if (seg < 1024 || seg > (1ll << 30))
    throw std::invalid_argument("storage.segment_bytes must be in [1024, 1073741824]");
  o.segment_bytes = static_cast<std::uint64_t>(seg);

  const std::int64_t iv = host.config_int("storage.index_interval_bytes", 4096);
  if (iv < 64) throw std::invalid_argument("storage.index_interval_bytes must be >= 64");
  o.index_interval_bytes = static_cast<std::uint64_t>(iv);

  const std::string fsync = host.config_string("storage.fsync", "always");
  if (fsync == "always") o.fsync = FsyncPolicy::always;
  else if (fsync == "never") o.fsync = FsyncPolicy::never;
  else throw std::invalid_argument("storage.fsync must be \"always\" or \"never\", got \"" + fsync + "\"");

  const std::string verify = host.config_string("storage.verify_on_start", "checkpoint");
  if (verify == "all") o.verify_on_start = VerifyOnStart::all;
  else if (verify == "tail") o.verify_on_start = VerifyOnStart::tail;
  else if (verify == "checkpoint") o.verify_on_start = VerifyOnStart::checkpoint;
  else throw std::invalid_argument("storage.verify_on_start must be \"all\", \"tail\" or \"checkpoint\", got \"" +
                                   verify + "\"");

  o.repair = host.config_bool("storage.repair", false);
  // A repair cuts a log at its first corrupt batch, which only a full check finds.
  if (o.repair) o.verify_on_start = VerifyOnStart::all;
  o.verify_in_background = host.config_bool("storage.verify_in_background", true);
  const std::int64_t vr = host.config_int("storage.verify_mb_per_sec", 128);
  if (vr < 0 || vr > (1 << 20))
    throw std::invalid_argument("storage.verify_mb_per_sec must be in [0, 1048576], got " + std::to_string(vr));
  o.verify_bytes_per_sec = static_cast<std::uint64_t>(vr) << 20;
  o.retention_interval_ms = host.config_int("storage.retention_interval_ms", 30000);

  // Two flushers by default: a shard's fdatasync is several serial device round trips, and a
  // second thread overlaps another shard's (docs/benchmarks.md "Two flushers").
  const std::int64_t ft = host.config_int("storage.flush_threads", 2);
  if (ft < 1 || ft > 8) throw std::invalid_argument("storage.flush_threads must be in [1, 8]");
  o.flush_threads = static_cast<unsigned>(ft);
  // A sync of blocks already written is two device round trips where a growing file's is
  // four (docs/architecture.md "Preallocated segments"); without syncs there is nothing to win.
  o.preallocate_segments =
      host.config_bool("storage.preallocate_segments", true) && o.fsync == FsyncPolicy::always;
  // Dropped pages are clean only after a sync; with fsync = never they would be written back
  // by the advice itself, so the window is off there.
  const std::int64_t pcw = host.config_int("storage.page_cache_window_bytes", 64ll << 20);
  if (pcw != 0 && (pcw < (1ll << 20) || pcw > (1ll << 40)))
    throw std::invalid_argument("storage.page_cache_window_bytes must be 0 or in [1048576, 1099511627776], got " +
                                std::to_string(pcw));
  o.page_cache_window_bytes = o.fsync == FsyncPolicy::always ? static_cast<std::uint64_t>(pcw) : 0;
  auto ranged = [&](const char* key, std::int64_t def, std::int64_t lo, std::int64_t hi) {
    const std::int64_t v = host.config_int(key, def);
    if (v < lo || v > hi)
      throw std::invalid_argument(std::string(key) + " must be in [" + std::to_string(lo) + ", " +
                                  std::to_string(hi) + "], got " + std::to_string(v));
    return v;
  };
  o.replication_max_lag_ms = ranged("replication.max_lag_ms", 10000, 100, 3600000);
  o.replication_fetch_wait_ms = ranged("replication.fetch_wait_ms", 500, 0, 60000);
  o.replication_fetch_max_bytes = ranged("replication.fetch_max_bytes", 4 << 20, 64 << 10, 32 << 20);
  o.replication_quorum_timeout_ms = ranged("replication.quorum_timeout_ms", 30000, 100, 600000);
  o.replication_workers = static_cast<unsigned>(ranged("replication.workers", 2, 1, 16));

  const std::int64_t gc = host.config_int("storage.group_journal_compact_bytes", 1 << 20);
  if (gc < 1 || gc > (1ll << 40))
    throw std::invalid_argument("storage.group_journal_compact_bytes must be in [1, 1099511627776]");
  o.group_journal_compact_bytes = static_cast<std::uint64_t>(gc);
  o.group_max_outstanding = static_cast<std::uint64_t>(ranged("storage.group_max_outstanding", 100000, 1, 100000000));
  return o;
}

}  // namespace sluice::fs_storage
