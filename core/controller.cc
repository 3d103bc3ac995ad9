#include "controller.h"

#include <pthread.h>
#include <map>
#include <utility>

#include "sluice/catalog_rules.h"

namespace sluice::core {

namespace {
constexpr std::string_view kComponent = "controller";
}

Controller::Controller(MetadataStore& store, PluginHost& host, ControllerOptions opts)
    : store_(store), host_(host), opts_(opts) {}

Controller::~Controller() { stop(); }

void Controller::start() {
  if (thread_.joinable()) return;
  stopping_ = false;
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "controller");
    loop();
  });
}

void Controller::stop() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Controller::loop() {
  std::unique_lock lk(mu_);
  while (!stopping_) {
    lk.unlock();
    pass();
    lk.lock();
    cv_.wait_for(lk, opts_.interval, [&] { return stopping_; });
  }
}

std::uint64_t Controller::pass() {
  if (!store_.is_controller()) {
    if (was_controller_)
      host_.log(LogLevel::info, kComponent, "this node is no longer the controller");
    was_controller_ = false;
    next_preferred_ = {};  // a new controllership waits a whole interval before moving leaders
    return 0;
  }
  if (!was_controller_)
    host_.log(LogLevel::info, kComponent, "this node is the controller now");
  was_controller_ = true;
  auto snap = store_.snapshot();
  if (!snap) {
    host_.log(LogLevel::warn, kComponent, "no catalog snapshot: " + snap.error().message);
    return 0;
  }
  std::map<std::pair<StreamKey, std::uint64_t>, std::uint32_t> min_insync;
  for (const auto& s : snap->streams)
    min_insync[{s.key, s.incarnation.value()}] = s.spec.min_insync;
  std::uint64_t written = 0;
  const auto now = std::chrono::steady_clock::now();
  bool preferred = false;
  if (opts_.preferred_interval.count() > 0 && now >= next_preferred_) {
    // Not at once on becoming the controller: a broker that just returned gets one interval.
    preferred = next_preferred_ != std::chrono::steady_clock::time_point{};
    next_preferred_ = now + opts_.preferred_interval;
  }
  for (const auto& a : snap->assignments) {
    if (a.replicas.size() <= 1) continue;
    auto it = min_insync.find({a.key, a.incarnation.value()});
    if (it == min_insync.end()) continue;  // its stream is being deleted
    auto plan = plan_failover(a, it->second, snap->brokers);
    // A running reassignment's next step (docs/replication.md "Reassignment"), once the
    // shard has a live leader; the preferred-leader move waits until it is done.
    if (!plan.change && !a.target_replicas.empty()) plan = plan_reassignment_step(a, snap->brokers);
    if (!plan.change && preferred && a.target_replicas.empty() && !a.replicas.empty() &&
        a.leader != a.replicas.front()) {
      if (auto u = plan_preferred_election(a, snap->brokers); u) {
        plan.change = true;
        plan.update = std::move(u).value();
        plan.why = "preferred replica " + std::to_string(a.replicas.front().value()) +
                   " is in sync again: it leads in epoch " +
                   std::to_string(plan.update.leader_epoch.value());
      }
    }
    if (!plan.change) continue;
    const std::string what = a.key.to_string() + " shard " + std::to_string(a.shard.value());
    auto r = store_.update_shard(plan.update);
    if (!r) {
      // Someone moved the shard on (a leader's in-sync change, an operator, another
      // controller): the next pass decides again from what is stored.
      host_.log(LogLevel::warn, kComponent, what + ": " + plan.why + ": not written: " +
                                                r.error().message);
      continue;
    }
    ++written;
    host_.log(plan.update.leader.value() != 0 ? LogLevel::info : LogLevel::error, kComponent,
              what + ": " + plan.why);
  }
  return written;
}

}  // namespace sluice::core
