// Mixed-level raft-meta groups on libraft's in-memory fixture (docs/metadata-raft-design.md,
// "The mixed groups"). Each fixture server runs a CatalogFsm at its own level (its
// "build"), and proposes exactly what a member of that level proposes: stamp_entry() with
// its own level and the group level read from its applied catalog (the replicated member
// records), and the finalize gate as that level has it. A level-8 member has no gate: it
// reads any finalize as an ordinary one and proposes it (the felix hole).
//
// After each scenario: every member's state hash is identical, no member is held, and
// where a level-8 member is in the group, a fresh level-8 FSM replaying the committed log
// computes the same state (what level 8 stores, every member stores).
//
// Deterministic: the fixture's logical clock only; the op sequence is seeded and printed.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

extern "C" {
#include <raft.h>
#include <raft/fixture.h>
}

#include "catalog_fsm.h"
#include "command.h"
#include "proposer.h"
#include "sluice/features.h"

namespace sluice::raft_meta {
namespace {

using ApplyReq = struct raft_apply;
constexpr unsigned kMaxMsecs = 120000;
const std::string kStreamInc(kStreamIncarnations);
const std::string kCacheInc(kCacheIncarnations);
const std::string kRepl(kReplicatedShards);
const std::string kReassign(kShardReassignment);
const std::string kCountersF(kCounters);
const std::string kCompactF(kCacheCompaction);

class Group;

struct Server {
  Group* g = nullptr;
  unsigned i = 0;
  MetadataLevel level;
  std::unique_ptr<CatalogFsm> fsm;
  struct raft_fsm rfsm {};
  std::map<std::uint64_t, ApplyResult> results;
};

struct Pending {
  ApplyReq req{};
  bool done = false;
  int status = -1;
  std::uint64_t index = 0;
};

class Group {
 public:
  Group(std::vector<unsigned> levels, std::uint64_t seed) : rng_(seed), seed_(seed) {
    for (auto l : levels) levels_.push_back(MetadataLevel{l});
  }
  ~Group() {
    if (up_) raft_fixture_close(&f_);
  }

  std::string tag() const {
    std::string s = "levels=";
    for (auto l : levels_) s += std::to_string(l.value()) + "+";
    s.pop_back();
    return s + " seed=" + std::to_string(seed_);
  }

  // Bootstraps the group (server 0 leads), initializes the catalog with `finalize` and
  // records every member with its level (what joins do).
  void start(std::vector<std::string> finalize) {
    ASSERT_EQ(raft_fixture_initialize(&f_), 0);
    up_ = true;
    for (unsigned i = 0; i < levels_.size(); ++i) {
      auto s = std::make_unique<Server>();
      s->g = this;
      s->i = i;
      s->level = levels_[i];
      s->fsm = std::make_unique<CatalogFsm>(kDefaultChangeRetention, levels_[i]);
      s->rfsm.version = 1;
      s->rfsm.data = s.get();
      s->rfsm.apply = fsm_apply;
      s->rfsm.snapshot = fsm_snapshot;
      s->rfsm.restore = fsm_restore;
      servers_.push_back(std::move(s));
      ASSERT_EQ(raft_fixture_grow(&f_, &servers_.back()->rfsm), 0);
    }
    struct raft_configuration conf;
    ASSERT_EQ(raft_fixture_configuration(&f_, static_cast<unsigned>(levels_.size()), &conf), 0);
    ASSERT_EQ(raft_fixture_bootstrap(&f_, &conf), 0);
    raft_configuration_close(&conf);
    for (unsigned i = 0; i < levels_.size(); ++i)
      raft_set_snapshot_threshold(raft_fixture_get(&f_, i), 1'000'000u);
    ASSERT_EQ(raft_fixture_start(&f_), 0);
    raft_fixture_elect(&f_, 0);
    Command init = Command::init_cluster("11111111-2222-4333-8444-555555555555");
    init.finalize_features = std::move(finalize);
    ASSERT_TRUE(propose_raw(0, init).ok());
    ASSERT_TRUE(propose_raw(0, Command::create_tenant("t")).ok());
    ASSERT_TRUE(propose_raw(0, Command::create_namespace("t", "n")).ok());
    for (unsigned i = 0; i < levels_.size(); ++i) {
      JoinRequest j{NodeId{i + 1}, "10.0.0." + std::to_string(i + 1) + ":7800",
                    "10.0.0." + std::to_string(i + 1) + ":7801", levels_[i]};
      ASSERT_TRUE(propose_raw(0, Command::join_member(j)).ok());
    }
  }

  unsigned size() const { return static_cast<unsigned>(servers_.size()); }
  MetadataLevel level(unsigned i) const { return levels_[i]; }
  CatalogFsm& fsm(unsigned i) { return *servers_[i]->fsm; }

  // Makes server i the leader.
  void lead(unsigned i) {
    if (raft_fixture_leader_index(&f_) == i) return;
    if (raft_fixture_leader_index(&f_) < size()) raft_fixture_depose(&f_);
    ASSERT_TRUE(raft_fixture_step_until_has_no_leader(&f_, kMaxMsecs));
    raft_fixture_elect(&f_, i);
    ASSERT_EQ(raft_fixture_leader_index(&f_), i);
  }

