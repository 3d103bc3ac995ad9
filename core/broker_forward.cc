// Forwarding client calls to the shard's leader (docs/replication.md "Forwarding";
// forwarding.h has the messages). The forwarding side is in broker_data.cc (each call
// routes to the local log or here); this file holds the transport plumbing and the
// leader's side: it runs a forwarded call as a local one and never forwards it again.
#include <future>

#include "broker.h"
#include "sluice/names.h"

namespace sluice::core {

void BrokerRuntime::start_forwarding() {
  if (!storage_) return;
  transport_ = host_.peer_transport();
  if (!transport_) return;
  if (!timers_) timers_ = std::make_shared<fwd::Timers>();
  // A queued call older than the forwarder's own timeout is refused, not run (the
  // forwarder gave up on it; forwarding.h).
  if (!workers_)
    workers_ = std::make_unique<fwd::Workers>(2, fwd::Workers::kDefaultMaxQueued,
                                              std::chrono::milliseconds(opts_.forward_timeout_ms));
  quorum_forward_timeout_ms_ =
      host_.config_int("replication.quorum_timeout_ms", 30000) + opts_.forward_timeout_ms;
  if (!group_workers_)
    group_workers_ = std::make_unique<fwd::Workers>(2, fwd::Workers::kDefaultMaxQueued,
                                                    std::chrono::milliseconds(quorum_forward_timeout_ms_));
  serving_forwarded_ = true;
  for (auto type : fwd::kAllTypes) {
    auto r = transport_->handle(type, [this, type](const PeerIdentity& from, std::string payload,
                                                   PeerResponder respond) {
      serve_forwarded(type, from.node, std::move(payload), std::move(respond));
    });
    if (!r)
      host_.log(LogLevel::error, "broker",
                "cannot serve forwarded calls of type " + std::to_string(type) + ": " + r.error().to_string());
  }
}

void BrokerRuntime::stop_forwarding() {
  if (transport_ && serving_forwarded_)
    for (auto type : fwd::kAllTypes) transport_->unhandle(type);
  serving_forwarded_ = false;
  // Queued forwarded calls run (they answer, or fail on closed shards); then no thread of
  // ours touches the runtime.
  workers_.reset();
  group_workers_.reset();
  // Forwarded waits this broker sent stay with the transport, which fails them when it
  // stops; their callbacks only look at waits_.
}

std::string BrokerRuntime::shard_header(const StreamKey& key, const ShardRoute& r, ShardIndex shard,
                                        std::size_t extra) const {
  fwd::Writer w(32 + key.tenant.size() + key.ns.size() + key.name.size() + extra);
  fwd::put_header(w, fwd::ShardHeader{key, r.incarnation, shard});
  return w.take();
}

Result<std::string> BrokerRuntime::forward(NodeId leader, PeerMessageType type, std::string payload,
                                           std::int64_t timeout_ms) {
  auto p = std::make_shared<std::promise<Result<std::string>>>();
  auto f = p->get_future();
  transport_->request(leader, type, std::move(payload), std::chrono::milliseconds(timeout_ms),
                      [p](Result<std::string> a) { p->set_value(std::move(a)); });
  return f.get();  // the transport runs every callback exactly once (timeout included)
}

Result<std::string> BrokerRuntime::forward_read(NodeId leader, PeerMessageType type, std::string payload,
                                                std::int64_t timeout_ms) {
  auto a = forward(leader, type, std::move(payload), timeout_ms);
  // A call sent and then lost (the leader died mid-call, or its answer timed out) is
  // "uncertain" to the transport, which cannot tell a read from a write. A read changed
  // nothing: "transient", so a client retries it (docs/api.md "Errors").
  if (!a && a.error().outcome == Outcome::uncertain)
    return Error(a.error().code, a.error().message + " (a read: nothing changed)", Outcome::transient);
  return a;
}

Result<FetchResult> BrokerRuntime::forward_fetch(const StreamKey& key, ShardIndex shard, const ShardRoute& r,
                                                 Offset from, std::uint32_t max_records,
                                                 std::size_t max_bytes) {
  fwd::Writer w;
  w.bytes(shard_header(key, r, shard)).u64(from.value()).u32(max_records).u64(max_bytes);
  auto a = forward_read(r.leader, fwd::kFetch, w.take(), opts_.forward_timeout_ms);
  if (!a) return a.error();
  return fwd::decode_fetch_result(*a);
}

void BrokerRuntime::arm_forwarded_wait(std::uint64_t id, std::shared_ptr<ForwardedWait> w) {
  transport_->request(
      w->leader, fwd::kWait, w->request,
      std::chrono::milliseconds(opts_.forward_wait_hold_ms + opts_.forward_timeout_ms),
      [this, id, w](Result<std::string> a) {
        if (a && a->size() == 1 && (*a)[0] == 0) {
          // The leader's hold passed with nothing new: ask again while the poll lasts.
          bool live;
          {
            std::lock_guard lk(w->mu);
            live = static_cast<bool>(w->cb);
          }
          if (live) return arm_forwarded_wait(id, w);
          return;
        }
        fire_forwarded_wait(id);  // data arrived, or an error the caller's next read reports
      });
}

void BrokerRuntime::fire_forwarded_wait(std::uint64_t id) {
  std::shared_ptr<ForwardedWait> w;
  {
    std::lock_guard lk(waits_mu_);
    auto it = waits_.find(id);
    if (it == waits_.end()) return;  // cancelled
    w = std::move(it->second);
    waits_.erase(it);
  }
  std::function<void()> cb;
  {
    std::lock_guard lk(w->mu);
    cb.swap(w->cb);
  }
  if (cb) cb();
}

Result<std::shared_ptr<ShardLog>> BrokerRuntime::forwarded_shard(const fwd::ShardHeader& h) {
  if (!started_) return Error(Errc::unavailable, "broker " + std::to_string(info_.node_id.value()) + " is starting",
                              Outcome::transient);
  if (auto v = validate_stream_key(h.key); !v) return v.error();
  auto st = find(h.key);
  if (!st || st->info.incarnation < h.incarnation)
    return Error(Errc::unavailable,
                 "broker " + std::to_string(info_.node_id.value()) + " has not applied incarnation " +
                     std::to_string(h.incarnation.value()) + " of " + h.key.to_string() + " yet",
                 Outcome::transient);
  if (st->info.incarnation != h.incarnation)
    return Error(Errc::stale_route, "the forwarded call names incarnation " + std::to_string(h.incarnation.value()) +
                                        " of " + h.key.to_string() + "; broker " +
                                        std::to_string(info_.node_id.value()) + " serves incarnation " +
                                        std::to_string(st->info.incarnation.value()));
  // From the state just checked, not a second lookup: a recreate installed between the two
  // would hand a call checked against the old incarnation the new one's shard (review).
  return shard_in(*st, h.key, h.shard);  // not_leader if this broker does not lead it now
}

namespace {
// A forwarded read answers at most this much (beyond one batch, which it always answers),
// so that its answer fits in a peer frame: a client's http.fetch_max_bytes may be up to
// 1 GiB, and an answer past kMaxPeerFrameBytes was refused as internal on every retry
// (review). The client gets less and fetches again from next_offset.
constexpr std::uint64_t kMaxForwardedReadBytes = kMaxPeerFrameBytes / 2;

std::string u64_answer(std::uint64_t v) {
  fwd::Writer w(8);
  w.u64(v);
  return w.take();
}
}  // namespace

// One wait a forwarding broker's long poll left with this leader: answered once, by new data
// (1), by the hold passing (0) or by a cancel (0).
struct BrokerRuntime::HeldWait {
  std::mutex mu;
  PeerResponder respond;
  std::shared_ptr<ShardLog> log;
  std::uint64_t notify = 0, timer = 0;
  bool answered = false;
  std::function<void()> forget;  // drops the entry in held_waits_

