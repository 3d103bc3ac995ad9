// postgres-meta's request pool (metadata.postgres.pool_size; plugins/postgres-meta/
// pg_meta_pool.cc) against a real PostgreSQL 15 (ctest fixture sluice_pg). No timing
// assertions: waits poll with generous deadlines, and what happens to a call whose
// connection is killed is checked against every answer the contract allows.
#include <gtest/gtest.h>

#include <future>

#include <atomic>
#include <map>
#include <optional>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "pg_meta_store_internal.h"
#include "pg_test_util.h"
#include "sluice/features.h"

namespace sluice::postgres_meta {
namespace {

using sluice::testing::TestHost;
using namespace std::chrono_literals;

struct Node {
  TestHost host;
  std::unique_ptr<PgMetaStore> store;
  explicit Node(PgMetaConfig c) {
    store = std::make_unique<PgMetaStore>(host, std::move(c));
    auto r = store->start();
    EXPECT_TRUE(r.ok()) << r.error().to_string();
  }
  PgMetaStore* operator->() { return store.get(); }
};

PgMetaConfig pool_config(const std::string& schema, int pool_size) {
  auto c = pgtest::config(schema);
  c.pool_size = pool_size;
  return c;
}

StreamKey key(const std::string& name) { return StreamKey{"acme", "prod", name}; }

// Every change after `after`, as the feed delivers them.
struct Recorder {
  std::mutex mu;
  std::vector<ChangeEvent> events;
  bool resynced = false;
  std::unique_ptr<WatchHandle> handle;
  Recorder(PgMetaStore& s, ChangeSeq after) {
    handle = s.watch(
        after,
        [this](const ChangeEvent& e) {
          std::lock_guard lk(mu);
          events.push_back(e);
        },
        [this] {
          std::lock_guard lk(mu);
          resynced = true;
        });
  }
  std::size_t size() {
    std::lock_guard lk(mu);
    return events.size();
  }
};

// The backends of this test's instance, and only those: ctest runs other tests against the
// same server at the same time, and terminating their connections failed them at random
// (a migration "not connected", a conformance list_tombstones). A node's connections carry
// its schema in their application_name (pg_meta_bootstrap.cc).
std::vector<int> sluiced_backends(const std::string& schema) {
  std::vector<int> pids;
  pqxx::connection c(sluice::pgtest::base_url());
  pqxx::work tx(c);
  for (const auto& r : tx.exec_params("SELECT pid FROM pg_stat_activity WHERE application_name = $1",
                                      sluice::postgres_meta::application_name(sluice::NodeId{1}, schema)))
    pids.push_back(r[0].as<int>());
  return pids;
}

void terminate_and_wait(const std::string& schema, const std::vector<int>& pids) {
  for (int pid : pids) pgtest::sql(schema, "SELECT pg_terminate_backend(" + std::to_string(pid) + ")");
  // Gone from pg_stat_activity: the backend exited, so its socket is closed.
  EXPECT_TRUE(pgtest::eventually([&] {
    for (int pid : pids)
      if (!pgtest::sql(schema, "SELECT 1 FROM pg_stat_activity WHERE pid = " + std::to_string(pid))
               .empty())
        return false;
    return true;
  }));
}

void expect_gap_free(const std::string& schema) {
  auto seqs = pgtest::sql(schema, "SELECT count(*), min(seq), max(seq) FROM changes");
  EXPECT_EQ(seqs[0][0].as<std::int64_t>(),
            seqs[0][2].as<std::int64_t>() - seqs[0][1].as<std::int64_t>() + 1)
      << "the change sequence has no holes";
}

TEST(PostgresMetaPool, concurrent_creates_keep_the_feed_gap_free_and_ordered) {
  auto schema = pgtest::fresh_schema(pgtest::current_test_name());
  Node n(pool_config(schema, 8));
  ASSERT_TRUE(n->create_tenant("acme").ok());
  ASSERT_TRUE(n->create_namespace("acme", "prod").ok());
  auto snap = n->snapshot();
  ASSERT_TRUE(snap.ok());
  Recorder rec(*n.store, snap->seq);
  constexpr int kThreads = 16, kEach = 25;
  std::mutex mu;
  std::map<std::string, std::uint64_t> created;  // name -> created_seq
  std::vector<std::string> failures;
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        const std::string name = "s" + std::to_string(t) + "_" + std::to_string(i);
        StreamSpec spec;
        spec.shards = 1 + static_cast<std::uint32_t>(i % 3);
        auto r = n->create_stream(key(name), spec);
        std::lock_guard lk(mu);
        if (r.ok())
          created[name] = r->created_seq.value();
        else
          failures.push_back(name + ": " + r.error().to_string());
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_TRUE(failures.empty()) << failures.front();
  const std::size_t total = static_cast<std::size_t>(kThreads * kEach);
  ASSERT_EQ(created.size(), total);
  ASSERT_TRUE(pgtest::eventually([&] { return rec.size() >= total; }));
  std::lock_guard lk(rec.mu);
  EXPECT_FALSE(rec.resynced);
  ASSERT_EQ(rec.events.size(), total);
  std::set<std::string> seen;
  for (std::size_t i = 0; i < rec.events.size(); ++i) {
    const auto& e = rec.events[i];
    // Delivered in order, one step at a time: nothing skipped, nothing twice.
    EXPECT_EQ(e.seq.value(), snap->seq.value() + 1 + i);
    ASSERT_EQ(e.kind, ChangeEvent::Kind::stream_created);
    EXPECT_EQ(created[e.stream.key.name], e.seq.value()) << e.stream.key.name;
    EXPECT_TRUE(seen.insert(e.stream.key.name).second);
    EXPECT_EQ(e.assignments.size(), e.stream.spec.shards);
  }
  expect_gap_free(schema);
}

TEST(PostgresMetaPool, one_connection_serves_many_callers) {
  auto schema = pgtest::fresh_schema(pgtest::current_test_name());
  Node n(pool_config(schema, 1));
  ASSERT_TRUE(n->create_tenant("acme").ok());
  ASSERT_TRUE(n->create_namespace("acme", "prod").ok());
  std::atomic<int> ok{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) {
        auto r = n->create_stream(key("p" + std::to_string(t) + "_" + std::to_string(i)), {});
        EXPECT_TRUE(r.ok()) << r.error().to_string();
        ok += r.ok();
        EXPECT_TRUE(n->list_streams("acme", "prod").ok());
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(ok.load(), 40);
  expect_gap_free(schema);
}

// A pooled connection the server closed while it sat idle is found dead before use and
// replaced: the next calls succeed without an error.
TEST(PostgresMetaPool, connection_terminated_while_idle_is_replaced) {
  auto schema = pgtest::fresh_schema(pgtest::current_test_name());
  Node n(pool_config(schema, 2));
  ASSERT_TRUE(n->create_tenant("acme").ok());
  ASSERT_TRUE(n->create_namespace("acme", "prod").ok());
  ASSERT_TRUE(n->create_stream(key("before"), {}).ok());
  auto pids = sluiced_backends(schema);
  ASSERT_FALSE(pids.empty());
  terminate_and_wait(schema, pids);
  for (int i = 0; i < 4; ++i) {
    auto r = n->create_stream(key("after" + std::to_string(i)), {});
    ASSERT_TRUE(r.ok()) << r.error().to_string();
    auto g = n->get_stream(key("after" + std::to_string(i)));
    ASSERT_TRUE(g.ok()) << g.error().to_string();
    EXPECT_EQ(g->incarnation, r->incarnation);
  }
  // New backends serve the pool (and the feed reconnects: ready again).
  for (int pid : sluiced_backends(schema))
    EXPECT_EQ(std::count(pids.begin(), pids.end(), pid), 0) << "backend " << pid << " survived";
  EXPECT_TRUE(pgtest::eventually([&] { return n->status().ready; }));
  expect_gap_free(schema);
}

// Regression (review): the cluster id was read once, at start. A connection opened later
// (a pool slot, the feed's reconnect) to a database that now holds another cluster (the
// URL's name or pooler moved) was used: this node wrote into another cluster's catalog and
// applied its deletes. Every new connection now checks the id; here the row is changed
// under the node and its connections are cut.
TEST(PostgresMetaPool, a_new_connection_to_another_cluster_is_refused) {
  auto schema = pgtest::fresh_schema(pgtest::current_test_name());
  Node n(pool_config(schema, 2));
  ASSERT_TRUE(n->create_tenant("acme").ok());
  const std::string mine = n->status().cluster_id;
  ASSERT_FALSE(mine.empty());
  pgtest::sql(schema, "UPDATE cluster SET id = '00000000-0000-4000-8000-000000000000'");
  terminate_and_wait(schema, sluiced_backends(schema));
  auto r = n->create_namespace("acme", "prod");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::cluster_id_mismatch) << r.error().to_string();
  EXPECT_NE(r.error().message.find("00000000-0000-4000-8000-000000000000"), std::string::npos);
  EXPECT_TRUE(pgtest::eventually([&] { return !n->status().ready; })) << "the feed must not reconnect either";
  EXPECT_TRUE(pgtest::sql(schema, "SELECT 1 FROM namespaces").empty()) << "nothing was written";
  // The database back as it was: the node uses it again.
  pgtest::sql(schema, "UPDATE cluster SET id = '" + mine + "'");
  EXPECT_TRUE(pgtest::eventually([&] { return n->status().ready; }));
  EXPECT_TRUE(n->create_namespace("acme", "prod").ok());
}

// Connections killed while calls run: each call succeeds (retried on a new connection),
// or answers unavailable (transient), or, if the connection broke while its commit was in
// flight, timeout with outcome uncertain. The sequence stays gap-free and every success is
// in the catalog.
TEST(PostgresMetaPool, connections_killed_under_load_retry_or_answer_transient) {
  auto schema = pgtest::fresh_schema(pgtest::current_test_name());
  Node n(pool_config(schema, 4));
  ASSERT_TRUE(n->create_tenant("acme").ok());
  ASSERT_TRUE(n->create_namespace("acme", "prod").ok());
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::vector<std::string> ok_names, uncertain_names, bad;
  std::vector<std::thread> ts;
  for (int t = 0; t < 6; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; !stop.load(); ++i) {
        const std::string name = "k" + std::to_string(t) + "_" + std::to_string(i);
        auto r = n->create_stream(key(name), {});
        std::lock_guard lk(mu);
        if (r.ok())
          ok_names.push_back(name);
        else if (r.error().code == Errc::timeout && r.error().outcome == Outcome::uncertain)
          uncertain_names.push_back(name);
        else if (r.error().code != Errc::unavailable)
          bad.push_back(name + ": " + r.error().to_string());
      }
    });
  std::size_t kills = 0;
  for (int round = 0; round < 5; ++round) {
    // Let some creates through between kills (no timing: wait for progress).
    const std::size_t before = [&] { std::lock_guard lk(mu); return ok_names.size(); }();
    ASSERT_TRUE(pgtest::eventually([&] {
      std::lock_guard lk(mu);
      return ok_names.size() >= before + 20;
    })) << "no progress after kill round " << round;
    auto pids = sluiced_backends(schema);
    kills += pids.size();
    terminate_and_wait(schema, pids);
  }
  stop = true;
  for (auto& t : ts) t.join();
  EXPECT_GT(kills, 0u);
  EXPECT_TRUE(bad.empty()) << bad.front();
  for (auto& name : ok_names) {
    auto g = n->get_stream(key(name));
    EXPECT_TRUE(g.ok()) << name << ": " << g.error().to_string();
  }
  auto after = n->create_stream(key("final"), {});
  EXPECT_TRUE(after.ok()) << after.error().to_string();
  expect_gap_free(schema);
  // Every committed create is one change: successes plus those of the uncertain ones
  // that did commit.
  auto count = pgtest::sql(schema, "SELECT count(*) FROM streams")[0][0].as<std::size_t>();
  EXPECT_GE(count, ok_names.size() + 1);
  EXPECT_LE(count, ok_names.size() + uncertain_names.size() + 1);
}

