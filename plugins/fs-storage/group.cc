#include "group.h"

#include <algorithm>
#include <chrono>
#include <future>

#include "recovery.h"
#include "shard_log.h"
#include "sluice/record_batch.h"

namespace sluice::fs_storage {

namespace {
constexpr std::string_view kComponent = "fs-storage";
constexpr std::uint8_t kDeliver = 1, kAck = 2, kDead = 3, kReplayed = 4, kGen = 5,
                       kReplayPending = 6;
constexpr std::string_view kSnapshotMagic = "SLGSNAP1";
constexpr std::uint64_t kDeadLetterTailCheck = 64;
constexpr std::size_t kRecHeader = 9;
constexpr std::size_t kFetchBytes = 1 << 20;

void put64(std::string& s, std::uint64_t v) {
  char b[8];
  wire::put_u64(b, v);
  s.append(b, 8);
}
void put32(std::string& s, std::uint32_t v) {
  char b[4];
  wire::put_u32(b, v);
  s.append(b, 4);
}

std::string journal_record(std::uint8_t type, const std::string& payload) {
  std::string rec;
  rec.reserve(kRecHeader + payload.size());
  put32(rec, static_cast<std::uint32_t>(payload.size()));
  put32(rec, 0);
  rec.push_back(static_cast<char>(type));
  rec += payload;
  wire::put_u32(rec.data() + 4, crc32c(rec.data() + 8, rec.size() - 8));
  return rec;
}

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

Result<AppendResult> append_and_wait(ShardLog& log, std::string batch) {
  auto p = std::make_shared<std::promise<Result<AppendResult>>>();
  auto f = p->get_future();
  log.append(std::move(batch), AckMode::leader,
             [p](Result<AppendResult> r) { p->set_value(std::move(r)); });
  return f.get();
}
}  // namespace

std::int64_t steady_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

ConsumerGroup::ConsumerGroup(std::string name, std::string dir, ShardLogImpl& shard,
                             std::shared_ptr<FileSystem> fs, PluginHost& host, GroupClock clock,
                             GroupStepHook hook, std::uint64_t compact_bytes)
    : name_(std::move(name)), dir_(std::move(dir)), shard_(shard), fs_(std::move(fs)),
      host_(host), clock_(std::move(clock)), hook_(std::move(hook)),
      compact_bytes_(compact_bytes), next_compact_at_(compact_bytes) {}

ConsumerGroup::~ConsumerGroup() { close(); }

void ConsumerGroup::close() {
  std::shared_ptr<ShardLogImpl> dead;
  {
    std::lock_guard lk(mu_);
    dead.swap(dead_);
  }
  if (dead) dead->close();
}

Result<std::unique_ptr<ConsumerGroup>> ConsumerGroup::open(
    const std::string& name, const std::string& dir, ShardLogImpl& shard, const Options& opts,
    std::shared_ptr<FileSystem> fs, PluginHost& host, FlushPool& pool, GroupClock clock,
    GroupStepHook hook) {
  // Directories: <dir>, <dir>/dead-letters/log, each new one fsynced into its parent.
  const std::string groups = dir.substr(0, dir.find_last_of('/'));
  for (const std::string& d : {groups, dir, dir + "/dead-letters", dir + "/dead-letters/log"}) {
    auto made = fs->mkdir(d);
    if (!made) return made.error();
    if (*made)
      if (auto r = fs->sync_dir(d.substr(0, d.find_last_of('/'))); !r) return r.error();
  }
  std::unique_ptr<ConsumerGroup> g(new ConsumerGroup(
      name, dir, shard, fs, host, clock ? std::move(clock) : GroupClock(steady_now_ms),
      std::move(hook), opts.group_journal_compact_bytes));
  // An unfinished compaction's temporary files: the renamed files are what counts.
  for (const char* tmp : {"/snapshot.tmp", "/journal.tmp"})
    if (auto r = fs->remove(dir + tmp); !r) return r.error();
  bool have_snap = false;
  std::uint64_t snap_gen = 0, snap_off = 0;
  if (auto r = g->load_snapshot(&have_snap, &snap_gen, &snap_off); !r) return r.error();

  const std::string jpath = dir + "/journal";
  auto ex = fs->exists(jpath);
  if (!ex) return ex.error();
  auto f = fs->open(jpath, *ex ? OpenMode::read_write : OpenMode::create_new);
  if (!f) return f.error();
  g->journal_ = std::move(f).value();
  if (!*ex) {
    if (have_snap) {  // cannot happen with the rename protocol; start the next generation
      std::string payload;
      put64(payload, snap_gen + 1);
      const std::string rec = journal_record(kGen, payload);
      if (auto r = g->journal_->pwrite(rec.data(), rec.size(), 0); !r) return r.error();
      if (auto r = g->journal_->datasync(); !r) return r.error();
    }
    if (auto r = fs->sync_dir(dir); !r) return r.error();
  }
  if (auto r = g->replay_journal(have_snap, snap_gen, snap_off); !r) return r.error();

  const ShardRef dref = shard.ref();
  auto rec = recover_log(*fs, host, opts, dir + "/dead-letters/log", dref.incarnation);
  if (!rec) return rec.error();
  g->dead_ = std::make_shared<ShardLogImpl>(dref, RetentionPolicy{}, dir + "/dead-letters", opts,
                                            fs, host, pool, std::move(rec).value());
  if (auto r = g->reconcile_dead_letters(); !r) return r.error();
  if (auto r = g->resolve_pending_replays(); !r) return r.error();
  g->maybe_compact();
  return g;
}

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
  if (pos != b.size()) {
    // Only unsynced DELIVER records can be torn (every other record is fdatasync'ed before
    // the call returns), so cutting here loses at most delivery counts.
    host_.log(LogLevel::warn, kComponent,
              "group journal " + dir_ + "/journal: truncated a torn tail at byte " +
                  std::to_string(pos) + " (" + std::to_string(b.size() - pos) + " bytes)");
    if (auto r = journal_->truncate(pos); !r) return r;
    if (auto r = journal_->datasync(); !r) return r;
  }
  if (pos < apply_from)  // compaction syncs the journal before the snapshot: not a crash
    host_.log(LogLevel::warn, kComponent,
              "group journal " + dir_ + "/journal ends at byte " + std::to_string(pos) +
                  ", before the " + std::to_string(apply_from) + " bytes its snapshot covers");
  journal_size_ = pos;
  generation_ = gen;
  cursor_ = std::max(cursor_, committed_);
  return {};
}

