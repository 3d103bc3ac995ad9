#include "cache_store.h"

#include "counter_codec.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <random>

#include "sluice/hash.h"
#include "sluice/record_batch.h"

namespace sluice::http_api {

namespace {

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string shard_id(const StreamKey& k, ShardIndex s) {
  return k.tenant + "/" + k.ns + "/" + k.name + "/" + std::to_string(s.value());
}

// A write that keeps losing its sequence to other brokers' writes gives up after this
// many rounds (each round is one append that another write won).
constexpr int kMaxWriteRounds = 64;
// One group commit takes at most this much of a shard's queue.
constexpr std::size_t kMaxBatchRecords = 512;
constexpr std::size_t kMaxBatchBytes = 4u << 20;
constexpr auto kVisibleWait = std::chrono::seconds(30);
// A write whose append fails with a transient error (nothing written) is tried again
// every kTransientPause for up to CacheConfig::transient_retry.
constexpr auto kTransientPause = std::chrono::milliseconds(50);

// A read whose catch-up fails with an error that is not definite (the shard's leader
// moving, not open yet, or lost mid-call) is tried again, like a write, for up to
// `window` (docs/api.md "Caches"). A read changes nothing, so a call the transport lost
// ("uncertain": it cannot know whether the leader acted on it) is as safe to repeat as a
// transient one, and a read that still fails says "transient", never "uncertain".
template <class F>
auto retry_read(std::chrono::milliseconds window, F&& once) {
  const auto deadline = std::chrono::steady_clock::now() + window;
  for (;;) {
    auto r = once();
    if (r || r.error().outcome == Outcome::definite) return r;
    if (std::chrono::steady_clock::now() + kTransientPause >= deadline) {
      Error e = r.error();
      e.outcome = Outcome::transient;
      return decltype(r)(std::move(e));
    }
    std::this_thread::sleep_for(kTransientPause);
  }
}

}  // namespace

CacheFlavor CacheFlavor::caches() {
  return {"cache", [](Node& n, const StreamKey& k) { return n.catalog().get_cache(k); }, &backing_stream_name};
}

CacheInfo counter_as_cache(const CounterInfo& c) {
  CacheInfo ci;
  ci.key = c.key;
  ci.incarnation = c.incarnation;
  ci.created_seq = c.created_seq;
  ci.spec.default_ttl_ms = -1;
  return ci;
}

CacheFlavor CacheFlavor::counters() {
  return {"counter",
          [](Node& n, const StreamKey& k) -> Result<CacheInfo> {
            auto c = n.catalog().get_counter(k);
            if (!c) return c.error();
            return counter_as_cache(*c);
          },
          &counter_backing_stream_name};
}

CacheStore::CacheStore(Node& node, CacheConfig cfg, CacheFlavor flavor)
    : node_(node), cfg_(cfg), flavor_(std::move(flavor)) {
  std::random_device rd;
  nonce_base_ = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  for (unsigned i = 0; i < cfg_.threads; ++i) threads_.emplace_back([this] { run(); });
  sweeper_ = std::thread([this] { sweep_loop(); });  // cache_compact.cc
}

CacheStore::~CacheStore() { stop(); }

void CacheStore::stop() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  std::unique_ptr<WatchHandle> w;
  {
    std::lock_guard lk(memo_mu_);
    w = std::move(watch_);
    watch_ok_ = false;
    memo_.clear();
  }
  w.reset();  // outside memo_mu_: the watch's callbacks take it
  cv_.notify_all();
  sweep_cv_.notify_all();
  if (sweeper_.joinable()) sweeper_.join();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

void CacheStore::submit(std::function<void()> fn) {
  {
    std::lock_guard lk(mu_);
    if (stopping_) return;
    queue_.push_back(std::move(fn));
  }
  cv_.notify_one();
}

void CacheStore::run() {
  for (;;) {
    std::function<void()> fn;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;  // queued requests are dropped; the server is stopping
      fn = std::move(queue_.front());
      queue_.pop_front();
    }
    fn();
  }
}

std::shared_ptr<CacheStore::Shard> CacheStore::shard(const StreamKey& backing, ShardIndex s) {
  const std::string id = shard_id(backing, s);
  std::lock_guard lk(mu_);
  auto& p = shards_[id];
  if (!p) p = std::make_shared<Shard>();
  return p;
}

