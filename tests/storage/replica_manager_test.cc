// The replication protocol (replica_manager.h) against a model log and an in-process peer
// network: quorum, the in-sync set, fencing, truncation and the envelope checks. The real
// log is exercised by replica_log tests and the multi-process tests (test_replication.py).
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "replica_manager.h"
#include "replication_wire.h"

namespace sluice::fs_storage {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds limit = 30s) {
  const auto until = Clock::now() + limit;
  while (Clock::now() < until) {
    if (pred()) return true;
    std::this_thread::sleep_for(2ms);
  }
  return pred();
}

// One entry per offset: (epoch, value). A chunk is 16 bytes per entry: epoch, value.
class ModelLog : public ReplicaLog {
 public:
  explicit ModelLog(ShardRef ref) : ref_(std::move(ref)) {}

  const ShardRef& ref() const override { return ref_; }
  Offset log_start() override { return Offset{0}; }
  Offset durable_end() override {
    std::lock_guard lk(mu_);
    return Offset{entries_.size()};
  }
  Offset high_watermark() override {
    std::lock_guard lk(mu_);
    return hwm_;
  }
  LeaderEpoch leader_epoch() override {
    std::lock_guard lk(mu_);
    return epoch_;
  }
  LeaderEpoch last_data_epoch() override {
    std::lock_guard lk(mu_);
    return entries_.empty() ? LeaderEpoch{0} : entries_.back().first;
  }
  Result<EpochEnd> end_offset_for(LeaderEpoch e) override {
    std::lock_guard lk(mu_);
    if (e >= epoch_) return EpochEnd{epoch_, Offset{entries_.size()}};
    LeaderEpoch best{0};
    bool found = false;
    for (auto& [ep, v] : entries_)
      if (ep <= e) best = std::max(best, ep), found = true;
    if (!found) return EpochEnd{LeaderEpoch{0}, Offset{0}};
    std::uint64_t end = 0;
    for (std::size_t i = 0; i < entries_.size(); ++i)
      if (entries_[i].first <= best) end = i + 1;
    return EpochEnd{best, Offset{end}};
  }
  Result<void> become_leader(LeaderEpoch e) override { return take_epoch(e, true); }
  Result<void> become_follower(LeaderEpoch e, NodeId) override { return take_epoch(e, false); }
  Result<void> fence(LeaderEpoch e) override {
    std::lock_guard lk(mu_);
    if (e > epoch_) epoch_ = e;
    leading_ = false;
    fail_waiters(Error(Errc::fenced, "fenced by epoch " + std::to_string(e.value())));
    return {};
  }
  void set_in_sync(std::size_t members, std::uint32_t min_insync) override {
    std::lock_guard lk(mu_);
    members_ = members;
    min_insync_ = min_insync;
    complete_waiters();
  }
  void advance_high_watermark(Offset hwm) override {
    std::lock_guard lk(mu_);
    hwm = std::min(hwm, Offset{entries_.size()});
    if (hwm > hwm_) hwm_ = hwm;
    complete_waiters();
  }
  void expire_quorum_waiters(Clock::time_point now) override {
    std::lock_guard lk(mu_);
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->deadline <= now) {
        it->done.set_value(Error(Errc::not_enough_replicas, "quorum timeout"));
        it = waiters_.erase(it);
      } else {
        ++it;
      }
    }
  }
  Result<ReplicaChunk> read_raw(Offset from, std::size_t max_bytes) override {
    std::lock_guard lk(mu_);
    ReplicaChunk c;
    std::uint64_t i = from.value();
    if (i < entries_.size()) c.epoch = entries_[i].first;
    // Like the real log: a chunk never spans two epochs.
    while (i < entries_.size() && entries_[i].first == c.epoch &&
           (c.bytes.empty() || c.bytes.size() + 16 <= max_bytes)) {
      put(c.bytes, entries_[i].first.value());
      put(c.bytes, entries_[i].second);
      ++i;
    }
    c.next = Offset{i};
    return c;
  }
  Result<void> append_replica(std::string_view chunk, Offset base, LeaderEpoch) override {
    std::lock_guard lk(mu_);
    if (base.value() != entries_.size())
      return Error(Errc::conflict, "chunk at " + std::to_string(base.value()) + ", log end " +
                                       std::to_string(entries_.size()));
    if (chunk.size() % 16 != 0) return Error(Errc::corrupt_data, "bad chunk");
    for (std::size_t i = 0; i < chunk.size(); i += 16)
      entries_.emplace_back(LeaderEpoch{get(chunk.data() + i)}, get(chunk.data() + i + 8));
    fire();
    return {};
  }
  Result<void> truncate_to(Offset end) override {
    std::lock_guard lk(mu_);
    if (end < hwm_) return Error(Errc::conflict, "below the high watermark");
    if (end.value() < entries_.size()) entries_.resize(end.value());
    ++truncations_;
    return {};
  }
  std::uint64_t notify_when_end_beyond(Offset off, std::function<void()> cb) override {
    std::unique_lock lk(mu_);
    if (entries_.size() > off.value()) {
      lk.unlock();
      cb();
      return 0;
    }
    notifies_[++next_handle_] = {off, std::move(cb)};
    return next_handle_;
  }
  void cancel_end_notify(std::uint64_t h) override {
    std::lock_guard lk(mu_);
    notifies_.erase(h);
  }

  // A client append on the leader. Returns a future that completes like ack=quorum.
  std::future<Result<Offset>> append(std::uint64_t value,
                                     std::chrono::milliseconds timeout = 30s) {
    std::lock_guard lk(mu_);
    Waiter w;
    auto f = w.done.get_future();
    if (!leading_) {
      w.done.set_value(Error(Errc::not_leader, "not leading"));
      return f;
    }
    entries_.emplace_back(epoch_, value);
    w.end = Offset{entries_.size()};
    w.deadline = Clock::now() + timeout;
    waiters_.push_back(std::move(w));
    fire();
    complete_waiters();
    return f;
  }
  // Writes entries directly (history set-up for truncation tests).
  void put_entries(LeaderEpoch epoch, std::vector<std::uint64_t> values) {
    std::lock_guard lk(mu_);
    for (auto v : values) entries_.emplace_back(epoch, v);
    if (epoch > epoch_) epoch_ = epoch;
  }
  void set_hwm(Offset o) {
    std::lock_guard lk(mu_);
    hwm_ = o;
  }
  std::vector<std::pair<LeaderEpoch, std::uint64_t>> entries() {
    std::lock_guard lk(mu_);
    return entries_;
  }
  int truncations() {
    std::lock_guard lk(mu_);
    return truncations_;
  }

 private:
  struct Waiter {
    Offset end;
    Clock::time_point deadline;
    std::promise<Result<Offset>> done;
  };
  static void put(std::string& s, std::uint64_t v) { s.append(reinterpret_cast<char*>(&v), 8); }
  static std::uint64_t get(const char* p) {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
  }
  Result<void> take_epoch(LeaderEpoch e, bool lead) {
    std::lock_guard lk(mu_);
    if (e < epoch_)
      return Error(Errc::fenced, "epoch " + std::to_string(e.value()) + " is older than " +
                                     std::to_string(epoch_.value()));
    if (!lead) fail_waiters(Error(Errc::fenced, "now a follower"));
    epoch_ = e;
    leading_ = lead;
    return {};
  }
  void fire() {
    for (auto it = notifies_.begin(); it != notifies_.end();) {
      if (entries_.size() > it->second.first.value()) {
        it->second.second();
        it = notifies_.erase(it);
      } else {
        ++it;
      }
    }
  }
  void complete_waiters() {
    if (members_ < min_insync_) return;
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->end <= hwm_) {
        it->done.set_value(it->end);
        it = waiters_.erase(it);
      } else {
        ++it;
      }
    }
  }
  void fail_waiters(const Error& e) {
    for (auto& w : waiters_) w.done.set_value(e);
    waiters_.clear();
  }

  std::mutex mu_;
  ShardRef ref_;
  std::vector<std::pair<LeaderEpoch, std::uint64_t>> entries_;
  Offset hwm_{0};
  LeaderEpoch epoch_{0};
  bool leading_ = false;
  std::size_t members_ = 1;
  std::uint32_t min_insync_ = 1;
  std::deque<Waiter> waiters_;
  std::map<std::uint64_t, std::pair<Offset, std::function<void()>>> notifies_;
  std::uint64_t next_handle_ = 0;
  int truncations_ = 0;
};

