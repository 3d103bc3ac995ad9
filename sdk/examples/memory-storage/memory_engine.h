// memory-storage: the smallest complete storage engine, as a template for third parties.
//
// It keeps every shard's batches in memory, so NOTHING survives a restart and an
// AckMode::leader acknowledgement means only "in this process's memory". It exists to
// show the contract (sluice/storage.h): offsets assigned per shard incarnation from 0,
// visibility, long-poll notification, exactly-once callbacks, and idempotent producers
// (per incarnation, the last 5 sequences of each producer). Do not use it for data.
//
// Not implemented, each answered with Errc::not_supported (definite): consumer groups and
// dead letters. memory_storage_conformance_test.cc runs the SDK's storage conformance kit
// with exactly these opt-outs (docs/plugin-sdk.md "Checking a storage engine").
//
// Thread-safety: as storage.h requires, every method may be called from any thread.
#pragma once

#include <memory>

#include "sluice/host.h"
#include "sluice/storage.h"

namespace memory_storage {

// `host` must outlive the engine (it is used for logging).
std::unique_ptr<sluice::StorageEngine> make_memory_engine(sluice::PluginHost& host);

}  // namespace memory_storage