Result<void> ConsumerGroup::append_journal(std::uint8_t type, const std::string& payload,
                                           bool sync) {
  const std::string rec = journal_record(type, payload);
  if (auto r = journal_->pwrite(rec.data(), rec.size(), journal_size_); !r) return r;
  journal_size_ += rec.size();
  if (sync) {
    if (dir_unsynced_) {  // the journal's rename must be durable before this record counts
      if (auto r = fs_->sync_dir(dir_); !r) return r;
      dir_unsynced_ = false;
    }
    if (auto r = journal_->datasync(); !r) return r;
  }
  return {};
}

void ConsumerGroup::mark_done(std::uint64_t off) {
  outstanding_.erase(off);
  if (off < committed_) return;
  done_.insert(off);
  while (!done_.empty() && *done_.begin() == committed_) {
    done_.erase(done_.begin());
    ++committed_;
  }
}

// Records below the log start were removed by retention: nothing left to deliver there.
void ConsumerGroup::skip_below(std::uint64_t log_start) {
  if (committed_ >= log_start) return;
  outstanding_.erase(outstanding_.begin(), outstanding_.lower_bound(log_start));
  done_.erase(done_.begin(), done_.lower_bound(log_start));
  committed_ = log_start;
  cursor_ = std::max(cursor_, log_start);
  while (!done_.empty() && *done_.begin() == committed_) {
    done_.erase(done_.begin());
    ++committed_;
  }
}