// An in-process network of peer transports. Every delivery runs on the network's thread.
class Network {
 public:
  Network() : thread_([this] { run(); }) {}
  ~Network() { shutdown(); }
  // Stops delivering; whatever is still queued is dropped (its callbacks answer nothing).
  void shutdown() {
    {
      std::lock_guard lk(mu_);
      if (stop_) return;
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    std::lock_guard lk(mu_);
    q_.clear();
  }
  void post(std::function<void()> fn) {
    {
      std::lock_guard lk(mu_);
      q_.push_back(std::move(fn));
    }
    cv_.notify_one();
  }
  std::atomic<bool> cut[8][8] = {};  // cut[a][b]: a cannot reach b

 private:
  void run() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock lk(mu_);
        cv_.wait(lk, [&] { return stop_ || !q_.empty(); });
        if (stop_) return;
        fn = std::move(q_.front());
        q_.pop_front();
      }
      fn();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> q_;
  bool stop_ = false;
  std::thread thread_;
};

class FakeTransport : public PeerTransport {
 public:
  FakeTransport(Network& net, NodeId self, std::string dir)
      : net_(net), self_(self), dir_(std::move(dir)) {}
  NodeId self() const override { return self_; }
  Result<void> handle(PeerMessageType t, PeerHandler h) override {
    std::lock_guard lk(mu_);
    if (handlers_.count(t)) return Error(Errc::conflict, "handled");
    handlers_[t] = std::move(h);
    return {};
  }
  void unhandle(PeerMessageType t) override {
    std::lock_guard lk(mu_);
    handlers_.erase(t);
  }
  void request(NodeId peer, PeerMessageType type, std::string payload,
               std::chrono::milliseconds, PeerCallback cb) override {
    auto* to = peers ? (*peers)[peer.value()] : nullptr;
    if (!to || net_.cut[self_.value()][peer.value()] || net_.cut[peer.value()][self_.value()]) {
      net_.post([cb] { cb(Error(Errc::unavailable, "unreachable")); });
      return;
    }
    PeerIdentity from{self_, dir_};
    net_.post([to, from, type, payload = std::move(payload), cb]() mutable {
      PeerHandler h;
      {
        std::lock_guard lk(to->mu_);
        auto it = to->handlers_.find(type);
        if (it != to->handlers_.end()) h = it->second;
      }
      if (!h) return cb(Error(Errc::not_supported, "no handler"));
      h(from, std::move(payload), PeerResponder([cb](Result<std::string> r) { cb(std::move(r)); }));
    });
  }
  void set_dir(std::string d) { dir_ = std::move(d); }
  std::map<std::uint32_t, FakeTransport*>* peers = nullptr;

