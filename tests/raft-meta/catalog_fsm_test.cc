// CatalogFsm alone (no raft): results, catalog contents, determinism, snapshots, level-8
// semantics, the change log.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cstring>

#include "catalog_fsm.h"
#include "command.h"
#include "sluice/levels.h"

namespace sluice::raft_meta {
namespace {

StreamSpec spec(std::uint32_t shards = 2) {
  StreamSpec s;
  s.shards = shards;
  s.retention.max_bytes = 1 << 20;
  s.retention.max_age_ms = 60000;
  s.default_ack = AckMode::leader;
  return s;
}

const StreamKey kKey{"acme", "prod", "orders"};

// Feeds entries with consecutive indexes.
class Feeder {
 public:
  explicit Feeder(CatalogFsm& fsm, std::uint64_t first = 1) : fsm_(fsm), next_(first) {}
  ApplyResult operator()(const Command& c) { return fsm_.apply(next_++, encode_command(c)); }
  ApplyResult raw(std::string_view bytes) { return fsm_.apply(next_++, bytes); }
  std::uint64_t next() const { return next_; }
  void skip(std::uint64_t n) { next_ += n; }  // indexes used by barriers / config entries

 private:
  CatalogFsm& fsm_;
  std::uint64_t next_;
};

// Runs `sql` on a snapshot image and returns the edited image: how a test plants state that
// this build never writes (a newer build's change kind, a damaged table).
std::string edit_image(const std::string& image, const char* sql) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open(":memory:", &db), SQLITE_OK);
  auto* buf = static_cast<unsigned char*>(sqlite3_malloc64(image.size()));
  std::memcpy(buf, image.data(), image.size());
  EXPECT_EQ(sqlite3_deserialize(db, "main", buf, static_cast<sqlite3_int64>(image.size()),
                                static_cast<sqlite3_int64>(image.size()),
                                SQLITE_DESERIALIZE_FREEONCLOSE | SQLITE_DESERIALIZE_RESIZEABLE),
            SQLITE_OK);
  char* err = nullptr;
  EXPECT_EQ(sqlite3_exec(db, sql, nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "");
  sqlite3_free(err);
  sqlite3_int64 n = 0;
  unsigned char* p = sqlite3_serialize(db, "main", &n, 0);
  std::string out(reinterpret_cast<const char*>(p), static_cast<std::size_t>(n));
  sqlite3_free(p);
  sqlite3_close(db);
  return out;
}

std::vector<std::string> standard_entries() {
  std::vector<std::string> e;
  e.push_back(encode_command(Command::init_cluster("11111111-2222-4333-8444-555555555555")));
  e.push_back(encode_command(Command::create_tenant("acme")));
  e.push_back(encode_command(Command::create_namespace("acme", "prod")));
  e.push_back(encode_command(Command::create_stream(kKey, spec(), 1700000000000000)));
  e.push_back(encode_command(Command::create_stream(kKey, spec(), 1700000000000001)));  // exists
  e.push_back(encode_command(Command::create_tenant("bad/name")));
  e.push_back("garbage");
  e.push_back(encode_command(Command::delete_stream(kKey)));
  e.push_back(encode_command(Command::create_stream({"acme", "prod", "x"}, spec(7), 5)));
  return e;
}

TEST(CommandCodec, RoundTripsEveryField) {
  Command c = Command::create_stream(kKey, spec(3), 42);
  c.proposed_incarnation = 99;
  c.incarnations = IncarnationRule::flagged;
  auto d = decode_command(encode_command(c));
  ASSERT_TRUE(d.ok()) << d.error().to_string();
  EXPECT_EQ(d->type, CommandType::create_stream);
  EXPECT_EQ(d->tenant, "acme");
  EXPECT_EQ(d->ns, "prod");
  EXPECT_EQ(d->name, "orders");
  EXPECT_EQ(d->spec, spec(3));
  EXPECT_EQ(d->proposed_incarnation, 99u);
  EXPECT_EQ(d->incarnations, IncarnationRule::flagged);
  EXPECT_EQ(d->clock_us, 42);
  EXPECT_EQ(d->level, kBuildMetadataLevel.value());
}

TEST(CommandCodec, Level8CreateAndDeleteCarryIncarnationFields) {
  for (auto c : {Command::create_stream(kKey, spec(), 1), Command::delete_stream(kKey)}) {
    std::string e = encode_command(c);
    EXPECT_NE(e.find("\"proposed_incarnation\":0"), std::string::npos) << e;
    EXPECT_NE(e.find("\"incarnations\":false"), std::string::npos) << e;
    EXPECT_NE(e.find("\"v\":1"), std::string::npos) << e;
  }
}

TEST(CommandCodec, RejectsUnknownVersionAndGarbage) {
  EXPECT_EQ(decode_command("nope").error().code, Errc::malformed_body);
  EXPECT_EQ(decode_command(R"({"v":2,"op":"create_tenant","level":8,"tenant":"a"})").error().code,
            Errc::malformed_body);
  EXPECT_EQ(decode_command(R"({"v":1,"op":"frobnicate","level":8})").error().code,
            Errc::malformed_body);
}

// Entries as the encoder wrote them before the SDK codec (sluice/catalog_json.h) took over
// the nested values: the raft log keeps them, so they must decode, and re-encode to the
// same bytes.
TEST(CommandCodec, EntriesOfTheEarlierEncoderDecodeToTheSameBytes) {
  const char* entries[] = {
      R"({"v":1,"op":"init_cluster","level":14,"cluster_id":"c","finalize_features":["stream_incarnations"]})",
      R"({"v":1,"op":"register_broker","level":14,"broker":{"id":3,"address":"h:1","directory_id":"d","version":"1","features":["a","b"]}})",
      R"({"v":1,"op":"unregister_broker","level":8,"broker_id":3})",
      R"({"v":1,"op":"join_member","level":14,"member":{"id":2,"raft_address":"r:2","rpc_address":"p:2","level":10}})",
      R"({"v":1,"op":"leave_member","level":14,"member_id":2})",
      R"({"v":1,"op":"create_stream","level":14,"tenant":"t","ns":"n","name":"s","proposed_incarnation":5,"incarnations":true,)"
      R"("spec":{"shards":2,"max_bytes":-1,"max_age_ms":100,"ack":"leader"},"clock_us":77,)"
      R"("placement":[{"leader":1,"replicas":[1,2]},{"leader":0,"replicas":[]}]})",
      R"({"v":1,"op":"create_cache","level":14,"tenant":"t","ns":"n","name":"c","proposed_incarnation":0,"incarnations":false,)"
      R"("spec":{"default_ttl_ms":-1},"clock_us":9})",
      R"({"v":1,"op":"delete_namespace","level":8,"tenant":"t","ns":"n"})",
  };
  for (const char* e : entries) {
    auto c = decode_command(e);
    ASSERT_TRUE(c.ok()) << e << ": " << c.error().to_string();
    EXPECT_EQ(encode_command(c.value()), e);
  }
  auto c = decode_command(entries[5]);
  ASSERT_EQ(c->placement.size(), 2u);
  EXPECT_EQ(c->placement[0].replicas, (std::vector<std::uint32_t>{1, 2}));
  EXPECT_EQ(c->spec.retention.max_age_ms, 100);
  // Strict: a wrong type is refused, never read as 0.
  EXPECT_FALSE(decode_command(R"({"v":1,"op":"leave_member","level":14,"member_id":"2"})").ok());
  EXPECT_FALSE(decode_command(R"({"v":1,"op":"create_tenant","level":14,"tenant":7})").ok());
}

TEST(CatalogFsm, AppliesASequenceOfCommands) {
  CatalogFsm fsm;
  Feeder f(fsm);
  auto init = f(Command::init_cluster("cid-1"));
  ASSERT_TRUE(init.ok());
  EXPECT_EQ(init.cluster_id, "cid-1");
  EXPECT_EQ(fsm.cluster_id(), "cid-1");

  auto t = f(Command::create_tenant("acme"));
  ASSERT_TRUE(t.ok()) << t.error->to_string();
  EXPECT_EQ(t.tenant.name, "acme");
  EXPECT_EQ(t.tenant.created_seq, ChangeSeq{2});

  auto n = f(Command::create_namespace("acme", "prod"));
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n.ns.created_seq, ChangeSeq{3});

