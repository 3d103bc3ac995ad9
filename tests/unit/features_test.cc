// The catalog rules of features.h, as tables. Both metadata backends call these
// functions, so these tests pin the meaning for Raft and Postgres alike.
#include <gtest/gtest.h>

#include "sluice/features.h"

using namespace sluice;

namespace {
std::optional<Incarnation> tomb(std::uint64_t v) { return Incarnation{v}; }
constexpr auto none = std::nullopt;
}  // namespace

// Regression (felix #1210): a name's incarnations only go up, whatever the proposer's clock
// says: max(proposed, tombstone + 1).
TEST(IncarnationRules, incarnation_never_repeats) {
  struct Case {
    std::uint64_t proposed;
    std::optional<Incarnation> tombstone;
    std::uint64_t want;
    const char* why;
  };
  const Case cases[] = {
      {1'700'000'000'000'000, none, 1'700'000'000'000'000, "first create takes the clock"},
      {1'700'000'000'000'000, tomb(1'600'000'000'000'000), 1'700'000'000'000'000, "clock ahead of the tombstone"},
      {1'600'000'000'000'000, tomb(1'700'000'000'000'000), 1'700'000'000'000'001, "clock went backwards"},
      {1'700'000'000'000'000, tomb(1'700'000'000'000'000), 1'700'000'000'000'001, "same microsecond as the deleted one"},
      {5, tomb(1'700'000'000'000'000), 1'700'000'000'000'001, "restore rewound everything"},
      {0, tomb(41), 42, "a zero proposal still lands above the tombstone"},
      {0, none, 0, "nothing proposed, nothing deleted"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(next_incarnation(c.proposed, c.tombstone).value(), c.want) << c.why;
    if (c.tombstone) EXPECT_GT(next_incarnation(c.proposed, c.tombstone), *c.tombstone) << c.why;
  }
  // A sequence of deletes and creates with a clock that jumps back never repeats.
  std::optional<Incarnation> t;
  std::uint64_t clock[] = {100, 90, 90, 500, 10, 501};
  std::vector<std::uint64_t> seen;
  for (auto c : clock) {
    auto inc = decide_create_incarnation(c, /*flagged=*/false, /*finalized=*/true, t);
    for (auto s : seen) EXPECT_GT(inc.value(), s);
    seen.push_back(inc.value());
    t = decide_delete_tombstone(inc, false);
  }
}

// The rollout rule (felix, "The fix for the rollout"): an unflagged entry proposing 0 is
// what a level-8 proposer writes, and stores 0 whether or not the feature is finalized.
TEST(IncarnationRules, UnflaggedZeroProposalStoresZeroFinalizedOrNot) {
  EXPECT_EQ(decide_create_incarnation(0, false, false, tomb(7)).value(), 0u);
  EXPECT_EQ(decide_create_incarnation(0, false, true, tomb(7)).value(), 0u);
  EXPECT_EQ(decide_create_incarnation(0, false, true, none).value(), 0u);
  // Before the finalize, even a non-zero proposal stores 0 (level-8 behaviour).
  EXPECT_EQ(decide_create_incarnation(123, false, false, none).value(), 0u);
  // After it, a real proposal is decided by the rule.
  EXPECT_EQ(decide_create_incarnation(123, false, true, tomb(200)).value(), 201u);
  // A flagged entry is decided from its own fields, even proposing 0.
  EXPECT_EQ(decide_create_incarnation(0, true, true, tomb(7)).value(), 8u);
}

TEST(IncarnationRules, DeleteOfLegacyStreamWritesNoTombstoneUnlessFlagged) {
  EXPECT_EQ(decide_delete_tombstone(Incarnation{0}, false), std::nullopt);
  EXPECT_EQ(decide_delete_tombstone(Incarnation{0}, true), Incarnation{0});
  EXPECT_EQ(decide_delete_tombstone(Incarnation{55}, false), Incarnation{55});
  // With the feature's state: a flagged delete at 0 tombstones only after the finalize.
  EXPECT_EQ(decide_delete_tombstone(Incarnation{0}, true, false), std::nullopt);
  EXPECT_EQ(decide_delete_tombstone(Incarnation{0}, true, true), Incarnation{0});
  EXPECT_EQ(decide_delete_tombstone(Incarnation{0}, false, true), std::nullopt);
  EXPECT_EQ(decide_delete_tombstone(Incarnation{7}, false, false), Incarnation{7});
  EXPECT_EQ(decide_delete_tombstone(Incarnation{7}, true, false), Incarnation{7});
}

TEST(IncarnationRules, ProposerWritesZeroUntilFinalized) {
  EXPECT_EQ(propose_incarnation(false, 1'700'000'000'000'000), 0u);
  EXPECT_EQ(propose_incarnation(true, 1'700'000'000'000'000), 1'700'000'000'000'000u);
  EXPECT_GT(propose_incarnation(true, 0), 0u);  // a broken clock still proposes non-zero
}

// Regression (felix #1245): ownership compares the incarnation first, then the generation.
TEST(OwnershipRules, IncarnationFirstThenGeneration) {
  // The bug: a recreated stream's first assignment at a lower generation was ignored.
  EXPECT_TRUE(assignment_supersedes(Incarnation{9}, Generation{1}, Incarnation{5}, Generation{100}));
  EXPECT_FALSE(assignment_supersedes(Incarnation{5}, Generation{100}, Incarnation{9}, Generation{1}));
  EXPECT_TRUE(assignment_supersedes(Incarnation{5}, Generation{101}, Incarnation{5}, Generation{100}));
  EXPECT_FALSE(assignment_supersedes(Incarnation{5}, Generation{100}, Incarnation{5}, Generation{100}));
  EXPECT_EQ(first_generation(ChangeSeq{77}), Generation{77});
}

TEST(FeatureRules, FinalizeGate) {
  BrokerInfo a{NodeId{1}, "", "", "", {"stream_incarnations"}, true, ChangeSeq{1}};
  BrokerInfo old{NodeId{2}, "", "", "", {}, true, ChangeSeq{2}};
  EXPECT_TRUE(check_finalize("stream_incarnations", MetadataLevel{10}, {a}).ok());
  auto r = check_finalize("stream_incarnations", MetadataLevel{10}, {a, old});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::conflict);
  EXPECT_NE(r.error().message.find("lack it: 2"), std::string::npos) << r.error().message;
  r = check_finalize("stream_incarnations", MetadataLevel{8}, {a});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::conflict);
  EXPECT_NE(r.error().message.find("level 10"), std::string::npos) << r.error().message;
  r = check_finalize("warp_drive", MetadataLevel{10}, {a});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::not_found);
}

TEST(FeatureRules, RegistrationAdmission) {
  std::set<std::string, std::less<>> finalized{"stream_incarnations"};
  EXPECT_TRUE(admit_broker({"stream_incarnations"}, finalized).ok());
  EXPECT_TRUE(admit_broker({}, {}).ok());
  auto r = admit_broker({}, finalized);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::conflict);
  EXPECT_NE(r.error().message.find("stream_incarnations"), std::string::npos);
}

TEST(FeatureRules, KnownFeaturesHaveLevels) {
  const auto* f = find_feature("stream_incarnations");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->required_level, MetadataLevel{10});
  EXPECT_EQ(find_feature("nope"), nullptr);
}

