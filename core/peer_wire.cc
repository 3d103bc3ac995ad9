// The peer transport's frame codec (peer_wire.h). Pure: bytes in, values or errors out.
#include "peer_wire.h"

#include <cstdio>
#include <cstring>

namespace sluice::core {

namespace peerwire {
namespace {
void put_u16(std::string& s, std::uint16_t v) {
  s.push_back(static_cast<char>(v & 0xff));
  s.push_back(static_cast<char>(v >> 8));
}
void put_u32(std::string& s, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_u64(std::string& s, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
std::uint64_t get_le(const unsigned char* p, int n) {
  std::uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
std::string hex(std::uint64_t v, int width) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%0*llx", width, static_cast<unsigned long long>(v));
  return buf;
}
}  // namespace

OutFrame make_frame(const Header& h, std::string payload) {
  OutFrame f;
  auto* p = f.header.data();
  p[0] = kMagic;
  p[1] = static_cast<unsigned char>((kVersion << 4) | (h.flags & 0x0f));
  const std::uint16_t type = h.type;
  const std::uint64_t id = h.request_id;
  const auto len = static_cast<std::uint32_t>(payload.size());
  std::memcpy(p + 2, &type, 2);  // little-endian, as put_u16/u64/u32 (x86_64, aarch64)
  std::memcpy(p + 4, &id, 8);
  std::memcpy(p + 12, &len, 4);
  f.payload = std::move(payload);
  return f;
}

std::string encode_frame(const Header& h, std::string_view payload) {
  std::string out;
  out.reserve(kHeaderBytes + payload.size());
  out.push_back(static_cast<char>(kMagic));
  out.push_back(static_cast<char>((kVersion << 4) | (h.flags & 0x0f)));
  put_u16(out, h.type);
  put_u64(out, h.request_id);
  put_u32(out, static_cast<std::uint32_t>(payload.size()));
  out.append(payload);
  return out;
}

Result<Header> decode_header(const unsigned char* p) {
  if (p[0] != kMagic) return Error(Errc::invalid_argument, "bad magic byte " + hex(p[0], 2));
  if ((p[1] >> 4) != kVersion)
    return Error(Errc::invalid_argument, "unsupported frame version " + std::to_string(p[1] >> 4));
  Header h;
  h.flags = p[1] & 0x0f;
  if (h.flags & ~(kFlagResponse | kFlagError) || ((h.flags & kFlagError) && !(h.flags & kFlagResponse)))
    return Error(Errc::invalid_argument, "bad flags " + hex(h.flags, 1));
  h.type = static_cast<PeerMessageType>(get_le(p + 2, 2));
  h.request_id = get_le(p + 4, 8);
  h.payload_len = static_cast<std::uint32_t>(get_le(p + 12, 4));
  if (std::uint64_t{h.payload_len} + kHeaderBytes > kMaxPeerFrameBytes)
    return Error(Errc::invalid_argument, "oversized frame: " + std::to_string(h.payload_len + kHeaderBytes) +
                                             " bytes, the limit is " + std::to_string(kMaxPeerFrameBytes));
  return h;
}

std::string encode_hello(const Hello& h) {
  std::string out(kHelloMagic, 8);
  put_u16(out, kHelloVersion);
  put_u32(out, h.node.value());
  put_u16(out, static_cast<std::uint16_t>(h.cluster_id.size()));
  out += h.cluster_id;
  put_u16(out, static_cast<std::uint16_t>(h.directory_id.size()));
  out += h.directory_id;
  return out;
}

Result<Hello> decode_hello(std::string_view s) {
  auto bad = [](const std::string& why) { return Error(Errc::invalid_argument, "malformed hello: " + why); };
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  if (s.size() < 16) return bad("too short");
  if (s.substr(0, 8) != std::string_view(kHelloMagic, 8)) return bad("no SLUICEPT magic");
  const auto version = get_le(p + 8, 2);
  if (version != kHelloVersion) return bad("unsupported hello version " + std::to_string(version));
  Hello h;
  h.node = NodeId{static_cast<std::uint32_t>(get_le(p + 10, 4))};
  std::size_t at = 14;
  for (std::string* field : {&h.cluster_id, &h.directory_id}) {
    if (s.size() < at + 2) return bad("truncated");
    const auto n = get_le(p + at, 2);
    at += 2;
    if (s.size() < at + n) return bad("truncated");
    field->assign(s.substr(at, n));
    at += n;
  }
  if (at != s.size()) return bad("trailing bytes");
  return h;
}

std::string encode_error(const Error& e) {
  std::string out;
  put_u16(out, static_cast<std::uint16_t>(e.code));
  out.push_back(static_cast<char>(e.outcome));
  out += e.message;
  return out;
}

Error decode_error(std::string_view s) {
  // What the peer did is unknown unless its answer says: uncertain (a client that retries
  // must not take "nothing happened" for granted and duplicate a write).
  if (s.size() < 3) return Error(Errc::internal, "the peer sent a malformed error answer", Outcome::uncertain);
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const auto code = get_le(p, 2);
  const auto outcome = p[2];
  const bool known_outcome = outcome <= static_cast<int>(Outcome::uncertain);
  if (code > static_cast<std::uint16_t>(Errc::shard_unavailable) || !known_outcome)
    // A newer peer (a rolling upgrade) may answer a code this build does not know; its
    // outcome byte still says what happened, when this build knows that one.
    return Error(Errc::internal,
                 "the peer answered an error this build does not know (code " + std::to_string(code) + "): " +
                     std::string(s.substr(3)),
                 known_outcome ? static_cast<Outcome>(outcome) : Outcome::uncertain);
  return Error(static_cast<Errc>(code), std::string(s.substr(3)), static_cast<Outcome>(outcome));
}
}  // namespace peerwire

}  // namespace sluice::core
