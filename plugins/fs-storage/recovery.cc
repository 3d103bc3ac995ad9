#include "recovery.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "layout.h"
#include "log_restart.h"
#include "recovery_point.h"
#include "sluice/record_batch.h"

namespace sluice::fs_storage {

namespace {

constexpr std::string_view kComponent = "fs-storage";

struct Bad {
  std::uint64_t pos;
  std::string reason;
  bool batch_invalid;  // check_batch failed (candidate for a torn tail), vs a valid batch
                       // in the wrong place (offset gap, wrong incarnation): corruption
};

struct Scan {
  std::uint64_t valid_end = 0;
  std::uint64_t next_offset = 0;
  std::int64_t max_ts = kNoTimestamp;
  std::vector<IndexEntry> index;
  std::uint64_t last_index_pos = 0;
  std::optional<Bad> bad;
};

// Checks batches of `data`, a window of the segment file starting at file position `win`
// (a multiple of 4096), from file position `init.valid_end` on, continuing `init` (the
// header walk below a recovery point) or from the segment start. Positions are file positions.
Scan scan_segment(std::string_view data, std::uint64_t base, Incarnation inc,
                  std::uint64_t interval, ProducerTable* producers, std::uint64_t producers_from,
                  const Scan* init = nullptr, std::uint64_t win = 0) {
  Scan s;
  s.next_offset = base;
  if (init) s = *init;
  std::uint64_t pos = s.valid_end;
  while (pos - win < data.size()) {
    BatchHeader h;
    const BatchCheck c = check_batch(data.data() + (pos - win), data.size() - (pos - win), &h);
    if (c != BatchCheck::ok) {
      s.bad = Bad{pos, std::string(to_string(c)), true};
      break;
    }
    if (h.base_offset != s.next_offset) {
      s.bad = Bad{pos, "offset discontinuity: expected base offset " + std::to_string(s.next_offset) +
                           ", found " + std::to_string(h.base_offset), false};
      break;
    }
    if (h.incarnation != inc.value()) {
      s.bad = Bad{pos, "batch incarnation " + std::to_string(h.incarnation) +
                           " != shard incarnation " + std::to_string(inc.value()), false};
      break;
    }
    if (wants_index_entry(pos, s.last_index_pos, interval)) {
      s.index.push_back({static_cast<std::uint32_t>(h.base_offset - base),
                         static_cast<std::uint32_t>(pos)});
      s.last_index_pos = pos;
    }
    if (h.producer_id != 0 && h.base_offset >= producers_from)
      producers->record(h.producer_id, h.producer_seq, h.base_offset, h.record_count);
    s.next_offset = h.next_offset();
    s.max_ts = std::max(s.max_ts, h.max_timestamp_ms);  // running max (age retention)
    pos += h.length;
  }
  s.valid_end = pos;
  return s;
}

// Below a recovery point (whole, synced batches): only the batch headers are read (one
// pread each), checking magic, length, offset contiguity and incarnation but no CRC, to
// rebuild the sparse index, max_ts and producer state. nullopt if anything disagrees with
// what the point claims (the caller then checks the whole segment).
std::optional<Scan> walk_headers(File& f, std::uint64_t base, Incarnation inc, std::uint64_t interval,
                                 std::uint64_t trusted_end, ProducerTable* producers,
                                 std::uint64_t producers_from) {
  Scan s;
  s.next_offset = base;
  std::vector<BatchHeader> seen;  // producer batches, recorded only if the walk succeeds
  std::uint64_t pos = 0;
  while (pos < trusted_end) {
    char hdr[kBatchHeaderSize];
    auto n = f.pread(hdr, sizeof hdr, pos);
    if (!n || *n != sizeof hdr) return std::nullopt;
    const BatchHeader h = BatchHeader::decode(hdr);
    if (h.magic != kBatchMagic || h.length < kBatchHeaderSize || h.length > trusted_end - pos ||
        h.base_offset != s.next_offset || h.incarnation != inc.value())
      return std::nullopt;
    if (wants_index_entry(pos, s.last_index_pos, interval)) {
      s.index.push_back({static_cast<std::uint32_t>(h.base_offset - base), static_cast<std::uint32_t>(pos)});
      s.last_index_pos = pos;
    }
    if (h.producer_id != 0 && h.base_offset >= producers_from) seen.push_back(h);
    s.next_offset = h.next_offset();
    s.max_ts = std::max(s.max_ts, h.max_timestamp_ms);
    pos += h.length;
  }
  for (const auto& h : seen) producers->record(h.producer_id, h.producer_seq, h.base_offset, h.record_count);
  s.valid_end = pos;
  return s;
}

// Bytes [from, end of file) of `f`, or [from, to) when `to` is set (and within the file).
Result<std::string> read_from(File& f, std::uint64_t from, std::optional<std::uint64_t> to = std::nullopt) {
  auto sz = f.size();
  if (!sz) return sz.error();
  const std::uint64_t end = to ? std::min(*to, *sz) : *sz;
  std::string data(end > from ? end - from : 0, '\0');
  auto n = f.pread(data.data(), data.size(), from);
  if (!n) return n.error();
  data.resize(*n);
  return data;
}

// Torn-tail test of the active segment. `bad` is where the scan stopped on a batch that
// fails check_batch; `expected` is the offset that batch should have had.
//
// A candidate "valid batch follows" only if it passes check_batch AND carries the shard's
// incarnation AND its base_offset >= expected: a record value may legally contain an
// encoded batch (offset/incarnation as its producer built them), and such bytes inside an
// unacknowledged torn batch must not make the node refuse to start. If the bad batch's
// header is plausible (magic, length >= header) and its declared extent lies within the
// file, the search starts after that extent (never inside its own payload). A declared
// extent past the end of the file is searched too (with the same filters): a flipped bit
// in the (CRC-less) length field of an acknowledged batch must not hide the batches after
// it.
std::optional<std::uint64_t> next_sequenced_batch(std::string_view data, std::uint64_t bad,
                                                  std::uint64_t expected, Incarnation inc) {
  std::uint64_t from = bad + 1;
  if (bad + kBatchHeaderSize <= data.size()) {
    const BatchHeader h = BatchHeader::decode(data.data() + bad);
    if (h.magic == kBatchMagic && h.length >= kBatchHeaderSize && h.length <= data.size() - bad)
      from = bad + h.length;
  }
  char magic[4];
  wire::put_u32(magic, kBatchMagic);
  for (std::uint64_t q = from; q + kBatchHeaderSize <= data.size(); ++q) {
    const void* m = std::memchr(data.data() + q, magic[0], data.size() - q);
    if (!m) return std::nullopt;
    q = static_cast<std::uint64_t>(static_cast<const char*>(m) - data.data());
    if (q + kBatchHeaderSize > data.size()) return std::nullopt;
    if (std::memcmp(data.data() + q, magic, 4) != 0) continue;
    BatchHeader h;
    if (check_batch(data.data() + q, data.size() - q, &h) == BatchCheck::ok &&
        h.incarnation == inc.value() && h.base_offset >= expected)
      return q;
  }
  return std::nullopt;
}

// Whether [from, to) holds a whole 512-byte-aligned block of zeros: a sector the device never
// wrote (a write torn by power loss leaves holes that read as zeros), which bit rot of
// written data does not produce.
constexpr std::uint64_t kSector = 512;
bool has_zero_sector(std::string_view data, std::uint64_t from, std::uint64_t to) {
  for (std::uint64_t b = (from + kSector - 1) / kSector * kSector; b + kSector <= to; b += kSector) {
    const char* p = data.data() + b;
    if (p[0] == 0 && std::memcmp(p, p + 1, kSector - 1) == 0) return true;
  }
  return false;
}
// Whether the bad batch's bytes, from `from` to the end of its sector (and before `to`),
// are all zero: the sector holding its header was not rewritten, and reads as it was
// before the write, the synced bytes before the batch and zeros after them. A batch that
// starts mid-sector and a later batch in another sector that did persist leave no whole
// zero sector between them (a preallocated file shows such later sectors: its size does not
// hide them). Bit rot flips bits; it does not zero a run that begins exactly at a batch.
bool zero_to_sector_end(std::string_view data, std::uint64_t from, std::uint64_t to) {
  const std::uint64_t end = std::min((from / kSector + 1) * kSector, std::min<std::uint64_t>(to, data.size()));
  if (end <= from) return false;
  const char* p = data.data() + from;
  return p[0] == 0 && std::memcmp(p, p + 1, end - from - 1) == 0;
}

// Whether data[from, end) is all zero bytes (true when empty).
bool all_zero(std::string_view data, std::uint64_t from) {
  constexpr std::size_t kStep = 4096;
  static const char zeros[kStep] = {};
  for (std::uint64_t p = from; p < data.size(); p += kStep) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(kStep, data.size() - p));
    if (std::memcmp(data.data() + p, zeros, n) != 0) return false;
  }
  return true;
}

