// The controller loop (docs/replication.md "The controller"). Written once, against the
// metadata interface: every node runs one, and it acts only while its metadata store says
// it is the controller (MetadataStore::is_controller: the raft-meta leader, or the
// postgres-meta instance holding the lease). A new controller simply starts from the
// catalog as it finds it: the loop keeps no state of its own that a decision depends on.
//
// Every preferred_interval it also moves leadership back to each shard's first replica
// (its preferred leader) once that replica is an eligible in-sync member
// (plan_preferred_election): after a broker returns, leadership spreads as placed.
//
// Each pass reads one catalog snapshot (streams, assignments, brokers with their liveness
// and current directory ids) and, for every replicated shard, applies plan_failover
// (catalog_rules.h): elect an eligible in-sync replica when the leader is lost, or leave
// the shard without a leader when none is eligible. A shard with a running reassignment
// then takes its next step (plan_reassignment_step): move leadership into the target once
// every new replica is in sync, then drop the old replicas. Every decision is one update_shard
// compare-and-set on the shard version, so a deposed controller's late write fails.
//
// Thread-safety: start() and stop() from one thread; pass() from the loop (or a test).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "sluice/host.h"
#include "sluice/metadata.h"

namespace sluice::core {

struct ControllerOptions {
  std::chrono::milliseconds interval{500};  // controller.interval_ms
  // controller.preferred_leader_interval_ms: how often leadership is moved back to each
  // shard's first replica once it is an eligible in-sync member (0: never).
  std::chrono::milliseconds preferred_interval{300000};
};

class Controller {
 public:
  Controller(MetadataStore& store, PluginHost& host, ControllerOptions opts);
  ~Controller();
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  void start();
  void stop();
  // One pass now, if this node is the controller. Returns the decisions written.
  std::uint64_t pass();

 private:
  void loop();

  MetadataStore& store_;
  PluginHost& host_;
  const ControllerOptions opts_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool was_controller_ = false;
  std::chrono::steady_clock::time_point next_preferred_{};
  std::thread thread_;
};

}  // namespace sluice::core
