// ConsumerGroup (group.h): the journal and the snapshot: loading, replaying, appending
// and compaction.
#include "group.h"

#include <algorithm>

#include "group_records.h"
#include "shard_log.h"
#include "segment.h"
#include "sluice/record_batch.h"

namespace sluice::fs_storage {

using namespace group_records;

namespace {
constexpr std::string_view kComponent = "fs-storage";
constexpr std::string_view kSnapshotMagic = "SLGSNAP1";

Result<void> write_synced_file(FileSystem& fs, const std::string& path, const std::string& data) {
  auto f = fs.open(path, OpenMode::create_truncate);
  if (!f) return f.error();
  if (auto r = (*f)->pwrite(data.data(), data.size(), 0); !r) return r;
  return (*f)->datasync();
}

// Reads a little-endian snapshot field by field; `ok` turns false past the end.
struct Cursor {
  const std::string& b;
  std::size_t pos = 0;
  bool ok = true;
  std::uint64_t u64() {
    if (pos + 8 > b.size()) { ok = false; return 0; }
    pos += 8;
    return wire::get_u64(b.data() + pos - 8);
  }
  std::uint32_t u32() {
    if (pos + 4 > b.size()) { ok = false; return 0; }
    pos += 4;
    return wire::get_u32(b.data() + pos - 4);
  }
};
}  // namespace

Result<void> ConsumerGroup::load_snapshot(bool* found, std::uint64_t* gen, std::uint64_t* offset) {
  const std::string path = dir_ + "/snapshot";
  auto ex = fs_->exists(path);
  if (!ex) return ex.error();
  *found = *ex;
  if (!*ex) return {};
  auto f = fs_->open(path, OpenMode::read_write);
  if (!f) return f.error();
  auto data = read_whole_file(**f);
  if (!data) return data.error();
  const std::string& b = *data;
  auto bad = [&](const std::string& why) {
    return Error(Errc::corrupt_data, "corrupt group snapshot " + path + ": " + why);
  };
  if (b.size() < kSnapshotMagic.size() + 4 || b.compare(0, kSnapshotMagic.size(), kSnapshotMagic) != 0)
    return bad("bad magic or length");
  if (crc32c(b.data(), b.size() - 4) != wire::get_u32(b.data() + b.size() - 4))
    return bad("CRC mismatch");
  Cursor c{b, kSnapshotMagic.size()};
  *gen = c.u64();
  *offset = c.u64();
  committed_ = c.u64();
  cursor_ = c.u64();
  const std::int64_t now = clock_();
  for (std::uint32_t n = c.u32(), i = 0; c.ok && i < n; ++i) done_.insert(c.u64());
  for (std::uint32_t n = c.u32(), i = 0; c.ok && i < n; ++i) {
    const std::uint64_t off = c.u64();
    outstanding_[off] = Outstanding{c.u32(), now};  // due at once, like after a journal replay
  }
  for (std::uint32_t n = c.u32(), i = 0; c.ok && i < n; ++i) {
    const std::uint64_t from = c.u64();
    replayed_[from] = c.u64();
  }
  for (std::uint32_t n = c.u32(), i = 0; c.ok && i < n; ++i) {
    PendingReplay p;
    p.from = c.u64();
    p.to = c.u64();
    p.shard_from = c.u64();
    pending_.push_back(p);
  }
  if (!c.ok || c.pos + 4 != b.size()) return bad("bad field counts");
  return {};
}

std::string ConsumerGroup::encode_snapshot(std::uint64_t journal_offset) const {
  std::string s(kSnapshotMagic);
  put64(s, generation_);
  put64(s, journal_offset);
  put64(s, committed_);
  put64(s, cursor_);
  put32(s, static_cast<std::uint32_t>(done_.size()));
  for (auto off : done_) put64(s, off);
  put32(s, static_cast<std::uint32_t>(outstanding_.size()));
  for (auto& [off, o] : outstanding_) {
    put64(s, off);
    put32(s, o.deliveries);
  }
  put32(s, static_cast<std::uint32_t>(replayed_.size()));
  for (auto& [from, to] : replayed_) {
    put64(s, from);
    put64(s, to);
  }
  put32(s, static_cast<std::uint32_t>(pending_.size()));
  for (auto& p : pending_) {
    put64(s, p.from);
    put64(s, p.to);
    put64(s, p.shard_from);
  }
  put32(s, crc32c(s.data(), s.size()));
  return s;
}

void ConsumerGroup::maybe_compact() {
  if (journal_size_ <= next_compact_at_) return;
  if (auto r = compact(); !r) {
    // The journal stays valid (the snapshot, if renamed, says which prefix it covers);
    // try again after another threshold's worth of records.
    next_compact_at_ = journal_size_ + compact_bytes_;
    host_.log(LogLevel::warn, kComponent,
              "group journal " + dir_ + "/journal: compaction failed: " + r.error().message);
    return;
  }
  next_compact_at_ = compact_bytes_;
}

Result<void> ConsumerGroup::compact() {
  auto stopped = [](std::string_view step) {
    return Error(Errc::internal, "stopped at " + std::string(step));
  };
  // The snapshot must never cover journal bytes a crash could take back (unsynced DELIVERs).
  if (auto r = journal_->datasync(); !r) return r;
  const std::uint64_t covered = journal_size_;
  if (auto r = write_synced_file(*fs_, dir_ + "/snapshot.tmp", encode_snapshot(covered)); !r)
    return r;
  if (stop_at("group.compact.after_snapshot_tmp")) return stopped("group.compact.after_snapshot_tmp");
  if (auto r = fs_->rename(dir_ + "/snapshot.tmp", dir_ + "/snapshot"); !r) return r;
  if (auto r = fs_->sync_dir(dir_); !r) return r;
  if (stop_at("group.compact.after_snapshot")) return stopped("group.compact.after_snapshot");
  std::string payload;
  put64(payload, generation_ + 1);
  const std::string gen = journal_record(kGen, payload);
  auto f = fs_->open(dir_ + "/journal.tmp", OpenMode::create_truncate);
  if (!f) return f.error();
  if (auto r = (*f)->pwrite(gen.data(), gen.size(), 0); !r) return r;
  if (auto r = (*f)->datasync(); !r) return r;
  if (stop_at("group.compact.after_journal_tmp")) return stopped("group.compact.after_journal_tmp");
  if (auto r = fs_->rename(dir_ + "/journal.tmp", dir_ + "/journal"); !r) return r;
  // From here the new file is the journal. Reopened by its final name (error messages name
  // it); the temporary handle (same inode) is the fallback.
  if (auto j = fs_->open(dir_ + "/journal", OpenMode::read_write); j) journal_ = std::move(j).value();
  else journal_ = std::move(f).value();
  journal_size_ = gen.size();
  ++generation_;
  // Until the rename is durable no synced record may depend on the new journal.
  dir_unsynced_ = true;
  if (auto r = fs_->sync_dir(dir_); !r) return r;
  dir_unsynced_ = false;
  host_.log(LogLevel::debug, kComponent,
            "group journal " + dir_ + "/journal: compacted " + std::to_string(covered) +
                " bytes into the snapshot; generation " + std::to_string(generation_));
  if (stop_at("group.compact.after_journal")) return stopped("group.compact.after_journal");
  return {};
}

void ConsumerGroup::apply_record(std::uint8_t type, const char* p, std::uint32_t len,
                                 std::int64_t now) {
  if (type == kDeliver) {
    const std::uint32_t n = wire::get_u32(p);
    for (std::uint32_t i = 0; i < n; ++i) {
      const std::uint64_t off = wire::get_u64(p + 4 + i * 12);
      cursor_ = std::max(cursor_, off + 1);
      if (off < committed_ || done_.count(off)) continue;
      outstanding_[off] = Outstanding{wire::get_u32(p + 4 + i * 12 + 8), now};  // due at once
    }
  } else if (type == kAck) {
    const std::uint32_t n = wire::get_u32(p);
    for (std::uint32_t i = 0; i < n; ++i) mark_done(wire::get_u64(p + 4 + i * 8));
  } else if (type == kDead) {
    mark_done(wire::get_u64(p));
  } else if (type == kReplayed) {
    const std::uint64_t from = wire::get_u64(p), to = wire::get_u64(p + 8);
    replayed_[from] = std::max(replayed_[from], to);
    std::erase_if(pending_, [&](const PendingReplay& r) { return r.from == from && r.to == to; });
  } else if (type == kReplayPending) {
    pending_.push_back({wire::get_u64(p), wire::get_u64(p + 8), wire::get_u64(p + 16)});
  }
  (void)len;
}

Result<void> ConsumerGroup::replay_journal(bool have_snap, std::uint64_t snap_gen,
                                           std::uint64_t snap_off) {
  auto data = read_whole_file(*journal_);
  if (!data) return data.error();
  const std::string& b = *data;
  const std::int64_t now = clock_();
  std::size_t pos = 0;
  std::uint64_t gen = 0;
  std::uint64_t apply_from = 0;  // journal bytes below are covered by the snapshot
  bool checked_gen = false;
  auto check_gen = [&]() -> Result<void> {
    checked_gen = true;
    if (!have_snap) {
      if (gen != 0)
        return Error(Errc::corrupt_data, "group journal " + dir_ + "/journal is generation " +
                                             std::to_string(gen) + " but there is no snapshot");
      return {};
    }
    if (gen == snap_gen) apply_from = snap_off;  // the reset after that snapshot never happened
    else if (gen != snap_gen + 1)
      return Error(Errc::corrupt_data, "group journal " + dir_ + "/journal is generation " +
                                           std::to_string(gen) + " but the snapshot covers generation " +
                                           std::to_string(snap_gen));
    return {};
  };
  while (pos + kRecHeader <= b.size()) {
    const std::uint32_t len = wire::get_u32(b.data() + pos);
    if (pos + kRecHeader + len > b.size()) break;
    if (crc32c(b.data() + pos + 8, 1 + len) != wire::get_u32(b.data() + pos + 4)) break;
    const std::uint8_t type = static_cast<std::uint8_t>(b[pos + 8]);
    const char* p = b.data() + pos + kRecHeader;
    bool ok;
    if (type == kDeliver || type == kAck) {
      const std::size_t each = type == kDeliver ? 12 : 8;
      const std::uint32_t n = len >= 4 ? wire::get_u32(p) : 0;
      ok = len >= 4 && len == 4 + n * each;
    } else if (type == kDead) {
      ok = len == 8;
    } else if (type == kReplayed) {
      ok = len == 16;
    } else if (type == kReplayPending) {
      ok = len == 24;
    } else if (type == kGen) {
      ok = len == 8 && pos == 0;
      if (ok) gen = wire::get_u64(p);
    } else {
      ok = false;
    }
    if (!ok) break;
    if (!checked_gen)
      if (auto r = check_gen(); !r) return r;
    if (type != kGen && pos >= apply_from) apply_record(type, p, len, now);
    pos += kRecHeader + len;
  }
  if (!checked_gen)
    if (auto r = check_gen(); !r) return r;
  if (pos != b.size() && pos + kRecHeader <= b.size()) {
    // A record whose CRC holds but that this build cannot read (a type a newer build
    // wrote, a wrong length) is not a torn write: a tear does not leave a matching CRC.
    // Cutting there would drop every record after it, synced ACKs and DEADs too (acked
    // records delivered again, dead letters moved twice): refused instead (review). A
    // damaged record is still taken for the torn tail, even with sound records after it:
    // a power cut can keep a later unsynced page and lose an earlier one.
    const std::uint32_t len = wire::get_u32(b.data() + pos);
    if (pos + kRecHeader + len <= b.size() &&
        crc32c(b.data() + pos + 8, 1 + len) == wire::get_u32(b.data() + pos + 4))
      return Error(Errc::corrupt_data,
                   "group journal " + dir_ + "/journal: a record this build cannot read (type " +
                       std::to_string(static_cast<unsigned>(static_cast<std::uint8_t>(b[pos + 8]))) + ", " +
                       std::to_string(len) + " bytes; written by a newer build?) at byte " + std::to_string(pos) +
                       " of " + std::to_string(b.size()) + ": not a torn tail; nothing was cut");
  }
  if (pos != b.size()) {
    // Only unsynced DELIVER records can be torn (every other record is fdatasync'ed before
    // the call returns), so cutting here loses at most delivery counts.
    host_.log(LogLevel::warn, kComponent,
              "group journal " + dir_ + "/journal: truncated a torn tail at byte " +
                  std::to_string(pos) + " (" + std::to_string(b.size() - pos) + " bytes)");
    if (auto r = journal_->truncate(pos); !r) return r;
    if (auto r = journal_->datasync(); !r) return r;
  }
  journal_size_ = pos;
  generation_ = gen;
  cursor_ = std::max(cursor_, committed_);
  if (pos < apply_from) {
    // Compaction syncs the journal before the snapshot, so a crash cannot do this: the disk
    // lost bytes it had synced. Records appended at `pos` would land in the range the
    // snapshot covers and be skipped at the next open, acknowledged acks with them (review
    // finding). A snapshot of this state and a new journal generation come first.
    host_.log(LogLevel::error, kComponent,
              "group journal " + dir_ + "/journal ends at byte " + std::to_string(pos) + ", before the " +
                  std::to_string(apply_from) + " bytes its snapshot covers (the disk lost synced bytes); "
                  "starting a new journal generation from the snapshot");
    if (auto r = compact(); !r) return r;
  }
  return {};
}

Result<void> ConsumerGroup::append_journal(std::uint8_t type, const std::string& payload,
                                           bool sync) {
  if (auto u = usable(); !u) return u;
  const auto failed = [&](const Error& e) -> Result<void> {
    failed_ = "the journal of group " + name_ + " of shard " + shard_.ref().to_string() + " failed (" + e.message +
              "); the group refuses calls until the shard is reopened";
    host_.log(LogLevel::error, kComponent, failed_);
    return Error(Errc::storage_failure, failed_);
  };
  const std::string rec = journal_record(type, payload);
  if (auto r = journal_->pwrite(rec.data(), rec.size(), journal_size_); !r) return failed(r.error());
  journal_size_ += rec.size();
  if (sync) {
    if (dir_unsynced_) {  // the journal's rename must be durable before this record counts
      if (auto r = fs_->sync_dir(dir_); !r) return failed(r.error());
      dir_unsynced_ = false;
    }
    if (auto r = journal_->datasync(); !r) return failed(r.error());
  }
  return {};
}

Result<void> ConsumerGroup::usable() const {
  if (!dead_) return Error(Errc::unavailable, "shard " + shard_.ref().to_string() + " is closed");
  if (!failed_.empty()) return Error(Errc::storage_failure, failed_);
  return {};
}

}  // namespace sluice::fs_storage