// metadata.bootstrap_hold_back's list: "*" alone is every known feature, in order, so the
// tests (and upgrade rehearsals) that want a level-8 cluster need not name each feature,
// and cannot miss the next one added.
TEST(FeatureRules, AFeatureListIsNamesOrAStarForEveryFeature) {
  auto all = parse_feature_list(" * ");
  ASSERT_TRUE(all.ok()) << all.error().to_string();
  ASSERT_EQ(all->size(), known_features().size());
  for (std::size_t i = 0; i < all->size(); ++i) EXPECT_EQ((*all)[i], known_features()[i].name);

  for (const char* empty : {"", " , ", ","}) {
    auto none = parse_feature_list(empty);
    ASSERT_TRUE(none.ok()) << empty;
    EXPECT_TRUE(none->empty()) << empty;
  }
  // Empty items are dropped as everywhere in a comma list, so "*," is "*".
  auto star_comma = parse_feature_list("*,");
  ASSERT_TRUE(star_comma.ok());
  EXPECT_EQ(star_comma->size(), known_features().size());
  // A name twice holds it back once: the bootstraps look names up, so it is harmless.
  auto twice = parse_feature_list("counters,counters");
  ASSERT_TRUE(twice.ok());

  auto two = parse_feature_list(" counters ,stream_incarnations");
  ASSERT_TRUE(two.ok()) << two.error().to_string();
  EXPECT_EQ(*two, (std::vector<std::string>{"counters", "stream_incarnations"}));

  for (const char* bad : {"no_such_feature", "counters,nope", "*,counters", "counters,*", "*,*", "**", "all"}) {
    auto r = parse_feature_list(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code, Errc::invalid_argument) << bad;
  }
}

// Placement (both backends call this): never on a broker that lacks a finalized feature
// (review: a paused old broker came back and was given an incarnated stream's shards).
TEST(PlacementRules, SkipsBrokersLackingAFinalizedFeatureAndPrefersLiveOnes) {
  BrokerInfo newer{NodeId{1}, "", "", "", {"stream_incarnations"}, true, ChangeSeq{1}};
  BrokerInfo older{NodeId{2}, "", "", "", {}, true, ChangeSeq{2}};
  BrokerInfo asleep{NodeId{3}, "", "", "", {"stream_incarnations"}, false, ChangeSeq{3}};
  const StreamKey k{"t", "n", "s"};
  std::set<std::string, std::less<>> none, fin{"stream_incarnations"};
  auto before = place_shards(k, 4, {newer, older, asleep}, none);
  EXPECT_NE(std::count(before.begin(), before.end(), NodeId{2}), 0);  // not finalized: eligible
  EXPECT_EQ(std::count(before.begin(), before.end(), NodeId{3}), 0);  // live ones first
  auto after = place_shards(k, 4, {newer, older, asleep}, fin);
  EXPECT_EQ(after, std::vector<NodeId>(4, NodeId{1}));
  // Nobody live: the registered (admitted) ones, so a sleeping broker gets its shards back.
  auto sleeping = place_shards(k, 2, {asleep, BrokerInfo{NodeId{2}, "", "", "", {}, false, ChangeSeq{2}}}, fin);
  EXPECT_EQ(sleeping, std::vector<NodeId>(2, NodeId{3}));
  EXPECT_EQ(place_shards(k, 3, {}, fin), std::vector<NodeId>(3, NodeId{0}));
  // Stable: the same name lands the same way.
  EXPECT_EQ(place_shards(k, 4, {newer, older}, none), place_shards(k, 4, {older, newer}, none));
}
