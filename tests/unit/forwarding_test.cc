// BrokerRuntime forwarding (docs/replication.md "Forwarding") against a scripted catalog
// and the real fs-storage engine.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "broker_test_support.h"
#include "forwarding.h"

// --- Forwarding (docs/replication.md "Forwarding") -------------------------------------
// Two brokers in one process, joined by a loopback PeerTransport: broker 1 leads shard 0,
// broker 2 shard 1. Calls made on broker 1 for shard 1 go to broker 2 and come back.
namespace {

class Loopback {
 public:
  class Port final : public PeerTransport {
   public:
    Port(Loopback& net, NodeId id) : net_(net), id_(id) {}
    NodeId self() const override { return id_; }
    Result<void> handle(PeerMessageType type, PeerHandler h) override {
      std::lock_guard lk(net_.mu_);
      if (!net_.handlers_.emplace(std::make_pair(id_.value(), type), std::move(h)).second)
        return Error(Errc::conflict, "type already handled");
      return {};
    }
    // As the real transport: once this returns, no call of the handler runs.
    void unhandle(PeerMessageType type) override {
      std::unique_lock lk(net_.mu_);
      net_.handlers_.erase({id_.value(), type});
      net_.idle_.wait(lk, [&] { return net_.running_[id_.value()] == 0; });
    }
    void request(NodeId peer, PeerMessageType type, std::string payload, std::chrono::milliseconds,
                 PeerCallback cb) override {
      net_.send(id_, peer, type, std::move(payload), std::move(cb));
    }

   private:
    Loopback& net_;
    NodeId id_;
  };

  void set_down(NodeId id, bool down) {
    std::lock_guard lk(mu_);
    if (down) down_.insert(id.value());
    else down_.erase(id.value());
  }
  void set_answers_lost(NodeId id, bool lost) {
    std::lock_guard lk(mu_);
    if (lost) lost_.insert(id.value());
    else lost_.erase(id.value());
  }
  // Waits until no request is being delivered (before the brokers are destroyed).
  void drain() {
    std::unique_lock lk(mu_);
    idle_.wait(lk, [&] { return inflight_ == 0; });
  }
  int requests(PeerMessageType type) {
    std::lock_guard lk(mu_);
    return counts_[type];
  }

 private:
  void send(NodeId from, NodeId to, PeerMessageType type, std::string payload, PeerCallback cb) {
    {
      std::lock_guard lk(mu_);
      ++inflight_;
    }
    pool_.post([this, from, to, type, payload = std::move(payload), cb = std::move(cb)]() mutable {
      deliver(from, to, type, std::move(payload), std::move(cb));
      std::lock_guard lk(mu_);
      --inflight_;
      idle_.notify_all();
    });
  }
  void deliver(NodeId from, NodeId to, PeerMessageType type, std::string payload, PeerCallback cb) {
    {
      PeerHandler h;
      {
        std::lock_guard lk(mu_);
        ++counts_[type];
        if (down_.count(to.value()))
          return cb(Error(Errc::unavailable, "broker " + std::to_string(to.value()) + " is down", Outcome::transient));
        auto it = handlers_.find({to.value(), type});
        if (it != handlers_.end()) h = it->second;
        if (h) ++running_[to.value()];
      }
      if (!h) return cb(Error(Errc::not_supported, "no handler"));
      bool lose = false;
      {
        std::lock_guard lk(mu_);
        lose = lost_.count(to.value()) > 0;
      }
      // Lost: the peer handles the call, and its answer never arrives (as the transport
      // reports a connection closed after the request was sent).
      h(PeerIdentity{from, ""}, std::move(payload), PeerResponder([cb, lose](Result<std::string> a) {
          if (lose) return cb(Error(Errc::unavailable, "the connection was closed", Outcome::uncertain));
          cb(std::move(a));
        }));
      std::lock_guard lk(mu_);
      --running_[to.value()];
      idle_.notify_all();
    }
  }

