// PgMetaStore change feed: the feed thread (LISTEN, the controller lease, reconnects) and
// watches on the SDK fan-out (sluice/watch_registry.h).
#include "pg_meta_store.h"
#include "sluice/record_batch.h"
#include "pg_meta_store_internal.h"

#include <pqxx/pqxx>

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <set>
#include <stdexcept>

#include "codec.h"
#include "schema.h"
#include "sluice/catalog_rules.h"
#include "sluice/strings.h"
#include "sluice/features.h"
#include "sluice/names.h"
#include "sluice/uuid.h"

namespace sluice::postgres_meta {

using namespace detail;

namespace {

constexpr std::string_view kComponent = "postgres-meta";
constexpr std::size_t kDeliveryBatch = 256;

// Sets a flag when a notification arrives on the channel.
class Receiver final : public pqxx::notification_receiver {
 public:
  Receiver(pqxx::connection_base& c, const std::string& channel, bool& flag)
      : pqxx::notification_receiver(c, channel), flag_(flag) {}
  void operator()(const std::string&, int) override { flag_ = true; }

 private:
  bool& flag_;
};

}  // namespace

// --- change feed ------------------------------------------------------------------------

std::unique_ptr<WatchHandle> PgMetaStore::watch(ChangeSeq after,
                                                std::function<void(const ChangeEvent&)> on_change,
                                                std::function<void()> resync) {
  return watches_.add(after, std::move(on_change), std::move(resync));
}

void PgMetaStore::wake_feed() {
  {
    std::lock_guard lk(watch_mu_);
    wake_ = true;
  }
  watch_cv_.notify_all();
}

namespace {
std::uint32_t change_digest(const std::string& kind, const std::string& payload) {
  return crc32c(payload.data(), payload.size(), crc32c(kind.data(), kind.size()));
}
}  // namespace

bool PgMetaStore::deliver_all(pqxx::connection& c) {
  {
    std::lock_guard lk(watch_mu_);
    wake_ = false;
  }
  std::uint64_t last_seq = applied_.load();  // kept if every watch ends before its fetch
  // Applied is what every watcher has been given: never past a change this build cannot
  // decode (remembered across rounds: no watcher sees beyond it until a newer build runs),
  // nor past where a fetch that stopped early left its watcher.
  std::uint64_t reached = std::numeric_limits<std::uint64_t>::max();
  auto clamp = [&](std::uint64_t v) {
    const std::uint64_t stuck = undecodable_at_.load();
    return std::min({v, reached, stuck == 0 ? v : stuck - 1});
  };
  if (watches_.empty()) {
    pqxx::read_transaction tx(c);
    applied_ = clamp(u64(tx.exec1("SELECT last_seq FROM counter")[0]));
    tx.commit();
    return false;
  }
  // Exceptions (a lost connection) propagate to feed_main, leaving every watch as it was.
  auto fetch = [&](ChangeSeq after) -> Result<WatchBatch> {
    WatchBatch b;
    pqxx::transaction<pqxx::repeatable_read, pqxx::read_only> tx(c);
    auto ctr = tx.exec1("SELECT last_seq, pruned_up_to FROM counter");
    last_seq = u64(ctr[0]);
    const std::uint64_t pruned = u64(ctr[1]);
    // The undecodable change was pruned: every watcher resyncs past it, so it no longer
    // holds applied back.
    if (std::uint64_t u = undecodable_at_.load(); u != 0 && pruned >= u) undecodable_at_.compare_exchange_strong(u, 0);
    // Behind the retained window, or ahead of the database (a restore rewound it).
    if (after.value() < pruned || after.value() > last_seq) {
      b.resync = true;
    } else {
      // From the watcher's own last change on: it must still be the one it was given.
      auto rs = tx.exec_params("SELECT seq, kind, payload FROM changes WHERE seq >= $1"
                               " ORDER BY seq LIMIT $2",
                               static_cast<std::int64_t>(after.value()),
                               static_cast<std::int64_t>(kDeliveryBatch + 1));
      std::size_t first = 0;
      if (!rs.empty() && u64(rs[0][0]) == after.value()) {
        first = 1;
        auto d = delivered_digest_.find(after.value());
        if (d != delivered_digest_.end() && d->second != change_digest(rs[0][1].as<std::string>(), rs[0][2].as<std::string>()))
          b.resync = true;  // another change holds that seq now
      }  // (a seq may have no row: the cluster's creation takes seq 1 without a change)
      if (b.resync) {
        log(LogLevel::warn, "the change at seq " + std::to_string(after.value()) +
                                " is not the one a watcher was given (a restored database?): the watcher resyncs");
        tx.commit();
        return b;
      }
      // The LIMIT was reached, so there may be more. (It was `rs.size() - first == kDelivery
      // Batch`: with no row at the cursor, 257 rows said "no more", and the rest waited for
      // the next poll while `reached` ran ahead of what watchers had (review).)
      b.more = rs.size() == kDeliveryBatch + 1;
      for (std::size_t i = first; i < rs.size(); ++i) {
        const auto& r = rs[i];
        auto ev = decode_change(i64(r[0]), r[1].as<std::string>(), r[2].as<std::string>());
        if (!ev.ok()) {
          // Never skip a change (docs/metadata-raft-design.md, "Error policy"): the feed
          // stops before it, and watchers see nothing they would have to guess at.
          log(LogLevel::error, ev.error().message + "; the change feed stops before change " +
                                   std::to_string(i64(r[0])) + " until a build that reads it runs");
          b.more = false;
          const std::uint64_t seq = u64(r[0]);
          std::uint64_t seen = undecodable_at_.load();
          while ((seen == 0 || seq < seen) && !undecodable_at_.compare_exchange_weak(seen, seq)) {
          }
          break;
        }
        delivered_digest_[u64(r[0])] = change_digest(r[1].as<std::string>(), r[2].as<std::string>());
        b.events.push_back(std::move(ev.value()));
      }
      // Bounded: the digests of the last few thousand changes (a watcher further behind
      // resyncs on pruning long before a restore could matter to it).
      while (delivered_digest_.size() > 4 * kDeliveryBatch * 16) delivered_digest_.erase(delivered_digest_.begin());
      // Where this watcher now stands: the last change it was given, or everything there
      // is if the fetch read to the end.
      const std::uint64_t at = b.events.empty() ? after.value() : b.events.back().seq.value();
      reached = std::min(reached, b.more || rs.size() - first != b.events.size() ? at : std::max(at, last_seq));
    }
    tx.commit();
    return b;
  };
  bool more = watches_.deliver(fetch, [this](const std::string& m) { log(LogLevel::error, m); }).more;
  applied_ = clamp(last_seq);
  return more;
}

void PgMetaStore::feed_main() {
  std::unique_ptr<pqxx::connection> c;
  std::unique_ptr<Receiver> rx;
  bool notified = false;
  bool more_pending = false;  // the last pass was cut short
  std::chrono::milliseconds backoff{100};
  auto next_lease_try = Clock::now();
  auto last_poll = Clock::now() - cfg_.poll_interval;
  bool was_down = false;
  std::string mismatch_logged;
  auto drop = [&](const std::string& why) {
    rx.reset();
    c.reset();
    if (feed_up_.exchange(false) || !was_down)
      log(LogLevel::warn, "database connection lost (" + why + "); not ready, reconnecting");
    was_down = true;
    if (lease_held_.exchange(false)) log(LogLevel::warn, "controller lease lost with the connection");
    std::lock_guard lk(err_mu_);
    last_error_ = why;
  };
  auto sleep_for = [&](std::chrono::milliseconds d) {
    std::unique_lock lk(watch_mu_);
    watch_cv_.wait_for(lk, d, [&] { return feed_stop_.load(); });
  };
  while (!feed_stop_.load()) {
    if (!c) {
      auto r = connect_once();
      if (!r.ok()) {
        {
          std::lock_guard lk(err_mu_);
          last_error_ = r.error().message;
        }
        // Said once, not at every retry: the operator must see it (a connection that drops
        // and cannot come back is only a warning above).
        if (r.error().code == Errc::cluster_id_mismatch && r.error().message != mismatch_logged) {
          log(LogLevel::error, r.error().message + "; not ready until it holds this cluster again");
          mismatch_logged = r.error().message;
        }
        feed_up_ = false;
        sleep_for(backoff);
        backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
        continue;
      }
      try {
        c = std::move(r.value());
        rx = std::make_unique<Receiver>(*c, channel_, notified);
        backoff = std::chrono::milliseconds(100);
        last_poll = Clock::now() - cfg_.poll_interval;  // catch up at once
        next_lease_try = Clock::now();
        feed_up_ = true;
        if (was_down) log(LogLevel::info, "database connection restored; ready");
        was_down = false;
      } catch (const std::exception& e) {
        drop(clean(e.what()));
        continue;
      }
    }
    try {
      if (Clock::now() >= next_lease_try) {
        pqxx::nontransaction ntx(*c);
        if (!lease_held_.load()) {
          bool got = ntx.exec_params1("SELECT pg_try_advisory_lock(hashtextextended($1, 0))",
                                      "sluice-lease/" + cfg_.schema)[0]
                         .as<bool>();
          if (got) {
            lease_held_ = true;
            log(LogLevel::info, "acquired the controller lease for " + cfg_.schema);
          }
        } else {
          // Still ours? A session the server ended and something replaced would not hold it
          // (review); this query also keeps the session from idling into the server's
          // idle_session_timeout (connect_once).
          bool mine = ntx.exec_params1(
                             "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted "
                             "AND pid = pg_backend_pid() AND objsubid = 1 "
                             "AND ((classid::bigint << 32) | objid::bigint) = hashtextextended($1, 0))",
                             "sluice-lease/" + cfg_.schema)[0]
                          .as<bool>();
          if (!mine && lease_held_.exchange(false))
            log(LogLevel::warn, "the controller lease for " + cfg_.schema + " is no longer held by this node's session");
        }
        next_lease_try = Clock::now() + std::chrono::milliseconds(1000);
      }
      bool wake;
      {
        std::lock_guard lk(watch_mu_);
        wake = wake_;
      }
      if (more_pending || notified || wake || Clock::now() - last_poll >= cfg_.poll_interval) {
        notified = false;
        last_poll = Clock::now();
        // More pending: deliver again at once. (The `continue` alone came back to this test
        // with nothing set, and the rest waited for the next poll: review.)
        more_pending = deliver_all(*c);
        if (more_pending) continue;
      }
      c->await_notification(0, 50000);  // sets `notified`
    } catch (const pqxx::broken_connection& e) {
      drop(clean(e.what()));
    } catch (const pqxx::sql_error& e) {
      if (is_connection_state(e.sqlstate())) {
        drop(clean(e.what()));
      } else {
        log(LogLevel::error, "change feed: " + clean(e.what()));
        sleep_for(std::chrono::milliseconds(500));
      }
    } catch (const std::exception& e) {
      drop(clean(e.what()));
    }
  }
  rx.reset();
  c.reset();
}

}  // namespace sluice::postgres_meta
