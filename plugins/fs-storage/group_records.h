// The consumer group's journal records (group.h "On disk"): record types and encoding,
// shared by the group's files (group.cc, group_journal.cc, group_dead_letters.cc).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "sluice/record_batch.h"

namespace sluice::fs_storage::group_records {

inline constexpr std::uint8_t kDeliver = 1, kAck = 2, kDead = 3, kReplayed = 4, kGen = 5,
                              kReplayPending = 6;
inline constexpr std::size_t kRecHeader = 9;  // u32 payload_len | u32 crc | u8 type
// How much of the shard (or the dead-letter log) one read asks for.
inline constexpr std::size_t kFetchBytes = 1 << 20;
// What one group delivery holds of new records' batches, at most (and at least one batch).
inline constexpr std::size_t kMaxDeliveryBytes = 4u << 20;
// How long a replay waits for an earlier, unfinished one to settle (its batch committed or
// cut) before it answers transient.
inline constexpr std::chrono::milliseconds kReplaySettleWait{5000};

inline void put64(std::string& s, std::uint64_t v) {
  char b[8];
  wire::put_u64(b, v);
  s.append(b, 8);
}
inline void put32(std::string& s, std::uint32_t v) {
  char b[4];
  wire::put_u32(b, v);
  s.append(b, 4);
}

inline std::string journal_record(std::uint8_t type, const std::string& payload) {
  std::string rec;
  rec.reserve(kRecHeader + payload.size());
  put32(rec, static_cast<std::uint32_t>(payload.size()));
  put32(rec, 0);
  rec.push_back(static_cast<char>(type));
  rec += payload;
  wire::put_u32(rec.data() + 4, crc32c(rec.data() + 8, rec.size() - 8));
  return rec;
}

}  // namespace sluice::fs_storage::group_records