Result<const std::string*> ConsumerGroup::batch_for(std::uint64_t off,
                                                   std::map<std::uint64_t, std::string>& cache) {
  auto it = cache.upper_bound(off);
  if (it != cache.begin()) {
    auto prev = std::prev(it);
    BatchHeader h = BatchHeader::decode(prev->second.data());
    if (off < h.next_offset()) return &prev->second;
  }
  auto r = shard_.read(Offset(off), 1, 1);
  if (!r) return r.error();
  if (r->batches.empty())
    return Error(Errc::internal, "offset " + std::to_string(off) + " not found in the shard");
  std::string b = std::move(r->batches.front());
  const std::uint64_t base = BatchHeader::decode(b.data()).base_offset;
  return &(cache[base] = std::move(b));
}

Result<void> ConsumerGroup::dead_letter(std::uint64_t off, std::uint32_t deliveries,
                                        std::map<std::uint64_t, std::string>& cache) {
  auto b = batch_for(off, cache);
  if (!b) return b.error();
  BatchReader reader((*b)->data(), (*b)->size());
  RecordView rv;
  bool found = false;
  while (reader.next(rv))
    if (rv.offset == off) {
      found = true;
      break;
    }
  if (!found) return Error(Errc::internal, "record " + std::to_string(off) + " not in its batch");
  std::string headers(rv.headers);
  append_header(headers, kOriginalOffsetHeader, std::to_string(off));
  append_header(headers, kDeliveriesHeader, std::to_string(deliveries));
  BatchBuilder bb;
  bb.add(rv.key, rv.value, headers, rv.timestamp_ms);
  auto appended = append_and_wait(*dead_, bb.finish());
  if (!appended) return appended.error();
  if (stop_at("group.dead.after_append")) return Error(Errc::internal, "stopped at group.dead.after_append");
  std::string payload;
  put64(payload, off);
  if (auto r = append_journal(kDead, payload, true); !r) return r;
  mark_done(off);
  host_.log(LogLevel::info, kComponent,
            "group " + name_ + " of shard " + shard_.ref().to_string() + ": offset " +
                std::to_string(off) + " moved to dead letters after " +
                std::to_string(deliveries) + " deliveries (dead-letter offset " +
                std::to_string(appended->base_offset.value()) + ")");
  return {};
}

Result<void> check_group_options(const GroupOptions& o) {
  if (o.max_deliveries < 1 || o.max_deliveries > 1000)
    return Error(Errc::invalid_argument, "max_deliveries must be in [1, 1000]");
  if (o.ack_timeout_ms <= 0) return Error(Errc::invalid_argument, "ack_timeout_ms must be > 0");
  return {};
}

Result<GroupDelivery> ConsumerGroup::fetch(std::uint32_t max_records, const GroupOptions& o) {
  if (auto r = check_group_options(o); !r) return r.error();
  if (max_records == 0) max_records = 1;
  std::lock_guard lk(mu_);
  if (!dead_) return Error(Errc::unavailable, "shard " + shard_.ref().to_string() + " is closed");
  const std::int64_t now = clock_();
  skip_below(shard_.stats().log_start.value());
  std::map<std::uint64_t, std::string> cache;  // batches by base offset
  std::vector<GroupDelivery::Item> items;
  std::string deliver;  // DELIVER payload (count patched in at the end)
  put32(deliver, 0);

  // 1. Redeliveries: nacked or timed out, oldest offset first.
  std::vector<std::uint64_t> due;
  for (auto& [off, o2] : outstanding_)
    if (o2.deadline_ms <= now) due.push_back(off);
  for (std::uint64_t off : due) {
    if (items.size() >= max_records) break;
    auto& st = outstanding_[off];
    if (st.deliveries + 1 > o.max_deliveries) {
      if (auto r = dead_letter(off, st.deliveries, cache); !r) return r.error();
      continue;
    }
    auto b = batch_for(off, cache);
    if (!b) return b.error();
    ++st.deliveries;
    st.deadline_ms = now + o.ack_timeout_ms;
    items.push_back({Offset(off), st.deliveries});
  }
  // 2. New records from the cursor up to the high watermark.
  while (items.size() < max_records) {
    auto r = shard_.read(Offset(cursor_), max_records - static_cast<std::uint32_t>(items.size()),
                         kFetchBytes);
    if (!r) return r.error();
    if (r->batches.empty()) break;
    for (auto& b : r->batches) {
      BatchHeader h = BatchHeader::decode(b.data());
      std::uint64_t off = std::max(cursor_, h.base_offset);
      for (; off < h.next_offset() && items.size() < max_records; ++off) {
        // Done without a DELIVER record (a dead-letter move recorded at open): never again.
        if (off < committed_ || done_.count(off)) continue;
        outstanding_[off] = Outstanding{1, now + o.ack_timeout_ms};
        items.push_back({Offset(off), 1});
      }
      cursor_ = std::max(cursor_, off);
      cache.emplace(h.base_offset, std::move(b));
      if (items.size() >= max_records) break;
    }
  }
  std::sort(items.begin(), items.end(),
            [](const auto& a, const auto& b) { return a.offset < b.offset; });
  for (auto& it : items) {
    put64(deliver, it.offset.value());
    put32(deliver, it.delivery);
  }
  if (!items.empty()) {
    wire::put_u32(deliver.data(), static_cast<std::uint32_t>(items.size()));
    // Best effort (not synced): a lost DELIVER record only causes a redelivery.
    if (auto r = append_journal(kDeliver, deliver, false); !r) return r.error();
  }
  maybe_compact();
  GroupDelivery out;
  out.records = std::move(items);
  for (auto& [base, b] : cache) {
    const BatchHeader h = BatchHeader::decode(b.data());
    auto lo = std::lower_bound(out.records.begin(), out.records.end(), base,
                               [](const auto& it, std::uint64_t v) { return it.offset.value() < v; });
    if (lo != out.records.end() && lo->offset.value() < h.next_offset())
      out.batches.push_back(std::move(b));
  }
  return out;
}

