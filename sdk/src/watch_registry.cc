#include "sluice/watch_registry.h"

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

namespace sluice {

namespace {

struct Watch {
  std::uint64_t id = 0;
  ChangeSeq cursor;  // the delivering thread only
  // Read by the delivering thread only while `delivering` names this watch; moved out by
  // cancel() only once it does not (see cancel()).
  std::function<void(const ChangeEvent&)> on_change;
  std::function<void()> resync;
  bool cancelled = false;  // Core::mu
};

}  // namespace

struct WatchRegistry::Core {
  mutable std::mutex mu;
  std::condition_variable cv;
  std::map<std::uint64_t, std::shared_ptr<Watch>> watches;  // mu
  std::uint64_t next_id = 1;                                // mu
  std::uint64_t delivering = 0;     // mu: the watch whose callback runs now (0: none)
  std::thread::id delivering_thread;  // mu: the thread running it

  // Ends watch `id`. From another thread: waits for its running callback, then destroys
  // the callbacks (and their captures) here, with no lock held. From inside its own
  // callback: returns at once; the delivering thread drops the callbacks when it returns.
  void cancel(std::uint64_t id) {
    std::shared_ptr<Watch> w;
    std::function<void(const ChangeEvent&)> on_change;
    std::function<void()> resync;
    {
      std::unique_lock lk(mu);
      auto it = watches.find(id);
      if (it == watches.end()) return;  // ended by a resync, or by the registry
      w = it->second;
      w->cancelled = true;
      watches.erase(it);
      const auto self = std::this_thread::get_id();
      if (delivering == id && delivering_thread == self) return;
      cv.wait(lk, [&] { return delivering != id; });
      on_change = std::move(w->on_change);
      resync = std::move(w->resync);
    }
  }

  // Runs `fn` as watch w's callback unless it was cancelled. false: cancelled.
  template <class F>
  bool run(Watch& w, F&& fn, const std::function<void(const std::string&)>& on_error) {
    {
      std::lock_guard lk(mu);
      if (w.cancelled) return false;
      delivering = w.id;
      delivering_thread = std::this_thread::get_id();
    }
    try {
      fn();
    } catch (const std::exception& e) {
      if (on_error) on_error(std::string("watch callback threw: ") + e.what());
    } catch (...) {
      if (on_error) on_error("watch callback threw");
    }
    {
      std::lock_guard lk(mu);
      delivering = 0;
      delivering_thread = {};
    }
    cv.notify_all();
    return true;
  }
};

namespace {

class RegistryHandle final : public WatchHandle {
 public:
  RegistryHandle(std::shared_ptr<WatchRegistry::Core> core, std::uint64_t id)
      : core_(std::move(core)), id_(id) {}
  ~RegistryHandle() override { core_->cancel(id_); }

 private:
  std::shared_ptr<WatchRegistry::Core> core_;
  std::uint64_t id_;
};

}  // namespace

WatchRegistry::WatchRegistry(std::function<void()> wake)
    : wake_(std::move(wake)), core_(std::make_shared<Core>()) {}

WatchRegistry::~WatchRegistry() {
  std::map<std::uint64_t, std::shared_ptr<Watch>> gone;
  {
    std::lock_guard lk(core_->mu);
    for (auto& [id, w] : core_->watches) w->cancelled = true;
    gone.swap(core_->watches);
  }
}

std::unique_ptr<WatchHandle> WatchRegistry::add(ChangeSeq after,
                                                std::function<void(const ChangeEvent&)> on_change,
                                                std::function<void()> resync) {
  auto w = std::make_shared<Watch>();
  w->cursor = after;
  w->on_change = std::move(on_change);
  w->resync = std::move(resync);
  {
    std::lock_guard lk(core_->mu);
    w->id = core_->next_id++;
    core_->watches[w->id] = w;
  }
  if (wake_) wake_();
  return std::make_unique<RegistryHandle>(core_, w->id);
}

DeliverOutcome WatchRegistry::deliver(const Fetch& fetch,
                                      const std::function<void(const std::string&)>& on_callback_error) {
  std::vector<std::shared_ptr<Watch>> ws;
  {
    std::lock_guard lk(core_->mu);
    for (auto& [id, w] : core_->watches) ws.push_back(w);
  }
  DeliverOutcome out;
  for (auto& w : ws) {
    {
      std::lock_guard lk(core_->mu);
      if (w->cancelled) continue;
    }
    auto batch = fetch(w->cursor);
    if (!batch.ok()) {
      if (!out.error) out.error = batch.error();
      continue;
    }
    if (batch->resync) {
      // Too old to replay: deliver nothing, ask for a resync, and end this watch.
      core_->run(*w, [&] { if (w->resync) w->resync(); }, on_callback_error);
      std::lock_guard lk(core_->mu);
      w->cancelled = true;
      auto it = core_->watches.find(w->id);
      if (it != core_->watches.end() && it->second == w) core_->watches.erase(it);
      continue;
    }
    for (const auto& ev : batch->events) {
      if (!core_->run(*w, [&] { if (w->on_change) w->on_change(ev); }, on_callback_error)) break;
      w->cursor = ev.seq;
    }
    if (batch->more) out.more = true;
  }
  return out;
}

bool WatchRegistry::empty() const {
  std::lock_guard lk(core_->mu);
  return core_->watches.empty();
}

std::size_t WatchRegistry::size() const {
  std::lock_guard lk(core_->mu);
  return core_->watches.size();
}

}  // namespace sluice
