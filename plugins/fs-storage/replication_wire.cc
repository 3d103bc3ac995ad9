#include "replication_wire.h"

#include <cstring>
#include <limits>

namespace sluice::fs_storage {
namespace {

constexpr std::uint8_t kFetchFlagCopyLost = 0x01;

class Writer {
 public:
  explicit Writer(std::size_t reserve) { out_.reserve(reserve); }
  void u8(std::uint8_t v) { raw(&v, 1); }
  void u16(std::uint16_t v) { raw(&v, 2); }
  void u32(std::uint32_t v) { raw(&v, 4); }
  void u64(std::uint64_t v) { raw(&v, 8); }
  void str(std::string_view s) {
    // Names are at most 255 bytes (names.h) and directory ids 36; anything longer is a bug.
    const auto n = static_cast<std::uint16_t>(std::min<std::size_t>(s.size(), 0xffff));
    u16(n);
    out_.append(s.data(), n);
  }
  void bytes(std::string_view s) {
    u32(static_cast<std::uint32_t>(s.size()));
    out_.append(s.data(), s.size());
  }
  std::string take() { return std::move(out_); }

 private:
  void raw(const void* p, std::size_t n) {
    // The transport and storage both run little-endian x86_64/aarch64 (docs/replication.md).
    out_.append(static_cast<const char*>(p), n);
  }
  std::string out_;
};

class Reader {
 public:
  Reader(std::string_view in, const char* what) : in_(in), what_(what) {}
  bool u8(std::uint8_t& v) { return raw(&v, 1); }
  bool u16(std::uint16_t& v) { return raw(&v, 2); }
  bool u32(std::uint32_t& v) { return raw(&v, 4); }
  bool u64(std::uint64_t& v) { return raw(&v, 8); }
  std::size_t remaining() const { return in_.size(); }
  bool str(std::string& s) {
    std::uint16_t n = 0;
    if (!u16(n) || in_.size() < n) return fail("a string runs past the end");
    s.assign(in_.data(), n);
    in_.remove_prefix(n);
    return true;
  }
  bool bytes(std::string_view& s) {
    std::uint32_t n = 0;
    if (!u32(n) || in_.size() < n) return fail("the chunk runs past the end");
    s = in_.substr(0, n);
    in_.remove_prefix(n);
    return true;
  }
  Result<void> finish() {
    if (!reason_.empty())
      return Error(Errc::malformed_body, std::string(what_) + ": " + reason_);
    if (!in_.empty())
      return Error(Errc::malformed_body, std::string(what_) + ": " +
                                             std::to_string(in_.size()) + " trailing bytes");
    return {};
  }

 private:
  bool raw(void* p, std::size_t n) {
    if (in_.size() < n) return fail("truncated");
    std::memcpy(p, in_.data(), n);
    in_.remove_prefix(n);
    return true;
  }

 public:
  bool fail(const char* why) {
    if (reason_.empty()) reason_ = why;
    in_ = {};
    return false;
  }