void publish_scan(Segment& seg, const Scan& s) {
  seg.readable_size = s.valid_end;
  seg.written_size = s.valid_end;
  seg.next_offset = s.next_offset;
  seg.max_ts = s.max_ts;
  seg.index = s.index;
}

void init_writer_fields(Segment& seg) {
  seg.write_pos = seg.readable_size;
  seg.writer_start_pos = seg.write_pos;
  seg.last_index_pos = seg.index.empty() ? 0 : seg.index.back().position;
  seg.pending_next_offset = seg.next_offset;
  seg.pending_max_ts = seg.max_ts;
  seg.pending_index.clear();
}

Result<std::shared_ptr<Segment>> open_segment(FileSystem& fs, const std::string& dir,
                                              std::uint64_t base, OpenMode mode) {
  const std::string path = dir + "/" + segment_file_name(base);
  auto f = fs.open(path, mode);
  if (!f) return f.error();
  return std::make_shared<Segment>(base, path, dir + "/" + index_file_name(base),
                                   std::move(f).value());
}

// A sealed segment described by a valid .idx (verify_on_start=tail).
bool load_trusted_index(FileSystem& fs, Segment& seg) {
  auto f = fs.open(seg.index_path(), OpenMode::read_write);
  if (!f) return false;
  auto bytes = read_whole_file(**f);
  if (!bytes) return false;
  auto c = decode_index_file(*bytes);
  if (!c) return false;
  auto size = seg.file().size();
  if (!size || c->base_offset != seg.base() || c->log_size != *size) return false;
  seg.readable_size = c->log_size;
  seg.written_size = c->log_size;
  seg.next_offset = c->next_offset;
  seg.max_ts = c->max_ts;
  seg.index = std::move(c->entries);
  return true;
}