ShardIndex CacheStore::shard_of(std::string_view key, const StreamInfo& backing) const {
  return ShardIndex{static_cast<std::uint32_t>(fnv1a64(key) % std::max<std::uint32_t>(1, backing.spec.shards))};
}

Result<void> CacheStore::catch_up(Shard& sh, const StreamInfo& backing, ShardIndex s) {
  if (!sh.init || sh.incarnation != backing.incarnation || sh.created_seq != backing.created_seq) {
    sh.index.clear();
    sh.end = 0;
    sh.next_seq = 0;
    sh.last_own_batch = UINT64_MAX;
    sh.incarnation = backing.incarnation;
    sh.created_seq = backing.created_seq;
    sh.init = true;
  }
  const std::int64_t now = now_ms() + cfg_.clock_skew_ms;
  // Bounded: a shard written faster than it can be read still answers.
  for (int round = 0; round < 100000; ++round) {
    auto fr = node_.fetch(backing.key, s, Offset{sh.end}, 10000, 4u << 20);
    if (!fr && fr.error().code == Errc::offset_out_of_range) {
      // Compaction trimmed the log past this index (docs/architecture.md "Cache
      // compaction"): rebuild from the log start; a stale index would keep keys deleted in
      // the trimmed range.
      auto st = node_.shard_stats(backing.key, s);
      if (st && st->log_start.value() > sh.end) {
        if (sh.watch_offset != UINT64_MAX && sh.watch_nonce == 0 && sh.watch_offset >= sh.end &&
            sh.watch_offset < st->log_start.value())
          sh.watch_lost = true;
        sh.index.clear();
        sh.end = st->log_start.value();
        sh.next_seq = 0;  // from the first producer batch read (a restate batch at the latest)
        sh.last_own_batch = UINT64_MAX;
        continue;
      }
    }
    if (!fr) {
      // A failure that says nothing of the index (a leader moving, a lost connection): keep
      // it. Dropping it made every broker rebuild each active shard from the log start
      // after every leader move, under the shard's lock (review finding).
      if (fr.error().outcome != Outcome::definite) return fr.error();
      // A new leader whose high watermark still lags what this index holds (acknowledged
      // under the old leader): keep the index and try again shortly; rebuilding it now
      // would serve a state older than what was acknowledged.
      if (sh.end > 0 && fr.error().outcome != Outcome::transient) {
        auto st = node_.shard_stats(backing.key, s);
        if (st && st->log_start.value() <= sh.end && sh.end <= st->log_end.value())
          return Error(Errc::unavailable, "the shard's leader has not yet made visible what this broker indexed",
                       Outcome::transient);
      }
      sh.init = false;  // rebuild from the start next time
      return fr.error();
    }
    for (const auto& b : fr->batches) {
      BatchHeader h;
      if (check_batch(b.data(), b.size(), &h) != BatchCheck::ok)
        return Error(Errc::corrupt_data, "a batch of the cache's backing stream fails its check");
      if (h.incarnation != backing.incarnation.value()) {
        sh.init = false;
        return Error(Errc::stale_route, "the cache's backing stream changed incarnation; retry");
      }
      BatchReader rd(b.data(), b.size());
      RecordView rv;
      while (rd.next(rv)) {
        if (rv.offset < sh.end) continue;
        auto rec = decode_cache_record(rv.value);
        if (rec && rv.key) {
          if (rv.offset == sh.watch_offset) {
            sh.watch_nonce = rec->nonce;
            sh.watch_stamp = rv.timestamp_ms;
          }
          sh.index.apply(*rv.key, *rec, rv.offset, now, rv.timestamp_ms);
        }
        sh.end = rv.offset + 1;
      }
      if (h.producer_id == kProducerId && h.next_offset() <= sh.end) {
        sh.next_seq = h.producer_seq + 1;
        sh.last_own_batch = h.base_offset;
      }
    }
    if (fr->batches.empty() || sh.end >= fr->high_watermark.value()) return {};
  }
  return {};
}

