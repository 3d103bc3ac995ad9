// RemoteMetadataStore::watch (rpc.h): one thread and one connection per watch, long-polling
// `changes_after` on a controller, with the SDK fan-out (watch_registry.h) running the
// callbacks. The destruction rules are WatchHandle's (metadata.h).
//
// Ownership: the handle and the watch thread share a RemoteFeed. Destroyed on another
// thread, the handle stops the feed, cancels the watch (waiting for a running callback)
// and joins the thread. Destroyed from inside its own callback, it cannot join itself: it
// hands the thread to the store (joined by the next watch() or the store's destructor),
// and from then on the thread touches only the RemoteFeed it co-owns, never the handle.
#include <pthread.h>
#include <sys/socket.h>

#include <boost/json.hpp>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "rpc.h"
#include "rpc_codec.h"
#include "sluice/watch_registry.h"

namespace sluice::raft_meta {

namespace json = boost::json;

namespace {

struct RemoteFeed {
  explicit RemoteFeed(RemoteMetadataStore& s) : store(s) {}
  RemoteMetadataStore& store;
  WatchRegistry registry;          // exactly one watch
  RemoteMetadataStore::Conn conn;  // the watch thread's own connection
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;               // guarded by mu
  std::atomic<bool> done{false};   // set by the thread as the last thing it does here

  bool stopped() {
    std::lock_guard lk(mu);
    return stop;
  }
  // Waits `d`, or less if the feed is stopped.
  void pause(std::chrono::milliseconds d) {
    std::unique_lock lk(mu);
    cv.wait_for(lk, d, [&] { return stop; });
  }

  Result<WatchBatch> fetch(ChangeSeq after) {
    auto r = store.call_on(conn, "changes_after",
                           json::serialize(json::object{{"seq", after.value()}, {"wait_ms", 1000}}),
                           /*retry=*/false);
    if (!r.ok()) return r.error();
    WatchBatch b;
    try {
      auto v = json::parse(r.value());
      auto& o = v.as_object();
      b.resync = o.at("resync").as_bool();
      if (!b.resync)
        for (auto& e : o.at("events").as_array()) b.events.push_back(rpc::event_from(e));
    } catch (const std::exception& e) {
      return Error(Errc::internal, std::string("changes_after: malformed answer: ") + e.what());
    }
    return b;
  }

  // The watch thread: until stopped, or the watch ended (a resync ends it).
  void run() {
    auto backoff = std::chrono::milliseconds(100);
    const WatchRegistry::Fetch f = [this](ChangeSeq after) { return fetch(after); };
    while (!stopped() && !registry.empty()) {
      auto out = registry.deliver(f);
      if (out.error) {
        pause(backoff);
        backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
      } else {
        backoff = std::chrono::milliseconds(100);
      }
    }
    done = true;
  }
};

class RemoteWatch final : public WatchHandle {
 public:
  RemoteWatch(RemoteMetadataStore& store, ChangeSeq after,
              std::function<void(const ChangeEvent&)> on_change, std::function<void()> resync)
      : feed_(std::make_shared<RemoteFeed>(store)) {
    watch_ = feed_->registry.add(after, std::move(on_change), std::move(resync));
    thread_ = std::thread([feed = feed_] {
      pthread_setname_np(pthread_self(), "meta-watch");
      feed->run();
    });
  }

  ~RemoteWatch() override {
    {
      std::lock_guard lk(feed_->mu);
      feed_->stop = true;
      feed_->conn.interrupt();  // ends a long poll
    }
    feed_->cv.notify_all();
    watch_.reset();  // waits for a running callback, unless this is it
    if (std::this_thread::get_id() == thread_.get_id()) {
      std::shared_ptr<const std::atomic<bool>> done(feed_, &feed_->done);
      feed_->store.retire_watch_thread(std::move(thread_), std::move(done));
    } else {
      thread_.join();
    }
  }

 private:
  std::shared_ptr<RemoteFeed> feed_;
  std::unique_ptr<WatchHandle> watch_;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<WatchHandle> RemoteMetadataStore::watch(ChangeSeq after,
                                                        std::function<void(const ChangeEvent&)> on_change,
                                                        std::function<void()> resync) {
  join_retired(/*only_done=*/true);
  return std::make_unique<RemoteWatch>(*this, after, std::move(on_change), std::move(resync));
}

void RemoteMetadataStore::retire_watch_thread(std::thread t,
                                              std::shared_ptr<const std::atomic<bool>> done) {
  std::lock_guard lk(retired_mu_);
  retired_.push_back({std::move(t), std::move(done)});
}

void RemoteMetadataStore::join_retired(bool only_done) {
  std::vector<Retired> ready;
  {
    std::lock_guard lk(retired_mu_);
    for (auto it = retired_.begin(); it != retired_.end();) {
      if (!only_done || it->done->load()) {
        ready.push_back(std::move(*it));
        it = retired_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& r : ready) r.thread.join();
}

}  // namespace sluice::raft_meta