 private:
  std::string_view in_;
  const char* what_;
  std::string reason_;
};

void put(Writer& w, const Incarnated& e) {
  w.str(e.ref.stream.tenant);
  w.str(e.ref.stream.ns);
  w.str(e.ref.stream.name);
  w.u64(e.ref.incarnation.value());
  w.u32(e.ref.shard.value());
  w.u64(e.leader_epoch.value());
  w.u32(e.sender.value());
  w.str(e.directory_id);
  w.u8(static_cast<std::uint8_t>(e.log));
}

void get(Reader& r, Incarnated& e) {
  std::uint64_t inc = 0, epoch = 0;
  std::uint32_t shard = 0, sender = 0;
  r.str(e.ref.stream.tenant);
  r.str(e.ref.stream.ns);
  r.str(e.ref.stream.name);
  r.u64(inc);
  r.u32(shard);
  r.u64(epoch);
  r.u32(sender);
  r.str(e.directory_id);
  std::uint8_t log = 0;
  if (r.u8(log) && log > static_cast<std::uint8_t>(LogKind::groups)) r.fail("an unknown log kind");
  e.log = static_cast<LogKind>(log);
  e.ref.incarnation = Incarnation{inc};
  e.ref.shard = ShardIndex{shard};
  e.leader_epoch = LeaderEpoch{epoch};
  e.sender = NodeId{sender};
}

std::size_t env_size(const Incarnated& e) {
  return 8 + e.ref.stream.tenant.size() + e.ref.stream.ns.size() + e.ref.stream.name.size() +
         8 + 4 + 8 + 4 + 2 + e.directory_id.size() + 1;
}

}  // namespace

std::string encode(const FetchRequest& m) {
  Writer w(env_size(m.env) + 24);
  put(w, m.env);
  w.u64(m.fetch_offset.value());
  w.u64(m.durable_end.value());
  w.u32(m.max_bytes);
  w.u32(m.wait_ms);
  if (m.copy_lost) w.u8(kFetchFlagCopyLost);
  return w.take();
}

void encode_fetch_response_header(const FetchResponse& m, std::size_t chunk_size, char* out) {
  const std::uint64_t fields[6] = {m.leader_epoch.value(), m.high_watermark.value(),
                                   m.log_start.value(),    m.log_end.value(),
                                   m.chunk_base.value(),   m.chunk_epoch.value()};
  std::memcpy(out, fields, sizeof fields);
  const auto n = static_cast<std::uint32_t>(chunk_size);
  std::memcpy(out + sizeof fields, &n, sizeof n);
  static_assert(sizeof fields + sizeof n == kFetchResponseHeaderBytes);
}

std::string encode(const FetchResponse& m) {
  std::string out(kFetchResponseHeaderBytes + m.chunk.size(), '\0');
  encode_fetch_response_header(m, m.chunk.size(), out.data());
  std::memcpy(out.data() + kFetchResponseHeaderBytes, m.chunk.data(), m.chunk.size());
  return out;
}

std::string encode(const EpochEndRequest& m) {
  Writer w(env_size(m.env) + 8);
  put(w, m.env);
  w.u64(m.epoch.value());
  return w.take();
}

std::string encode(const EpochEndResponse& m) {
  Writer w(16);
  w.u64(m.epoch.value());
  w.u64(m.end.value());
  return w.take();
}

Result<FetchRequest> decode_fetch_request(std::string_view payload) {
  Reader r(payload, "replica fetch request");
  FetchRequest m;
  std::uint64_t fetch = 0, durable = 0;
  get(r, m.env);
  r.u64(fetch);
  r.u64(durable);
  r.u32(m.max_bytes);
  r.u32(m.wait_ms);
  // The optional flags byte (lost_copy_fetch): present only with a flag this build knows.
  if (std::uint8_t flags = 0; r.remaining() == 1 && r.u8(flags)) {
    if (flags != kFetchFlagCopyLost) r.fail("unknown fetch flags");
    m.copy_lost = true;
  }
  if (auto f = r.finish(); !f) return f.error();
  m.fetch_offset = Offset{fetch};
  m.durable_end = Offset{durable};
  return m;
}

Result<FetchResponse> decode_fetch_response(std::string_view payload) {
  Reader r(payload, "replica fetch response");
  FetchResponse m;
  std::uint64_t epoch = 0, hwm = 0, start = 0, end = 0, base = 0, chunk_epoch = 0;
  r.u64(epoch);
  r.u64(hwm);
  r.u64(start);
  r.u64(end);
  r.u64(base);
  r.u64(chunk_epoch);
  r.bytes(m.chunk);
  if (auto f = r.finish(); !f) return f.error();
  m.leader_epoch = LeaderEpoch{epoch};
  m.high_watermark = Offset{hwm};
  m.log_start = Offset{start};
  m.log_end = Offset{end};
  m.chunk_base = Offset{base};
  m.chunk_epoch = LeaderEpoch{chunk_epoch};
  return m;
}

Result<EpochEndRequest> decode_epoch_end_request(std::string_view payload) {
  Reader r(payload, "replica epoch-end request");
  EpochEndRequest m;
  std::uint64_t epoch = 0;
  get(r, m.env);
  r.u64(epoch);
  if (auto f = r.finish(); !f) return f.error();
  m.epoch = LeaderEpoch{epoch};
  return m;
}

Result<EpochEndResponse> decode_epoch_end_response(std::string_view payload) {
  Reader r(payload, "replica epoch-end response");
  EpochEndResponse m;
  std::uint64_t epoch = 0, end = 0;
  r.u64(epoch);
  r.u64(end);
  if (auto f = r.finish(); !f) return f.error();
  m.epoch = LeaderEpoch{epoch};
  m.end = Offset{end};
  return m;
}

}  // namespace sluice::fs_storage
