// ShardReplicaLog: the fs-storage shard log (ShardLogImpl, shard_log.h "Replicated shards")
// behind the ReplicaManager's ReplicaLog seam (replica_manager.h). A thin, allocation-free
// forwarder: every call is the shard log's own (same contracts, same errors); only
// read_raw's answer is renamed field by field.
//
// Ownership: holds the shard log; after the shard closes, calls answer as a closed shard
// does (unavailable, or an inline notification).
#pragma once

#include <memory>

#include "replica_manager.h"
#include "shard_log.h"

namespace sluice::fs_storage {

class ShardReplicaLog final : public ReplicaLog {
 public:
  // `owner`: the data log whose directory this log lives in (a group op log's shard), which
  // answers for a lost copy; by default the log itself.
  explicit ShardReplicaLog(std::shared_ptr<ShardLogImpl> log, std::shared_ptr<ShardLogImpl> owner = nullptr)
      : log_(std::move(log)), owner_(owner ? std::move(owner) : log_) {}
  const std::shared_ptr<ShardLogImpl>& shard() const { return log_; }

  const ShardRef& ref() const override { return log_->ref(); }
  Offset log_start() override { return log_->log_start(); }
  Offset durable_end() override { return log_->durable_end(); }
  Offset written_end() override { return log_->written_end(); }
  Offset high_watermark() override { return log_->high_watermark(); }
  LeaderEpoch leader_epoch() override { return log_->leader_epoch(); }
  LeaderEpoch last_data_epoch() override { return log_->last_data_epoch(); }
  Result<EpochEnd> end_offset_for(LeaderEpoch e) override { return log_->end_offset_for(e); }
  Result<void> become_leader(LeaderEpoch e) override { return log_->become_leader(e); }
  bool led_before_reopen(LeaderEpoch e) override { return log_->led_before_reopen(e); }
  bool copy_lost() override { return owner_->copy_lost(); }
  Result<void> forget_copy_lost() override { return owner_->forget_copy_lost(); }
  bool has_group_log() override { return owner_ == log_ && log_->group_ops() != nullptr; }
  Result<void> become_follower(LeaderEpoch e, NodeId leader) override {
    return log_->become_follower(e, leader);
  }
  Result<void> fence(LeaderEpoch newer) override { return log_->fence(newer); }
  void set_in_sync(std::size_t members, std::uint32_t min_insync) override {
    log_->set_in_sync(members, min_insync);
  }
  void advance_high_watermark(Offset hwm) override { log_->advance_high_watermark(hwm); }
  void hold_high_watermark() override { log_->hold_high_watermark(); }
  void expire_quorum_waiters(std::chrono::steady_clock::time_point now) override {
    log_->expire_quorum_waiters(now);
  }
  Result<ReplicaChunk> read_raw(Offset from, std::size_t max_bytes,
                                std::size_t headroom = 0) override {
    auto r = log_->read_raw(from, max_bytes, headroom);
    if (!r) return r.error();
    return ReplicaChunk{std::move(r->bytes), r->next_offset, r->last_epoch};
  }
  Result<void> append_replica(std::string_view chunk, Offset base, LeaderEpoch epoch,
                              LeaderEpoch fetched_in) override {
    return log_->append_replica(chunk, base, epoch, fetched_in);
  }
  Result<void> truncate_to(Offset end, LeaderEpoch decided_in) override { return log_->truncate_to(end, decided_in); }
  Result<void> restart_at(Offset start, LeaderEpoch decided_in) override {
    return log_->restart_at(start, decided_in);
  }
  Result<Offset> trim_before(Offset before) override { return log_->trim_before(before); }
  std::uint64_t notify_when_end_beyond(Offset offset, std::function<void()> cb) override {
    return log_->notify_when_end_beyond(offset, std::move(cb));
  }
  void cancel_end_notify(std::uint64_t handle) override { log_->cancel_end_notify(handle); }

 private:
  std::shared_ptr<ShardLogImpl> log_;
  std::shared_ptr<ShardLogImpl> owner_;
};

}  // namespace sluice::fs_storage
