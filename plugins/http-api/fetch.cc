// GET {ns}/streams/{s}/shards/{n}/records?offset=N|earliest|latest&max=M&wait_ms=W
//
// Every answer about the shard carries Sluice-Leader (the leader's HTTP address) when known.
// A shard another broker leads is read through it (the core forwards the reads and the wait);
// those reads run on the blocking pool, never on the connection's I/O thread.
//
// Long poll: when the first read finds nothing and wait_ms > 0, the handler arms a strand
// timer (wait_ms capped by http.max_wait_ms) and Node::notify_when_beyond. Whichever
// fires first (both run on the connection strand, so `done` needs no lock) re-reads and
// answers; a timeout answers 200 with no records. The notify callback runs on a storage
// thread and holds only a weak_ptr to the poll, so a poll that already answered costs the
// node nothing but an empty std::function until it fires.

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

#include "codec.h"
#include "handlers.h"
#include "problem.h"
#include "subscribe.h"
#include "waiters.h"

namespace sluice::http_api {

namespace json = boost::json;

namespace {
void put_bytes(json::object& o, std::string_view name, std::string_view bytes) {
  if (valid_utf8(bytes))
    o[name] = json::string_view(bytes.data(), bytes.size());
  else
    o[std::string(name) + "_base64"] = base64_encode(bytes);
}

}  // namespace

json::object record_json(const RecordView& rv, std::vector<Header>& headers) {
  json::object o;
  o["offset"] = rv.offset;
  if (rv.key) put_bytes(o, "key", *rv.key);
  put_bytes(o, "value", rv.value);
  if (!rv.headers.empty()) {
    headers.clear();
    if (decode_headers(rv.headers, headers)) {
      json::object ho, hb;
      for (auto& hd : headers) {
        if (valid_utf8(hd.value))
          ho[hd.name] = json::string_view(hd.value.data(), hd.value.size());
        else
          hb[hd.name] = base64_encode(hd.value);
      }
      if (!ho.empty()) o["headers"] = std::move(ho);
      if (!hb.empty()) o["headers_base64"] = std::move(hb);
    }
  }
  o["timestamp"] = rv.timestamp_ms;
  return o;
}

namespace {
constexpr std::uint32_t kDefaultMax = 100;
constexpr std::uint32_t kMaxMax = 10000;
}  // namespace

Result<RecordsPage> render_records(const FetchResult& r, Offset from, std::uint32_t max) {
  RecordsPage page;
  json::array recs;
  std::uint64_t next = std::max(from.value(), r.next_offset.value());
  std::vector<Header> headers;
  bool full = false;
  for (const auto& b : r.batches) {
    if (full) break;
    // Storage hands out whole, CRC-checked batches (storage.h): no second CRC pass here.
    if (b.size() < kBatchHeaderSize) return Error(Errc::corrupt_data, "fetch returned a truncated batch");
    BatchReader reader(b.data(), b.size());
    RecordView rv;
    while (reader.next(rv)) {
      if (rv.offset < from.value()) continue;  // the first batch may start before `from`
      if (recs.size() >= max) {
        full = true;
        break;
      }
      recs.push_back(record_json(rv, headers));
      next = rv.offset + 1;
    }
  }
  page.count = recs.size();
  page.next_offset = Offset{next};
  page.body["records"] = std::move(recs);
  page.body["next_offset"] = next;
  page.body["high_watermark"] = r.high_watermark.value();
  return page;
}

Result<std::optional<Offset>> parse_offset_param(std::string_view off) {
  if (off == "earliest" || off == "latest") return std::optional<Offset>{};
  auto v = parse_u64(off);
  if (!v) return Error(Errc::invalid_argument, "offset must be a non-negative integer, earliest or latest");
  return std::optional<Offset>{Offset{*v}};
}

Result<Offset> resolve_offset(Node& node, const StreamKey& key, ShardIndex shard, std::string_view off) {
  auto p = parse_offset_param(off);
  if (!p) return p.error();
  if (*p) return **p;
  auto st = node.shard_stats(key, shard);
  if (!st) return st.error();
  return off == "earliest" ? st->log_start : st->high_watermark;
}

namespace {

// One read; renders the response. `empty` is true when no record was returned.
struct ReadOutcome {
  bool empty = false;
  HttpResponse response;
};

// A read of incarnation `inc` only, bracketed by checks as a subscription's reads are
// (subscribe.h): a long poll that began on a stream deleted and created again meanwhile
// read the new stream at the old one's offset, as if one continued the other, and an
// offset resolved on one incarnation could be read on the next (review finding).
ReadOutcome read_once(Node& node, const HttpConfig& cfg, const StreamKey& key, ShardIndex shard,
                      Incarnation inc, Offset from, std::uint32_t max) {
  if (auto c = check_incarnation(node, key, inc); !c) return {false, problem(c.error())};
  auto r = node.fetch(key, shard, from, max, cfg.fetch_max_bytes);
  if (auto c = check_incarnation(node, key, inc); !c) return {false, problem(c.error())};
  if (!r) return {false, problem(r.error())};
  auto page = render_records(*r, from, max);
  if (!page) return {false, problem(page.error())};
  page->body["incarnation"] = inc.value();
  return {page->count == 0, json_response(200, page->body)};
}

struct Poll {
  std::shared_ptr<Exchange> ex;
  Node* node;
  const HttpConfig* cfg;
  ShardWaiters* waiters;  // counted in park(), released once in finish()
  StreamKey key;
  ShardIndex shard;
  Incarnation inc;
  Offset from;
  std::uint32_t max;
  bool remote = false;  // another broker leads the shard: reads are forwarded (blocking pool)
  bool done = false;
  std::function<void()> cancel_timer;
  std::uint64_t notify_handle = 0;

