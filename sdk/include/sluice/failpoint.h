// Test failpoints for crash tests. When the environment variable SLUICE_FAILPOINTS holds
// a comma-separated list of names, reaching one of them kills the process with SIGKILL,
// exactly as a crash would: no destructors, no flushes. A name followed by `:stop` stops
// the process instead (SIGSTOP), to be continued by the test (SIGCONT): a start held at one
// step. Unset (always, in production), a failpoint costs one branch on a cached flag.
//
// Names in use (keep docs/operations.md in step):
//   broker.delete.after_floors      the broker's floors record a delete; nothing deleted yet
//   storage.delete.after_marker     marker written, nothing moved yet
//   storage.delete.after_move       directories moved to .deleted/, marker still there
//   storage.delete.after_unmark     marker removed, .deleted/ entries not yet removed
//   cache.delete.after_catalog      a cache's or counter's catalog entry deleted, its backing
//                                   stream not yet (http-api)
//   cache.sweep.before_delete       a broker found a deleted cache's backing stream left over
//   broker.start.before_open        a starting broker applied its deletes; no shard opened,
//                                   not registered yet (the broker is not live)
#pragma once

#include <string_view>

namespace sluice {

void failpoint(std::string_view name);

}  // namespace sluice
