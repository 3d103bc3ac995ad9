#include "storage_test_util.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "layout.h"

namespace sluice::fs_storage::testing {

void flip_byte(const std::string& path, std::uint64_t pos) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << path;
  f.seekg(static_cast<std::streamoff>(pos));
  char c;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x40);
  f.seekp(static_cast<std::streamoff>(pos));
  f.write(&c, 1);
}

std::string make_batch(const std::string& tag, std::uint32_t records, std::int64_t ts,
                       std::size_t value_pad) {
  BatchBuilder b;
  for (std::uint32_t i = 0; i < records; ++i) {
    std::string v = tag + "#" + std::to_string(i) + std::string(value_pad, 'x');
    b.add(std::nullopt, v, {}, ts);
  }
  return b.finish();
}

std::vector<std::string> batch_values(const std::string& batch) {
  std::vector<std::string> out;
  BatchReader r(batch.data(), batch.size());
  RecordView rv;
  while (r.next(rv)) out.emplace_back(rv.value);
  return out;
}

void append_then_power_cut(ShardLog& shard, FaultFileSystem& fs, std::vector<std::string> batches,
                           AckedRecords& acked, std::uint64_t seed, CrashOptions opt) {
  fs.block_syncs();
  auto done = std::make_shared<std::atomic<std::size_t>>(0);
  const std::size_t n = batches.size();
  for (auto& b : batches) {
    auto vals = batch_values(b);
    shard.append(std::move(b), AckMode::leader, [&acked, done, vals](Result<AppendResult> r) {
      if (r) {
        std::lock_guard lk(acked.mu);
        for (std::size_t k = 0; k < vals.size(); ++k) acked.by_offset[r->base_offset.value() + k] = vals[k];
      }
      ++*done;
    });
  }
  ASSERT_TRUE(eventually([&] { return fs.blocked_sync_waiters() >= 1; }));
  fs.crash(seed, opt);
  fs.unblock_syncs();
  ASSERT_TRUE(eventually([&] { return done->load() == n; }));
}

ShardRef test_ref(std::uint32_t shard, std::uint64_t incarnation) {
  return ShardRef{StreamKey{"acme", "orders", "events"}, ShardIndex(shard), Incarnation(incarnation)};
}

Result<AppendResult> append_wait(ShardLog& shard, std::string batch, AckMode ack) {
  auto p = std::make_shared<std::promise<Result<AppendResult>>>();
  auto f = p->get_future();
  shard.append(std::move(batch), ack, [p](Result<AppendResult> r) { p->set_value(std::move(r)); });
  if (f.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    ADD_FAILURE() << "append callback did not run within 30 s";
    return Error(Errc::timeout, "test timeout");
  }
  return f.get();
}

bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return pred();
}

std::map<std::uint64_t, std::string> read_all(ShardLog& shard, std::uint64_t from) {
  std::map<std::uint64_t, std::string> out;
  for (;;) {
    auto r = shard.read(Offset(from), 1000, 1 << 20);
    if (!r) {
      ADD_FAILURE() << "read(" << from << ") failed: " << r.error().to_string();
      return out;
    }
    for (auto& b : r->batches) {
      BatchReader reader(b.data(), b.size());
      RecordView rv;
      while (reader.next(rv))
        if (rv.offset >= from) out[rv.offset] = std::string(rv.value);
    }
    if (r->batches.empty()) return out;
    from = r->next_offset.value();
  }
}

std::string segment_path(FsStorageEngine& engine, const ShardRef& ref, std::uint64_t base) {
  return engine.shard_directory(ref).value() + "/log/" + segment_file_name(base);
}

std::pair<std::size_t, std::size_t> resident_pages(const std::string& path, std::uint64_t from, std::uint64_t to) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0) << path;
  const std::uint64_t size = std::filesystem::file_size(path);
  to = std::min(to, size);
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  void* m = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  EXPECT_NE(m, MAP_FAILED) << path;
  std::vector<unsigned char> vec((size + page - 1) / page);
  EXPECT_EQ(::mincore(m, size, vec.data()), 0);
  ::munmap(m, size);
  std::size_t resident = 0, counted = 0;
  for (std::uint64_t p = from / page; p < (to + page - 1) / page; ++p, ++counted) resident += vec[p] & 1;
  return {resident, counted};
}

}  // namespace sluice::fs_storage::testing