// Waits until the shard's high watermark passes `offset` and indexes up to it. Called
// with `lk` (sh.mu) held; releases it while waiting.
Result<void> CacheStore::wait_visible(Shard& sh, std::unique_lock<std::mutex>& lk, const StreamInfo& backing,
                                      ShardIndex s, std::uint64_t offset) {
  const auto deadline = std::chrono::steady_clock::now() + kVisibleWait;
  for (;;) {
    if (auto r = catch_up(sh, backing, s); !r) return r;
    if (sh.end > offset) return {};
    auto p = std::make_shared<std::promise<void>>();
    auto f = p->get_future();
    auto h = node_.notify_when_beyond(backing.key, s, Offset{offset}, [p] { p->set_value(); });
    if (!h) return h.error();
    lk.unlock();
    const bool timed_out = f.wait_until(deadline) == std::future_status::timeout;
    if (timed_out && *h != 0) node_.cancel_notify(backing.key, s, *h);
    lk.lock();
    if (timed_out)
      return Error(Errc::timeout, "the write at offset " + std::to_string(offset) +
                                      " did not become visible in time; it may or may not take effect",
                   Outcome::uncertain);
  }
}

Result<void> CacheStore::catch_up_to_log_end(Shard& sh, std::unique_lock<std::mutex>& lk, const StreamInfo& si,
                                             ShardIndex s) {
  auto st = node_.shard_stats(si.key, s);
  if (!st) return st.error();
  if (st->log_end.value() > sh.end) {
    if (auto v = wait_visible(sh, lk, si, s, st->log_end.value() - 1); !v)
      return v.error().code != Errc::timeout
                 ? v.error()
                 : Error(Errc::unavailable, "the shard's leader did not make its log end visible in time",
                         Outcome::transient);
  }
  return catch_up(sh, si, s);
}

Result<CacheEntry> CacheStore::get(const StreamKey& cache, std::string_view key, Incarnation* incarnation) {
  auto r = find(cache, key, incarnation);
  if (!r) return r.error();
  if (!*r) return Error(Errc::not_found, flavor_.what + " '" + cache.name + "' has no key '" + std::string(key) + "'");
  return std::move(**r);
}

Result<std::optional<CacheEntry>> CacheStore::find(const StreamKey& cache, std::string_view key,
                                                   Incarnation* incarnation) {
  return retry_read(cfg_.transient_retry,
                    [&]() -> Result<std::optional<CacheEntry>> { return get_once(cache, key, incarnation); });
}

Result<std::optional<CacheEntry>> CacheStore::get_once(const StreamKey& cache, std::string_view key,
                                                       Incarnation* incarnation) {
  auto r = resolve(cache, false);
  if (!r) return r.error();
  if (!*r) return std::optional<CacheEntry>{};  // nothing written yet
  if (incarnation) *incarnation = (*r)->cache.incarnation;
  const auto& si = (*r)->backing;
  const ShardIndex s = shard_of(key, si);
  auto sh = shard(si.key, s);
  std::unique_lock lk(sh->mu);
  if (auto c = catch_up_to_log_end(*sh, lk, si, s); !c) return c.error();
  const CacheEntry* e = sh->index.find(key, now_ms() + cfg_.clock_skew_ms);
  if (!e) return std::optional<CacheEntry>{};
  return std::optional<CacheEntry>(*e);
}

Result<CacheStore::Write> CacheStore::write(const StreamKey& cache, std::string_view key, CacheRecord rec,
                                            std::optional<std::int64_t> ttl_ms, std::optional<AckMode> ack,
                                            const Decide& check, std::optional<Incarnation> if_incarnation) {
  auto r = resolve(cache, true);
  if (!r) return r.error();
  const auto& ci = (*r)->cache;
  const auto& si = (*r)->backing;
  if (if_incarnation && *if_incarnation != ci.incarnation)
    return Error(Errc::conflict, "the " + flavor_.what + " " + cache.to_string() +
                                     " was deleted and created again (the request names incarnation " +
                                     std::to_string(if_incarnation->value()) + "; it is now " +
                                     std::to_string(ci.incarnation.value()) + "): nothing was written");
  const AckMode mode = ack.value_or(si.spec.default_ack);
  if (mode == AckMode::none)
    return Error(Errc::invalid_argument, "a " + flavor_.what + " write needs ack=leader or ack=quorum");
  const ShardIndex s = shard_of(key, si);
  auto sh = shard(si.key, s);
  Pending me{key, rec, ttl_ms.value_or(ci.spec.default_ttl_ms), mode, &check};
  pending_.fetch_add(1, std::memory_order_relaxed);
  struct Leave {
    std::atomic<std::size_t>& n;
    ~Leave() { n.fetch_sub(1, std::memory_order_relaxed); }
  } leave{pending_};
  me.transient_deadline = std::chrono::steady_clock::now() + cfg_.transient_retry;
  std::unique_lock lk(sh->mu);
  sh->queue.push_back(&me);
  // One thread at a time writes a shard's queue as batches (group commit), until its own
  // write is answered; the others wait for their answer, or for the writer to leave.
  while (sh->writing) {
    sh->cv.wait(lk, [&] { return me.done || !sh->writing; });
    if (me.done) {
      if (*me.answer) (*me.answer)->incarnation = ci.incarnation;
      return std::move(*me.answer);
    }
  }
  sh->writing = true;
  while (!me.done) {
    write_batch(*sh, lk, si, s);
    sh->cv.notify_all();
  }
  sh->writing = false;
  sh->cv.notify_all();
  maybe_compact(sh, si, s);  // cache_compact.cc
  if (*me.answer) (*me.answer)->incarnation = ci.incarnation;
  return std::move(*me.answer);
}

