// The broker's data calls: publish, fetch, shard status, consumer groups and dead letters,
// for any shard: those this broker leads run here, the others are forwarded to their leader
// (broker_forward.cc; docs/replication.md "Forwarding"). A refused incarnation answers 409
// conflict with the reason; a shard without a leader 503 shard_unavailable.
#include <chrono>
#include <set>

#include "broker.h"
#include "partitioner.h"
#include "sluice/catalog_rules.h"
#include "sluice/names.h"
#include "sluice/record_batch.h"

namespace sluice::core {

namespace {
std::int64_t now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}
}  // namespace

std::shared_ptr<BrokerRuntime::StreamState> BrokerRuntime::find(const StreamKey& key) {
  std::shared_lock lk(streams_mu_);
  auto it = streams_.find(key);
  return it == streams_.end() ? nullptr : it->second;
}

Error BrokerRuntime::no_stream(const StreamKey& key) {
  if (closed_all_) {
    std::string why;
    {
      std::lock_guard lk(applied_mu_);
      why = fenced_;
    }
    return Error(Errc::unavailable,
                 "broker " + std::to_string(info_.node_id.value()) + " serves nothing now (" +
                     (why.empty() ? std::string("it is stopping") : why) + "); ask another broker",
                 Outcome::transient);
  }
  return Error(Errc::not_found, "stream " + key.to_string() + " does not exist");
}

Result<std::shared_ptr<ShardLog>> BrokerRuntime::find_shard(const StreamKey& key, ShardIndex shard) {
  if (auto v = validate_stream_key(key); !v) return v.error();
  if (!storage_) return no_broker_role();
  auto st = find(key);
  if (!st) return no_stream(key);
  return shard_in(*st, key, shard);
}

Result<std::shared_ptr<ShardLog>> BrokerRuntime::shard_in(const StreamState& state, const StreamKey& key,
                                                          ShardIndex shard) {
  const StreamState* st = &state;
  if (!st->refused.empty()) return Error(Errc::conflict, st->refused);
  if (shard.value() >= st->shards.size())
    return Error(Errc::not_found, "stream " + key.to_string() + " has " +
                                      std::to_string(st->shards.size()) + " shards; shard " +
                                      std::to_string(shard.value()) + " does not exist");
  if (!st->shards[shard.value()]) {
    NodeId leader{0};
    for (const auto& a : st->assignments)
      if (a.shard == shard) leader = a.leader;
    // Led here but not open (it failed to open, or is opening), or led by no one: the same
    // answer a direct call gets, not not_leader naming this node or "broker 0".
    if (leader == info_.node_id || leader.value() == 0) return not_led_here(*st, key, shard.value());
    return Error(Errc::not_leader, "shard " + std::to_string(shard.value()) + " of " + key.to_string() +
                                       " is led by broker " + std::to_string(leader.value()) +
                                       ", not by this node (" + std::to_string(info_.node_id.value()) + ")");
  }
  return st->shards[shard.value()];
}

Error BrokerRuntime::not_led_here(const StreamState& st, const StreamKey& key, std::uint32_t shard) const {
  NodeId leader{0};
  const Assignment* cur = nullptr;
  for (const auto& a : st.assignments)
    if (a.shard.value() == shard) {
      leader = a.leader;
      cur = &a;
    }
  const std::string what = "shard " + std::to_string(shard) + " of " + key.to_string();
  if (leader.value() == 0) {
    // From the last broker list only: this may be an HTTP I/O thread, and asking the
    // metadata store (a network call on raft-meta) would stall every connection on it
    // during the very failover that left the shard leaderless (review finding).
    std::string why = cur ? leaderless_reason(*cur, false) : std::string();
    return Error(Errc::shard_unavailable, what + " has no leader" + (why.empty() ? "" : ": " + why),
                 Outcome::transient);
  }
  if (leader == info_.node_id) {
    if (shard < st.open_failed.size() && !st.open_failed[shard].empty())
      return Error(Errc::shard_unavailable,
                   what + " is led by this broker, which could not open it (retried; or move its leader): " +
                       st.open_failed[shard],
                   Outcome::transient);
    return Error(Errc::unavailable, what + " is led by this broker but not open yet", Outcome::transient);
  }
  return Error(Errc::not_leader, what + " is led by broker " + std::to_string(leader.value()) +
                                     ", not by this node (" + std::to_string(info_.node_id.value()) +
                                     "), which cannot forward to it (no peer transport)");
}

