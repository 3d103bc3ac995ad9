// PgMetaStore lifecycle: connect, migrate and bootstrap the schema (schema.h), start, stop,
// status.
#include "pg_meta_store.h"
#include "pg_meta_store_internal.h"

#include <pthread.h>
#include <pqxx/pqxx>

#include <algorithm>
#include <cstring>
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

}  // namespace

// --- lifecycle -------------------------------------------------------------------------

PgMetaStore::PgMetaStore(PluginHost& host) : PgMetaStore(host, PgMetaConfig::from_host(host)) {}

PgMetaStore::PgMetaStore(PluginHost& host, PgMetaConfig config)
    : host_(host), cfg_(std::move(config)) {
  auto d = describe_conninfo(cfg_.url);
  if (!d.ok()) throw std::invalid_argument(d.error().message);
  target_ = d.value() + " schema=" + cfg_.schema;
  secret_ = conninfo_password(cfg_.url);
  channel_ = "sluice_changes_" + cfg_.schema;
}

PgMetaStore::~PgMetaStore() { stop(); }

void PgMetaStore::log(LogLevel level, const std::string& msg) {
  host_.log(level, kComponent, scrub(msg, secret_));
}

std::string PgMetaStore::clean(const std::string& msg) const {
  return scrub(first_line(msg), secret_);
}

// libpq's TCP keepalives and TCP_USER_TIMEOUT on every connection, unless the URL sets
// them: a server that vanished (or a partition) is noticed in about 30 s, not the kernel's
// two hours, and a call blocked on it fails instead of holding its pool slot for ever.
// And target_session_attrs=read-write unless the URL sets it: with several hosts (a
// primary and its standbys), libpq connects to the one that takes writes, not to the first
// that answers; a lone read-only server is refused at connect, with libpq's reason, instead
// of answering stale reads and failing every write (review).
// And connect_timeout, the call timeout in whole seconds (at least 2; libpq's own default is
// none): a host that drops SYNs otherwise held a pool slot, and stop(), for about two
// minutes of kernel retries, far past every caller's deadline (review finding).
std::string PgMetaStore::with_keepalives(const std::string& url, std::chrono::milliseconds timeout) {
  const bool uri = url.rfind("postgresql://", 0) == 0 || url.rfind("postgres://", 0) == 0;
  std::string out = url;
  auto add = [&](const char* params_uri, const char* params_kv) {
    if (uri) out += std::string(out.find('?') == std::string::npos ? "?" : "&") + params_uri;
    else out += std::string(" ") + params_kv;
  };
  if (url.find("keepalives") == std::string::npos && url.find("tcp_user_timeout") == std::string::npos)
    add("keepalives=1&keepalives_idle=10&keepalives_interval=5&keepalives_count=3&tcp_user_timeout=30000",
        "keepalives=1 keepalives_idle=10 keepalives_interval=5 keepalives_count=3 tcp_user_timeout=30000");
  if (url.find("target_session_attrs") == std::string::npos)
    add("target_session_attrs=read-write", "target_session_attrs=read-write");
  if (url.find("connect_timeout") == std::string::npos) {
    const std::string t = "connect_timeout=" + std::to_string(std::max<std::int64_t>(2, (timeout.count() + 999) / 1000));
    add(t.c_str(), t.c_str());
  }
  return out;
}

