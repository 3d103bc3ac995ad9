// The cache data plane's pure parts: record encoding, key rules, backing names, index.
#include <gtest/gtest.h>

#include "cache_codec.h"
#include "sluice/names.h"

namespace sluice::http_api {
namespace {

TEST(CacheCodec, RecordRoundTrip) {
  CacheRecord r;
  r.op = CacheRecord::Op::put;
  r.nonce = 0x0102030405060708ULL;
  r.expires_at_ms = 1700000000123;
  r.value = std::string_view("v\0x", 3);
  const std::string b = encode_cache_record(r);
  ASSERT_EQ(b.size(), kCacheRecordHeader + 3);
  auto d = decode_cache_record(b);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->op, CacheRecord::Op::put);
  EXPECT_EQ(d->nonce, r.nonce);
  EXPECT_EQ(d->expires_at_ms, r.expires_at_ms);
  EXPECT_EQ(d->value, r.value);

  CacheRecord del;
  del.op = CacheRecord::Op::del;
  auto dd = decode_cache_record(encode_cache_record(del));
  ASSERT_TRUE(dd);
  EXPECT_EQ(dd->op, CacheRecord::Op::del);
  EXPECT_EQ(dd->expires_at_ms, -1);
}

TEST(CacheCodec, RejectsMalformedRecords) {
  EXPECT_FALSE(decode_cache_record(""));
  EXPECT_FALSE(decode_cache_record(std::string(kCacheRecordHeader - 1, '\1')));
  std::string bad_op = encode_cache_record(CacheRecord{});
  bad_op[0] = 7;
  EXPECT_FALSE(decode_cache_record(bad_op));
  CacheRecord del;
  del.op = CacheRecord::Op::del;
  EXPECT_FALSE(decode_cache_record(encode_cache_record(del) + "x"));  // a delete has no value
}

TEST(CacheCodec, KeyRules) {
  EXPECT_TRUE(validate_cache_key("user:42/a~b", 512));
  EXPECT_EQ(validate_cache_key("", 512).error().code, Errc::invalid_argument);
  EXPECT_FALSE(validate_cache_key(std::string(513, 'k'), 512));
  EXPECT_TRUE(validate_cache_key(std::string(512, 'k'), 512));
  auto sp = validate_cache_key("a b", 512);
  ASSERT_FALSE(sp);
  EXPECT_NE(sp.error().message.find("0x20"), std::string::npos);
  EXPECT_FALSE(validate_cache_key(std::string("a\x01", 2), 512));
  EXPECT_FALSE(validate_cache_key("caf\xc3\xa9", 512));
}

TEST(CacheCodec, BackingNamesAreValidReservedAndPerIncarnation) {
  const std::string a = backing_stream_name("sessions", Incarnation{3}, ChangeSeq{17});
  EXPECT_EQ(a, "__cache.3.17.n.sessions");
  EXPECT_TRUE(validate_name(NameKind::stream, a));
  EXPECT_TRUE(reserved_stream_name(a));
  EXPECT_NE(a, backing_stream_name("sessions", Incarnation{4}, ChangeSeq{17}));
  // Before cache_incarnations is finalized every create has incarnation 0: the create's
  // change sequence still tells two creates apart.
  EXPECT_NE(backing_stream_name("s", Incarnation{0}, ChangeSeq{5}), backing_stream_name("s", Incarnation{0}, ChangeSeq{9}));
  // A name too long to embed is hashed; still valid, still per incarnation.
  const std::string longname(255, 'x');
  const std::string h = backing_stream_name(longname, Incarnation{1}, ChangeSeq{2});
  EXPECT_TRUE(validate_name(NameKind::stream, h));
  EXPECT_TRUE(h.starts_with("__cache.1.2.h."));
  EXPECT_NE(h, backing_stream_name(std::string(254, 'x') + "y", Incarnation{1}, ChangeSeq{2}));
  EXPECT_FALSE(reserved_stream_name("_x"));
}

CacheRecord put(std::string_view v, std::int64_t exp = -1) {
  CacheRecord r;
  r.value = v;
  r.expires_at_ms = exp;
  return r;
}

TEST(CacheIndex, AppliesPutsDeletesAndExpiry) {
  CacheIndex ix;
  ix.apply("a", put("1"), 0, 1000);
  ix.apply("b", put("2", 5000), 1, 1000);
  ix.apply("a", put("3"), 2, 1000);
  const CacheEntry* a = ix.find("a", 1000);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->revision, 3u);
  EXPECT_EQ(a->value, "3");
  ASSERT_TRUE(ix.find("b", 4999));
  EXPECT_FALSE(ix.find("b", 5000));  // expired at its instant, and dropped
  EXPECT_EQ(ix.size(), 1u);
  CacheRecord del;
  del.op = CacheRecord::Op::del;
  ix.apply("a", del, 3, 1000);
  EXPECT_FALSE(ix.find("a", 1000));
  // Replaying an already expired put (recovery after its expiry) never makes it live.
  ix.apply("c", put("x", 900), 4, 1000);
  EXPECT_FALSE(ix.find("c", 1000));
  EXPECT_EQ(ix.size(), 0u);
}

