// The broker's durable guard: per stream name, the highest incarnation it has served and the
// highest delete word it has applied (serving_plan.h ServingFloor), kept in
// <data.dir>/broker/floors (docs/architecture.md "Broker runtime").
//
// The control plane's catalog can be rewound by a restore; this file cannot. The broker
// writes it (temp file, fsync, rename, fsync of the directory) BEFORE it acts on a plan,
// and loads it at start before anything is opened, so a restored control plane followed by
// a broker restart never reopens a deleted or lower incarnation. Entries are never removed
// (like tombstones: nothing can tell when they stop mattering).
//
// Format, one name per line, tab-separated ('-' for absent):
//   sluice-broker-floors v1
//   <tenant>\t<namespace>\t<stream>\t<served>\t<deleted>
//
// A name may appear on several lines: the last one holds (every build reads it so). The
// broker rewrites the whole file only now and then (compaction); between rewrites it
// appends the floors a plan raises (append_floors: one write, one fdatasync, no rename and
// no directory fsync), so a change costs one sync whatever the number of names. Rewriting
// the file on every change cost two fsyncs and O(names) bytes per create or delete: with
// 10,000 tombstones it was most of a create's time (docs/benchmarks.md
// "sluice-catalog-bench").
//
// Torn tail: an append interrupted by a crash can leave a last line without its newline (or
// NUL bytes where the kernel had not written the data). Its fdatasync never returned, so no
// plan acted on it: load_floors ignores it and reports `torn_tail`, and the broker rewrites
// the file before it appends again. A bad line followed by a good one is corruption.
// Downgrades: an older build reads an appended file alike (last line wins) but refuses a
// torn tail as corrupt_data; after a crash, start this build once before going back.
//
// Errors are definite: storage_failure (I/O, naming the path) or corrupt_data (a line that
// does not parse, naming the line). Thread-safety: none; the broker's control thread calls.
#pragma once

#include <string>

#include "serving_plan.h"
#include "sluice/error.h"

namespace sluice::core {

// <data_dir>/broker/floors
std::string floors_path(const std::string& data_dir);

// What load_floors saw of the file, beyond the floors.
struct FloorsFileState {
  bool exists = false;
  std::size_t lines = 0;   // name lines read (a name counted once per line)
  bool torn_tail = false;  // an unfinished append was ignored: rewrite before appending
};

// An absent file is empty floors (a new data directory, or one from before this file).
Result<ServingFloors> load_floors(const std::string& path, FloorsFileState* state = nullptr);

// Replaces the file durably; creates its directory durably if missing.
Result<void> store_floors(const std::string& path, const ServingFloors& floors);

// Appends `changed` to an existing, untorn file (FloorsFileState) and fdatasyncs it.
Result<void> append_floors(const std::string& path, const ServingFloors& changed);

}  // namespace sluice::core