Result<BrokerRuntime::ShardRoute> BrokerRuntime::route(const StreamKey& key, ShardIndex shard,
                                                       std::optional<Incarnation> expected) {
  if (auto v = validate_stream_key(key); !v) return v.error();
  if (!storage_) return no_broker_role();
  auto st = find(key);
  // A pinned call naming an incarnation this broker has not applied yet (its change feed
  // lags the broker that answered the client before): transient, not "deleted and created
  // again" or "does not exist", which would make the client give up on live records
  // (review finding). A name this broker knows nothing of is still not_found: a stream
  // deleted since is the likelier story, and the client must not retry it for ever.
  if (!st) return no_stream(key);
  if (expected && st->info.incarnation < *expected)
    return Error(Errc::unavailable,
                 "broker " + std::to_string(info_.node_id.value()) + " has not applied incarnation " +
                     std::to_string(expected->value()) + " of " + key.to_string() + " yet (it holds " +
                     std::to_string(st->info.incarnation.value()) + "); retry",
                 Outcome::transient);
  if (expected && st->info.incarnation != *expected)
    return Error(Errc::conflict, "stream " + key.to_string() + " is incarnation " +
                                     std::to_string(st->info.incarnation.value()) + " now, not incarnation " +
                                     std::to_string(expected->value()) +
                                     " (deleted and created again); nothing was done");
  return route_in(*st, key, shard);
}

Result<BrokerRuntime::ShardRoute> BrokerRuntime::route_in(const StreamState& state, const StreamKey& key,
                                                          ShardIndex shard) {
  const StreamState* st = &state;
  if (!st->refused.empty()) return Error(Errc::conflict, st->refused);
  const std::uint32_t i = shard.value();
  if (i >= st->shards.size())
    return Error(Errc::not_found, "stream " + key.to_string() + " has " + std::to_string(st->shards.size()) +
                                      " shards; shard " + std::to_string(i) + " does not exist");
  ShardRoute r;
  r.incarnation = st->info.incarnation;
  if (st->shards[i]) {
    r.log = st->shards[i];
    return r;
  }
  for (const auto& a : st->assignments)
    if (a.shard == shard) r.leader = a.leader;
  if (r.leader.value() == 0 || r.leader == info_.node_id || !transport_) return not_led_here(*st, key, i);
  return r;
}

bool BrokerRuntime::serves_locally(const StreamKey& key, ShardIndex shard) {
  auto st = find(key);
  if (!st || !st->refused.empty() || shard.value() >= st->shards.size()) return true;  // answered at once
  return st->shards[shard.value()] != nullptr;
}

// Only where the shard is led and served here: a compaction's roll and trim are the
// leader's (docs/architecture.md "Cache compaction"); followers trim from the fetch answers.
Result<Offset> BrokerRuntime::roll_shard(const StreamKey& key, ShardIndex shard) {
  auto rt = route(key, shard);
  if (!rt) return rt.error();
  if (!rt->log)
    return Error(Errc::not_leader, "shard " + std::to_string(shard.value()) + " of " + key.to_string() +
                                       " is led by broker " + std::to_string(rt->leader.value()) + ", not here");
  return rt->log->roll_segment();
}

Result<Offset> BrokerRuntime::trim_shard(const StreamKey& key, ShardIndex shard, Offset before) {
  auto rt = route(key, shard);
  if (!rt) return rt.error();
  if (!rt->log)
    return Error(Errc::not_leader, "shard " + std::to_string(shard.value()) + " of " + key.to_string() +
                                       " is led by broker " + std::to_string(rt->leader.value()) + ", not here");
  return rt->log->trim_before(before);
}

std::string BrokerRuntime::leader_address(const StreamKey& key, ShardIndex shard) {
  auto st = find(key);
  if (!st) return {};
  for (const auto& a : st->assignments)
    if (a.shard == shard) {
      if (a.leader.value() == 0) return {};
      if (a.leader == info_.node_id) return opts_.advertised_address;
      return opts_.peers ? opts_.peers->api_address(a.leader) : std::string();
    }
  return {};
}