 private:
  Network& net_;
  NodeId self_;
  std::string dir_;
  std::mutex mu_;
  std::map<PeerMessageType, PeerHandler> handlers_;
};

ShardRef shard_ref(std::uint64_t inc = 7) {
  return ShardRef{StreamKey{"t", "n", "s"}, ShardIndex{0}, Incarnation{inc}};
}

std::string dir_of(std::uint32_t b) { return "dir-" + std::to_string(b); }

// A cluster of brokers 1..n holding one shard, with a fake catalog doing the compare-and-set.
class Cluster {
 public:
  explicit Cluster(std::uint32_t n, ReplicaOptions opts = fast_options()) : opts_(opts) {
    for (std::uint32_t b = 1; b <= n; ++b) {
      dirs_[b] = dir_of(b);
      transports_[b] = std::make_unique<FakeTransport>(net_, NodeId{b}, dirs_[b]);
      raw_[b] = transports_[b].get();
      transports_[b]->peers = &raw_;
      logs_[b] = std::make_shared<ModelLog>(shard_ref());
      start_manager(b);
    }
    catalog_.replicas.clear();
    for (std::uint32_t b = 1; b <= n; ++b) {
      catalog_.replicas.push_back(NodeId{b});
      catalog_.in_sync.push_back(InSyncReplica{NodeId{b}, dirs_[b]});
    }
    catalog_.leader = NodeId{1};
    catalog_.leader_epoch = LeaderEpoch{1};
    catalog_.version = ShardVersion{1};
    catalog_.min_insync = (n / 2) + 1;
  }
  ~Cluster() {
    for (auto& [b, m] : managers_) m->stop();
    net_.shutdown();
  }