Result<std::unique_ptr<pqxx::connection>> PgMetaStore::connect_once() {
  try {
    auto c = std::make_unique<pqxx::connection>(with_keepalives(cfg_.url, cfg_.timeout));
    // libpqxx 6 reconnects a broken connection on its own at the next statement: the new
    // session would skip the cluster check below, lose the feed's advisory lock (the
    // controller lease) while this node still claimed it, and its LISTEN (review). A
    // broken connection is an error here, handled by the pool and the feed.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    c->inhibit_reactivation(true);
#pragma GCC diagnostic pop
    // The server's side of the keepalives: a client that vanished (power cut, frozen VM)
    // is noticed by the server too, so its session, its advisory lock (the controller
    // lease) and its transaction end in about 30 s rather than the kernel's two hours.
    c->set_variable("tcp_keepalives_idle", "10");
    c->set_variable("tcp_keepalives_interval", "5");
    c->set_variable("tcp_keepalives_count", "3");
    if (c->server_version() >= 120000) c->set_variable("tcp_user_timeout", "30000");
    // A client that is stopped (SIGSTOP) still answers keepalives: a session idle for a
    // minute is ended by the server (14+). Every session of this node runs a statement at
    // least every second while it is in use (the feed checks the lease each second); an
    // idle pool slot that is ended is reconnected when next taken.
    if (c->server_version() >= 140000) c->set_variable("idle_session_timeout", "'60s'");
    // Remembered by libpqxx and restored if it ever reactivates the connection.
    c->set_variable("search_path", c->quote_name(cfg_.schema));
    // A client cut off inside a transaction (a frozen VM, a partition) must not hold the
    // counter lock, and every other instance's writes, until TCP notices: the server ends
    // such a transaction once it has been idle past this node's own call timeout.
    c->set_variable("idle_in_transaction_session_timeout",
                    c->quote(std::to_string(cfg_.timeout.count() + 5000) + "ms"));
    // "sluiced node N <schema>": an operator (and a test sharing one server with others)
    // can tell which node of which cluster a backend serves. PostgreSQL keeps 63 bytes.
    c->set_variable("application_name",
                    c->quote(application_name(host_.node_id(), cfg_.schema)));
    // Once started, every new connection (a pool slot, the feed's reconnect) must reach the
    // cluster this node joined: a URL whose name, address or pooler now leads to another
    // database would have this node write into another cluster's catalog, and apply its
    // deletes (review finding). started_ is stored after cluster_id_ is.
    if (started_.load()) {
      std::string got;
      try {
        pqxx::nontransaction tx(*c);
        auto r = tx.exec("SELECT id FROM cluster");
        got = r.empty() ? std::string("no cluster") : "cluster " + r[0][0].as<std::string>();
      } catch (const pqxx::sql_error& e) {
        // 42P01: the table is not there (another database). Anything else (a backend
        // ended, out of memory, a restart) says nothing about which cluster this is: the
        // connection failed, retry (review: it answered cluster_id_mismatch at once).
        if (e.sqlstate() != "42P01")
          return Error(Errc::unavailable, "cannot read the cluster id from PostgreSQL " + target_ + ": " + clean(e.what()),
                       Outcome::transient);
        got = "no cluster table (" + clean(e.what()) + ")";
      } catch (const std::exception& e) {
        return Error(Errc::unavailable, "cannot read the cluster id from PostgreSQL " + target_ + ": " + clean(e.what()),
                     Outcome::transient);
      }
      if (got != "cluster " + cluster_id_)
        return Error(Errc::cluster_id_mismatch,
                     "PostgreSQL " + target_ + " schema " + cfg_.schema + " now holds " + got + ", not cluster " +
                         cluster_id_ + " that this node joined; not using it (is the URL pointing at another "
                         "database?)",
                     Outcome::transient);
    }
    return c;
  } catch (const std::exception& e) {
    std::string m = clean(e.what());
    // Definite: retrying cannot help.
    bool definite = m.find("authentication failed") != std::string::npos ||
                    m.find("does not exist") != std::string::npos ||
                    m.find("no pg_hba.conf entry") != std::string::npos ||
                    m.find("invalid") != std::string::npos ||
                    m.find("password") != std::string::npos;
    return Error(definite ? Errc::unauthorized : Errc::unavailable,
                 "cannot connect to PostgreSQL (" + target_ + "): " + m,
                 definite ? Outcome::definite : Outcome::transient);
  }
}