Result<StreamInfo> BrokerRuntime::create_stream(const StreamKey& key, const StreamSpec& spec) {
  if (auto v = validate_stream_key(key); !v) return v.error();
  if (auto v = validate_stream_spec(spec); !v) return v.error();
  if (auto v = check_spec_supported(spec); !v) return v.error();
  // Shards are placed on registered brokers; with none, nothing could ever serve them.
  if (auto b = catalog_.list_brokers(); b && b->empty())
    return Error(Errc::unavailable, "no broker is registered to hold the stream's shards; start a broker first",
                 Outcome::transient);
  auto r = catalog_.create_stream(key, spec);
  if (!r) return r;
  if (!wait_applied(r->created_seq, opts_.catalog_timeout_ms))
    return Error(Errc::timeout, "stream created in the catalog, but this node has not applied it yet");
  return r;
}

Result<StreamInfo> BrokerRuntime::stream(const StreamKey& key) {
  if (auto v = validate_stream_key(key); !v) return v.error();
  auto st = find(key);
  if (!st) return no_stream(key);
  return st->info;
}

namespace {
// Gathers the per-shard append results of one publish request.
struct PublishGather {
  std::vector<std::uint32_t> shard_of;  // per record
  std::vector<std::uint32_t> index_in;  // per record: position inside its shard's batch
  std::vector<Offset> base;             // per shard (each slot written by one callback)
  std::atomic<int> remaining{0};
  std::mutex mu;
  std::optional<Error> error;
  std::atomic<int> succeeded{0};
  PublishCallback cb;
  std::atomic<bool> returned{false};    // publish() has returned (false in done(): inline)
  LatencyHistogram* latency = nullptr;  // observed on success
  std::chrono::steady_clock::time_point start;

  void done() {
    if (error) {
      // Some shards may have taken their batch: then the request as a whole did happen in
      // part, and a blind retry would duplicate those records (review finding).
      if (succeeded.load() > 0)
        cb(Error(error->code,
                 error->message + " (other shards of this request were written: outcome unknown)",
                 Outcome::uncertain));
      else
        cb(*error);
      return;
    }
    std::vector<PublishedRecord> out(shard_of.size());
    for (std::size_t i = 0; i < shard_of.size(); ++i)
      out[i] = {ShardIndex{shard_of[i]}, Offset{base[shard_of[i]].value() + index_in[i]}};
    latency->observe(std::chrono::steady_clock::now() - start);
    cb(std::move(out));
  }
};
}  // namespace