  static ReplicaOptions fast_options() {
    ReplicaOptions o;
    o.max_lag = 400ms;
    o.fetch_wait = 50ms;
    o.request_timeout = 2s;
    o.retry_backoff = 10ms;
    o.check_interval = 0ms;  // the tests call check_now()
    return o;
  }

  void start_manager(std::uint32_t b) {
    auto update = [this](const ShardUpdate& u) -> Result<Assignment> {
      std::lock_guard lk(cat_mu_);
      if (u.incarnation != shard_ref().incarnation) return Error(Errc::stale_route, "other");
      if (u.expected_version != catalog_.version)
        return Error(Errc::conflict, "version " + std::to_string(catalog_.version.value()));
      catalog_.leader = u.leader;
      catalog_.leader_epoch = u.leader_epoch;
      catalog_.in_sync = u.in_sync;
      catalog_.version = ShardVersion{catalog_.version.value() + 1};
      ++updates_;
      Assignment a;
      a.key = u.key;
      a.shard = u.shard;
      a.incarnation = u.incarnation;
      a.leader = catalog_.leader;
      a.replicas = catalog_.replicas;
      a.leader_epoch = catalog_.leader_epoch;
      a.in_sync = catalog_.in_sync;
      a.version = catalog_.version;
      return a;
    };
    auto logger = [b](LogLevel, std::string_view m) {
      std::fprintf(stderr, "[broker %u] %.*s\n", b, static_cast<int>(m.size()), m.data());
    };
    managers_[b] = std::make_unique<ReplicaManager>(*transports_[b], NodeId{b}, dirs_[b],
                                                    update, logger, opts_);
    ASSERT_TRUE(managers_[b]->start());
  }

  // Tells `brokers` (default: all) the catalog's current word.
  void tell(std::vector<std::uint32_t> brokers = {}) {
    if (brokers.empty())
      for (auto& [b, _] : managers_) brokers.push_back(b);
    ReplicaAssignment ra;
    {
      std::lock_guard lk(cat_mu_);
      ra = catalog_;
    }
    for (auto b : brokers) (void)managers_[b]->assign(logs_[b], ra);
  }
  ReplicaAssignment catalog() {
    std::lock_guard lk(cat_mu_);
    return catalog_;
  }
  void set_catalog(const std::function<void(ReplicaAssignment&)>& fn) {
    std::lock_guard lk(cat_mu_);
    fn(catalog_);
    catalog_.version = ShardVersion{catalog_.version.value() + 1};
  }

  Network net_;
  ReplicaOptions opts_;
  std::map<std::uint32_t, std::string> dirs_;
  std::map<std::uint32_t, std::unique_ptr<FakeTransport>> transports_;
  std::map<std::uint32_t, FakeTransport*> raw_;
  std::map<std::uint32_t, std::shared_ptr<ModelLog>> logs_;
  std::map<std::uint32_t, std::unique_ptr<ReplicaManager>> managers_;
  std::mutex cat_mu_;
  ReplicaAssignment catalog_;
  int updates_ = 0;
};

bool ready(std::future<Result<Offset>>& f) { return f.wait_for(0s) == std::future_status::ready; }

TEST(ReplicaManager, AQuorumAppendCompletesOnceEveryInSyncReplicaHasItOnDisk) {
  Cluster c(3);
  c.tell();
  std::vector<std::future<Result<Offset>>> acks;
  for (std::uint64_t i = 0; i < 20; ++i) acks.push_back(c.logs_[1]->append(100 + i));
  for (auto& f : acks) {
    ASSERT_EQ(f.wait_for(30s), std::future_status::ready);
    auto r = f.get();
    ASSERT_TRUE(r) << r.error().message;
    // Acknowledged only once both followers held it durably.
    EXPECT_GE(c.logs_[2]->durable_end(), *r);
    EXPECT_GE(c.logs_[3]->durable_end(), *r);
  }
  EXPECT_EQ(c.logs_[1]->entries(), c.logs_[2]->entries());
  EXPECT_EQ(c.logs_[1]->entries(), c.logs_[3]->entries());
  // Followers learn the high watermark with their next fetch.
  EXPECT_TRUE(eventually([&] { return c.logs_[2]->high_watermark() == Offset{20}; }));
}