  std::mutex mu_;
  std::map<std::pair<std::uint32_t, PeerMessageType>, PeerHandler> handlers_;
  std::set<std::uint32_t> down_;
  std::set<std::uint32_t> lost_;  // answers from these never arrive
  std::map<PeerMessageType, int> counts_;
  std::map<std::uint32_t, int> running_;  // handler calls in progress, per node
  int inflight_ = 0;                       // requests posted and not yet delivered
  std::condition_variable idle_;
  fwd::Workers pool_{4};
};

class ForwardHost : public sluice::testing::TestHost {
 public:
  PeerTransport* transport = nullptr;
  PeerTransport* peer_transport() override { return transport; }
};

// K with 2 shards: shard 0 on broker 1, shard 1 on `shard1_leader` (0: none); both
// brokers registered with their HTTP addresses.
CatalogSnapshot two_brokers(NodeId shard1_leader) {
  CatalogSnapshot s = catalog_with(10, I1);
  s.streams[0].spec.shards = 2;
  s.assignments.push_back(Assignment{K, ShardIndex{1}, Incarnation{I1}, Generation{10}, shard1_leader, {NodeId{2}}});
  BrokerInfo b1, b2;
  b1.id = NodeId{1};
  b1.address = "127.0.0.1:18081";
  b2.id = NodeId{2};
  b2.address = "127.0.0.1:18082";
  s.brokers = {b1, b2};
  return s;
}

struct Pair {
  Loopback net;
  Loopback::Port port1{net, NodeId{1}}, port2{net, NodeId{2}};
  ForwardHost host1, host2;
  ScriptedCatalog cat1, cat2;
  std::unique_ptr<fs_storage::FsStorageEngine> storage1, storage2;
  std::unique_ptr<BrokerRuntime> b1, b2;

  explicit Pair(NodeId shard1_leader_for_1 = NodeId{2}, NodeId shard1_leader_for_2 = NodeId{2}) {
    host1.transport = &port1;
    host2.transport = &port2;
    storage1 = std::make_unique<fs_storage::FsStorageEngine>(host1, std::make_shared<fs_storage::PosixFileSystem>());
    storage2 = std::make_unique<fs_storage::FsStorageEngine>(host2, std::make_shared<fs_storage::PosixFileSystem>());
    cat1.set_snapshot(two_brokers(shard1_leader_for_1));
    cat2.set_snapshot(two_brokers(shard1_leader_for_2));
    b1 = make(host1, cat1, *storage1, 1);
    b2 = make(host2, cat2, *storage2, 2);
  }
  static std::unique_ptr<BrokerRuntime> make(ForwardHost& host, ScriptedCatalog& cat, StorageEngine& storage,
                                             std::uint32_t id) {
    NodeInfo info;
    info.node_id = NodeId{id};
    BrokerOptions opts;
    opts.heartbeat_interval_ms = 600000;
    opts.advertised_address = "127.0.0.1:1808" + std::to_string(id);
    opts.forward_wait_hold_ms = 200;  // so a test sees the re-asking after a hold
    return std::make_unique<BrokerRuntime>(info, cat, &storage, opts, host);
  }
  ~Pair() {
    b1->stop();
    b2->stop();
    net.drain();
  }
};

Result<std::vector<PublishedRecord>> publish_sync(BrokerRuntime& b, std::vector<PublishRecord> recs) {
  std::promise<Result<std::vector<PublishedRecord>>> p;
  auto f = p.get_future();
  b.publish(K, recs, PublishOptions{}, [&p](Result<std::vector<PublishedRecord>> r) { p.set_value(std::move(r)); });
  if (f.wait_for(std::chrono::seconds(30)) != std::future_status::ready)
    return Error(Errc::timeout, "publish did not answer");
  return f.get();
}

std::vector<std::string> values(const FetchResult& f) {
  std::vector<std::string> out;
  for (const auto& b : f.batches) {
    BatchReader r(b.data(), b.size());
    RecordView rv;
    while (r.next(rv)) out.emplace_back(rv.value);
  }
  return out;
}

}  // namespace