// A write chosen as a deadlock victim (40P01) is retried, not answered as internal: libpqxx
// 6.4 throws pqxx::deadlock_detected / serialization_failure, which are not sql_errors.
// The cycle: this session holds brokers and then waits for counter, which the create holds
// while it waits for brokers. This session's deadlock_timeout is long, so the create's
// backend (1 s) is the one that detects the deadlock and is aborted.
TEST(PostgresMetaPool, deadlock_victim_is_retried) {
  auto schema = pgtest::fresh_schema(pgtest::current_test_name());
  Node n(pool_config(schema, 2));
  ASSERT_TRUE(n->create_tenant("acme").ok());
  ASSERT_TRUE(n->create_namespace("acme", "prod").ok());
  pqxx::connection c(pgtest::base_url());
  pqxx::work tx(c);
  tx.exec0("SET LOCAL search_path = " + tx.quote_name(schema));
  tx.exec0("SET LOCAL deadlock_timeout = '600s'");
  tx.exec0("LOCK TABLE brokers IN ACCESS EXCLUSIVE MODE");
  std::optional<Result<StreamInfo>> r;
  std::thread t([&] { r.emplace(n->create_stream(key("victim"), {})); });
  // The create holds the counter lock and waits for brokers.
  EXPECT_TRUE(pgtest::eventually([&] {
    return !pgtest::sql(schema, "SELECT 1 FROM pg_locks l JOIN pg_class r ON r.oid = l.relation "
                                "WHERE r.relname = 'brokers' AND r.relnamespace = '" + schema +
                                    "'::regnamespace AND NOT l.granted")
                .empty();
  }));
  tx.exec0("LOCK TABLE counter IN EXCLUSIVE MODE");  // granted once the create is aborted
  tx.abort();
  t.join();
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->ok()) << r->error().to_string();
  expect_gap_free(schema);
}

