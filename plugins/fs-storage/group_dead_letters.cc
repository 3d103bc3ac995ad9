// ConsumerGroup (group.h): dead letters: moving a record there, reading them, replaying
// them, and closing the crash windows of both at open.
#include "group.h"

#include <algorithm>
#include <charconv>
#include <future>

#include "group_ops.h"
#include "group_records.h"
#include "shard_log.h"
#include "sluice/record_batch.h"

namespace sluice::fs_storage {

using namespace group_records;

namespace {
constexpr std::string_view kComponent = "fs-storage";
constexpr std::uint64_t kDeadLetterTailCheck = 64;
// One replay is one batch in the shard: at most this much (docs/api.md). A range of a
// million dead letters built one batch of any size in memory, and one past 4 GiB could
// not be appended at all, with its intent journaled: the group then failed every open.
constexpr std::size_t kMaxReplayBytes = std::size_t{16} << 20;

bool parse_u64(std::string_view s, std::uint64_t& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size() && !s.empty();
}

Result<AppendResult> append_and_wait(ShardLog& log, std::string batch,
                                     AckMode ack = AckMode::leader) {
  auto p = std::make_shared<std::promise<Result<AppendResult>>>();
  auto f = p->get_future();
  log.append(std::move(batch), ack,
             [p](Result<AppendResult> r) { p->set_value(std::move(r)); });
  return f.get();
}
}  // namespace

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
  std::string batch = bb.finish();
  if (replicate_) {
    // The move is committed in the group log, with the dead letter itself, before this
    // replica's dead-letter log changes: every replica builds the same one from it.
    const std::uint64_t dl = dead_->stats().log_end.value();
    std::string op;
    put64(op, off);
    put64(op, dl);
    if (auto r = propose(kDead, op, batch); !r) return r;
  }
  const std::uint64_t expected = dead_->stats().log_end.value();
  auto appended = append_and_wait(*dead_, std::move(batch));
  if (!appended) return appended.error();
  if (appended->base_offset.value() != expected)
    return Error(Errc::internal, "group " + name_ + ": dead letter landed at " +
                                     std::to_string(appended->base_offset.value()) +
                                     ", not at " + std::to_string(expected));
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

AckMode ConsumerGroup::shard_ack() const {
  return shard_.replicated() ? AckMode::quorum : AckMode::leader;
}

bool ConsumerGroup::replayed(std::uint64_t off) const {
  for (const auto& [from, to] : replayed_)  // few ranges: replays are operator actions
    if (off >= from && off < to) return true;
  return false;
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
                                                std::uint64_t* count, bool capped) {
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
        if (capped && bb.size_bytes() > kMaxReplayBytes)
          return Error(Errc::invalid_argument,
                       "dead letters [" + std::to_string(from) + ", " + std::to_string(to) + ") of group " + name_ +
                           " come to more than " + std::to_string(kMaxReplayBytes >> 20) +
                           " MiB; one replay is one batch of at most that: replay a smaller range (the first " +
                           std::to_string(n - 1) + " fit, up to dead-letter offset " + std::to_string(rv.offset) + ")");
      }
    }
    at = r->next_offset.value();
  }
  *count = n;
  return n > 0 ? bb.finish() : std::string();
}

