// Background compaction of cache and counter backing shards (docs/architecture.md "Cache
// compaction"), the Redis AOF-rewrite shape: the broker that leads a backing shard rolls its
// active segment, restates every live key at the log end (restate records, cache_codec.h)
// through the shard's ordinary write path (writer token, kProducerId sequence, nonce check),
// waits until the restate batches are committed, then deletes the whole segments below the
// first one. No offset gaps, no new storage format: a reader that builds its index from any
// offset at or below the first restate batch gets the right state.
#include <algorithm>
#include <future>

#include "cache_store.h"
#include "sluice/features.h"
#include "sluice/record_batch.h"

namespace sluice::http_api {

namespace {

std::int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A restate batch holds at most this many key and value bytes.
constexpr std::size_t kRestateBatchBytes = 1u << 20;
constexpr std::size_t kRestateBatchRecords = 4096;
// Keys that expired less than this long ago (this broker's clock) are still restated: expiry
// follows the shard leader's clock, and a broker whose clock is behind may still serve them.
constexpr std::int64_t kExpiredMarginMs = 60000;
// A shard is checked at most this often; a failed or refused compaction waits longer.
constexpr auto kCheckEvery = std::chrono::seconds(1);
constexpr auto kRetryAfterFailure = std::chrono::seconds(10);
// Rounds one restate batch may lose to other writes before the compaction gives up.
constexpr int kMaxRestateRounds = 64;
// How often each broker looks for backing shards it leads that are due.

}  // namespace

bool CacheStore::compaction_finalized() {
  if (compaction_finalized_.load(std::memory_order_acquire)) return true;
  {
    std::lock_guard lk(feature_mu_);
    const auto now = std::chrono::steady_clock::now();
    if (now < feature_check_) return false;
    feature_check_ = now + kRetryAfterFailure;
  }
  auto fs = node_.catalog().list_features();
  if (!fs) return false;
  for (const auto& f : *fs)
    if (f.name == kCacheCompaction && f.finalized) {
      compaction_finalized_.store(true, std::memory_order_release);
      return true;
    }
  return false;
}

void CacheStore::maybe_compact(const std::shared_ptr<Shard>& sh, const StreamInfo& si, ShardIndex s) {
  const auto now = std::chrono::steady_clock::now();
  if (sh->compacting || now < sh->compact_check || stopping_) return;
  sh->compact_check = now + kCheckEvery;
  if (!node_.serves_locally(si.key, s)) return;  // only the shard's leader compacts
  auto st = node_.shard_stats(si.key, s);
  if (!st || !st->leading) return;
  const std::uint64_t live = sh->index.live_bytes();
  const std::uint64_t due = std::max<std::uint64_t>(cfg_.compact_min_bytes, cfg_.compact_ratio * live);
  // And it grew by compact_min_bytes since the last compaction ended, so one that could not
  // drop anything (segments still below the high watermark) is not repeated at once.
  if (st->size_bytes <= due || st->size_bytes < sh->compact_floor + cfg_.compact_min_bytes) return;
  sh->compacting = true;
  submit([this, sh, si, s] {
    Result<void> r = Error(Errc::unavailable, "the fleet feature cache_compaction is not finalized");
    if (compaction_finalized()) r = compact(*sh, si, s);
    std::lock_guard lk(sh->mu);
    sh->compacting = false;
    if (!r) sh->compact_check = std::chrono::steady_clock::now() + kRetryAfterFailure;
  });
}

void CacheStore::sweep_loop() {
  // Leftovers first, once, as soon as the catalog can be read (cache_resolve.cc); then the
  // compaction sweep every compact_sweep_ms.
  bool leftovers_checked = false;
  for (;;) {
    if (!leftovers_checked) leftovers_checked = sweep_leftovers();
    const auto wait = leftovers_checked ? std::chrono::milliseconds(cfg_.compact_sweep_ms)
                                        : std::chrono::milliseconds(1000);
    {
      std::unique_lock lk(mu_);
      sweep_cv_.wait_for(lk, wait, [&] { return stopping_.load(); });
      if (stopping_) return;
    }
    if (leftovers_checked) sweep_once();
  }
}

void CacheStore::sweep_once() {
  auto snap = node_.catalog().snapshot();
  if (!snap) return;
  const auto& ff = snap->finalized_features;
  if (std::find(ff.begin(), ff.end(), kCacheCompaction) == ff.end()) return;
  compaction_finalized_.store(true, std::memory_order_release);
  const NodeId me = node_.info().node_id;
  // "__cache." / "__counter.": this flavor's backing streams.
  std::string prefix = flavor_.backing_name("x", Incarnation{0}, ChangeSeq{0});
  prefix = prefix.substr(0, prefix.find('.') + 1);
  for (const auto& a : snap->assignments) {
    if (a.leader != me || !a.key.name.starts_with(prefix)) continue;
    auto si = node_.stream(a.key);
    if (!si || si->incarnation != a.incarnation || !node_.serves_locally(a.key, a.shard)) continue;
    auto st = node_.shard_stats(a.key, a.shard);
    if (!st || !st->leading || st->size_bytes <= cfg_.compact_min_bytes) continue;
    auto sh = shard(si->key, a.shard);
    {
      std::lock_guard lk(sh->mu);
      if (sh->compacting || std::chrono::steady_clock::now() < sh->compact_check) continue;
    }
    // The check needs the index (its live bytes): catch it up on the pool, then decide.
    submit([this, sh, si = *si, s = a.shard] {
      std::lock_guard lk(sh->mu);
      if (auto c = catch_up(*sh, si, s); !c) return;
      maybe_compact(sh, si, s);
    });
  }
}

Result<void> CacheStore::compact(Shard& sh, const StreamInfo& si, ShardIndex s) {
  if (auto r = node_.roll_shard(si.key, s); !r) return r.error();
  std::string after;
  std::optional<std::uint64_t> first;
  // No live key at all: the newest batch of kProducerId, read with the writer token held
  // and the index at the log end (every later write lands above it).
  std::uint64_t newest_own = UINT64_MAX;
  for (;;) {
    std::unique_lock lk(sh.mu);
    // Take the shard's writer token (as write() does): restate batches are decided and
    // appended like any group commit, between client batches.
    sh.cv.wait(lk, [&] { return !sh.writing || stopping_; });
    if (stopping_) return Error(Errc::unavailable, "stopping");
    sh.writing = true;
    auto more = restate_chunk(sh, lk, si, s, after, first);
    if (more && !*more && !first) newest_own = sh.last_own_batch;
    sh.writing = false;
    sh.cv.notify_all();
    if (!more) return more.error();
    if (!*more) break;
  }
  // No live key (a lock table, TTL sessions): nothing restated; everything below the newest
  // batch of kProducerId is dead and goes, and that batch stays (the writers' sequence is
  // read back from it). Before, nothing was trimmed: the log grew for ever, and the shard,
  // still over the threshold, was rolled and walked again every second (review finding).
  if (!first) {
    auto st = node_.shard_stats(si.key, s);
    if (newest_own != UINT64_MAX && st && newest_own > st->log_start.value()) {
      if (auto t = node_.trim_shard(si.key, s, Offset{newest_own}); !t) return t.error();
      compactions_.fetch_add(1, std::memory_order_relaxed);
      auto post = node_.shard_stats(si.key, s);
      if (post && post->size_bytes < st->size_bytes)
        compacted_bytes_.fetch_add(st->size_bytes - post->size_bytes, std::memory_order_relaxed);
      if (post) st = post;
    }
    // Not due again until it grew by compact_min_bytes, trimmed or not.
    if (st) {
      std::lock_guard lk(sh.mu);
      sh.compact_floor = st->size_bytes;
    }
    return {};
  }
  // restate_chunk returned once each batch was visible: below the high watermark, so
  // committed on a replicated shard.
  auto pre = node_.shard_stats(si.key, s);
  auto t = node_.trim_shard(si.key, s, Offset{*first});
  if (!t) return t.error();
  auto post = node_.shard_stats(si.key, s);
  compactions_.fetch_add(1, std::memory_order_relaxed);
  if (pre && post) {
    // Client writes may land between the two reads: never count them as negative.
    if (pre->size_bytes > post->size_bytes)
      compacted_bytes_.fetch_add(pre->size_bytes - post->size_bytes, std::memory_order_relaxed);
    std::lock_guard lk(sh.mu);
    sh.compact_floor = post->size_bytes;
  }
  return {};
}

Result<bool> CacheStore::restate_chunk(Shard& sh, std::unique_lock<std::mutex>& lk, const StreamInfo& si,
                                       ShardIndex s, std::string& after, std::optional<std::uint64_t>& first) {
  for (int round = 0; round < kMaxRestateRounds; ++round) {
    // Decide against everything the leader holds (as write_batch does).
    if (auto c = catch_up_to_log_end(sh, lk, si, s); !c) return c.error();
    const std::int64_t now = wall_ms() + cfg_.clock_skew_ms;
    std::vector<std::string> keys;
    std::vector<std::string> values;
    std::size_t bytes = 0;
    std::uint64_t nonce = 0;
    {
      std::lock_guard g(mu_);
      nonce = nonce_base_ + ++nonce_next_;
    }
    sh.index.walk_from(after, [&](const std::string& k, const CacheEntry& e) {
      if (keys.size() >= kRestateBatchRecords || bytes >= kRestateBatchBytes) return false;
      if (e.expires_at_ms >= 0 && e.expires_at_ms + kExpiredMarginMs <= now) return true;  // long expired
      CacheRecord rec;
      rec.op = CacheRecord::Op::restate;
      rec.nonce = nonce;
      rec.expires_at_ms = e.expires_at_ms;
      rec.revision = e.revision;
      rec.value = e.value;
      keys.push_back(k);
      values.push_back(encode_cache_record(rec));
      bytes += k.size() + e.value.size();
      return true;
    });
    if (keys.empty()) return false;
    std::vector<PublishRecord> recs(keys.size());
    for (std::size_t i = 0; i < keys.size(); ++i) {
      recs[i].key = keys[i];
      recs[i].value = values[i];
      recs[i].shard = s.value();
      recs[i].timestamp_ms = -1;
    }
    PublishOptions opts;
    opts.ack = si.spec.replication_factor > 1 ? AckMode::quorum : AckMode::leader;
    opts.producer_id = kProducerId;
    opts.sequence = sh.next_seq;
    const std::uint64_t expected = sh.end;
    sh.watch_offset = expected;
    sh.watch_nonce = 0;
    sh.watch_stamp = -1;
    auto prom = std::make_shared<std::promise<Result<std::vector<PublishedRecord>>>>();
    auto f = prom->get_future();
    node_.publish(si.key, recs, opts,
                  [prom](Result<std::vector<PublishedRecord>> res) { prom->set_value(std::move(res)); });
    lk.unlock();
    auto res = f.get();
    lk.lock();
    if (!res) {
      sh.watch_offset = UINT64_MAX;
      if (res.error().code == Errc::sequence_gap) continue;  // another write took it: decide again
      return res.error();
    }
    const std::uint64_t base = res->front().offset.value();
    if (base != expected) {  // a duplicate: another broker's batch holds that sequence
      sh.watch_offset = UINT64_MAX;
      continue;
    }
    // The first offset only: a batch is visible as a whole, and if another broker's smaller
    // batch took the sequence, base + keys.size() - 1 might never be written.
    auto v = wait_visible(sh, lk, si, s, base);
    sh.watch_offset = UINT64_MAX;
    if (!v) return v.error();
    if (sh.watch_nonce != nonce) continue;  // another broker's batch won the sequence
    if (!first) first = base;
    after = keys.back();
    return true;
  }
  return Error(Errc::unavailable, "a restate batch lost " + std::to_string(kMaxRestateRounds) + " rounds");
}

}  // namespace sluice::http_api