  // What server i proposes for `c` (rule 2), from its own applied catalog.
  ProposerView view(unsigned i) {
    ProposerView v;
    v.own = levels_[i];
    auto& f = fsm(i);
    v.group = std::min(v.own, f.recorded_group_level().value_or(v.own));
    v.stream_incarnations_finalized = f.is_finalized(kStreamIncarnations);
    v.cache_incarnations_finalized = f.is_finalized(kCacheIncarnations);
    v.replicated_shards_finalized = f.is_finalized(kReplicatedShards);
    v.shard_reassignment_finalized = f.is_finalized(kShardReassignment);
    v.counters_finalized = f.is_finalized(kCounters);
    return v;
  }

  // Server i (made leader) proposes `c` as a member of its level would. conflict: refused
  // by the proposer (nothing appended).
  Result<ApplyResult> propose(unsigned i, Command c) {
    lead(i);
    const std::int64_t clock = 1'700'000'000'000'000 +
                               static_cast<std::int64_t>(raft_fixture_time(&f_)) * 1000 +
                               static_cast<std::int64_t>(rng_() % 1000);
    if (auto s = stamp_entry(c, view(i), clock); !s.ok()) return s.error();
    return propose_raw(i, c);
  }

  // The finalize as server i's level has it: level 8 proposes it unconditionally (it does
  // not know the gate); 10 and 14 check the group level first.
  Result<ApplyResult> finalize(unsigned i, const std::string& feature) {
    lead(i);
    if (levels_[i] >= kStreamIncarnationsLevel)
      if (auto g = check_finalize(feature, view(i).group, {}); !g.ok()) return g.error();
    Command c = Command::finalize_feature(feature);
    c.level = levels_[i].value();
    return propose_raw(i, c);
  }

  Result<ApplyResult> propose_raw(unsigned i, const Command& c) { return propose_bytes(i, encode_command(c)); }

