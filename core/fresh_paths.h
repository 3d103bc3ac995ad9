// What a refused start created, so that it can take it back: a failed start changes
// nothing on disk (docs/operations.md, "Starting").
//
// Before start-up touches the disk it notes each path it may create (data.dir, its .lock
// and meta.properties, raft.dir, storage.dir). note() records the outermost missing
// component of the path, if any. When start-up fails, undo() removes what it recorded,
// last noted first: the noted path with everything under it, then its missing ancestors
// only while they are empty (another node's directory may have appeared beside it), each
// removal made durable by an fsync of the parent. Once the metadata store has started,
// nothing is undone any more (forget()).
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
  std::vector<std::string> paths() const;

 private:
  struct Fresh {
    std::string leaf;       // the path noted: removed with everything under it
    std::string outermost;  // its outermost missing ancestor (or itself): removed only if empty
  };
  std::vector<Fresh> fresh_;
};

}  // namespace sluice::core