// Regression (review): a batched write's one-round-trip COMMIT turned a lost connection
// into in_doubt_error (answered "uncertain"), but not 40003 statement_completion_unknown,
// a transaction_rollback that the runner retries as "nothing committed". The server's
// 40003 is raised here by the batch itself.
TEST(PostgresMetaPool, a_batched_commit_the_server_cannot_confirm_is_in_doubt) {
  pqxx::connection c(pgtest::base_url());
  pqxx::work tx(c);
  postgres_meta::WriteBatch b(tx, "");
  b.then("DO $$ BEGIN RAISE EXCEPTION 'completion unknown' USING ERRCODE = '40003'; END $$");
  EXPECT_THROW(b.commit(), pqxx::in_doubt_error);
}

// Review finding: nothing bounded how long a write waited for the counter lock. With
// another writer holding it and gone silent (a frozen VM, a partition), every catalog write
// of every instance waited until the lock was released, hours if TCP had to notice,
// whatever metadata.timeout_ms said. A write now gives up at its deadline, transient.
TEST(PostgresMetaPool, a_write_blocked_on_the_counter_lock_gives_up_at_its_deadline) {
  auto schema = pgtest::fresh_schema(pgtest::current_test_name());
  auto cfg = pool_config(schema, 2);
  cfg.timeout = std::chrono::milliseconds(2000);
  Node n(cfg);
  ASSERT_TRUE(n->create_tenant("acme").ok());
  pqxx::connection c(pgtest::base_url());
  pqxx::work tx(c);
  tx.exec0("SET LOCAL search_path = " + tx.quote_name(schema));
  tx.exec0("LOCK TABLE counter IN EXCLUSIVE MODE");  // the silent writer
  std::atomic<bool> done{false};
  std::optional<Result<NamespaceInfo>> r;
  std::thread t([&] {
    r.emplace(n->create_namespace("acme", "blocked"));
    done = true;
  });
  const bool gave_up = pgtest::eventually([&] { return done.load(); }, std::chrono::milliseconds(60000));
  tx.abort();  // released only now (before the fix, the write went through here)
  t.join();
  ASSERT_TRUE(gave_up) << "the write waited for the counter lock past its deadline";
  ASSERT_TRUE(r.has_value());
  ASSERT_FALSE(r->ok());
  EXPECT_EQ(r->error().code, Errc::unavailable) << r->error().to_string();
  EXPECT_EQ(r->error().outcome, Outcome::transient);
  EXPECT_TRUE(n->create_namespace("acme", "blocked").ok()) << "once the lock is free, the write goes through";
}