TEST(Forwarding, publish_fetch_and_groups_on_another_brokers_shard_go_to_its_leader) {
  Pair p;
  ASSERT_TRUE(p.b1->start());
  ASSERT_TRUE(p.b2->start());
  EXPECT_EQ(p.b1->leader_address(K, ShardIndex{1}), "127.0.0.1:18082");
  EXPECT_EQ(p.b1->leader_address(K, ShardIndex{0}), "127.0.0.1:18081");
  EXPECT_TRUE(p.b1->serves_locally(K, ShardIndex{0}));
  EXPECT_FALSE(p.b1->serves_locally(K, ShardIndex{1}));
  EXPECT_TRUE(p.b2->serves_locally(K, ShardIndex{1}));

  PublishRecord a, b, c;
  a.value = "one";
  a.shard = 1;
  b.value = "two";
  b.shard = 1;
  c.value = "zero";
  c.shard = 0;
  auto r = publish_sync(*p.b1, {a, b, c});  // shard 1 forwarded, shard 0 local, in one request
  ASSERT_TRUE(r) << r.error().to_string();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[0].shard.value(), 1u);
  EXPECT_EQ((*r)[0].offset.value(), 0u);
  EXPECT_EQ((*r)[1].offset.value(), 1u);
  EXPECT_EQ((*r)[2].shard.value(), 0u);
  EXPECT_EQ(p.net.requests(fwd::kPublish), 1);

  // The data is on broker 2 (read there directly) and readable through broker 1.
  auto direct = p.b2->fetch(K, ShardIndex{1}, Offset{0}, 10, 1 << 20);
  ASSERT_TRUE(direct) << direct.error().to_string();
  EXPECT_EQ(values(*direct), (std::vector<std::string>{"one", "two"}));
  auto via = p.b1->fetch(K, ShardIndex{1}, Offset{0}, 10, 1 << 20);
  ASSERT_TRUE(via) << via.error().to_string();
  EXPECT_EQ(values(*via), (std::vector<std::string>{"one", "two"}));
  EXPECT_EQ(via->high_watermark.value(), 2u);
  auto stats = p.b1->shard_stats(K, ShardIndex{1});
  ASSERT_TRUE(stats) << stats.error().to_string();
  EXPECT_EQ(stats->high_watermark.value(), 2u);

  // Long poll through broker 1: fires once broker 2 appends (after at least one hold).
  std::atomic<bool> fired{false};
  auto h = p.b1->notify_when_beyond(K, ShardIndex{1}, Offset{2}, [&] { fired = true; });
  ASSERT_TRUE(h) << h.error().to_string();
  // The leader holds the wait 200 ms, answers "nothing new", and broker 1 asks again.
  ASSERT_TRUE(eventually([&] { return p.net.requests(fwd::kWait) >= 2; }));
  EXPECT_FALSE(fired.load());
  PublishRecord d;
  d.value = "three";
  d.shard = 1;
  ASSERT_TRUE(publish_sync(*p.b2, {d}));
  EXPECT_TRUE(eventually([&] { return fired.load(); }));

  // A poll that gives up cancels: the leader is told to drop its hold at once.
  auto h2 = p.b1->notify_when_beyond(K, ShardIndex{1}, Offset{100}, [] {});
  ASSERT_TRUE(h2) << h2.error().to_string();
  p.b1->cancel_notify(K, ShardIndex{1}, h2.value());
  EXPECT_TRUE(eventually([&] { return p.net.requests(fwd::kCancelWait) == 1; }));

  // A consumer group through broker 1.
  auto g = p.b1->group_fetch(K, ShardIndex{1}, "workers", 10, GroupOptions{});
  ASSERT_TRUE(g) << g.error().to_string();
  ASSERT_EQ(g->records.size(), 3u);
  EXPECT_EQ(g->records[0].delivery, 1u);
  // Pinned to another incarnation (ABI 20): refused, on the leader and before anything is
  // forwarded; nothing is acked. Pinned to this one: done, forwarded with it.
  const auto acks_sent = p.net.requests(fwd::kGroupAck);
  // An earlier incarnation is a conflict; one not applied here yet is transient.
  constexpr std::uint64_t kOld = I1 - 1;
  for (auto* b : {p.b1.get(), p.b2.get()}) {
    auto stale = b->group_ack(K, ShardIndex{1}, "workers", {Offset{0}}, Incarnation{kOld});
    ASSERT_FALSE(stale);
    EXPECT_EQ(stale.error().code, Errc::conflict) << stale.error().to_string();
    EXPECT_NE(stale.error().message.find("not incarnation " + std::to_string(kOld)), std::string::npos);
    EXPECT_EQ(b->group_fetch(K, ShardIndex{1}, "workers", 10, GroupOptions{}, Incarnation{kOld}).error().code,
              Errc::conflict);
    EXPECT_EQ(b->group_fetch(K, ShardIndex{1}, "workers", 10, GroupOptions{}, Incarnation{I2}).error().code,
              Errc::unavailable);
  }
  EXPECT_EQ(p.net.requests(fwd::kGroupAck), acks_sent) << "a call for another incarnation was forwarded";
  ASSERT_TRUE(p.b1->group_ack(K, ShardIndex{1}, "workers", {Offset{0}}, Incarnation{I1}));
  ASSERT_TRUE(p.b1->group_ack(K, ShardIndex{1}, "workers", {Offset{1}, Offset{2}}));
  auto pos = p.b1->group_positions(K, "workers");
  ASSERT_TRUE(pos) << pos.error().to_string();
  ASSERT_EQ(pos->size(), 2u);
  EXPECT_EQ((*pos)[1].committed.value(), 3u);
  auto names = p.b1->groups(K);
  ASSERT_TRUE(names) << names.error().to_string();
  EXPECT_EQ(*names, std::vector<std::string>{"workers"});

  // Bad input is refused before anything is forwarded, as on the leader.
  auto bad = p.b1->fetch(K, ShardIndex{7}, Offset{0}, 10, 1 << 20);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, Errc::not_found);
  auto unknown = p.b1->fetch(StreamKey{"t", "n", "nope"}, ShardIndex{1}, Offset{0}, 10, 1 << 20);
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, Errc::not_found);

  // The leader down: unavailable, transient (nothing was sent), for reads and publishes.
  p.net.set_down(NodeId{2}, true);
  auto down = p.b1->fetch(K, ShardIndex{1}, Offset{0}, 10, 1 << 20);
  ASSERT_FALSE(down);
  EXPECT_EQ(down.error().code, Errc::unavailable);
  EXPECT_EQ(down.error().outcome, Outcome::transient);
  auto pdown = publish_sync(*p.b1, {a});
  ASSERT_FALSE(pdown);
  EXPECT_EQ(pdown.error().code, Errc::unavailable);
  // Partly written (shard 0 took its batch): the outcome is uncertain.
  auto partial = publish_sync(*p.b1, {a, c});
  ASSERT_FALSE(partial);
  EXPECT_EQ(partial.error().outcome, Outcome::uncertain);
}

