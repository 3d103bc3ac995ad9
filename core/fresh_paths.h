// What a refused start created, so that it can take it back: a failed start changes
// nothing on disk (docs/operations.md, "Starting").
//
// Before start-up touches the disk it notes each path it may create (data.dir, its .lock
// and meta.properties, raft.dir, storage.dir). note() records the outermost missing
// component of the path, if any. When start-up fails, undo() removes what it recorded,
// innermost last noted first, each removal made durable by an fsync of the parent; once
// the node is ready, nothing is undone any more (forget()).
//
// Thread-safety: none; start-up is single-threaded up to the point where undo may run.
#pragma once

#include <string>
#include <vector>

#include "sluice/error.h"

namespace sluice::core {

class FreshPaths {
 public:
  // Records the outermost component of `path` that does not exist yet (nothing if the
  // path exists, as a file, a directory or a symbolic link).
  void note(const std::string& path);

  // Removes every recorded path that exists now, newest note first, and fsyncs its parent.
  // Returns the first error, after trying all of them.
  Result<void> undo();

  void forget() { fresh_.clear(); }
  const std::vector<std::string>& paths() const { return fresh_; }

 private:
  std::vector<std::string> fresh_;
};

}  // namespace sluice::core