void BrokerRuntime::publish(const StreamKey& key, const std::vector<PublishRecord>& records,
                            const PublishOptions& opts, PublishCallback cb) {
  const auto start = std::chrono::steady_clock::now();
  m_publish_requests_.fetch_add(1, std::memory_order_relaxed);
  auto fail = [&](Error e) {
    m_publish_errors_.fetch_add(1, std::memory_order_relaxed);
    cb(std::move(e));
  };
  if (auto v = validate_stream_key(key); !v) return fail(v.error());
  if (!storage_) return fail(no_broker_role());
  if (records.empty()) return fail(Error(Errc::invalid_argument, "a publish needs at least one record"));
  if (records.size() > opts_.max_records_per_publish)
    return fail(Error(Errc::invalid_argument,
                      "a publish may hold at most " + std::to_string(opts_.max_records_per_publish) +
                          " records, got " + std::to_string(records.size())));
  auto st = find(key);
  if (!st) return fail(no_stream(key));
  if (!st->refused.empty()) return fail(Error(Errc::conflict, st->refused));
  const std::uint32_t n = static_cast<std::uint32_t>(st->shards.size());

  auto g = std::make_shared<PublishGather>();
  g->shard_of.resize(records.size());
  g->index_in.resize(records.size());
  g->base.resize(n);
  std::vector<std::uint32_t> count(n, 0);
  std::vector<std::size_t> bytes(n, 0);
  const std::uint32_t sticky = st->sticky.fetch_add(1, std::memory_order_relaxed) % n;
  for (std::size_t i = 0; i < records.size(); ++i) {
    const auto& r = records[i];
    std::uint32_t s;
    if (r.shard) {
      if (*r.shard >= n)
        return fail(Error(Errc::invalid_argument, "record " + std::to_string(i) + " names shard " +
                                                      std::to_string(*r.shard) + ", but the stream has " +
                                                      std::to_string(n) + " shards"));
      s = *r.shard;
    } else if (r.key) {
      s = shard_for_key(*r.key, n);
    } else {
      s = sticky;
    }
    g->shard_of[i] = s;
    g->index_in[i] = count[s]++;
    bytes[s] += kRecordHeaderSize + (r.key ? r.key->size() : 0) + r.value.size() + r.headers.size();
  }
  // One batch per shard touched, built in one buffer each.
  std::vector<BatchBuilder> builders;
  std::vector<std::uint32_t> builder_shard;
  std::vector<int> builder_of(n, -1);
  std::vector<NodeId> remote;  // per shard: the leader to forward to; filled only if one is not here
  for (std::uint32_t s = 0; s < n; ++s) {
    if (!count[s]) continue;
    if (!st->shards[s]) {
      NodeId leader{0};
      for (const auto& a : st->assignments)
        if (a.shard.value() == s) leader = a.leader;
      if (leader.value() == 0 || leader == info_.node_id || !transport_)
        return fail(not_led_here(*st, key, s));
      if (remote.empty()) remote.resize(n);
      remote[s] = leader;
    }
    builder_of[s] = static_cast<int>(builders.size());
    builders.emplace_back().reserve(kBatchHeaderSize + bytes[s]);
    builder_shard.push_back(s);
  }
  if (opts.producer_id != 0) {
    // An idempotent send is exactly one batch: its sequence is per (producer, shard).
    if (builders.size() != 1)
      return fail(Error(Errc::invalid_argument,
                        "an idempotent publish (producer_id) must put every record on one shard; "
                        "this request touches " + std::to_string(builders.size()) +
                            " shards (give an explicit shard, or one key)"));
    builders[0].set_producer(opts.producer_id, opts.sequence);
  }
  const std::int64_t now = now_ms();
  std::uint64_t total_bytes = 0;
  for (std::size_t i = 0; i < records.size(); ++i) {
    const auto& r = records[i];
    builders[builder_of[g->shard_of[i]]].add(r.key, r.value, r.headers,
                                             r.timestamp_ms ? r.timestamp_ms : now);
    total_bytes += r.value.size();
  }
  m_publish_records_.fetch_add(records.size(), std::memory_order_relaxed);
  m_publish_bytes_.fetch_add(total_bytes, std::memory_order_relaxed);
  g->cb = std::move(cb);
  g->latency = &m_publish_seconds_[static_cast<std::size_t>(opts.ack) % m_publish_seconds_.size()];
  g->start = start;
  g->remaining.store(static_cast<int>(builders.size()));
  const bool acked_after_write = opts.ack != AckMode::none;
  auto complete = [this, g, acked_after_write](std::uint32_t s, Result<AppendResult> r) {
    if (r) {
      g->base[s] = r->base_offset;
      g->succeeded.fetch_add(1, std::memory_order_relaxed);
      if (r->duplicate) m_publish_duplicates_.fetch_add(1, std::memory_order_relaxed);
    } else {
      std::lock_guard lk(g->mu);
      fwd::keep_most_uncertain(g->error, r.error());
    }
    if (g->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      if (g->error) m_publish_errors_.fetch_add(1, std::memory_order_relaxed);
      else if (acked_after_write && !g->returned.load(std::memory_order_acquire))
        m_publish_inline_.fetch_add(1, std::memory_order_relaxed);
      g->done();
    }
  };
  // docs/architecture.md "Inline appends": one batch to a shard led here may be written
  // and synced on the caller's thread, if the caller allows it.
  const bool may_block = opts.caller_may_block && builders.size() == 1 && remote.empty();
  for (std::size_t b = 0; b < builders.size(); ++b) {
    const std::uint32_t s = builder_shard[b];
    if (remote.empty() || remote[s].value() == 0) {
      auto done = [complete, s](Result<AppendResult> r) { complete(s, std::move(r)); };
      if (may_block)
        st->shards[s]->append_may_block(builders[b].finish(), opts.ack, std::move(done));
      else
        st->shards[s]->append(builders[b].finish(), opts.ack, std::move(done));
      continue;
    }
    // Another broker leads this shard: its batch goes there, in parallel with the others.
    ShardRoute rt;
    rt.leader = remote[s];
    rt.incarnation = st->info.incarnation;
    std::string batch = builders[b].finish();
    std::string payload = shard_header(key, rt, ShardIndex{s}, 1 + batch.size());
    payload.push_back(static_cast<char>(opts.ack));
    payload.append(batch);
    const std::int64_t timeout_ms =
        opts.ack == AckMode::quorum ? quorum_forward_timeout_ms_ : opts_.forward_timeout_ms;
    transport_->request(rt.leader, fwd::kPublish, std::move(payload), std::chrono::milliseconds(timeout_ms),
                        [complete, s](Result<std::string> a) {
                          if (!a) return complete(s, a.error());
                          fwd::Reader rd(*a);
                          AppendResult ar;
                          ar.base_offset = Offset{rd.u64()};
                          ar.count = rd.u32();
                          ar.duplicate = rd.u8() != 0;
                          // The leader answered, so it may have appended: not "nothing written".
                          if (auto c = rd.check("publish answer"); !c)
                            return complete(s, Error(Errc::internal,
                                                     c.error().message + " (the batch may have been appended)",
                                                     Outcome::uncertain));
                          complete(s, ar);
                        });
  }
  g->returned.store(true, std::memory_order_release);
}

