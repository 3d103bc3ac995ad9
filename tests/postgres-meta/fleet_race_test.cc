// postgres-meta's feature finalize against a broker heartbeat in flight (docs/upgrades.md
// "Finalizing a feature"). A broker that lacks a feature must not be serving once it is
// finalized, whichever of the two commits first. Real PostgreSQL (fixture sluice_pg); the
// interleaving is made with a second connection that holds the lock the other side waits
// for, and the test polls pg_blocking_pids until the call under test waits on it.
#include <gtest/gtest.h>

#include <future>

#include "pg_test_util.h"
#include "schema.h"
#include "sluice/features.h"

namespace sluice::postgres_meta {
namespace {

using sluice::testing::TestHost;
using namespace std::chrono_literals;
const std::string kInc(kStreamIncarnations);
constexpr std::uint32_t kOld = 7;  // a broker of the old version: it lacks kInc

struct Fixture {
  std::string schema = pgtest::fresh_schema(pgtest::current_test_name());
  TestHost host;
  std::unique_ptr<PgMetaStore> store;
  Fixture() {
    auto c = pgtest::config(schema);
    for (const auto& f : known_features()) c.bootstrap_hold_back.emplace_back(f.name);  // a level-8 cluster
    store = std::make_unique<PgMetaStore>(host, std::move(c));
    auto r = store->start();
    EXPECT_TRUE(r.ok()) << r.error().to_string();
    BrokerRegistration reg;
    reg.id = NodeId{kOld};
    reg.address = "127.0.0.1:18080";
    reg.directory_id = "dir-old";
    reg.version = "0.9";
    for (const auto& f : known_features())
      if (f.name != kInc) reg.features.emplace_back(f.name);  // it lacks kInc alone
    auto b = store->register_broker(reg);
    EXPECT_TRUE(b.ok()) << b.error().to_string();
    // Away for an hour: not serving, so it does not hold the finalize back.
    pgtest::sql(schema, "UPDATE brokers SET last_heartbeat = now() - interval '1 hour' WHERE id = " +
                            std::to_string(kOld));
  }
  bool old_broker_live() {
    auto r = pgtest::sql(schema, "SELECT last_heartbeat > now() - interval '1 minute' FROM brokers WHERE id = " +
                                     std::to_string(kOld));
    return r[0][0].as<bool>();
  }
  bool finalized() {
    return !pgtest::sql(schema, "SELECT 1 FROM features WHERE name = '" + kInc + "'").empty();
  }
};

// A second session that holds a lock until commit().
struct Holder {
  pqxx::connection conn{pgtest::base_url()};
  pqxx::work tx{conn};
  int pid = 0;
  explicit Holder(const std::string& schema) {
    tx.exec0("SET LOCAL search_path = " + tx.quote_name(schema));
    pid = tx.exec1("SELECT pg_backend_pid()")[0].as<int>();
  }
  // True once some other session waits for a lock this one holds.
  bool someone_waits() {
    auto r = pgtest::sql("public", "SELECT count(*) FROM pg_stat_activity WHERE " + std::to_string(pid) +
                                       " = ANY(pg_blocking_pids(pid))");
    return r[0][0].as<int>() > 0;
  }
};

// The finalize commits first: a heartbeat that waited for it must see it, and be refused.
TEST(PostgresMetaFleet, a_heartbeat_that_waited_for_a_finalize_is_refused_and_stays_away) {
  Fixture f;
  Holder fin(f.schema);  // the finalize, between its gate (brokers read FOR SHARE) and its commit
  fin.tx.exec("SELECT id FROM brokers FOR SHARE");
  fin.tx.exec0("INSERT INTO features(name, finalized_seq) VALUES ('" + kInc + "', 1000000)");
  auto hb = std::async(std::launch::async, [&] { return f.store->heartbeat_broker(NodeId{kOld}); });
  ASSERT_TRUE(pgtest::eventually([&] { return fin.someone_waits(); }))
      << "the heartbeat never waited for the finalize's row lock";
  fin.tx.commit();
  ASSERT_EQ(hb.wait_for(120s), std::future_status::ready);
  auto r = hb.get();
  ASSERT_FALSE(r.ok()) << "a broker lacking " << kInc << " was admitted back after its finalize";
  EXPECT_EQ(r.error().code, Errc::conflict) << r.error().to_string();
  EXPECT_NE(r.error().message.find(kInc), std::string::npos) << r.error().message;
  EXPECT_FALSE(f.old_broker_live()) << "the refused heartbeat's update was committed";
}

// The same race with an older broker's own heartbeat, which checks the features before
// its update (that code is not ours to change): the database refuses the update once the
// finalize committed (migration 8, SL013).
TEST(PostgresMetaFleet, an_older_brokers_heartbeat_that_waited_for_a_finalize_is_refused_by_the_database) {
  Fixture f;
  Holder fin(f.schema);
  fin.tx.exec("SELECT id FROM brokers FOR SHARE");
  fin.tx.exec0("INSERT INTO features(name, finalized_seq) VALUES ('" + kInc + "', 1000000)");
  // Its check passed before the finalize committed (nothing finalized then); its update:
  auto old = std::async(std::launch::async, [&]() -> std::string {
    try {
      pgtest::sql(f.schema, "UPDATE brokers SET last_heartbeat = now() WHERE id = " + std::to_string(kOld));
      return "committed";
    } catch (const pqxx::sql_error& e) {
      return e.sqlstate();
    }
  });
  ASSERT_TRUE(pgtest::eventually([&] { return fin.someone_waits(); }))
      << "the heartbeat's update never waited for the finalize's row lock";
  fin.tx.commit();
  ASSERT_EQ(old.wait_for(120s), std::future_status::ready);
  EXPECT_EQ(old.get(), std::string(kStateBrokerLacksFeature)) << "the older broker's heartbeat went through";
  EXPECT_FALSE(f.old_broker_live());
}

// The heartbeat commits first: the finalize must count the broker it brought back, and refuse.
TEST(PostgresMetaFleet, a_finalize_that_met_a_heartbeat_in_flight_counts_that_broker_and_refuses) {
  Fixture f;
  Holder hb(f.schema);  // the heartbeat, between its update and its commit
  hb.tx.exec0("UPDATE brokers SET last_heartbeat = now() WHERE id = " + std::to_string(kOld));
  auto fin = std::async(std::launch::async, [&] { return f.store->finalize_feature(kInc); });
  // Wait until the finalize waits on the heartbeat's row (or, without the lock, has finished).
  ASSERT_TRUE(pgtest::eventually([&] {
    return hb.someone_waits() || fin.wait_for(0s) == std::future_status::ready;
  }));
  hb.tx.commit();
  ASSERT_EQ(fin.wait_for(120s), std::future_status::ready);
  auto r = fin.get();
  EXPECT_FALSE(r.ok()) << kInc << " was finalized while a broker lacking it was serving";
  if (!r.ok()) {
    EXPECT_EQ(r.error().code, Errc::conflict) << r.error().to_string();
  }
  EXPECT_FALSE(f.finalized());
  EXPECT_TRUE(f.old_broker_live());
}

}  // namespace
}  // namespace sluice::postgres_meta