// One group commit: takes the longest prefix of the queue with one ack mode and distinct
// keys (so each check sees the index alone), decides each against the caught-up index,
// appends the survivors as one batch of kProducerId and answers them; if another write
// won the sequence, everything taken goes back to the queue's front for the next round.
void CacheStore::write_batch(Shard& sh, std::unique_lock<std::mutex>& lk, const StreamInfo& si, ShardIndex s) {
  auto fail_all = [&](const std::vector<Pending*>& ps, const Error& e) {
    for (Pending* p : ps) {
      p->answer = Result<Write>(e);
      p->done = true;
    }
  };
  std::vector<Pending*> taken;
  {
    std::vector<std::string_view> keys;
    std::size_t bytes = 0;
    const AckMode mode = sh.queue.front()->ack;
    while (!sh.queue.empty() && taken.size() < kMaxBatchRecords && bytes < kMaxBatchBytes) {
      Pending* p = sh.queue.front();
      if (p->ack != mode || std::find(keys.begin(), keys.end(), p->key) != keys.end()) break;
      keys.push_back(p->key);
      bytes += p->key.size() + p->rec.value.size() + kCacheRecordHeader;
      taken.push_back(p);
      sh.queue.pop_front();
    }
  }
  // Nothing decided or written yet (a write a lost round put back was not appended either):
  // a failure of the catch-up, which only reads, puts the writes back and tries again
  // shortly, until the first one's deadline, whether it was transient (the leader moving)
  // or "uncertain" (the leader lost mid-call: which a read may be, and no harm done). One
  // that outlasts the deadline is transient: nothing was written.
  auto again = [&](const Error& e) {
    if (e.outcome == Outcome::definite) return fail_all(taken, e);
    if (std::chrono::steady_clock::now() + kTransientPause >= taken.front()->transient_deadline)
      return fail_all(taken, Error(e.code, e.message, Outcome::transient));
    for (auto it = taken.rbegin(); it != taken.rend(); ++it) sh.queue.push_front(*it);
    lk.unlock();
    std::this_thread::sleep_for(kTransientPause);
    lk.lock();
  };
  // Decide only against everything the leader holds: a new leader's high watermark can
  // lag its log end (acknowledged writes of the old epoch) until its followers fetch, and
  // an index short of them would refuse an if_revision that is current (docs/api.md
  // "Compare-and-set").
  if (auto c = catch_up_to_log_end(sh, lk, si, s); !c) return again(c.error());
  const std::int64_t now = now_ms() + cfg_.clock_skew_ms;
  std::vector<Pending*> writing;
  std::vector<std::string> values;
  for (Pending* p : taken) {
    p->computed.reset();
    if (auto answer = (*p->check)(sh.index.find(p->key, now), p->computed)) {
      p->answer = Result<Write>(*answer);
      p->done = true;
      continue;
    }
    if (p->computed) p->rec.value = *p->computed;  // a read-modify-write's decided value
    // The expiry follows the leader's clock: the record carries the TTL, and the leader
    // stamps the time it appends it (timestamp -1 below; docs/api.md "Expiry").
    if (p->rec.op != CacheRecord::Op::del) {
      p->rec.op = p->ttl_ms > 0 ? CacheRecord::Op::put_ttl : CacheRecord::Op::put;
      p->rec.expires_at_ms = p->ttl_ms > 0 ? p->ttl_ms : -1;
    }
    {
      std::lock_guard g(mu_);
      p->rec.nonce = nonce_base_ + ++nonce_next_;
    }
    writing.push_back(p);
    values.push_back(encode_cache_record(p->rec));
  }
  if (writing.empty()) return;
  std::vector<PublishRecord> recs(writing.size());
  for (std::size_t i = 0; i < writing.size(); ++i) {
    recs[i].key = writing[i]->key;
    recs[i].value = values[i];
    recs[i].shard = s.value();
    recs[i].timestamp_ms = -1;  // stamped by the shard's leader (fs-storage shard_log.cc)
  }
  PublishOptions opts;
  opts.ack = writing.front()->ack;
  opts.producer_id = kProducerId;
  opts.sequence = sh.next_seq;
  // If it wins its sequence, the batch lands right after what the index holds. Whoever
  // indexes that offset (another caller may catch up while the lock is released) notes its
  // nonce, so the answer can tell this batch from another broker's.
  const std::uint64_t expected = sh.end;
  sh.watch_offset = expected;
  sh.watch_nonce = 0;
  sh.watch_stamp = -1;
  sh.watch_lost = false;
  auto prom = std::make_shared<std::promise<Result<std::vector<PublishedRecord>>>>();
  auto f = prom->get_future();
  node_.publish(si.key, recs, opts,
                [prom](Result<std::vector<PublishedRecord>> res) { prom->set_value(std::move(res)); });
  lk.unlock();
  auto res = f.get();
  lk.lock();
  auto retry = [&] {
    for (auto it = writing.rbegin(); it != writing.rend(); ++it) {
      if (++(*it)->rounds >= kMaxWriteRounds) {
        (*it)->answer = Result<Write>(Error(Errc::unavailable, "the " + flavor_.what + " shard is too contended: the write lost " +
                                                                  std::to_string(kMaxWriteRounds) +
                                                                  " rounds; nothing was written"));
        (*it)->done = true;
      } else {
        sh.queue.push_front(*it);
      }
    }
  };
  if (!res) {
    sh.watch_offset = UINT64_MAX;
    if (res.error().code == Errc::sequence_gap) return retry();  // another write took it
    // Nothing was written (a leader not reachable or not open yet, right after the cache's
    // create or during a failover): try again shortly, for a while.
    if (res.error().outcome == Outcome::transient &&
        std::chrono::steady_clock::now() + kTransientPause < writing.front()->transient_deadline) {
      for (auto it = writing.rbegin(); it != writing.rend(); ++it) sh.queue.push_front(*it);
      lk.unlock();
      std::this_thread::sleep_for(kTransientPause);
      lk.lock();
      return;
    }
    return fail_all(writing, res.error());
  }
  const std::uint64_t base = res->front().offset.value();
  if (base != expected) {  // a duplicate of an older batch: another write took the sequence
    sh.watch_offset = UINT64_MAX;
    return retry();
  }
  // Wait for the batch's first offset only: if another broker's batch took the sequence,
  // the leader answered that batch's base, and it may hold fewer records than this one, so
  // base + writing.size() - 1 might never be written. A batch is visible as a whole, so once
  // its first record is indexed, so is the rest of it, ours or not.
  auto v = wait_visible(sh, lk, si, s, base);
  sh.watch_offset = UINT64_MAX;
  if (!v) {
    // The leader took a batch at this sequence, ours or another broker's: which is not known
    // until its nonce is read. So never "transient, nothing was written" here: a client that
    // retried on that would apply an acknowledged counter add twice (docs/api.md "Errors").
    return fail_all(writing, Error(v.error().code,
                                   v.error().message + "; the write was appended and may have taken effect",
                                   Outcome::uncertain));
  }
  // Compaction trimmed the batch at `base` before this broker read it back: it may be this
  // one. Retrying would apply it twice if it was (a counter add counted twice; a put with
  // if_revision refused by its own write), so the answer is "uncertain" (review finding).
  if (std::exchange(sh.watch_lost, false))
    return fail_all(writing, Error(Errc::unavailable,
                                   "the " + flavor_.what + " shard was compacted before this broker read the "
                                   "write back; it may or may not have taken effect",
                                   Outcome::uncertain));
  if (sh.watch_nonce != writing.front()->rec.nonce) return retry();  // another broker's batch won
  for (std::size_t i = 0; i < writing.size(); ++i) {
    Write w;
    w.revision = (*res)[i].offset.value() + 1;
    // One batch, one stamp: every record in it carries the leader's time of the append.
    w.expires_at_ms = CacheIndex::expiry(writing[i]->rec, sh.watch_stamp);
    writing[i]->answer = Result<Write>(w);
    writing[i]->done = true;
  }
}