TEST(ReplicaManager, ALaggingReplicaLeavesTheInSyncSetButNeverBelowMinInsyncAndComesBack) {
  Cluster c(3);
  c.tell();
  ASSERT_TRUE(c.logs_[1]->append(1).get());
  c.net_.cut[3][1] = true;  // broker 3 cannot reach the leader
  auto f = c.logs_[1]->append(2);
  EXPECT_NE(f.wait_for(200ms), std::future_status::ready) << "acknowledged without broker 3";
  // After max_lag the leader drops broker 3 (min_insync 2 allows it); the ack follows.
  ASSERT_TRUE(eventually([&] {
    c.managers_[1]->check_now();
    return c.catalog().in_sync.size() == 2;
  }));
  c.tell();
  ASSERT_EQ(f.wait_for(30s), std::future_status::ready);
  EXPECT_TRUE(f.get());
  // Broker 2 also cut: the set may not shrink below min_insync, so appends wait and expire.
  c.net_.cut[2][1] = true;
  auto g = c.logs_[1]->append(3, 300ms);
  std::this_thread::sleep_for(c.opts_.max_lag + 100ms);  // lets the lag pass; not a sync point
  c.managers_[1]->check_now();
  EXPECT_EQ(c.catalog().in_sync.size(), 2u);
  ASSERT_TRUE(eventually([&] {
    c.managers_[1]->check_now();
    return ready(g);
  }));
  auto r = g.get();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::not_enough_replicas);
  // Healed: both catch up and broker 3 rejoins with its directory.
  c.net_.cut[2][1] = c.net_.cut[3][1] = false;
  ASSERT_TRUE(eventually([&] {
    c.managers_[1]->check_now();
    return c.catalog().in_sync.size() == 3;
  }));
  EXPECT_EQ(c.catalog().in_sync.back(), (InSyncReplica{NodeId{3}, "dir-3"}));
  EXPECT_EQ(c.logs_[1]->entries(), c.logs_[3]->entries());
}

// Seed pulsar-fenced-empty-ledger-loss: a leader deposed while partitioned must not
// acknowledge anything with quorum, with data or with an empty log.
void deposed_leader_acknowledges_nothing(bool with_data) {
  Cluster c(3);
  c.tell();
  if (with_data) {
    for (std::uint64_t i = 0; i < 5; ++i) ASSERT_TRUE(c.logs_[1]->append(i).get());
  }
  // The catalog moves leadership to broker 2 (epoch 2); broker 1 is partitioned and does not
  // hear of it, broker 3 does.
  c.net_.cut[1][2] = c.net_.cut[1][3] = true;
  c.set_catalog([](ReplicaAssignment& a) {
    a.leader = NodeId{2};
    a.leader_epoch = LeaderEpoch{2};
    a.in_sync = {{NodeId{2}, "dir-2"}, {NodeId{3}, "dir-3"}};
  });
  c.tell({2, 3});
  auto stale = c.logs_[1]->append(999, 2s);
  auto fresh = c.logs_[2]->append(42);
  ASSERT_EQ(fresh.wait_for(30s), std::future_status::ready);
  ASSERT_TRUE(fresh.get());
  // The old leader's append: never acknowledged. It expires (or is fenced once it hears).
  ASSERT_TRUE(eventually([&] {
    c.managers_[1]->check_now();
    return ready(stale);
  }));
  auto r = stale.get();
  ASSERT_FALSE(r) << "a deposed leader acknowledged offset " << r->value();
  // Healed, it learns the new epoch, truncates its unacknowledged suffix and follows.
  c.net_.cut[1][2] = c.net_.cut[1][3] = false;
  c.tell({1});
  ASSERT_TRUE(eventually([&] { return c.logs_[1]->entries() == c.logs_[2]->entries(); }));
  for (auto& [epoch, v] : c.logs_[1]->entries()) EXPECT_NE(v, 999u);
  // And a quorum append on it now is refused: it is a follower.
  auto again = c.logs_[1]->append(1000).get();
  ASSERT_FALSE(again);
}

