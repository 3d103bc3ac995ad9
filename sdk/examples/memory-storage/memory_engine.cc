// memory-storage's engine (memory_engine.h): every shard's batches in memory.
#include "memory_engine.h"

#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "sluice/record_batch.h"

namespace memory_storage {
namespace {

using namespace sluice;

// What this engine leaves out says so with not_supported (501, definite): it is not a
// passing condition that waiting could cure, which `unavailable` (503) would claim.
Error no_groups() {
  return Error(Errc::not_supported, "memory-storage does not implement consumer groups",
               Outcome::definite);
}

class MemoryShard final : public ShardLog {
 public:
  explicit MemoryShard(ShardRef ref) : ref_(std::move(ref)) {}
  const ShardRef& ref() const override { return ref_; }

  void append(std::string batch, AckMode, AppendCallback cb) override {
    BatchHeader h;
    if (check_batch(batch.data(), batch.size(), &h) != BatchCheck::ok || h.length != batch.size())
      return cb(Error(Errc::malformed_body, "not one well-formed record batch"));
    std::map<std::uint64_t, std::function<void()>> wake;
    AppendResult res;
    {
      std::lock_guard lk(mu_);
      if (closed_) return cb(Error(Errc::unavailable, "shard " + ref_.to_string() + " is closed"));
      Producer* p = nullptr;
      if (h.producer_id != 0) {
        // Idempotent producers (storage.h): decided under the shard's lock, against state
        // that belongs to this shard incarnation. An append here is complete when it
        // returns, so a retry never finds its original still in flight.
        p = &producers_[h.producer_id];
        if (h.producer_seq != p->next_seq) {
          for (const auto& r : p->recent)
            if (r.seq == h.producer_seq) {
              AppendResult dup{Offset{r.base}, r.count, true};
              return cb(dup);  // the original offsets; nothing written
            }
          return cb(Error(Errc::sequence_gap, "producer " + std::to_string(h.producer_id) + " on shard " +
                                                  ref_.to_string() + ": sequence " +
                                                  std::to_string(h.producer_seq) + " is not the next one; expected " +
                                                  std::to_string(p->next_seq),
                          Outcome::definite));
        }
      }
      restamp_batch(batch.data(), next_, ref_.incarnation.value());
      res = {Offset{next_}, h.record_count};
      if (p) {
        p->recent.push_back({h.producer_seq, next_, h.record_count});
        if (p->recent.size() > kProducerWindow) p->recent.pop_front();
        p->next_seq = h.producer_seq + 1;
      }
      next_ += h.record_count;
      batches_.push_back(std::move(batch));
      wake.swap(waiters_);
    }
    for (auto& [h, w] : wake) w();
    cb(res);
  }

  Result<FetchResult> read(Offset from, std::uint32_t max_records, std::size_t max_bytes) override {
    std::lock_guard lk(mu_);
    if (from.value() > next_)
      return Error(Errc::invalid_argument, "offset " + std::to_string(from.value()) +
                                               " is beyond the end " + std::to_string(next_));
    FetchResult out;
    out.high_watermark = Offset{next_};
    out.log_start = Offset{0};
    out.next_offset = from;
    std::size_t bytes = 0;
    std::uint32_t records = 0;
    for (const auto& b : batches_) {
      const auto h = BatchHeader::decode(b.data());
      if (h.next_offset() <= from.value()) continue;
      if (!out.batches.empty() && (bytes + b.size() > max_bytes || records >= max_records)) break;
      out.batches.push_back(b);
      bytes += b.size();
      records += h.record_count;
      out.next_offset = Offset{h.next_offset()};
    }
    return out;
  }

  std::uint64_t notify_when_beyond(Offset offset, std::function<void()> cb) override {
    {
      std::lock_guard lk(mu_);
      if (next_ <= offset.value() && !closed_) {
        const std::uint64_t h = ++last_handle_;
        waiters_.emplace(h, std::move(cb));
        return h;
      }
    }
    cb();
    return 0;
  }

  void cancel_notify(std::uint64_t handle) override {
    std::function<void()> dropped;  // destroyed outside the lock
    std::lock_guard lk(mu_);
    if (auto it = waiters_.find(handle); it != waiters_.end()) {
      dropped = std::move(it->second);
      waiters_.erase(it);
    }
  }

