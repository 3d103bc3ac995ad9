#include "cluster_handshake.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

namespace sluice::raft_meta {

namespace {

constexpr std::size_t kMagicLen = kClusterHandshakeMagic.size();

void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; i++) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; i++) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
std::uint32_t get_u32(const char* p) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}
std::uint64_t get_u64(const char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

// The magic is checked as soon as its bytes arrive: bytes [before, have) of the frame.
bool magic_ok(const char* frame, std::size_t before, std::size_t have) {
  if (before >= kMagicLen) return true;
  std::size_t upto = std::min(have, kMagicLen);
  return std::memcmp(frame + before, kClusterHandshakeMagic.data() + before, upto - before) == 0;
}

}  // namespace

std::string encode_cluster_hello(std::string_view cluster_id, std::uint64_t server_id,
                                 std::string_view address) {
  std::string out(kClusterHandshakeMagic);
  put_u32(out, static_cast<std::uint32_t>(cluster_id.size()));
  out.append(cluster_id);
  put_u64(out, server_id);
  put_u32(out, static_cast<std::uint32_t>(address.size()));
  out.append(address);
  return out;
}

std::string encode_cluster_answer(HandshakeStatus status, std::string_view cluster_id) {
  std::string out(kClusterHandshakeMagic);
  put_u32(out, static_cast<std::uint32_t>(status));
  put_u32(out, static_cast<std::uint32_t>(cluster_id.size()));
  out.append(cluster_id);
  return out;
}

// --- hello ---

ReadProgress HelloReader::fail(std::string reason) {
  reason_ = std::move(reason);
  state_ = ReadProgress::malformed;
  return state_;
}

ReadProgress HelloReader::received(std::size_t n) {
  if (state_ != ReadProgress::more) return state_;
  std::size_t before = have_;
  have_ += std::min(n, want());
  if (!magic_ok(buf_.data(), before, have_)) return fail("bad magic (not a Sluice raft hello)");
  if (have_ < need_) return state_;

  constexpr std::size_t kFixed = kMagicLen + 4;  // magic | u32 id len
  std::uint32_t id_len = get_u32(buf_.data() + kMagicLen);
  if (need_ == kFixed) {
    if (id_len > kMaxHandshakeClusterIdLen)
      return fail("cluster id length " + std::to_string(id_len) + " exceeds " +
                  std::to_string(kMaxHandshakeClusterIdLen));
    need_ = kFixed + id_len + 8 + 4;  // id | u64 server id | u32 address length
    return state_;
  }
  std::size_t after_id = kFixed + id_len;
  if (need_ == after_id + 12) {
    std::uint64_t server_id = get_u64(buf_.data() + after_id);
    std::uint32_t addr_len = get_u32(buf_.data() + after_id + 8);
    if (server_id == 0) return fail("server id 0");
    if (addr_len == 0 || addr_len > kMaxHandshakeAddressLen)
      return fail("address length " + std::to_string(addr_len) + " not in 1.." +
                  std::to_string(kMaxHandshakeAddressLen));
    cluster_id_.assign(buf_.data() + kFixed, id_len);
    server_id_ = server_id;
    need_ = after_id + 12 + addr_len;
    return state_;
  }
  std::string_view address(buf_.data() + after_id + 12, need_ - (after_id + 12));
  if (!is_printable_ascii(address))
    return fail("address " + printable(address) + " is not printable ASCII");
  address_.assign(address);
  state_ = ReadProgress::complete;
  return state_;
}

// --- answer ---

ReadProgress AnswerReader::fail(std::string reason) {
  reason_ = std::move(reason);
  state_ = ReadProgress::malformed;
  return state_;
}

ReadProgress AnswerReader::received(std::size_t n) {
  if (state_ != ReadProgress::more) return state_;
  std::size_t before = have_;
  have_ += std::min(n, want());
  if (!magic_ok(buf_.data(), before, have_)) return fail("bad magic in the answer");
  if (have_ < need_) return state_;
  if (need_ == kFixedSize) {
    std::uint32_t status = get_u32(buf_.data() + kMagicLen);
    std::uint32_t len = get_u32(buf_.data() + kMagicLen + 4);
    if (status > static_cast<std::uint32_t>(HandshakeStatus::cluster_id_unknown))
      return fail("unknown answer status " + std::to_string(status));
    if (len > kMaxHandshakeClusterIdLen)
      return fail("answer cluster id length " + std::to_string(len) + " exceeds " +
                  std::to_string(kMaxHandshakeClusterIdLen));
    status_ = static_cast<HandshakeStatus>(status);
    need_ = kFixedSize + len;
    if (len > 0) return state_;
  }
  cluster_id_.assign(buf_.data() + kFixedSize, need_ - kFixedSize);
  state_ = ReadProgress::complete;
  return state_;
}

// --- decisions ---

HelloVerdict judge_hello(std::string_view local_cluster_id, std::string_view peer_cluster_id) {
  if (local_cluster_id.empty()) return HelloVerdict::local_unknown;
  if (local_cluster_id.size() > kMaxHandshakeClusterIdLen) return HelloVerdict::local_too_long;
  if (peer_cluster_id != local_cluster_id) return HelloVerdict::mismatch;
  return HelloVerdict::accept;
}

AnswerVerdict judge_answer(HandshakeStatus status, std::string_view answer_cluster_id,
                           std::string_view local_cluster_id) {
  switch (status) {
    case HandshakeStatus::ok:
      // A peer that says ok to another id is refused too.
      return answer_cluster_id == local_cluster_id ? AnswerVerdict::accept
                                                   : AnswerVerdict::mismatch;
    case HandshakeStatus::cluster_id_mismatch:
      return AnswerVerdict::mismatch;
    case HandshakeStatus::cluster_id_unknown:
      return AnswerVerdict::peer_unknown;
  }
  return AnswerVerdict::mismatch;  // not reached: AnswerReader admits only the three
}

std::string printable(std::string_view s) {
  if (s.empty()) return "(none)";
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

bool is_printable_ascii(std::string_view s) {
  for (unsigned char c : s)
    if (c < 0x21 || c >= 0x7f) return false;
  return true;
}

}  // namespace sluice::raft_meta