// Restate records (docs/architecture.md "Cache compaction"): the compactor's copy of a
// key's live state. The index takes revision and absolute expiry from the record, not from
// its offset or stamp; a later put or delete wins as usual.
TEST(CacheCodec, RestateRoundTripAndRejects) {
  CacheRecord r;
  r.op = CacheRecord::Op::restate;
  r.nonce = 9;
  r.expires_at_ms = 1700000000123;
  r.revision = 42;
  r.value = "val";
  const std::string b = encode_cache_record(r);
  ASSERT_EQ(b.size(), kRestateRecordHeader + 3);
  auto d = decode_cache_record(b);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->op, CacheRecord::Op::restate);
  EXPECT_EQ(d->revision, 42u);
  EXPECT_EQ(d->expires_at_ms, r.expires_at_ms);
  EXPECT_EQ(d->value, "val");
  EXPECT_FALSE(decode_cache_record(b.substr(0, kRestateRecordHeader - 1)));  // no revision
  CacheRecord zero = r;
  zero.revision = 0;
  EXPECT_FALSE(decode_cache_record(encode_cache_record(zero)));
}

TEST(CacheIndex, RestateKeepsTheOriginalRevisionAndExpiryAndLaterWritesWin) {
  CacheIndex ix;
  CacheRecord r;
  r.op = CacheRecord::Op::restate;
  r.revision = 7;
  r.expires_at_ms = 50000;
  r.value = "old";
  ix.apply("k", r, 100, 1000, 99999);  // offset 100, stamped 99999: neither is used
  const CacheEntry* e = ix.find("k", 1000);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->revision, 7u);
  EXPECT_EQ(e->expires_at_ms, 50000);
  EXPECT_EQ(e->value, "old");
  EXPECT_EQ(ix.live_bytes(), 4u);
  EXPECT_FALSE(ix.find("k", 50000));  // the absolute expiry holds
  ix.apply("k", r, 100, 1000, 99999);
  ix.apply("k", put("new"), 101, 1000);
  e = ix.find("k", 1000);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->revision, 102u);
  EXPECT_EQ(e->expires_at_ms, -1);
  CacheRecord del;
  del.op = CacheRecord::Op::del;
  ix.apply("k", del, 102, 1000);
  EXPECT_FALSE(ix.find("k", 1000));
  EXPECT_EQ(ix.live_bytes(), 0u);
  // A restate without expiry is live forever; one already expired never becomes live.
  r.expires_at_ms = -1;
  ix.apply("n", r, 103, 1000);
  ASSERT_TRUE(ix.find("n", INT64_MAX - 1));
  r.expires_at_ms = 900;
  ix.apply("x", r, 104, 1000);
  EXPECT_FALSE(ix.find("x", 1000));
}

TEST(CacheIndex, WalkFromVisitsKeysInOrderExpiredOnesIncluded) {
  CacheIndex ix;
  std::uint64_t off = 0;
  for (const char* k : {"c", "a", "d", "b"}) ix.apply(k, put("v", 5000), off++, 0);
  std::string seen;
  ix.walk_from("a", [&](const std::string& k, const CacheEntry&) {
    seen += k;
    return k != "c";
  });
  EXPECT_EQ(seen, "bc");
  seen.clear();
  ix.walk_from("", [&](const std::string& k, const CacheEntry&) {
    seen += k;
    return true;
  });
  EXPECT_EQ(seen, "abcd");
}

TEST(CacheIndex, ATtlPutExpiresByTheLeadersStampNotTheReader) {
  CacheRecord r;
  r.op = CacheRecord::Op::put_ttl;
  r.expires_at_ms = 1000;  // the TTL
  r.value = "v";
  const std::string encoded = encode_cache_record(r);  // the decoded value views into it
  auto d = decode_cache_record(encoded);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->op, CacheRecord::Op::put_ttl);
  EXPECT_EQ(CacheIndex::expiry(*d, 50000), 51000);
  CacheIndex ix;
  // Stamped by the leader at 50000: live until 51000 whatever the reader's clock was when
  // it applied it, and a replay (a rebuild, a restart) computes the same expiry.
  ix.apply("k", *d, 0, 20000, 50000);
  ASSERT_TRUE(ix.find("k", 50999));
  EXPECT_EQ(ix.find("k", 50999)->expires_at_ms, 51000);
  EXPECT_FALSE(ix.find("k", 51000));
  ix.apply("k", *d, 0, 60000, 50000);  // replayed after its expiry: never live again
  EXPECT_FALSE(ix.find("k", 0));
  // Not stamped (an engine that does not stamp leader time): never live longer than asked.
  ix.apply("u", *d, 1, 20000, -1);
  EXPECT_FALSE(ix.find("u", 20000));
  // A TTL of 0 or below is not a record.
  r.expires_at_ms = 0;
  EXPECT_FALSE(decode_cache_record(encode_cache_record(r)));
  r.expires_at_ms = -5;
  EXPECT_FALSE(decode_cache_record(encode_cache_record(r)));
}

TEST(CacheIndex, ScanIsSortedPrefixedAndPaged) {
  CacheIndex ix;
  std::uint64_t off = 0;
  for (const char* k : {"b2", "a1", "b1", "b3", "c1", "b4"}) ix.apply(k, put("v"), off++, 0);
  ix.apply("b5", put("v", 10), off++, 0);  // expires at 10
  std::vector<std::string> got;
  auto collect = [&](const std::string& k, const CacheEntry&) { got.push_back(k); };
  EXPECT_TRUE(ix.scan("b", "", 2, 100, collect));
  EXPECT_EQ(got, (std::vector<std::string>{"b1", "b2"}));
  got.clear();
  EXPECT_FALSE(ix.scan("b", "b2", 10, 100, collect));
  EXPECT_EQ(got, (std::vector<std::string>{"b3", "b4"}));  // b5 expired: not listed
  got.clear();
  EXPECT_FALSE(ix.scan("", "", 100, 100, collect));
  EXPECT_EQ(got.size(), 6u);
}

}  // namespace
}  // namespace sluice::http_api
