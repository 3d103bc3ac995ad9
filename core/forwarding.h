// Forwarding a client's call to the shard's leader over the peer transport
// (docs/replication.md "Forwarding"). Any broker accepts publish, fetch and consumer-group
// calls for any shard; one that does not lead the shard sends the call to the leader, which
// runs it locally and never forwards it again (not the leader any more: not_leader back).
//
// Message types (the core's range, kPeerCoreTypesFirst..Last) and their payloads. All
// integers little-endian; `str` is u32 length + bytes. Every request starts with the shard
// it names:
//
//   ShardHeader: str tenant | str namespace | str stream | u64 incarnation | u32 shard
//
//   type    call            request (after ShardHeader)                  answer
//   0x0010  publish         u8 ack | the SDK record batch (rest)         u64 base | u32 count | u8 duplicate
//   0x0011  fetch           u64 from | u32 max_records | u64 max_bytes   FetchResult
//   0x0012  shard stats     -                                            Stats
//   0x0013  wait            u64 offset | u32 hold_ms | u64 wait id       u8 fired (0: hold passed or cancelled)
//   0x0014  group fetch     str group | u32 max | u32 max_deliveries |   u32 n | n str batches |
//                           i64 ack_timeout_ms                           u32 m | m (u64 offset | u32 delivery)
//   0x0015  group ack       str group | u32 n | n u64 offsets            (empty)
//   0x0016  group nack      as ack                                       (empty)
//   0x0017  group position  str group                                    u64 committed | u64 outstanding |
//                                                                        u64 dl_start | u64 dl_end
//   0x0018  group list      -                                            u32 n | n str
//   0x0019  dead letters    str group | u64 from | u32 max | u64 bytes   FetchResult
//   0x001a  replay dead     str group | u64 from | u64 to                u64 replayed
//   0x001b  cancel wait     u64 wait id (no ShardHeader)                 (empty); the held wait
//                                                                        answers 0 at once
//   0x001c  group fetch     as 0x0014                                    as 0x0014 | u8 more
//           with more       (GroupDelivery::more; a leader on an older build answers
//                           not_supported, and the forwarder asks again with 0x0014)
//
//   FetchResult: u64 next_offset | u64 high_watermark | u64 log_start | u32 n | n str batches
//   Stats: u64 log_start | u64 high_watermark | u64 log_end | u64 leader_epoch | u8 leading |
//          u64 size_bytes | u64 segments | u64 appended_records | u64 syncs
//
// An error travels as the transport's error frame: code, outcome and message arrive as the
// leader gave them. A wrong incarnation is stale_route.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "sluice/error.h"
#include "sluice/storage.h"
#include "sluice/transport.h"
#include "sluice/types.h"

namespace sluice::core::fwd {

inline constexpr PeerMessageType kPublish = 0x0010;
inline constexpr PeerMessageType kFetch = 0x0011;
inline constexpr PeerMessageType kStats = 0x0012;
inline constexpr PeerMessageType kWait = 0x0013;
inline constexpr PeerMessageType kGroupFetch = 0x0014;
inline constexpr PeerMessageType kGroupAck = 0x0015;
inline constexpr PeerMessageType kGroupNack = 0x0016;
inline constexpr PeerMessageType kGroupPosition = 0x0017;
inline constexpr PeerMessageType kGroupList = 0x0018;
inline constexpr PeerMessageType kDeadLetters = 0x0019;
inline constexpr PeerMessageType kReplay = 0x001a;
inline constexpr PeerMessageType kCancelWait = 0x001b;
inline constexpr PeerMessageType kGroupFetchMore = 0x001c;
inline constexpr PeerMessageType kAllTypes[] = {kPublish,    kFetch,       kStats,     kWait,
                                                kGroupFetch, kGroupAck,    kGroupNack, kGroupPosition,
                                                kGroupList,  kDeadLetters, kReplay,    kCancelWait,
                                                kGroupFetchMore};

class Writer {
 public:
  explicit Writer(std::size_t reserve = 64) { out_.reserve(reserve); }
  Writer& u8(std::uint8_t v) { out_.push_back(static_cast<char>(v)); return *this; }
  Writer& u32(std::uint32_t v) { return raw(&v, 4); }
  Writer& u64(std::uint64_t v) { return raw(&v, 8); }
  Writer& i64(std::int64_t v) { return raw(&v, 8); }
  Writer& str(std::string_view s) {
    u32(static_cast<std::uint32_t>(s.size()));
    out_.append(s.data(), s.size());
    return *this;
  }
  Writer& bytes(std::string_view s) { out_.append(s.data(), s.size()); return *this; }
  std::string take() { return std::move(out_); }