// Regression (review): when a batch of creates lost its COMMIT (outcome unknown), every
// create in it answered "uncertain", also one the batch had refused before writing (a name
// that exists): its client could not tell that nothing had happened. A trigger makes the
// server say "completion unknown" (40003) for one insert; the batch is formed by holding
// the counter lock while the creates queue behind the first one.
TEST(PostgresMetaPool, a_create_refused_in_a_batch_whose_commit_was_lost_keeps_its_definite_answer) {
  auto schema = pgtest::fresh_schema(pgtest::current_test_name());
  Node n(pool_config(schema, 2));
  ASSERT_TRUE(n->create_tenant("acme").ok());
  ASSERT_TRUE(n->create_namespace("acme", "prod").ok());
  ASSERT_TRUE(n->create_stream(key("taken"), {}).ok());
  pgtest::sql(schema,
              "CREATE FUNCTION lose_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
              "RAISE EXCEPTION 'completion unknown' USING ERRCODE = '40003'; END $$; "
              "CREATE TRIGGER lose_commit BEFORE INSERT ON streams FOR EACH ROW "
              "WHEN (NEW.name = 'lost') EXECUTE FUNCTION lose_commit()");

  pqxx::connection c(pgtest::base_url());
  pqxx::work hold(c);
  hold.exec0("SET LOCAL search_path = " + hold.quote_name(schema));
  hold.exec0("LOCK TABLE counter IN EXCLUSIVE MODE");
  const int holder = hold.exec1("SELECT pg_backend_pid()")[0].as<int>();
  auto first = std::async(std::launch::async, [&] { return n->create_stream(key("first"), {}); });
  ASSERT_TRUE(pgtest::eventually([&] {
    return pgtest::sql("public", "SELECT count(*) FROM pg_stat_activity WHERE " + std::to_string(holder) +
                                     " = ANY(pg_blocking_pids(pid))")[0][0]
               .as<int>() > 0;
  })) << "the first create never waited for the counter lock";
  auto dup = std::async(std::launch::async, [&] { return n->create_stream(key("taken"), {}); });
  auto lost = std::async(std::launch::async, [&] { return n->create_stream(key("lost"), {}); });
  ASSERT_TRUE(pgtest::eventually([&] { return n->queued_creates() == 2; }));
  // A second create of "lost" in the same batch is refused only because the first took
  // the name: as uncertain as the first (review of the fix).
  auto lost_again = std::async(std::launch::async, [&] { return n->create_stream(key("lost"), {}); });
  ASSERT_TRUE(pgtest::eventually([&] { return n->queued_creates() == 3; }));
  hold.abort();  // the first batch runs, then {taken, lost, lost} as one

  ASSERT_EQ(first.wait_for(120s), std::future_status::ready);
  EXPECT_TRUE(first.get().ok());
  ASSERT_EQ(lost.wait_for(120s), std::future_status::ready);
  auto l = lost.get();
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.error().outcome, Outcome::uncertain) << l.error().to_string();
  ASSERT_EQ(dup.wait_for(120s), std::future_status::ready);
  auto d = dup.get();
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().code, Errc::already_exists) << d.error().to_string();
  EXPECT_EQ(d.error().outcome, Outcome::definite) << d.error().to_string();
  ASSERT_EQ(lost_again.wait_for(120s), std::future_status::ready);
  auto l2 = lost_again.get();
  ASSERT_FALSE(l2.ok());
  EXPECT_EQ(l2.error().outcome, Outcome::uncertain) << l2.error().to_string();
}

