// The handshake of the cluster transport (cluster_transport.h): the frames both sides write,
// incremental readers for them, and the cluster-id decisions. Pure: no libuv, no sockets, no
// clock, so every rule here is tested without a network (tests/raft-meta/cluster_handshake_test.cc).
//
// Wire format (all integers little-endian). The connecting side writes, once connected:
//
//   hello   = "SLRAFT01" (8 bytes)
//             u32 cluster id length (<= 64) | cluster id bytes
//             u64 raft server id (!= 0)
//             u32 address length (1..255)    | address bytes (printable ASCII)
//
// and the accepting side answers
//
//   answer  = "SLRAFT01" (8 bytes) | u32 status | u32 length (<= 64) | its own cluster id
//
// Members that hold a cluster secret (`raft.cluster_secret_file`, docs/security.md "Raft
// members") authenticate each other with it, in version 2 of the frames:
//
//   hello2  = "SLRAFT02" | the hello's fields as above | 32-byte nonce Nc
//   answer2 = "SLRAFT02" | u32 status | u32 length | cluster id | u8 auth (0 or 1)
//             [auth 1: 32-byte nonce Na | 32-byte proof Pa]
//   proof   = 32-byte proof Pc  (connector -> acceptor, after an answer2 with auth 1 and ok)
//
// Pa and Pc are HMAC-SHA256 under the secret over a label ("accept" or "connect"), the
// cluster id, the connector's server id and address, Nc and Na (cluster_auth.h). auth 0
// means the acceptor holds no secret; a connector that requires authentication refuses it.
// An acceptor that requires authentication answers a version-1 hello with status 3.
//
// Reading: a reader says how many bytes it still expects (`want()`), exactly, so the caller
// never reads past the frame: first the fixed part, then the lengths it announces.
//
//   hello:   magic+id length --> id, server id, address length --> address --> complete
//   answer:  magic, status, id length ---------------------------> id      --> complete
//   any step: a bad magic byte (checked as soon as it arrives), an oversized length, server
//             id 0, an unknown status or a non-printable address --> malformed (reason())
//
// Threading: a reader is a plain value owned by one connection; nothing is shared.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace sluice::raft_meta {

inline constexpr std::string_view kClusterHandshakeMagic = "SLRAFT01";
inline constexpr std::string_view kClusterHandshakeMagicV2 = "SLRAFT02";
inline constexpr std::size_t kAuthNonceLen = 32;
inline constexpr std::size_t kAuthProofLen = 32;
using AuthNonce = std::array<unsigned char, kAuthNonceLen>;
using AuthProof = std::array<unsigned char, kAuthProofLen>;
inline constexpr std::size_t kMaxHandshakeClusterIdLen = 64;
inline constexpr std::size_t kMaxHandshakeAddressLen = 255;

enum class HandshakeStatus : std::uint32_t {
  ok = 0,
  cluster_id_mismatch = 1,
  cluster_id_unknown = 2,  // the accepting member does not know its cluster id yet
  auth_required = 3,       // the accepting member requires the cluster secret (hello2)
};

// With a nonce: a hello2.
std::string encode_cluster_hello(std::string_view cluster_id, std::uint64_t server_id,
                                 std::string_view address, const AuthNonce* nonce = nullptr);
std::string encode_cluster_answer(HandshakeStatus status, std::string_view cluster_id);
// An answer2; `auth` null: auth 0 (this member holds no secret).
struct AnswerAuth {
  AuthNonce nonce{};
  AuthProof proof{};
};
std::string encode_cluster_answer_v2(HandshakeStatus status, std::string_view cluster_id,
                                     const AnswerAuth* auth);

enum class ReadProgress { more, complete, malformed };

// Reads one hello, however the bytes are split.
class HelloReader {
 public:
  static constexpr std::size_t kMaxSize = kClusterHandshakeMagic.size() + 4 +
                                          kMaxHandshakeClusterIdLen + 8 + 4 +
                                          kMaxHandshakeAddressLen + kAuthNonceLen;
  // Where the next bytes go, and exactly how many are still expected (> 0 until complete).
  char* next() { return buf_.data() + have_; }
  std::size_t want() const { return need_ - have_; }
  // `n` (<= want()) bytes were written at next(). Once complete or malformed, stays so.
  ReadProgress received(std::size_t n);

