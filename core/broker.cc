// The broker's lifecycle: start and stop, registration and heartbeats, the control thread
// that applies catalog changes in order, and readiness (docs/architecture.md "Broker
// runtime"). What the control thread applies is in broker_serving.cc.
#include "broker.h"

#include <pthread.h>
#include <chrono>

#include "broker_catalog_facade.h"
#include "serving_floors.h"
#include "sluice/features.h"

namespace sluice::core {

namespace {
// At most this many queued changes are applied as one batch (bounds the plan and the wait
// of the first of them).
constexpr std::size_t kMaxChangeBatch = 256;
}  // namespace

BrokerRuntime::BrokerRuntime(NodeInfo info, MetadataStore& catalog, StorageEngine* storage,
                             BrokerOptions opts, PluginHost& host)
    : info_(std::move(info)),
      catalog_(catalog),
      storage_(storage),
      opts_(std::move(opts)),
      host_(host),
      facade_(make_catalog_facade(*this, catalog, opts_.catalog_timeout_ms)) {
  // The directory also keeps each broker's HTTP address (leader_address), so keep one even
  // when the caller gave none.
  if (!opts_.peers) opts_.peers = std::make_shared<PeerDirectory>();
}

BrokerRuntime::~BrokerRuntime() { stop(); }

std::vector<std::string> implemented_features() {
  std::vector<std::string> all;
  for (const auto& f : known_features()) all.emplace_back(f.name);
  return all;
}

Error BrokerRuntime::no_broker_role() const {
  return Error(Errc::unavailable, "node " + std::to_string(info_.node_id.value()) +
                                      " has no broker role: it holds no shards",
               Outcome::definite);
}

Result<void> BrokerRuntime::start() {
  if (storage_) {
    // The durable guard first: nothing is opened before the floors are known.
    floors_path_ = floors_path(host_.data_dir());
    FloorsFileState state;
    auto f = load_floors(floors_path_, &state);
    if (!f) return f.error();
    floors_ = std::move(f.value());
    floors_appendable_ = state.exists && !state.torn_tail;
    floors_lines_ = state.lines;
    if (state.torn_tail)
      host_.log(LogLevel::warn, "broker",
                floors_path_ + " ends in an unfinished append (a crash while it was written); it is "
                               "ignored and the file is rewritten before the next change");
  }
  // Forwarded calls are answered `unavailable` (transient) until the first resync is done.
  start_forwarding();
  control_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "broker-control");
    control_loop();
  });
  // The first resync may meet a control plane between leaders (a raft-meta member that was
  // just restarted while the others elect): transient answers are retried for up to the
  // catalog timeout before the start gives up; anything else stops the start at once.
  if (auto r = while_transient("the catalog is not ready yet", [this] { return resync(); }); !r) return r;
  started_ = true;
  if (storage_) heartbeat_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "heartbeat");
    heartbeat_loop();
  });
  // Keeps the broker list data calls read fresh (leaderless_reason), on its own thread: a
  // slow metadata store must not delay the heartbeats (late review).
  if (storage_) brokers_refresh_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "brokers");
    std::unique_lock lk(tasks_mu_);
    while (!tasks_cv_.wait_for(lk, std::chrono::seconds(1), [&] { return stopping_; })) {
      lk.unlock();
      (void)known_brokers();
      lk.lock();
    }
  });
  return {};
}

void BrokerRuntime::stop() {
  stop_forwarding();  // no forwarded call runs once shards start closing
  {
    std::lock_guard lk(tasks_mu_);
    stopping_ = true;
  }
  tasks_cv_.notify_all();
  if (control_.joinable()) control_.join();
  if (heartbeat_.joinable()) heartbeat_.join();
  if (brokers_refresh_.joinable()) brokers_refresh_.join();
  watch_.reset();  // after the joins: the control thread may have been resyncing
  // A stopping broker stays registered: its shards stay placed on it and are served again
  // when it comes back. It stops counting as serving once its heartbeats lapse
  // (broker.session_timeout_ms). Decommissioning is unregister_broker, an operator's act.
  registered_ = false;
  close_all_shards();
}

void BrokerRuntime::close_all_shards() {
  // Out of service under the lock, closed after it: closing a shard waits for its flush,
  // whose callbacks may call back in (leader_address takes streams_mu_ shared), so a close
  // under the exclusive lock could wait for ever (docs/architecture.md "Inline appends").
  std::map<StreamKey, std::shared_ptr<StreamState>> gone;
  closed_all_ = true;
  {
    std::unique_lock lk(streams_mu_);
    gone.swap(streams_);
  }
  if (storage_)
    for (auto& [key, st] : gone)
      for (auto& s : st->held)
        if (s) storage_->close_shard(s->ref());
}

