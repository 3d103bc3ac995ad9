// ConsumerGroup (group.h): opening a group, delivery, acks and nacks, positions.
#include "group.h"

#include "dir_sync.h"

#include <algorithm>
#include <chrono>

#include "group_records.h"
#include "recovery.h"
#include "shard_log.h"
#include "sluice/record_batch.h"

namespace sluice::fs_storage {

using namespace group_records;

std::int64_t steady_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

ConsumerGroup::ConsumerGroup(std::string name, std::string dir, ShardLogImpl& shard,
                             std::shared_ptr<FileSystem> fs, PluginHost& host, GroupClock clock,
                             GroupStepHook hook, std::uint64_t compact_bytes, std::uint64_t max_outstanding)
    : name_(std::move(name)), dir_(std::move(dir)), shard_(shard), fs_(std::move(fs)),
      host_(host), clock_(std::move(clock)), hook_(std::move(hook)),
      compact_bytes_(compact_bytes), max_outstanding_(max_outstanding), next_compact_at_(compact_bytes) {}

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
    GroupStepHook hook, GroupReplicate replicate) {
  // A group's state is acknowledged on its own syncs: the shard's own directory entries
  // first, if the shard is new (docs/architecture.md "Deferred directory syncs of a new shard").
  if (auto r = shard.sync_deferred_dirs(); !r) return r.error();
  // Directories: <dir>, <dir>/dead-letters/log, each new one fsynced into its parent.
  if (auto r = make_dirs(*fs, dir + "/dead-letters/log"); !r) return r.error();
  std::unique_ptr<ConsumerGroup> g(new ConsumerGroup(
      name, dir, shard, fs, host, clock ? std::move(clock) : GroupClock(steady_now_ms),
      std::move(hook), opts.group_journal_compact_bytes, opts.group_max_outstanding));
  g->replicate_ = std::move(replicate);
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
  }
  // Every open, not only the one that created them: an open whose sync failed after a
  // create left an entry a power cut may take back, and the next open found it and synced
  // nothing, so acks synced below it could vanish with it (review). Every level from the
  // shard's directory down: <shard>/groups, groups/<g>, <g>/journal and dead-letters,
  // dead-letters/log. Four fsyncs per group open (groups open on first use).
  const std::string groups = dir.substr(0, dir.rfind('/'));
  for (const std::string& d : {groups, dir, dir + "/dead-letters"})
    if (auto r = fs->sync_dir(d); !r) return r.error();
  if (auto r = sync_parent_dir(*fs, groups); !r) return r.error();
  if (auto r = g->replay_journal(have_snap, snap_gen, snap_off); !r) return r.error();

  const ShardRef dref = shard.ref();
  auto rec = recover_log(*fs, host, opts, dir + "/dead-letters/log", dref.incarnation);
  if (!rec) return rec.error();
  auto unverified = std::move(rec->unverified);
  g->dead_ = std::make_shared<ShardLogImpl>(dref, RetentionPolicy{}, dir + "/dead-letters", opts,
                                            fs, host, pool, std::move(rec).value());
  // What a fast start did not CRC-check here is checked in the background, as for the
  // shard's own log (docs/architecture.md "Restart: background verification").
  if (shard.verify_later())
    shard.verify_later()("the dead letters of group " + name + " of shard " + dref.to_string(),
                         dir + "/dead-letters/log", g->dead_, std::move(unverified));
  if (auto r = g->reconcile_dead_letters(); !r) return r.error();
  if (auto r = g->resolve_pending_replays(); !r) return r.error();
  g->maybe_compact();
  return g;
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
  if (auto u = usable(); !u) return u.error();
  const std::int64_t now = clock_();
  const ShardStats stats = shard_.stats();
  skip_below(stats.log_start.value());
  // Everything below committed_ is done: a group that learned its acks from the group log
  // (a new leader: ACK ops do not move the cursor) does not read them all again to find
  // nothing to deliver (review finding: a whole acked shard read into memory per fetch).
  cursor_ = std::max(cursor_, committed_);
  // Only what the high watermark covers is readable: an outstanding offset or a cursor
  // above it (a new leader whose watermark is not back up yet) waits, rather than failing
  // the fetch with "beyond the high watermark".
  const std::uint64_t readable = stats.high_watermark.value();
  std::map<std::uint64_t, std::string> cache;  // batches by base offset
  std::size_t cached = 0;                      // their bytes
  std::vector<GroupDelivery::Item> items;
  std::string deliver;  // DELIVER payload (count patched in at the end)
  put32(deliver, 0);

  // Nothing below changes the group's state until every step that can fail has worked
  // (review finding): a fetch that failed half way (a read, the journal, a dead-letter
  // proposal refused for want of replicas) had counted deliveries nobody received, and
  // those records reached the dead letters without max_deliveries real deliveries. The
  // deliveries are gathered first, and counted (outstanding_, cursor_) at the end.
  // Dead-letter moves are the exception: each is its own durable op, done when it returns.

  // 1. Redeliveries: nacked or timed out, oldest offset first.
  // Bounded like new records (review finding): one delivery holds about kMaxDeliveryBytes
  // of batches, whatever the due offsets' spread. Dead-letter moves are bounded too (review
  // finding): each is a replicated, synced append, and a consumer that never acked 100,000
  // records made one fetch move them all, holding the group's lock. At most
  // max(max_records, kMaxDeadLetterMoves) per call, and their batches count toward the bytes.
  // A dead letter waiting for a later fetch is invisible to consumers: only its move waits.
  constexpr std::size_t kMaxDeadLetterMoves = 100;
  const std::size_t max_moves = std::max<std::size_t>(max_records, kMaxDeadLetterMoves);
  std::vector<std::uint64_t> due;
  for (auto& [off, o2] : outstanding_)
    if (o2.deadline_ms <= now && off < readable) due.push_back(off);
  const auto account = [&](std::size_t before, const std::string* b) {
    if (cache.size() > before) cached += b->size();
  };
  std::size_t moved = 0;  // dead-letter moves in this call
  // A bound stopped this fetch with more to do (GroupDelivery::more): the caller fetches
  // again at once rather than waiting for a record beyond the high watermark. Each bound
  // below is reached only after some progress (a delivery, a move, the cursor scanned
  // forward), so fetching again while `more` is set always gets somewhere.
  bool more = false;
  for (std::uint64_t off : due) {
    if (items.size() >= max_records || (items.size() + moved > 0 && cached >= kMaxDeliveryBytes)) {
      more = true;
      break;
    }
    auto& st = outstanding_[off];
    if (st.deliveries + 1 > o.max_deliveries) {
      // Past the bound the rest wait for a later fetch; redeliveries behind them are still
      // gathered (late review: an empty answer here parks a long poll with records due).
      if (moved >= max_moves) {
        more = true;
        continue;
      }
      const std::size_t before = cache.size();
      if (auto r = dead_letter(off, st.deliveries, cache); !r) return r.error();
      ++moved;
      if (cache.size() > before) {
        auto it = std::prev(cache.upper_bound(off));
        cached += it->second.size();
      }
      continue;
    }
    const std::size_t before = cache.size();
    auto b = batch_for(off, cache);
    if (!b) return b.error();
    account(before, *b);
    items.push_back({Offset(off), st.deliveries + 1});  // counted at the end
  }
  const std::size_t redeliveries = items.size();
  // 2. New records from the cursor up to the high watermark. Bounded twice (review
  // finding): a consumer that fetches and never acks holds at most max_outstanding_
  // deliveries (not the whole shard), and one delivery holds about kMaxDeliveryBytes of
  // batches (at least one), not max_records of them.
  // Batches with nothing to deliver (done above committed_) are scanned, not kept, and at
  // most kMaxScanBytes of them per call: the cursor moves past them for the next call.
  constexpr std::size_t kMaxScanBytes = 4 * kMaxDeliveryBytes;
  std::size_t scanned = 0;
  std::uint64_t cursor = cursor_;  // cursor_ once counted
  const auto room = [&] { return outstanding_.size() + (items.size() - redeliveries) < max_outstanding_; };
  bool dry = false;  // a read at the cursor found nothing: not a bound, nothing to fetch again for
  while (items.size() < max_records && room() && cursor < readable && scanned < kMaxScanBytes &&
         (items.empty() || cached < kMaxDeliveryBytes)) {
    auto r = shard_.read(Offset(cursor), max_records - static_cast<std::uint32_t>(items.size()), kFetchBytes);
    if (!r) return r.error();
    if (r->batches.empty()) {
      dry = true;
      break;
    }
    for (auto& b : r->batches) {
      BatchHeader h = BatchHeader::decode(b.data());
      std::uint64_t off = std::max(cursor, h.base_offset);
      const std::size_t had = items.size();
      for (; off < h.next_offset() && items.size() < max_records && room(); ++off) {
        // Done without a DELIVER record (a dead-letter move recorded at open): never again.
        if (off < committed_ || done_.count(off)) continue;
        items.push_back({Offset(off), 1});
      }
      cursor = std::max(cursor, off);
      scanned += b.size();
      if (items.size() > had) {
        cached += b.size();
        cache.emplace(h.base_offset, std::move(b));
      }
      if (items.size() >= max_records || !room() || cached >= kMaxDeliveryBytes || scanned >= kMaxScanBytes) break;
    }
  }
  // Stopped below the high watermark with room for more deliveries: a bound (records,
  // bytes, scanned bytes), so more is readable now. At max outstanding, the caller waits for
  // acks or an ack timeout instead.
  if (!dry && cursor < readable && room()) more = true;
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
  // Every step that could fail has worked: count the deliveries.
  for (const auto& it : items) {
    auto& st = outstanding_[it.offset.value()];
    st.deliveries = it.delivery;
    st.deadline_ms = now + o.ack_timeout_ms;
  }
  cursor_ = cursor;
  maybe_compact();
  GroupDelivery out;
  out.more = more;
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
  if (auto u = usable(); !u) return u;
  if (auto r = check_outstanding(offsets, "ack"); !r) return r;
  if (offsets.empty()) return {};
  std::string payload;
  put32(payload, static_cast<std::uint32_t>(offsets.size()));
  for (const auto& o : offsets) put64(payload, o.value());
  if (auto r = propose(kAck, payload); !r) return r;
  if (auto r = append_journal(kAck, payload, true); !r) return r;
  for (const auto& o : offsets) mark_done(o.value());
  maybe_compact();
  return {};
}

Result<void> ConsumerGroup::nack(const std::vector<Offset>& offsets) {
  std::lock_guard lk(mu_);
  if (auto u = usable(); !u) return u;
  if (auto r = check_outstanding(offsets, "nack"); !r) return r;
  // Not journaled: after a crash every outstanding record is due at once anyway.
  const std::int64_t now = clock_();
  for (const auto& o : offsets) outstanding_[o.value()].deadline_ms = now;
  return {};
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

}  // namespace sluice::fs_storage
