// GroupOps (group_ops.h): proposing consumer-group ops to the replicated group log, and
// applying the committed ones in order.
#include "group_ops.h"

#include <future>

#include "epoch_history.h"
#include "segment.h"
#include "shard_log.h"
#include "sluice/record_batch.h"

namespace sluice::fs_storage {

namespace {
constexpr std::string_view kComponent = "fs-storage";
constexpr std::string_view kAppliedName = "applied";
constexpr std::size_t kReadBytes = 1 << 20;

std::optional<std::uint64_t> read_applied(FileSystem& fs, const std::string& path) {
  (void)fs.remove(path + ".tmp");
  auto ex = fs.exists(path);
  if (!ex || !*ex) return std::nullopt;
  auto f = fs.open(path, OpenMode::read_write);
  if (!f) return std::nullopt;
  auto b = read_whole_file(**f);
  if (!b || b->size() != 12 || crc32c(b->data(), 8) != wire::get_u32(b->data() + 8))
    return std::nullopt;
  return wire::get_u64(b->data());
}
}  // namespace

GroupOps::GroupOps(std::shared_ptr<ShardLogImpl> log, std::string dir,
                   std::shared_ptr<FileSystem> fs, PluginHost& host)
    : log_(std::move(log)), dir_(std::move(dir)), fs_(std::move(fs)), host_(host) {
  const std::string path = dir_ + "/" + std::string(kAppliedName);
  // Capped at the recovered log: a torn tail cut at open was never applied anywhere.
  applied_ = std::min(read_applied(*fs_, path).value_or(0), log_->durable_end().value());
}

Result<void> GroupOps::propose(std::string_view group, std::uint8_t type,
                               std::string_view payload, std::string_view extra) {
  std::string value;
  value.reserve(5 + payload.size() + extra.size());
  value.push_back(static_cast<char>(type));
  char len[4];
  wire::put_u32(len, static_cast<std::uint32_t>(payload.size()));
  value.append(len, 4);
  value.append(payload);
  value.append(extra);
  BatchBuilder bb;
  bb.add(group, value, {}, 0);
  auto p = std::make_shared<std::promise<Result<AppendResult>>>();
  auto f = p->get_future();
  log_->append(bb.finish(), AckMode::quorum,
               [p](Result<AppendResult> r) { p->set_value(std::move(r)); });
  auto r = f.get();
  if (r && contiguous_ && r->base_offset.value() == call_end_)
    call_end_ = r->base_offset.value() + r->count;
  else
    contiguous_ = false;
  if (!r) {
    Error e = r.error();
    e.message = "consumer group " + std::string(group) + ": the group log of shard " +
                log_->ref().to_string() + " did not commit the change: " + e.message;
    return e;
  }
  return {};
}

Result<void> GroupOps::catch_up(const std::function<Result<void>(const GroupOp&)>& apply) {
  const std::uint64_t end = log_->durable_end().value();
  if (applied_ > end) {
    // Applied ops are committed, and a committed op is never cut from an in-sync replica.
    host_.log(LogLevel::error, kComponent,
              "shard " + log_->ref().to_string() + ": the group log ends at " +
                  std::to_string(end) + ", below the " + std::to_string(applied_) +
                  " ops already applied here; applying from its end");
    applied_ = end;
  }
  if (applied_ >= end) return {};
  if (log_->high_watermark().value() < end)
    if (auto r = propose({}, kOpNoop, {}); !r) return r;
  std::uint64_t at = applied_;
  std::size_t applied_ops = 0;
  while (at < end) {
    auto r = log_->read(Offset(at), 1000, kReadBytes);
    if (!r) return r.error();
    if (r->batches.empty())
      return Error(Errc::unavailable, "group log of shard " + log_->ref().to_string() +
                                          ": nothing readable at " + std::to_string(at) +
                                          " below its end " + std::to_string(end) +
                                          " (its high watermark is behind); try again");
    for (const auto& b : r->batches) {
      BatchReader reader(b.data(), b.size());
      RecordView rv;
      while (reader.next(rv)) {
        if (rv.offset < at) continue;
        GroupOp op;
        if (rv.key) op.group.assign(*rv.key);
        const std::string_view v = rv.value;
        if (v.size() < 5 || 5 + wire::get_u32(v.data() + 1) > v.size())
          return Error(Errc::corrupt_data, "group log of shard " + log_->ref().to_string() +
                                               ": malformed op at offset " +
                                               std::to_string(rv.offset));
        op.type = static_cast<std::uint8_t>(v[0]);
        const std::uint32_t n = wire::get_u32(v.data() + 1);
        op.payload = v.substr(5, n);
        op.extra = v.substr(5 + n);
        if (op.type != kOpNoop)
          if (auto a = apply(op); !a) return a;
        applied_ = rv.offset + 1;
        ++applied_ops;
      }
    }
    at = r->next_offset.value();
  }
  if (applied_ops > 1)
    host_.log(LogLevel::info, kComponent,
              "shard " + log_->ref().to_string() + ": applied " + std::to_string(applied_ops) +
                  " committed consumer-group op(s) from the group log (now at " +
                  std::to_string(applied_) + ")");
  return {};
}

void GroupOps::begin_call() {
  call_end_ = applied_;
  contiguous_ = true;
}

void GroupOps::finish_call() {
  if (contiguous_) applied_ = call_end_;
  contiguous_ = false;
}

void GroupOps::close_log() { log_->close(); }  // fails a pending proposal at once (unavailable)

void GroupOps::checkpoint() {
  std::lock_guard lk(mu_);
  const std::uint64_t applied = applied_;
  const std::string path = dir_ + "/" + std::string(kAppliedName);
  char buf[12];
  wire::put_u64(buf, applied);
  wire::put_u32(buf + 8, crc32c(buf, 8));
  auto write = [&]() -> Result<void> {
    auto f = fs_->open(path + ".tmp", OpenMode::create_truncate);
    if (!f) return f.error();
    if (auto r = (*f)->pwrite(buf, sizeof buf, 0); !r) return r;
    if (auto r = (*f)->datasync(); !r) return r;
    return fs_->rename(path + ".tmp", path);
  };
  if (auto r = write(); !r)
    host_.log(LogLevel::warn, kComponent,
              "shard " + log_->ref().to_string() +
                  ": no applied checkpoint for the group log (ops are applied again at the "
                  "next leadership): " + r.error().message);
}

}  // namespace sluice::fs_storage
