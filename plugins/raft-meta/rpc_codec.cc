#include "rpc_codec.h"

#include <sys/socket.h>

#include <algorithm>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace sluice::raft_meta::rpc {

namespace json = boost::json;

namespace {
std::uint64_t u(const json::object& o, const char* k) { return o.at(k).to_number<std::uint64_t>(); }
std::string s(const json::object& o, const char* k) { return std::string(o.at(k).as_string()); }
}  // namespace

json::value to_json(const MetadataStatus& m) {
  return json::object{{"backend", m.backend}, {"cluster_id", m.cluster_id}, {"ready", m.ready},
                      {"detail", m.detail},   {"level", m.level.value()},   {"applied", m.applied.value()}};
}
json::value to_json(const Error& e) {
  return json::object{{"code", errc_name(e.code)},
                      {"message", e.message},
                      {"outcome", e.outcome == Outcome::definite    ? "definite"
                                  : e.outcome == Outcome::transient ? "transient"
                                                                    : "uncertain"}};
}

MetadataStatus status_from(const json::value& v) {
  auto& o = v.as_object();
  MetadataStatus m;
  m.backend = s(o, "backend");
  m.cluster_id = s(o, "cluster_id");
  m.ready = o.at("ready").as_bool();
  m.detail = s(o, "detail");
  m.level = MetadataLevel{static_cast<std::uint32_t>(u(o, "level"))};
  m.applied = ChangeSeq{u(o, "applied")};
  return m;
}
Error error_from(const json::value& v) {
  auto& o = v.as_object();
  std::string code = s(o, "code");
  Errc c = Errc::internal;
  // Every code up to the newest (SDK 6: not_enough_replicas, shard_unavailable); an
  // unknown name (a newer peer) stays internal.
  for (int k = 0; k <= static_cast<int>(Errc::shard_unavailable); ++k)
    if (errc_name(static_cast<Errc>(k)) == code) c = static_cast<Errc>(k);
  std::string out = s(o, "outcome");
  Outcome oc = out == "definite" ? Outcome::definite
               : out == "transient" ? Outcome::transient
                                    : Outcome::uncertain;
  return Error(c, s(o, "message"), oc);
}

std::array<unsigned char, 4> encode_frame_header(std::uint32_t n) {
  std::array<unsigned char, 4> h{};
  for (int k = 0; k < 4; ++k) h[k] = static_cast<unsigned char>(n >> (8 * k));
  return h;
}

std::optional<std::uint32_t> decode_frame_header(const unsigned char* h, std::string* why) {
  std::uint32_t n = 0;
  for (int k = 0; k < 4; ++k) n |= static_cast<std::uint32_t>(h[k]) << (8 * k);
  if (n > kMaxFrame) {
    if (why) *why = "oversized frame (" + std::to_string(n) + " bytes, max " + std::to_string(kMaxFrame) + ")";
    return std::nullopt;
  }
  return n;
}

std::string encode_request(const Request& r) {
  json::object o{{"cluster_id", r.cluster_id}, {"method", r.method}, {"params", r.params}};
  if (r.forwarded) o["forwarded"] = true;
  return json::serialize(o);
}

namespace {
// Every number the controller RPC carries is an integer (ids, sequences, levels, sizes).
// A literal that parses as a double (a fraction, an exponent, or an integer beyond 64 bits)
// is refused: it is never valid, and this build's parser does not read every such literal
// back to the same double, so it would not even survive being forwarded (fuzz_rpc_frame).
bool has_double(const json::value& v) {
  switch (v.kind()) {
    case json::kind::double_: return true;
    case json::kind::array:
      for (const auto& e : v.get_array())
        if (has_double(e)) return true;
      return false;
    case json::kind::object:
      for (const auto& kv : v.get_object())
        if (has_double(kv.value())) return true;
      return false;
    default: return false;
  }
}
}  // namespace