// Review finding: a read forwarded to a leader that died after the request was sent failed
// "uncertain", which tells a client the call may have taken effect; a read changes
// nothing, so it is transient (retry). A write lost the same way stays uncertain.
TEST(Forwarding, a_read_whose_answer_was_lost_is_transient_and_a_write_uncertain) {
  Pair p;
  ASSERT_TRUE(p.b1->start());
  ASSERT_TRUE(p.b2->start());
  PublishRecord a;
  a.value = "one";
  a.shard = 1;
  ASSERT_TRUE(publish_sync(*p.b1, {a}));
  p.net.set_answers_lost(NodeId{2}, true);
  auto f = p.b1->fetch(K, ShardIndex{1}, Offset{0}, 10, 1 << 20);
  ASSERT_FALSE(f);
  EXPECT_EQ(f.error().code, Errc::unavailable);
  EXPECT_EQ(f.error().outcome, Outcome::transient) << f.error().to_string();
  auto st = p.b1->shard_stats(K, ShardIndex{1});
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().outcome, Outcome::transient);
  auto pos = p.b1->group_positions(K, "workers");
  ASSERT_FALSE(pos);
  EXPECT_EQ(pos.error().outcome, Outcome::transient);
  auto w = publish_sync(*p.b1, {a});
  ASSERT_FALSE(w);
  EXPECT_EQ(w.error().outcome, Outcome::uncertain) << "the publish was sent: it may have been appended";
  auto g = p.b1->group_fetch(K, ShardIndex{1}, "workers", 10, GroupOptions{});
  ASSERT_FALSE(g);
  EXPECT_EQ(g.error().outcome, Outcome::uncertain) << "a group fetch records deliveries";
  p.net.set_answers_lost(NodeId{2}, false);
}

