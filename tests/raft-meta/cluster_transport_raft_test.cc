// A real three-server libraft group on the cluster transport
// (plugins/raft-meta/cluster_transport.h) that a fourth server of another cluster cannot
// join. Everything runs on one uv loop in the test thread; conditions are polled with a
// generous deadline, never slept for.
#include <stdlib.h>

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cluster_transport_fixture.h"

namespace sluice::raft_meta::transport_test {
namespace {

// --- a real libraft group on the transport ---

struct Server {
  Endpoint* ep = nullptr;
  std::string dir;
  struct raft_io io{};
  struct raft_fsm fsm{};
  struct raft raft{};
  bool started = false;
  bool raft_closed = false;
  std::vector<std::string> applied;
};

int fsm_apply(struct raft_fsm* fsm, const struct raft_buffer* buf, void** result) {
  auto* s = static_cast<Server*>(fsm->data);
  s->applied.emplace_back(static_cast<const char*>(buf->base), buf->len);
  *result = nullptr;
  return 0;
}
int fsm_snapshot(struct raft_fsm*, struct raft_buffer* bufs[], unsigned* n) {
  auto* arr = static_cast<struct raft_buffer*>(raft_malloc(sizeof(struct raft_buffer)));
  arr[0].base = raft_calloc(1, 8);
  arr[0].len = 8;
  *bufs = arr;
  *n = 1;
  return 0;
}
int fsm_restore(struct raft_fsm*, struct raft_buffer* buf) {
  raft_free(buf->base);
  return 0;
}

struct Apply {
  struct raft_apply req{};  // the function raft_apply hides the struct's plain name
  bool done = false;
  int status = -1;
};
struct Change {
  struct raft_change req{};
  bool done = false;
  int status = -1;
};

class ClusterTransportRaftTest : public ClusterTransportTest {
 protected:
  void TearDown() override {
    ClusterTransportTest::TearDown();
    std::error_code ec;
    for (auto& s : servers_) fs::remove_all(s->dir, ec);
  }

  void close_all() override {
    for (auto& s : servers_) {
      if (!s->started) continue;
      s->raft.data = s.get();
      raft_close(&s->raft, [](struct raft* r) {
        auto* s = static_cast<Server*>(r->data);
        // As raft_node.cc does: the uv io and the transport are released in raft's close
        // callback, by which time the transport's own close has completed.
        raft_uv_close(&s->io);
        cluster_transport_close(&s->ep->transport);
        s->ep->freed = true;
        s->ep->closed = true;
        s->ep->close_called = true;
        s->raft_closed = true;
      });
    }
    EXPECT_TRUE(run_until([&] {
      for (auto& s : servers_)
        if (s->started && !s->raft_closed) return false;
      return true;
    }));
    ClusterTransportTest::close_all();
  }

  Server& add_server(raft_id id, const std::string& cluster_id) {
    auto s = std::make_unique<Server>();
    std::string tmpl = (fs::temp_directory_path() / "sluice-transport-XXXXXX").string();
    EXPECT_NE(mkdtemp(tmpl.data()), nullptr);
    s->dir = tmpl;
    s->ep = &make("s" + std::to_string(id), cluster_id, id);
    EXPECT_EQ(raft_uv_init(&s->io, &loop_, s->dir.c_str(), &s->ep->transport), 0);
    raft_uv_set_snapshot_compression(&s->io, false);
    s->fsm.version = 1;
    s->fsm.data = s.get();
    s->fsm.apply = fsm_apply;
    s->fsm.snapshot = fsm_snapshot;
    s->fsm.restore = fsm_restore;
    EXPECT_EQ(raft_init(&s->raft, &s->io, &s->fsm, id, s->ep->address.c_str()), 0)
        << raft_errmsg(&s->raft);
    s->raft.data = s.get();
    raft_set_election_timeout(&s->raft, 500);
    raft_set_heartbeat_timeout(&s->raft, 50);
    raft_set_max_catch_up_round_duration(&s->raft, 2000);
    servers_.push_back(std::move(s));
    return *servers_.back();
  }

  void start_server(Server& s) {
    ASSERT_EQ(raft_start(&s.raft), 0) << raft_errmsg(&s.raft);
    s.started = true;
  }

  // The member of `group` every member of `group` agrees is the leader, or null.
  Server* agreed_leader(const std::vector<Server*>& group) {
    Server* leader = nullptr;
    for (Server* s : group)
      if (raft_state(&s->raft) == RAFT_LEADER) {
        if (leader) return nullptr;
        leader = s;
      }
    if (!leader) return nullptr;
    for (Server* s : group) {
      raft_id id = 0;
      const char* addr = nullptr;
      raft_leader(&s->raft, &id, &addr);
      if (id != leader->ep->id) return nullptr;
    }
    return leader;
  }

