// What the broker tries again (docs/architecture.md "Broker runtime"): a delete the
// catalog asked for that failed, and a shard that did not open. Each is noted with why
// (the node is not ready meanwhile), and retried after a pause that doubles with every
// failure, from BrokerOptions::retry_min_ms (1 s) up to 30 s, on the control thread.
#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <set>

#include "broker.h"

namespace sluice::core {

void BrokerRuntime::note_failed_delete(const DataDelete& d, const std::string& what) {
  {
    std::lock_guard lk(applied_mu_);  // noted before it is logged: a reader of the log sees it
    auto& f = failed_deletes_[d.key];
    if (f.first.up_to <= d.up_to) f.first = d;  // the highest word covers the lower ones
    f.second = what;
  }
  host_.log(LogLevel::error, "broker", what);
}

void BrokerRuntime::note_failed_open(const ShardRef& ref, const std::string& what) {
  {
    std::lock_guard lk(applied_mu_);
    failed_opens_[ref] = what;
  }
  host_.log(LogLevel::error, "broker", what);
}

void BrokerRuntime::settle_opens(const ServingPlan& plan,
                                 const std::map<ShardRef, std::shared_ptr<ShardLog>>& opened,
                                 const std::map<ShardRef, std::string>& open_errors) {
  for (const auto& [ref, why] : open_errors) note_failed_open(ref, "cannot open shard " + ref.to_string() + ": " + why);
  std::lock_guard lk(applied_mu_);
  const std::set<StreamKey> forget(plan.forget.begin(), plan.forget.end());
  for (auto it = failed_opens_.begin(); it != failed_opens_.end();) {
    const ShardRef& ref = it->first;
    bool drop = false;
    if (forget.count(ref.stream)) {
      drop = true;
    } else if (auto sv = plan.streams.find(ref.stream); sv != plan.streams.end()) {
      const auto i = ref.shard.value();
      const bool wanted = sv->second.info.incarnation == ref.incarnation && i < sv->second.hold.size() &&
                          sv->second.hold[i];
      drop = !wanted || opened.count(ref);
    }
    it = drop ? failed_opens_.erase(it) : std::next(it);
  }
}

void BrokerRuntime::schedule_retry() {
  bool failed = false;
  {
    std::lock_guard lk(applied_mu_);
    failed = !failed_deletes_.empty() || !failed_opens_.empty();
  }
  {
    std::lock_guard lk(tasks_mu_);
    if (!failed) {
      retry_at_.reset();
      retry_pause_ = std::chrono::milliseconds(0);
      return;
    }
    if (retry_at_) return;  // already set: a plan between retries does not push it back
    retry_pause_ = std::min(std::max(retry_pause_ * 2, opts_.retry_min_ms), std::chrono::milliseconds(30000));
    retry_at_ = std::chrono::steady_clock::now() + retry_pause_;
  }
  tasks_cv_.notify_all();  // start() schedules from its own thread: the control loop waits
}

void BrokerRuntime::retry_failed() {
  {
    std::lock_guard lk(tasks_mu_);
    retry_at_.reset();
  }
  if (resync_pending_) return;  // the queued resync plans every name
  std::vector<DataDelete> deletes;
  std::set<StreamKey> names;
  {
    std::lock_guard lk(applied_mu_);
    for (const auto& [key, d] : failed_deletes_) deletes.push_back(d.first);
    for (const auto& [ref, why] : failed_opens_) names.insert(ref.stream);
  }
  if (deletes.empty() && names.empty()) return;
  host_.log(LogLevel::info, "broker",
            "retrying the storage work that failed: " + std::to_string(deletes.size()) + " delete(s), shards of " +
                std::to_string(names.size()) + " name(s) to open");
  // A delete is retried as it was asked: its floor is already saved, so a plan of the name
  // would not ask for it again. It covers only incarnations up to its word, which nothing
  // serves any more.
  for (const auto& d : deletes) (void)delete_data(d);
  if (!names.empty())
    if (auto r = apply_plan(plan_names(names), Registration::done); !r) {
      resync_pending_ = true;
      enqueue({Task::Kind::resync, {}});
      return;
    }
  schedule_retry();
}

}  // namespace sluice::core
