// JSON encodings for the controller RPC (rpc.h), and the frame format: u32 little-endian
// length (max kMaxFrame) | JSON object.
//
// Thread-safety: pure functions.
#pragma once

#include <array>
#include <boost/json.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "sluice/catalog_json.h"
#include "sluice/metadata.h"

namespace sluice::raft_meta::rpc {

inline constexpr std::uint32_t kMaxFrame = 8u << 20;  // 8 MiB

// The catalog types travel in the SDK's one codec (sluice/catalog_json.h); only
// MetadataStatus and Error, which nothing else stores, are encoded here.
template <class T>
boost::json::value to_json(const T& x) {
  return boost::json::value_from(x);
}
boost::json::value to_json(const MetadataStatus&);
boost::json::value to_json(const Error&);

// Each throws std::exception (std::invalid_argument / boost::system::system_error) on a
// malformed value; callers turn that into Errc::malformed_body. Named functions, so that
// they can be passed where a decoder is expected.
inline TenantInfo tenant_from(const boost::json::value& v) { return boost::json::value_to<TenantInfo>(v); }
inline NamespaceInfo namespace_from(const boost::json::value& v) { return boost::json::value_to<NamespaceInfo>(v); }
inline StreamKey key_from(const boost::json::value& v) { return boost::json::value_to<StreamKey>(v); }
inline StreamSpec spec_from(const boost::json::value& v) { return boost::json::value_to<StreamSpec>(v); }
inline StreamInfo stream_from(const boost::json::value& v) { return boost::json::value_to<StreamInfo>(v); }
inline Tombstone tombstone_from(const boost::json::value& v) { return boost::json::value_to<Tombstone>(v); }
inline Assignment assignment_from(const boost::json::value& v) { return boost::json::value_to<Assignment>(v); }
inline BrokerInfo broker_from(const boost::json::value& v) { return boost::json::value_to<BrokerInfo>(v); }
inline BrokerRegistration registration_from(const boost::json::value& v) {
  return boost::json::value_to<BrokerRegistration>(v);
}
inline FeatureInfo feature_from(const boost::json::value& v) { return boost::json::value_to<FeatureInfo>(v); }
inline ChangeEvent event_from(const boost::json::value& v) { return boost::json::value_to<ChangeEvent>(v); }
inline CatalogSnapshot snapshot_from(const boost::json::value& v) {
  return boost::json::value_to<CatalogSnapshot>(v);
}
inline CacheSpec cache_spec_from(const boost::json::value& v) { return boost::json::value_to<CacheSpec>(v); }
inline CacheInfo cache_from(const boost::json::value& v) { return boost::json::value_to<CacheInfo>(v); }
inline CounterInfo counter_from(const boost::json::value& v) { return boost::json::value_to<CounterInfo>(v); }
inline MemberInfo member_from(const boost::json::value& v) { return boost::json::value_to<MemberInfo>(v); }
inline MembersView members_from(const boost::json::value& v) { return boost::json::value_to<MembersView>(v); }
inline JoinRequest join_from(const boost::json::value& v) { return boost::json::value_to<JoinRequest>(v); }
MetadataStatus status_from(const boost::json::value&);
Error error_from(const boost::json::value&);

// The frame header, pure (read_frame and write_frame use these; so does the fuzz target in
// tests/fuzz/). encode: 4 bytes, the body length little-endian. decode: the length `h`
// (4 bytes) announces, or nullopt with `why` when it is above kMaxFrame.
std::array<unsigned char, 4> encode_frame_header(std::uint32_t body_len);
std::optional<std::uint32_t> decode_frame_header(const unsigned char* h, std::string* why);

// A request's envelope (rpc.h): {"cluster_id", "method", "params"?, "forwarded"?}.
struct Request {
  std::string cluster_id;
  std::string method;
  boost::json::value params = boost::json::object{};  // {} when absent; not checked here
  bool forwarded = false;
};
std::string encode_request(const Request& r);
// malformed_body when `body` is not a JSON object or lacks the string fields.
Result<Request> decode_request(std::string_view body);
// A response: {"ok": true, "result": ...} -> the result, serialized; {"ok": false, "error":
// {...}} -> that error. Anything else sets `*malformed` and answers internal.
Result<std::string> decode_response(std::string_view body, bool* malformed);

// Bytes a frame travels over: a plain blocking socket, or TLS on one (rpc_tls.h).
struct ByteStream {
  virtual ~ByteStream() = default;
  // Like send/recv on a blocking socket: > 0 bytes moved, 0 the peer closed, < 0 an error
  // or a timeout, said in *why.
  virtual long write_some(const char* p, std::size_t n, std::string* why) = 0;
  virtual long read_some(char* p, std::size_t n, std::string* why) = 0;
};
// A plain socket (not owned).
class PlainStream final : public ByteStream {
 public:
  explicit PlainStream(int fd) : fd_(fd) {}
  long write_some(const char* p, std::size_t n, std::string* why) override;
  long read_some(char* p, std::size_t n, std::string* why) override;

 private:
  int fd_;
};

// Frame I/O. false: closed, error or timeout; `why` says which.
bool write_frame(ByteStream& s, const std::string& json, std::string* why);
// Reads one frame; refuses a length above kMaxFrame (oversized) without reading the body.
bool read_frame(ByteStream& s, std::string& out, std::string* why);
// The same on a plain blocking socket.
bool write_frame(int fd, const std::string& json, std::string* why);
bool read_frame(int fd, std::string& out, std::string* why);

}  // namespace sluice::raft_meta::rpc
