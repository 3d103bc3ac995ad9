// Change payloads (JSON text in changes.payload), the same shape raft-meta records.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/metadata.h"

namespace sluice::postgres_meta {

std::string names_payload(const std::string& tenant, const std::string* ns);
std::string stream_change_payload(const StreamInfo& s, const std::vector<Assignment>& as,
                                  const std::optional<Tombstone>& t);
// cache_created / cache_deleted: the cache and, for a delete, the cache tombstone written.
std::string cache_change_payload(const CacheInfo& c, const std::optional<Tombstone>& t);
// counter_created / counter_deleted: the counter and, for a delete, its tombstone.
std::string counter_change_payload(const CounterInfo& c, const std::optional<Tombstone>& t);
std::string broker_payload(const BrokerInfo& b);
std::string feature_payload(const std::string& name);
// shard_changed: the one assignment as an update_shard left it.
std::string shard_payload(const Assignment& a);
// assignments.in_sync: the JSON array of {"broker","directory_id"}; '' when empty. decode
// throws std::exception on a malformed value.
std::string encode_in_sync(const std::vector<InSyncReplica>& v);
std::vector<InSyncReplica> decode_in_sync(const std::string& s);

// Decodes one row of `changes`. An unknown kind or a malformed payload is an error.
Result<ChangeEvent> decode_change(std::int64_t seq, std::string_view kind,
                                  std::string_view payload);

// libpq connection strings: a human-readable form without the password (host, port,
// dbname, user), or an error that does not echo the string.
Result<std::string> describe_conninfo(const std::string& conninfo);
// The password in `conninfo` (empty if none or unparseable); used to scrub messages.
std::string conninfo_password(const std::string& conninfo);
// `msg` with every occurrence of `secret` replaced by "***" (no-op for an empty secret).
std::string scrub(std::string msg, const std::string& secret);

}  // namespace sluice::postgres_meta