TEST(ReplicaManager, DeposedLeaderAcknowledgesNothing) { deposed_leader_acknowledges_nothing(true); }
TEST(ReplicaManager, DeposedLeaderWithAnEmptyLogAcknowledgesNothing) {
  deposed_leader_acknowledges_nothing(false);
}

TEST(ReplicaManager, AFollowerInANewerEpochFencesTheOldLeaderAndItsPendingAppends) {
  Cluster c(3);
  c.tell();
  ASSERT_TRUE(c.logs_[1]->append(1).get());
  c.net_.cut[2][1] = true;  // broker 2 stops fetching: the next append waits
  auto pending = c.logs_[1]->append(2);
  EXPECT_NE(pending.wait_for(100ms), std::future_status::ready);
  // A message from epoch 2 (a replica that heard of a newer leader) reaches the old leader:
  // it fences itself, and its pending quorum append fails.
  FetchRequest req;
  req.env = Incarnated{shard_ref(), LeaderEpoch{2}, NodeId{3}, "dir-3"};
  req.fetch_offset = c.logs_[3]->durable_end();
  req.durable_end = req.fetch_offset;
  std::promise<Result<std::string>> answer;
  c.transports_[3]->request(NodeId{1}, kReplicaFetch, encode(req), 5s,
                            [&](Result<std::string> r) { answer.set_value(std::move(r)); });
  auto a = answer.get_future().get();
  ASSERT_FALSE(a);
  EXPECT_EQ(a.error().code, Errc::not_leader);
  ASSERT_EQ(pending.wait_for(30s), std::future_status::ready);
  auto r = pending.get();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::fenced);
  EXPECT_EQ(c.logs_[1]->leader_epoch(), LeaderEpoch{2});
}

// Seed kafka-15495: a replica back with a new directory is a new, empty replica. It counts
// for nothing until the catalog records its new directory in the in-sync set.
TEST(ReplicaManager, AReplicaWithANewDirectoryCountsForNothingUntilRecorded) {
  Cluster c(2);
  c.set_catalog([](ReplicaAssignment& a) { a.min_insync = 2; });
  // Broker 2 lost its disk: an empty log and a new directory id; the catalog still has the old.
  c.logs_[1]->put_entries(LeaderEpoch{1}, {1, 2, 3, 4, 5});
  c.managers_[2]->stop();
  c.transports_[2] = std::make_unique<FakeTransport>(c.net_, NodeId{2}, "dir-2-new");
  c.raw_[2] = c.transports_[2].get();
  c.transports_[2]->peers = &c.raw_;
  c.dirs_[2] = "dir-2-new";
  c.start_manager(2);
  c.tell();
  ASSERT_TRUE(eventually([&] { return c.logs_[2]->durable_end() == Offset{5}; }));
  // Let broker 2 report that position at least once more.
  auto f = c.logs_[1]->append(6);
  ASSERT_TRUE(eventually([&] { return c.logs_[2]->durable_end() == Offset{6}; }));
  std::this_thread::sleep_for(3 * c.opts_.fetch_wait);  // not a sync point: more fetches
  EXPECT_EQ(c.logs_[1]->high_watermark(), Offset{0})
      << "a replica with an unrecorded directory raised the high watermark";
  EXPECT_NE(f.wait_for(0s), std::future_status::ready);
  // The leader records the new directory once it holds everything up to the watermark.
  c.managers_[1]->check_now();
  ASSERT_TRUE(eventually([&] { return c.catalog().in_sync.size() == 2; }));
  EXPECT_EQ(c.catalog().in_sync.back(), (InSyncReplica{NodeId{2}, "dir-2-new"}));
  ASSERT_EQ(f.wait_for(30s), std::future_status::ready);
  EXPECT_TRUE(f.get());
}