  std::size_t have() const { return have_; }
  std::size_t need() const { return need_; }
  const std::string& reason() const { return reason_; }  // why malformed
  // Known as soon as their part is read and valid (for log lines before completion).
  const std::string& cluster_id() const { return cluster_id_; }
  std::uint64_t server_id() const { return server_id_; }
  const std::string& address() const { return address_; }  // only once complete
  int version() const { return version_; }  // 1 or 2, once the magic is read
  const AuthNonce& nonce() const { return nonce_; }  // a hello2's, once complete

 private:
  ReadProgress fail(std::string reason);

  std::array<char, kMaxSize> buf_{};
  std::size_t have_ = 0;
  std::size_t need_ = kClusterHandshakeMagic.size() + 4;
  std::size_t address_end_ = 0;
  ReadProgress state_ = ReadProgress::more;
  std::string reason_;
  std::string cluster_id_;
  std::uint64_t server_id_ = 0;
  std::string address_;
  int version_ = 0;
  AuthNonce nonce_{};
};

// Reads one answer, however the bytes are split: version 1, or an answer2 after a hello2.
class AnswerReader {
 public:
  static constexpr std::size_t kFixedSize = kClusterHandshakeMagic.size() + 4 + 4;
  static constexpr std::size_t kMaxSize =
      kFixedSize + kMaxHandshakeClusterIdLen + 1 + kAuthNonceLen + kAuthProofLen;
  explicit AnswerReader(int version = 1) : version_(version == 2 ? 2 : 1) {}
  char* next() { return buf_.data() + have_; }
  std::size_t want() const { return need_ - have_; }
  ReadProgress received(std::size_t n);

  std::size_t have() const { return have_; }
  const std::string& reason() const { return reason_; }
  HandshakeStatus status() const { return status_; }
  const std::string& cluster_id() const { return cluster_id_; }
  int version() const { return version_; }
  // An answer2 with auth 1: the acceptor's nonce and proof (once complete).
  bool authenticated() const { return auth_; }
  const AnswerAuth& auth() const { return auth_fields_; }

 private:
  ReadProgress fail(std::string reason);

  std::array<char, kMaxSize> buf_{};
  std::size_t have_ = 0;
  std::size_t need_ = kFixedSize;
  std::size_t id_end_ = 0;
  ReadProgress state_ = ReadProgress::more;
  std::string reason_;
  HandshakeStatus status_ = HandshakeStatus::ok;
  std::string cluster_id_;
  int version_ = 1;
  bool auth_ = false;
  AnswerAuth auth_fields_{};
};

// Reads the connector's proof (32 bytes), however the bytes are split.
class ProofReader {
 public:
  char* next() { return reinterpret_cast<char*>(proof_.data()) + have_; }
  std::size_t want() const { return kAuthProofLen - have_; }
  ReadProgress received(std::size_t n) {
    have_ += n < want() ? n : want();
    return have_ == kAuthProofLen ? ReadProgress::complete : ReadProgress::more;
  }
  std::size_t have() const { return have_; }
  const AuthProof& proof() const { return proof_; }

 private:
  AuthProof proof_{};
  std::size_t have_ = 0;
};

// The accepting side's decision on a complete hello, given its own cluster id.
enum class HelloVerdict {
  accept,           // answer ok, then hand the stream to libraft
  mismatch,         // answer cluster_id_mismatch, then close
  local_unknown,    // answer cluster_id_unknown, then close
  local_too_long,   // this member's id cannot be sent: close without an answer
};
HelloVerdict judge_hello(std::string_view local_cluster_id, std::string_view peer_cluster_id);

// The connecting side's decision on a complete answer, given the id it sent.
enum class AnswerVerdict {
  accept,        // ok and the same id: hand the stream to libraft
  mismatch,      // cluster_id_mismatch, or "ok" to another id
  peer_unknown,  // the peer does not know its cluster id yet
  auth_required, // the peer requires the cluster secret and this member sent none
};
AnswerVerdict judge_answer(HandshakeStatus status, std::string_view answer_cluster_id,
                           std::string_view local_cluster_id);

// Ids and addresses come from the network: shown escaped ("\xNN"), "(none)" when empty.
std::string printable(std::string_view s);
// Every byte in 0x21..0x7e (no space, no control byte).
bool is_printable_ascii(std::string_view s);

}  // namespace sluice::raft_meta