Result<CacheStore::Write> CacheStore::put(const StreamKey& cache, std::string_view key, std::string_view value,
                                          std::optional<std::int64_t> ttl_ms, std::optional<std::uint64_t> if_revision,
                                          std::optional<AckMode> ack, std::optional<Incarnation> if_incarnation) {
  CacheRecord rec;
  rec.op = CacheRecord::Op::put;
  rec.value = value;
  return write(
      cache, key, rec, ttl_ms, ack,
      [&](const CacheEntry* e, std::optional<std::string>&) -> std::optional<Write> {
        const std::uint64_t cur = e ? e->revision : 0;
        if (if_revision && *if_revision != cur) return Write{Write::Status::mismatch, cur, -1};
        return std::nullopt;
      },
      if_incarnation);
}

Result<CacheStore::Write> CacheStore::update(const StreamKey& cache, std::string_view key, std::optional<AckMode> ack,
                                             const Decide& decide, std::optional<Incarnation> if_incarnation) {
  CacheRecord rec;
  rec.op = CacheRecord::Op::put;
  return write(cache, key, rec, std::int64_t{0}, ack, decide, if_incarnation);
}

Result<CacheStore::Write> CacheStore::erase(const StreamKey& cache, std::string_view key,
                                            std::optional<std::uint64_t> if_revision, std::optional<AckMode> ack,
                                            std::optional<Incarnation> if_incarnation) {
  CacheRecord rec;
  rec.op = CacheRecord::Op::del;
  return write(
      cache, key, rec, std::nullopt, ack,
      [&](const CacheEntry* e, std::optional<std::string>&) -> std::optional<Write> {
        const std::uint64_t cur = e ? e->revision : 0;
        if (if_revision && *if_revision != cur) return Write{Write::Status::mismatch, cur, -1};
        if (!e) return Write{Write::Status::absent, 0, -1};
        return std::nullopt;
      },
      if_incarnation);
}

