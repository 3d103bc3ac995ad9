#include "sluice/log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <string>

namespace sluice {

namespace {
std::atomic<LogLevel> g_threshold{LogLevel::info};
}  // namespace

void set_log_threshold(LogLevel level) { g_threshold.store(level, std::memory_order_relaxed); }

LogLevel log_threshold() { return g_threshold.load(std::memory_order_relaxed); }

bool log_enabled(LogLevel level) { return static_cast<int>(level) >= static_cast<int>(log_threshold()); }

Result<LogLevel> parse_log_level(std::string_view name) {
  if (name == "debug") return LogLevel::debug;
  if (name == "info") return LogLevel::info;
  if (name == "warn") return LogLevel::warn;
  if (name == "error") return LogLevel::error;
  return Error(Errc::invalid_argument,
               "log.level must be debug, info, warn or error, got '" + std::string(name) + "'");
}

void log_line(LogLevel level, std::string_view component, std::string_view message) {
  if (!log_enabled(level)) return;
  using namespace std::chrono;
  const auto now = system_clock::now();
  const std::time_t t = system_clock::to_time_t(now);
  const auto ms = duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char ts[64];
  std::snprintf(ts, sizeof ts, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  const char* lv = level == LogLevel::debug  ? "DEBUG"
                   : level == LogLevel::info ? "INFO"
                   : level == LogLevel::warn ? "WARN"
                                             : "ERROR";
  std::string line;
  line.reserve(64 + component.size() + message.size());
  line.append(ts).append(" ").append(lv).append(" ").append(component).append(": ").append(message);
  line.push_back('\n');
  // One write(2) so that lines from different threads never interleave.
  ssize_t n = ::write(2, line.data(), line.size());
  (void)n;
}

}  // namespace sluice
