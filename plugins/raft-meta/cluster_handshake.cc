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
bool magic_ok(const char* frame, std::size_t before, std::size_t have, std::string_view magic) {
  if (before >= kMagicLen) return true;
  std::size_t upto = std::min(have, kMagicLen);
  return std::memcmp(frame + before, magic.data() + before, upto - before) == 0;
}

// Either version's magic: "SLRAFT0" then '1' or '2'. 0 while unknown, -1 if neither.
int magic_version(const char* frame, std::size_t before, std::size_t have) {
  if (!magic_ok(frame, before, std::min(have, kMagicLen - 1), kClusterHandshakeMagic)) return -1;
  if (have < kMagicLen) return 0;
  if (frame[kMagicLen - 1] == '1') return 1;
  if (frame[kMagicLen - 1] == '2') return 2;
  return -1;
}

}  // namespace

std::string encode_cluster_hello(std::string_view cluster_id, std::uint64_t server_id,
                                 std::string_view address, const AuthNonce* nonce) {
  std::string out(nonce ? kClusterHandshakeMagicV2 : kClusterHandshakeMagic);
  put_u32(out, static_cast<std::uint32_t>(cluster_id.size()));
  out.append(cluster_id);
  put_u64(out, server_id);
  put_u32(out, static_cast<std::uint32_t>(address.size()));
  out.append(address);
  if (nonce) out.append(reinterpret_cast<const char*>(nonce->data()), nonce->size());
  return out;
}

std::string encode_cluster_answer(HandshakeStatus status, std::string_view cluster_id) {
  std::string out(kClusterHandshakeMagic);
  put_u32(out, static_cast<std::uint32_t>(status));
  put_u32(out, static_cast<std::uint32_t>(cluster_id.size()));
  out.append(cluster_id);
  return out;
}

std::string encode_cluster_answer_v2(HandshakeStatus status, std::string_view cluster_id,
                                     const AnswerAuth* auth) {
  std::string out(kClusterHandshakeMagicV2);
  put_u32(out, static_cast<std::uint32_t>(status));
  put_u32(out, static_cast<std::uint32_t>(cluster_id.size()));
  out.append(cluster_id);
  out.push_back(auth ? 1 : 0);
  if (auth) {
    out.append(reinterpret_cast<const char*>(auth->nonce.data()), auth->nonce.size());
    out.append(reinterpret_cast<const char*>(auth->proof.data()), auth->proof.size());
  }
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
  const int v = magic_version(buf_.data(), before, have_);
  if (v < 0) return fail("bad magic (not a Sluice raft hello)");
  if (v > 0) version_ = v;
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
    address_end_ = after_id + 12 + addr_len;
    need_ = address_end_ + (version_ == 2 ? kAuthNonceLen : 0);
    return state_;
  }
  std::string_view address(buf_.data() + after_id + 12, address_end_ - (after_id + 12));
  if (!is_printable_ascii(address))
    return fail("address " + printable(address) + " is not printable ASCII");
  address_.assign(address);
  if (version_ == 2) std::memcpy(nonce_.data(), buf_.data() + address_end_, kAuthNonceLen);
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
  const auto magic = version_ == 2 ? kClusterHandshakeMagicV2 : kClusterHandshakeMagic;
  if (!magic_ok(buf_.data(), before, have_, magic)) {
    // A version-1 answer to a hello2 is an acceptor that predates the secret.
    if (version_ == 2 && magic_version(buf_.data(), 0, have_) == 1)
      return fail("the peer answered version 1 to an authenticating hello (it runs a version "
                  "without cluster secrets)");
    return fail("bad magic in the answer");
  }
  if (have_ < need_) return state_;
  if (need_ == kFixedSize) {
    std::uint32_t status = get_u32(buf_.data() + kMagicLen);
    std::uint32_t len = get_u32(buf_.data() + kMagicLen + 4);
    if (status > static_cast<std::uint32_t>(HandshakeStatus::auth_required))
      return fail("unknown answer status " + std::to_string(status));
    if (len > kMaxHandshakeClusterIdLen)
      return fail("answer cluster id length " + std::to_string(len) + " exceeds " +
                  std::to_string(kMaxHandshakeClusterIdLen));
    status_ = static_cast<HandshakeStatus>(status);
    id_end_ = kFixedSize + len;
    need_ = id_end_ + (version_ == 2 ? 1 : 0);
    if (need_ > kFixedSize) return state_;
  }
  if (version_ == 2 && need_ == id_end_ + 1) {
    const unsigned char flag = static_cast<unsigned char>(buf_[id_end_]);
    if (flag > 1) return fail("answer auth flag " + std::to_string(flag) + " is not 0 or 1");
    auth_ = flag == 1;
    if (auth_) {
      need_ += kAuthNonceLen + kAuthProofLen;
      return state_;
    }
  }
  cluster_id_.assign(buf_.data() + kFixedSize, id_end_ - kFixedSize);
  if (auth_) {
    const char* p = buf_.data() + id_end_ + 1;
    std::memcpy(auth_fields_.nonce.data(), p, kAuthNonceLen);
    std::memcpy(auth_fields_.proof.data(), p + kAuthNonceLen, kAuthProofLen);
  }
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
    case HandshakeStatus::auth_required:
      return AnswerVerdict::auth_required;
  }
  return AnswerVerdict::mismatch;  // not reached: AnswerReader admits only these
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