// Seed kafka-15495: the catalog still names broker 1 leader, but broker 1 came back with
// an empty disk (a new directory id). It must not lead: its empty log would become the truth.
TEST(ReplicaManager, ABrokerBackWithANewDirectoryNeverLeadsOnTheCatalogsOldWord) {
  Cluster c(2);
  c.managers_[1]->stop();
  c.transports_[1] = std::make_unique<FakeTransport>(c.net_, NodeId{1}, "dir-1-new");
  c.raw_[1] = c.transports_[1].get();
  c.transports_[1]->peers = &c.raw_;
  c.dirs_[1] = "dir-1-new";
  c.start_manager(1);
  c.tell();
  auto f = c.logs_[1]->append(1);
  ASSERT_EQ(f.wait_for(30s), std::future_status::ready);
  auto r = f.get();
  ASSERT_FALSE(r) << "a leader with an unrecorded directory accepted an append";
  // Recorded with its new directory (an operator's unclean election), it leads.
  c.set_catalog([](ReplicaAssignment& a) {
    a.leader_epoch = LeaderEpoch{2};
    a.in_sync = {InSyncReplica{NodeId{1}, "dir-1-new"}};
    a.min_insync = 1;
  });
  c.tell();
  auto g = c.logs_[1]->append(1);
  ASSERT_TRUE(eventually([&] {
    c.managers_[1]->check_now();
    return g.wait_for(0s) == std::future_status::ready;
  }));
  EXPECT_TRUE(g.get());
}

TEST(ReplicaManager, AFollowerTruncatesOnlyTheDivergentSuffix) {
  Cluster c(2);
  // The leader wrote 0..9 in epoch 1 and 10..12 in epoch 3; the follower holds 0..9 and an
  // unacknowledged 10..14 of epoch 1.
  c.logs_[1]->put_entries(LeaderEpoch{1}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  c.logs_[1]->put_entries(LeaderEpoch{3}, {30, 31, 32});
  c.logs_[2]->put_entries(LeaderEpoch{1}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 90, 91, 92, 93, 94});
  c.logs_[2]->set_hwm(Offset{5});
  c.set_catalog([](ReplicaAssignment& a) { a.leader_epoch = LeaderEpoch{3}; });
  c.tell();
  ASSERT_TRUE(eventually([&] { return c.logs_[2]->entries() == c.logs_[1]->entries(); }));
  EXPECT_EQ(c.logs_[2]->truncations(), 1);
}

TEST(ReplicaManager, AFollowerNeverTruncatesBelowItsHighWatermark) {
  Cluster c(2);
  // An unclean leader that lost data: its history ends epoch 1 at 3. The follower's high
  // watermark is 8: it keeps everything below 8.
  c.logs_[1]->put_entries(LeaderEpoch{1}, {0, 1, 2});
  c.logs_[1]->put_entries(LeaderEpoch{4}, {40});
  c.logs_[2]->put_entries(LeaderEpoch{1}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  c.logs_[2]->set_hwm(Offset{8});
  c.set_catalog([](ReplicaAssignment& a) { a.leader_epoch = LeaderEpoch{4}; });
  c.tell();
  ASSERT_TRUE(eventually([&] { return c.logs_[2]->truncations() == 1; }));
  EXPECT_TRUE(eventually([&] { return c.logs_[2]->durable_end() >= Offset{8}; }));
  auto e = c.logs_[2]->entries();
  ASSERT_GE(e.size(), 8u);
  for (std::uint64_t i = 0; i < 8; ++i) EXPECT_EQ(e[i].second, i);
}

class Envelope : public ::testing::Test {
 protected:
  void SetUp() override { c.tell(); }
  Result<std::string> send(FetchRequest req, std::uint32_t from = 2) {
    std::promise<Result<std::string>> p;
    c.transports_[from]->request(NodeId{1}, kReplicaFetch, encode(req), 5s,
                                 [&](Result<std::string> r) { p.set_value(std::move(r)); });
    return p.get_future().get();
  }
  FetchRequest good() {
    FetchRequest r;
    r.env = Incarnated{shard_ref(), LeaderEpoch{1}, NodeId{2}, "dir-2"};
    return r;
  }
  Cluster c{3};
};

TEST_F(Envelope, AnotherIncarnationIsAStaleRoute) {
  auto req = good();
  req.env.ref.incarnation = Incarnation{8};
  auto r = send(req);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::stale_route);
  EXPECT_NE(r.error().message.find("incarnation 7"), std::string::npos) << r.error().message;
}