// The producer snapshot, if present and well-formed.
std::optional<std::pair<ProducerTable, std::uint64_t>> load_producer_snapshot(
    FileSystem& fs, PluginHost& host, const std::string& path) {
  auto f = fs.open(path, OpenMode::read_write);
  if (!f) return std::nullopt;
  auto bytes = read_whole_file(**f);
  if (!bytes) return std::nullopt;
  std::uint64_t end = 0;
  auto t = ProducerTable::decode_snapshot(*bytes, &end);
  if (!t) {
    host.log(LogLevel::warn, kComponent,
             "ignoring " + path + " (" + t.error().message + "); rebuilding producer state");
    return std::nullopt;
  }
  return std::pair{std::move(t).value(), end};
}

Result<RecoveredLog> recover_log_impl(FileSystem& fs, PluginHost& host, const Options& opts,
                                      const std::string& dir, Incarnation incarnation,
                                      bool use_snapshot, bool clean);

}  // namespace

std::string corrupt_batch_message(const std::string& file, std::uint64_t pos, const std::string& reason) {
  return "corrupt batch in " + file + " at byte " + std::to_string(pos) + ": " + reason;
}

Result<RecoveredLog> recover_log(FileSystem& fs, PluginHost& host, const Options& opts,
                                 const std::string& dir, Incarnation incarnation, bool clean) {
  auto restart = read_restart_marker(fs, dir);
  if (!restart) return restart.error();
  if (*restart) {
    // A restart of the log at this offset was committed: redo its removals first.
    if (auto r = drop_below(fs, dir, **restart); !r) return r.error();
  }
  auto out = recover_log_impl(fs, host, opts, dir, incarnation, true, clean && !*restart);
  if (!out) return out;
  out->restarted_at = *restart;
  // Bytes kept beyond the recovery point after an unclean stop: a killed process's unsynced
  // writes, still in the page cache. Synced now, before the log serves them or answers a
  // producer's retry as a duplicate of them: otherwise a power cut before the next flush
  // would take back what was answered (review finding). With storage.fsync = never nothing
  // is promised.
  //
  // Whatever the clean-shutdown marker says: it vouches for the logs the last run closed,
  // not for one that run never opened. A log killed with an unsynced tail, then left
  // alone by a run that stopped cleanly, still has that tail unsynced (review finding).
  // After a clean close in checkpoint mode the log's recovery point covers its end, so
  // there is no tail and nothing is synced; in tail and all modes (no recovery point) a
  // start syncs each opened log's active segment (docs/architecture.md "Restart").
  if (out->kept_unsynced_tail && opts.fsync == FsyncPolicy::never) out->kept_unsynced_tail = false;
  if (out->kept_unsynced_tail)
    if (auto r = out->segments.back()->file().datasync(); !r) return r.error();
  return out;
}

