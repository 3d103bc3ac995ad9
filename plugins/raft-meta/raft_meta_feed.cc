// RaftMetaStore change feed: watches on the SDK fan-out (sluice/watch_registry.h), delivered
// by the store's delivery thread from the applied `changes` table.
#include "raft_meta_store.h"
#include "raft_meta_store_internal.h"

#include "rpc.h"

#include "sluice/durable_fs.h"
#include "sluice/uuid.h"
#include "sluice/strings.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <random>
#include <stdexcept>

#include "sluice/catalog_rules.h"
#include "sluice/features.h"
#include "sluice/names.h"

namespace sluice::raft_meta {

namespace {

constexpr std::size_t kDeliveryBatch = 256;

}  // namespace

// --- watch ---------------------------------------------------------------------------------

std::unique_ptr<WatchHandle> RaftMetaStore::watch(ChangeSeq after,
                                                  std::function<void(const ChangeEvent&)> on_change,
                                                  std::function<void()> resync) {
  return watches_.add(after, std::move(on_change), std::move(resync));
}

void RaftMetaStore::delivery_main() {
  std::uint64_t seen = 0;
  bool more = false;
  const auto fetch = [this](ChangeSeq after) -> Result<WatchBatch> {
    ChangeBatch batch;
    {
      std::lock_guard lk(fsm_mu_);
      try {
        batch = fsm_.changes_after(after, kDeliveryBatch);
      } catch (const std::exception& e) {
        log(LogLevel::error, std::string("reading the change log: ") + e.what());
        return Error(Errc::internal, e.what());
      }
    }
    WatchBatch out;
    out.resync = batch.resync;
    out.more = batch.events.size() == kDeliveryBatch;
    out.events = std::move(batch.events);
    if (batch.error) {
      // A stored change this build cannot read: the feed stops before it, never skips it
      // (docs/metadata-raft-design.md, "Error policy").
      log(LogLevel::error, batch.error->message + "; the change feed stops before it");
      out.more = false;
    }
    return out;
  };
  const auto on_error = [this](const std::string& m) { log(LogLevel::error, m); };
  for (;;) {
    {
      std::unique_lock lk(watch_mu_);
      if (!more) watch_cv_.wait(lk, [&] { return delivery_stop_ || wake_seq_ != seen; });
      if (delivery_stop_) return;
      seen = wake_seq_;
    }
    more = watches_.deliver(fetch, on_error).more;
  }
}

}  // namespace sluice::raft_meta