Result<Request> decode_request(std::string_view body) {
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec || !v.is_object()) return Error(Errc::malformed_body, "request is not a JSON object");
  if (!json_numbers_finite(v)) return Error(Errc::malformed_body, "request holds a number out of range");
  if (has_double(v))
    return Error(Errc::malformed_body, "request holds a fractional or out-of-range number; the controller RPC "
                                       "carries only integers");
  auto& o = v.as_object();
  Request r;
  for (auto [k, out] : {std::pair{"method", &r.method}, std::pair{"cluster_id", &r.cluster_id}}) {
    const auto* f = o.if_contains(k);
    if (!f || !f->is_string())
      return Error(Errc::malformed_body, std::string("malformed request: field \"") + k + "\" must be a string");
    *out = std::string(f->get_string());
  }
  if (auto* p = o.if_contains("params")) r.params = std::move(*p);
  // Only `true` counts: anything else is a request as the client wrote it.
  if (auto* f = o.if_contains("forwarded"); f && f->is_bool() && f->as_bool()) r.forwarded = true;
  return r;
}

Result<std::string> decode_response(std::string_view body, bool* malformed) {
  *malformed = false;
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec || !v.is_object() || !json_numbers_finite(v)) {
    *malformed = true;
    // Whatever it carried may have been applied: not a definite failure (review).
    return Error(Errc::internal, "controller sent a malformed response (the call may have taken effect)",
                 Outcome::uncertain);
  }
  auto& o = v.as_object();
  try {
    if (o.at("ok").as_bool()) return json::serialize(o.at("result"));
    return error_from(o.at("error"));
  } catch (const std::exception& ex) {
    *malformed = true;
    return Error(Errc::internal, std::string("controller response (the call may have taken effect): ") + ex.what(),
                 Outcome::uncertain);
  }
}

long PlainStream::write_some(const char* p, std::size_t n, std::string* why) {
  for (;;) {
    ssize_t w = ::send(fd_, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && why) *why = std::string("write: ") + std::strerror(errno);
    return static_cast<long>(w);
  }
}

long PlainStream::read_some(char* p, std::size_t n, std::string* why) {
  for (;;) {
    ssize_t r = ::recv(fd_, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && why) *why = std::string("read: ") + std::strerror(errno);
    return static_cast<long>(r);
  }
}

namespace {
bool write_all(ByteStream& s, const char* p, std::size_t n, std::string* why) {
  while (n > 0) {
    long w = s.write_some(p, n, why);
    if (w <= 0) {
      if (why && w == 0) *why = "write: closed";
      return false;
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}
bool read_all(ByteStream& s, char* p, std::size_t n, std::string* why, bool first) {
  std::size_t got = 0;
  while (got < n) {
    long r = s.read_some(p + got, n - got, why);
    if (r <= 0) {
      if (why && r == 0) *why = first && got == 0 ? "closed" : "truncated frame";
      return false;
    }
    got += static_cast<std::size_t>(r);
  }
  return true;
}
}  // namespace

bool write_frame(ByteStream& s, const std::string& body, std::string* why) {
  if (body.size() > kMaxFrame) {
    if (why) *why = "frame too large";
    return false;
  }
  const auto h = encode_frame_header(static_cast<std::uint32_t>(body.size()));
  return write_all(s, reinterpret_cast<const char*>(h.data()), 4, why) &&
         write_all(s, body.data(), body.size(), why);
}

bool read_frame(ByteStream& s, std::string& out, std::string* why) {
  unsigned char h[4];
  if (!read_all(s, reinterpret_cast<char*>(h), 4, why, true)) return false;
  const auto n = decode_frame_header(h, why);
  if (!n) return false;
  // Grown with the bytes that come (64 KiB, then doubling), not sized from the header: a
  // header alone announcing 8 MiB does not make the server allocate and zero 8 MiB (review).
  constexpr std::size_t kFirstChunk = std::size_t{64} << 10;
  out.clear();
  for (std::size_t have = 0; have < *n;) {
    const std::size_t want = std::min<std::size_t>(*n, std::max(have * 2, kFirstChunk));
    out.resize(want);
    if (!read_all(s, out.data() + have, want - have, why, false)) {
      if (why && *why == "closed") *why = "truncated frame";
      return false;
    }
    have = want;
  }
  return true;
}

bool write_frame(int fd, const std::string& body, std::string* why) {
  PlainStream s(fd);
  return write_frame(s, body, why);
}

bool read_frame(int fd, std::string& out, std::string* why) {
  PlainStream s(fd);
  return read_frame(s, out, why);
}

}  // namespace sluice::raft_meta::rpc
