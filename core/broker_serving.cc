// The broker applies catalog changes: it keeps the catalog image (catalog_image.h), asks the
// pure serving plan (serving_plan.h) what to open, close and delete, and carries it out,
// persisting its durable floors (serving_floors.h) before it acts (docs/architecture.md
// "Broker runtime"). Runs on the control thread (and in start(), before the watch exists).
#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "broker.h"
#include "serving_floors.h"
#include "sluice/failpoint.h"
#include "sluice/features.h"

namespace sluice::core {

namespace {
// Names whose storage work (deletes, opens) a batch of changes runs side by side.
constexpr std::size_t kStorageWorkers = 8;
}  // namespace

HeldStreams BrokerRuntime::held() {
  HeldStreams out;
  std::shared_lock lk(streams_mu_);
  for (const auto& [key, st] : streams_) {
    if (!st->refused.empty()) continue;  // a refused incarnation was never served
    HeldStream h;
    h.incarnation = st->info.incarnation;
    h.assignments = st->assignments;
    for (const auto& s : st->held) h.open.push_back(s != nullptr);
    out.emplace(key, std::move(h));
  }
  return out;
}

void BrokerRuntime::drop_replica(const ShardAction& d) {
  if (!storage_) return;
  auto r = storage_->remove_replica(d.ref);
  if (!r) {
    // The copy stays (an orphan the next full plan retries); nothing is served from it.
    host_.log(LogLevel::warn, "broker",
              "could not remove the copy of " + d.ref.to_string() + " that left this broker (" + d.reason +
                  "): " + r.error().message);
    return;
  }
  if (*r)
    host_.log(LogLevel::info, "broker",
              "removed the copy of " + d.ref.to_string() + ": no longer a replica here; " + d.reason);
}

void BrokerRuntime::close_shard(const ShardAction& c) {
  if (!storage_) return;
  storage_->close_shard(c.ref);
  host_.log(LogLevel::info, "broker",
            "stopped serving stream " + c.ref.stream.to_string() + " incarnation " +
                std::to_string(c.ref.incarnation.value()) + " shard " + std::to_string(c.ref.shard.value()) +
                ": " + c.reason);
}

Result<void> BrokerRuntime::delete_data(const DataDelete& d) {
  if (!storage_) return {};
  auto r = storage_->delete_incarnations(d.key, d.up_to);
  if (!r) {
    note_failed_delete(d, "cannot delete data of " + d.key.to_string() + " (incarnations up to " +
                              std::to_string(d.up_to.value()) + "): " + r.error().message);
    return r.error();
  }
  {
    std::lock_guard lk(applied_mu_);
    auto it = failed_deletes_.find(d.key);
    if (it != failed_deletes_.end() && it->second.first.up_to <= d.up_to) {
      failed_deletes_.erase(it);
      ++plans_done_;  // wakes a DELETE waiting for it (wait_forgotten)
    }
  }
  applied_cv_.notify_all();
  if (r.value() > 0) {
    m_deleted_dirs_.fetch_add(r.value(), std::memory_order_relaxed);
    host_.log(LogLevel::info, "broker",
              "deleted " + std::to_string(r.value()) + " shard directories of " + d.key.to_string() +
                  " (incarnations up to " + std::to_string(d.up_to.value()) + "): " + d.reason);
  }
  return {};
}

Result<void> BrokerRuntime::apply_plan(const ServingPlan& plan, Registration registration) {
  const bool at_start = registration == Registration::at_start;
  // The names this plan acts on are "in progress" until it returns (wait_forgotten).
  std::set<StreamKey> acting(plan.forget.begin(), plan.forget.end());
  for (const auto& c : plan.close) acting.insert(c.ref.stream);
  for (const auto& d : plan.remove) acting.insert(d.key);
  for (const auto& [k, sv] : plan.streams) acting.insert(k);
  {
    std::lock_guard lk(applied_mu_);
    for (const auto& k : acting) ++applying_[k];
  }
  struct Done {
    BrokerRuntime* b;
    const std::set<StreamKey>& names;
    ~Done() {
      {
        std::lock_guard lk(b->applied_mu_);
        for (const auto& k : names)
          if (auto it = b->applying_.find(k); it != b->applying_.end() && --it->second == 0) b->applying_.erase(it);
        ++b->plans_done_;
      }
      b->applied_cv_.notify_all();
    }
  } done{this, acting};
  // 1. The floors are durable before anything is acted on: a crash or a restored control
  //    plane afterwards cannot undo them.
  if (!plan.floors.empty() && storage_) {
    if (auto r = persist_floors(plan.floors); !r) {
      note_failure("cannot persist the broker's floors, so the catalog change is not applied: " +
                   r.error().message);
      return r.error();
    }
    if (!plan.remove.empty()) failpoint("broker.delete.after_floors");  // crash tests
  }
  // 2. Close: take the names out of service first, so no call reaches a closing shard.
  std::set<StreamKey> touched(plan.forget.begin(), plan.forget.end());
  for (const auto& c : plan.close) touched.insert(c.ref.stream);
  // What the names held before: step 5 carries over the shards that stay open. A name that
  // keeps its incarnation stays in service meanwhile, without the closing shards (their
  // calls go to their new leader); a name that is forgotten is out of service, and one
  // that changes incarnation answers as the new one with nothing open until it is installed.
  std::map<StreamKey, std::shared_ptr<StreamState>> before;
  {
    const std::set<StreamKey> forget(plan.forget.begin(), plan.forget.end());
    std::unique_lock lk(streams_mu_);
    for (const auto& k : touched) {
      auto it = streams_.find(k);
      if (it == streams_.end()) continue;
      before[k] = it->second;
      const auto& old = *it->second;
      auto next = plan.streams.find(k);
      if (forget.count(k) || next == plan.streams.end() || next->second.info.incarnation != old.info.incarnation ||
          !old.refused.empty() || !next->second.refused.empty()) {
        if (!forget.count(k) && next != plan.streams.end() && next->second.refused.empty() &&
            next->second.info.incarnation != old.info.incarnation) {
          // Moving to its next incarnation: until it is installed below, the name answers as
          // that incarnation with nothing open here (unavailable, transient; or forwarded
          // to its leader), not not_found, "does not exist", a definite answer for a
          // stream the catalog has (review). Calls naming the old one are stale_route.
          auto ph = std::make_shared<StreamState>();
          ph->info = next->second.info;
          ph->assignments = next->second.assignments;
          ph->held.resize(ph->info.spec.shards);
          ph->shards.resize(ph->info.spec.shards);
          ph->open_failed.resize(ph->info.spec.shards);
          it->second = std::move(ph);
          continue;
        }
        streams_.erase(it);
        continue;
      }
      auto keep = std::make_shared<StreamState>();
      keep->info = old.info;
      keep->assignments = old.assignments;
      keep->held = old.held;
      keep->shards = old.shards;
      keep->sticky.store(old.sticky.load(std::memory_order_relaxed), std::memory_order_relaxed);
      keep->open_failed = old.open_failed;  // still answered with its reason meanwhile
      for (const auto& c : plan.close)
        if (c.ref.stream == k && c.ref.incarnation == old.info.incarnation) {
          const auto i = c.ref.shard.value();
          if (i < keep->held.size()) keep->held[i] = nullptr;
          if (i < keep->shards.size()) keep->shards[i] = nullptr;
        }
      it->second = std::move(keep);
    }
  }
  for (const auto& c : plan.close) close_shard(c);
  std::map<ShardRef, std::shared_ptr<ShardLog>> opened;
  std::map<ShardRef, std::string> open_errors;  // shards that did not open: served by no one here
  std::map<ShardRef, Assignment> left_at_start;  // as the catalog answered a lost copy's leave
  // A start that fails after its opens closes them: a retried start plans afresh, and a
  // shard it no longer wants must not stay open in the engine, held by nothing.
  const auto close_opened = [&] {
    for (const auto& [ref, log] : opened) storage_->close_shard(ref);
    opened.clear();
  };
  if (at_start) {
    // 3. Delete, on the control plane's word only.
    for (const auto& d : plan.remove)
      if (auto r = delete_data(d); !r) return r;
    for (const auto& d : plan.drop) drop_replica(d);
    // 4. The registration's own check, before the data is touched: a build that lacks a
    // finalized feature opens nothing (the catalog refuses it below, by the same rule).
    if (storage_ && !registered_) {
      std::set<std::string, std::less<>> finalized;
      for (const auto& [name, at] : image_.finalized) finalized.insert(name);
      if (auto a = admit_broker(opts_.features, finalized); !a)
        return Error(a.error().code, "broker " + std::to_string(info_.node_id.value()) + ": " + a.error().message);
    }
    // A broker the catalog records under another directory (back with a new or replaced
    // disk) holds no copy an in-sync set counts, so it has nothing to leave: it registers
    // first, as that makes the old record's in-sync entries ineligible at once.
    if (storage_ && !registered_ && register_before_opens_)
      if (auto r = register_at_start(); !r) return r;
    failpoint("broker.start.before_open");  // tests: a start held before its opens
    // 5. Open, before registering: until it registers the broker is not live, so the
    // controller cannot elect it from a copy this disk lost before step 6 takes that copy
    // out of the in-sync set. Damaged data stops the start, naming the file and the
    // position: the operator decides (storage.repair cuts it; docs/operations.md). Any other
    // failure to open a shard (a full disk, a file in the way, a half-finished delete) is
    // that shard's alone: the node starts, serves the rest, is not ready, and retries it
    // (retry_failed()).
    for (const auto& o : plan.open) {
      if (!storage_) continue;
      auto log = storage_->open_shard(o.ref, plan.streams.at(o.ref.stream).info.spec);
      if (!log && log.error().code == Errc::corrupt_data) {
        close_opened();
        return Error(log.error().code, "cannot open stream " + o.ref.stream.to_string() + ": " + log.error().message,
                     log.error().outcome);
      }
      if (!log) {
        open_errors[o.ref] = log.error().message;
        continue;
      }
      opened[o.ref] = std::move(log.value());
    }
    // 6. Lost copies leave the in-sync set, then 7. register before serving: a refusal
    // stops the node.
    if (storage_) left_at_start = leave_in_sync_sets_of_lost_copies(plan, opened);
    if (storage_ && !registered_)
      if (auto r = register_at_start(); !r) {
        close_opened();
        return r;
      }
  } else {
    // 3.-5. for a batch of changes: each name's deletes, drops and opens in that order, the
    // names side by side (they share nothing; the storage engine's syncs for different
    // names then overlap instead of queueing behind one another on this thread).
    act_per_name(plan, opened, open_errors);
  }
  settle_opens(plan, opened, open_errors);
  // Install what each name is served as.
  for (const auto& [key, sv] : plan.streams) {
    auto prior = before.find(key);
    auto cur = prior != before.end() ? prior->second : find(key);
    auto st = std::make_shared<StreamState>();
    st->info = sv.info;
    st->assignments = sv.assignments;
    for (auto& a : st->assignments)
      if (auto l = left_at_start.find(ShardRef{key, a.shard, a.incarnation}); l != left_at_start.end()) a = l->second;
    st->refused = sv.refused;
    st->held.resize(sv.info.spec.shards);
    st->shards.resize(sv.info.spec.shards);
    st->open_failed.resize(sv.info.spec.shards);
    std::uint32_t fresh = 0;
    for (std::uint32_t i = 0; i < sv.hold.size(); ++i) {
      if (!sv.hold[i]) continue;
      const ShardRef ref{key, ShardIndex{i}, sv.info.incarnation};
      if (auto e = open_errors.find(ref); e != open_errors.end()) st->open_failed[i] = e->second;
      const Assignment* was = nullptr;
      if (auto it = opened.find(ref); it != opened.end()) {
        st->held[i] = it->second;
        ++fresh;
      } else if (cur && cur->info.incarnation == sv.info.incarnation && i < cur->held.size()) {
        st->held[i] = cur->held[i];
        for (const auto& a : cur->assignments)
          if (a.shard.value() == i) was = &a;
      }
      if (!st->held[i]) continue;
      const Assignment* now = nullptr;
      for (const auto& a : st->assignments)
        if (a.shard.value() == i) now = &a;
      // The engine learns the shard's replica state after it opens and after every change.
      if (now && (!was || was->version != now->version || was->leader != now->leader ||
                  was->leader_epoch != now->leader_epoch || was->replicas != now->replicas)) {
        ReplicaAssignment ra{now->replicas, now->leader, now->leader_epoch, now->in_sync, now->version,
                             sv.info.spec.min_insync};
        if (ra.replicas.empty()) ra.replicas = {now->leader};
        if (auto r = storage_->assign(ref, ra); !r) {
          // Refused (a full disk failed the epoch history's save, say): the shard is closed
          // and handled as one that did not open: answered shard_unavailable with the
          // reason, the node not ready, and retried (retry_failed opens it and assigns
          // again). Kept open, it was never assigned again: later plans saw the same
          // version, and followers were told not_leader until an unrelated change (review).
          const std::string why = "the storage engine refused its replica state: " + r.error().to_string();
          st->held[i] = nullptr;
          st->open_failed[i] = why;
          if (fresh && opened.count(ref)) --fresh;
          storage_->close_shard(ref);
          note_failed_open(ref, "shard " + ref.to_string() + ": " + why);
          continue;
        }
      }
      if (sv.serve[i]) st->shards[i] = st->held[i];
    }
    if (!sv.refused.empty() && (!cur || cur->refused != sv.refused))
      host_.log(LogLevel::warn, "broker", "not serving: " + sv.refused);
    if (fresh)
      host_.log(LogLevel::info, "broker",
                "serving stream " + key.to_string() + " incarnation " + std::to_string(sv.info.incarnation.value()) +
                    " (" + std::to_string(fresh) + " of " + std::to_string(sv.info.spec.shards) + " shards here)");
    std::unique_lock lk(streams_mu_);
    // Checked under streams_mu_: the heartbeat thread notes the fence before it takes that
    // lock to close and clear what is served, so a state installed here is either cleared
    // by it or not installed at all.
    if (fenced()) {
      lk.unlock();
      // Refused by the control plane while this plan ran: nothing it opened is served.
      for (const auto& log : st->held)
        if (log && storage_) storage_->close_shard(log->ref());
      continue;
    }
    streams_[key] = std::move(st);
  }
  return {};
}

void BrokerRuntime::act_per_name(const ServingPlan& plan, std::map<ShardRef, std::shared_ptr<ShardLog>>& opened,
                                 std::map<ShardRef, std::string>& open_errors) {
  struct Work {
    std::vector<const DataDelete*> remove;
    std::vector<const ShardAction*> drop, open;
  };
  std::map<StreamKey, Work> by_name;
  for (const auto& d : plan.remove) by_name[d.key].remove.push_back(&d);
  for (const auto& d : plan.drop) by_name[d.ref.stream].drop.push_back(&d);
  for (const auto& o : plan.open) by_name[o.ref.stream].open.push_back(&o);
  std::vector<std::pair<const StreamKey*, const Work*>> units;
  for (const auto& [k, w] : by_name) units.emplace_back(&k, &w);
  std::mutex mu;  // opened, open_errors
  std::atomic<std::size_t> next{0};
  auto worker = [&] {
    for (std::size_t i; (i = next.fetch_add(1)) < units.size();) {
      const auto& [key, w] = units[i];
      for (const auto* d : w->remove) (void)delete_data(*d);  // a failure is noted (not ready)
      for (const auto* d : w->drop) drop_replica(*d);
      if (!storage_) continue;
      for (const auto* o : w->open) {
        auto log = storage_->open_shard(o->ref, plan.streams.at(*key).info.spec);
        if (!log) {
          std::lock_guard lk(mu);
          open_errors[o->ref] = log.error().message;
          continue;
        }
        std::lock_guard lk(mu);
        opened[o->ref] = std::move(log.value());
      }
    }
  };
  const std::size_t threads = std::min<std::size_t>(units.size(), kStorageWorkers);
  std::vector<std::thread> ts;
  for (std::size_t t = 1; t < threads; ++t) ts.emplace_back(worker);
  worker();
  for (auto& t : ts) t.join();
}

Result<void> BrokerRuntime::persist_floors(const ServingFloors& raised) {
  // Rewrite when appending is not safe (no file yet, a torn or failed append) or when most
  // lines are superseded; otherwise append the raised floors (serving_floors.h).
  const bool rewrite = !floors_appendable_ || floors_lines_ + raised.size() > 2 * (floors_.size() + raised.size()) + 1024;
  std::vector<std::pair<StreamKey, std::optional<ServingFloor>>> before;
  before.reserve(raised.size());
  for (const auto& [k, f] : raised) {
    auto it = floors_.find(k);
    before.emplace_back(k, it == floors_.end() ? std::nullopt : std::optional<ServingFloor>(it->second));
    floors_[k] = f;
  }
  auto r = rewrite ? store_floors(floors_path_, floors_) : append_floors(floors_path_, raised);
  if (!r) {
    // Not durable: the floors stay as they were, and the next write rewrites the file (an
    // append may have left part of a line behind).
    for (auto& [k, f] : before) {
      if (f) floors_[k] = *f;
      else floors_.erase(k);
    }
    floors_appendable_ = false;
    return r.error();
  }
  floors_appendable_ = true;
  floors_lines_ = rewrite ? floors_.size() : floors_lines_ + raised.size();
  return {};
}

void BrokerRuntime::skip_removes_without_data(ServingPlan& plan) {
  if (!storage_ || plan.remove.empty()) return;
  auto disk = storage_->list_on_disk();
  if (!disk) return;  // delete every word, as before
  std::map<StreamKey, Incarnation> lowest;  // per name, the lowest incarnation on disk
  for (const auto& ref : *disk) {
    auto [it, fresh] = lowest.emplace(ref.stream, ref.incarnation);
    if (!fresh && ref.incarnation < it->second) it->second = ref.incarnation;
  }
  std::erase_if(plan.remove, [&](const DataDelete& d) {
    auto it = lowest.find(d.key);
    return it == lowest.end() || it->second > d.up_to;
  });
}

void BrokerRuntime::publish_finalized() {
  std::lock_guard lk(finalized_mu_);
  for (const auto& [name, at] : image_.finalized) finalized_.insert(name);
}

bool BrokerRuntime::feature_finalized(std::string_view feature) const {
  std::lock_guard lk(finalized_mu_);
  return finalized_.find(feature) != finalized_.end();
}

Result<void> BrokerRuntime::resync() {
  watch_.reset();
  auto snap = catalog_.snapshot();
  if (!snap) return snap.error();
  // When each feature was finalized (the snapshot has only names). Without it, a finalized
  // feature would count as finalized at change 0, which turns off the refusal of streams
  // created at incarnation 0 after stream_incarnations was finalized (serving_plan.cc):
  // this broker alone would serve (and reopen legacy data under) what the others refuse.
  // So a failed read fails the resync, which is retried.
  std::vector<FeatureInfo> features;
  if (!snap->finalized_features.empty()) {
    auto f = catalog_.list_features();
    if (!f) return f.error();
    features = std::move(f.value());
  }
  image_ = image_from_snapshot(*snap, features);
  publish_finalized();
  if (opts_.peers) opts_.peers->replace_from_catalog(snap->brokers);
  // The replicated_shards finalize may lie in what the resync skipped: register again if
  // the catalog holds no (or another) peer address for this broker (apply_changes).
  if (!opts_.peer_address.empty() &&
      std::find(snap->finalized_features.begin(), snap->finalized_features.end(), kReplicatedShards) !=
          snap->finalized_features.end())
    for (const auto& b : snap->brokers)
      if (b.id == info_.node_id && b.peer_address != opts_.peer_address) reregister_wanted_ = true;
  resync_pending_ = false;
  snapshot_seq_ = snap->seq;
  if (!started_)
    register_before_opens_ = std::any_of(snap->brokers.begin(), snap->brokers.end(), [&](const BrokerInfo& b) {
      return b.id == info_.node_id && b.directory_id != info_.directory_id;
    });
  // The whole catalog against what is held and the floors: nothing is dropped before it is
  // planned, so the guard holds across a resync (a lower incarnation is refused, not served).
  auto plan = plan_serving(image_, serving_node(), held(), floors_);
  skip_removes_without_data(plan);
  const auto registration = started_ ? Registration::done : Registration::at_start;
  {
    // The whole catalog is planned again: what failed before is tried again (and noted
    // again if it fails again).
    std::lock_guard lk(applied_mu_);
    failure_.clear();
    failed_deletes_.clear();  // the whole plan deletes every word again
    failed_opens_.clear();
  }
  if (auto r = apply_plan(plan, registration); !r) {
    if (!started_) return r;
    resync_pending_ = true;  // try the whole plan again, after a pause
    return r;
  }
  forget_refused_deleted(nullptr);
  mark_applied(snap->seq);
  watch_ = catalog_.watch(
      snap->seq, [this](const ChangeEvent& ev) { enqueue({Task::Kind::change, ev}); },
      [this] { enqueue({Task::Kind::resync, {}}); });
  // Last: from here the control thread may run the retry (at start this is start()'s
  // thread, and the image is the control thread's only once this returns).
  schedule_retry();
  return {};
}

// A name this broker refuses to serve (never served: held() leaves it out, so no plan
// forgets it) that the catalog no longer has: the name is gone here too (404, not the
// refusal), and a DELETE through this broker sees it go (wait_forgotten).
void BrokerRuntime::forget_refused_deleted(const std::set<StreamKey>* scope) {
  std::unique_lock lk(streams_mu_);
  for (auto it = streams_.begin(); it != streams_.end();) {
    if (!it->second->refused.empty() && (!scope || scope->count(it->first)) && !image_.streams.count(it->first))
      it = streams_.erase(it);
    else
      ++it;
  }
}

void BrokerRuntime::apply_changes(const std::vector<ChangeEvent>& events) {
  std::set<StreamKey> touched;
  ChangeSeq last{0};
  for (const auto& ev : events) {
    // A change the snapshot already holds (queued by the previous watch before a resync).
    if (ev.seq <= snapshot_seq_) continue;
    // The peer directory follows broker registrations (it holds no shard data, so it needs
    // no plan and may run ahead of a pending resync, which replaces it anyway).
    if (opts_.peers && ev.kind == ChangeEvent::Kind::broker_registered) opts_.peers->learn(ev.broker);
    if (opts_.peers && ev.kind == ChangeEvent::Kind::broker_unregistered) opts_.peers->forget(ev.broker.id);
    if (resync_pending_) continue;  // the queued resync covers it
    replay(image_, ev);
    switch (ev.kind) {
      case ChangeEvent::Kind::stream_created:
      case ChangeEvent::Kind::stream_deleted:
        touched.insert(ev.stream.key);
        break;
      case ChangeEvent::Kind::shard_changed:
        touched.insert(!ev.assignments.empty() ? ev.assignments.front().key : ev.stream.key);
        break;
      case ChangeEvent::Kind::feature_finalized:
        // Changes only later decisions (what a delete removes; which creates are refused).
        host_.log(LogLevel::info, "broker", "feature " + ev.feature + " is finalized");
        publish_finalized();
        // A raft-meta group below level 16 stores no peer address (raft_meta_catalog.cc
        // register_broker); once replicated_shards is finalized every member is at 16:
        // register again so that peers can reach this broker's replicas.
        if (ev.feature == kReplicatedShards && !opts_.peer_address.empty()) reregister_wanted_ = true;
        break;
      default:
        break;  // tenants, namespaces, brokers and caches hold no shard data here
    }
    last = ev.seq;
  }
  if (resync_pending_ || last.value() == 0) return;
  if (!touched.empty()) {
    if (auto r = apply_plan(plan_names(touched), Registration::done); !r) {
      // Not carried out (apply_plan logged why): nothing after it is marked applied until
      // a resync has planned the whole catalog again.
      resync_pending_ = true;
      enqueue({Task::Kind::resync, {}});
      return;
    }
    schedule_retry();
    forget_refused_deleted(&touched);
  }
  mark_applied(last);
}

ServingPlan BrokerRuntime::plan_names(const std::set<StreamKey>& names) {
  // One plan per name, against the image after the whole batch (each name's plan reads only
  // that name; a name created and deleted in one batch is planned once, as deleted), merged
  // into one plan: one floors sync for the batch.
  const HeldStreams now_held = held();
  ServingPlan merged;
  for (const auto& key : names) {
    ServingPlan p = plan_serving(image_, serving_node(), now_held, floors_, key);
    merged.floors.merge(p.floors);
    for (auto* v : {&p.close, &p.drop, &p.open}) {
      auto& into = v == &p.close ? merged.close : v == &p.drop ? merged.drop : merged.open;
      into.insert(into.end(), std::make_move_iterator(v->begin()), std::make_move_iterator(v->end()));
    }
    merged.remove.insert(merged.remove.end(), p.remove.begin(), p.remove.end());
    merged.streams.merge(p.streams);
    merged.forget.insert(merged.forget.end(), p.forget.begin(), p.forget.end());
  }
  return merged;
}

ServingNode BrokerRuntime::serving_node() const {
  return ServingNode{info_.node_id, storage_ ? DataRole::broker : DataRole::none};
}

}  // namespace sluice::core