Result<void> ConsumerGroup::check_outstanding(const std::vector<Offset>& offsets, const char* verb) {
  for (const auto& o : offsets)
    if (!outstanding_.count(o.value()))
      return Error(Errc::invalid_argument,
                   "cannot " + std::string(verb) + " offset " + std::to_string(o.value()) +
                       ": it is not outstanding for group " + name_ +
                       " (never delivered, or already acked)");
  return {};
}

Result<void> ConsumerGroup::ack(const std::vector<Offset>& offsets) {
  std::lock_guard lk(mu_);
  if (!dead_) return Error(Errc::unavailable, "shard " + shard_.ref().to_string() + " is closed");
  if (auto r = check_outstanding(offsets, "ack"); !r) return r;
  if (offsets.empty()) return {};
  std::string payload;
  put32(payload, static_cast<std::uint32_t>(offsets.size()));
  for (const auto& o : offsets) put64(payload, o.value());
  if (auto r = append_journal(kAck, payload, true); !r) return r;
  for (const auto& o : offsets) mark_done(o.value());
  maybe_compact();
  return {};
}

Result<void> ConsumerGroup::nack(const std::vector<Offset>& offsets) {
  std::lock_guard lk(mu_);
  if (!dead_) return Error(Errc::unavailable, "shard " + shard_.ref().to_string() + " is closed");
  if (auto r = check_outstanding(offsets, "nack"); !r) return r;
  // Not journaled: after a crash every outstanding record is due at once anyway.
  const std::int64_t now = clock_();
  for (const auto& o : offsets) outstanding_[o.value()].deadline_ms = now;
  return {};
}

bool ConsumerGroup::replayed(std::uint64_t off) const {
  for (const auto& [from, to] : replayed_)  // few ranges: replays are operator actions
    if (off >= from && off < to) return true;
  return false;
}

GroupPosition ConsumerGroup::position() {
  std::lock_guard lk(mu_);
  GroupPosition p;
  p.group = name_;
  p.committed = Offset(committed_);
  p.outstanding = outstanding_.size();
  if (dead_) {
    const ShardStats st = dead_->stats();
    std::uint64_t start = st.log_start.value();
    while (start < st.high_watermark.value() && replayed(start)) ++start;
    p.dead_letter_start = Offset(start);
    p.dead_letter_end = st.high_watermark;
  }
  return p;
}