TEST(PostgresMetaPool, pool_size_is_validated) {
  auto make = [](const std::string& v) {
    TestHost host({{"metadata.postgres.url", "host=127.0.0.1 port=1 dbname=x"},
                   {"metadata.postgres.pool_size", v}});
    return PgMetaConfig::from_host(host);
  };
  for (const std::string bad : {"0", "-3", "65", "1000"}) {
    try {
      make(bad);
      ADD_FAILURE() << "pool_size " << bad << " was accepted";
    } catch (const std::invalid_argument& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("metadata.postgres.pool_size"), std::string::npos) << m;
      EXPECT_NE(m.find("between 1 and 64"), std::string::npos) << m;
      EXPECT_NE(m.find(bad), std::string::npos) << m;
    }
  }
  // Not a number: refused too (sluiced's host names the key, tests/unit/core_test.cc).
  EXPECT_THROW(make("eight"), std::invalid_argument);
  EXPECT_EQ(make("1").pool_size, 1);
  EXPECT_EQ(make("64").pool_size, 64);
  TestHost plain(std::map<std::string, std::string>{
      {"metadata.postgres.url", "host=127.0.0.1 port=1 dbname=x"}});
  EXPECT_EQ(PgMetaConfig::from_host(plain).pool_size, 8);
}

// metadata.bootstrap_hold_back goes through the SDK's parse_feature_list: "*" is every
// feature (tests/integration hold them all back this way), an unknown name is refused.
TEST(PostgresMetaConfig, bootstrap_hold_back_takes_names_or_a_star) {
  auto make = [](const std::string& v) {
    TestHost host({{"metadata.postgres.url", "host=127.0.0.1 port=1 dbname=x"},
                   {"metadata.bootstrap_hold_back", v}});
    return PgMetaConfig::from_host(host);
  };
  EXPECT_EQ(make("*").bootstrap_hold_back.size(), known_features().size());
  EXPECT_EQ(make("counters").bootstrap_hold_back, std::vector<std::string>{"counters"});
  try {
    make("counters,nope");
    ADD_FAILURE() << "an unknown feature was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("metadata.bootstrap_hold_back"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("nope"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace sluice::postgres_meta