Result<void> ConsumerGroup::journal_replayed(std::uint64_t from, std::uint64_t to,
                                             bool propose_it) {
  std::string payload;
  put64(payload, from);
  put64(payload, to);
  if (propose_it)
    if (auto r = propose(kReplayed, payload); !r) return r;
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
        // The last one is the group's own (dead_letter appends it after the record's own
        // headers); an earlier one came with the record (review: a republished dead letter
        // made the group skip the offset its copied header named).
        const Header* mine = nullptr;
        for (auto& h : hs)
          if (h.name == kOriginalOffsetHeader) mine = &h;
        if (mine) {
          const auto& h = *mine;
          std::uint64_t off = 0;
          if (!parse_u64(h.value, off)) continue;
          if (off < committed_ || done_.count(off)) continue;
          std::string payload;
          put64(payload, off);
          if (auto w = append_journal(kDead, payload, true); !w) return w;
          mark_done(off);
          host_.log(LogLevel::warn, kComponent,
                    "group " + name_ + " of shard " + shard_.ref().to_string() + ": offset " +
                        std::to_string(off) + " was moved to dead letters (dead-letter offset " +
                        std::to_string(rv.offset) +
                        ") but the journal missed it (crash); recorded it now");
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
    // The search must see every batch the earlier attempt may have appended. One above the
    // high watermark is not decided yet (it commits, or a failover cuts it): wait, bounded,
    // for the watermark to cover what the log holds now, else answer transient (review
    // finding: a quorum replay that timed out was appended again and both copies committed).
    if (const ShardStats now = shard_.stats(); now.high_watermark < now.log_end) {
      auto settled = std::make_shared<std::promise<void>>();
      auto f = settled->get_future();
      const std::uint64_t h = shard_.notify_when_beyond(Offset(now.log_end.value() - 1), [settled] {
        try {
          settled->set_value();
        } catch (const std::future_error&) {
        }
      });
      if (f.wait_for(kReplaySettleWait) != std::future_status::ready) {
        shard_.cancel_notify(h);
        return Error(Errc::unavailable,
                     "group " + name_ + ": an earlier replay of dead letters [" + std::to_string(p.from) + ", " +
                         std::to_string(p.to) + ") is not settled yet (the shard's high watermark " +
                         std::to_string(now.high_watermark.value()) + " is below its end " +
                         std::to_string(now.log_end.value()) + "); retry",
                     Outcome::transient);
      }
    }
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
          if (rv.offset < at || !decode_headers(rv.headers, hs) || hs.empty()) continue;
          // Only the last header: build_replay drops the record's own copies and appends
          // the mark last, so an earlier one is a producer's, not this replay's (review).
          const Header& h = hs.back();
          if (h.name != kReplayedFromHeader || h.value.substr(0, prefix.size()) != prefix) continue;
          std::uint64_t dl = 0;
          if (!parse_u64(h.value.substr(prefix.size()), dl)) continue;
          // One already replayed is an earlier replay's copy (or a consumer's republished
          // copy of one), not this intent's (review).
          if (dl >= p.from && dl < p.to && !replayed(dl)) found = true;
        }
        if (found) break;
      }
      at = r->next_offset.value();
    }
    std::uint64_t n = 0;
    if (!found) {
      // Uncapped: an intent an earlier build journaled (it took any size) is finished as it
      // was asked; a cap here would fail the group's every open (review).
      auto batch = build_replay(p.from, p.to, &n, false);
      if (!batch) return batch.error();
      if (n > 0) {
        auto appended = append_and_wait(shard_, std::move(*batch), shard_ack());
        if (!appended) return appended.error();
      }
    }
    if (auto r = journal_replayed(p.from, p.to, true); !r) return r;
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
  if (auto u = usable(); !u) return u.error();
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
    if (auto r = propose(kReplayPending, payload); !r) return r.error();
    if (auto r = append_journal(kReplayPending, payload, true); !r) return r.error();
    pending_.push_back({from.value(), to.value(), shard_from});
    if (stop_at("group.replay.after_intent"))
      return Error(Errc::internal, "stopped at group.replay.after_intent");
    auto appended = append_and_wait(shard_, std::move(*batch), shard_ack());
    if (!appended) return appended.error();  // still pending: resolved before the next replay
    if (stop_at("group.replay.after_append"))
      return Error(Errc::internal, "stopped at group.replay.after_append");
  }
  if (auto r = journal_replayed(from.value(), to.value(), true); !r) return r.error();
  maybe_compact();
  return n;
}

Result<void> ConsumerGroup::apply_op(std::uint8_t type, std::string_view payload,
                                     std::string_view extra) {
  std::lock_guard lk(mu_);
  if (auto u = usable(); !u) return u;
  auto bad = [&](const std::string& why) {
    return Error(Errc::corrupt_data, "group " + name_ + " of shard " + shard_.ref().to_string() +
                                         ": group log op " + std::to_string(type) + ": " + why);
  };
  const char* p = payload.data();
  switch (type) {
    case kAck: {
      if (payload.size() < 4 || payload.size() != 4 + 8ull * wire::get_u32(p))
        return bad("malformed ACK");
      if (auto r = append_journal(kAck, std::string(payload), true); !r) return r;
      for (std::uint32_t i = 0, n = wire::get_u32(p); i < n; ++i)
        mark_done(wire::get_u64(p + 4 + 8ull * i));
      break;
    }
    case kDead: {
      if (payload.size() != 16) return bad("malformed DEAD");
      const std::uint64_t off = wire::get_u64(p), dl = wire::get_u64(p + 8);
      const std::uint64_t end = dead_->stats().log_end.value();
      if (end < dl)
        return bad("dead letter " + std::to_string(dl) + " would leave a gap after " +
                   std::to_string(end));
      if (end == dl) {
        auto appended = append_and_wait(*dead_, std::string(extra));
        if (!appended) return appended.error();
      }
      std::string rec;
      put64(rec, off);
      if (auto r = append_journal(kDead, rec, true); !r) return r;
      mark_done(off);
      cursor_ = std::max(cursor_, committed_);
      break;
    }
    case kReplayPending: {
      if (payload.size() != 24) return bad("malformed REPLAY_PENDING");
      const PendingReplay pr{wire::get_u64(p), wire::get_u64(p + 8), wire::get_u64(p + 16)};
      auto it = replayed_.find(pr.from);
      const bool done = it != replayed_.end() && it->second >= pr.to;
      const bool known = std::any_of(pending_.begin(), pending_.end(), [&](const PendingReplay& q) {
        return q.from == pr.from && q.to == pr.to;
      });
      if (done || known) break;
      if (auto r = append_journal(kReplayPending, std::string(payload), true); !r) return r;
      pending_.push_back(pr);
      break;
    }
    case kReplayed: {
      if (payload.size() != 16) return bad("malformed REPLAYED");
      if (auto r = journal_replayed(wire::get_u64(p), wire::get_u64(p + 8), false); !r) return r;
      break;
    }
    case GroupOps::kOpCreate:
      break;  // open() created the group
    default:
      return bad("unknown op type");
  }
  maybe_compact();
  return {};
}

}  // namespace sluice::fs_storage