TEST_F(Envelope, AnUnknownShardIsNotFound) {
  auto req = good();
  req.env.ref.shard = ShardIndex{3};
  auto r = send(req);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::not_found);
}

TEST_F(Envelope, ALowerEpochIsFenced) {
  c.set_catalog([](ReplicaAssignment& a) { a.leader_epoch = LeaderEpoch{5}; });
  c.tell({1});
  auto r = send(good());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::fenced);
}

TEST_F(Envelope, ASenderOtherThanTheHelloIsRefused) {
  auto req = good();
  req.env.sender = NodeId{3};
  auto r = send(req);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::invalid_argument);
  req = good();
  req.env.directory_id = "someone-else";
  r = send(req);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::invalid_argument);
}

TEST_F(Envelope, AMalformedRequestIsMalformedBody) {
  std::promise<Result<std::string>> p;
  c.transports_[2]->request(NodeId{1}, kReplicaFetch, "garbage", 5s,
                            [&](Result<std::string> r) { p.set_value(std::move(r)); });
  auto r = p.get_future().get();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::malformed_body);
}

TEST(ReplicationWire, EveryTruncationAndTrailingByteIsMalformed) {
  FetchRequest req;
  req.env = Incarnated{shard_ref(), LeaderEpoch{3}, NodeId{2}, "dir-2"};
  req.fetch_offset = Offset{10};
  req.durable_end = Offset{9};
  req.max_bytes = 1000;
  req.wait_ms = 5;
  const auto bytes = encode(req);
  auto back = decode_fetch_request(bytes);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->env.ref, req.env.ref);
  EXPECT_EQ(back->env.directory_id, "dir-2");
  EXPECT_EQ(back->fetch_offset, Offset{10});
  EXPECT_EQ(back->durable_end, Offset{9});
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    auto r = decode_fetch_request(std::string_view(bytes).substr(0, n));
    ASSERT_FALSE(r) << n;
    EXPECT_EQ(r.error().code, Errc::malformed_body);
  }
  EXPECT_FALSE(decode_fetch_request(bytes + "x"));

  FetchResponse resp;
  resp.leader_epoch = LeaderEpoch{3};
  resp.high_watermark = Offset{4};
  resp.chunk_base = Offset{4};
  const std::string chunk(100, 'c');
  resp.chunk = chunk;
  const auto rb = encode(resp);
  auto rback = decode_fetch_response(rb);
  ASSERT_TRUE(rback);
  EXPECT_EQ(rback->chunk, chunk);
  EXPECT_EQ(rback->high_watermark, Offset{4});
  for (std::size_t n = 0; n < rb.size(); ++n)
    EXPECT_FALSE(decode_fetch_response(std::string_view(rb).substr(0, n))) << n;

  const auto eb = encode(EpochEndRequest{req.env, LeaderEpoch{2}});
  ASSERT_TRUE(decode_epoch_end_request(eb));
  for (std::size_t n = 0; n < eb.size(); ++n)
    EXPECT_FALSE(decode_epoch_end_request(std::string_view(eb).substr(0, n))) << n;
  EXPECT_FALSE(decode_epoch_end_response("short"));
}

TEST(ReplicationWire, TheEnvelopeNamesWhichLogOfTheShardItSpeaksOf) {
  EpochEndRequest req{Incarnated{shard_ref(), LeaderEpoch{3}, NodeId{2}, "dir-2", LogKind::groups},
                      LeaderEpoch{2}};
  auto bytes = encode(req);
  auto back = decode_epoch_end_request(bytes);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->env.log, LogKind::groups);
  // The log byte is the envelope's last; the epoch (8 bytes) follows it.
  bytes[bytes.size() - 9] = 7;
  auto bad = decode_epoch_end_request(bytes);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, Errc::malformed_body);
  EXPECT_NE(bad.error().message.find("unknown log kind"), std::string::npos) << bad.error().message;
}

}  // namespace
}  // namespace sluice::fs_storage
