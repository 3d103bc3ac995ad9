// RaftNode group commit (level 19, raft_node.h `combine`): proposals that arrive while the
// leader's append is in flight share one entry, each caller gets its own part's result, a
// lone proposal is its own entry, and a combined entry refused as a whole is proposed
// again part by part. One real libraft server on the uv io (a temp directory).
//
// Deterministic: the state machine blocks in apply until the test has seen the other
// proposals reach the node's task queue, so they are all taken in one round of the loop
// (polled with generous timeouts, never slept on).
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "raft_node.h"

namespace sluice::raft_meta {
namespace {

constexpr auto kWait = std::chrono::seconds(30);

bool poll_until(const std::function<bool()>& f) {
  const auto end = std::chrono::steady_clock::now() + kWait;
  while (std::chrono::steady_clock::now() < end) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return f();
}

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

// Entries are "1:<part>" alone and "B:<part>|<part>|..." combined. The result carries the
// part in `feature`. It can block in apply (gate) and refuse combined entries (conflict).
class PartsFsm final : public RaftStateMachine {
 public:
  ApplyResult apply(std::uint64_t, std::string_view entry) override {
    while (!entry.empty() && entry.back() == ' ') entry.remove_suffix(1);
    {
      std::unique_lock lk(mu_);
      entries_.emplace_back(entry);
      if (block_next_) {
        block_next_ = false;
        blocked_ = true;
        cv_.notify_all();
        cv_.wait(lk, [&] { return !blocked_; });
      }
    }
    ApplyResult r;
    if (entry.substr(0, 2) == "1:") {
      r.feature = std::string(entry.substr(2));
      return r;
    }
    if (refuse_combined_) {
      r.error = Error(Errc::conflict, "refused as a whole");
      return r;
    }
    std::string_view rest = entry.substr(2);
    while (true) {
      auto bar = rest.find('|');
      ApplyResult part;
      part.feature = std::string(rest.substr(0, bar));
      r.inner.push_back(std::move(part));
      if (bar == std::string_view::npos) break;
      rest.remove_prefix(bar + 1);
    }
    return r;
  }
  std::string snapshot() override { return "parts"; }
  Result<void> restore(std::string_view) override { return {}; }

  void block_next() {
    std::lock_guard lk(mu_);
    block_next_ = true;
  }
  bool wait_blocked() {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, kWait, [&] { return blocked_; });
  }
  void release() {
    std::lock_guard lk(mu_);
    blocked_ = false;
    cv_.notify_all();
  }
  std::vector<std::string> entries() {
    std::lock_guard lk(mu_);
    return entries_;
  }
  bool refuse_combined_ = false;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool block_next_ = false, blocked_ = false;
  std::vector<std::string> entries_;
};

class RaftNodeBatch : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("sluice-raft-node-batch-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    RaftNodeOptions o;
    o.id = 1;
    address_ = "127.0.0.1:" + std::to_string(free_port());
    o.address = address_;
    o.dir = dir_.string();
    o.combine = [](const std::vector<std::string>& parts) {
      std::string e = "B:";
      for (std::size_t i = 0; i < parts.size(); ++i) e += (i ? "|" : "") + parts[i].substr(2);
      return e;
    };
    o.may_combine = [this] { return allow_combine_.load(); };
    o.max_batch_commands = 64;
    node_ = std::make_unique<RaftNode>(std::move(o), fsm_);
    ASSERT_TRUE(node_->start().ok());
    ASSERT_TRUE(poll_until([&] { return node_->role() == RaftRole::leader; }));
    ASSERT_TRUE(node_->barrier(kWait).ok());
  }
  void TearDown() override {
    fsm_.release();
    if (node_) node_->stop();
    std::filesystem::remove_all(dir_);
  }

