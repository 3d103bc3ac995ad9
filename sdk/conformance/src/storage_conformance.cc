// The fixture of the storage conformance kit and the helpers its tests share.
#include "sluice/testing/storage_conformance.h"

#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <future>
#include <iostream>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "conformance_util.h"

namespace sluice::testing {

// The PluginHost the kit hands to `open`: configuration from params.config, data_dir() =
// the test's directory, logs to stderr.
class StorageConformance::Host final : public PluginHost {
 public:
  Host(std::map<std::string, std::string> config, std::string dir)
      : config_(std::move(config)), dir_(std::move(dir)) {}
  std::string config_string(std::string_view key, std::string_view def) const override {
    auto it = config_.find(std::string(key));
    return it == config_.end() ? std::string(def) : it->second;
  }
  std::int64_t config_int(std::string_view key, std::int64_t def) const override {
    auto it = config_.find(std::string(key));
    return it == config_.end() ? def : std::stoll(it->second);
  }
  bool config_bool(std::string_view key, bool def) const override {
    auto it = config_.find(std::string(key));
    return it == config_.end() ? def : (it->second == "true" || it->second == "1");
  }
  bool config_has(std::string_view key) const override { return config_.count(std::string(key)) > 0; }
  NodeId node_id() const override { return NodeId{1}; }
  std::string directory_id() const override { return "00000000-0000-4000-8000-000000000001"; }
  std::string data_dir() const override { return dir_; }
  Result<void> adopt_cluster_id(const std::string& id) override {
    std::lock_guard lk(mu_);
    if (!cluster_id_.empty() && cluster_id_ != id)
      return Error(Errc::cluster_id_mismatch, "have " + cluster_id_ + ", offered " + id);
    cluster_id_ = id;
    return {};
  }
  std::string cluster_id() const override {
    std::lock_guard lk(mu_);
    return cluster_id_;
  }
  void log(LogLevel level, std::string_view component, std::string_view message) override {
    static constexpr const char* kLevels[] = {"DEBUG", "INFO", "WARN", "ERROR"};
    std::lock_guard lk(mu_);
    std::cerr << kLevels[static_cast<int>(level)] << ' ' << component << ": " << message << '\n';
  }

 private:
  const std::map<std::string, std::string> config_;
  const std::string dir_;
  mutable std::mutex mu_;
  std::string cluster_id_;
};

void PrintTo(const StorageConformanceParams& p, std::ostream* os) {
  *os << (p.name.empty() ? "engine" : p.name);
  const auto& o = p.opt_outs;
  if (o.no_restart_persistence) *os << " no_restart_persistence";
  if (o.no_groups) *os << " no_groups";
  if (o.no_dead_letters) *os << " no_dead_letters";
  if (o.no_idempotent_producers) *os << " no_idempotent_producers";
  if (!p.crash) *os << " (no crash hook)";
  if (!p.fail_io) *os << " (no fail_io hook)";
}

StorageConformance::StorageConformance() = default;
StorageConformance::~StorageConformance() = default;

void StorageConformance::SetUp() {
  ASSERT_TRUE(params().open) << "StorageConformanceParams::open is required";
  std::string tmpl =
      (std::filesystem::temp_directory_path() / "sluice-conformance-XXXXXX").string();
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr) << "mkdtemp failed";
  dir_ = tmpl;
  host_ = std::make_unique<Host>(params().config, dir_);
  engine_ = params().open(*host_, dir_);
  ASSERT_NE(engine_, nullptr) << "open returned no engine";
}