Result<CacheStore::Listed> CacheStore::list(const StreamKey& cache, std::string_view prefix, std::string_view after,
                                            std::size_t limit) {
  return retry_read(cfg_.transient_retry,
                    [&]() -> Result<Listed> { return list_once(cache, prefix, after, limit); });
}

Result<CacheStore::Listed> CacheStore::list_once(const StreamKey& cache, std::string_view prefix,
                                                 std::string_view after, std::size_t limit) {
  auto r = resolve(cache, false);
  if (!r) return r.error();
  Listed out;
  if (!*r) return out;
  const auto& si = (*r)->backing;
  bool more = false;
  const std::int64_t now = now_ms() + cfg_.clock_skew_ms;
  const auto by_key = [](const auto& a, const auto& b) { return a.first < b.first; };
  for (std::uint32_t i = 0; i < si.spec.shards; ++i) {
    auto sh = shard(si.key, ShardIndex{i});
    std::unique_lock lk(sh->mu);
    if (auto c = catch_up_to_log_end(*sh, lk, si, ShardIndex{i}); !c) return c.error();
    more |= sh->index.scan(prefix, after, limit, now, [&](const std::string& k, const CacheEntry& e) {
      out.keys.emplace_back(k, CacheEntry{e.revision, e.expires_at_ms, {}});
    });
    // The first `limit` keys overall are among each shard's first `limit`: keep only those
    // as shards are added, so a listing holds at most 2 x limit keys, not shards x limit.
    if (out.keys.size() > limit) {
      std::nth_element(out.keys.begin(), out.keys.begin() + static_cast<std::ptrdiff_t>(limit), out.keys.end(), by_key);
      out.keys.resize(limit);
      more = true;
    }
  }
  std::sort(out.keys.begin(), out.keys.end(), by_key);
  if (more && !out.keys.empty()) out.next = out.keys.back().first;
  return out;
}

}  // namespace sluice::http_api
