// The core's peer transport frames (core/peer_wire.h), as a connection reads them: a
// 16-byte header (decode_header), then its payload; the first frame is a hello
// (decode_hello), error answers carry an Error (decode_error).
//
// Properties: a header that decodes is within the frame limit and re-encodes
// (encode_frame and make_frame alike) to the bytes read; a hello that decodes re-encodes
// to its payload; an error answer with a code this build knows re-encodes to its
// payload; an unknown code is reported as internal, not cast into the enum.
#include <cstring>
#include <string>

#include "fuzz_check.h"
#include "peer_wire.h"

using namespace sluice;
using namespace sluice::core::peerwire;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::size_t at = 0;
  bool first = true;
  while (size - at >= kHeaderBytes) {
    const unsigned char* p = data + at;
    auto h = decode_header(p);
    if (!h) {
      FUZZ_CHECK(h.error().code == Errc::invalid_argument && !h.error().message.empty());
      return 0;
    }
    FUZZ_CHECK(std::uint64_t{h->payload_len} + kHeaderBytes <= kMaxPeerFrameBytes);
    at += kHeaderBytes;
    if (size - at < h->payload_len) return 0;  // truncated: the connection closes
    const std::string_view payload(reinterpret_cast<const char*>(data + at), h->payload_len);
    at += h->payload_len;

    const std::string enc = encode_frame(*h, payload);
    FUZZ_CHECK(enc.size() == kHeaderBytes + payload.size());
    FUZZ_CHECK(std::memcmp(enc.data(), p, kHeaderBytes) == 0);
    const OutFrame f = make_frame(*h, std::string(payload));
    FUZZ_CHECK(std::memcmp(f.header.data(), p, kHeaderBytes) == 0 && f.payload == payload);

    if (first || h->type == kHelloType) {
      auto hello = decode_hello(payload);
      if (hello) FUZZ_CHECK(encode_hello(*hello) == payload);
      else FUZZ_CHECK(hello.error().code == Errc::invalid_argument);
    }
    if (h->flags & kFlagError) {
      const Error e = decode_error(payload);
      const auto* q = reinterpret_cast<const unsigned char*>(payload.data());
      const bool known = payload.size() >= 3 && (q[0] | q[1] << 8) <= static_cast<int>(Errc::shard_unavailable) &&
                         q[2] <= static_cast<int>(Outcome::uncertain);
      if (known) FUZZ_CHECK(encode_error(e) == payload);
      else FUZZ_CHECK(e.code == Errc::internal);
    }
    first = false;
  }
  return 0;
}