  f.skip(1);  // e.g. a barrier entry at index 4
  auto s = f(Command::create_stream(kKey, spec(4), 123456));
  ASSERT_TRUE(s.ok()) << s.error->to_string();
  EXPECT_EQ(s.stream.key, kKey);
  EXPECT_EQ(s.stream.created_seq, ChangeSeq{5});  // the entry's index is the ChangeSeq
  EXPECT_EQ(s.stream.created_at_us, 123456);      // the proposer's clock, from the entry
  EXPECT_EQ(s.stream.spec, spec(4));
  EXPECT_EQ(fsm.applied(), ChangeSeq{5});

  auto got = fsm.get_stream(kKey);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->spec, spec(4));
  EXPECT_EQ(got->created_seq, ChangeSeq{5});

  EXPECT_EQ(f(Command::create_tenant("acme")).error->code, Errc::already_exists);
  EXPECT_EQ(f(Command::create_namespace("nobody", "x")).error->code, Errc::not_found);
  EXPECT_EQ(f(Command::create_stream({"acme", "nope", "s"}, spec(), 1)).error->code, Errc::not_found);
  EXPECT_EQ(f(Command::create_stream(kKey, spec(), 1)).error->code, Errc::already_exists);
  EXPECT_EQ(f(Command::delete_stream({"acme", "prod", "nope"})).error->code, Errc::not_found);
  EXPECT_EQ(f(Command::delete_namespace("acme", "prod")).error->code, Errc::conflict);

  auto snap = fsm.catalog_snapshot();
  EXPECT_EQ(snap.tenants.size(), 1u);
  EXPECT_EQ(snap.namespaces.size(), 1u);
  EXPECT_EQ(snap.streams.size(), 1u);
  EXPECT_EQ(snap.seq, fsm.applied());

  auto d = f(Command::delete_stream(kKey));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d.stream.created_seq, ChangeSeq{5});  // the deleted stream
  EXPECT_EQ(fsm.get_stream(kKey).error().code, Errc::not_found);
  EXPECT_TRUE(f(Command::delete_namespace("acme", "prod")).ok());
  EXPECT_TRUE(f(Command::delete_tenant("acme")).ok());
  EXPECT_TRUE(fsm.list_tenants()->empty());
}

