// Shared by the RaftMetaStore source files (raft_meta_*.cc) only.
#pragma once

// Returns the error of a failed Result from the enclosing function.
#define RAFT_META_TRY(expr)                         \
  do {                                              \
    if (auto _v = (expr); !_v.ok()) return _v.error(); \
  } while (0)