 private:
  Writer& raw(const void* p, std::size_t n) {  // little-endian hosts only (x86-64, arm64)
    out_.append(static_cast<const char*>(p), n);
    return *this;
  }
  std::string out_;
};

// Reads a payload; any read past the end sets bad() and yields zeros.
class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  std::uint8_t u8() { std::uint8_t v = 0; raw(&v, 1); return v; }
  std::uint32_t u32() { std::uint32_t v = 0; raw(&v, 4); return v; }
  std::uint64_t u64() { std::uint64_t v = 0; raw(&v, 8); return v; }
  std::int64_t i64() { std::int64_t v = 0; raw(&v, 8); return v; }
  std::string str() {
    const std::uint32_t n = u32();
    if (bad_ || in_.size() - pos_ < n) { bad_ = true; return {}; }
    std::string s(in_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  std::string_view rest() { auto r = in_.substr(pos_); pos_ = in_.size(); return r; }
  bool bad() const { return bad_; }
  bool at_end() const { return pos_ == in_.size(); }
  // invalid_argument naming `what` when the payload was short or had bytes left over.
  Result<void> check(const char* what, bool whole = true) const {
    if (bad_ || (whole && pos_ != in_.size()))
      return Error(Errc::invalid_argument, std::string("malformed forwarded ") + what);
    return {};
  }

 private:
  void raw(void* p, std::size_t n) {
    if (bad_ || in_.size() - pos_ < n) { bad_ = true; return; }
    std::memcpy(p, in_.data() + pos_, n);
    pos_ += n;
  }
  std::string_view in_;
  std::size_t pos_ = 0;
  bool bad_ = false;
};

struct ShardHeader {
  StreamKey key;
  Incarnation incarnation;
  ShardIndex shard;
};
inline void put_header(Writer& w, const ShardHeader& h) {
  w.str(h.key.tenant).str(h.key.ns).str(h.key.name).u64(h.incarnation.value()).u32(h.shard.value());
}
inline ShardHeader get_header(Reader& r) {
  ShardHeader h;
  h.key.tenant = r.str();
  h.key.ns = r.str();
  h.key.name = r.str();
  h.incarnation = Incarnation{r.u64()};
  h.shard = ShardIndex{r.u32()};
  return h;
}

std::string encode_fetch_result(const FetchResult& f);
Result<FetchResult> decode_fetch_result(std::string_view payload);
std::string encode_stats(const ShardStats& s);
Result<ShardStats> decode_stats(std::string_view payload);
// with_more: the kGroupFetchMore answer (a trailing u8 more); without: kGroupFetch's.
std::string encode_delivery(const GroupDelivery& d, bool with_more);
Result<GroupDelivery> decode_delivery(std::string_view payload, bool with_more);
std::string encode_position(const GroupPosition& p);
Result<GroupPosition> decode_position(std::string_view payload, const std::string& group);
std::string encode_names(const std::vector<std::string>& names);
Result<std::vector<std::string>> decode_names(std::string_view payload);
std::string encode_offsets(const std::vector<Offset>& offsets);  // u32 n | n u64
std::vector<Offset> decode_offsets(Reader& r);

// The error a request that failed in parts (one publish over several shards) reports: the
// first one seen, unless a later one says more may have happened. "uncertain" beats
// "transient" beats "definite": were a shard's "nothing written" kept over another's
// "sent, then the connection was lost", a client would retry and duplicate that batch.
void keep_most_uncertain(std::optional<Error>& kept, const Error& e);

// A deadline queue on one thread, for the leader's hold on a forwarded wait.
class Timers {
 public:
  Timers();
  ~Timers();  // runs nothing more; drops what is pending (their destructors run)
  // Runs `fn` on the timer thread after `d`, unless cancelled first. Returns its id.
  std::uint64_t after(std::chrono::milliseconds d, std::function<void()> fn);
  void cancel(std::uint64_t id);

 private:
  void loop();
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::uint64_t next_ = 1;
  std::multimap<std::chrono::steady_clock::time_point, std::pair<std::uint64_t, std::function<void()>>> q_;
  std::map<std::uint64_t, std::chrono::steady_clock::time_point> when_;
  std::thread thread_;
};

// A few threads that run queued work (the leader's forwarded calls that may block).
//
// Bounded both ways (docs/replication.md "Forwarding"): a call posted while `max_queued`
// wait is refused at once, and a call that waited longer than `max_wait` (the leader's own
// forward_timeout_ms, which is what a forwarder waits with the defaults) is refused
// instead of run. Its forwarder gave up on it by then; running it would only spend the
// leader's threads on answers nobody reads, and a leader that fell behind would never
// catch up.
// Refused calls did nothing: `refuse` gets a transient `unavailable`.
class Workers {
 public:
  using Task = std::function<void()>;
  using Refuse = std::function<void(Error)>;
  static constexpr std::size_t kDefaultMaxQueued = 4096;
  using Clock = std::function<std::chrono::steady_clock::time_point()>;
  // `clock`: steady_clock::now unless a test gives its own.
  explicit Workers(int n, std::size_t max_queued = kDefaultMaxQueued,
                   std::chrono::milliseconds max_wait = std::chrono::milliseconds(10000), Clock clock = {});
  ~Workers();  // runs what is queued (or refuses what waited too long), then joins
  // Queues `run`; or calls `refuse` (inline when the queue is full, else on a worker).
  void post(Task run, Refuse refuse);
  void post(Task run) { post(std::move(run), nullptr); }
  std::uint64_t refused() const;  // calls refused so far, full queue or waited too long

 private:
  struct Item {
    Task run;
    Refuse refuse;
    std::chrono::steady_clock::time_point queued;
  };
  const std::size_t max_queued_;
  const std::chrono::milliseconds max_wait_;
  const Clock clock_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::uint64_t refused_ = 0;
  std::deque<Item> q_;
  std::vector<std::thread> threads_;
};

}  // namespace sluice::core::fwd