  void answer(bool fired, fwd::Timers* timers) {
    PeerResponder r;
    std::function<void()> f;
    std::uint64_t n, t;
    {
      std::lock_guard lk(mu);
      answered = true;
      r = std::move(respond);
      f = std::move(forget);
      n = std::exchange(notify, 0);
      t = std::exchange(timer, 0);
    }
    if (f) f();
    if (!fired && n && log) log->cancel_notify(n);
    if (timers && t) timers->cancel(t);
    r(std::string(1, fired ? '\1' : '\0'));  // a second answer finds r empty: nothing
  }
};

void BrokerRuntime::hold_wait(NodeId from, const fwd::ShardHeader& h, std::shared_ptr<ShardLog> log, Offset offset,
                              std::uint32_t hold_ms, std::uint64_t wait_id, PeerResponder respond) {
  (void)h;
  auto held = std::make_shared<HeldWait>();
  held->respond = std::move(respond);
  held->log = log;
  const auto key = std::make_pair(from.value(), wait_id);
  {
    std::lock_guard lk(held_mu_);
    held_waits_[key] = held;
  }
  std::weak_ptr<HeldWait> weak = held;
  held->forget = [this, key, weak] {
    std::lock_guard lk(held_mu_);
    auto it = held_waits_.find(key);
    if (it != held_waits_.end() && it->second == weak.lock()) held_waits_.erase(it);
  };
  std::weak_ptr<fwd::Timers> timers = timers_;
  // Timer first, so that an answer by data always finds it to cancel.
  const std::uint64_t t = timers_->after(std::chrono::milliseconds(std::min<std::uint32_t>(hold_ms, 60000)),
                                         [weak] {
                                           if (auto hw = weak.lock()) hw->answer(false, nullptr);
                                         });
  {
    std::lock_guard lk(held->mu);
    held->timer = t;
  }
  const std::uint64_t n = log->notify_when_beyond(offset, [weak, timers] {
    auto hw = weak.lock();
    auto tm = timers.lock();
    if (hw) hw->answer(true, tm.get());
  });
  std::lock_guard lk(held->mu);
  if (!held->answered) held->notify = n;  // else already answered (n is 0 or has fired)
}

void BrokerRuntime::serve_forwarded(PeerMessageType type, NodeId from, std::string payload, PeerResponder respond) {
  if (type == fwd::kCancelWait) {
    fwd::Reader rd(payload);
    const std::uint64_t id = rd.u64();
    if (auto c = rd.check("wait cancel"); !c) return respond(c.error());
    std::shared_ptr<HeldWait> held;
    {
      std::lock_guard lk(held_mu_);
      auto it = held_waits_.find({from.value(), id});
      if (it != held_waits_.end()) held = it->second;
    }
    if (held) held->answer(false, timers_.get());
    return respond(std::string());
  }
  fwd::Reader rd(payload);
  const fwd::ShardHeader h = fwd::get_header(rd);
  if (auto c = rd.check("request header", false); !c) return respond(c.error());

  if (type == fwd::kPublish) {
    const auto ack = static_cast<AckMode>(rd.u8());
    if (auto c = rd.check("publish", false); !c) return respond(c.error());
    if (ack != AckMode::none && ack != AckMode::leader && ack != AckMode::quorum)
      return respond(Error(Errc::invalid_argument, "a forwarded publish names an unknown ack mode"));
    auto log = forwarded_shard(h);
    if (!log) return respond(log.error());
    const std::size_t consumed = payload.size() - rd.rest().size();
    payload.erase(0, consumed);  // the batch, as the forwarding broker built it
    auto res = std::make_shared<PeerResponder>(std::move(respond));
    log.value()->append(std::move(payload), ack, [res](Result<AppendResult> r) {
      if (!r) return (*res)(r.error());
      fwd::Writer w(13);
      w.u64(r->base_offset.value()).u32(r->count).u8(r->duplicate ? 1 : 0);
      (*res)(w.take());
    });
    return;
  }

  if (type == fwd::kStats) {
    if (auto c = rd.check("shard stats request"); !c) return respond(c.error());
    auto log = forwarded_shard(h);
    if (!log) return respond(log.error());
    return respond(fwd::encode_stats(log.value()->stats()));
  }

  if (type == fwd::kWait) {
    const Offset offset{rd.u64()};
    const std::uint32_t hold_ms = rd.u32();
    const std::uint64_t wait_id = rd.u64();
    if (auto c = rd.check("wait request"); !c) return respond(c.error());
    auto log = forwarded_shard(h);
    if (!log) return respond(log.error());
    return hold_wait(from, h, std::move(log.value()), offset, hold_ms, wait_id, std::move(respond));
  }

  // The rest may block (reads, group state that syncs): off the transport's I/O thread.
  auto res = std::make_shared<PeerResponder>(std::move(respond));
  auto refuse = [res](Error e) { (*res)(std::move(e)); };
  // Group calls that may wait for a quorum commit go to their own pool (the forwarder
  // waits quorum_forward_timeout_ms_ for them): two of them must not hold up every
  // forwarded read behind a slow follower (review finding).
  const bool waits_for_quorum = type == fwd::kGroupFetch || type == fwd::kGroupFetchMore || type == fwd::kGroupAck ||
                                type == fwd::kGroupNack || type == fwd::kReplay;
  (waits_for_quorum ? group_workers_ : workers_)->post([this, type, h, payload = std::move(payload), res] {
    fwd::Reader rd(payload);
    fwd::get_header(rd);
    auto answer = [&]() -> Result<std::string> {
      switch (type) {
        case fwd::kFetch: {
          const Offset from{rd.u64()};
          const std::uint32_t max = rd.u32();
          const std::uint64_t bytes = std::min(rd.u64(), kMaxForwardedReadBytes);
          if (auto c = rd.check("fetch request"); !c) return c.error();
          auto log = forwarded_shard(h);
          if (!log) return log.error();
          auto r = log.value()->read(from, max, bytes);
          if (!r) return r.error();
          return fwd::encode_fetch_result(*r);
        }
        case fwd::kGroupFetch:
        case fwd::kGroupFetchMore: {
          const std::string group = rd.str();
          const std::uint32_t max = rd.u32();
          GroupOptions o;
          o.max_deliveries = rd.u32();
          o.ack_timeout_ms = rd.i64();
          if (auto c = rd.check("group fetch request"); !c) return c.error();
          if (auto v = validate_name(NameKind::group, group); !v) return v.error();
          auto log = forwarded_shard(h);
          if (!log) return log.error();
          auto r = log.value()->group_fetch(group, max, o);
          if (!r) return r.error();
          return fwd::encode_delivery(*r, type == fwd::kGroupFetchMore);
        }
        case fwd::kGroupAck:
        case fwd::kGroupNack: {
          const std::string group = rd.str();
          auto offsets = fwd::decode_offsets(rd);
          if (auto c = rd.check("group ack request"); !c) return c.error();
          if (auto v = validate_name(NameKind::group, group); !v) return v.error();
          auto log = forwarded_shard(h);
          if (!log) return log.error();
          auto r = type == fwd::kGroupAck ? log.value()->group_ack(group, offsets)
                                          : log.value()->group_nack(group, offsets);
          if (!r) return r.error();
          return std::string();
        }
        case fwd::kGroupPosition: {
          const std::string group = rd.str();
          if (auto c = rd.check("group position request"); !c) return c.error();
          if (auto v = validate_name(NameKind::group, group); !v) return v.error();
          auto log = forwarded_shard(h);
          if (!log) return log.error();
          auto r = log.value()->group_position(group);
          if (!r) return r.error();
          return fwd::encode_position(*r);
        }
        case fwd::kGroupList: {
          if (auto c = rd.check("group list request"); !c) return c.error();
          auto log = forwarded_shard(h);
          if (!log) return log.error();
          auto r = log.value()->list_groups();
          if (!r) return r.error();
          return fwd::encode_names(*r);
        }
        case fwd::kDeadLetters: {
          const std::string group = rd.str();
          const Offset from{rd.u64()};
          const std::uint32_t max = rd.u32();
          const std::uint64_t bytes = std::min(rd.u64(), kMaxForwardedReadBytes);
          if (auto c = rd.check("dead letters request"); !c) return c.error();
          if (auto v = validate_name(NameKind::group, group); !v) return v.error();
          auto log = forwarded_shard(h);
          if (!log) return log.error();
          auto r = log.value()->dead_letters(group, from, max, bytes);
          if (!r && r.error().code == Errc::not_found) return fwd::encode_fetch_result(FetchResult{});
          if (!r) return r.error();
          return fwd::encode_fetch_result(*r);
        }
        case fwd::kReplay: {
          const std::string group = rd.str();
          const Offset from{rd.u64()};
          const Offset to{rd.u64()};
          if (auto c = rd.check("replay request"); !c) return c.error();
          if (auto v = validate_name(NameKind::group, group); !v) return v.error();
          auto log = forwarded_shard(h);
          if (!log) return log.error();
          auto r = log.value()->replay_dead_letters(group, from, to);
          if (!r) return r.error();
          return u64_answer(*r);
        }
      }
      return Error(Errc::not_supported, "unknown forwarded call type " + std::to_string(type));
    };
    (*res)(answer());
  }, std::move(refuse));
}

}  // namespace sluice::core
