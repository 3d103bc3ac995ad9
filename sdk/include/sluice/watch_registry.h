// The change-feed fan-out every MetadataStore shares: a registry of watches, each with its
// cursor and callbacks, delivered by the backend's own delivery thread. The destruction
// rules of the handles it returns are those stated on WatchHandle in metadata.h.
//
//   backend (delivery thread)                    callers (any thread)
//   -------------------------                    --------------------
//   loop: wait for wake / new changes            add(after, on_change, resync)
//         deliver(fetch) ─┐                        -> unique_ptr<WatchHandle>
//                         │ per watch:           ~WatchHandle: cancel (and wait for
//                         │   fetch(cursor)        a callback running on another thread)
//                         │   callbacks, in seq
//                         └── order, no lock held
//
// The registry owns no thread and no data: `fetch(after)` reads the backend's change log
// (the Raft catalog's `changes` table, PostgreSQL's, or a controller over RPC) and
// deliver() runs the callbacks on the thread that calls it.
//
// Per watch: every change with seq > after, in seq order, one callback at a time. If the
// log no longer reaches back to the cursor, fetch answers resync: the watch's `resync`
// runs once and the watch ends (the caller takes a snapshot and watches again).
//
// Thread-safety: add() and handle destruction from any thread, including from inside any
// callback. deliver() from one thread at a time (the backend's delivery thread); never
// from inside a callback. A handle may outlive its registry (it then cancels nothing).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sluice/error.h"
#include "sluice/metadata.h"
#include "sluice/types.h"

namespace sluice {

// What a backend's change log holds after a watch's cursor.
struct WatchBatch {
  std::vector<ChangeEvent> events;  // seq > after, ascending
  bool resync = false;  // the log was pruned past (or rewound before) the cursor
  bool more = false;    // the batch was cut short: deliver again without waiting
};

// One pass of deliver(): whether to come back at once, and the first fetch error met.
struct DeliverOutcome {
  bool more = false;
  std::optional<Error> error;
};

class WatchRegistry {
 public:
  // `wake` (may be empty) is called after add(), with no registry lock held, so the
  // backend's delivery thread runs a pass for the new watch.
  explicit WatchRegistry(std::function<void()> wake = {});
  // Ends every watch without calling it. Handles still alive then cancel nothing.
  ~WatchRegistry();
  WatchRegistry(const WatchRegistry&) = delete;
  WatchRegistry& operator=(const WatchRegistry&) = delete;

  std::unique_ptr<WatchHandle> add(ChangeSeq after, std::function<void(const ChangeEvent&)> on_change,
                                   std::function<void()> resync);

  // Reads the changes after one watch's cursor. An Error skips that watch for this pass
  // (the next pass tries again from the same cursor); an exception propagates out of
  // deliver() and leaves every watch as it was.
  using Fetch = std::function<Result<WatchBatch>(ChangeSeq after)>;

  // One pass over the watches registered when it starts: fetch, then the callbacks, with
  // no registry lock held while user code runs. A callback that throws is logged through
  // `on_callback_error` (may be empty) and counts as delivered.
  DeliverOutcome deliver(const Fetch& fetch,
                         const std::function<void(const std::string&)>& on_callback_error = {});

  bool empty() const;
  std::size_t size() const;

  struct Core;  // shared with the handles; defined in watch_registry.cc

 private:
  std::function<void()> wake_;
  std::shared_ptr<Core> core_;
};

}  // namespace sluice