  // Consumer groups are optional for a minimal engine: say so with a stable code.
  Result<GroupDelivery> group_fetch(const std::string&, std::uint32_t, const GroupOptions&) override {
    return no_groups();
  }
  Result<void> group_ack(const std::string&, const std::vector<Offset>&) override { return no_groups(); }
  Result<void> group_nack(const std::string&, const std::vector<Offset>&) override { return no_groups(); }
  Result<GroupPosition> group_position(const std::string&) override { return no_groups(); }
  Result<std::vector<std::string>> list_groups() override { return std::vector<std::string>{}; }
  Result<FetchResult> dead_letters(const std::string&, Offset, std::uint32_t, std::size_t) override {
    return no_groups();
  }
  Result<std::uint64_t> replay_dead_letters(const std::string&, Offset, Offset) override {
    return no_groups();
  }

  ShardStats stats() override {
    std::lock_guard lk(mu_);
    ShardStats s;
    s.high_watermark = Offset{next_};
    for (auto& b : batches_) s.size_bytes += b.size();
    s.segments = 1;
    return s;
  }

  void reopen() {
    std::lock_guard lk(mu_);
    closed_ = false;
  }

  void close() {
    std::map<std::uint64_t, std::function<void()>> wake;
    {
      std::lock_guard lk(mu_);
      closed_ = true;
      wake.swap(waiters_);
    }
    for (auto& [h, w] : wake) w();
  }

 private:
  // Per producer id: the next sequence, and the last kProducerWindow batches it appended
  // (a retry of one of them is a duplicate with its original offsets).
  static constexpr std::size_t kProducerWindow = 5;
  struct Producer {
    struct Recent {
      std::uint64_t seq, base;
      std::uint32_t count;
    };
    std::uint64_t next_seq = 0;
    std::deque<Recent> recent;  // oldest first
  };

  ShardRef ref_;
  std::mutex mu_;
  std::uint64_t next_ = 0;
  std::vector<std::string> batches_;
  std::map<std::uint64_t, Producer> producers_;  // this incarnation's (a new one starts empty)
  std::map<std::uint64_t, std::function<void()>> waiters_;
  std::uint64_t last_handle_ = 0;
  bool closed_ = false;
};

class MemoryEngine final : public StorageEngine {
 public:
  explicit MemoryEngine(PluginHost& host) : host_(host) {
    host_.log(LogLevel::warn, "memory-storage", "records live in memory only and are lost on restart");
  }
  Result<std::shared_ptr<ShardLog>> open_shard(const ShardRef& ref, const StreamSpec&) override {
    std::lock_guard lk(mu_);
    auto& s = shards_[ref];
    if (!s) s = std::make_shared<MemoryShard>(ref);
    s->reopen();
    return std::shared_ptr<ShardLog>(s);
  }
  void close_shard(const ShardRef& ref) override {
    std::shared_ptr<MemoryShard> s;
    {
      std::lock_guard lk(mu_);
      auto it = shards_.find(ref);
      if (it == shards_.end()) return;
      s = it->second;  // the data stays (like a disk would) until the process exits
    }
    s->close();
  }
  void shutdown() override {
    std::lock_guard lk(mu_);
    for (auto& [r, s] : shards_) s->close();
  }

  Result<std::uint32_t> delete_incarnations(const StreamKey& stream, Incarnation up_to) override {
    std::lock_guard lk(mu_);
    std::uint32_t n = 0;
    for (auto it = shards_.begin(); it != shards_.end();) {
      if (it->first.stream == stream && it->first.incarnation <= up_to) {
        it->second->close();
        it = shards_.erase(it);
        ++n;
      } else {
        ++it;
      }
    }
    return n;
  }

  Result<std::vector<ShardRef>> list_on_disk() override {
    std::lock_guard lk(mu_);
    std::vector<ShardRef> out;
    for (auto& [r, s] : shards_) out.push_back(r);
    return out;
  }

 private:
  PluginHost& host_;
  std::mutex mu_;
  std::map<ShardRef, std::shared_ptr<MemoryShard>> shards_;
};

}  // namespace

std::unique_ptr<sluice::StorageEngine> make_memory_engine(sluice::PluginHost& host) {
  return std::make_unique<MemoryEngine>(host);
}

}  // namespace memory_storage