  void propose(Server& leader, Apply& a, const std::string& entry) {
    ASSERT_EQ(entry.size() % 8, 0u) << "libraft's uv io needs entries of a multiple of 8 bytes";
    struct raft_buffer buf;
    buf.len = entry.size();
    buf.base = raft_malloc(buf.len);
    std::memcpy(buf.base, entry.data(), buf.len);
    a.req.data = &a;
    int rv = raft_apply(&leader.raft, &a.req, &buf, 1, [](struct raft_apply* req, int status, void*) {
      auto* a = static_cast<Apply*>(req->data);
      a->done = true;
      a->status = status;
    });
    if (rv != 0) raft_free(buf.base);
    ASSERT_EQ(rv, 0) << raft_errmsg(&leader.raft);
  }

  std::vector<std::unique_ptr<Server>> servers_;
};

void on_change(struct raft_change* req, int status) {
  auto* c = static_cast<Change*>(req->data);
  c->done = true;
  c->status = status;
}

TEST_F(ClusterTransportRaftTest, ThreeMembersFormAGroupAndAMemberOfAnotherClusterCannotJoin) {
  std::vector<Server*> group;
  for (raft_id id = 1; id <= 3; id++) group.push_back(&add_server(id, "cluster-A"));
  struct raft_configuration conf;
  raft_configuration_init(&conf);
  for (Server* s : group)
    ASSERT_EQ(raft_configuration_add(&conf, s->ep->id, s->ep->address.c_str(), RAFT_VOTER), 0);
  for (Server* s : group) ASSERT_EQ(raft_bootstrap(&s->raft, &conf), 0) << raft_errmsg(&s->raft);
  raft_configuration_close(&conf);
  for (Server* s : group) start_server(*s);

  Server* leader = nullptr;
  ASSERT_TRUE(run_until([&] { return (leader = agreed_leader(group)) != nullptr; }))
      << "no leader elected over the cluster transport";

  Apply first;
  propose(*leader, first, "entry-one-000001");  // 16 bytes
  ASSERT_TRUE(run_until([&] {
    if (!first.done) return false;
    for (Server* s : group)
      if (s->applied.size() < 1) return false;
    return true;
  }));
  ASSERT_EQ(first.status, 0);
  for (Server* s : group) {
    ASSERT_EQ(s->applied.size(), 1u) << "server " << s->ep->id;
    EXPECT_EQ(s->applied[0], "entry-one-000001");
    EXPECT_EQ(s->ep->warnings(), 0) << "server " << s->ep->id;
  }

  // A fourth server of another cluster: added, then assigned voter. The leader's
  // connections to it are refused, so it never catches up.
  Server& foreign = add_server(4, "cluster-B");
  start_server(foreign);
  Change add;
  add.req.data = &add;
  ASSERT_EQ(raft_add(&leader->raft, &add.req, 4, foreign.ep->address.c_str(), on_change), 0);
  ASSERT_TRUE(run_until([&] { return add.done; }));
  ASSERT_EQ(add.status, 0) << "adding a spare commits on the three members";

  Change assign;
  assign.req.data = &assign;
  ASSERT_EQ(raft_assign(&leader->raft, &assign.req, 4, RAFT_VOTER, on_change), 0)
      << raft_errmsg(&leader->raft);
  const std::string leader_side =
      "refused raft connection: peer cluster id cluster-B, this member's cluster id cluster-A";
  const std::string foreign_side =
      "refused raft connection: peer cluster id cluster-A, this member's cluster id cluster-B";
  ASSERT_TRUE(run_until([&] {
    return leader->ep->logged(LogLevel::warn, leader_side) &&
           foreign.ep->logged(LogLevel::warn, foreign_side);
  })) << "both sides of the refused connection log both ids";
  // libraft gives up the promotion (max_catch_up_round_duration, 2 s here).
  ASSERT_TRUE(run_until([&] { return assign.done; }));
  EXPECT_NE(assign.status, 0) << "the foreign server must not become a voter";
  EXPECT_TRUE(foreign.ep->accepted.empty());

  // The group goes on; the foreign server has received nothing.
  Server* leader2 = nullptr;
  ASSERT_TRUE(run_until([&] { return (leader2 = agreed_leader(group)) != nullptr; }));
  Apply second;
  propose(*leader2, second, "entry-two-000002");
  ASSERT_TRUE(run_until([&] {
    if (!second.done) return false;
    for (Server* s : group)
      if (s->applied.size() < 2) return false;
    return true;
  }));
  EXPECT_EQ(second.status, 0);
  for (Server* s : group) EXPECT_EQ(s->applied.back(), "entry-two-000002");
  EXPECT_TRUE(foreign.applied.empty());
  EXPECT_EQ(raft_last_applied(&foreign.raft), 0u);
  raft_id foreign_leader = 0;
  const char* foreign_leader_addr = nullptr;
  raft_leader(&foreign.raft, &foreign_leader, &foreign_leader_addr);
  EXPECT_EQ(foreign_leader, 0u) << "the foreign server never heard from the group";
  for (unsigned i = 0; i < leader2->raft.configuration.n; i++) {
    const auto& srv = leader2->raft.configuration.servers[i];
    if (srv.id == 4) {
      EXPECT_NE(srv.role, RAFT_VOTER);
    }
  }
}

}  // namespace
}  // namespace sluice::raft_meta::transport_test
