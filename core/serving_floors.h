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
// Errors are definite: storage_failure (I/O, naming the path) or corrupt_data (a line that
// does not parse, naming the line). Thread-safety: none; the broker's control thread calls.
#pragma once

#include <string>

#include "serving_plan.h"
#include "sluice/error.h"

namespace sluice::core {

// <data_dir>/broker/floors
std::string floors_path(const std::string& data_dir);

// An absent file is empty floors (a new data directory, or one from before this file).
Result<ServingFloors> load_floors(const std::string& path);

// Replaces the file durably; creates its directory durably if missing.
Result<void> store_floors(const std::string& path, const ServingFloors& floors);

}  // namespace sluice::core