void StorageConformance::TearDown() {
  if (engine_) {
    engine_->shutdown();
    engine_.reset();
  }
  host_.reset();
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

void StorageConformance::restart() {
  engine_->shutdown();
  engine_.reset();
  engine_ = params().open(*host_, dir_);
  ASSERT_NE(engine_, nullptr) << "open returned no engine";
}

void StorageConformance::crash_and_restart() {
  params().crash(dir_);
  engine_->shutdown();
  engine_.reset();
  engine_ = params().open(*host_, dir_);
  ASSERT_NE(engine_, nullptr) << "open returned no engine";
}

std::shared_ptr<ShardLog> StorageConformance::open(const ShardRef& ref) {
  auto r = engine_->open_shard(ref, StreamSpec{});
  if (!r) {
    ADD_FAILURE() << "open_shard(" << ref.to_string() << "): " << r.error().to_string();
    return nullptr;
  }
  return *r;
}

namespace conformance_internal {

extern int log_tests_anchor;
extern int durability_tests_anchor;
extern int group_tests_anchor;

int link_all_tests() { return log_tests_anchor + durability_tests_anchor + group_tests_anchor; }

ShardRef shard_ref(std::uint32_t shard, std::uint64_t inc, const std::string& stream) {
  return ShardRef{StreamKey{"acme", "orders", stream}, ShardIndex(shard), Incarnation(inc)};
}

std::string make_batch(const std::string& tag, std::uint32_t records, std::uint64_t producer_id,
                       std::uint64_t seq) {
  BatchBuilder b;
  for (std::uint32_t i = 0; i < records; ++i)
    b.add("k" + std::to_string(i), tag + "#" + std::to_string(i), {}, 1000 + i);
  if (producer_id != 0) b.set_producer(producer_id, seq);
  return b.finish();
}

std::vector<std::string> values_of(const std::string& batch) {
  std::vector<std::string> out;
  BatchReader r(batch.data(), batch.size());
  RecordView rv;
  while (r.next(rv)) out.emplace_back(rv.value);
  return out;
}

Result<AppendResult> append_wait(ShardLog& shard, std::string batch, AckMode ack) {
  struct State {
    std::promise<Result<AppendResult>> p;
    std::atomic<int> calls{0};
  };
  auto st = std::make_shared<State>();
  auto f = st->p.get_future();
  shard.append(std::move(batch), ack, [st](Result<AppendResult> r) {
    if (st->calls.fetch_add(1) != 0) {
      ADD_FAILURE() << "append callback called more than once";
      return;
    }
    st->p.set_value(std::move(r));
  });
  if (f.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    ADD_FAILURE() << "append callback did not run within 60 s";
    return Error(Errc::timeout, "conformance: append callback did not run");
  }
  return f.get();
}

bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return pred();
}

std::map<std::uint64_t, std::string> read_all(ShardLog& shard, std::uint64_t from) {
  std::map<std::uint64_t, std::string> out;
  for (int guard = 0; guard < 100000; ++guard) {
    auto r = shard.read(Offset(from), 1000, 1 << 20);
    if (!r) {
      ADD_FAILURE() << "read(" << from << ") of " << shard.ref().to_string() << ": "
                    << r.error().to_string();
      return out;
    }
    for (auto& b : r->batches) {
      BatchHeader h;
      if (check_batch(b.data(), b.size(), &h) != BatchCheck::ok || h.length != b.size()) {
        ADD_FAILURE() << "read(" << from << ") returned a batch that fails check_batch";
        return out;
      }
      if (h.incarnation != shard.ref().incarnation.value())
        ADD_FAILURE() << "batch at " << h.base_offset << " carries incarnation " << h.incarnation
                      << ", the shard is " << shard.ref().to_string();
      BatchReader reader(b.data(), b.size());
      RecordView rv;
      while (reader.next(rv))
        if (rv.offset >= from) out[rv.offset] = std::string(rv.value);
    }
    if (r->batches.empty()) return out;
    if (r->next_offset.value() <= from) {
      ADD_FAILURE() << "read(" << from << ") returned batches but next_offset "
                    << r->next_offset.value() << " does not advance";
      return out;
    }
    from = r->next_offset.value();
  }
  ADD_FAILURE() << "read_all did not reach the high watermark";
  return out;
}

std::string header_of(const std::string& batch, std::uint64_t offset, std::string_view name) {
  BatchReader reader(batch.data(), batch.size());
  RecordView rv;
  while (reader.next(rv)) {
    if (rv.offset != offset) continue;
    std::vector<Header> hs;
    if (!decode_headers(rv.headers, hs)) return "";
    for (auto& h : hs)
      if (h.name == name) return std::string(h.value);
  }
  return "";
}

}  // namespace conformance_internal
}  // namespace sluice::testing
