// Minimal logging for code that has no PluginHost at hand (tools, tests). Plugins log
// through PluginHost::log so that the host owns the format, destination and level.
//
// The threshold (configuration key `log.level`, docs/configuration.md) is process-wide
// state of this copy of the SDK library: sluiced sets it once at start-up, before any
// plugin is loaded; lines below it are dropped. Thread-safety: every function may be
// called from any thread.
#pragma once

#include <string_view>

#include "sluice/error.h"
#include "sluice/host.h"

namespace sluice {

// Writes "2026-12-02T12:00:00.123Z LEVEL component: message\n" to stderr atomically
// (one write(2) per line), unless `level` is below the threshold.
void log_line(LogLevel level, std::string_view component, std::string_view message);

// The lowest level written (default LogLevel::info).
void set_log_threshold(LogLevel level);
LogLevel log_threshold();
bool log_enabled(LogLevel level);

// "debug", "info", "warn" or "error"; anything else is invalid_argument, naming the value.
Result<LogLevel> parse_log_level(std::string_view name);

}  // namespace sluice