TEST(Forwarding, a_forwarded_call_is_never_forwarded_again) {
  // Broker 1 thinks broker 2 leads shard 1; broker 2 thinks nobody does (it lags, or the
  // leader moved): broker 2 answers not_leader and does not send the call anywhere.
  Pair p(NodeId{2}, NodeId{1});
  ASSERT_TRUE(p.b1->start());
  ASSERT_TRUE(p.b2->start());
  auto r = p.b1->fetch(K, ShardIndex{1}, Offset{0}, 10, 1 << 20);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::not_leader) << r.error().to_string();
  EXPECT_EQ(p.net.requests(fwd::kFetch), 1);
  PublishRecord a;
  a.value = "x";
  a.shard = 1;
  auto w = publish_sync(*p.b1, {a});
  ASSERT_FALSE(w);
  EXPECT_EQ(w.error().code, Errc::not_leader);
  EXPECT_EQ(p.net.requests(fwd::kPublish), 1);
}

TEST(Forwarding, a_shard_without_a_leader_is_shard_unavailable) {
  Pair p(NodeId{0}, NodeId{0});
  ASSERT_TRUE(p.b1->start());
  auto r = p.b1->fetch(K, ShardIndex{1}, Offset{0}, 10, 1 << 20);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::shard_unavailable);
  EXPECT_NE(r.error().message.find("shard 1"), std::string::npos) << r.error().message;
  EXPECT_EQ(p.b1->leader_address(K, ShardIndex{1}), "");
}

// Regression (review): a call forwarded to the leader of a shard the leader could not open
// answered not_leader, naming the leader itself as the leader; a direct call there answered
// shard_unavailable with the reason. Both now answer the same.
TEST(Forwarding, a_call_forwarded_to_a_leader_that_could_not_open_the_shard_is_shard_unavailable) {
  Pair p;
  auto dir = p.storage2->shard_directory(ShardRef{K, ShardIndex{1}, Incarnation{I1}});
  ASSERT_TRUE(dir) << dir.error().to_string();
  std::filesystem::create_directories(std::filesystem::path(*dir).parent_path());
  std::ofstream(*dir) << "in the way";  // shard 1's open fails on broker 2
  ASSERT_TRUE(p.b1->start());
  ASSERT_TRUE(p.b2->start());
  auto r = p.b1->fetch(K, ShardIndex{1}, Offset{0}, 10, 1 << 20);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::shard_unavailable) << r.error().to_string();
  EXPECT_NE(r.error().message.find("could not open it"), std::string::npos) << r.error().message;
  EXPECT_EQ(p.net.requests(fwd::kFetch), 1);
}

// Regression (review): a publish over two shards whose first answer was "transient,
// nothing written" (a local shard closing) and whose second was "uncertain" (forwarded,
// then the connection was lost) answered transient, so a client retried and could
// duplicate the second shard's batch. The most uncertain outcome is the request's.
TEST(Forwarding, a_request_failed_in_parts_reports_its_most_uncertain_error) {
  std::optional<Error> kept;
  fwd::keep_most_uncertain(kept, Error(Errc::invalid_argument, "definite", Outcome::definite));
  fwd::keep_most_uncertain(kept, Error(Errc::shard_unavailable, "closing", Outcome::transient));
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->outcome, Outcome::transient);
  fwd::keep_most_uncertain(kept, Error(Errc::unavailable, "lost", Outcome::uncertain));
  EXPECT_EQ(kept->outcome, Outcome::uncertain);
  EXPECT_EQ(kept->message, "lost");
  // Once uncertain, a later transient or definite answer does not hide it; among equals
  // the first is kept.
  fwd::keep_most_uncertain(kept, Error(Errc::shard_unavailable, "closing too", Outcome::transient));
  fwd::keep_most_uncertain(kept, Error(Errc::timeout, "second uncertain", Outcome::uncertain));
  EXPECT_EQ(kept->message, "lost");
}

