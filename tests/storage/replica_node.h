// One replica of a replicated shard for the fs-storage replica tests (replica_log_test.cc,
// replica_log_start_test.cc): its own data directory, fault-injecting file system and
// engine, and the helpers that copy a log the way the replication manager does.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include "layout.h"
#include "storage_test_util.h"

namespace sluice::fs_storage::testing {

inline constexpr std::uint64_t kIncarnation = 7;

inline StreamSpec repl_spec(std::uint32_t rf = 3, std::uint32_t min_insync = 2) {
  StreamSpec s;
  s.replication_factor = rf;
  s.min_insync = min_insync;
  return s;
}

// One replica: its own data directory, fault-injecting file system and engine.
struct Node {
  explicit Node(std::uint64_t incarnation = kIncarnation, StreamSpec spec = repl_spec())
      : ref(test_ref(0, incarnation)), spec(spec) {
    host.set("storage.retention_interval_ms", "0");
    host.set("storage.segment_bytes", "1024");
    host.set("storage.index_interval_bytes", "256");
    // Full checks at open, no recovery-point files: the tests list the log directory.
    host.set("storage.verify_on_start", "all");
    // The tests compare segment files byte for byte, and a preallocated segment ends in
    // zeros; preallocation has its own tests (preallocate_test.cc).
    host.set("storage.preallocate_segments", "false");
    fs = std::make_shared<FaultFileSystem>();
    open();
  }
  void open() {
    engine = std::make_unique<FsStorageEngine>(host, fs);
    auto s = engine->open_shard(ref, spec);
    ASSERT_TRUE(s) << s.error().to_string();
    log = engine->replica(ref);
    ASSERT_TRUE(log);
    ASSERT_EQ(static_cast<ShardLog*>(log.get()), s->get());
  }
  // A new process on the same disk (after a crash() of fs, if the test made one).
  void restart() {
    log.reset();
    engine.reset();
    fs->restart();
    open();
  }
  std::string shard_dir() { return engine->shard_directory(ref).value(); }
  std::string log_dir() { return shard_dir() + "/log"; }

  sluice::testing::TestHost host;
  ShardRef ref;
  StreamSpec spec;
  std::shared_ptr<FaultFileSystem> fs;
  std::unique_ptr<FsStorageEngine> engine;
  std::shared_ptr<ShardLogImpl> log;
};

inline std::string batch(const std::string& tag, std::uint32_t records = 3) {
  return make_batch(tag, records, 1000, 100);  // ~450 bytes: two batches per 1 KiB segment
}

// An append whose callback the test inspects later.
struct Pending {
  std::shared_ptr<std::promise<Result<AppendResult>>> p =
      std::make_shared<std::promise<Result<AppendResult>>>();
  std::shared_future<Result<AppendResult>> f = p->get_future().share();
  bool done() const { return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready; }
  Result<AppendResult> get() const {
    if (f.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
      ADD_FAILURE() << "append callback did not run within 30 s";
      return Error(Errc::timeout, "test timeout");
    }
    return f.get();
  }
};

inline Pending start_append(ShardLog& s, std::string b, AckMode ack) {
  Pending p;
  auto prom = p.p;
  s.append(std::move(b), ack, [prom](Result<AppendResult> r) { prom->set_value(std::move(r)); });
  return p;
}

// Blocks until the durable end of `log` exceeds `offset` (notify_when_end_beyond).
inline void wait_durable_beyond(ShardLogImpl& log, std::uint64_t offset) {
  auto p = std::make_shared<std::promise<void>>();
  auto f = p->get_future();
  log.notify_when_end_beyond(Offset(offset), [p] { p->set_value(); });
  ASSERT_EQ(f.wait_for(std::chrono::seconds(30)), std::future_status::ready)
      << "written end never passed " << offset;
  // The notification comes once the data is written (a leader ships it before its own
  // sync); wait for that sync and what the flusher does after it.
  log.wait_flushed();
  ASSERT_GT(log.durable_end().value(), offset);
}

// Copies from `leader` to `follower` the way the manager does: read_raw at the follower's
// durable end, append_replica, until the follower holds `until` (default: everything).
inline void replicate(ShardLogImpl& leader, ShardLogImpl& follower, std::size_t max_bytes = 700,
                      std::optional<std::uint64_t> until = std::nullopt) {
  for (;;) {
    const std::uint64_t at = follower.durable_end().value();
    if (until && at >= *until) return;
    auto c = leader.read_raw(Offset(at), max_bytes);
    ASSERT_TRUE(c) << c.error().to_string();
    if (c->bytes.empty()) return;
    ASSERT_GT(c->next_offset.value(), at);
    auto r = follower.append_replica(c->bytes, Offset(at), c->last_epoch);
    ASSERT_TRUE(r) << r.error().to_string();
    ASSERT_EQ(follower.durable_end(), c->next_offset);
  }
}

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Every segment file (name -> bytes) of a log directory.
inline std::map<std::string, std::string> segment_files(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (parse_offset_file_name(name, ".log")) out[name] = slurp(e.path().string());
  }
  return out;
}

// Appends `n` batches (ack=leader, so they are durable when this returns).
inline void append_n(ShardLogImpl& log, const std::string& tag, int n) {
  for (int i = 0; i < n; ++i) {
    auto r = append_wait(log, batch(tag + std::to_string(i)), AckMode::leader);
    ASSERT_TRUE(r) << r.error().to_string();
  }
}

}  // namespace sluice::fs_storage::testing