namespace {

Result<RecoveredLog> recover_log_impl(FileSystem& fs, PluginHost& host, const Options& opts,
                                      const std::string& dir, Incarnation incarnation,
                                      bool use_snapshot, bool clean) {
  auto names = fs.list(dir);
  if (!names) return names.error();
  std::vector<std::uint64_t> bases;
  std::vector<std::uint64_t> index_bases;
  for (const auto& n : *names) {
    if (auto b = parse_offset_file_name(n, ".log")) bases.push_back(*b);
    else if (auto i = parse_offset_file_name(n, ".idx")) index_bases.push_back(*i);
    else if (n.size() > 4 && n.substr(n.size() - 4) == ".tmp") (void)fs.remove(dir + "/" + n);
  }
  const bool trust_sealed = opts.verify_on_start != VerifyOnStart::all;
  std::optional<RecoveryPoint> rp;
  if (opts.verify_on_start == VerifyOnStart::checkpoint && use_snapshot) {
    rp = read_recovery_point(fs, dir);
    const bool had = rp.has_value();
    if (rp) {
      // A sound point names synced, acknowledged bytes: every cut of the log (truncate_to,
      // restart_at, repair) removes it durably first. Its segment missing or shorter is
      // lost data, never something to ignore (review finding: the log opened shorter and
      // handed its offsets out again), unless retention deleted that segment after the
      // point was written (it lies below every segment left).
      const std::string seg_path = dir + "/" + segment_file_name(rp->segment_base);
      auto ex = fs.exists(seg_path);
      if (!ex) return ex.error();
      const bool retained_away = !*ex && !bases.empty() && rp->segment_base < *std::min_element(bases.begin(), bases.end());
      std::optional<std::uint64_t> have;
      if (*ex) {
        auto sz = fs.file_size(seg_path);
        if (!sz) return sz.error();
        have = *sz;
      }
      if (!retained_away && (!have || *have < rp->position)) {
        const std::string msg = "the recovery point of " + dir + " says " + seg_path + " holds " +
                                std::to_string(rp->position) + " synced bytes, but it " +
                                (have ? "holds " + std::to_string(*have) : std::string("is missing")) +
                                ": acknowledged batches are gone";
        if (!opts.repair)
          return Error(Errc::corrupt_data, msg + " (storage.repair = true starts without them)");
        host.log(LogLevel::error, kComponent, msg + "; storage.repair: starting without them");
      }
      if (retained_away || !have || *have < rp->position) rp.reset();
    }
    if (!rp) {
      auto ex = fs.exists(dir + "/" + std::string(kRecoveryPointName));
      if (had || (ex && *ex))
        host.log(LogLevel::warn, kComponent,
                 "ignoring " + dir + "/" + std::string(kRecoveryPointName) +
                     " (torn, corrupt, or beyond the log); checking every batch");
    }
  }
  const std::string snap_path = dir + "/" + std::string(kProducerSnapshotName);
  std::optional<std::pair<ProducerTable, std::uint64_t>> snap;
  if (use_snapshot) snap = load_producer_snapshot(fs, host, snap_path);
  RecoveredLog out;
  // Producer state is recorded from batches at or above this offset.
  const std::uint64_t producers_from = snap ? snap->second : 0;
  if (snap) out.producers = std::move(snap->first);
  std::sort(bases.begin(), bases.end());
  // An index whose log is gone (crash during retention) is stale.
  for (auto i : index_bases)
    if (!std::binary_search(bases.begin(), bases.end(), i))
      (void)fs.remove(dir + "/" + index_file_name(i));

  if (bases.empty()) {
    auto seg = open_segment(fs, dir, 0, OpenMode::create_new);
    if (!seg) return seg.error();
    if (auto r = fs.sync_dir(dir); !r) return r.error();
    out.segments.push_back(std::move(seg).value());
    out.next_offset = 0;
    out.producers = ProducerTable();  // no batches: no producers (a stale snapshot is moot)
    if (auto r = write_producer_snapshot(fs, snap_path, out.producers, 0); !r)
      host.log(LogLevel::warn, kComponent, "could not write producer snapshot: " + r.error().message);
    else if (auto r2 = fs.sync_dir(dir); !r2)
      return r2.error();
    out.snapshot_end = 0;
    return out;
  }

  for (std::size_t i = 0; i < bases.size(); ++i) {
    auto opened = open_segment(fs, dir, bases[i], OpenMode::read_write);
    if (!opened) return opened.error();
    auto seg = std::move(opened).value();
    const bool last = i + 1 == bases.size();
    // Where the previous segment ended: this one must start there (the first one may start anywhere).
    const std::uint64_t prev_next = out.segments.empty() ? seg->base() : out.segments.back()->next_offset;
    const bool follows_prev = prev_next == seg->base();

    if (!last && trust_sealed && snap &&
        load_trusted_index(fs, *seg) && seg->next_offset <= producers_from &&
        follows_prev) {
      init_writer_fields(*seg);
      out.unverified.push_back({seg, seg->readable_size});
      out.segments.push_back(std::move(seg));
      continue;
    }
    // After a clean shutdown the active segment's .idx, the producer snapshot and the
    // recovery point all describe its whole content: nothing to read.
    if (last && clean && rp && rp->segment_base == seg->base() && snap &&
        load_trusted_index(fs, *seg) && seg->readable_size == rp->position &&
        seg->next_offset == rp->next_offset && producers_from == rp->next_offset &&
        follows_prev) {
      (void)fs.remove(seg->index_path());  // an active segment has no valid cache
      init_writer_fields(*seg);
      out.unverified.push_back({seg, seg->readable_size});
      out.segments.push_back(std::move(seg));
      continue;
    }
    const std::uint64_t trusted_end = rp && rp->segment_base == seg->base() ? rp->position : 0;

    // Below a recovery point only headers are read; the bytes from there on are checked.
    std::optional<Scan> walked;
    if (trusted_end > 0 && follows_prev)
      walked = walk_headers(seg->file(), seg->base(), incarnation, opts.index_interval_bytes,
                            trusted_end, &out.producers, producers_from);
    if (trusted_end > 0 && !walked)
      host.log(LogLevel::warn, kComponent,
               "the recovery point of " + dir + " does not match " + seg->log_path() +
                   "; checking every batch");
    const std::uint64_t win = walked ? walked->valid_end / 4096 * 4096 : 0;  // sector-aligned
    // After an unclean stop the tail beyond the recovery point is read from disk, not from
    // the page cache: pages whose writeback failed in the last run stay cached and clean as
    // if written, and a sync now would succeed without writing them (docs/architecture.md
    // "A failed sync"). Only clean pages are dropped; a killed process's dirty ones stay and
    // are synced below. In checkpoint mode only: a segment without a point of its own (a
    // new shard, a segment that rolled and never synced) is dropped whole, bounded by
    // storage.segment_bytes; tail and all modes keep no point, and dropping there would
    // re-read whole active segments at every start.
    if (last && !clean && opts.verify_on_start == VerifyOnStart::checkpoint) seg->file().drop_cache(win, 0);
    // A reservation (recovery_point.h "Reserved end"): nothing was ever written into this
    // segment at or beyond it, so what lies there is the spare's zeros and is not read, as
    // long as what lies below it is whole batches and then zeros. Anything else (a batch
    // that does not check, or bytes after the first zero one) reads the file whole, as
    // without a reservation. The trial scan records producers into a copy, kept only if
    // the trial stands.
    std::uint64_t limit = 0;
    if (last && follows_prev && rp && rp->segment_base == seg->base() && rp->reserved_end > win) {
      auto sz = seg->file().size();
      if (!sz) return sz.error();
      if (*sz > rp->reserved_end) limit = rp->reserved_end;
    }
    Result<std::string> data = std::string();
    Scan s;
    std::optional<std::uint64_t> zeros_from;  // file position: unwritten space from there on
    bool reservation_held = false;            // the trial below stood: the writer starts below limit
    if (limit > 0) {
      ProducerTable trial = out.producers;
      data = read_from(seg->file(), win, limit);
      if (!data) return data.error();
      s = scan_segment(*data, seg->base(), incarnation, opts.index_interval_bytes, &trial,
                       producers_from, walked ? &*walked : nullptr, win);
      // The page at the reservation must be spare zeros too. A writer that went on past a
      // reservation it no longer held (a point left over by a run that kept none, or by an
      // older build) put bytes there: a batch header if its batches ended exactly there (a
      // header is never zero), or the rest of an unacknowledged group whose start a power
      // cut lost, which a whole read cuts (docs/architecture.md "Restart: recovery point").
      auto page = read_from(seg->file(), limit, limit + 4096);
      if (!page) return page.error();
      if (all_zero(*page, 0)) {
        if (!s.bad) {
          zeros_from = limit;
        } else if (s.bad->batch_invalid && all_zero(*data, s.bad->pos - win)) {
          zeros_from = s.bad->pos;
        }
      }
      if (zeros_from) {
        out.producers = std::move(trial);
        reservation_held = true;
      }
    }
    if (!zeros_from) {
      data = walked ? read_from(seg->file(), win) : read_whole_file(seg->file());
      if (!data) return data.error();
      if (!follows_prev) {
        s = Scan{};
        s.next_offset = seg->base();
        s.bad = Bad{0, "segment base offset " + std::to_string(seg->base()) +
                           " does not follow the previous segment's end " +
                           std::to_string(prev_next), false};
      } else {
        s = scan_segment(*data, seg->base(), incarnation, opts.index_interval_bytes, &out.producers,
                         producers_from, walked ? &*walked : nullptr, win);
      }
      if (s.bad && last && s.bad->batch_invalid && all_zero(*data, s.bad->pos - win)) zeros_from = s.bad->pos;
    }

    // Bad bytes below the recovery point are damage to synced, acknowledged batches,
    // whatever they look like: never unwritten space nor a torn tail to cut (review
    // finding: a flipped header of the last batch there, after a SIGKILL, was cut as a
    // torn tail). Refused as corruption below, or cut only by storage.repair.
    const bool below_point = s.bad && s.bad->pos < trusted_end;
    if (below_point) zeros_from.reset();

    // Zeros from the last batch to the end of the last segment: the unwritten space of a
    // preallocated segment (shard_log_roll.cc), or sectors that a crash left unwritten.
    // Either way nothing acknowledged is there. With preallocation on it stays, for the
    // next appends to overwrite; otherwise it is cut.
    if (zeros_from) {
      if (!opts.preallocate_segments) {
        auto sz = seg->file().size();
        if (!sz) return sz.error();
        if (auto r = seg->file().truncate(*zeros_from); !r) return r.error();
        if (auto r = seg->file().datasync(); !r) return r.error();
        host.log(LogLevel::info, kComponent,
                 "cut " + std::to_string(*sz - *zeros_from) + " bytes of zeros after the last batch of " +
                     seg->log_path() + " (preallocated or unwritten space)");
      } else {
        seg->preallocated = true;
        if (reservation_held) seg->reserved_end = limit;  // still true: the writer starts below it
      }
      s.bad.reset();
    }

    std::optional<std::uint64_t> follows;
    bool torn_group = false;
    if (s.bad && last && s.bad->batch_invalid && !below_point) {
      follows = next_sequenced_batch(*data, s.bad->pos - win, s.next_offset, incarnation);
      // A group commit is one pwritev of batches k..m then one fdatasync; power loss before
      // the sync can persist batch k+1 but not (all of) batch k. None of it was acknowledged.
      // Told apart from corruption of written data by an unwritten (all-zero) sector in the
      // bad region.
      torn_group = follows && (has_zero_sector(*data, s.bad->pos - win, *follows) ||
                               zero_to_sector_end(*data, s.bad->pos - win, *follows));
      if (follows) *follows += win;  // a file position from here on
    }
    if (s.bad && last && s.bad->batch_invalid && !below_point && (!follows || torn_group)) {
      // Torn tail: bytes of a write that never completed its fdatasync, so no append
      // covering them was ever acknowledged.
      const std::uint64_t dropped = win + data->size() - s.bad->pos;
      if (torn_group)
        s.bad->reason += "; a torn group commit: unwritten sector before a later batch at byte " +
                         std::to_string(*follows);
      if (auto r = seg->file().truncate(s.bad->pos); !r) return r.error();
      if (auto r = seg->file().datasync(); !r) return r.error();
      host.log(LogLevel::warn, kComponent,
               "truncated torn tail of " + seg->log_path() + " at byte " +
                   std::to_string(s.bad->pos) + ": discarded " + std::to_string(dropped) +
                   " bytes (" + s.bad->reason + "); they were never acknowledged");
      s.bad.reset();
    }

    if (s.bad) {
      const std::string msg = corrupt_batch_message(seg->log_path(), s.bad->pos, s.bad->reason);
      if (!opts.repair) return Error(Errc::corrupt_data, msg);
      // Operator-requested repair: cut the log at the first corrupt batch.
      std::uint64_t dropped_bytes = win + data->size() - s.bad->pos;
      std::size_t dropped_segments = 0;
      const bool drop_this = s.bad->pos == 0 && !out.segments.empty();
      if (auto r = remove_recovery_point(fs, dir); !r) return r.error();  // before the cut
      for (std::size_t j = i + 1; j < bases.size(); ++j) {
        const std::string p = dir + "/" + segment_file_name(bases[j]);
        auto sz = fs.file_size(p);
        if (sz) dropped_bytes += *sz;
        if (auto r = fs.remove(p); !r) return r.error();
        (void)fs.remove(dir + "/" + index_file_name(bases[j]));
        ++dropped_segments;
      }
      // The later segments' removal is durable before this one is cut (a power cut in
      // between would otherwise leave them behind a shorter segment: a gap).
      if (dropped_segments > 0)
        if (auto r = fs.sync_dir(dir); !r) return r.error();
      (void)fs.remove(seg->index_path());
      if (drop_this) {
        if (auto r = fs.remove(seg->log_path()); !r) return r.error();
        ++dropped_segments;
      } else {
        if (auto r = seg->file().truncate(s.bad->pos); !r) return r.error();
        if (auto r = seg->file().datasync(); !r) return r.error();
      }
      if (auto r = fs.sync_dir(dir); !r) return r.error();
      host.log(LogLevel::error, kComponent,
               "storage.repair: " + msg + "; discarded " + std::to_string(dropped_bytes) +
                   " bytes, including " + std::to_string(dropped_segments) +
                   " whole segment(s); offsets from " + std::to_string(s.next_offset) +
                   " on are gone");
      if (!drop_this) {
        publish_scan(*seg, s);
        init_writer_fields(*seg);
        out.segments.push_back(std::move(seg));
      }
      break;
    }

    publish_scan(*seg, s);
    init_writer_fields(*seg);
    // Bytes beyond what a recovery point says was synced: recover_log syncs them unless the
    // last stop was clean.
    if (last && seg->readable_size > trusted_end) out.kept_unsynced_tail = true;
    // Below a recovery point only the headers were read.
    if (walked && walked->valid_end > 0) out.unverified.push_back({seg, walked->valid_end});
    if (!last) {
      bool have_index = false;
      if (opts.verify_on_start == VerifyOnStart::all) {
        // Refresh a missing or stale cache so a later "tail" start can use it.
        auto f = fs.open(seg->index_path(), OpenMode::read_write);
        if (f) {
          auto bytes = read_whole_file(**f);
          auto c = bytes ? decode_index_file(*bytes) : Result<IndexFileContents>(bytes.error());
          have_index = c && c->base_offset == seg->base() && c->log_size == seg->readable_size;
        }
      }
      if (!have_index) {
        IndexFileContents c{seg->base(), seg->readable_size, seg->next_offset, seg->max_ts,
                            seg->index};
        if (auto r = write_index_file(fs, seg->index_path(), c); !r)
          host.log(LogLevel::warn, kComponent, "could not write index cache: " + r.error().message);
      }
    } else {
      (void)fs.remove(seg->index_path());  // an active segment has no valid cache
    }
    out.segments.push_back(std::move(seg));
  }

  // The active segment is opened for appends at its (possibly truncated) end.
  out.next_offset = out.segments.back()->next_offset;
  if (snap && (producers_from > out.next_offset || producers_from < out.segments.front()->base())) {
    // The snapshot describes a log that is not this one (repair cut below it, or it is
    // older than the oldest segment): rebuild from what is there.
    host.log(LogLevel::warn, kComponent,
             snap_path + " ends at offset " + std::to_string(producers_from) +
                 ", outside the recovered log [" + std::to_string(out.segments.front()->base()) +
                 ", " + std::to_string(out.next_offset) + "); rebuilding producer state");
    out.segments.clear();  // close the files before scanning again
    return recover_log_impl(fs, host, opts, dir, incarnation, false, false);
  }
  if (snap) {
    out.snapshot_end = producers_from;
  } else {
    if (out.segments.front()->base() > 0)
      host.log(LogLevel::warn, kComponent,
               "no valid " + snap_path + " and the log starts at " +
                   std::to_string(out.segments.front()->base()) +
                   ": idempotent-producer state of deleted segments is unknown");
    if (auto r = write_producer_snapshot(fs, snap_path, out.producers, out.next_offset); !r) {
      host.log(LogLevel::warn, kComponent, "could not write producer snapshot: " + r.error().message);
      out.snapshot_end = 0;
    } else if (auto r2 = fs.sync_dir(dir); !r2) {
      return r2.error();
    } else {
      out.snapshot_end = out.next_offset;
    }
  }
  // A reservation that the log no longer keeps (its tail was cut, the segment is no longer
  // treated as preallocated, or a later segment is active): the writer will write past it
  // without moving it, so it goes now, before any write, and the next start checks every
  // byte after the point's position instead of trusting zeros at the reserved end.
  if (rp && rp->reserved_end > 0 &&
      !(out.segments.back()->base() == rp->segment_base &&
        out.segments.back()->reserved_end == rp->reserved_end)) {
    if (auto r = remove_recovery_point(fs, dir); !r) return r.error();
  }
  return out;
}

}  // namespace

}  // namespace sluice::fs_storage