Result<FetchResult> BrokerRuntime::fetch(const StreamKey& key, ShardIndex shard, Offset from,
                                         std::uint32_t max_records, std::size_t max_bytes) {
  m_fetch_requests_.fetch_add(1, std::memory_order_relaxed);
  auto rt = route(key, shard);
  if (!rt) {
    m_fetch_errors_.fetch_add(1, std::memory_order_relaxed);
    return rt.error();
  }
  auto r = rt->log ? rt->log->read(from, max_records, max_bytes)
                   : forward_fetch(key, shard, *rt, from, max_records, max_bytes);
  if (!r) m_fetch_errors_.fetch_add(1, std::memory_order_relaxed);
  return r;
}

Result<ShardStats> BrokerRuntime::shard_stats(const StreamKey& key, ShardIndex shard) {
  auto rt = route(key, shard);
  if (!rt) return rt.error();
  if (rt->log) return rt->log->stats();
  auto a = forward_read(rt->leader, fwd::kStats, shard_header(key, *rt, shard), opts_.forward_timeout_ms);
  if (!a) return a.error();
  return fwd::decode_stats(*a);
}

Result<std::uint64_t> BrokerRuntime::notify_when_beyond(const StreamKey& key, ShardIndex shard,
                                                        Offset offset, std::function<void()> cb) {
  auto rt = route(key, shard);
  if (!rt) return rt.error();
  if (rt->log) return rt->log->notify_when_beyond(offset, std::move(cb));
  // The leader holds the wait (up to forward_wait_hold_ms, then "nothing new" and we ask
  // again); `cb` runs when it answers "fired" or fails (the caller's next read then sees
  // the error).
  auto w = std::make_shared<ForwardedWait>();
  w->leader = rt->leader;
  w->request = shard_header(key, *rt, shard, 12);
  w->cb = std::move(cb);
  std::uint64_t id;
  {
    std::lock_guard lk(waits_mu_);
    id = next_wait_++;
    waits_[id] = w;
  }
  fwd::Writer tail(20);
  tail.u64(offset.value()).u32(static_cast<std::uint32_t>(opts_.forward_wait_hold_ms)).u64(id);
  w->request += tail.take();
  arm_forwarded_wait(id, std::move(w));
  return id;
}

void BrokerRuntime::cancel_notify(const StreamKey& key, ShardIndex shard, std::uint64_t handle) {
  if (handle == 0) return;
  if (handle >= (1ull << 62)) {
    std::shared_ptr<ForwardedWait> w;
    {
      std::lock_guard lk(waits_mu_);
      auto it = waits_.find(handle);
      if (it == waits_.end()) return;
      w = std::move(it->second);
      waits_.erase(it);
    }
    std::function<void()> dropped;
    {
      std::lock_guard lk(w->mu);
      dropped.swap(w->cb);
    }
    // The leader drops its hold at once (its answer to the wait then finds no callback).
    fwd::Writer cancel(8);
    cancel.u64(handle);
    transport_->request(w->leader, fwd::kCancelWait, cancel.take(),
                        std::chrono::milliseconds(opts_.forward_timeout_ms), [](Result<std::string>) {});
    return;
  }
  // The shard may have closed (its waiters then fired) or been recreated: a handle of
  // another ShardLog object is unknown to it and ignored.
  if (auto log = find_shard(key, shard); log) log.value()->cancel_notify(handle);
}

