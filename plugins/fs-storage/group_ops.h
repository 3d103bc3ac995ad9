// GroupOps: the replicated op log of a replicated shard's consumer groups
// (docs/replication.md "Consumer groups").
//
// A consumer group's state lives in per-replica files (group.h). On a replicated shard,
// everything a group must not forget after a change of leader first goes through one
// replicated log per shard incarnation, <shard dir>/group-log/ (a ShardLogImpl replicated
// beside the data log, LogKind::groups), and reaches this replica's files only once the op
// is committed (below the group log's high watermark):
//
//   * ACK            the offsets acked;
//   * DEAD           the original offset, the dead-letter offset it gets, and the whole
//                    dead-letter batch (so every replica builds the same dead-letter log);
//   * REPLAY_PENDING / REPLAYED   a replay's intent and its completion;
//   * CREATE         the group exists (so a new leader lists it and answers its position);
//   * NOOP           a barrier: a new leader's unapplied tail may not be committed yet;
//                    once a NOOP after it commits (ack=quorum), all of it is.
//
// DELIVER records (which records are outstanding, and their delivery counts) stay local:
// after a change of leader the new leader delivers every unacked record again, as
// delivery 1. That is at-least-once, as before; an ack is never lost once answered.
//
// Each op is one batch holding one record: key = group name, value =
//   u8 type | u32 payload_len | payload (the journal record's payload, group.h) | extra
// (extra: the dead-letter batch of a DEAD op, else empty).
//
// Applying. Only the leader applies, in log order, and only committed ops: every group
// call on a replicated shard first takes the shard's group mutex and calls catch_up(),
// which commits any unapplied tail with a NOOP if it is not committed yet, then applies
// [applied, end). The call's own ops are proposed with ack=quorum and applied by the call
// after they commit; it then marks the log applied to its end. Applying is idempotent
// (group.h "apply_op"), so `applied` is only a lower bound: it is kept in memory and
// written to <shard dir>/group-log/applied (u64 | u32 crc32c; .tmp + fdatasync + rename) at
// close; a missing or stale file only means ops are applied again.
//
// Thread-safety: mu() serializes the group calls of one shard; every other method must be
// called with it held, except close().
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "file_system.h"
#include "sluice/error.h"
#include "sluice/host.h"
#include "sluice/types.h"

namespace sluice::fs_storage {

class ShardLogImpl;

inline constexpr std::string_view kGroupLogDir = "group-log";

struct GroupOp {
  std::string group;
  std::uint8_t type = 0;     // group_records.h types, plus kOpCreate / kOpNoop
  std::string_view payload;  // views into the batch being applied
  std::string_view extra;
};

class GroupOps {
 public:
  static constexpr std::uint8_t kOpCreate = 100;
  static constexpr std::uint8_t kOpNoop = 101;

  GroupOps(std::shared_ptr<ShardLogImpl> log, std::string dir, std::shared_ptr<FileSystem> fs,
           PluginHost& host);
  const std::shared_ptr<ShardLogImpl>& log() const { return log_; }
  std::mutex& mu() { return mu_; }

  // Appends one op with ack=quorum and waits: ok once committed; fenced, not_leader,
  // not_enough_replicas, timeout ... otherwise (then it is not applied here; it may still
  // commit, and the next catch_up() applies it if it did).
  Result<void> propose(std::string_view group, std::uint8_t type, std::string_view payload,
                       std::string_view extra = {});
  // Commits the unapplied tail (a NOOP if needed) and applies it, op by op, in log order.
  Result<void> catch_up(const std::function<Result<void>(const GroupOp&)>& apply);
  // Brackets one group call after catch_up(): finish_call() marks the call's own committed
  // ops applied, and only if they directly follow what was applied (an op another leader
  // wrote meanwhile, e.g. replicated here as a follower, is never skipped).
  void begin_call();
  void finish_call();
  // Closing is two steps, so that the shard can close its data log in between:
  // close_log() closes the group log (failing a pending proposal at once); checkpoint()
  // waits for the group call in progress (mu()) and writes the applied checkpoint (best
  // effort). A call in progress may wait on the data log (a replay's quorum append): it
  // ends only once that log is closed too.
  void close_log();
  void checkpoint();

 private:
  std::shared_ptr<ShardLogImpl> log_;
  const std::string dir_;
  const std::shared_ptr<FileSystem> fs_;
  PluginHost& host_;
  std::mutex mu_;
  std::uint64_t applied_ = 0;
  std::uint64_t call_end_ = 0;  // applied_ plus this call's own committed ops
  bool contiguous_ = false;
};

}  // namespace sluice::fs_storage
