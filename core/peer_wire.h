// The peer transport's frame codec (wire format: peer_transport.h). Its own small library
// (sluice_peer_wire) so the fuzz target (tests/fuzz/) links exactly the decoder the
// transport runs, without Asio.
//
// Thread-safety: pure functions.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "sluice/error.h"
#include "sluice/transport.h"
#include "sluice/types.h"

namespace sluice::core {

// The frame codec, exposed for tests, the probe and the fuzzer.
namespace peerwire {
inline constexpr std::uint8_t kMagic = 0xC5;
inline constexpr std::uint8_t kVersion = 1;
inline constexpr std::uint8_t kFlagResponse = 0x1;
inline constexpr std::uint8_t kFlagError = 0x2;
inline constexpr std::size_t kHeaderBytes = 16;
inline constexpr PeerMessageType kHelloType = 0;
inline constexpr char kHelloMagic[] = "SLUICEPT";
inline constexpr std::uint16_t kHelloVersion = 1;
// A hello is magic, version, node and two short ids: a first frame that claims more is
// refused before anything is allocated for it (a 64 MiB frame per unauthenticated
// connection was a way to exhaust memory; review finding).
inline constexpr std::uint32_t kMaxHelloBytes = 1024;

struct Header {
  std::uint8_t flags = 0;
  PeerMessageType type = 0;
  std::uint64_t request_id = 0;
  std::uint32_t payload_len = 0;
};
struct Hello {
  NodeId node;
  std::string cluster_id;
  std::string directory_id;
};

// A frame to send: its header, and its payload as its own buffer (sent with one gathered
// write, so a payload is never copied into a frame).
struct OutFrame {
  std::array<unsigned char, kHeaderBytes> header{};
  std::string payload;
  std::uint64_t request = 0;  // an outgoing request's id (0: a hello or an answer)
  bool dropped = false;       // its request timed out before it was written: skipped
};
OutFrame make_frame(const Header& h, std::string payload);            // sets payload_len
std::string encode_frame(const Header& h, std::string_view payload);  // the same, as one string
// Checks magic, version, flags and length; invalid_argument naming what is wrong.
Result<Header> decode_header(const unsigned char* p);
std::string encode_hello(const Hello& h);
Result<Hello> decode_hello(std::string_view payload);
std::string encode_error(const Error& e);
Error decode_error(std::string_view payload);
}  // namespace peerwire

}  // namespace sluice::core