TEST(CatalogFsm, InitClusterMustComeFirstAndOnlyOnce) {
  CatalogFsm fsm;
  Feeder f(fsm);
  EXPECT_EQ(f(Command::create_tenant("acme")).error->code, Errc::unavailable);
  ASSERT_TRUE(f(Command::init_cluster("first")).ok());
  auto again = f(Command::init_cluster("second"));
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error->code, Errc::already_exists);
  EXPECT_EQ(again.cluster_id, "first");
  EXPECT_EQ(fsm.cluster_id(), "first");
}

TEST(CatalogFsm, DeleteTenantWithNamespacesIsAConflict) {
  CatalogFsm fsm;
  Feeder f(fsm);
  f(Command::init_cluster("c"));
  f(Command::create_tenant("acme"));
  f(Command::create_namespace("acme", "prod"));
  auto r = f(Command::delete_tenant("acme"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error->code, Errc::conflict);
  EXPECT_EQ(fsm.list_tenants()->size(), 1u);
}

TEST(CatalogFsm, ApplyRejectsInvalidNamesAndSpecsDeterministically) {
  CatalogFsm fsm;
  Feeder f(fsm);
  f(Command::init_cluster("c"));
  // These never pass the proposer's validation; a buggy or hostile proposer's entry must
  // still be refused identically by every member.
  EXPECT_EQ(f(Command::create_tenant("../etc")).error->code, Errc::invalid_name);
  EXPECT_EQ(f(Command::create_tenant("")).error->code, Errc::invalid_name);
  f(Command::create_tenant("acme"));
  EXPECT_EQ(f(Command::create_namespace("acme", ".deleted")).error->code, Errc::invalid_name);
  f(Command::create_namespace("acme", "prod"));
  EXPECT_EQ(f(Command::create_stream({"acme", "prod", "a/b"}, spec(), 1)).error->code,
            Errc::invalid_name);
  EXPECT_EQ(f(Command::create_stream({"acme", "prod", "s"}, spec(0), 1)).error->code,
            Errc::invalid_argument);
  StreamSpec bad = spec();
  bad.retention.max_bytes = 0;
  EXPECT_EQ(f(Command::create_stream({"acme", "prod", "s"}, bad, 1)).error->code,
            Errc::invalid_argument);
  EXPECT_EQ(f.raw("{\"v\":1}").error->code, Errc::malformed_body);
  EXPECT_TRUE(fsm.list_streams("acme", "prod")->empty());
  // A rejected entry still advances applied_index (identically everywhere).
  EXPECT_EQ(fsm.applied(), ChangeSeq{f.next() - 1});
}

TEST(CatalogFsm, Level8CreateStoresIncarnationZeroAndDeleteWritesNoTombstone) {
  CatalogFsm fsm(kDefaultChangeRetention, MetadataLevel{8});
  Feeder f(fsm);
  f(Command::init_cluster("c"));
  f(Command::create_tenant("acme"));
  f(Command::create_namespace("acme", "prod"));
  auto first = f(Command::create_stream(kKey, spec(), 1700000000000000));
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first.stream.incarnation, Incarnation{0});
  ASSERT_TRUE(f(Command::delete_stream(kKey)).ok());
  EXPECT_EQ(fsm.tombstone_count(), 0u);
  auto again = f(Command::create_stream(kKey, spec(), 1700000000000099));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again.stream.incarnation, Incarnation{0});
  EXPECT_EQ(fsm.get_stream(kKey)->incarnation, Incarnation{0});
  EXPECT_EQ(fsm.tombstone_count(), 0u);

  // An unflagged entry is decided the way level 8 decides it, whatever it proposes
  // (felix post-mortem: "a create that proposes 0 stores 0"; unflagged = legacy rule).
  ASSERT_TRUE(f(Command::delete_stream(kKey)).ok());
  Command odd = Command::create_stream(kKey, spec(), 1);
  odd.proposed_incarnation = 12345;
  auto r = f(odd);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.stream.incarnation, Incarnation{0});

  // A flagged entry needs level 14: this level-8 member holds, state unchanged.
  Command flagged = Command::create_stream({"acme", "prod", "new"}, spec(), 1);
  flagged.incarnations = IncarnationRule::flagged;
  EXPECT_FALSE(f(flagged).ok());
  EXPECT_TRUE(fsm.held().has_value());
  EXPECT_EQ(fsm.get_stream({"acme", "prod", "new"}).error().code, Errc::not_found);
  EXPECT_EQ(fsm.level(), MetadataLevel{8});
  EXPECT_EQ(fsm.level_floor(), MetadataLevel{8});
}

