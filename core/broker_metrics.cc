// The broker's Prometheus text: request counters and per-shard-incarnation gauges.
#include "broker.h"
#include "sluice/metrics_text.h"

namespace sluice::core {

std::string BrokerRuntime::metrics_text() {
  MetricsWriter w;
  auto counter = [&](const char* name, const char* help, std::uint64_t v) {
    w.single(name, help, MetricType::counter, v);
  };
  counter("sluice_publish_requests_total", "Publish requests received.", m_publish_requests_.load());
  counter("sluice_publish_records_total", "Records accepted for publishing.", m_publish_records_.load());
  counter("sluice_publish_value_bytes_total", "Value bytes accepted for publishing.", m_publish_bytes_.load());
  counter("sluice_publish_errors_total", "Publish requests that failed.", m_publish_errors_.load());
  counter("sluice_publish_duplicates_total", "Idempotent retries answered with their original offsets.",
          m_publish_duplicates_.load());
  counter("sluice_publish_completed_inline_total",
          "Publish requests (ack leader or quorum) answered before the call that received them "
          "returned: written and synced on that thread (docs/architecture.md \"Inline appends\"), "
          "or retries of a batch already acknowledged.",
          m_publish_inline_.load());
  counter("sluice_fetch_requests_total", "Fetch requests.", m_fetch_requests_.load());
  counter("sluice_fetch_errors_total", "Fetch requests that failed.", m_fetch_errors_.load());
  counter("sluice_deleted_shard_dirs_total", "Shard incarnation directories deleted on the control plane's word.",
          m_deleted_dirs_.load());
  LatencyHistogram::family(w, "sluice_publish_seconds",
                           "Publish requests from arrival at this broker to the answer, successes only, by ack mode "
                           "(forwarded ones included: the time covers the leader's work).");
  for (AckMode a : {AckMode::none, AckMode::leader, AckMode::quorum})
    m_publish_seconds_[static_cast<std::size_t>(a)].render(w, "sluice_publish_seconds",
                                                           {{"ack", std::string(to_string(a))}});
  {
    std::lock_guard lk(applied_mu_);
    w.single("sluice_catalog_applied_seq", "Highest catalog change applied by this node.", MetricType::gauge,
             applied_.value());
  }
  std::vector<std::shared_ptr<StreamState>> all;
  {
    std::shared_lock lk(streams_mu_);
    for (auto& [k, st] : streams_) all.push_back(st);
  }
  struct Row {
    MetricLabels labels;
    ShardStats stats;
  };
  std::vector<Row> rows;
  struct HeldRow {
    MetricLabels labels;
    ShardStats stats;
    std::size_t in_sync = 0;
    std::size_t replicas = 0;
  };
  std::vector<HeldRow> held_rows;  // every replica this broker holds, leader or follower
  for (auto& st : all) {
    for (std::size_t i = 0; i < st->held.size(); ++i) {
      if (!st->held[i]) continue;
      HeldRow r{{{"tenant", st->info.key.tenant},
                 {"namespace", st->info.key.ns},
                 {"stream", st->info.key.name},
                 {"shard", std::to_string(i)},
                 {"incarnation", std::to_string(st->info.incarnation.value())}},
                st->held[i]->stats()};
      for (const auto& a : st->assignments)
        if (a.shard.value() == i) {
          r.in_sync = a.in_sync.size();
          r.replicas = a.replicas.size();
        }
      held_rows.push_back(std::move(r));
    }
  }
  for (auto& st : all) {
    for (std::size_t i = 0; i < st->shards.size(); ++i) {
      if (!st->shards[i]) continue;
      rows.push_back({{{"tenant", st->info.key.tenant},
                       {"namespace", st->info.key.ns},
                       {"stream", st->info.key.name},
                       {"shard", std::to_string(i)},
                       {"incarnation", std::to_string(st->info.incarnation.value())}},
                      st->shards[i]->stats()});
    }
  }
  auto per_shard = [&](const char* name, const char* help, MetricType type, auto field) {
    w.family(name, help, type);
    for (const auto& r : rows) w.sample(name, r.labels, static_cast<std::uint64_t>(field(r.stats)));
  };
  per_shard("sluice_shard_high_watermark", "Next offset to be made durable, per shard incarnation.",
            MetricType::gauge, [](const ShardStats& s) { return s.high_watermark.value(); });
  per_shard("sluice_shard_log_start", "First retained offset, per shard incarnation.", MetricType::gauge,
            [](const ShardStats& s) { return s.log_start.value(); });
  per_shard("sluice_shard_size_bytes", "Bytes of batches in the log, per shard incarnation.", MetricType::gauge,
            [](const ShardStats& s) { return s.size_bytes; });
  per_shard("sluice_shard_preallocated_bytes",
            "Bytes of zeros on disk held ahead of the writes (a preallocated segment's unwritten end, a spare), per shard incarnation; on disk beside sluice_shard_size_bytes.",
            MetricType::gauge, [](const ShardStats& s) { return s.preallocated_bytes; });
  per_shard("sluice_shard_syncs_total", "fdatasync calls since the shard opened.", MetricType::counter,
            [](const ShardStats& s) { return s.syncs; });
  per_shard("sluice_shard_appended_records_total", "Records appended since the shard opened.", MetricType::counter,
            [](const ShardStats& s) { return s.appended_records; });
  auto per_replica = [&](const char* name, const char* help, MetricType type, auto field) {
    w.family(name, help, type);
    for (const auto& r : held_rows) w.sample(name, r.labels, static_cast<std::uint64_t>(field(r)));
  };
  per_replica("sluice_shard_log_end", "End of the log this broker holds (synced or not), per replica.",
              MetricType::gauge, [](const HeldRow& r) { return r.stats.log_end.value(); });
  per_replica("sluice_shard_leader_epoch", "Highest leader epoch this replica has acted in.", MetricType::gauge,
              [](const HeldRow& r) { return r.stats.leader_epoch.value(); });
  per_replica("sluice_shard_leading", "1 if this broker leads the shard, else 0.", MetricType::gauge,
              [](const HeldRow& r) { return r.stats.leading ? 1 : 0; });
  per_replica("sluice_shard_copy_lost",
              "1 if this broker's copy of the shard was lost (its directory gone) and has not caught up with its "
              "leader yet: it leads nothing meanwhile (docs/replication.md \"A lost shard copy\").",
              MetricType::gauge, [](const HeldRow& r) { return r.stats.copy_lost ? 1 : 0; });
  per_replica("sluice_shard_in_sync_replicas", "Members of the shard's in-sync set, as the catalog holds it.",
              MetricType::gauge, [](const HeldRow& r) { return r.in_sync; });
  per_replica("sluice_shard_under_replicated",
              "1 if the shard's in-sync set is smaller than its replica list (catalog's view), else 0.",
              MetricType::gauge, [](const HeldRow& r) { return r.in_sync < r.replicas ? 1 : 0; });
  // A shard without a leader, with the reason (the controller found no eligible replica).
  w.family("sluice_shard_leaderless",
           "1 for a replicated shard without a leader (no eligible in-sync replica), as this broker's catalog view has it; reason says why.",
           MetricType::gauge);
  for (auto& st : all)
    for (const auto& a : st->assignments) {
      if (a.leader.value() != 0 || a.replicas.size() <= 1) continue;  // every broker reports it
      MetricLabels labels{{"tenant", st->info.key.tenant},
                          {"namespace", st->info.key.ns},
                          {"stream", st->info.key.name},
                          {"shard", std::to_string(a.shard.value())},
                          {"incarnation", std::to_string(st->info.incarnation.value())},
                          {"reason", leaderless_reason(a, false)}};  // /metrics is served on an I/O thread
      w.sample("sluice_shard_leaderless", labels, std::uint64_t{1});
    }
  // The leader's view of each replica.
  w.family("sluice_shard_replica_lag_records", "Records a replica's durable end is behind the leader's log end.",
           MetricType::gauge);
  for (const auto& r : held_rows)
    for (const auto& p : r.stats.replicas) {
      auto labels = r.labels;
      labels.push_back({"replica", std::to_string(p.broker.value())});
      const auto end = r.stats.log_end.value();
      w.sample("sluice_shard_replica_lag_records", labels,
               static_cast<std::uint64_t>(end > p.durable_end.value() ? end - p.durable_end.value() : 0));
    }
  // Seconds, the base unit Prometheus names want (it was sluice_shard_replica_lag_ms).
  w.family("sluice_shard_replica_lag_seconds",
           "How long a replica has been behind the leader's log end (leader's view).", MetricType::gauge);
  for (const auto& r : held_rows)
    for (const auto& p : r.stats.replicas) {
      auto labels = r.labels;
      labels.push_back({"replica", std::to_string(p.broker.value())});
      w.sample("sluice_shard_replica_lag_seconds", labels, static_cast<double>(p.lag_ms) / 1000.0);
    }
  w.family("sluice_shard_replica_durable_end", "A replica's durable log end as it last reported (leader's view).",
           MetricType::gauge);
  for (const auto& r : held_rows)
    for (const auto& p : r.stats.replicas) {
      auto labels = r.labels;
      labels.push_back({"replica", std::to_string(p.broker.value())});
      w.sample("sluice_shard_replica_durable_end", labels, p.durable_end.value());
    }
  return std::move(w).str();
}

}  // namespace sluice::core