  // Server i (made leader) proposes the commands as one batch entry, each stamped as that
  // member would stamp it alone (level 19, what RaftNode's group commit combines).
  Result<ApplyResult> propose_batch(unsigned i, std::vector<Command> cs) {
    lead(i);
    std::vector<std::string> parts;
    for (auto& c : cs) {
      if (auto s = stamp_entry(c, view(i), 1'700'000'000'000'000 + static_cast<std::int64_t>(rng_() % 1000));
          !s.ok())
        return s.error();
      parts.push_back(encode_command(c));
    }
    return propose_bytes(i, encode_batch(parts, levels_[i].value()));
  }

  Result<ApplyResult> propose_bytes(unsigned i, std::string entry) {
    entry.append((8 - entry.size() % 8) % 8, ' ');
    auto p = std::make_unique<Pending>();
    p->req.data = p.get();
    struct raft_buffer buf;
    buf.len = entry.size();
    buf.base = raft_malloc(entry.size());
    std::memcpy(buf.base, entry.data(), entry.size());
    int rv = raft_apply(raft_fixture_get(&f_, i), &p->req, &buf, 1, apply_cb);
    if (rv != 0) {
      raft_free(buf.base);
      return Error(Errc::not_leader, "raft_apply failed");
    }
    Pending* raw = p.get();
    pending_.push_back(std::move(p));
    raft_fixture_step_until(
        &f_, [](struct raft_fixture*, void* a) { return static_cast<Pending*>(a)->done; }, raw, kMaxMsecs);
    if (!raw->done || raw->status != 0) return Error(Errc::unavailable, "not committed");
    // Every server applies it before the next step of the scenario.
    for (unsigned s = 0; s < size(); ++s)
      raft_fixture_step_until_applied(&f_, s, raw->index, kMaxMsecs);
    auto& res = servers_[i]->results;
    auto it = res.find(raw->index);
    if (it == res.end()) return Error(Errc::internal, "no result");
    return it->second;
  }

  // Every server applied everything; states identical; nobody held.
  void expect_converged() {
    raft_fixture_step_until_elapsed(&f_, 2000);
    const auto h0 = fsm(0).state_hash();
    for (unsigned i = 0; i < size(); ++i) {
      EXPECT_FALSE(fsm(i).held().has_value()) << tag() << ": server " << i << " (level "
                                              << levels_[i].value() << ") is held: "
                                              << fsm(i).held()->reason;
      EXPECT_EQ(fsm(i).applied(), fsm(0).applied()) << tag() << ": server " << i;
      EXPECT_EQ(fsm(i).state_hash(), h0) << tag() << ": server " << i << " (level "
                                          << levels_[i].value() << ") diverged";
    }
  }

  // A fresh FSM at `level` replaying every committed entry (a restarted member).
  std::unique_ptr<CatalogFsm> replay(MetadataLevel level) {
    auto r = std::make_unique<CatalogFsm>(kDefaultChangeRetention, level);
    for (auto& [index, bytes] : log_) r->apply(index, bytes);
    return r;
  }
  // ... computes the members' state.
  void expect_replay_at(MetadataLevel level) {
    auto r = replay(level);
    EXPECT_FALSE(r->held().has_value()) << tag();
    EXPECT_EQ(r->state_hash(), fsm(0).state_hash())
        << tag() << ": a level-" << level.value() << " replay of the log differs";
  }

  // Server i is upgraded to `level` (a restart on a newer build): it runs at the new level
  // and announces it, as a restarted member does, through a join of the same id.
  void upgrade(unsigned i, MetadataLevel level) {
    levels_[i] = level;
    servers_[i]->fsm->set_capability(level);
    JoinRequest j{NodeId{i + 1}, "10.0.0." + std::to_string(i + 1) + ":7800",
                  "10.0.0." + std::to_string(i + 1) + ":7801", level};
    auto r = propose_raw(raft_fixture_leader_index(&f_), Command::join_member(j));
    ASSERT_TRUE(r.ok() && r->ok()) << tag();
  }

  std::mt19937_64& rng() { return rng_; }

 private:
  static int fsm_apply(struct raft_fsm* fsm, const struct raft_buffer* buf, void** result) {
    auto* s = static_cast<Server*>(fsm->data);
    std::uint64_t index = raft_last_applied(raft_fixture_get(&s->g->f_, s->i)) + 1;
    std::string_view bytes(static_cast<const char*>(buf->base), buf->len);
    s->g->log_.emplace(index, std::string(bytes));
    s->results[index] = s->fsm->apply(index, bytes);
    *result = nullptr;
    return 0;
  }
  static int fsm_snapshot(struct raft_fsm* fsm, struct raft_buffer* bufs[], unsigned* n) {
    auto* s = static_cast<Server*>(fsm->data);
    std::string image = s->fsm->snapshot();
    if (image.empty()) return RAFT_NOMEM;
    auto* arr = static_cast<struct raft_buffer*>(raft_malloc(sizeof(struct raft_buffer)));
    arr[0].base = raft_malloc(image.size());
    std::memcpy(arr[0].base, image.data(), image.size());
    arr[0].len = image.size();
    *bufs = arr;
    *n = 1;
    return 0;
  }
  static int fsm_restore(struct raft_fsm* fsm, struct raft_buffer* buf) {
    auto* s = static_cast<Server*>(fsm->data);
    if (!s->fsm->restore(std::string_view(static_cast<const char*>(buf->base), buf->len)).ok())
      return RAFT_CORRUPT;
    raft_free(buf->base);
    return 0;
  }
  static void apply_cb(ApplyReq* req, int status, void*) {
    auto* p = static_cast<Pending*>(req->data);
    p->done = true;
    p->status = status;
    p->index = req->index;
  }

  struct raft_fixture f_ {};
  bool up_ = false;
  std::vector<MetadataLevel> levels_;
  std::vector<std::unique_ptr<Server>> servers_;
  std::vector<std::unique_ptr<Pending>> pending_;
  std::map<std::uint64_t, std::string> log_;  // committed entries by index (any server's)
  std::mt19937_64 rng_;
  std::uint64_t seed_;
};

StreamSpec one_shard() {
  StreamSpec s;
  s.shards = 1;
  return s;
}

// Creates, deletes and recreates of colliding names (streams and caches), each proposed by
// a seeded choice of member. Returns the stream incarnations acknowledged per name.
std::map<std::string, std::vector<std::uint64_t>> churn(Group& g, int ops) {
  std::map<std::string, std::vector<std::uint64_t>> incs;
  std::map<std::string, bool> exists;
  const char* names[] = {"orders", "payments", "audit"};
  for (int k = 0; k < ops; ++k) {
    const unsigned who = static_cast<unsigned>(g.rng()() % g.size());
    const std::string name = names[g.rng()() % 3];
    const bool cache = g.rng()() % 4 == 0;
    const std::string key = (cache ? "cache:" : "stream:") + name;
    StreamKey sk{"t", "n", name};
    Result<ApplyResult> r = Error(Errc::internal, "");
    if (exists[key])
      r = cache ? g.propose(who, Command::delete_cache(sk)) : g.propose(who, Command::delete_stream(sk));
    else
      r = cache ? g.propose(who, Command::create_cache(sk, CacheSpec{}, 0))
                : g.propose(who, Command::create_stream(sk, one_shard(), 0));
    if (!r.ok()) {
      // Only the proposer-side refusal rule 2 allows: a cache create through an upgraded
      // member while the group is below 14.
      EXPECT_EQ(r.error().code, Errc::conflict) << g.tag() << ": " << r.error().to_string();
      EXPECT_TRUE(cache && g.level(who) >= kFlaggedEntriesLevel) << g.tag() << ": " << r.error().to_string();
      continue;
    }
    EXPECT_TRUE(r->ok()) << g.tag() << " op " << k << ": " << r->error->to_string();
    if (!r->ok()) continue;
    if (!exists[key] && !cache) incs[name].push_back(r->stream.incarnation.value());
    exists[key] = !exists[key];
  }
  return incs;
}

std::uint64_t seed_for(const char* scenario) {
  std::uint64_t s = 0;
  for (const char* p = scenario; *p; ++p) s = s * 131 + static_cast<unsigned char>(*p);
  std::cout << "[ mixed    ] " << scenario << " seed=" << s << "\n";
  return s;
}

void expect_all_at_zero(Group& g) {
  auto snap = g.fsm(0).catalog_snapshot();
  for (auto& s : snap.streams) EXPECT_EQ(s.incarnation, Incarnation{0}) << g.tag() << " " << s.key.to_string();
  for (auto& c : snap.caches) EXPECT_EQ(c.incarnation, Incarnation{0}) << g.tag() << " " << c.key.to_string();
  EXPECT_TRUE(snap.tombstones.empty()) << g.tag();
  EXPECT_TRUE(snap.cache_tombstones.empty()) << g.tag();
}

// 8 + 14: the group is at 8. Upgraded members refuse to finalize and refuse cache creates;
// every create proposes 0 unflagged; states equal what level 8 stores.
TEST(MixedLevels, EightAndFourteen) {
  Group g({8, 14, 14}, seed_for("8+14"));
  g.start({});
  EXPECT_EQ(g.fsm(0).level(), MetadataLevel{8});
  auto fin = g.finalize(1, kStreamInc);
  ASSERT_FALSE(fin.ok());
  EXPECT_EQ(fin.error().code, Errc::conflict) << fin.error().message;
  EXPECT_FALSE(g.finalize(2, kCacheInc).ok());
  auto cache = g.propose(2, Command::create_cache({"t", "n", "c"}, CacheSpec{}, 0));
  ASSERT_FALSE(cache.ok());
  EXPECT_EQ(cache.error().code, Errc::conflict);
  churn(g, 40);
  g.expect_converged();
  g.expect_replay_at(MetadataLevel{8});
  expect_all_at_zero(g);
  EXPECT_EQ(g.fsm(0).level_floor(), MetadataLevel{8});
}

// 10 + 14: stream_incarnations can be finalized through either member; cache_incarnations
// and cache creates through the level-14 member are refused; no flagged entry is written.
TEST(MixedLevels, TenAndFourteen) {
  Group g({10, 14, 14}, seed_for("10+14"));
  g.start({});
  EXPECT_FALSE(g.finalize(2, kCacheInc).ok());
  auto fin = g.finalize(1, kStreamInc);
  ASSERT_TRUE(fin.ok()) << fin.error().to_string();
  ASSERT_TRUE(fin->ok());
  auto incs = churn(g, 60);
  g.expect_converged();
  g.expect_replay_at(MetadataLevel{10});
  EXPECT_EQ(g.fsm(0).level_floor(), MetadataLevel{8}) << "no flagged entry may be written";
  for (auto& [name, v] : incs)
    for (std::size_t k = 1; k < v.size(); ++k)
      EXPECT_GT(v[k], v[k - 1]) << g.tag() << ": " << name << " incarnations must rise";
  for (auto& c : g.fsm(0).catalog_snapshot().caches) EXPECT_EQ(c.incarnation, Incarnation{0});
}

// 8 + 10 + 14: at 8 as 8 + 14; then the level-8 member is upgraded to 10 (its level record
// changes through a join, as a restarted member announces itself) and the group behaves as
// 10 + 14: stream_incarnations can be finalized, incarnations rise; entries written before
// stay decided as they were.
TEST(MixedLevels, EightTenAndFourteen) {
  Group g({8, 10, 14}, seed_for("8+10+14"));
  g.start({});
  EXPECT_FALSE(g.finalize(1, kStreamInc).ok());
  EXPECT_FALSE(g.finalize(2, kStreamInc).ok());
  churn(g, 30);
  g.expect_converged();
  g.expect_replay_at(MetadataLevel{8});
  expect_all_at_zero(g);
  const auto before = g.fsm(0).catalog_snapshot();

  // The level-8 member is upgraded to 10: the group is at 10 and behaves as 10 + 14.
  g.upgrade(0, MetadataLevel{10});
  EXPECT_EQ(g.fsm(2).level(), MetadataLevel{10});
  EXPECT_FALSE(g.finalize(2, kCacheInc).ok());
  auto fin = g.finalize(2, kStreamInc);
  ASSERT_TRUE(fin.ok()) << fin.error().to_string();
  auto incs = churn(g, 40);
  g.expect_converged();
  g.expect_replay_at(MetadataLevel{10});
  EXPECT_EQ(g.fsm(0).level_floor(), MetadataLevel{8});
  for (auto& [name, v] : incs)
    for (std::size_t k = 1; k < v.size(); ++k) EXPECT_GT(v[k], v[k - 1]) << name;
  // Entries written before the upgrade stay decided as they were: a stream created then and
  // never touched since is still at 0.
  auto after = g.fsm(0).catalog_snapshot();
  for (auto& s : before.streams) {
    for (auto& t : after.streams) {
      if (t.key == s.key && t.created_seq == s.created_seq) {
        EXPECT_EQ(t.incarnation, Incarnation{0});
      }
    }
  }
}

// The seed's hole: a level-8 member proposes the finalize while upgraded members exist.
// Creates and deletes follow through every member; all states stay identical, and they are
// what level 8 stores (every stream at 0, no tombstone).
TEST(MixedLevels, finalize_proposed_by_an_old_member_does_not_split_the_group) {
  Group g({8, 14, 14}, seed_for("hole"));
  g.start({});
  auto fin = g.finalize(0, kStreamInc);  // the level-8 member has no gate
  ASSERT_TRUE(fin.ok()) << fin.error().to_string();
  ASSERT_TRUE(fin->ok());
  for (unsigned i = 0; i < g.size(); ++i) EXPECT_TRUE(g.fsm(i).is_finalized(kStreamIncarnations));
  // Through every member in turn: the upgraded ones see group level 8 and propose 0.
  for (unsigned who = 0; who < g.size(); ++who) {
    StreamKey k{"t", "n", "s" + std::to_string(who)};
    auto c = g.propose(who, Command::create_stream(k, one_shard(), 0));
    ASSERT_TRUE(c.ok() && c->ok());
    EXPECT_EQ(c->stream.incarnation, Incarnation{0});
    auto d = g.propose((who + 1) % g.size(), Command::delete_stream(k));
    ASSERT_TRUE(d.ok() && d->ok());
    EXPECT_FALSE(d->tombstone.has_value());
    auto again = g.propose((who + 2) % g.size(), Command::create_stream(k, one_shard(), 0));
    ASSERT_TRUE(again.ok() && again->ok());
    EXPECT_EQ(again->stream.incarnation, Incarnation{0});
  }
  churn(g, 30);
  g.expect_converged();
  g.expect_replay_at(MetadataLevel{8});
  expect_all_at_zero(g);
}

// All at 14: entries are flagged, the first one raises the floor to 14, and a level-8
// member's join is refused by apply on every member.
TEST(MixedLevels, FlaggedEntriesRaiseTheFloorAndAJoinBelowItIsRefused) {
  Group g({14, 14, 14}, seed_for("14"));
  g.start({kStreamInc, kCacheInc});
  EXPECT_EQ(g.fsm(0).level(), MetadataLevel{14});
  auto incs = churn(g, 40);
  g.expect_converged();
  EXPECT_EQ(g.fsm(0).level_floor(), MetadataLevel{14});
  EXPECT_FALSE(g.fsm(0).catalog_snapshot().cache_tombstones.empty()) << "flagged cache deletes write tombstones";
  for (auto& [name, v] : incs)
    for (std::size_t k = 1; k < v.size(); ++k) EXPECT_GT(v[k], v[k - 1]) << name;
  auto join = g.propose(0, Command::join_member({NodeId{9}, "10.0.0.9:7800", "10.0.0.9:7801", MetadataLevel{8}}));
  ASSERT_TRUE(join.ok());
  ASSERT_FALSE(join->ok());
  EXPECT_EQ(join->error->code, Errc::conflict);
  EXPECT_NE(join->error->message.find("floor"), std::string::npos) << join->error->message;
  g.expect_converged();
  g.expect_replay_at(MetadataLevel{14});
  // A member restarted on a level-10 build replays this log and holds at the first flagged
  // entry, naming the level it needs; it changes nothing after it.
  auto old = g.replay(MetadataLevel{10});
  ASSERT_TRUE(old->held().has_value());
  EXPECT_EQ(old->held()->required, MetadataLevel{14});
  EXPECT_NE(old->held()->reason.find("level 14"), std::string::npos) << old->held()->reason;
  EXPECT_LT(old->applied(), g.fsm(0).applied());
}

// Level 16 (replicated shards): three brokers, and a create with replication factor 3
// placed on them (what place_replicas proposes), leader first.
void register_three_brokers(Group& g) {
  for (std::uint32_t b = 1; b <= 3; ++b) {
    BrokerRegistration reg{NodeId{b}, "h:" + std::to_string(b), "dir-" + std::to_string(b), "v",
                           {kCacheInc, kRepl, kReassign, kStreamInc}, "peer:" + std::to_string(b)};
    auto r = g.propose_raw(0, Command::register_broker(reg));
    ASSERT_TRUE(r.ok() && r->ok()) << g.tag();
  }
}
Command replicated_create(const std::string& name) {
  StreamSpec spec;
  spec.shards = 1;
  spec.replication_factor = 3;
  spec.min_insync = 2;
  Command c = Command::create_stream({"t", "n", name}, spec, 0);
  c.placement = {Command::ShardPlacement{2, {2, 3, 1}}};
  return c;
}

// All at 16 with replicated_shards finalized: a replicated create and update_shard apply
// alike everywhere, the first raises the floor to 16, and a member restarted on a level-14
// build holds at it instead of applying it (it would store replication factor 1).
TEST(MixedLevels, ReplicatedShardEntriesApplyAt16AndHoldMembersBelowIt) {
  Group g({16, 16, 16}, seed_for("16"));
  g.start({kStreamInc, kCacheInc, kRepl});
  register_three_brokers(g);
  EXPECT_EQ(g.fsm(0).level_floor(), MetadataLevel{8});
  const std::uint64_t first16 = g.fsm(0).applied().value() + 1;
  auto c = g.propose(1, replicated_create("r"));
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(c->ok()) << c->error->to_string();
  ASSERT_EQ(c->assignments.size(), 1u);
  const Assignment& a = c->assignments[0];
  EXPECT_EQ(a.leader, NodeId{2});
  EXPECT_EQ(a.leader_epoch, LeaderEpoch{1});
  EXPECT_EQ(a.version, ShardVersion{1});
  EXPECT_EQ(a.in_sync, (std::vector<InSyncReplica>{{NodeId{2}, "dir-2"}, {NodeId{3}, "dir-3"}, {NodeId{1}, "dir-1"}}));
  EXPECT_EQ(g.fsm(0).level_floor(), MetadataLevel{16});
  ShardUpdate u{a.key, a.shard, a.incarnation, a.version, NodeId{3}, LeaderEpoch{2},
                {{NodeId{3}, "dir-3"}, {NodeId{1}, "dir-1"}}};
  auto up = g.propose(2, Command::update_shard(u));
  ASSERT_TRUE(up.ok());
  ASSERT_TRUE(up->ok()) << up->error->to_string();
  EXPECT_EQ(up->assignments.at(0).version, ShardVersion{2});
  EXPECT_EQ(up->assignments.at(0).leader, NodeId{3});
  auto stale = g.propose(0, Command::update_shard(u));  // the same expected version again
  ASSERT_TRUE(stale.ok());
  ASSERT_FALSE(stale->ok());
  EXPECT_EQ(stale->error->code, Errc::conflict);
  auto join = g.propose(0, Command::join_member({NodeId{9}, "10.0.0.9:7800", "10.0.0.9:7801", MetadataLevel{14}}));
  ASSERT_TRUE(join.ok());
  ASSERT_FALSE(join->ok()) << "the floor is 16";
  g.expect_converged();
  g.expect_replay_at(MetadataLevel{16});
  auto old = g.replay(MetadataLevel{14});
  ASSERT_TRUE(old->held().has_value());
  EXPECT_EQ(old->held()->index, first16);
  EXPECT_EQ(old->held()->required, MetadataLevel{16});
  EXPECT_NE(old->held()->reason.find("level 16"), std::string::npos) << old->held()->reason;
}

// 16 + 14: replicated_shards cannot be finalized, a 16 member refuses to propose the
// entries, and an entry proposed anyway (a stale or buggy proposer) is refused by the
// level-16 member and not applied by the level-14 one, which holds.
TEST(MixedLevels, BelowLevel16ReplicatedShardEntriesAreNeverApplied) {
  Group g({16, 14}, seed_for("16+14"));
  g.start({kStreamInc, kCacheInc});
  register_three_brokers(g);
  auto fin = g.finalize(0, kRepl);
  ASSERT_FALSE(fin.ok());
  EXPECT_EQ(fin.error().code, Errc::conflict);
  EXPECT_FALSE(check_replicated_shards(g.view(0), "replication_factor 3").ok());
  // Ordinary entries still converge.
  auto plain = g.propose(1, Command::create_stream({"t", "n", "plain"}, one_shard(), 0));
  ASSERT_TRUE(plain.ok() && plain->ok());
  g.expect_converged();
  const std::uint64_t before = g.fsm(1).applied().value();
  Command c = replicated_create("r");
  c.level = 16;
  g.lead(0);
  auto r = g.propose_raw(0, c);
  ASSERT_TRUE(r.ok());
  ASSERT_FALSE(r->ok());
  EXPECT_EQ(r->error->code, Errc::conflict) << r->error->message;
  EXPECT_FALSE(g.fsm(0).get_stream({"t", "n", "r"}).ok());
  EXPECT_EQ(g.fsm(0).level_floor(), MetadataLevel{14}) << "a refused entry raises no floor to 16";
  ASSERT_TRUE(g.fsm(1).held().has_value());
  EXPECT_EQ(g.fsm(1).held()->required, MetadataLevel{16});
  EXPECT_EQ(g.fsm(1).applied().value(), before) << "the level-14 member did not apply it";
}

// Level 17 (reassignment): all at 17, a reassign_shard entry changes the replica list alike
// everywhere and raises the floor to 17; a member restarted on a level-16 build holds at it
// (applying only the in-sync part of it would diverge).
TEST(MixedLevels, ReassignmentEntriesApplyAt17AndHoldMembersBelowIt) {
  Group g({17, 17, 17}, seed_for("17"));
  g.start({kStreamInc, kCacheInc, kRepl, kReassign});
  register_three_brokers(g);
  auto c = g.propose(1, replicated_create("r"));
  ASSERT_TRUE(c.ok() && c->ok());
  const Assignment a = c->assignments.at(0);
  EXPECT_EQ(g.fsm(0).level_floor(), MetadataLevel{16});
  const std::uint64_t first17 = g.fsm(0).applied().value() + 1;
  ShardUpdate u{a.key, a.shard, a.incarnation, a.version, a.leader, a.leader_epoch, a.in_sync};
  u.replicas = std::vector<NodeId>{NodeId{2}, NodeId{3}, NodeId{1}, NodeId{4}};
  u.target_replicas = {NodeId{4}, NodeId{3}, NodeId{1}};
  EXPECT_EQ(Command::update_shard(u).type, CommandType::reassign_shard);
  auto up = g.propose(2, Command::update_shard(u));
  ASSERT_TRUE(up.ok());
  ASSERT_TRUE(up->ok()) << up->error->to_string();
  EXPECT_EQ(up->assignments.at(0).replicas, *u.replicas);
  EXPECT_EQ(up->assignments.at(0).target_replicas, u.target_replicas);
  EXPECT_EQ(g.fsm(0).level_floor(), MetadataLevel{17});
  g.expect_converged();
  g.expect_replay_at(MetadataLevel{17});
  auto old = g.replay(MetadataLevel{16});
  ASSERT_TRUE(old->held().has_value());
  EXPECT_EQ(old->held()->index, first17);
  EXPECT_EQ(old->held()->required, MetadataLevel{17});
}

// 17 + 16: shard_reassignment cannot be finalized, the 17 member refuses to propose, and an
// entry proposed anyway is refused by the level-17 member and held by the level-16 one.
TEST(MixedLevels, BelowLevel17ReassignmentEntriesAreNeverApplied) {
  Group g({17, 16}, seed_for("17+16"));
  g.start({kStreamInc, kCacheInc, kRepl});
  register_three_brokers(g);
  auto fin = g.finalize(0, kReassign);
  ASSERT_FALSE(fin.ok());
  EXPECT_EQ(fin.error().code, Errc::conflict);
  EXPECT_FALSE(check_shard_reassignment(g.view(0)).ok());
  auto c = g.propose(1, replicated_create("r"));
  ASSERT_TRUE(c.ok() && c->ok());
  g.expect_converged();
  const Assignment a = c->assignments.at(0);
  const std::uint64_t before = g.fsm(1).applied().value();
  ShardUpdate u{a.key, a.shard, a.incarnation, a.version, a.leader, a.leader_epoch, a.in_sync};
  u.replicas = std::vector<NodeId>{NodeId{2}, NodeId{3}, NodeId{1}};
  g.lead(0);
  auto r = g.propose_raw(0, Command::update_shard(u));
  ASSERT_TRUE(r.ok());
  ASSERT_FALSE(r->ok());
  EXPECT_EQ(r->error->code, Errc::conflict) << r->error->message;
  EXPECT_EQ(g.fsm(0).level_floor(), MetadataLevel{16});
  ASSERT_TRUE(g.fsm(1).held().has_value());
  EXPECT_EQ(g.fsm(1).held()->required, MetadataLevel{17});
  EXPECT_EQ(g.fsm(1).applied().value(), before) << "the level-16 member did not apply it";
}

// Level 18 (counters): all at 18, counters get incarnations that never repeat (a recreate
// after a delete is above the tombstone), every delete leaves a tombstone, the first counter
// entry raises the floor to 18, and a member restarted on a level-17 build holds at it.
TEST(MixedLevels, CounterEntriesApplyAt18AndHoldMembersBelowIt) {
  Group g({18, 18, 18}, seed_for("18"));
  g.start({kStreamInc, kCacheInc, kRepl, kReassign, kCountersF, kCompactF});
  const StreamKey k{"t", "n", "hits"};
  EXPECT_EQ(g.fsm(0).level_floor(), MetadataLevel{8});
  const std::uint64_t first18 = g.fsm(0).applied().value() + 1;
  auto c1 = g.propose(1, Command::create_counter(k, 0));
  ASSERT_TRUE(c1.ok());
  ASSERT_TRUE(c1->ok()) << c1->error->to_string();
  EXPECT_GT(c1->counter.incarnation.value(), 0u);
  EXPECT_EQ(g.fsm(0).level_floor(), MetadataLevel{18});
  auto dup = g.propose(2, Command::create_counter(k, 0));
  ASSERT_TRUE(dup.ok());
  ASSERT_FALSE(dup->ok());
  EXPECT_EQ(dup->error->code, Errc::already_exists);
  auto d = g.propose(2, Command::delete_counter(k));
  ASSERT_TRUE(d.ok() && d->ok());
  ASSERT_TRUE(d->tombstone.has_value());
  EXPECT_EQ(d->tombstone->deleted_up_to, c1->counter.incarnation);
  // A recreate proposing an incarnation below the tombstone still gets one above it.
  Command low = Command::create_counter(k, 1);
  low.proposed_incarnation = 1;
  auto c2 = g.propose_raw(2, low);  // server 2 leads since the delete
  ASSERT_TRUE(c2.ok() && c2->ok());
  EXPECT_EQ(c2->counter.incarnation.value(), c1->counter.incarnation.value() + 1);
  auto snap = g.fsm(2).catalog_snapshot();
  ASSERT_EQ(snap.counters.size(), 1u);
  ASSERT_EQ(snap.counter_tombstones.size(), 1u);
  EXPECT_EQ(snap.counters[0].incarnation, c2->counter.incarnation);
  g.expect_converged();
  g.expect_replay_at(MetadataLevel{18});
  auto old = g.replay(MetadataLevel{17});
  ASSERT_TRUE(old->held().has_value());
  EXPECT_EQ(old->held()->index, first18);
  EXPECT_EQ(old->held()->required, MetadataLevel{18});
}

// 18 + 17: `counters` cannot be finalized, the 18 member refuses to propose a counter, and
// an entry proposed anyway is refused by the level-18 member and held by the level-17 one.
TEST(MixedLevels, BelowLevel18CounterEntriesAreNeverApplied) {
  Group g({18, 17}, seed_for("18+17"));
  g.start({kStreamInc, kCacheInc, kRepl, kReassign});
  auto fin = g.finalize(0, kCountersF);
  ASSERT_FALSE(fin.ok());
  EXPECT_EQ(fin.error().code, Errc::conflict);
  auto refused = g.propose(0, Command::create_counter(StreamKey{"t", "n", "c"}, 0));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, Errc::conflict);
  g.expect_converged();
  const std::uint64_t before = g.fsm(1).applied().value();
  g.lead(0);
  Command c = Command::create_counter(StreamKey{"t", "n", "c"}, 1'700'000'000'000'000);
  c.proposed_incarnation = 1'700'000'000'000'000;
  auto r = g.propose_raw(0, c);
  ASSERT_TRUE(r.ok());
  ASSERT_FALSE(r->ok());
  EXPECT_EQ(r->error->code, Errc::conflict) << r->error->message;
  EXPECT_FALSE(g.fsm(0).counter(StreamKey{"t", "n", "c"}).has_value());
  EXPECT_EQ(g.fsm(0).level_floor(), MetadataLevel{8});
  ASSERT_TRUE(g.fsm(1).held().has_value());
  EXPECT_EQ(g.fsm(1).held()->required, MetadataLevel{18});
  EXPECT_EQ(g.fsm(1).applied().value(), before) << "the level-17 member did not apply it";
}

// All at 18 but `counters` held back at bootstrap: creates are refused by the proposer and
// by apply until it is finalized, then accepted.
TEST(MixedLevels, CountersNeedTheFeatureFinalized) {
  Group g({18, 18}, seed_for("18 held back"));
  g.start({kStreamInc, kCacheInc, kRepl, kReassign});
  const StreamKey k{"t", "n", "c"};
  EXPECT_FALSE(check_counters(g.view(0)).ok());
  g.lead(0);
  Command c = Command::create_counter(k, 1'700'000'000'000'000);
  c.proposed_incarnation = 1'700'000'000'000'000;
  auto r = g.propose_raw(0, c);
  ASSERT_TRUE(r.ok());
  ASSERT_FALSE(r->ok());
  EXPECT_EQ(r->error->code, Errc::conflict);
  ASSERT_TRUE(g.finalize(0, kCountersF).ok());
  auto ok = g.propose(1, Command::create_counter(k, 0));
  ASSERT_TRUE(ok.ok());
  ASSERT_TRUE(ok->ok()) << ok->error->to_string();
  g.expect_converged();
}

// Level 19 (batch entries): all at 19, a batch gives each command the result it would get
// alone, the first batch raises the floor to 19, every member converges, a replay at 19
// computes the same state and a member restarted on a level-18 build holds at the batch.
TEST(MixedLevels, BatchEntriesApplyAt19AndHoldMembersBelowIt) {
  Group g({19, 19, 19}, seed_for("19"));
  g.start({kStreamInc, kCacheInc, kRepl, kReassign, kCountersF, kCompactF});
  EXPECT_TRUE(may_batch(g.view(1), CommandType::create_stream));
  const std::uint64_t batch_index = g.fsm(0).applied().value() + 1;
  auto b = g.propose_batch(1, {Command::create_stream({"t", "n", "a"}, one_shard(), 0),
                               Command::create_stream({"t", "n", "a"}, one_shard(), 0),
                               Command::create_cache({"t", "n", "c"}, CacheSpec{}, 0),
                               Command::delete_stream({"t", "n", "nope"}),
                               Command::create_stream({"t", "n", "b"}, one_shard(), 0)});
  ASSERT_TRUE(b.ok()) << b.error().to_string();
  ASSERT_TRUE(b->ok()) << b->error->to_string();
  ASSERT_EQ(b->inner.size(), 5u);
  EXPECT_TRUE(b->inner[0].ok());
  EXPECT_EQ(b->inner[1].error->code, Errc::already_exists);
  EXPECT_TRUE(b->inner[2].ok());
  EXPECT_EQ(b->inner[3].error->code, Errc::not_found);
  EXPECT_TRUE(b->inner[4].ok());
  EXPECT_GT(b->inner[0].stream.incarnation.value(), 0u);
  for (std::size_t k = 0; k < 5; ++k) EXPECT_EQ(b->inner[k].seq, ChangeSeq{batch_index + k});
  EXPECT_EQ(g.fsm(2).level_floor(), kBatchedEntriesLevel);
  // The next entry's command comes after the batch's last.
  auto after = g.propose(2, Command::delete_stream({"t", "n", "a"}));
  ASSERT_TRUE(after.ok() && after->ok());
  EXPECT_EQ(after->seq, ChangeSeq{batch_index + 5});
  g.expect_converged();
  g.expect_replay_at(MetadataLevel{19});
  auto old = g.replay(MetadataLevel{18});
  ASSERT_TRUE(old->held().has_value());
  EXPECT_EQ(old->held()->index, batch_index);
  EXPECT_EQ(old->held()->required, kBatchedEntriesLevel);
}

// 19 + 18: the 19 member does not batch; a batch proposed anyway is refused as a whole by
// the 19 member (nothing applied, the floor unchanged) and holds the 18 member. After the
// 18 member is upgraded, batching is allowed and applies.
TEST(MixedLevels, BelowLevel19BatchesAreNeverApplied) {
  Group g({19, 18}, seed_for("19+18"));
  g.start({kStreamInc, kCacheInc, kRepl, kReassign, kCountersF, kCompactF});
  EXPECT_FALSE(may_batch(g.view(0), CommandType::create_stream));
  const std::uint64_t before = g.fsm(1).applied().value();
  auto r = g.propose_batch(0, {Command::create_stream({"t", "n", "a"}, one_shard(), 0),
                               Command::create_stream({"t", "n", "b"}, one_shard(), 0)});
  ASSERT_TRUE(r.ok());
  ASSERT_FALSE(r->ok());
  EXPECT_EQ(r->error->code, Errc::conflict) << r->error->message;
  EXPECT_TRUE(r->inner.empty());
  EXPECT_FALSE(g.fsm(0).get_stream({"t", "n", "a"}).ok());
  EXPECT_LT(g.fsm(0).level_floor(), kBatchedEntriesLevel);
  ASSERT_TRUE(g.fsm(1).held().has_value());
  EXPECT_EQ(g.fsm(1).held()->required, kBatchedEntriesLevel);
  EXPECT_EQ(g.fsm(1).applied().value(), before) << "the level-18 member did not apply it";
}

TEST(MixedLevels, AnUpgradeTo19AllowsBatches) {
  Group g({19, 18}, seed_for("19+18 upgraded"));
  g.start({kStreamInc, kCacheInc, kRepl, kReassign, kCountersF, kCompactF});
  ASSERT_TRUE(g.propose(1, Command::create_stream({"t", "n", "a"}, one_shard(), 0))->ok());
  EXPECT_FALSE(may_batch(g.view(0), CommandType::create_stream));
  g.upgrade(1, MetadataLevel{19});
  EXPECT_TRUE(may_batch(g.view(0), CommandType::create_stream));
  auto r = g.propose_batch(0, {Command::delete_stream({"t", "n", "a"}),
                               Command::create_stream({"t", "n", "a"}, one_shard(), 0)});
  ASSERT_TRUE(r.ok() && r->ok());
  ASSERT_EQ(r->inner.size(), 2u);
  EXPECT_TRUE(r->inner[0].ok());
  EXPECT_TRUE(r->inner[1].ok());
  EXPECT_GT(r->inner[1].stream.incarnation.value(), r->inner[0].stream.incarnation.value());
  g.expect_converged();
  g.expect_replay_at(MetadataLevel{19});
}

}  // namespace
}  // namespace sluice::raft_meta