  // Proposal 0 is applied while the others reach the node: they are taken together.
  std::vector<Result<ApplyResult>> propose_while_blocked(int n) {
    std::vector<Result<ApplyResult>> results(n, Error(Errc::internal, "not run"));
    fsm_.block_next();
    std::vector<std::thread> ts;
    ts.emplace_back([&] { results[0] = node_->apply("1:p0", kWait, true); });
    EXPECT_TRUE(fsm_.wait_blocked());
    for (int i = 1; i < n; ++i)
      ts.emplace_back([&, i] { results[i] = node_->apply("1:p" + std::to_string(i), kWait, true); });
    EXPECT_TRUE(poll_until([&] { return node_->queued_tasks() == static_cast<std::size_t>(n - 1); }));
    fsm_.release();
    for (auto& t : ts) t.join();
    return results;
  }

  std::filesystem::path dir_;
  std::string address_;
  std::atomic<bool> allow_combine_{true};
  PartsFsm fsm_;
  std::unique_ptr<RaftNode> node_;
};

TEST_F(RaftNodeBatch, ProposalsDuringAnAppendShareOneEntryAndEachGetsItsOwnResult) {
  auto lone = node_->apply("1:alone", kWait, true);
  ASSERT_TRUE(lone.ok());
  EXPECT_EQ(lone->feature, "alone");
  const std::size_t before = fsm_.entries().size();
  EXPECT_EQ(fsm_.entries().back(), "1:alone") << "a proposal with nothing in flight goes alone";

  auto results = propose_while_blocked(16);
  for (int i = 0; i < 16; ++i) {
    ASSERT_TRUE(results[i].ok()) << i << ": " << results[i].error().to_string();
    EXPECT_TRUE(results[i]->ok());
    EXPECT_EQ(results[i]->feature, "p" + std::to_string(i));
  }
  auto entries = fsm_.entries();
  entries.erase(entries.begin(), entries.begin() + static_cast<std::ptrdiff_t>(before));
  // p0 alone; of the 15 taken together, the first goes alone (nothing in flight) and the
  // other 14 wait for its append and share one entry.
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[0], "1:p0");
  EXPECT_EQ(entries[1].substr(0, 2), "1:");
  EXPECT_EQ(entries[2].substr(0, 2), "B:");
  EXPECT_EQ(std::count(entries[2].begin(), entries[2].end(), '|'), 13);
}

TEST_F(RaftNodeBatch, ACombinedEntryRefusedAsAWholeIsProposedAgainPartByPart) {
  fsm_.refuse_combined_ = true;
  auto results = propose_while_blocked(8);
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(results[i].ok()) << i << ": " << results[i].error().to_string();
    EXPECT_TRUE(results[i]->ok()) << i;
    EXPECT_EQ(results[i]->feature, "p" + std::to_string(i));
  }
  int combined = 0, alone = 0;
  for (auto& e : fsm_.entries()) (e.substr(0, 2) == "B:" ? combined : alone)++;
  EXPECT_EQ(combined, 1);
  EXPECT_GE(alone, 8);
}

// raft-meta answers may_combine from the group level: below 19, no combined entry at all.
TEST_F(RaftNodeBatch, NothingIsCombinedWhileMayCombineSaysNo) {
  allow_combine_ = false;
  auto results = propose_while_blocked(8);
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(results[i].ok()) << i << ": " << results[i].error().to_string();
    EXPECT_EQ(results[i]->feature, "p" + std::to_string(i));
  }
  for (auto& e : fsm_.entries()) EXPECT_NE(e.substr(0, 2), "B:");
}

TEST_F(RaftNodeBatch, UnbatchableProposalsAreAlwaysAlone) {
  std::vector<Result<ApplyResult>> results(6, Error(Errc::internal, "not run"));
  fsm_.block_next();
  std::vector<std::thread> ts;
  ts.emplace_back([&] { results[0] = node_->apply("1:q0", kWait, false); });
  ASSERT_TRUE(fsm_.wait_blocked());
  for (int i = 1; i < 6; ++i)
    ts.emplace_back([&, i] { results[i] = node_->apply("1:q" + std::to_string(i), kWait, false); });
  ASSERT_TRUE(poll_until([&] { return node_->queued_tasks() == 5u; }));
  fsm_.release();
  for (auto& t : ts) t.join();
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(results[i].ok());
    EXPECT_EQ(results[i]->feature, "q" + std::to_string(i));
  }
  for (auto& e : fsm_.entries()) EXPECT_NE(e.substr(0, 2), "B:");
}