TEST(CatalogFsm, TwoMembersFedTheSameEntriesHaveTheSameState) {
  CatalogFsm a, b;
  auto entries = standard_entries();
  std::uint64_t i = 1;
  for (auto& e : entries) {
    auto ra = a.apply(i, e);
    auto rb = b.apply(i, e);
    EXPECT_EQ(ra.ok(), rb.ok()) << "entry " << i;
    i += 2;  // non-contiguous indexes, as with barriers in between
  }
  EXPECT_EQ(a.state_hash(), b.state_hash());
  CatalogFsm c;
  c.apply(1, entries[0]);
  EXPECT_NE(a.state_hash(), c.state_hash());
}

TEST(CatalogFsm, SnapshotRestoreRoundTrip) {
  CatalogFsm a;
  std::uint64_t i = 1;
  for (auto& e : standard_entries()) a.apply(i++, e);
  std::string image = a.snapshot();
  ASSERT_FALSE(image.empty());
  EXPECT_EQ(image.substr(0, 15), "SQLite format 3");

  CatalogFsm b;
  ASSERT_TRUE(b.restore(image).ok());
  EXPECT_EQ(a.state_hash(), b.state_hash());
  EXPECT_EQ(b.applied(), a.applied());
  EXPECT_EQ(b.cluster_id(), a.cluster_id());
  // The restored state keeps applying like the original.
  auto e = encode_command(Command::create_tenant("later"));
  EXPECT_TRUE(a.apply(i, e).ok());
  EXPECT_TRUE(b.apply(i, e).ok());
  EXPECT_EQ(a.state_hash(), b.state_hash());

  EXPECT_FALSE(b.restore("not a database").ok());
  EXPECT_EQ(a.state_hash(), b.state_hash());  // a failed restore keeps the state
}

