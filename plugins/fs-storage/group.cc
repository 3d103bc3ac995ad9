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
constexpr std::uint8_t kDeliver = 1, kAck = 2, kDead = 3, kReplayed = 4;
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
                             std::shared_ptr<FileSystem> fs, PluginHost& host, GroupClock clock)
    : name_(std::move(name)), dir_(std::move(dir)), shard_(shard), fs_(std::move(fs)),
      host_(host), clock_(std::move(clock)) {}

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
    std::shared_ptr<FileSystem> fs, PluginHost& host, FlushPool& pool, GroupClock clock) {
  // Directories: <dir>, <dir>/dead-letters/log, each new one fsynced into its parent.
  const std::string groups = dir.substr(0, dir.find_last_of('/'));
  for (const std::string& d : {groups, dir, dir + "/dead-letters", dir + "/dead-letters/log"}) {
    auto made = fs->mkdir(d);
    if (!made) return made.error();
    if (*made)
      if (auto r = fs->sync_dir(d.substr(0, d.find_last_of('/'))); !r) return r.error();
  }
  std::unique_ptr<ConsumerGroup> g(
      new ConsumerGroup(name, dir, shard, fs, host, clock ? std::move(clock) : GroupClock(steady_now_ms)));
  const std::string jpath = dir + "/journal";
  auto ex = fs->exists(jpath);
  if (!ex) return ex.error();
  auto f = fs->open(jpath, *ex ? OpenMode::read_write : OpenMode::create_new);
  if (!f) return f.error();
  if (!*ex)
    if (auto r = fs->sync_dir(dir); !r) return r.error();
  g->journal_ = std::move(f).value();
  if (auto r = g->replay_journal(); !r) return r.error();

  const ShardRef dref = shard.ref();
  auto rec = recover_log(*fs, host, opts, dir + "/dead-letters/log", dref.incarnation);
  if (!rec) return rec.error();
  g->dead_ = std::make_shared<ShardLogImpl>(dref, RetentionPolicy{}, dir + "/dead-letters", opts,
                                            fs, host, pool, std::move(rec).value());
  return g;
}