namespace {
Result<void> check_group(const std::string& group) { return validate_name(NameKind::group, group); }
}  // namespace

Result<GroupDelivery> BrokerRuntime::group_fetch(const StreamKey& key, ShardIndex shard,
                                                 const std::string& group, std::uint32_t max_records,
                                                 const GroupOptions& opts, std::optional<Incarnation> incarnation) {
  if (auto v = check_group(group); !v) return v.error();
  auto rt = route(key, shard, incarnation);
  if (!rt) return rt.error();
  if (rt->log) return rt->log->group_fetch(group, max_records, opts);
  fwd::Writer w;
  w.bytes(shard_header(key, *rt, shard)).str(group).u32(max_records).u32(opts.max_deliveries).i64(opts.ack_timeout_ms);
  // Group calls on a replicated shard wait for a quorum commit on the leader: the forwarder
  // waits as long as a forwarded ack=quorum publish does, or it would answer `timeout`
  // (uncertain) where the leader's answer is definite (review finding).
  std::string req = w.take();
  auto a = forward(rt->leader, fwd::kGroupFetchMore, req, quorum_forward_timeout_ms_);
  if (!a && a.error().code == Errc::not_supported) {
    // A leader on an older build (a rolling upgrade) knows only kGroupFetch, whose answer
    // does not say whether the fetch stopped at a bound. A delivery with records may have
    // stopped at one: say `more`, and the caller's next fetch finds out (an empty answer is
    // never `more` here, so nothing spins).
    a = forward(rt->leader, fwd::kGroupFetch, std::move(req), quorum_forward_timeout_ms_);
    if (!a) return a.error();
    auto d = fwd::decode_delivery(*a, false);
    if (d) d->more = !d->records.empty();
    return d;
  }
  if (!a) return a.error();
  return fwd::decode_delivery(*a, true);
}

Result<void> BrokerRuntime::group_ack(const StreamKey& key, ShardIndex shard, const std::string& group,
                                      const std::vector<Offset>& offsets, std::optional<Incarnation> incarnation) {
  if (auto v = check_group(group); !v) return v.error();
  auto rt = route(key, shard, incarnation);
  if (!rt) return rt.error();
  if (rt->log) return rt->log->group_ack(group, offsets);
  fwd::Writer w;
  w.bytes(shard_header(key, *rt, shard)).str(group).bytes(fwd::encode_offsets(offsets));
  auto a = forward(rt->leader, fwd::kGroupAck, w.take(), quorum_forward_timeout_ms_);
  if (!a) return a.error();
  return {};
}

Result<void> BrokerRuntime::group_nack(const StreamKey& key, ShardIndex shard, const std::string& group,
                                       const std::vector<Offset>& offsets, std::optional<Incarnation> incarnation) {
  if (auto v = check_group(group); !v) return v.error();
  auto rt = route(key, shard, incarnation);
  if (!rt) return rt.error();
  if (rt->log) return rt->log->group_nack(group, offsets);
  fwd::Writer w;
  w.bytes(shard_header(key, *rt, shard)).str(group).bytes(fwd::encode_offsets(offsets));
  auto a = forward(rt->leader, fwd::kGroupNack, w.take(), quorum_forward_timeout_ms_);
  if (!a) return a.error();
  return {};
}