TEST(CatalogFsm, ChangeLogIsOrderedAndDecodes) {
  CatalogFsm fsm;
  Feeder f(fsm);
  f(Command::init_cluster("c"));
  f(Command::create_tenant("acme"));
  f(Command::create_namespace("acme", "prod"));
  f(Command::create_stream(kKey, spec(3), 77));
  f(Command::create_tenant("acme"));  // rejected: no change
  f(Command::delete_stream(kKey));
  auto b = fsm.changes_after(ChangeSeq{0}, 100);
  ASSERT_FALSE(b.resync);
  ASSERT_EQ(b.events.size(), 4u);
  using K = ChangeEvent::Kind;
  EXPECT_EQ(b.events[0].kind, K::tenant_created);
  EXPECT_EQ(b.events[0].seq, ChangeSeq{2});
  EXPECT_EQ(b.events[1].kind, K::namespace_created);
  EXPECT_EQ(b.events[1].ns, "prod");
  EXPECT_EQ(b.events[2].kind, K::stream_created);
  EXPECT_EQ(b.events[2].stream.key, kKey);
  EXPECT_EQ(b.events[2].stream.spec, spec(3));
  EXPECT_EQ(b.events[2].stream.created_at_us, 77);
  EXPECT_EQ(b.events[3].kind, K::stream_deleted);
  EXPECT_EQ(b.events[3].seq, ChangeSeq{6});
  EXPECT_EQ(b.events[3].stream.created_seq, ChangeSeq{4});

  auto tail = fsm.changes_after(ChangeSeq{3}, 100);
  ASSERT_EQ(tail.events.size(), 2u);
  EXPECT_EQ(tail.events[0].seq, ChangeSeq{4});
  EXPECT_EQ(fsm.changes_after(ChangeSeq{2}, 1).events.size(), 1u);
}

TEST(CatalogFsm, ChangeLogIsBoundedAndOldCursorsResync) {
  CatalogFsm fsm(/*change_retention=*/5);
  Feeder f(fsm);
  f(Command::init_cluster("c"));
  EXPECT_FALSE(fsm.changes_after(ChangeSeq{0}, 10).resync);  // empty log, cursor 0: fine
  for (int i = 0; i < 20; ++i) f(Command::create_tenant("t" + std::to_string(i)));
  EXPECT_EQ(fsm.change_count(), 5u);
  EXPECT_TRUE(fsm.changes_after(ChangeSeq{0}, 10).resync);
  EXPECT_TRUE(fsm.changes_after(ChangeSeq{10}, 10).resync);
  // Changes 17..21 are retained; a cursor at 16 has seen everything pruned.
  auto b = fsm.changes_after(ChangeSeq{16}, 10);
  EXPECT_FALSE(b.resync);
  ASSERT_EQ(b.events.size(), 5u);
  EXPECT_EQ(b.events.front().seq, ChangeSeq{17});
  EXPECT_EQ(b.events.back().seq, ChangeSeq{21});
  EXPECT_TRUE(fsm.changes_after(ChangeSeq{15}, 10).resync);
}

