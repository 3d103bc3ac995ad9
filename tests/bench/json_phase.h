// The request bodies sluice-bench publishes, binary and JSON, built once per connection
// before a phase starts (json_phase.cc), and the JSON-vs-binary lines of the results
// (issue 12: "The JSON path may cost more, but report its figure").
#pragma once

#include <string>

namespace sluice_bench {

inline constexpr const char* kBatchMedia = "application/vnd.sluice.batch";
inline constexpr const char* kJsonMedia = "application/json";
// How the JSON phase sends values, for the output and docs/benchmarks.md.
inline constexpr const char* kJsonValueEncoding =
    "\"value\" as a plain JSON string (the values are ASCII letters: no escapes, no base64)";

// `records` records of `record_bytes` bytes; record i's value is the letter 'a' + i % 26
// repeated. Binary batch (docs/api.md "Publish"): u32 key_len | u32 value_len | key | value,
// keyless when `key` is null.
std::string binary_body(int records, int record_bytes, const std::string* key);
// The same keyless records as a JSON publish: {"records":[{"value":"aaa..."},...]}.
std::string json_body(int records, int record_bytes);

// One phase's figures, as the results table prints them.
struct Figures {
  double rps = 0, mbps = 0, p50 = 0, p99 = 0, cpu_us = -1;
};
// The JSON line's companions: what a value is on the wire, and JSON / binary for
// records/s, latency and server CPU per record.
void print_json_vs_binary(const Figures& binary, const Figures& json);

}  // namespace sluice_bench