// Regression (review): a forwarded fetch read up to the client's byte limit (http.
// fetch_max_bytes may be 1 GiB), and an answer past the peer frame limit (64 MiB) was
// refused as internal on every retry: the shard could not be read through another broker.
// The leader caps a forwarded read at half the frame limit; the client fetches again.
TEST(Forwarding, a_forwarded_read_answers_at_most_half_a_peer_frame) {
  Pair p;
  ASSERT_TRUE(p.b1->start());
  ASSERT_TRUE(p.b2->start());
  const std::string mib(std::size_t{1} << 20, 'v');
  for (int i = 0; i < 40; ++i) {  // 40 MiB on broker 2's shard 1, one batch per publish
    PublishRecord r;
    r.value = mib;
    r.shard = 1;
    auto w = publish_sync(*p.b2, {r});
    ASSERT_TRUE(w) << w.error().to_string();
  }
  auto via = p.b1->fetch(K, ShardIndex{1}, Offset{0}, 100000, std::size_t{1} << 30);
  ASSERT_TRUE(via) << via.error().to_string();
  std::size_t bytes = 0;
  for (const auto& b : via->batches) bytes += b.size();
  EXPECT_GT(via->batches.size(), 0u);
  EXPECT_LE(bytes, kMaxPeerFrameBytes / 2 + (std::size_t{2} << 20)) << "one batch past the cap at most";
  EXPECT_LT(via->next_offset.value(), 40u);
  auto rest = p.b1->fetch(K, ShardIndex{1}, via->next_offset, 100000, std::size_t{1} << 30);
  ASSERT_TRUE(rest) << rest.error().to_string();
  EXPECT_EQ(rest->next_offset.value(), 40u) << "the rest comes with the next fetch";
}

TEST(Forwarding, codec_round_trips) {
  FetchResult f;
  f.batches = {"abc", std::string("\0\1", 2)};
  f.next_offset = Offset{7};
  f.high_watermark = Offset{9};
  f.log_start = Offset{1};
  auto g = fwd::decode_fetch_result(fwd::encode_fetch_result(f));
  ASSERT_TRUE(g);
  EXPECT_EQ(g->batches, f.batches);
  EXPECT_EQ(g->next_offset.value(), 7u);
  EXPECT_EQ(g->high_watermark.value(), 9u);
  EXPECT_EQ(g->log_start.value(), 1u);
  auto enc = fwd::encode_fetch_result(f);
  EXPECT_FALSE(fwd::decode_fetch_result(enc.substr(0, enc.size() - 1)));  // truncated
  EXPECT_FALSE(fwd::decode_fetch_result(enc + "x"));                      // trailing bytes
  GroupDelivery d;
  d.batches = {"b"};
  d.records = {{Offset{3}, 2}};
  d.more = true;
  auto e = fwd::decode_delivery(fwd::encode_delivery(d, true), true);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->records[0].offset.value(), 3u);
  EXPECT_EQ(e->records[0].delivery, 2u);
  EXPECT_TRUE(e->more);
  // kGroupFetch's answer (an older leader's) has no `more`; each decoder refuses the other.
  auto old = fwd::decode_delivery(fwd::encode_delivery(d, false), false);
  ASSERT_TRUE(old);
  EXPECT_FALSE(old->more);
  EXPECT_FALSE(fwd::decode_delivery(fwd::encode_delivery(d, false), true));
  EXPECT_FALSE(fwd::decode_delivery(fwd::encode_delivery(d, true), false));
}

// A forwarded group fetch that stopped at a bound says so (GroupDelivery::more, ABI 24):
// read as "caught up", it stalled a WebSocket group subscription until an ack timeout. A
// leader on an older build has no handler for kGroupFetchMore: the forwarder asks again
// with kGroupFetch, and calls any delivery with records `more` (an empty one never).
TEST(Forwarding, a_forwarded_group_fetch_says_when_it_stopped_at_a_bound_and_an_older_leader_still_answers) {
  Pair p;
  ASSERT_TRUE(p.b1->start());
  ASSERT_TRUE(p.b2->start());
  std::vector<PublishRecord> recs(5);
  for (auto& r : recs) {
    r.value = "v";
    r.shard = 1;
  }
  ASSERT_TRUE(publish_sync(*p.b1, recs));
  auto g = p.b1->group_fetch(K, ShardIndex{1}, "workers", 3, GroupOptions{});
  ASSERT_TRUE(g) << g.error().to_string();
  EXPECT_EQ(g->records.size(), 3u);
  EXPECT_TRUE(g->more) << "stopped at max_records with 2 more readable";
  g = p.b1->group_fetch(K, ShardIndex{1}, "workers", 3, GroupOptions{});
  ASSERT_TRUE(g) << g.error().to_string();
  EXPECT_EQ(g->records.size(), 2u);
  EXPECT_FALSE(g->more) << "everything readable was delivered";
  EXPECT_EQ(p.net.requests(fwd::kGroupFetch), 0);
  EXPECT_EQ(p.net.requests(fwd::kGroupFetchMore), 2);

  // Broker 2 as an older build: no handler for the new type.
  p.port2.unhandle(fwd::kGroupFetchMore);
  ASSERT_TRUE(publish_sync(*p.b1, recs));
  g = p.b1->group_fetch(K, ShardIndex{1}, "workers", 10, GroupOptions{});
  ASSERT_TRUE(g) << g.error().to_string();
  EXPECT_EQ(g->records.size(), 5u);
  EXPECT_TRUE(g->more) << "an older leader cannot say: a delivery with records may have more";
  g = p.b1->group_fetch(K, ShardIndex{1}, "workers", 10, GroupOptions{});
  ASSERT_TRUE(g) << g.error().to_string();
  EXPECT_TRUE(g->records.empty());
  EXPECT_FALSE(g->more) << "an empty delivery from an older leader is never more";
  EXPECT_EQ(p.net.requests(fwd::kGroupFetch), 2);
}