Result<std::vector<GroupPosition>> BrokerRuntime::group_positions(const StreamKey& key,
                                                                  const std::string& group) {
  if (auto v = check_group(group); !v) return v.error();
  if (auto v = validate_stream_key(key); !v) return v.error();
  if (!storage_) return no_broker_role();
  auto st = find(key);
  if (!st) return no_stream(key);
  if (!st->refused.empty()) return Error(Errc::conflict, st->refused);
  std::vector<GroupPosition> out;
  for (std::uint32_t i = 0; i < st->shards.size(); ++i) {
    // A shard another broker leads: ask it (one forwarded call per such shard).
    auto rt = route_in(*st, key, ShardIndex{i});  // every shard of the one incarnation listed
    if (!rt) return rt.error();
    Result<GroupPosition> p = Error(Errc::internal, "unset");
    if (rt->log) {
      p = rt->log->group_position(group);
    } else {
      fwd::Writer w;
      w.bytes(shard_header(key, *rt, ShardIndex{i})).str(group);
      auto a = forward_read(rt->leader, fwd::kGroupPosition, w.take(), opts_.forward_timeout_ms);
      p = a ? fwd::decode_position(*a, group) : Result<GroupPosition>(a.error());
    }
    if (!p && p.error().code == Errc::not_found) {
      // A group that never consumed this shard incarnation is at the start, with nothing
      // outstanding and no dead letters (a recreated stream's groups start empty).
      GroupPosition empty;
      empty.group = group;
      out.push_back(empty);
      continue;
    }
    if (!p) return p.error();
    out.push_back(std::move(p.value()));
  }
  return out;
}

Result<std::vector<std::string>> BrokerRuntime::groups(const StreamKey& key) {
  if (auto v = validate_stream_key(key); !v) return v.error();
  if (!storage_) return no_broker_role();
  auto st = find(key);
  if (!st) return no_stream(key);
  if (!st->refused.empty()) return Error(Errc::conflict, st->refused);
  std::set<std::string> all;
  for (std::uint32_t i = 0; i < st->shards.size(); ++i) {
    auto rt = route_in(*st, key, ShardIndex{i});  // every shard of the one incarnation listed
    if (!rt) return rt.error();
    Result<std::vector<std::string>> g = std::vector<std::string>{};
    if (rt->log) {
      g = rt->log->list_groups();
    } else {
      auto a = forward_read(rt->leader, fwd::kGroupList, shard_header(key, *rt, ShardIndex{i}), opts_.forward_timeout_ms);
      g = a ? fwd::decode_names(*a) : Result<std::vector<std::string>>(a.error());
    }
    if (!g) return g.error();
    all.insert(g->begin(), g->end());
  }
  return std::vector<std::string>(all.begin(), all.end());
}

Result<FetchResult> BrokerRuntime::dead_letters(const StreamKey& key, ShardIndex shard,
                                                const std::string& group, Offset from,
                                                std::uint32_t max_records, std::size_t max_bytes) {
  if (auto v = check_group(group); !v) return v.error();
  auto rt = route(key, shard);
  if (!rt) return rt.error();
  Result<FetchResult> r = FetchResult{};
  if (rt->log) {
    r = rt->log->dead_letters(group, from, max_records, max_bytes);
  } else {
    fwd::Writer w;
    w.bytes(shard_header(key, *rt, shard)).str(group).u64(from.value()).u32(max_records).u64(max_bytes);
    auto a = forward_read(rt->leader, fwd::kDeadLetters, w.take(), opts_.forward_timeout_ms);
    r = a ? fwd::decode_fetch_result(*a) : Result<FetchResult>(a.error());
  }
  if (!r && r.error().code == Errc::not_found) return FetchResult{};  // no such group: none
  return r;
}

Result<std::uint64_t> BrokerRuntime::replay_dead_letters(const StreamKey& key, ShardIndex shard,
                                                         const std::string& group, Offset from, Offset to,
                                                         std::optional<Incarnation> incarnation) {
  if (auto v = check_group(group); !v) return v.error();
  auto rt = route(key, shard, incarnation);  // and forwarded with it: pinned to the shard
  if (!rt) return rt.error();
  if (rt->log) return rt->log->replay_dead_letters(group, from, to);
  fwd::Writer w;
  w.bytes(shard_header(key, *rt, shard)).str(group).u64(from.value()).u64(to.value());
  auto a = forward(rt->leader, fwd::kReplay, w.take(), quorum_forward_timeout_ms_);
  if (!a) return a.error();
  fwd::Reader rd(*a);
  const std::uint64_t n = rd.u64();
  if (auto c = rd.check("replay answer"); !c)
    return Error(Errc::internal, c.error().message + " (the records may have been replayed)", Outcome::uncertain);
  return n;
}

}  // namespace sluice::core
