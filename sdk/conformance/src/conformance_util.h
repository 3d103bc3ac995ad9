// Helpers shared by the tests of the storage conformance kit (not installed).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "sluice/record_batch.h"
#include "sluice/storage.h"

namespace sluice::testing::conformance_internal {

// acme/orders/<stream>, shard `shard`, incarnation `inc`.
ShardRef shard_ref(std::uint32_t shard = 0, std::uint64_t inc = 0, const std::string& stream = "events");

// A batch of `records` records whose values are "<tag>#<i>" (keys "k<i>"). producer_id
// != 0 makes it an idempotent producer's batch with sequence `seq`.
std::string make_batch(const std::string& tag, std::uint32_t records,
                       std::uint64_t producer_id = 0, std::uint64_t seq = 0);
std::vector<std::string> values_of(const std::string& batch);

// Appends and waits for the callback (60 s cap; fails the test on timeout). A second call
// of the same callback fails the test.
Result<AppendResult> append_wait(ShardLog& shard, std::string batch, AckMode ack = AckMode::leader);

// Polls `pred` every millisecond for up to `timeout`; true once it holds.
bool eventually(const std::function<bool()>& pred,
                std::chrono::milliseconds timeout = std::chrono::seconds(30));

// Every record value from `from` up to the high watermark, keyed by offset, following
// next_offset. Every batch must pass check_batch and carry the shard's incarnation; a
// read error or a bad batch fails the test.
std::map<std::uint64_t, std::string> read_all(ShardLog& shard, std::uint64_t from = 0);

// The value of header `name` of the record at `offset` in `batch`, or "" if absent.
std::string header_of(const std::string& batch, std::uint64_t offset, std::string_view name);

}  // namespace sluice::testing::conformance_internal
