// The cluster transport's handshake without a network (plugins/raft-meta/cluster_handshake.h):
// the incremental readers fed however the bytes are split, and the cluster-id
// decisions of both sides. The frames' layout: ClusterTransportFrames.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "cluster_handshake.h"

namespace sluice::raft_meta {
namespace {

std::string le32(std::uint32_t v) {
  std::string s;
  for (int i = 0; i < 4; i++) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return s;
}
std::string le64(std::uint64_t v) {
  std::string s;
  for (int i = 0; i < 8; i++) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return s;
}

// Feeds `bytes` in pieces of at most `chunk`, never more than the reader wants, as the
// transport's read buffers do. Returns the last progress and how many bytes were consumed.
template <class Reader>
ReadProgress feed(Reader& r, const std::string& bytes, std::size_t chunk, std::size_t* used) {
  ReadProgress p = ReadProgress::more;
  std::size_t at = 0;
  while (p == ReadProgress::more && at < bytes.size()) {
    std::size_t n = std::min({chunk, r.want(), bytes.size() - at});
    std::memcpy(r.next(), bytes.data() + at, n);
    at += n;
    p = r.received(n);
  }
  *used = at;
  return p;
}

TEST(ClusterHandshake, HelloReaderReadsExactlyTheFrameHoweverSplit) {
  const std::string hello = encode_cluster_hello("cluster-1", 7, "127.0.0.1:9001");
  for (std::size_t chunk : {std::size_t{1}, std::size_t{3}, std::size_t{5000}}) {
    HelloReader r;
    std::size_t used = 0;
    // Bytes after the hello are never asked for.
    EXPECT_EQ(feed(r, hello + "next-frame", chunk, &used), ReadProgress::complete) << chunk;
    EXPECT_EQ(used, hello.size()) << chunk;
    EXPECT_EQ(r.want(), 0u);
    EXPECT_EQ(r.cluster_id(), "cluster-1");
    EXPECT_EQ(r.server_id(), 7u);
    EXPECT_EQ(r.address(), "127.0.0.1:9001");
  }
  HelloReader empty_id;
  std::size_t used = 0;
  EXPECT_EQ(feed(empty_id, encode_cluster_hello("", 1, "a"), 64, &used), ReadProgress::complete);
  EXPECT_EQ(empty_id.cluster_id(), "");
}

TEST(ClusterHandshake, HelloReaderRejectsMalformedFrames) {
  struct Case {
    std::string bytes;
    std::string reason;
  };
  const std::string magic = "SLRAFT01";
  const Case cases[] = {
      {"SLRAFX01", "bad magic (not a Sluice raft hello)"},
      {"GET / HTTP/1.1\r\n", "bad magic (not a Sluice raft hello)"},
      {magic + le32(65), "cluster id length 65 exceeds 64"},
      {magic + le32(1) + "c" + le64(0) + le32(1) + "a", "server id 0"},
      {magic + le32(1) + "c" + le64(2) + le32(0), "address length 0 not in 1..255"},
      {magic + le32(1) + "c" + le64(2) + le32(256), "address length 256 not in 1..255"},
      {magic + le32(1) + "c" + le64(2) + le32(3) + "a\nb", "address a\\x0ab is not printable ASCII"},
  };
  for (const Case& c : cases) {
    for (std::size_t chunk : {std::size_t{1}, std::size_t{5000}}) {
      HelloReader r;
      std::size_t used = 0;
      EXPECT_EQ(feed(r, c.bytes, chunk, &used), ReadProgress::malformed) << c.reason;
      EXPECT_EQ(r.reason(), c.reason);
      EXPECT_EQ(r.address(), "") << "an invalid address is never exposed";
      EXPECT_EQ(r.received(0), ReadProgress::malformed) << "malformed stays malformed";
    }
  }
  // The magic is checked byte by byte: the first wrong byte is enough.
  HelloReader r;
  std::size_t used = 0;
  EXPECT_EQ(feed(r, "SX", 1, &used), ReadProgress::malformed);
  EXPECT_EQ(used, 2u);
}

TEST(ClusterHandshake, AnswerReaderReadsStatusAndId) {
  for (std::size_t chunk : {std::size_t{1}, std::size_t{5000}}) {
    AnswerReader r;
    std::size_t used = 0;
    std::string answer = encode_cluster_answer(HandshakeStatus::cluster_id_unknown, "zz");
    EXPECT_EQ(feed(r, answer + "x", chunk, &used), ReadProgress::complete);
    EXPECT_EQ(used, answer.size());
    EXPECT_EQ(r.status(), HandshakeStatus::cluster_id_unknown);
    EXPECT_EQ(r.cluster_id(), "zz");
  }
  AnswerReader no_id;
  std::size_t used = 0;
  EXPECT_EQ(feed(no_id, encode_cluster_answer(HandshakeStatus::ok, ""), 5000, &used),
            ReadProgress::complete)
      << "an empty id completes with the fixed part";

  const std::string magic = "SLRAFT01";
  AnswerReader bad_status;
  EXPECT_EQ(feed(bad_status, magic + le32(4) + le32(0), 5000, &used), ReadProgress::malformed);
  EXPECT_EQ(bad_status.reason(), "unknown answer status 4");
  AnswerReader long_id;
  EXPECT_EQ(feed(long_id, magic + le32(0) + le32(65), 5000, &used), ReadProgress::malformed);
  EXPECT_EQ(long_id.reason(), "answer cluster id length 65 exceeds 64");
  AnswerReader bad_magic;
  EXPECT_EQ(feed(bad_magic, "SLRAFT02", 1, &used), ReadProgress::malformed);
  EXPECT_EQ(bad_magic.reason(), "bad magic in the answer");
}

TEST(ClusterHandshake, AcceptorJudgesTheHello) {
  EXPECT_EQ(judge_hello("a", "a"), HelloVerdict::accept);
  EXPECT_EQ(judge_hello("a", "b"), HelloVerdict::mismatch);
  EXPECT_EQ(judge_hello("a", ""), HelloVerdict::mismatch);
  EXPECT_EQ(judge_hello("", "a"), HelloVerdict::local_unknown);
  EXPECT_EQ(judge_hello("", ""), HelloVerdict::local_unknown) << "two members without ids";
  EXPECT_EQ(judge_hello(std::string(65, 'x'), std::string(65, 'x')), HelloVerdict::local_too_long);
}

TEST(ClusterHandshake, ConnectorJudgesTheAnswer) {
  EXPECT_EQ(judge_answer(HandshakeStatus::ok, "a", "a"), AnswerVerdict::accept);
  EXPECT_EQ(judge_answer(HandshakeStatus::ok, "b", "a"), AnswerVerdict::mismatch)
      << "ok to another id is refused";
  EXPECT_EQ(judge_answer(HandshakeStatus::cluster_id_mismatch, "a", "a"), AnswerVerdict::mismatch);
  EXPECT_EQ(judge_answer(HandshakeStatus::cluster_id_unknown, "", "a"), AnswerVerdict::peer_unknown);
}

TEST(ClusterHandshake, PrintableEscapesNetworkText) {
  EXPECT_EQ(printable(""), "(none)");
  EXPECT_EQ(printable("ok-1"), "ok-1");
  EXPECT_EQ(printable(std::string("a\0\xff", 3)), "a\\x00\\xff");
  EXPECT_TRUE(is_printable_ascii("127.0.0.1:80"));
  EXPECT_FALSE(is_printable_ascii("a b"));
}

}  // namespace
}  // namespace sluice::raft_meta