Result<std::string> PgMetaStore::migrate(pqxx::connection& c) {
  try {
    pqxx::work tx(c);
    tx.exec_params("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
                   "sluice-migrate/" + cfg_.schema);
    tx.exec0("CREATE SCHEMA IF NOT EXISTS " + tx.quote_name(cfg_.schema));
    tx.exec0("CREATE TABLE IF NOT EXISTS sluice_schema_version ("
             " version integer PRIMARY KEY, description text NOT NULL,"
             " applied_at timestamptz NOT NULL DEFAULT now())");
    // Not a migration (no version of its own): a column older binaries never read, added
    // by whichever build first starts with it. Looked up first: an ALTER, even one with
    // nothing to do, needs the table's owner and its ACCESS EXCLUSIVE lock (late review).
    if (tx.exec_params("SELECT 1 FROM information_schema.columns WHERE table_schema = $1"
                       " AND table_name = 'sluice_schema_version' AND column_name = 'older_binaries_ok'",
                       cfg_.schema)
            .empty())
      tx.exec0("ALTER TABLE sluice_schema_version ADD COLUMN IF NOT EXISTS"
               " older_binaries_ok boolean NOT NULL DEFAULT false");
    int have = tx.exec1("SELECT COALESCE(max(version), 0) FROM sluice_schema_version")[0].as<int>();
    if (have > kSchemaVersion) {
      auto blocking = tx.exec_params(
          "SELECT version, description FROM sluice_schema_version"
          " WHERE version > $1 AND NOT older_binaries_ok ORDER BY version LIMIT 1",
          kSchemaVersion);
      if (!blocking.empty())
        return Error(Errc::conflict,
                     "the database schema " + cfg_.schema + " is at version " + std::to_string(have) +
                         ", newer than this binary's schema version " + std::to_string(kSchemaVersion) +
                         ", and migration " + blocking[0][0].as<std::string>() + " (" +
                         blocking[0][1].as<std::string>() +
                         ") is not usable by older binaries (sluice_schema_version); upgrade sluiced "
                         "before pointing it at this database");
      log(LogLevel::warn, "the database schema " + cfg_.schema + " is at version " + std::to_string(have) +
                              ", newer than this binary's " + std::to_string(kSchemaVersion) +
                              "; every newer migration is usable by older binaries, so this one runs on it");
    }
    for (auto& m : migrations()) {
      if (m.version <= have) continue;
      tx.exec0(std::string(m.sql));
      tx.exec_params("INSERT INTO sluice_schema_version(version, description, older_binaries_ok)"
                     " VALUES ($1, $2, $3)",
                     m.version, std::string(m.description), m.older_binaries_ok);
      log(LogLevel::info, "applied schema migration " + std::to_string(m.version) + " (" +
                              std::string(m.description) + ") to " + cfg_.schema);
    }
    for (auto& g : guards()) {
      if (!tx.exec_params("SELECT 1 FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid"
                          " JOIN pg_namespace n ON n.oid = c.relnamespace"
                          " WHERE t.tgname = $1 AND n.nspname = $2",
                          std::string(g.trigger), cfg_.schema)
               .empty())
        continue;
      tx.exec0(std::string(g.sql));
      log(LogLevel::info, "installed schema guard " + std::string(g.trigger) + " (" + std::string(g.description) +
                              ") in " + cfg_.schema);
    }
    std::string id;
    auto r = tx.exec("SELECT id FROM cluster");
    if (!r.empty()) {
      id = r[0][0].as<std::string>();
    } else {
      id = random_uuid_v4();
      auto seq = tx.exec1("UPDATE counter SET last_seq = last_seq + 1 RETURNING last_seq")[0]
                     .as<std::int64_t>();
      tx.exec_params("INSERT INTO cluster(id) VALUES ($1)", id);
      // A new cluster finalizes every feature this instance's level knows, minus those held
      // back (a level-8 instance finalizes none). No change event, as raft-meta's init.
      for (auto& f : known_features()) {
        if (f.required_level > cfg_.level) continue;
        if (std::find(cfg_.bootstrap_hold_back.begin(), cfg_.bootstrap_hold_back.end(), f.name) !=
            cfg_.bootstrap_hold_back.end())
          continue;
        tx.exec_params("INSERT INTO features(name, finalized_seq) VALUES ($1, $2)",
                       std::string(f.name), seq);
      }
      log(LogLevel::info, "initialized cluster " + id + " in " + target_);
    }
    tx.commit();
    return id;
  } catch (const pqxx::sql_error& e) {
    return Error(Errc::unavailable, "schema migration of " + cfg_.schema + " failed: " +
                                        clean(e.what()));
  } catch (const std::exception& e) {
    return Error(Errc::unavailable, "schema migration of " + cfg_.schema + " failed: " +
                                        clean(e.what()));
  }
}

