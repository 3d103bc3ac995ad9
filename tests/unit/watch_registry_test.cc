// The one change-feed fan-out (sdk watch_registry.h) and the WatchHandle destruction rules
// of metadata.h, over an in-memory change log.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "sluice/watch_registry.h"

namespace sluice {
namespace {

template <class Pred>
bool eventually(Pred pred) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return pred();
}

// A change log of seqs 1..n, pruned below `pruned`, served `limit` at a time.
struct Log {
  std::uint64_t last = 0;
  std::uint64_t pruned = 0;
  std::size_t limit = 100;
  WatchRegistry::Fetch fetch() {
    return [this](ChangeSeq after) -> Result<WatchBatch> {
      WatchBatch b;
      if (after.value() < pruned) {
        b.resync = true;
        return b;
      }
      for (auto s = after.value() + 1; s <= last && b.events.size() < limit; ++s) {
        ChangeEvent ev{};
        ev.kind = ChangeEvent::Kind::tenant_created;
        ev.seq = ChangeSeq{s};
        b.events.push_back(ev);
      }
      b.more = b.events.size() == limit && b.events.back().seq.value() < last;
      return b;
    };
  }
};

TEST(WatchRegistry, DeliversEveryChangeAfterTheCursorInOrder) {
  Log log{.last = 10, .limit = 4};
  int wakes = 0;
  WatchRegistry reg([&] { ++wakes; });
  std::vector<std::uint64_t> got;
  auto h = reg.add(ChangeSeq{3}, [&](const ChangeEvent& e) { got.push_back(e.seq.value()); }, [] {});
  EXPECT_EQ(wakes, 1);
  EXPECT_TRUE(reg.deliver(log.fetch()).more);   // 4..7
  EXPECT_FALSE(reg.deliver(log.fetch()).more);  // 8..10
  EXPECT_FALSE(reg.deliver(log.fetch()).more);  // nothing new
  EXPECT_EQ(got, (std::vector<std::uint64_t>{4, 5, 6, 7, 8, 9, 10}));
  log.last = 11;
  reg.deliver(log.fetch());
  EXPECT_EQ(got.back(), 11u);
  EXPECT_EQ(got.size(), 8u);
}

TEST(WatchRegistry, ResyncRunsOnceAndEndsTheWatch) {
  Log log{.last = 10, .pruned = 5};
  WatchRegistry reg;
  int resyncs = 0, changes = 0;
  auto h = reg.add(ChangeSeq{2}, [&](const ChangeEvent&) { ++changes; }, [&] { ++resyncs; });
  reg.deliver(log.fetch());
  reg.deliver(log.fetch());
  EXPECT_EQ(resyncs, 1);
  EXPECT_EQ(changes, 0);
  EXPECT_TRUE(reg.empty());
  h.reset();  // after the watch ended: nothing to cancel
}

TEST(WatchRegistry, AFetchErrorSkipsTheWatchAndKeepsItsCursor) {
  Log log{.last = 3};
  WatchRegistry reg;
  std::vector<std::uint64_t> got;
  auto h = reg.add(ChangeSeq{0}, [&](const ChangeEvent& e) { got.push_back(e.seq.value()); }, [] {});
  auto out = reg.deliver([](ChangeSeq) -> Result<WatchBatch> { return Error(Errc::unavailable, "down"); });
  ASSERT_TRUE(out.error.has_value());
  EXPECT_EQ(out.error->code, Errc::unavailable);
  EXPECT_TRUE(got.empty());
  reg.deliver(log.fetch());
  EXPECT_EQ(got, (std::vector<std::uint64_t>{1, 2, 3}));
}

TEST(WatchRegistry, AThrowingCallbackIsReportedAndCountsAsDelivered) {
  Log log{.last = 2};
  WatchRegistry reg;
  int calls = 0;
  std::vector<std::string> errors;
  auto h = reg.add(ChangeSeq{0}, [&](const ChangeEvent&) {
    ++calls;
    throw std::runtime_error("boom");
  }, [] {});
  reg.deliver(log.fetch(), [&](const std::string& m) { errors.push_back(m); });
  reg.deliver(log.fetch(), [&](const std::string& m) { errors.push_back(m); });
  EXPECT_EQ(calls, 2);
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_NE(errors[0].find("boom"), std::string::npos);
}

TEST(WatchRegistry, DestroyingAHandleFromItsOwnCallbackEndsTheWatchThere) {
  Log log{.last = 5};
  WatchRegistry reg;
  std::unique_ptr<WatchHandle> h;
  int calls = 0;
  h = reg.add(ChangeSeq{0}, [&](const ChangeEvent&) {
    ++calls;
    h.reset();  // returns at once: no wait for itself, no deadlock
  }, [] {});
  int others = 0;
  auto other = reg.add(ChangeSeq{0}, [&](const ChangeEvent&) { ++others; }, [] {});
  reg.deliver(log.fetch());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(h, nullptr);
  EXPECT_EQ(others, 5);
  EXPECT_EQ(reg.size(), 1u);
  log.last = 6;
  reg.deliver(log.fetch());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(others, 6);
}

TEST(WatchRegistry, DestroyingAHandleFromItsOwnResyncIsSafe) {
  Log log{.last = 5, .pruned = 3};
  WatchRegistry reg;
  std::unique_ptr<WatchHandle> h;
  int resyncs = 0;
  h = reg.add(ChangeSeq{0}, [](const ChangeEvent&) {}, [&] {
    ++resyncs;
    h.reset();
  });
  reg.deliver(log.fetch());
  EXPECT_EQ(resyncs, 1);
  EXPECT_TRUE(reg.empty());
}

TEST(WatchRegistry, DestroyingAnotherWatchFromACallbackDoesNotWait) {
  Log log{.last = 3};
  WatchRegistry reg;
  std::unique_ptr<WatchHandle> second;
  int second_calls = 0;
  auto first = reg.add(ChangeSeq{0}, [&](const ChangeEvent&) { second.reset(); }, [] {});
  second = reg.add(ChangeSeq{0}, [&](const ChangeEvent&) { ++second_calls; }, [] {});
  reg.deliver(log.fetch());
  EXPECT_EQ(second_calls, 0);
  EXPECT_EQ(reg.size(), 1u);
}

// The destructor, called on another thread while the callback runs, returns only after
// the callback did; and the callback's captures are gone when it returns.
TEST(WatchRegistry, DestroyingFromAnotherThreadWaitsForTheRunningCallback) {
  Log log{.last = 3};
  WatchRegistry reg;
  std::mutex mu;
  std::condition_variable cv;
  bool entered = false, go = false, finished = false;  // guarded by mu
  int calls = 0;
  auto token = std::make_shared<int>(0);
  std::weak_ptr<int> token_alive = token;
  auto h = reg.add(ChangeSeq{0}, [&, token](const ChangeEvent&) {
    ++calls;
    std::unique_lock lk(mu);
    entered = true;
    cv.notify_all();
    cv.wait(lk, [&] { return go; });
    finished = true;
  }, [] {});
  token.reset();
  std::thread delivery([&] { reg.deliver(log.fetch()); });
  {
    std::unique_lock lk(mu);
    ASSERT_TRUE(cv.wait_for(lk, std::chrono::seconds(20), [&] { return entered; }));
  }
  std::atomic<bool> finished_when_destroyed{false};
  std::atomic<bool> captures_alive_after{true};
  std::thread destroyer([&] {
    h.reset();
    std::lock_guard lk(mu);
    finished_when_destroyed = finished;
    captures_alive_after = !token_alive.expired();
  });
  // cancel() unregisters first, then waits: once the registry is empty the destroyer is
  // inside the destructor, so releasing the callback only now proves the wait.
  ASSERT_TRUE(eventually([&] { return reg.empty(); }));
  {
    std::lock_guard lk(mu);
    go = true;
  }
  cv.notify_all();
  destroyer.join();
  delivery.join();
  EXPECT_TRUE(finished_when_destroyed.load());
  EXPECT_FALSE(captures_alive_after.load());
  EXPECT_EQ(calls, 1);  // the other two changes of the batch were not delivered
}

TEST(WatchRegistry, AHandleMayOutliveItsRegistry) {
  std::unique_ptr<WatchHandle> h;
  {
    WatchRegistry reg;
    h = reg.add(ChangeSeq{0}, [](const ChangeEvent&) {}, [] {});
  }
  h.reset();
  SUCCEED();
}

}  // namespace
}  // namespace sluice
