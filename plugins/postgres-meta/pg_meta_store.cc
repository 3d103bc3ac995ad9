#include "pg_meta_store.h"

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

namespace {

constexpr std::string_view kComponent = "postgres-meta";
constexpr std::size_t kDeliveryBatch = 256;
constexpr int kMaxAttempts = 50;

using Clock = std::chrono::steady_clock;
using Fin = std::map<std::string, ChangeSeq, std::less<>>;

struct Unit {};


std::int64_t checked(const PluginHost& host, std::string_view key, std::int64_t def,
                     std::int64_t min, std::int64_t max) {
  std::int64_t v = host.config_int(key, def);
  if (v < min || v > max)
    throw std::invalid_argument(std::string(key) + " must be between " + std::to_string(min) +
                                " and " + std::to_string(max) + ", got " + std::to_string(v));
  return v;
}

bool valid_schema_name(std::string_view s) {
  if (s.empty() || s.size() > 40) return false;
  if (!((s[0] >= 'a' && s[0] <= 'z') || s[0] == '_')) return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}



std::string pg_array(const std::vector<std::string>& v) {
  std::string out = "{";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + v[i];
  return out + "}";
}
std::string pg_array(const std::vector<NodeId>& v) {
  std::string out = "{";
  for (std::size_t i = 0; i < v.size(); ++i)
    out += (i ? "," : "") + std::to_string(v[i].value());
  return out + "}";
}
std::vector<std::string> split_csv(const std::string& s) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i < s.size()) {
    std::size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

std::int64_t i64(const pqxx::field& f) { return f.is_null() ? 0 : f.as<std::int64_t>(); }
std::uint64_t u64(const pqxx::field& f) { return static_cast<std::uint64_t>(i64(f)); }

constexpr const char* kStreamCols =
    "tenant, ns, name, incarnation, shards, retention_max_bytes, retention_max_age_ms, "
    "default_ack, created_seq, created_at_us";

StreamInfo read_stream(const pqxx::row& r) {
  StreamInfo s;
  s.key = StreamKey{r[0].as<std::string>(), r[1].as<std::string>(), r[2].as<std::string>()};
  s.incarnation = Incarnation{u64(r[3])};
  s.spec.shards = static_cast<std::uint32_t>(i64(r[4]));
  s.spec.retention.max_bytes = i64(r[5]);
  s.spec.retention.max_age_ms = i64(r[6]);
  s.spec.default_ack = parse_ack_mode(r[7].as<std::string>()).value_or(AckMode::leader);
  s.created_seq = ChangeSeq{u64(r[8])};
  s.created_at_us = i64(r[9]);
  return s;
}

constexpr const char* kAssignmentCols =
    "tenant, ns, name, shard, incarnation, generation, leader, array_to_string(replicas, ',')";

Assignment read_assignment(const pqxx::row& r) {
  Assignment a;
  a.key = StreamKey{r[0].as<std::string>(), r[1].as<std::string>(), r[2].as<std::string>()};
  a.shard = ShardIndex{static_cast<std::uint32_t>(i64(r[3]))};
  a.incarnation = Incarnation{u64(r[4])};
  a.generation = Generation{u64(r[5])};
  a.leader = NodeId{static_cast<std::uint32_t>(i64(r[6]))};
  for (auto& x : split_csv(r[7].is_null() ? "" : r[7].as<std::string>()))
    a.replicas.push_back(NodeId{static_cast<std::uint32_t>(std::stoul(x))});
  return a;
}

std::vector<Assignment> assignments_of(pqxx::transaction_base& tx, const StreamKey& k) {
  std::vector<Assignment> out;
  auto rs = tx.exec_params(std::string("SELECT ") + kAssignmentCols +
                               " FROM assignments WHERE tenant = $1 AND ns = $2 AND name = $3"
                               " ORDER BY shard",
                           k.tenant, k.ns, k.name);
  for (const auto& r : rs) out.push_back(read_assignment(r));
  return out;
}

bool exists(pqxx::transaction_base& tx, const std::string& sql, const std::string& a,
            const std::string* b = nullptr) {
  return b ? !tx.exec_params(sql, a, *b).empty() : !tx.exec_params(sql, a).empty();
}

// The first line of a server or libpq message, without the "ERROR:  " prefix.
std::string first_line(std::string m) {
  for (const char* p : {"ERROR:  ", "FATAL:  "})
    if (m.rfind(p, 0) == 0) m.erase(0, std::strlen(p));
  if (auto nl = m.find('\n'); nl != std::string::npos) m.resize(nl);
  return m;
}

bool is_connection_state(const std::string& st) {
  return st.rfind("08", 0) == 0 || st == "57P01" || st == "57P02" || st == "57P03";
}

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

// --- configuration -----------------------------------------------------------------------

PgMetaConfig PgMetaConfig::from_host(const PluginHost& host) {
  PgMetaConfig c;
  c.url = host.config_string("metadata.postgres.url", "");
  if (c.url.empty())
    throw std::invalid_argument(
        "metadata.postgres.url is required with metadata.backend = postgres (a libpq "
        "connection string or URI, e.g. postgresql://sluice@db.example:5432/sluice)");
  c.schema = host.config_string("metadata.postgres.schema", "sluice");
  if (!valid_schema_name(c.schema))
    throw std::invalid_argument("metadata.postgres.schema must be 1..40 of [a-z0-9_] starting "
                                "with a letter or '_', got '" + c.schema + "'");
  c.level = MetadataLevel{static_cast<std::uint32_t>(
      checked(host, "metadata.level", kPostgresMetaLevel.value(), kLowestMetadataLevel.value(),
              kPostgresMetaLevel.value()))};
  c.bootstrap_hold_back = split_list(host.config_string("metadata.bootstrap_hold_back", ""));
  for (auto& f : c.bootstrap_hold_back)
    if (!find_feature(f))
      throw std::invalid_argument("metadata.bootstrap_hold_back names unknown feature '" + f + "'");
  c.timeout = std::chrono::milliseconds(checked(host, "metadata.timeout_ms", 10000, 1, 0x7fffffff));
  c.start_timeout =
      std::chrono::milliseconds(checked(host, "metadata.start_timeout_ms", 30000, 1, 0x7fffffff));
  c.session_timeout =
      std::chrono::milliseconds(checked(host, "broker.session_timeout_ms", 10000, 1, 0x7fffffff));
  c.change_retention = checked(host, "metadata.postgres.change_retention", 100000, 1, 1LL << 40);
  c.poll_interval = std::chrono::milliseconds(
      checked(host, "metadata.postgres.poll_interval_ms", 1000, 10, 600000));
  return c;
}

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

Result<std::unique_ptr<pqxx::connection>> PgMetaStore::connect_once() {
  try {
    auto c = std::make_unique<pqxx::connection>(cfg_.url);
    // Remembered by libpqxx and restored if it ever reactivates the connection.
    c->set_variable("search_path", c->quote_name(cfg_.schema));
    c->set_variable("application_name", "'sluiced node " + std::to_string(host_.node_id().value()) + "'");
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
    int have = tx.exec1("SELECT COALESCE(max(version), 0) FROM sluice_schema_version")[0].as<int>();
    if (have > kSchemaVersion)
      return Error(Errc::conflict,
                   "the database schema " + cfg_.schema + " is at version " + std::to_string(have) +
                       ", newer than this binary's schema version " +
                       std::to_string(kSchemaVersion) +
                       " (sluice_schema_version); upgrade sluiced before pointing it at this "
                       "database");
    for (auto& m : migrations()) {
      if (m.version <= have) continue;
      tx.exec0(std::string(m.sql));
      tx.exec_params("INSERT INTO sluice_schema_version(version, description) VALUES ($1, $2)",
                     m.version, std::string(m.description));
      log(LogLevel::info, "applied schema migration " + std::to_string(m.version) + " (" +
                              std::string(m.description) + ") to " + cfg_.schema);
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
  {
    std::lock_guard lk(req_mu_);
    req_ = std::move(c);
  }
  cluster_id_ = id.value();
  feed_stop_ = false;
  started_ = true;
  feed_ = std::thread([this] { feed_main(); });
  // Ready once the feed connection is up (normally at once).
  while (!feed_up_.load() && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  log(LogLevel::info, "ready: cluster " + cluster_id_ + " in " + target_ + " at metadata level " +
                          std::to_string(cfg_.level.value()) + ", schema version " +
                          std::to_string(kSchemaVersion));
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
  std::lock_guard lk(req_mu_);
  req_.reset();
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

// --- transactions ------------------------------------------------------------------------

Error PgMetaStore::map_sql_error(const std::string& st, const std::string& what) const {
  std::string m = clean(what);
  if (st == kStateOldInstanceCreate || st == kStateOldInstanceDelete ||
      st == kStateIncarnationRepeat || st == kStateTombstoneKept)
    return Error(Errc::conflict, m);
  if (st == "23505") return Error(Errc::already_exists, m);
  if (st == "23503") return Error(Errc::not_found, m);
  return Error(Errc::internal, "PostgreSQL error " + st + ": " + m);
}

template <class T, class F>
Result<T> PgMetaStore::run(Mode mode, F&& fn) {
  if (auto s = check_started(); !s.ok()) return s.error();
  const auto deadline = Clock::now() + cfg_.timeout;
  std::chrono::milliseconds backoff{5};
  std::string last;
  std::unique_lock lk(req_mu_);
  for (int attempt = 1;; ++attempt) {
    if (!req_) {
      auto c = connect_once();
      if (c.ok()) {
        req_ = std::move(c.value());
      } else {
        last = c.error().message;
      }
    }
    if (req_) {
      try {
        std::optional<Result<T>> out;
        if (mode == Mode::write) {
          pqxx::transaction<pqxx::serializable> tx(*req_);
          // Upgraded instances declare their level: the triggers let their creates through.
          if (cfg_.level >= kStreamIncarnationsLevel)
            tx.exec0("SET LOCAL sluice.writer_level = '" + std::to_string(cfg_.level.value()) + "'");
          // Utility statement: taken before the transaction's snapshot, so writers are
          // serial and each sees every earlier commit (seq order == commit order).
          tx.exec0("LOCK TABLE counter IN EXCLUSIVE MODE");
          out.emplace(fn(static_cast<pqxx::transaction_base&>(tx)));
          if (!out->ok()) return std::move(*out);  // aborted by the destructor
          tx.commit();
        } else if (mode == Mode::read) {
          pqxx::transaction<pqxx::repeatable_read, pqxx::read_only> tx(*req_);
          out.emplace(fn(static_cast<pqxx::transaction_base&>(tx)));
          tx.commit();
        } else {
          pqxx::work tx(*req_);
          out.emplace(fn(static_cast<pqxx::transaction_base&>(tx)));
          if (!out->ok()) return std::move(*out);
          tx.commit();
        }
        return std::move(*out);
      } catch (const pqxx::in_doubt_error& e) {
        req_.reset();
        return Error(Errc::timeout,
                     "the database connection broke during commit; the change may or may not "
                     "have been applied (" + clean(e.what()) + ")",
                     Outcome::uncertain);
      } catch (const pqxx::broken_connection& e) {
        req_.reset();
        last = "connection lost: " + clean(e.what());
      } catch (const pqxx::sql_error& e) {
        const std::string& st = e.sqlstate();
        if (st == "40001" || st == "40P01") {
          last = "serialization failure: " + clean(e.what());
        } else if (is_connection_state(st)) {
          req_.reset();
          last = "connection lost: " + clean(e.what());
        } else {
          return map_sql_error(st, e.what());
        }
      } catch (const std::exception& e) {
        req_.reset();
        return Error(Errc::internal, "postgres-meta: " + clean(e.what()));
      }
    }
    if (attempt >= kMaxAttempts || Clock::now() + backoff >= deadline)
      return Error(Errc::unavailable, "PostgreSQL (" + target_ + ") did not answer within " +
                                          std::to_string(cfg_.timeout.count()) + " ms after " +
                                          std::to_string(attempt) + " attempts: " + last);
    lk.unlock();
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
    lk.lock();
  }
}

std::uint64_t PgMetaStore::next_seq(pqxx::transaction_base& tx) {
  return u64(tx.exec1("UPDATE counter SET last_seq = last_seq + 1 RETURNING last_seq")[0]);
}

void PgMetaStore::record_change(pqxx::transaction_base& tx, std::uint64_t seq,
                                ChangeEvent::Kind kind, const std::string& payload) {
  tx.exec_params("INSERT INTO changes(seq, kind, payload) VALUES ($1, $2, $3)",
                 static_cast<std::int64_t>(seq), std::string(to_string(kind)), payload);
  tx.exec_params("SELECT pg_notify($1, $2)", channel_, std::to_string(seq));
  // Keep the newest change_retention changes; watchers behind the cut resync.
  std::int64_t cutoff = static_cast<std::int64_t>(seq) - cfg_.change_retention;
  if (cutoff > 0) {
    auto r = tx.exec_params("DELETE FROM changes WHERE seq <= $1", cutoff);
    if (r.affected_rows() > 0)
      tx.exec_params("UPDATE counter SET pruned_up_to = GREATEST(pruned_up_to, $1)", cutoff);
  }
}

std::vector<BrokerInfo> PgMetaStore::read_brokers(pqxx::transaction_base& tx) {
  std::vector<BrokerInfo> out;
  auto rs = tx.exec_params(
      "SELECT id, address, directory_id, version, array_to_string(features, ','), "
      "registered_seq, last_heartbeat > now() - ($1::bigint * interval '1 millisecond') "
      "FROM brokers ORDER BY id",
      static_cast<std::int64_t>(cfg_.session_timeout.count()));
  for (const auto& r : rs) {
    BrokerInfo b;
    b.id = NodeId{static_cast<std::uint32_t>(i64(r[0]))};
    b.address = r[1].as<std::string>();
    b.directory_id = r[2].as<std::string>();
    b.version = r[3].as<std::string>();
    b.features = split_csv(r[4].is_null() ? "" : r[4].as<std::string>());
    b.registered_seq = ChangeSeq{u64(r[5])};
    b.live = r[6].as<bool>();
    out.push_back(std::move(b));
  }
  return out;
}

Fin PgMetaStore::read_finalized(pqxx::transaction_base& tx) {
  Fin fin;
  for (const auto& r : tx.exec("SELECT name, finalized_seq FROM features"))
    fin[r[0].as<std::string>()] = ChangeSeq{u64(r[1])};
  return fin;
}

FeatureInfo PgMetaStore::feature_info(std::string_view name, const Fin& fin,
                                      const std::vector<BrokerInfo>& serving) const {
  FeatureInfo fi;
  fi.name = std::string(name);
  const FeatureSpec* spec = find_feature(name);
  fi.required_level = spec ? spec->required_level : MetadataLevel{0};
  if (auto it = fin.find(name); it != fin.end()) {
    fi.finalized = true;
    fi.finalized_seq = it->second;
  }
  for (auto& b : serving) {
    if (std::find(b.features.begin(), b.features.end(), name) != b.features.end())
      fi.supported_by.push_back(b.id);
    else
      fi.lacking.push_back(b.id);
  }
  return fi;
}

namespace {
std::vector<BrokerInfo> serving_of(const std::vector<BrokerInfo>& all) {
  std::vector<BrokerInfo> out;
  for (auto& b : all)
    if (b.live) out.push_back(b);
  return out;
}
template <class T>
Result<T> from_unit(Result<Unit> r);
template <>
Result<void> from_unit<void>(Result<Unit> r) {
  if (!r.ok()) return r.error();
  return {};
}
}  // namespace

#define PG_META_TRY(expr)                              \
  do {                                                 \
    if (auto _v = (expr); !_v.ok()) return _v.error(); \
  } while (0)

// --- tenants and namespaces ----------------------------------------------------------------

Result<TenantInfo> PgMetaStore::create_tenant(const std::string& name) {
  PG_META_TRY(validate_name(NameKind::tenant, name));
  return run<TenantInfo>(Mode::write, [&](pqxx::transaction_base& tx) -> Result<TenantInfo> {
    if (exists(tx, "SELECT 1 FROM tenants WHERE name = $1", name))
      return Error(Errc::already_exists, "tenant " + name + " exists");
    auto seq = next_seq(tx);
    tx.exec_params("INSERT INTO tenants(name, created_seq) VALUES ($1, $2)", name,
                   static_cast<std::int64_t>(seq));
    record_change(tx, seq, ChangeEvent::Kind::tenant_created, names_payload(name, nullptr));
    return TenantInfo{name, ChangeSeq{seq}};
  });
}

Result<void> PgMetaStore::delete_tenant(const std::string& name) {
  PG_META_TRY(validate_name(NameKind::tenant, name));
  return from_unit<void>(run<Unit>(Mode::write, [&](pqxx::transaction_base& tx) -> Result<Unit> {
    if (!exists(tx, "SELECT 1 FROM tenants WHERE name = $1", name))
      return Error(Errc::not_found, "no tenant " + name);
    if (exists(tx, "SELECT 1 FROM namespaces WHERE tenant = $1 LIMIT 1", name))
      return Error(Errc::conflict, "tenant " + name + " still has namespaces");
    auto seq = next_seq(tx);
    tx.exec_params("DELETE FROM tenants WHERE name = $1", name);
    record_change(tx, seq, ChangeEvent::Kind::tenant_deleted, names_payload(name, nullptr));
    return Unit{};
  }));
}

Result<std::vector<TenantInfo>> PgMetaStore::list_tenants() {
  return run<std::vector<TenantInfo>>(Mode::read, [&](pqxx::transaction_base& tx)
                                                      -> Result<std::vector<TenantInfo>> {
    std::vector<TenantInfo> out;
    for (const auto& r : tx.exec("SELECT name, created_seq FROM tenants ORDER BY name"))
      out.push_back(TenantInfo{r[0].as<std::string>(), ChangeSeq{u64(r[1])}});
    return out;
  });
}

Result<NamespaceInfo> PgMetaStore::create_namespace(const std::string& tenant,
                                                    const std::string& name) {
  PG_META_TRY(validate_name(NameKind::tenant, tenant));
  PG_META_TRY(validate_name(NameKind::ns, name));
  return run<NamespaceInfo>(Mode::write, [&](pqxx::transaction_base& tx) -> Result<NamespaceInfo> {
    if (!exists(tx, "SELECT 1 FROM tenants WHERE name = $1", tenant))
      return Error(Errc::not_found, "no tenant " + tenant);
    if (exists(tx, "SELECT 1 FROM namespaces WHERE tenant = $1 AND name = $2", tenant, &name))
      return Error(Errc::already_exists, "namespace " + tenant + "/" + name + " exists");
    auto seq = next_seq(tx);
    tx.exec_params("INSERT INTO namespaces(tenant, name, created_seq) VALUES ($1, $2, $3)",
                   tenant, name, static_cast<std::int64_t>(seq));
    record_change(tx, seq, ChangeEvent::Kind::namespace_created, names_payload(tenant, &name));
    return NamespaceInfo{tenant, name, ChangeSeq{seq}};
  });
}

Result<void> PgMetaStore::delete_namespace(const std::string& tenant, const std::string& name) {
  PG_META_TRY(validate_name(NameKind::tenant, tenant));
  PG_META_TRY(validate_name(NameKind::ns, name));
  return from_unit<void>(run<Unit>(Mode::write, [&](pqxx::transaction_base& tx) -> Result<Unit> {
    if (!exists(tx, "SELECT 1 FROM namespaces WHERE tenant = $1 AND name = $2", tenant, &name))
      return Error(Errc::not_found, "no namespace " + tenant + "/" + name);
    if (exists(tx, "SELECT 1 FROM streams WHERE tenant = $1 AND ns = $2 LIMIT 1", tenant, &name))
      return Error(Errc::conflict, "namespace " + tenant + "/" + name + " still has streams");
    auto seq = next_seq(tx);
    tx.exec_params("DELETE FROM namespaces WHERE tenant = $1 AND name = $2", tenant, name);
    record_change(tx, seq, ChangeEvent::Kind::namespace_deleted, names_payload(tenant, &name));
    return Unit{};
  }));
}

Result<std::vector<NamespaceInfo>> PgMetaStore::list_namespaces(const std::string& tenant) {
  PG_META_TRY(validate_name(NameKind::tenant, tenant));
  return run<std::vector<NamespaceInfo>>(Mode::read, [&](pqxx::transaction_base& tx)
                                                         -> Result<std::vector<NamespaceInfo>> {
    if (!exists(tx, "SELECT 1 FROM tenants WHERE name = $1", tenant))
      return Error(Errc::not_found, "no tenant " + tenant);
    std::vector<NamespaceInfo> out;
    for (const auto& r : tx.exec_params(
             "SELECT tenant, name, created_seq FROM namespaces WHERE tenant = $1 ORDER BY name",
             tenant))
      out.push_back(NamespaceInfo{r[0].as<std::string>(), r[1].as<std::string>(), ChangeSeq{u64(r[2])}});
    return out;
  });
}

// --- streams ---------------------------------------------------------------------------

Result<StreamInfo> PgMetaStore::create_stream(const StreamKey& key, const StreamSpec& spec) {
  PG_META_TRY(validate_stream_key(key));
  PG_META_TRY(validate_stream_spec(spec));
  const FeatureSpec* feature = find_feature(kStreamIncarnations);
  // Below the feature's level this instance behaves as a build that never heard of
  // incarnations: a plain insert at 0, no tombstone read, no level declared (the
  // database's trigger refuses it once the feature is finalized).
  const bool knows_incarnations = feature && cfg_.level >= feature->required_level;
  return run<StreamInfo>(Mode::write, [&](pqxx::transaction_base& tx) -> Result<StreamInfo> {
    if (!exists(tx, "SELECT 1 FROM namespaces WHERE tenant = $1 AND name = $2", key.tenant, &key.ns))
      return Error(Errc::not_found, "no namespace " + key.tenant + "/" + key.ns);
    if (!tx.exec_params("SELECT 1 FROM streams WHERE tenant = $1 AND ns = $2 AND name = $3",
                        key.tenant, key.ns, key.name)
             .empty())
      return Error(Errc::already_exists, "stream " + key.to_string() + " exists");
    // The control plane clock is the database's (one clock for every instance).
    const std::int64_t clock_us =
        i64(tx.exec1("SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint")[0]);
    StreamInfo info;
    info.key = key;
    info.spec = spec;
    info.created_at_us = clock_us;
    if (knows_incarnations) {
      const bool finalized =
          !tx.exec("SELECT 1 FROM features WHERE name = 'stream_incarnations'").empty();
      std::optional<Incarnation> tomb;
      auto t = tx.exec_params(
          "SELECT deleted_up_to FROM tombstones WHERE tenant = $1 AND ns = $2 AND name = $3",
          key.tenant, key.ns, key.name);
      if (!t.empty()) tomb = Incarnation{u64(t[0][0])};
      // The rules of features.h, decided inside this write.
      const std::uint64_t proposed = propose_incarnation(finalized, clock_us);
      info.incarnation = decide_create_incarnation(proposed, /*flagged=*/false, finalized, tomb);
    }
    const std::uint64_t seq = next_seq(tx);
    info.created_seq = ChangeSeq{seq};
    tx.exec_params(std::string("INSERT INTO streams(") + kStreamCols +
                       ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
                   key.tenant, key.ns, key.name,
                   static_cast<std::int64_t>(info.incarnation.value()),
                   static_cast<std::int64_t>(spec.shards), spec.retention.max_bytes,
                   spec.retention.max_age_ms, std::string(to_string(spec.default_ack)),
                   static_cast<std::int64_t>(seq), clock_us);
    // Placement: the shared rule (features.h place_shards), as raft-meta's proposer.
    std::set<std::string, std::less<>> fin_set;
    for (auto& [name, at] : read_finalized(tx)) fin_set.insert(name);
    const auto leaders = place_shards(key, spec.shards, read_brokers(tx), fin_set);
    std::vector<Assignment> as;
    for (std::uint32_t i = 0; i < spec.shards; ++i) {
      Assignment a;
      a.key = key;
      a.shard = ShardIndex{i};
      a.incarnation = info.incarnation;
      a.generation = first_generation(ChangeSeq{seq});
      if (leaders[i].value() != 0) {
        a.leader = leaders[i];
        a.replicas = {a.leader};
      }
      tx.exec_params("INSERT INTO assignments(tenant, ns, name, shard, incarnation, generation,"
                     " leader, replicas) VALUES ($1, $2, $3, $4, $5, $6, $7, $8::bigint[])",
                     key.tenant, key.ns, key.name, static_cast<std::int64_t>(i),
                     static_cast<std::int64_t>(a.incarnation.value()),
                     static_cast<std::int64_t>(a.generation.value()),
                     static_cast<std::int64_t>(a.leader.value()), pg_array(a.replicas));
      as.push_back(std::move(a));
    }
    record_change(tx, seq, ChangeEvent::Kind::stream_created,
                  stream_change_payload(info, as, std::nullopt));
    return info;
  });
}

Result<StreamInfo> PgMetaStore::delete_stream(const StreamKey& key) {
  PG_META_TRY(validate_stream_key(key));
  const FeatureSpec* feature = find_feature(kStreamIncarnations);
  const bool knows_incarnations = feature && cfg_.level >= feature->required_level;
  return run<StreamInfo>(Mode::write, [&](pqxx::transaction_base& tx) -> Result<StreamInfo> {
    auto r = tx.exec_params(std::string("SELECT ") + kStreamCols +
                                " FROM streams WHERE tenant = $1 AND ns = $2 AND name = $3",
                            key.tenant, key.ns, key.name);
    if (r.empty()) return Error(Errc::not_found, "no stream " + key.to_string());
    StreamInfo existing = read_stream(r[0]);
    std::vector<Assignment> removed = assignments_of(tx, key);
    const std::uint64_t seq = next_seq(tx);
    tx.exec_params("DELETE FROM streams WHERE tenant = $1 AND ns = $2 AND name = $3", key.tenant,
                   key.ns, key.name);
    tx.exec_params("DELETE FROM assignments WHERE tenant = $1 AND ns = $2 AND name = $3",
                   key.tenant, key.ns, key.name);
    std::optional<Tombstone> written;
    if (knows_incarnations) {
      // This writer knows incarnations and decides inside its own serializable
      // transaction, as a flagged raft-meta entry does at apply: after the finalize, even a
      // delete at incarnation 0 records "incarnation 0 deleted", so a broker that was down
      // through it still removes the legacy data (docs/metadata-levels.md). The database
      // refuses deletes by pre-incarnation instances once finalized (schema.cc, v3).
      const bool finalized = read_finalized(tx).count(kStreamIncarnations) > 0;
      if (auto up_to = decide_delete_tombstone(existing.incarnation, /*flagged=*/true, finalized)) {
        // One row per name; deleted_up_to only ever raised (also enforced by a trigger).
        auto t = tx.exec_params1(
            "INSERT INTO tombstones(tenant, ns, name, deleted_up_to, seq) VALUES ($1, $2, $3, $4, $5)"
            " ON CONFLICT (tenant, ns, name) DO UPDATE SET"
            " deleted_up_to = GREATEST(tombstones.deleted_up_to, excluded.deleted_up_to),"
            " seq = excluded.seq RETURNING deleted_up_to",
            key.tenant, key.ns, key.name, static_cast<std::int64_t>(up_to->value()),
            static_cast<std::int64_t>(seq));
        written = Tombstone{key, Incarnation{u64(t[0])}, ChangeSeq{seq}};
      }
    }
    record_change(tx, seq, ChangeEvent::Kind::stream_deleted,
                  stream_change_payload(existing, removed, written));
    return existing;
  });
}

Result<StreamInfo> PgMetaStore::get_stream(const StreamKey& key) {
  PG_META_TRY(validate_stream_key(key));
  return run<StreamInfo>(Mode::read, [&](pqxx::transaction_base& tx) -> Result<StreamInfo> {
    auto r = tx.exec_params(std::string("SELECT ") + kStreamCols +
                                " FROM streams WHERE tenant = $1 AND ns = $2 AND name = $3",
                            key.tenant, key.ns, key.name);
    if (r.empty()) return Error(Errc::not_found, "no stream " + key.to_string());
    return read_stream(r[0]);
  });
}

Result<std::vector<StreamInfo>> PgMetaStore::list_streams(const std::string& tenant,
                                                          const std::string& ns) {
  PG_META_TRY(validate_name(NameKind::tenant, tenant));
  PG_META_TRY(validate_name(NameKind::ns, ns));
  return run<std::vector<StreamInfo>>(Mode::read, [&](pqxx::transaction_base& tx)
                                                      -> Result<std::vector<StreamInfo>> {
    if (!exists(tx, "SELECT 1 FROM namespaces WHERE tenant = $1 AND name = $2", tenant, &ns))
      return Error(Errc::not_found, "no namespace " + tenant + "/" + ns);
    std::vector<StreamInfo> out;
    for (const auto& r : tx.exec_params(std::string("SELECT ") + kStreamCols +
                                            " FROM streams WHERE tenant = $1 AND ns = $2 ORDER BY name",
                                        tenant, ns))
      out.push_back(read_stream(r));
    return out;
  });
}

namespace {
std::vector<Tombstone> read_tombstones(pqxx::transaction_base& tx) {
  std::vector<Tombstone> out;
  for (const auto& r : tx.exec("SELECT tenant, ns, name, deleted_up_to, seq FROM tombstones"
                               " ORDER BY tenant, ns, name"))
    out.push_back(Tombstone{StreamKey{r[0].as<std::string>(), r[1].as<std::string>(),
                                      r[2].as<std::string>()},
                            Incarnation{u64(r[3])}, ChangeSeq{u64(r[4])}});
  return out;
}
}  // namespace

Result<CatalogSnapshot> PgMetaStore::snapshot() {
  // One REPEATABLE READ transaction: the rows and the seq they reflect are one state
  // (writers commit in seq order under the counter lock).
  return run<CatalogSnapshot>(Mode::read, [&](pqxx::transaction_base& tx) -> Result<CatalogSnapshot> {
    CatalogSnapshot s;
    s.seq = ChangeSeq{u64(tx.exec1("SELECT last_seq FROM counter")[0])};
    for (const auto& r : tx.exec("SELECT name, created_seq FROM tenants ORDER BY name"))
      s.tenants.push_back(TenantInfo{r[0].as<std::string>(), ChangeSeq{u64(r[1])}});
    for (const auto& r : tx.exec("SELECT tenant, name, created_seq FROM namespaces ORDER BY tenant, name"))
      s.namespaces.push_back(
          NamespaceInfo{r[0].as<std::string>(), r[1].as<std::string>(), ChangeSeq{u64(r[2])}});
    for (const auto& r : tx.exec(std::string("SELECT ") + kStreamCols +
                                 " FROM streams ORDER BY tenant, ns, name"))
      s.streams.push_back(read_stream(r));
    s.tombstones = read_tombstones(tx);
    for (const auto& r : tx.exec(std::string("SELECT ") + kAssignmentCols +
                                 " FROM assignments ORDER BY tenant, ns, name, shard"))
      s.assignments.push_back(read_assignment(r));
    for (const auto& r : tx.exec("SELECT name FROM features ORDER BY name"))
      s.finalized_features.push_back(r[0].as<std::string>());
    s.brokers = read_brokers(tx);
    return s;
  });
}

Result<std::vector<Tombstone>> PgMetaStore::list_tombstones() {
  return run<std::vector<Tombstone>>(Mode::read, [&](pqxx::transaction_base& tx)
                                                     -> Result<std::vector<Tombstone>> {
    return read_tombstones(tx);
  });
}

// --- fleet ------------------------------------------------------------------------------

Result<BrokerInfo> PgMetaStore::register_broker(const BrokerRegistration& reg) {
  if (reg.id.value() == 0) return Error(Errc::invalid_argument, "broker id must be > 0");
  std::vector<std::string> features = reg.features;
  for (auto& f : features)
    if (!valid_feature_name(f)) return Error(Errc::invalid_argument, "bad feature name '" + f + "'");
  std::sort(features.begin(), features.end());
  features.erase(std::unique(features.begin(), features.end()), features.end());
  return run<BrokerInfo>(Mode::write, [&](pqxx::transaction_base& tx) -> Result<BrokerInfo> {
    std::set<std::string, std::less<>> finalized;
    for (auto& [name, at] : read_finalized(tx)) finalized.insert(name);
    if (auto a = admit_broker(features, finalized); !a.ok())
      return Error(a.error().code,
                   "broker " + std::to_string(reg.id.value()) + ": " + a.error().message);
    const std::uint64_t seq = next_seq(tx);
    BrokerInfo info;
    info.id = reg.id;
    info.address = reg.address;
    info.directory_id = reg.directory_id;
    info.version = reg.version;
    info.features = features;
    info.registered_seq = ChangeSeq{seq};
    tx.exec_params(
        "INSERT INTO brokers(id, address, directory_id, version, features, registered_seq,"
        " last_heartbeat) VALUES ($1, $2, $3, $4, $5::text[], $6, now())"
        " ON CONFLICT (id) DO UPDATE SET address = excluded.address,"
        " directory_id = excluded.directory_id, version = excluded.version,"
        " features = excluded.features, registered_seq = excluded.registered_seq,"
        " last_heartbeat = excluded.last_heartbeat",
        static_cast<std::int64_t>(info.id.value()), info.address, info.directory_id, info.version,
        pg_array(info.features), static_cast<std::int64_t>(seq));
    record_change(tx, seq, ChangeEvent::Kind::broker_registered, broker_payload(info));
    info.live = true;
    return info;
  });
}

Result<void> PgMetaStore::heartbeat_broker(NodeId id) {
  // Liveness is not a catalog change: a plain update of last_heartbeat (database clock).
  return from_unit<void>(run<Unit>(Mode::plain, [&](pqxx::transaction_base& tx) -> Result<Unit> {
    auto all = read_brokers(tx);
    auto it = std::find_if(all.begin(), all.end(), [&](auto& b) { return b.id == id; });
    if (it == all.end())
      return Error(Errc::not_found, "broker " + std::to_string(id.value()) + " is not registered");
    // A broker that lacks a feature finalized while it was away is not admitted back.
    std::set<std::string, std::less<>> fin_set;
    for (auto& [name, at] : read_finalized(tx)) fin_set.insert(name);
    if (auto a = admit_broker(it->features, fin_set); !a) return a.error();
    tx.exec_params("UPDATE brokers SET last_heartbeat = now() WHERE id = $1",
                   static_cast<std::int64_t>(id.value()));
    return Unit{};
  }));
}

Result<void> PgMetaStore::unregister_broker(NodeId id) {
  return from_unit<void>(run<Unit>(Mode::write, [&](pqxx::transaction_base& tx) -> Result<Unit> {
    auto all = read_brokers(tx);
    auto it = std::find_if(all.begin(), all.end(), [&](auto& b) { return b.id == id; });
    if (it == all.end()) return Error(Errc::not_found, "no broker " + std::to_string(id.value()));
    BrokerInfo b = *it;
    b.live = false;
    const std::uint64_t seq = next_seq(tx);
    tx.exec_params("DELETE FROM brokers WHERE id = $1", static_cast<std::int64_t>(id.value()));
    record_change(tx, seq, ChangeEvent::Kind::broker_unregistered, broker_payload(b));
    return Unit{};
  }));
}

Result<std::vector<BrokerInfo>> PgMetaStore::list_brokers() {
  return run<std::vector<BrokerInfo>>(Mode::read, [&](pqxx::transaction_base& tx)
                                                      -> Result<std::vector<BrokerInfo>> {
    return read_brokers(tx);
  });
}

Result<std::vector<FeatureInfo>> PgMetaStore::list_features() {
  return run<std::vector<FeatureInfo>>(Mode::read, [&](pqxx::transaction_base& tx)
                                                       -> Result<std::vector<FeatureInfo>> {
    auto serving = serving_of(read_brokers(tx));
    auto fin = read_finalized(tx);
    std::vector<FeatureInfo> out;
    for (auto& f : known_features()) out.push_back(feature_info(f.name, fin, serving));
    for (auto& [name, at] : fin)
      if (!find_feature(name)) out.push_back(feature_info(name, fin, serving));
    return out;
  });
}

Result<FeatureInfo> PgMetaStore::finalize_feature(const std::string& name) {
  // The gate and the write are one transaction: a registration cannot slip in between.
  return run<FeatureInfo>(Mode::write, [&](pqxx::transaction_base& tx) -> Result<FeatureInfo> {
    auto serving = serving_of(read_brokers(tx));
    auto fin = read_finalized(tx);
    if (fin.count(name)) return feature_info(name, fin, serving);  // idempotent
    if (!find_feature(name)) return Error(Errc::not_found, "unknown feature '" + name + "'");
    // The group's level: this instance's (a pre-incarnation instance does not know the
    // gate exists; the database's triggers refuse what it writes afterwards).
    if (auto g = check_finalize(name, cfg_.level, serving); !g.ok()) return g.error();
    const std::uint64_t seq = next_seq(tx);
    tx.exec_params("INSERT INTO features(name, finalized_seq) VALUES ($1, $2)", name,
                   static_cast<std::int64_t>(seq));
    record_change(tx, seq, ChangeEvent::Kind::feature_finalized, feature_payload(name));
    fin[name] = ChangeSeq{seq};
    log(LogLevel::info, "feature " + name + " finalized at " + std::to_string(seq));
    return feature_info(name, fin, serving);
  });
}

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

bool PgMetaStore::deliver_all(pqxx::connection& c) {
  {
    std::lock_guard lk(watch_mu_);
    wake_ = false;
  }
  std::uint64_t last_seq = applied_.load();  // kept if every watch ends before its fetch
  if (watches_.empty()) {
    pqxx::read_transaction tx(c);
    applied_ = u64(tx.exec1("SELECT last_seq FROM counter")[0]);
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
    // Behind the retained window, or ahead of the database (a restore rewound it).
    if (after.value() < pruned || after.value() > last_seq) {
      b.resync = true;
    } else {
      auto rs = tx.exec_params("SELECT seq, kind, payload FROM changes WHERE seq > $1"
                               " ORDER BY seq LIMIT $2",
                               static_cast<std::int64_t>(after.value()),
                               static_cast<std::int64_t>(kDeliveryBatch));
      for (const auto& r : rs) {
        auto ev = decode_change(i64(r[0]), r[1].as<std::string>(), r[2].as<std::string>());
        if (!ev.ok()) {
          log(LogLevel::error, ev.error().message + "; skipped");
          continue;
        }
        b.events.push_back(std::move(ev.value()));
      }
      b.more = rs.size() == kDeliveryBatch;
    }
    tx.commit();
    return b;
  };
  bool more = watches_.deliver(fetch, [this](const std::string& m) { log(LogLevel::error, m); }).more;
  applied_ = last_seq;
  return more;
}

void PgMetaStore::feed_main() {
  std::unique_ptr<pqxx::connection> c;
  std::unique_ptr<Receiver> rx;
  bool notified = false;
  std::chrono::milliseconds backoff{100};
  auto next_lease_try = Clock::now();
  auto last_poll = Clock::now() - cfg_.poll_interval;
  bool was_down = false;
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
      if (!lease_held_.load() && Clock::now() >= next_lease_try) {
        pqxx::nontransaction ntx(*c);
        bool got = ntx.exec_params1("SELECT pg_try_advisory_lock(hashtextextended($1, 0))",
                                    "sluice-lease/" + cfg_.schema)[0]
                       .as<bool>();
        if (got) {
          lease_held_ = true;
          log(LogLevel::info, "acquired the controller lease for " + cfg_.schema);
        }
        next_lease_try = Clock::now() + std::chrono::milliseconds(1000);
      }
      bool wake;
      {
        std::lock_guard lk(watch_mu_);
        wake = wake_;
      }
      if (notified || wake || Clock::now() - last_poll >= cfg_.poll_interval) {
        notified = false;
        last_poll = Clock::now();
        if (deliver_all(*c)) continue;  // more pending: no wait
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
