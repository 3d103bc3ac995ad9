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
inline constexpr std::size_t kMaxHandshakeClusterIdLen = 64;
inline constexpr std::size_t kMaxHandshakeAddressLen = 255;

enum class HandshakeStatus : std::uint32_t {
  ok = 0,
  cluster_id_mismatch = 1,
  cluster_id_unknown = 2,  // the accepting member does not know its cluster id yet
};

std::string encode_cluster_hello(std::string_view cluster_id, std::uint64_t server_id,
                                 std::string_view address);
std::string encode_cluster_answer(HandshakeStatus status, std::string_view cluster_id);

enum class ReadProgress { more, complete, malformed };

// Reads one hello, however the bytes are split.
class HelloReader {
 public:
  static constexpr std::size_t kMaxSize = kClusterHandshakeMagic.size() + 4 +
                                          kMaxHandshakeClusterIdLen + 8 + 4 +
                                          kMaxHandshakeAddressLen;
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

 private:
  ReadProgress fail(std::string reason);

  std::array<char, kMaxSize> buf_{};
  std::size_t have_ = 0;
  std::size_t need_ = kClusterHandshakeMagic.size() + 4;
  ReadProgress state_ = ReadProgress::more;
  std::string reason_;
  std::string cluster_id_;
  std::uint64_t server_id_ = 0;
  std::string address_;
};

// Reads one answer, however the bytes are split.
class AnswerReader {
 public:
  static constexpr std::size_t kFixedSize = kClusterHandshakeMagic.size() + 4 + 4;
  static constexpr std::size_t kMaxSize = kFixedSize + kMaxHandshakeClusterIdLen;
  char* next() { return buf_.data() + have_; }
  std::size_t want() const { return need_ - have_; }
  ReadProgress received(std::size_t n);

  std::size_t have() const { return have_; }
  const std::string& reason() const { return reason_; }
  HandshakeStatus status() const { return status_; }
  const std::string& cluster_id() const { return cluster_id_; }

 private:
  ReadProgress fail(std::string reason);

  std::array<char, kMaxSize> buf_{};
  std::size_t have_ = 0;
  std::size_t need_ = kFixedSize;
  ReadProgress state_ = ReadProgress::more;
  std::string reason_;
  HandshakeStatus status_ = HandshakeStatus::ok;
  std::string cluster_id_;
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
};
AnswerVerdict judge_answer(HandshakeStatus status, std::string_view answer_cluster_id,
                           std::string_view local_cluster_id);

// Ids and addresses come from the network: shown escaped ("\xNN"), "(none)" when empty.
std::string printable(std::string_view s);
// Every byte in 0x21..0x7e (no space, no control byte).
bool is_printable_ascii(std::string_view s);

}  // namespace sluice::raft_meta