Result<void> PgMetaStore::start() {
  std::lock_guard life(life_mu_);
  if (started_.load()) return {};
  const auto deadline = Clock::now() + cfg_.start_timeout;
  std::chrono::milliseconds backoff{100};
  std::unique_ptr<pqxx::connection> c;
  for (;;) {
    auto r = connect_once();
    if (r.ok()) {
      c = std::move(r.value());
      break;
    }
    if (r.error().outcome == Outcome::definite || Clock::now() + backoff >= deadline)
      return r.error();
    log(LogLevel::warn, r.error().message + "; retrying");
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
  }
  auto id = migrate(*c);
  if (!id.ok()) return id.error();
  if (auto a = host_.adopt_cluster_id(id.value()); !a.ok())
    return Error(a.error().code, a.error().message + " (PostgreSQL " + target_ + ")");
  // The migrating connection becomes the pool's first; the others open on demand.
  if (auto p = prepare_statements(*c); !p.ok()) return p.error();
  {
    std::lock_guard lk(pool_mu_);
    slots_.clear();
    slots_.resize(static_cast<std::size_t>(cfg_.pool_size));
    free_.clear();
    for (std::size_t i = slots_.size(); i-- > 0;) free_.push_back(i);  // slot 0 is taken first
    slots_[0].conn = std::move(c);
    slots_[0].quiet = std::make_unique<pqxx::quiet_errorhandler>(*slots_[0].conn);
  }
  cluster_id_ = id.value();
  feed_stop_ = false;
  started_ = true;
  feed_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "pg-feed");
    feed_main();
  });
  // Ready once the feed connection is up (normally at once).
  while (!feed_up_.load() && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  log(LogLevel::info, "ready: cluster " + cluster_id_ + " in " + target_ + " at metadata level " +
                          std::to_string(cfg_.level.value()) + ", schema version " +
                          std::to_string(kSchemaVersion) + ", up to " +
                          std::to_string(cfg_.pool_size) + " pooled connections");
  return {};
}

void PgMetaStore::stop() {
  std::lock_guard life(life_mu_);
  if (!started_.load()) return;
  feed_stop_ = true;
  watch_cv_.notify_all();
  if (feed_.joinable()) feed_.join();
  started_ = false;
  feed_up_ = false;
  lease_held_ = false;
  close_pool();
}

MetadataStatus PgMetaStore::status() {
  MetadataStatus s;
  s.backend = "postgres";
  s.cluster_id = started_.load() ? cluster_id_ : host_.cluster_id();
  s.level = cfg_.level;
  s.applied = ChangeSeq{applied_.load()};
  s.ready = started_.load() && feed_up_.load();
  if (!started_.load()) {
    s.detail = "stopped";
  } else if (!feed_up_.load()) {
    std::lock_guard lk(err_mu_);
    s.detail = "database unreachable: " + last_error_;
  } else {
    s.detail = lease_held_.load() ? "connected; holds the controller lease"
                                  : "connected; standby (another instance holds the controller lease)";
  }
  return s;
}

Result<void> PgMetaStore::check_started() {
  if (!started_.load()) return Error(Errc::unavailable, "postgres-meta is not started");
  return {};
}

}  // namespace sluice::postgres_meta