// --- The leader's pool for forwarded calls is bounded (docs/replication.md "Forwarding") ---
namespace {
// Holds the pool's one thread until released.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool entered = false, open = false;
  void hold() {
    std::unique_lock lk(mu);
    entered = true;
    cv.notify_all();
    cv.wait(lk, [&] { return open; });
  }
  void wait_entered() {
    std::unique_lock lk(mu);
    ASSERT_TRUE(cv.wait_for(lk, std::chrono::seconds(60), [&] { return entered; }));
  }
  void release() {
    std::lock_guard lk(mu);
    open = true;
    cv.notify_all();
  }
};
}  // namespace

TEST(ForwardingWorkers, a_call_posted_to_a_full_queue_is_refused_at_once_and_never_runs) {
  Gate gate;
  std::atomic<int> ran{0};
  std::optional<Error> refused;
  {
    fwd::Workers pool(1, /*max_queued=*/2, std::chrono::minutes(10));
    pool.post([&] { gate.hold(); });
    gate.wait_entered();
    pool.post([&] { ++ran; }, [](Error) { ADD_FAILURE() << "a queued call was refused"; });
    pool.post([&] { ++ran; }, [](Error) { ADD_FAILURE() << "a queued call was refused"; });
    pool.post([&] { ran += 100; }, [&](Error e) { refused = e; });  // the third waiting: refused
    ASSERT_TRUE(refused.has_value()) << "a full queue must refuse inline";
    EXPECT_EQ(refused->code, Errc::unavailable);
    EXPECT_EQ(refused->outcome, Outcome::transient);
    EXPECT_EQ(pool.refused(), 1u);
    gate.release();
  }  // the destructor runs what was queued
  EXPECT_EQ(ran.load(), 2);
}

TEST(ForwardingWorkers, a_call_that_waited_longer_than_its_forwarder_waits_is_refused_not_run) {
  Gate gate;
  std::atomic<int> ran{0};
  std::promise<Error> refused;
  auto f = refused.get_future();
  // A manual clock: the wait is made, not slept (a 1 ms bound on a real clock refused the
  // gate itself under the sanitizers).
  std::atomic<std::int64_t> now_ms{0};
  fwd::Workers pool(1, 16, std::chrono::milliseconds(1000), [&] {
    return std::chrono::steady_clock::time_point(std::chrono::milliseconds(now_ms.load()));
  });
  pool.post([&] { gate.hold(); });
  gate.wait_entered();
  pool.post([&] { ++ran; }, [&](Error e) { refused.set_value(std::move(e)); });
  now_ms += 1001;  // it has now waited longer than its forwarder would
  gate.release();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  const Error e = f.get();
  EXPECT_EQ(e.code, Errc::unavailable);
  EXPECT_EQ(e.outcome, Outcome::transient);
  EXPECT_NE(e.message.find("was not run"), std::string::npos) << e.message;
  EXPECT_EQ(ran.load(), 0);
  EXPECT_EQ(pool.refused(), 1u);
  // One that has not waited that long runs.
  std::promise<void> done;
  pool.post([&] { ++ran; done.set_value(); }, [](Error) { ADD_FAILURE() << "refused a call that did not wait"; });
  ASSERT_EQ(done.get_future().wait_for(std::chrono::seconds(60)), std::future_status::ready);
  EXPECT_EQ(ran.load(), 1);
}
