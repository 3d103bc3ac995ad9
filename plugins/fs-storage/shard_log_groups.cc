// ShardLogImpl (shard_log.h): the consumer groups of one shard incarnation: opening them,
// and every group call, through the replicated group log on a replicated shard
// (group_ops.h).
#include <algorithm>

#include "shard_log.h"
#include "sluice/names.h"

namespace sluice::fs_storage {

// --- consumer groups (group.h) -----------------------------------------------------

Result<std::shared_ptr<ConsumerGroup>> ShardLogImpl::group(const std::string& name, bool create) {
  if (auto r = validate_name(NameKind::group, name); !r) return r.error();
  if (groups_closing_.load())
    return Error(Errc::unavailable, "shard " + ref_.to_string() + " is closed");
  std::lock_guard lk(groups_mu_);
  if (groups_closed_) return Error(Errc::unavailable, "shard " + ref_.to_string() + " is closed");
  if (auto it = groups_.find(name); it != groups_.end()) return it->second;
  const std::string gdir = dir_ + "/groups/" + name;
  if (!create) {
    auto ex = fs_->is_directory(gdir);
    if (!ex) return ex.error();
    if (!*ex)
      return Error(Errc::not_found, "no consumer group " + name + " on shard " + ref_.to_string());
  }
  GroupReplicate replicate;
  if (group_ops_)
    replicate = [ops = group_ops_.get(), name](std::uint8_t type, std::string_view payload,
                                              std::string_view extra) {
      return ops->propose(name, type, payload, extra);
    };
  auto g = ConsumerGroup::open(name, gdir, *this, opts_, fs_, host_, pool_, group_clock_,
                               group_step_hook_, std::move(replicate));
  if (!g) return g.error();
  return groups_.emplace(name, std::shared_ptr<ConsumerGroup>(std::move(g).value())).first->second;
}

template <typename T>
Result<T> ShardLogImpl::with_group_ops(const std::function<Result<T>()>& call) {
  if (!group_ops_) return call();
  std::lock_guard lk(group_ops_->mu());
  // Only the group log's leader applies and answers: a replica that is not (or no longer)
  // leading it may be appending another leader's ops as a follower right now.
  if (!group_ops_->log()->leading())
    return Error(Errc::not_leader, "this broker does not lead the group log of shard " + ref_.to_string() +
                                       " (a change of leader is under way); try again",
                 Outcome::transient);
  if (auto r = group_ops_->catch_up([this](const GroupOp& op) { return apply_group_op(op); }); !r)
    return r.error();
  group_ops_->begin_call();
  auto out = call();
  if (out) group_ops_->finish_call();
  return out;
}

Result<void> ShardLogImpl::apply_group_op(const GroupOp& op) {
  auto g = group(op.group, true);
  if (!g) return g.error();
  return (*g)->apply_op(op.type, op.payload, op.extra);
}

Result<GroupDelivery> ShardLogImpl::group_fetch(const std::string& name, std::uint32_t max_records,
                                                const GroupOptions& opts) {
  // Checked before the group is created: a refused fetch leaves no group behind.
  if (auto r = check_group_options(opts); !r) return r.error();
  if (auto r = validate_name(NameKind::group, name); !r) return r.error();
  return with_group_ops<GroupDelivery>([&]() -> Result<GroupDelivery> {
    if (group_ops_) {
      // A group's existence is replicated too: a new leader lists it and knows its position.
      auto known = group(name, false);
      if (!known && known.error().code != Errc::not_found) return known.error();
      if (!known)
        if (auto r = group_ops_->propose(name, GroupOps::kOpCreate, {}); !r) return r.error();
    }
    auto g = group(name, true);
    if (!g) return g.error();
    return (*g)->fetch(max_records, opts);
  });
}

Result<void> ShardLogImpl::group_ack(const std::string& name, const std::vector<Offset>& offsets) {
  return with_group_ops<void>([&]() -> Result<void> {
    auto g = group(name, false);
    if (!g) return g.error();
    return (*g)->ack(offsets);
  });
}

Result<void> ShardLogImpl::group_nack(const std::string& name, const std::vector<Offset>& offsets) {
  return with_group_ops<void>([&]() -> Result<void> {
    auto g = group(name, false);
    if (!g) return g.error();
    return (*g)->nack(offsets);
  });
}

Result<GroupPosition> ShardLogImpl::group_position(const std::string& name) {
  return with_group_ops<GroupPosition>([&]() -> Result<GroupPosition> {
    auto g = group(name, false);
    if (!g) return g.error();
    return (*g)->position();
  });
}

Result<std::vector<std::string>> ShardLogImpl::list_groups() {
  return with_group_ops<std::vector<std::string>>([&]() -> Result<std::vector<std::string>> {
    std::vector<std::string> out;
    const std::string gdir = dir_ + "/groups";
    auto ex = fs_->is_directory(gdir);
    if (!ex) return ex.error();
    if (!*ex) return out;
    auto names = fs_->list(gdir);
    if (!names) return names.error();
    for (auto& n : *names)
      if (validate_name(NameKind::group, n)) out.push_back(std::move(n));
    std::sort(out.begin(), out.end());
    return out;
  });
}

Result<FetchResult> ShardLogImpl::dead_letters(const std::string& name, Offset from,
                                               std::uint32_t max_records, std::size_t max_bytes) {
  return with_group_ops<FetchResult>([&]() -> Result<FetchResult> {
    auto g = group(name, false);
    if (!g) return g.error();
    return (*g)->dead_letters(from, max_records, max_bytes);
  });
}

Result<std::uint64_t> ShardLogImpl::replay_dead_letters(const std::string& name, Offset from,
                                                        Offset to) {
  return with_group_ops<std::uint64_t>([&]() -> Result<std::uint64_t> {
    auto g = group(name, false);
    if (!g) return g.error();
    return (*g)->replay(from, to);
  });
}

}  // namespace sluice::fs_storage
