// Helpers for tests against a real PostgreSQL (tests/support/pg_test_server.sh, started by
// the ctest fixture `sluice_pg`). Nothing is skipped: without a server, tests fail and say why.
#pragma once

#include <gtest/gtest.h>
#include <pqxx/pqxx>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>

#include "pg_meta_store.h"
#include "test_host.h"

namespace sluice::pgtest {

// The base connection string (no dbname is required; sluice_test is the default database).
inline std::string base_url() {
  const char* u = std::getenv("SLUICE_TEST_PG_URL");
  return u ? std::string(u) : std::string();
}

// A fresh, empty schema for one test (dropped first if a previous run left it).
inline std::string fresh_schema(std::string name) {
  std::string url = base_url();
  if (url.empty()) {
    ADD_FAILURE() << "SLUICE_TEST_PG_URL is not set: run these tests through ctest (the "
                     "sluice_pg fixture starts PostgreSQL with tests/support/pg_test_server.sh)";
    return "unset";
  }
  for (auto& ch : name) {
    ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9'))) ch = '_';
  }
  if (name.size() > 36) name = name.substr(name.size() - 36);
  name = "t_" + name;
  try {
    pqxx::connection c(url);
    pqxx::nontransaction tx(c);
    tx.exec0("DROP SCHEMA IF EXISTS " + tx.quote_name(name) + " CASCADE");
  } catch (const std::exception& e) {
    ADD_FAILURE() << "cannot reach the test PostgreSQL (" << url << "): " << e.what();
  }
  return name;
}

inline std::string current_test_name() {
  auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return std::string(info->test_suite_name()) + "_" + info->name();
}

inline postgres_meta::PgMetaConfig config(const std::string& schema, const std::string& url = base_url()) {
  postgres_meta::PgMetaConfig c;
  c.url = url;
  c.schema = schema;
  c.timeout = std::chrono::milliseconds(30000);
  c.start_timeout = std::chrono::milliseconds(30000);
  c.poll_interval = std::chrono::milliseconds(200);
  return c;
}

// Runs SQL directly (as the test superuser) inside `schema`.
inline pqxx::result sql(const std::string& schema, const std::string& q,
                        const std::string& url = base_url()) {
  pqxx::connection c(url);
  pqxx::work tx(c);
  tx.exec0("SET LOCAL search_path = " + tx.quote_name(schema));
  auto r = tx.exec(q);
  tx.commit();
  return r;
}

// Polls `pred` until true or a generous deadline.
inline bool eventually(const std::function<bool()>& pred,
                       std::chrono::milliseconds limit = std::chrono::milliseconds(60000)) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

}  // namespace sluice::pgtest
