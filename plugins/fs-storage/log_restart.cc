// Starting a replica's log over at a new start offset, on disk (log_restart.h).
#include "log_restart.h"

#include <optional>

#include "layout.h"
#include "producers.h"
#include "segment.h"
#include "sluice/record_batch.h"

namespace sluice::fs_storage {

namespace {
constexpr std::string_view kComponent = "fs-storage";
constexpr std::size_t kMarkerSize = 12;

std::string marker_path(const std::string& log_dir) {
  return log_dir + "/" + std::string(kRestartMarkerName);
}
}  // namespace

Result<void> write_restart_marker(FileSystem& fs, const std::string& log_dir, Offset start) {
  const std::string path = marker_path(log_dir);
  char buf[kMarkerSize];
  wire::put_u64(buf, start.value());
  wire::put_u32(buf + 8, crc32c(buf, 8));
  {
    auto f = fs.open(path + ".tmp", OpenMode::create_truncate);
    if (!f) return f.error();
    if (auto r = (*f)->pwrite(buf, sizeof buf, 0); !r) return r;
    if (auto r = (*f)->datasync(); !r) return r;
  }
  if (auto r = fs.rename(path + ".tmp", path); !r) return r;
  return fs.sync_dir(log_dir);
}

Result<std::optional<Offset>> read_restart_marker(FileSystem& fs, const std::string& log_dir) {
  const std::string path = marker_path(log_dir);
  auto ex = fs.exists(path);
  if (!ex) return ex.error();
  if (!*ex) return std::optional<Offset>();
  auto f = fs.open(path, OpenMode::read_write);
  if (!f) return f.error();
  auto b = read_whole_file(**f);
  if (!b) return b.error();
  // Renamed into place only once complete and synced: anything else is damage.
  if (b->size() != kMarkerSize || crc32c(b->data(), 8) != wire::get_u32(b->data() + 8))
    return Error(Errc::corrupt_data,
                 path + " is corrupt: cannot tell whether the log was started over; "
                        "refusing to open it");
  return std::optional<Offset>(Offset(wire::get_u64(b->data())));
}

Result<void> drop_below(FileSystem& fs, const std::string& log_dir, Offset start) {
  auto names = fs.list(log_dir);
  if (!names) return names.error();
  bool held_at_or_above = false;
  for (const auto& n : *names) {
    std::optional<std::uint64_t> base = parse_offset_file_name(n, ".log");
    if (base && *base >= start.value()) held_at_or_above = true;
    if (!base) base = parse_offset_file_name(n, ".idx");
    if (!base || *base >= start.value()) continue;
    if (auto r = fs.remove(log_dir + "/" + n); !r) return r;
  }
  if (!held_at_or_above) {
    auto f = fs.open(log_dir + "/" + segment_file_name(start.value()), OpenMode::create_new);
    if (!f) return f.error();
  }
  // Nothing is held below `start`, and nothing above it yet: no producer has a state.
  const std::string snap = log_dir + "/" + std::string(kProducerSnapshotName);
  if (auto r = write_producer_snapshot(fs, snap, ProducerTable(), start.value()); !r) return r;
  return fs.sync_dir(log_dir);
}

Result<void> remove_restart_marker(FileSystem& fs, const std::string& log_dir) {
  if (auto r = fs.remove(marker_path(log_dir)); !r) return r;
  return fs.sync_dir(log_dir);
}

Result<void> finish_restart(FileSystem& fs, PluginHost& host, const std::string& what,
                            const std::string& shard_dir, const std::string& log_dir,
                            Offset start, EpochHistory* history) {
  if (history && !history->entries().empty())
    if (auto r = history->save(fs, shard_dir, history->current(), history->led(), {}); !r)
      return r;
  if (auto r = remove_restart_marker(fs, log_dir); !r) return r;
  host.log(LogLevel::warn, kComponent,
           what + ": finished starting its log over at offset " + std::to_string(start.value()) +
               " (a restart of the log was interrupted; the old log is gone)");
  return {};
}

}  // namespace sluice::fs_storage
