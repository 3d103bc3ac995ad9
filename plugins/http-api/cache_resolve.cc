// CacheStore (cache_store.h): resolving a cache to its backing stream, and the backing
// stream's life: created with the cache (or on first write), deleted with it, and deleted by
// every broker that sees the delete if the broker that handled it died first (docs/api.md
// "Caches (keys)"). Resolutions are remembered until the catalog's change feed reports a
// change that may affect them.
#include "cache_store.h"

#include <chrono>
#include <set>
#include <string_view>
#include <thread>

#include "sluice/catalog_rules.h"
#include "sluice/failpoint.h"
#include "sluice/log.h"
#include "sluice/names.h"

namespace sluice::http_api {

namespace {
constexpr auto kBackingWait = std::chrono::seconds(10);
}  // namespace

Result<StreamInfo> CacheStore::ensure_backing(const CacheInfo& ci) {
  const StreamKey bk = backing_key(ci.key, ci.incarnation, ci.created_seq);
  forget_all();  // a (re)created cache: no request may resolve to an older incarnation
  const auto deadline = std::chrono::steady_clock::now() + kBackingWait;
  bool created = false;
  for (;;) {
    auto si = node_.stream(bk);
    if (si && si->created_seq.value() > ci.created_seq.value()) {
      if (!created) return *si;
      // Made here: the cache (or counter) may have been deleted since it was looked up,
      // and its delete may have removed the backing stream before this create. Looked up
      // again now: if it is gone (or is another incarnation), the stream made for it is
      // removed, not left behind until a restart's sweep. A delete after this check
      // removes it itself (the catalog entry goes first, then the backing stream).
      auto again = flavor_.lookup(node_, ci.key);
      if (!again && again.error().code != Errc::not_found) return *si;  // not known: kept
      if (!again || again->incarnation != ci.incarnation || again->created_seq != ci.created_seq) {
        auto d = node_.catalog().delete_stream(bk);
        if (!d && d.error().code != Errc::not_found) return d.error();
        if (again) return Error(Errc::stale_route, "the " + flavor_.what + " was deleted and created again; retry");
        return Error(Errc::not_found, "the " + flavor_.what + " " + ci.key.to_string() + " was deleted");
      }
      return *si;
    }
    if (si) {
      // Left over from an earlier cache of this name whose delete did not reach it (a
      // crash between the two): never serve it. Delete it and create a fresh one.
      auto d = node_.catalog().delete_stream(bk);
      if (!d && d.error().code != Errc::not_found) return d.error();
    } else if (si.error().code != Errc::not_found) {
      return si.error();
    }
    if (!created) {
      StreamSpec spec;
      spec.shards = cfg_.shards;
      spec.replication_factor = cfg_.replication_factor;
      spec.min_insync = default_min_insync(spec.replication_factor);
      spec.default_ack = spec.replication_factor > 1 ? AckMode::quorum : AckMode::leader;
      auto c = node_.create_stream(bk, spec);
      if (!c && c.error().code != Errc::already_exists) return c.error();
      created = true;
    }
    // The broker applies the create from the catalog's change feed shortly after.
    if (std::chrono::steady_clock::now() > deadline)
      return Error(Errc::unavailable, "the " + flavor_.what + "'s backing stream '" + bk.name + "' is not available yet");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void CacheStore::drop_indexes(const StreamKey& backing) {
  std::lock_guard lk(mu_);
  const std::string prefix = backing.tenant + "/" + backing.ns + "/" + backing.name + "/";
  for (auto it = shards_.lower_bound(prefix); it != shards_.end() && it->first.starts_with(prefix);)
    it = shards_.erase(it);
}

Result<void> CacheStore::delete_backing(const CacheInfo& ci) {
  const StreamKey bk = backing_key(ci.key, ci.incarnation, ci.created_seq);
  // Forgotten at once, not only when the change feed reports the delete: a recreate
  // through this broker must never be answered from the old incarnation's resolution.
  forget_all();
  drop_indexes(bk);
  auto d = node_.catalog().delete_stream(bk);
  if (!d && d.error().code != Errc::not_found) return d.error();
  return {};
}

void CacheStore::sweep_backing(const StreamKey& bk, bool seen) {
  // Only while this broker's applied catalog still has it: usually the broker that handled
  // the delete removed it already, and then nothing is proposed.
  if (!seen && !node_.stream(bk)) return;
  failpoint("cache.sweep.before_delete");  // crash tests
  auto d = node_.catalog().delete_stream(bk);
  if (d) {
    ++swept_;
    log_line(LogLevel::info, "http-api", "deleted the leftover backing stream " + bk.to_string() +
                                             " of a deleted " + flavor_.what);
    return;
  }
  if (d.error().code != Errc::not_found)
    log_line(LogLevel::warn, "http-api", "cannot delete the leftover backing stream " + bk.to_string() +
                                             " of a deleted " + flavor_.what + ": " + d.error().message);
}

namespace {
// "<prefix><incarnation>.<created_seq>.n.<name>" or "...h.<hash>" (backing_stream_name):
// only names of that shape are taken for backing streams.
bool backing_shape(std::string_view name, std::string_view prefix) {
  if (!name.starts_with(prefix)) return false;
  name.remove_prefix(prefix.size());
  for (int field = 0; field < 2; ++field) {
    std::size_t digits = 0;
    while (digits < name.size() && name[digits] >= '0' && name[digits] <= '9') ++digits;
    if (digits == 0 || digits >= name.size() || name[digits] != '.') return false;
    name.remove_prefix(digits + 1);
  }
  return name.size() > 2 && (name[0] == 'n' || name[0] == 'h') && name[1] == '.';
}
}  // namespace

bool CacheStore::sweep_leftovers() {
  if (!node_.catalog().status().ready) return false;
  auto snap = node_.catalog().snapshot();
  if (!snap) return false;
  // One snapshot: a backing stream is created only after its cache's create, and an
  // incarnation never repeats, so a stream in it whose cache (with that incarnation and
  // create) is not in it belongs to a delete, never to a create still under way.
  std::set<StreamKey> live;
  if (flavor_.what == "cache") {
    for (const auto& c : snap->caches) live.insert(backing_key(c.key, c.incarnation, c.created_seq));
  } else {
    for (const auto& c : snap->counters) live.insert(backing_key(c.key, c.incarnation, c.created_seq));
  }
  std::string prefix = flavor_.backing_name("x", Incarnation{0}, ChangeSeq{0});
  prefix = prefix.substr(0, prefix.find('.') + 1);
  std::size_t found = 0;
  for (const auto& s : snap->streams)
    if (backing_shape(s.key.name, prefix) && !live.count(s.key)) {
      ++found;
      submit([this, k = s.key] { sweep_backing(k, true); });
    }
  if (found > 0)
    log_line(LogLevel::info, "http-api",
             "found " + std::to_string(found) + " backing stream(s) of deleted " + flavor_.what +
                 "s at start (a broker died between a delete and its backing stream's); deleting them");
  return true;
}

void CacheStore::forget_all() {
  std::lock_guard lk(memo_mu_);
  memo_.clear();
  ++memo_gen_;
}

void CacheStore::ensure_watch() {
  std::unique_ptr<WatchHandle> old;
  {
    std::lock_guard lk(memo_mu_);
    if (watch_ok_ || stopping_ || std::chrono::steady_clock::now() < watch_retry_) return;
    old = std::move(watch_);
    watch_retry_ = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  }
  old.reset();  // a watch that asked for a resync; outside memo_mu_ (its callbacks take it)
  const MetadataStatus st = node_.catalog().status();
  if (!st.ready) return;
  // Every change after `applied` is reported; a resolution read after this point reflects
  // every change up to it (catalog reads are read-your-writes).
  auto w = node_.catalog().watch(
      st.applied,
      [this](const ChangeEvent& ev) {
        using K = ChangeEvent::Kind;
        if (ev.kind == K::cache_created || ev.kind == K::cache_deleted || ev.kind == K::counter_created ||
            ev.kind == K::counter_deleted || ev.kind == K::namespace_deleted || ev.kind == K::tenant_deleted ||
            ev.kind == K::stream_deleted)
          forget_all();
        // A deleted backing stream's indexes (with their values) go, on every broker.
        if (ev.kind == K::stream_deleted && reserved_stream_name(ev.stream.key.name)) drop_indexes(ev.stream.key);
        // A deleted cache's (counter's) backing stream goes too, even if the broker that
        // handled the delete died before deleting it: every broker that sees the delete
        // removes what is left (docs/api.md "Caches (keys)", "Leftovers").
        if ((ev.kind == K::cache_deleted && flavor_.what == "cache") ||
            (ev.kind == K::counter_deleted && flavor_.what == "counter")) {
          const CacheInfo ci = ev.kind == K::cache_deleted ? ev.cache : counter_as_cache(ev.counter);
          submit([this, bk = backing_key(ci.key, ci.incarnation, ci.created_seq)] { sweep_backing(bk); });
        }
      },
      [this] {
        std::lock_guard lk(memo_mu_);
        watch_ok_ = false;  // the next request starts a new watch
        memo_.clear();
        ++memo_gen_;
      });
  std::lock_guard lk(memo_mu_);
  if (stopping_ || !w) return;
  watch_ = std::move(w);
  watch_ok_ = true;
  memo_.clear();
  ++memo_gen_;
}

Result<std::optional<CacheStore::Resolved>> CacheStore::resolve(const StreamKey& cache, bool create) {
  const std::string id = cache.tenant + "/" + cache.ns + "/" + cache.name;
  ensure_watch();
  std::uint64_t gen = 0;
  {
    std::lock_guard lk(memo_mu_);
    gen = memo_gen_;
    if (auto it = memo_.find(id); watch_ok_ && it != memo_.end()) {
      Resolved r = it->second;
      // The backing stream must still be the one remembered, in the applied catalog.
      auto si = node_.stream(r.backing.key);
      if (si && si->incarnation == r.backing.incarnation && si->created_seq == r.backing.created_seq) {
        r.backing = *si;
        return std::optional<Resolved>(std::move(r));
      }
      memo_.erase(it);
    }
  }
  auto res = resolve_uncached(cache, create);
  if (res && *res) {
    std::lock_guard lk(memo_mu_);
    if (watch_ok_ && memo_gen_ == gen) memo_[id] = **res;
  }
  return res;
}

Result<std::optional<CacheStore::Resolved>> CacheStore::resolve_uncached(const StreamKey& cache, bool create) {
  auto ci = flavor_.lookup(node_, cache);
  if (!ci) return ci.error();
  const StreamKey bk = backing_key(cache, ci->incarnation, ci->created_seq);
  auto si = node_.stream(bk);
  if (si && si->created_seq.value() > ci->created_seq.value()) return std::optional<Resolved>(Resolved{*ci, *si});
  if (si || si.error().code == Errc::not_found) {
    if (!create) {
      // Nothing written yet, or written through another broker and not applied here yet?
      // A read must not answer "nothing" (404, a counter's 0) after an acknowledged write:
      // the catalog tells, and a backing stream it has that this broker has not applied is
      // transient (the read is retried while the feed catches up).
      auto cs = node_.catalog().get_stream(bk);
      if (cs && cs->created_seq.value() > ci->created_seq.value())
        return Error(Errc::unavailable,
                     "this broker has not applied the backing stream of " + flavor_.what + " " + cache.to_string() +
                         " yet",
                     Outcome::transient);
      if (!cs && cs.error().code != Errc::not_found) return cs.error();
      return std::optional<Resolved>{};  // nothing written yet
    }
    auto e = ensure_backing(*ci);
    if (!e) return e.error();
    return std::optional<Resolved>(Resolved{*ci, *e});
  }
  return si.error();
}

}  // namespace sluice::http_api
