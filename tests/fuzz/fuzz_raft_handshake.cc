// The libraft transport's handshake readers (plugins/raft-meta/cluster_handshake.h), fed
// as a socket would: in pieces, each at most want() bytes.
//
// Input: byte 0 seeds the piece sizes; the rest is the stream. Both readers read it.
// Properties: a reader never asks for more than its buffer holds and never takes more
// than it asked (so nothing after the handshake is consumed); the outcome is the same
// however the stream is split (pieces vs. one byte at a time; only where in the last piece
// a malformed frame is noticed may differ); a complete hello or answer
// re-encodes to exactly the bytes read; a malformed one says why; the verdicts take any
// decoded id.
#include <algorithm>
#include <cstring>
#include <string>

#include "cluster_handshake.h"
#include "fuzz_check.h"

using namespace sluice::raft_meta;

namespace {

struct Outcome {
  ReadProgress progress;
  std::size_t have;
  std::string reason, cluster_id;
  bool operator==(const Outcome&) const = default;
};

// Feeds `in` to `r` in pieces of 1..(seed % 16 + 1) bytes (seed 0: one byte at a time).
template <class Reader>
Outcome feed(Reader& r, std::string_view in, unsigned seed, std::size_t max_size) {
  std::size_t at = 0;
  ReadProgress p = ReadProgress::more;
  unsigned s = seed;
  while (p == ReadProgress::more && at < in.size()) {
    const std::size_t want = r.want();
    FUZZ_CHECK(want > 0 && r.have() + want <= max_size);
    s = s * 1103515245u + 12345u;
    std::size_t n = seed == 0 ? 1 : 1 + (s >> 16) % (seed % 16 + 1);
    n = std::min<std::size_t>({n, want, in.size() - at});
    std::memcpy(r.next(), in.data() + at, n);
    at += n;
    p = r.received(n);
  }
  FUZZ_CHECK(r.have() == at);  // took exactly what was handed over, no more
  if (p == ReadProgress::malformed) {
    FUZZ_CHECK(!r.reason().empty());
    // How much of the last piece was taken before the verdict depends on the split.
    return {p, 0, r.reason(), r.cluster_id()};
  }
  return {p, r.have(), r.reason(), r.cluster_id()};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const unsigned seed = data[0];
  const std::string_view in(reinterpret_cast<const char*>(data + 1), size - 1);

  HelloReader h1, h2;
  const Outcome a = feed(h1, in, seed, HelloReader::kMaxSize);
  FUZZ_CHECK(feed(h2, in, 0, HelloReader::kMaxSize) == a);
  if (a.progress == ReadProgress::complete) {
    FUZZ_CHECK(h1.server_id() != 0 && is_printable_ascii(h1.address()));
    FUZZ_CHECK(h1.cluster_id().size() <= kMaxHandshakeClusterIdLen);
    const AuthNonce nonce = h1.nonce();
    FUZZ_CHECK(encode_cluster_hello(h1.cluster_id(), h1.server_id(), h1.address(),
                                    h1.version() == 2 ? &nonce : nullptr) == in.substr(0, a.have));
    (void)judge_hello(h1.cluster_id(), h1.address());
    (void)judge_hello(h1.address(), h1.cluster_id());
    FUZZ_CHECK(judge_hello(h1.cluster_id(), h1.cluster_id()) ==
               (h1.cluster_id().empty() ? HelloVerdict::local_unknown : HelloVerdict::accept));
  }

  AnswerReader r1, r2;
  const Outcome b = feed(r1, in, seed, AnswerReader::kMaxSize);
  FUZZ_CHECK(feed(r2, in, 0, AnswerReader::kMaxSize) == b);
  if (b.progress == ReadProgress::complete) {
    FUZZ_CHECK(encode_cluster_answer(r1.status(), r1.cluster_id()) == in.substr(0, b.have));
    const auto v = judge_answer(r1.status(), r1.cluster_id(), r1.cluster_id());
    FUZZ_CHECK((r1.status() == HandshakeStatus::ok) == (v == AnswerVerdict::accept));
    FUZZ_CHECK(!printable(r1.cluster_id()).empty());
  }

  // The answer to a hello2 (with the acceptor's nonce and proof when auth is 1).
  AnswerReader v1(2), v2(2);
  const Outcome c = feed(v1, in, seed, AnswerReader::kMaxSize);
  FUZZ_CHECK(feed(v2, in, 0, AnswerReader::kMaxSize) == c);
  if (c.progress == ReadProgress::complete) {
    const AnswerAuth auth = v1.auth();
    FUZZ_CHECK(encode_cluster_answer_v2(v1.status(), v1.cluster_id(),
                                        v1.authenticated() ? &auth : nullptr) == in.substr(0, c.have));
  }
  return 0;
}