Result<FetchResult> ConsumerGroup::dead_letters(Offset from, std::uint32_t max_records,
                                                std::size_t max_bytes) {
  std::lock_guard lk(mu_);
  if (!dead_) return Error(Errc::unavailable, "shard " + shard_.ref().to_string() + " is closed");
  FetchResult out;
  std::uint64_t at = from.value();
  // Each dead letter is its own batch, so dropping replayed ones keeps whole batches.
  for (;;) {
    auto r = dead_->read(Offset(at), max_records, max_bytes);
    if (!r) return r.error();
    out.high_watermark = r->high_watermark;
    out.log_start = r->log_start;
    out.next_offset = r->next_offset;
    for (auto& b : r->batches)
      if (!replayed(BatchHeader::decode(b.data()).base_offset)) out.batches.push_back(std::move(b));
    if (!out.batches.empty() || r->batches.empty()) return out;
    at = r->next_offset.value();
  }
}

Result<std::string> ConsumerGroup::build_replay(std::uint64_t from, std::uint64_t to,
                                                std::uint64_t* count) {
  BatchBuilder bb;
  std::uint64_t n = 0;
  std::uint64_t at = std::max(from, dead_->stats().log_start.value());
  while (at < to) {
    auto r = dead_->read(Offset(at), 1000, kFetchBytes);
    if (!r) return r.error();
    if (r->batches.empty()) break;
    for (auto& b : r->batches) {
      BatchReader reader(b.data(), b.size());
      RecordView rv;
      while (reader.next(rv)) {
        if (rv.offset < at || rv.offset >= to || replayed(rv.offset)) continue;
        // The original headers, without the ones dead-lettering (or an earlier replay)
        // added, plus the replay mark recovery looks for.
        std::vector<Header> hs;
        std::string headers;
        if (decode_headers(rv.headers, hs))
          for (auto& h : hs)
            if (h.name != kOriginalOffsetHeader && h.name != kDeliveriesHeader &&
                h.name != kReplayedFromHeader)
              append_header(headers, h.name, h.value);
        append_header(headers, kReplayedFromHeader, name_ + ":" + std::to_string(rv.offset));
        bb.add(rv.key, rv.value, headers, rv.timestamp_ms);
        ++n;
      }
    }
    at = r->next_offset.value();
  }
  *count = n;
  return n > 0 ? bb.finish() : std::string();
}

Result<void> ConsumerGroup::journal_replayed(std::uint64_t from, std::uint64_t to) {
  std::string payload;
  put64(payload, from);
  put64(payload, to);
  if (auto r = append_journal(kReplayed, payload, true); !r) return r;
  replayed_[from] = std::max(replayed_[from], to);
  std::erase_if(pending_, [&](const PendingReplay& p) { return p.from == from && p.to == to; });
  return {};
}

// A dead-letter record whose original offset the journal does not hold as done was moved
// just before a crash took its DEAD record: record the move now (only the newest can be
// missing, since each move's DEAD is synced before the next move; the check looks further).
Result<void> ConsumerGroup::reconcile_dead_letters() {
  const ShardStats st = dead_->stats();
  const std::uint64_t end = st.high_watermark.value();
  std::uint64_t at = std::max(st.log_start.value(),
                              end > kDeadLetterTailCheck ? end - kDeadLetterTailCheck : 0);
  while (at < end) {
    auto r = dead_->read(Offset(at), 1000, kFetchBytes);
    if (!r) return r.error();
    if (r->batches.empty()) break;
    for (auto& b : r->batches) {
      BatchReader reader(b.data(), b.size());
      RecordView rv;
      while (reader.next(rv)) {
        if (rv.offset < at) continue;
        std::vector<Header> hs;
        if (!decode_headers(rv.headers, hs)) continue;
        for (auto& h : hs) {
          if (h.name != kOriginalOffsetHeader) continue;
          std::uint64_t off = 0;
          try {
            off = std::stoull(std::string(h.value));
          } catch (const std::exception&) {
            break;
          }
          if (off < committed_ || done_.count(off)) break;
          std::string payload;
          put64(payload, off);
          if (auto w = append_journal(kDead, payload, true); !w) return w;
          mark_done(off);
          host_.log(LogLevel::warn, kComponent,
                    "group " + name_ + " of shard " + shard_.ref().to_string() + ": offset " +
                        std::to_string(off) + " was moved to dead letters (dead-letter offset " +
                        std::to_string(rv.offset) +
                        ") but the journal missed it (crash); recorded it now");
          break;
        }
      }
    }
    at = r->next_offset.value();
  }
  cursor_ = std::max(cursor_, committed_);
  return {};
}

