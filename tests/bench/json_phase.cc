// Request bodies of sluice-bench (binary batch and JSON) and the JSON / binary comparison.
// The JSON phase publishes exactly the keyless binary phase's records: same values, same
// records per request, no key and no shard (so the same sticky shard per request), same
// ack; only the encoding and Content-Type differ. Bodies are built once per connection
// before the load starts: the client's loop sends the same string again and again.
#include "json_phase.h"

#include <cstdint>
#include <cstdio>

namespace sluice_bench {

std::string binary_body(int records, int record_bytes, const std::string* key) {
  std::string body;
  body.reserve(static_cast<std::size_t>(records) * (8 + (key ? key->size() : 0) + record_bytes));
  for (int i = 0; i < records; ++i) {
    const std::uint32_t kl = key ? static_cast<std::uint32_t>(key->size()) : 0xffffffffu;
    const std::uint32_t vl = static_cast<std::uint32_t>(record_bytes);
    body.append(reinterpret_cast<const char*>(&kl), 4).append(reinterpret_cast<const char*>(&vl), 4);
    if (key) body += *key;
    body.append(record_bytes, static_cast<char>('a' + i % 26));
  }
  return body;
}

std::string json_body(int records, int record_bytes) {
  std::string body = R"({"records":[)";
  body.reserve(body.size() + static_cast<std::size_t>(records) * (14 + record_bytes) + 2);
  for (int i = 0; i < records; ++i) {
    body += i ? R"(,{"value":")" : R"({"value":")";
    body.append(record_bytes, static_cast<char>('a' + i % 26));
    body += R"("})";
  }
  body += "]}";
  return body;
}

void print_json_vs_binary(const Figures& binary, const Figures& json) {
  auto ratio = [](double a, double b) { return b > 0 ? a / b : 0; };
  std::printf("  %-22s %s\n", "", kJsonValueEncoding);
  std::printf("  JSON / binary          records/s %.2f, p50 %.2f, p99 %.2f", ratio(json.rps, binary.rps),
              ratio(json.p50, binary.p50), ratio(json.p99, binary.p99));
  if (binary.cpu_us > 0 && json.cpu_us >= 0)
    std::printf(", server CPU per record %.2f (%.2f vs %.2f us)", ratio(json.cpu_us, binary.cpu_us), json.cpu_us,
                binary.cpu_us);
  std::printf("\n");
}

}  // namespace sluice_bench