// raft-meta used to read a stored change of a kind it did not know as tenant_created and
// hand it to watchers. A snapshot from a newer build can hold such a change: the feed
// must stop before it and say why, never invent an event.
TEST(CatalogFsm, UnknownChangeKindIsRefused) {
  CatalogFsm a;
  Feeder f(a);
  f(Command::init_cluster("c"));
  f(Command::create_tenant("acme"));                 // change 2
  f(Command::create_namespace("acme", "prod"));      // change 3
  f(Command::create_tenant("other"));                // change 4
  CatalogFsm b;
  ASSERT_TRUE(b.restore(edit_image(a.snapshot(), "UPDATE changes SET kind = 'member_joined' WHERE seq = 3")).ok());
  auto batch = b.changes_after(ChangeSeq{0}, 100);
  ASSERT_EQ(batch.events.size(), 1u);
  EXPECT_EQ(batch.events[0].seq, ChangeSeq{2});
  for (auto& e : batch.events) EXPECT_NE(e.seq, ChangeSeq{3}) << "change 3 was guessed as " << to_string(e.kind);
  ASSERT_TRUE(batch.error.has_value());
  EXPECT_NE(batch.error->message.find("member_joined"), std::string::npos) << batch.error->message;
  EXPECT_TRUE(b.changes_after(ChangeSeq{3}, 100).events.size() == 1u);  // after it: readable
}

// The error policy (docs/metadata-raft-design.md "Error policy"): an apply that fails for a
// reason that is not the entry's (here SQLite refuses the write: an injected trigger) holds the
// member at that entry. It used to roll back and advance applied_index, so this member
// silently lacked a change every other member had.
TEST(CatalogFsm, AFailedApplyHoldsTheMemberAndNeverSkips) {
  CatalogFsm a;
  Feeder f(a);
  f(Command::init_cluster("c"));
  f(Command::create_tenant("acme"));
  CatalogFsm b;
  ASSERT_TRUE(b.restore(edit_image(a.snapshot(),
                                    "CREATE TRIGGER injected BEFORE INSERT ON namespaces"
                                    " BEGIN SELECT RAISE(ABORT, 'injected failure'); END")).ok());
  ASSERT_EQ(b.applied(), ChangeSeq{2});
  const std::uint64_t hash = b.state_hash();

  auto r = b.apply(3, encode_command(Command::create_namespace("acme", "prod")));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error->code, Errc::unavailable);
  // The entry is committed; the healthy members apply it. Its proposer must not hear "it
  // did not happen" (transient) from a held leader: a retry would find it done (review).
  EXPECT_EQ(r.error->outcome, Outcome::uncertain);
  ASSERT_TRUE(b.held().has_value());
  EXPECT_EQ(b.held()->index, 3u);
  EXPECT_NE(b.held()->reason.find("applying the entry failed"), std::string::npos) << b.held()->reason;
  EXPECT_EQ(b.applied(), ChangeSeq{2});  // not past the entry it did not apply
  EXPECT_EQ(b.state_hash(), hash);       // and nothing of it stayed

  // Later entries are not applied either (never skip): still held at 3, applied stays.
  auto later = b.apply(4, encode_command(Command::create_tenant("later")));
  ASSERT_FALSE(later.ok());
  EXPECT_EQ(later.error->outcome, Outcome::uncertain);
  EXPECT_EQ(b.held()->index, 3u);
  EXPECT_EQ(b.applied(), ChangeSeq{2});
  EXPECT_EQ(b.list_tenants()->size(), 1u);
  EXPECT_TRUE(b.snapshot().empty());  // a held member offers no snapshot
}

}  // namespace
}  // namespace sluice::raft_meta
