#include "forwarding.h"

#include <cstdio>

#include <pthread.h>

namespace sluice::core::fwd {

namespace {
void put_batches(Writer& w, const std::vector<std::string>& batches) {
  w.u32(static_cast<std::uint32_t>(batches.size()));
  for (const auto& b : batches) w.str(b);
}
std::vector<std::string> get_batches(Reader& r) {
  const std::uint32_t n = r.u32();
  std::vector<std::string> out;
  for (std::uint32_t i = 0; i < n && !r.bad(); ++i) out.push_back(r.str());
  return out;
}
std::size_t batch_bytes(const std::vector<std::string>& batches) {
  std::size_t n = 0;
  for (const auto& b : batches) n += 4 + b.size();
  return n;
}
}  // namespace

std::string encode_fetch_result(const FetchResult& f) {
  Writer w(32 + batch_bytes(f.batches));
  w.u64(f.next_offset.value()).u64(f.high_watermark.value()).u64(f.log_start.value());
  put_batches(w, f.batches);
  return w.take();
}

Result<FetchResult> decode_fetch_result(std::string_view payload) {
  Reader r(payload);
  FetchResult f;
  f.next_offset = Offset{r.u64()};
  f.high_watermark = Offset{r.u64()};
  f.log_start = Offset{r.u64()};
  f.batches = get_batches(r);
  if (auto c = r.check("fetch answer"); !c) return c.error();
  return f;
}

std::string encode_stats(const ShardStats& s) {
  Writer w(80);
  w.u64(s.log_start.value()).u64(s.high_watermark.value()).u64(s.log_end.value());
  w.u64(s.leader_epoch.value()).u8(s.leading ? 1 : 0);
  w.u64(s.size_bytes).u64(s.segments).u64(s.appended_records).u64(s.syncs);
  return w.take();
}

void keep_most_uncertain(std::optional<Error>& kept, const Error& e) {
  auto rank = [](Outcome o) { return o == Outcome::uncertain ? 2 : o == Outcome::transient ? 1 : 0; };
  if (!kept || rank(e.outcome) > rank(kept->outcome)) kept = e;
}

Result<ShardStats> decode_stats(std::string_view payload) {
  Reader r(payload);
  ShardStats s;
  s.log_start = Offset{r.u64()};
  s.high_watermark = Offset{r.u64()};
  s.log_end = Offset{r.u64()};
  s.leader_epoch = LeaderEpoch{r.u64()};
  s.leading = r.u8() != 0;
  s.size_bytes = r.u64();
  s.segments = r.u64();
  s.appended_records = r.u64();
  s.syncs = r.u64();
  if (auto c = r.check("shard stats answer"); !c) return c.error();
  return s;
}

std::string encode_delivery(const GroupDelivery& d, bool with_more) {
  Writer w(9 + batch_bytes(d.batches) + 12 * d.records.size());
  put_batches(w, d.batches);
  w.u32(static_cast<std::uint32_t>(d.records.size()));
  for (const auto& it : d.records) w.u64(it.offset.value()).u32(it.delivery);
  if (with_more) w.u8(d.more ? 1 : 0);
  return w.take();
}

Result<GroupDelivery> decode_delivery(std::string_view payload, bool with_more) {
  Reader r(payload);
  GroupDelivery d;
  d.batches = get_batches(r);
  const std::uint32_t n = r.u32();
  for (std::uint32_t i = 0; i < n && !r.bad(); ++i) {
    GroupDelivery::Item it;
    it.offset = Offset{r.u64()};
    it.delivery = r.u32();
    d.records.push_back(it);
  }
  if (with_more) d.more = r.u8() != 0;
  if (auto c = r.check("group fetch answer"); !c) return c.error();
  return d;
}

std::string encode_position(const GroupPosition& p) {
  Writer w(32);
  w.u64(p.committed.value()).u64(p.outstanding).u64(p.dead_letter_start.value()).u64(p.dead_letter_end.value());
  return w.take();
}

Result<GroupPosition> decode_position(std::string_view payload, const std::string& group) {
  Reader r(payload);
  GroupPosition p;
  p.group = group;
  p.committed = Offset{r.u64()};
  p.outstanding = r.u64();
  p.dead_letter_start = Offset{r.u64()};
  p.dead_letter_end = Offset{r.u64()};
  if (auto c = r.check("group position answer"); !c) return c.error();
  return p;
}

std::string encode_names(const std::vector<std::string>& names) {
  Writer w;
  w.u32(static_cast<std::uint32_t>(names.size()));
  for (const auto& n : names) w.str(n);
  return w.take();
}

Result<std::vector<std::string>> decode_names(std::string_view payload) {
  Reader r(payload);
  auto out = get_batches(r);
  if (auto c = r.check("group list answer"); !c) return c.error();
  return out;
}

std::string encode_offsets(const std::vector<Offset>& offsets) {
  Writer w(4 + 8 * offsets.size());
  w.u32(static_cast<std::uint32_t>(offsets.size()));
  for (auto o : offsets) w.u64(o.value());
  return w.take();
}

std::vector<Offset> decode_offsets(Reader& r) {
  const std::uint32_t n = r.u32();
  std::vector<Offset> out;
  for (std::uint32_t i = 0; i < n && !r.bad(); ++i) out.push_back(Offset{r.u64()});
  return out;
}

Timers::Timers() : thread_([this] { loop(); }) {}

Timers::~Timers() {
  decltype(q_) pending;
  {
    std::lock_guard lk(mu_);
    stop_ = true;
    pending.swap(q_);
    when_.clear();
  }
  cv_.notify_all();
  thread_.join();
  // `pending` is destroyed here, outside the lock (a dropped responder answers unavailable).
}

std::uint64_t Timers::after(std::chrono::milliseconds d, std::function<void()> fn) {
  const auto at = std::chrono::steady_clock::now() + d;
  std::uint64_t id;
  {
    std::lock_guard lk(mu_);
    if (stop_) return 0;
    id = next_++;
    q_.emplace(at, std::make_pair(id, std::move(fn)));
    when_[id] = at;
  }
  cv_.notify_all();
  return id;
}

void Timers::cancel(std::uint64_t id) {
  std::function<void()> dropped;  // destroyed outside the lock
  std::lock_guard lk(mu_);
  auto w = when_.find(id);
  if (w == when_.end()) return;
  for (auto [it, end] = q_.equal_range(w->second); it != end; ++it)
    if (it->second.first == id) {
      dropped = std::move(it->second.second);
      q_.erase(it);
      break;
    }
  when_.erase(w);
}

namespace {
// A task that throws must not take the broker down with it (std::terminate from a thread):
// it is reported on stderr (the journal) and the thread goes on with the next one.
void run_guarded(const std::function<void()>& fn, const char* what) {
  try {
    fn();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluiced: a %s threw: %s\n", what, e.what());
  } catch (...) {
    std::fprintf(stderr, "sluiced: a %s threw\n", what);
  }
}
}  // namespace

void Timers::loop() {
  std::unique_lock lk(mu_);
  while (!stop_) {
    if (q_.empty()) {
      cv_.wait(lk);
      continue;
    }
    const auto at = q_.begin()->first;
    if (std::chrono::steady_clock::now() < at) {
      cv_.wait_until(lk, at);
      continue;
    }
    auto fn = std::move(q_.begin()->second.second);
    when_.erase(q_.begin()->second.first);
    q_.erase(q_.begin());
    lk.unlock();
    run_guarded(fn, "forwarding timer");
    fn = nullptr;
    lk.lock();
  }
}

Workers::Workers(int n, std::size_t max_queued, std::chrono::milliseconds max_wait, Clock clock)
    : max_queued_(max_queued),
      max_wait_(max_wait),
      clock_(clock ? std::move(clock) : Clock([] { return std::chrono::steady_clock::now(); })) {
  for (int i = 0; i < n; ++i)
    threads_.emplace_back([this] {
      pthread_setname_np(pthread_self(), "fwd-worker");
      std::unique_lock lk(mu_);
      for (;;) {
        cv_.wait(lk, [&] { return stop_ || !q_.empty(); });
        if (q_.empty()) return;
        Item item = std::move(q_.front());
        q_.pop_front();
        const bool expired = clock_() - item.queued > max_wait_;
        if (expired) ++refused_;
        lk.unlock();
        if (!expired) {
          run_guarded(item.run, "forwarded call");  // its caller times out (uncertain) if it never answered
        } else if (item.refuse) {
          Refuse refuse = std::move(item.refuse);
          run_guarded([&] { refuse(Error(Errc::unavailable,
                                         "the leader is overloaded: this forwarded call waited longer than " +
                                             std::to_string(max_wait_.count()) + " ms to run, and was not run",
                                         Outcome::transient)); },
                      "forwarded call's refusal");
        }
        item = Item{};
        lk.lock();
      }
    });
}

Workers::~Workers() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void Workers::post(Task run, Refuse refuse) {
  bool queued = false;
  {
    std::lock_guard lk(mu_);
    if (q_.size() < max_queued_) {
      q_.push_back(Item{std::move(run), std::move(refuse), clock_()});
      queued = true;
    } else {
      ++refused_;
    }
  }
  if (queued) {
    cv_.notify_one();
    return;
  }
  if (refuse)
    refuse(Error(Errc::unavailable,
                 "the leader is overloaded: " + std::to_string(max_queued_) + " forwarded calls are waiting to run",
                 Outcome::transient));
}

std::uint64_t Workers::refused() const {
  std::lock_guard lk(mu_);
  return refused_;
}

}  // namespace sluice::core::fwd