Result<void> BrokerRuntime::register_self() {
  BrokerRegistration reg;
  reg.id = info_.node_id;
  reg.address = opts_.advertised_address;
  reg.directory_id = info_.directory_id;
  reg.version = info_.version;
  reg.features = opts_.features;
  reg.peer_address = opts_.peer_address;
  auto r = catalog_.register_broker(reg);
  if (!r) return r.error();
  if (opts_.peers) opts_.peers->learn(r.value());
  registered_ = true;
  return {};
}

// At start the registration comes after the opens, which may take longer than start()'s
// window for transient catalog errors (a metadata leader change meanwhile): it gets a window
// of its own (metadata.timeout_ms). A refusal stops the start at once.
Result<void> BrokerRuntime::register_at_start() {
  return while_transient("registering: the catalog is not ready yet", [this] { return register_self(); });
}

bool transient_catalog_error(const Error& e) {
  return e.outcome == Outcome::transient || e.code == Errc::not_leader || e.code == Errc::unavailable ||
         e.code == Errc::timeout;
}

Result<void> BrokerRuntime::while_transient(const std::string& what, const std::function<Result<void>()>& step) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(opts_.catalog_timeout_ms);
  for (bool logged = false;;) {
    auto r = step();
    if (r) return r;
    if (!transient_catalog_error(r.error()) || std::chrono::steady_clock::now() >= deadline) return r;
    if (!logged)
      host_.log(LogLevel::warn, "broker", what + ", retrying until " + std::to_string(opts_.catalog_timeout_ms) +
                                              " ms have passed: " + r.error().to_string());
    logged = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

void BrokerRuntime::heartbeat_loop() {
  std::unique_lock lk(tasks_mu_);
  while (!tasks_cv_.wait_for(lk, std::chrono::milliseconds(opts_.heartbeat_interval_ms),
                             [&] { return stopping_; })) {
    lk.unlock();
    if (reregister_wanted_.exchange(false)) {
      if (auto rr = register_self(); !rr) {
        reregister_wanted_ = true;  // tried again at the next heartbeat
        host_.log(LogLevel::warn, "broker", "registering again (peer address): " + rr.error().to_string());
      }
    }
    auto r = catalog_.heartbeat_broker(info_.node_id);
    if (!r && r.error().code == Errc::conflict) {
      // Refused while running: stop serving at once, then let the node exit.
      host_.log(LogLevel::error, "broker", "the control plane refuses this broker: " + r.error().message);
      {
        std::lock_guard alk(applied_mu_);
        fenced_ = "the control plane refuses this broker: " + r.error().message;
      }
      close_all_shards();
      if (opts_.on_fenced) opts_.on_fenced(r.error().message);
      lk.lock();
      return;
    }
    if (!r && r.error().code == Errc::not_found) {
      // The control plane lost us (e.g. a restored catalog): register again.
      if (auto rr = register_self(); !rr)
        host_.log(LogLevel::error, "broker", "re-registration refused: " + rr.error().to_string());
    } else if (!r) {
      host_.log(LogLevel::warn, "broker", "heartbeat failed: " + r.error().to_string());
    }
    lk.lock();
  }
}

void BrokerRuntime::enqueue(Task t) {
  {
    std::lock_guard lk(tasks_mu_);
    if (stopping_) return;
    tasks_.push_back(std::move(t));
  }
  tasks_cv_.notify_all();
}

void BrokerRuntime::control_loop() {
  for (;;) {
    Task t;
    // Every change queued behind the first one, up to the next resync: applied as one
    // batch (concurrent creates and deletes share one floors sync and one plan).
    std::vector<ChangeEvent> changes;
    {
      std::unique_lock lk(tasks_mu_);
      // Storage work that failed is tried again when its pause is over, between tasks.
      // Checked before the queue, so a steady stream of changes cannot starve it.
      bool retry_due = false;
      while (!stopping_) {
        if (retry_at_ && std::chrono::steady_clock::now() >= *retry_at_) {
          retry_due = true;
          break;
        }
        if (!tasks_.empty()) break;
        if (retry_at_) tasks_cv_.wait_until(lk, *retry_at_);
        else tasks_cv_.wait(lk);
      }
      if (stopping_) return;
      if (retry_due) {
        lk.unlock();
        bool fenced = false;
        {
          std::lock_guard alk(applied_mu_);
          fenced = !fenced_.empty();
        }
        if (fenced) {
          std::lock_guard tlk(tasks_mu_);
          retry_at_.reset();
        } else {
          retry_failed();
        }
        continue;
      }
      t = std::move(tasks_.front());
      tasks_.pop_front();
      if (t.kind == Task::Kind::change) {
        changes.push_back(std::move(t.event));
        while (!tasks_.empty() && tasks_.front().kind == Task::Kind::change && changes.size() < kMaxChangeBatch) {
          changes.push_back(std::move(tasks_.front().event));
          tasks_.pop_front();
        }
      }
    }
    {
      // Refused by the control plane: nothing is opened or served again (the node exits).
      std::unique_lock alk(applied_mu_);
      if (!fenced_.empty()) {
        alk.unlock();
        host_.log(LogLevel::warn, "broker", "fenced by the control plane: a catalog change is not applied");
        continue;
      }
    }
    if (t.kind == Task::Kind::resync) {
      host_.log(LogLevel::warn, "broker", "resyncing from a catalog snapshot");
      if (auto r = resync(); !r) {
        // Without a snapshot there is no watch either: try again, once a second, until it works.
        host_.log(LogLevel::error, "broker", "resync failed, retrying in 1 s: " + r.error().to_string());
        std::unique_lock lk(tasks_mu_);
        if (tasks_cv_.wait_for(lk, std::chrono::seconds(1), [&] { return stopping_; })) return;
        tasks_.push_front({Task::Kind::resync, {}});
      }
    } else {
      apply_changes(changes);
    }
  }
}

bool BrokerRuntime::fenced() {
  std::lock_guard lk(applied_mu_);
  return !fenced_.empty();
}

void BrokerRuntime::note_failure(const std::string& what) {
  host_.log(LogLevel::error, "broker", what);
  std::lock_guard lk(applied_mu_);
  failure_ = what;
}

void BrokerRuntime::mark_applied(ChangeSeq seq) {
  {
    std::lock_guard lk(applied_mu_);
    if (seq > applied_) applied_ = seq;
  }
  applied_cv_.notify_all();
}

bool BrokerRuntime::wait_applied(ChangeSeq seq, std::int64_t timeout_ms) {
  std::unique_lock lk(applied_mu_);
  return applied_cv_.wait_for(lk, std::chrono::milliseconds(timeout_ms),
                              [&] { return applied_ >= seq; });
}

bool BrokerRuntime::wait_forgotten(const StreamKey& key, Incarnation incarnation, std::int64_t timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  std::unique_lock lk(applied_mu_);
  for (;;) {
    // A change to the streams is made before mark_applied moves applied_, and a plan marks
    // its names in progress before it takes them out of service and until its storage work
    // is done: gone, and not in progress before and after, means the delete is done (a
    // name leaves service before its data is deleted; answering then let a client see the
    // data still on disk).
    // A delete of the name that failed (retried) is not done either: its data is on disk.
    const auto delete_failed = [&] {
      auto f = failed_deletes_.find(key);
      return f != failed_deletes_.end() && f->second.first.up_to >= incarnation;
    };
    const ChangeSeq seen = applied_;
    const std::uint64_t plans = plans_done_;
    const bool busy_before = applying_.count(key) > 0;
    lk.unlock();
    auto st = find(key);
    const bool gone = !st || st->info.incarnation != incarnation;
    lk.lock();
    if (gone && !busy_before && !applying_.count(key) && !delete_failed()) return true;
    if (!applied_cv_.wait_until(lk, deadline, [&] { return applied_ > seen || plans_done_ != plans; })) return false;
  }
}

NodeInfo BrokerRuntime::info() {
  NodeInfo i = info_;
  i.cluster_id = host_.cluster_id();
  return i;
}

bool BrokerRuntime::ready(std::string* why) {
  auto st = catalog_.status();
  if (!st.ready) {
    if (why) *why = "metadata not ready: " + st.detail;
    return false;
  }
  if (!started_) {
    if (why) *why = "broker is starting";
    return false;
  }
  std::lock_guard lk(applied_mu_);
  for (const auto* f : {&fenced_, &failure_})
    if (!f->empty()) {
      if (why) *why = *f;
      return false;
    }
  const std::size_t failed = failed_deletes_.size() + failed_opens_.size();
  if (failed > 0) {
    if (why) {
      *why = (!failed_deletes_.empty() ? failed_deletes_.begin()->second.second : failed_opens_.begin()->second) +
             " (retried";
      if (failed > 1) *why += "; " + std::to_string(failed - 1) + " more failed";
      *why += ")";
    }
    return false;
  }
  return true;
}

MetadataStore& BrokerRuntime::catalog() { return *facade_; }

}  // namespace sluice::core