// Regression (review): every member kept the results of its last 4,096 applied entries
// until a proposer here claimed them, which on a follower, or for the entries a restart
// replays, is never; one result may carry a 1,024-shard stream's assignments. A result is
// kept only while this node has a proposal in flight.
TEST_F(RaftNodeBatch, ResultsOfEntriesNobodyHereProposedAreNotKept) {
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(node_->apply("1:r" + std::to_string(i), kWait).ok());
  auto n = node_->unclaimed_results(kWait);
  ASSERT_TRUE(n.ok()) << n.error().to_string();
  EXPECT_EQ(*n, 0u) << "claimed results were kept";
  const auto applied = node_->last_applied();
  node_->stop();
  node_.reset();
  // A restart replays the log: nobody here proposed those entries.
  RaftNodeOptions o;
  o.id = 1;
  o.address = address_;
  o.dir = dir_.string();
  node_ = std::make_unique<RaftNode>(std::move(o), fsm_);
  ASSERT_TRUE(node_->start().ok());
  ASSERT_TRUE(poll_until([&] { return node_->last_applied() >= applied; }));
  n = node_->unclaimed_results(kWait);
  ASSERT_TRUE(n.ok()) << n.error().to_string();
  EXPECT_EQ(*n, 0u) << "results of replayed entries were kept";
}

// Regression (review): a held raft-meta member answers every proposal `unavailable`, but
// its log is complete, so it wins elections like any member; as leader it made the whole
// group unavailable until an operator stepped in. A leader whose step_down_wanted says yes
// hands leadership to another voter, and the group commits again under it.
TEST(RaftNodeStepDown, ALeaderThatCannotServeHandsLeadershipToAnotherVoter) {
  const auto base = std::filesystem::temp_directory_path() /
                    ("sluice-raft-step-down-" + std::to_string(::getpid()));
  std::filesystem::remove_all(base);
  PartsFsm fsms[3];
  std::unique_ptr<RaftNode> nodes[3];
  std::string addrs[3];
  std::atomic<bool> want{false};
  for (int i = 0; i < 3; ++i) {
    const auto dir = base / std::to_string(i + 1);
    std::filesystem::create_directories(dir);
    RaftNodeOptions o;
    o.id = i + 1;
    addrs[i] = "127.0.0.1:" + std::to_string(free_port());
    o.address = addrs[i];
    o.dir = dir.string();
    o.bootstrap = i == 0;
    o.election_timeout_ms = 500;
    o.heartbeat_timeout_ms = 50;
    if (i == 0) o.step_down_wanted = [&want] { return want.load(); };
    nodes[i] = std::make_unique<RaftNode>(std::move(o), fsms[i]);
    ASSERT_TRUE(nodes[i]->start().ok());
  }
  struct Stop {
    std::unique_ptr<RaftNode>* n;
    std::filesystem::path base;
    ~Stop() {
      for (int i = 0; i < 3; ++i)
        if (n[i]) n[i]->stop();
      std::filesystem::remove_all(base);
    }
  } stop{nodes, base};
  ASSERT_TRUE(poll_until([&] { return nodes[0]->role() == RaftRole::leader; }));
  ASSERT_TRUE(nodes[0]->barrier(kWait).ok());
  for (int i = 1; i < 3; ++i) {
    auto a = nodes[0]->add_voter(i + 1, addrs[i], kWait);
    ASSERT_TRUE(a.ok()) << a.error().to_string();
  }
  ASSERT_TRUE(nodes[0]->apply("1:before", kWait).ok());

  want = true;
  int leader = -1;
  ASSERT_TRUE(poll_until([&] {
    for (int i = 1; i < 3; ++i)
      if (nodes[i]->role() == RaftRole::leader) leader = i;
    return leader > 0;
  })) << "node 1 kept leading";
  auto r = nodes[leader]->apply("1:after", kWait);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_TRUE(poll_until([&] {
    auto e = fsms[0].entries();
    return std::find(e.begin(), e.end(), "1:after") != e.end();
  })) << "the old leader did not follow the new one";
  EXPECT_NE(nodes[0]->role(), RaftRole::leader);
}

}  // namespace
}  // namespace sluice::raft_meta