// A replay whose intent is journaled but not its completion: find its batch in the shard
// (records marked "<group>:<dead-letter offset>"), else append it now; then journal REPLAYED.
Result<void> ConsumerGroup::resolve_pending_replays() {
  while (!pending_.empty()) {
    const PendingReplay p = pending_.front();
    const std::string prefix = name_ + ":";
    const ShardStats st = shard_.stats();
    bool found = false;
    std::uint64_t at = std::max(p.shard_from, st.log_start.value());
    while (!found && at < st.high_watermark.value()) {
      auto r = shard_.read(Offset(at), 1000, kFetchBytes);
      if (!r) return r.error();
      if (r->batches.empty()) break;
      for (auto& b : r->batches) {
        BatchReader reader(b.data(), b.size());
        RecordView rv;
        while (!found && reader.next(rv)) {
          std::vector<Header> hs;
          if (rv.offset < at || !decode_headers(rv.headers, hs)) continue;
          for (auto& h : hs) {
            if (h.name != kReplayedFromHeader || h.value.substr(0, prefix.size()) != prefix)
              continue;
            std::uint64_t dl = 0;
            try {
              dl = std::stoull(std::string(h.value.substr(prefix.size())));
            } catch (const std::exception&) {
              continue;
            }
            if (dl >= p.from && dl < p.to) found = true;
          }
        }
        if (found) break;
      }
      at = r->next_offset.value();
    }
    std::uint64_t n = 0;
    if (!found) {
      auto batch = build_replay(p.from, p.to, &n);
      if (!batch) return batch.error();
      if (n > 0) {
        auto appended = append_and_wait(shard_, std::move(*batch));
        if (!appended) return appended.error();
      }
    }
    if (auto r = journal_replayed(p.from, p.to); !r) return r;
    host_.log(LogLevel::warn, kComponent,
              "group " + name_ + " of shard " + shard_.ref().to_string() +
                  ": finished an interrupted replay of dead letters [" + std::to_string(p.from) +
                  ", " + std::to_string(p.to) + "): " +
                  (found ? std::string("its batch was already in the shard")
                         : "appended " + std::to_string(n) + " record(s) now"));
  }
  return {};
}

Result<std::uint64_t> ConsumerGroup::replay(Offset from, Offset to) {
  std::lock_guard lk(mu_);
  if (!dead_) return Error(Errc::unavailable, "shard " + shard_.ref().to_string() + " is closed");
  // An earlier replay whose append failed must not be appended twice.
  if (auto r = resolve_pending_replays(); !r) return r.error();
  const ShardStats st = dead_->stats();
  if (from > to || to > st.high_watermark || from < st.log_start)
    return Error(Errc::invalid_argument,
                 "dead-letter range [" + std::to_string(from.value()) + ", " +
                     std::to_string(to.value()) + ") is not within [" +
                     std::to_string(st.log_start.value()) + ", " +
                     std::to_string(st.high_watermark.value()) + ")");
  std::uint64_t n = 0;
  auto batch = build_replay(from.value(), to.value(), &n);
  if (!batch) return batch.error();
  if (n > 0) {
    // The intent first (synced): a crash after the shard append is then found at open.
    const std::uint64_t shard_from = shard_.stats().high_watermark.value();
    std::string payload;
    put64(payload, from.value());
    put64(payload, to.value());
    put64(payload, shard_from);
    if (auto r = append_journal(kReplayPending, payload, true); !r) return r.error();
    pending_.push_back({from.value(), to.value(), shard_from});
    if (stop_at("group.replay.after_intent"))
      return Error(Errc::internal, "stopped at group.replay.after_intent");
    auto appended = append_and_wait(shard_, std::move(*batch));
    if (!appended) return appended.error();  // still pending: resolved before the next replay
    if (stop_at("group.replay.after_append"))
      return Error(Errc::internal, "stopped at group.replay.after_append");
  }
  if (auto r = journal_replayed(from.value(), to.value()); !r) return r.error();
  maybe_compact();
  return n;
}

}  // namespace sluice::fs_storage