  // Strand only.
  void finish() {
    if (done) return;
    done = true;
    waiters->remove(key, shard);
    if (cancel_timer) std::exchange(cancel_timer, nullptr)();
    // A timed-out poll drops its waiter, so idle shards do not accumulate them.
    if (notify_handle) node->cancel_notify(key, shard, std::exchange(notify_handle, 0));
    auto answer = [n = node, c = cfg, key = key, shard = shard, inc = inc, from = from, max = max] {
      return with_leader(read_once(*n, *c, key, shard, inc, from, max).response, *n, key, shard);
    };
    // Asked again: the leader may have moved while the poll waited, and a read forwarded to
    // the new one must not block this I/O thread (review finding).
    if (!remote && node->serves_locally(key, shard)) return ex->respond(answer());
    ex->run_blocking([ex = ex, answer] { ex->respond(answer()); });
  }
};

// Strand only: nothing to read yet; wait for data beyond `from` or the timeout.
void park(Node& node, const HttpConfig& cfg, ShardWaiters& waiters, const std::shared_ptr<Exchange>& ex,
          const StreamKey& key, ShardIndex shard, Incarnation inc, Offset from, std::uint32_t max,
          std::chrono::milliseconds wait, bool remote) {
  if (!waiters.try_add(key, shard)) {
    HttpResponse r = problem(Error(Errc::unavailable,
                                   "too many long polls waiting on shard " + std::to_string(shard.value()) +
                                       " of stream " + key.to_string() + ": http.max_waiters_per_shard is " +
                                       std::to_string(waiters.max()) + "; retry, or fetch without wait_ms"));
    r.headers.emplace_back("Retry-After", "1");
    return ex->respond(with_leader(std::move(r), node, key, shard));
  }
  auto poll =
      std::make_shared<Poll>(Poll{ex, &node, &cfg, &waiters, key, shard, inc, from, max, remote, false, {}, 0});
  poll->cancel_timer = ex->start_timer(wait, [poll] { poll->finish(); });
  auto r = node.notify_when_beyond(key, shard, from, [w = std::weak_ptr<Poll>(poll)] {
    if (auto p = w.lock()) {
      p->ex->post([p] { p->finish(); });
    }
  });
  if (!r) {
    poll->done = true;
    waiters.remove(key, shard);
    if (poll->cancel_timer) std::exchange(poll->cancel_timer, nullptr)();
    ex->respond(with_leader(problem(r.error()), node, key, shard));
    return;
  }
  poll->notify_handle = r.value();
}

// Resolves the offset, reads once, answers or parks. On the strand for a shard served here;
// on the blocking pool for one another broker leads (each read is a round trip to it).
void first_read(Node& node, const HttpConfig& cfg, ShardWaiters& waiters, const std::shared_ptr<Exchange>& ex,
                const StreamKey& key, ShardIndex shard, std::string_view off, std::uint32_t max,
                std::chrono::milliseconds wait, bool remote) {
  if (auto p = parse_offset_param(off); !p) return ex->respond(problem(p.error()));
  // The incarnation this fetch reads, pinned before the offset is resolved on it.
  auto si = node.stream(key);
  if (!si) return ex->respond(problem(si.error()));
  const Incarnation inc = si->incarnation;
  auto resolved = resolve_offset(node, key, shard, off);
  if (!resolved) return ex->respond(with_leader(problem(resolved.error()), node, key, shard));
  const Offset from = *resolved;

  ReadOutcome first = read_once(node, cfg, key, shard, inc, from, max);
  if (!first.empty || wait.count() == 0)
    return ex->respond(with_leader(std::move(first.response), node, key, shard));
  if (!remote) return park(node, cfg, waiters, ex, key, shard, inc, from, max, wait, false);
  ex->post([&node, &cfg, &waiters, ex, key, shard, inc, from, max, wait] {
    park(node, cfg, waiters, ex, key, shard, inc, from, max, wait, true);
  });
}

}  // namespace

void handle_fetch(Node& node, const HttpConfig& cfg, ShardWaiters& waiters, const std::shared_ptr<Exchange>& ex,
                  const StreamKey& key, ShardIndex shard, const Target& target) {
  std::uint32_t max = kDefaultMax;
  if (auto m = target.param("max")) {
    auto v = parse_u64(*m);
    if (!v || *v == 0)
      return ex->respond(problem(Error(Errc::invalid_argument, "max must be a positive integer")));
    max = static_cast<std::uint32_t>(std::min<std::uint64_t>(*v, kMaxMax));
  }
  std::chrono::milliseconds wait{0};
  if (auto w = target.param("wait_ms")) {
    auto v = parse_u64(*w);
    if (!v)
      return ex->respond(
          problem(Error(Errc::invalid_argument, "wait_ms must be a non-negative integer")));
    wait = std::min<std::chrono::milliseconds>(
        std::chrono::milliseconds(std::min<std::uint64_t>(*v, 86400000)), cfg.max_wait);
  }
  const std::string_view off = target.param("offset").value_or("earliest");
  if (node.serves_locally(key, shard))
    return first_read(node, cfg, waiters, ex, key, shard, off, max, wait, false);
  // Another broker leads the shard: every read is a round trip to it, which must not hold
  // an HTTP I/O thread.
  ex->run_blocking([&node, &cfg, &waiters, ex, key, shard, off = std::string(off), max, wait] {
    first_read(node, cfg, waiters, ex, key, shard, off, max, wait, true);
  });
}

}  // namespace sluice::http_api