Result<void> ConsumerGroup::replay_journal() {
  auto data = read_whole_file(*journal_);
  if (!data) return data.error();
  const std::string& b = *data;
  std::size_t pos = 0;
  std::map<std::uint64_t, std::uint32_t> delivered;
  std::set<std::uint64_t> done;
  bool any_delivered = false;
  std::uint64_t max_delivered = 0;
  while (pos + kRecHeader <= b.size()) {
    const std::uint32_t len = wire::get_u32(b.data() + pos);
    if (pos + kRecHeader + len > b.size()) break;
    if (crc32c(b.data() + pos + 8, 1 + len) != wire::get_u32(b.data() + pos + 4)) break;
    const std::uint8_t type = static_cast<std::uint8_t>(b[pos + 8]);
    const char* p = b.data() + pos + kRecHeader;
    bool ok = true;
    if (type == kDeliver || type == kAck) {
      const std::size_t each = type == kDeliver ? 12 : 8;
      const std::uint32_t n = len >= 4 ? wire::get_u32(p) : 0;
      ok = len >= 4 && len == 4 + n * each;
      for (std::uint32_t i = 0; ok && i < n; ++i) {
        const std::uint64_t off = wire::get_u64(p + 4 + i * each);
        if (type == kDeliver) {
          delivered[off] = wire::get_u32(p + 4 + i * each + 8);
          any_delivered = true;
          max_delivered = std::max(max_delivered, off);
        } else {
          done.insert(off);
        }
      }
    } else if (type == kDead && len == 8) {
      done.insert(wire::get_u64(p));
    } else if (type == kReplayed && len == 16) {
      replayed_[wire::get_u64(p)] = wire::get_u64(p + 8);
    } else {
      ok = false;
    }
    if (!ok) break;
    pos += kRecHeader + len;
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
  const std::int64_t now = clock_();
  for (auto& [off, n] : delivered)
    if (!done.count(off)) outstanding_[off] = Outstanding{n, now};  // redeliver on next fetch
  done_ = std::move(done);
  cursor_ = any_delivered ? max_delivered + 1 : 0;
  while (!done_.empty() && *done_.begin() == committed_) {
    done_.erase(done_.begin());
    ++committed_;
  }
  // An offset that was acked (synced) but whose DELIVER record was lost is still done.
  if (!done_.empty()) cursor_ = std::max(cursor_, *done_.rbegin() + 1);
  cursor_ = std::max(cursor_, committed_);
  return {};
}

Result<void> ConsumerGroup::append_journal(std::uint8_t type, const std::string& payload,
                                           bool sync) {
  std::string rec;
  rec.reserve(kRecHeader + payload.size());
  put32(rec, static_cast<std::uint32_t>(payload.size()));
  put32(rec, 0);
  rec.push_back(static_cast<char>(type));
  rec += payload;
  wire::put_u32(rec.data() + 4, crc32c(rec.data() + 8, rec.size() - 8));
  if (auto r = journal_->pwrite(rec.data(), rec.size(), journal_size_); !r) return r;
  journal_size_ += rec.size();
  if (sync)
    if (auto r = journal_->datasync(); !r) return r;
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

Result<GroupDelivery> ConsumerGroup::fetch(std::uint32_t max_records, const GroupOptions& o) {
  if (o.max_deliveries < 1 || o.max_deliveries > 1000)
    return Error(Errc::invalid_argument, "max_deliveries must be in [1, 1000]");
  if (o.ack_timeout_ms <= 0) return Error(Errc::invalid_argument, "ack_timeout_ms must be > 0");
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
      const std::uint64_t from = std::max(cursor_, h.base_offset);
      const std::uint64_t to = std::min<std::uint64_t>(
          h.next_offset(), from + (max_records - items.size()));
      for (std::uint64_t off = from; off < to; ++off) {
        outstanding_[off] = Outstanding{1, now + o.ack_timeout_ms};
        items.push_back({Offset(off), 1});
      }
      if (to > from) cursor_ = to;
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

Result<std::uint64_t> ConsumerGroup::replay(Offset from, Offset to) {
  std::lock_guard lk(mu_);
  if (!dead_) return Error(Errc::unavailable, "shard " + shard_.ref().to_string() + " is closed");
  const ShardStats st = dead_->stats();
  if (from > to || to > st.high_watermark || from < st.log_start)
    return Error(Errc::invalid_argument,
                 "dead-letter range [" + std::to_string(from.value()) + ", " +
                     std::to_string(to.value()) + ") is not within [" +
                     std::to_string(st.log_start.value()) + ", " +
                     std::to_string(st.high_watermark.value()) + ")");
  BatchBuilder bb;
  std::uint64_t n = 0;
  std::uint64_t at = from.value();
  while (at < to.value()) {
    auto r = dead_->read(Offset(at), 1000, kFetchBytes);
    if (!r) return r.error();
    if (r->batches.empty()) break;
    for (auto& b : r->batches) {
      BatchReader reader(b.data(), b.size());
      RecordView rv;
      while (reader.next(rv)) {
        if (rv.offset < at || rv.offset >= to.value() || replayed(rv.offset)) continue;
        // The original headers, without the two that dead-lettering added.
        std::vector<Header> hs;
        std::string headers;
        if (decode_headers(rv.headers, hs))
          for (auto& h : hs)
            if (h.name != kOriginalOffsetHeader && h.name != kDeliveriesHeader)
              append_header(headers, h.name, h.value);
        bb.add(rv.key, rv.value, headers, rv.timestamp_ms);
        ++n;
      }
    }
    at = r->next_offset.value();
  }
  if (n > 0) {
    auto appended = append_and_wait(shard_, bb.finish());
    if (!appended) return appended.error();
  }
  std::string payload;
  put64(payload, from.value());
  put64(payload, to.value());
  if (auto r = append_journal(kReplayed, payload, true); !r) return r.error();
  replayed_[from.value()] = std::max(replayed_[from.value()], to.value());
  return n;
}

}  // namespace sluice::fs_storage
