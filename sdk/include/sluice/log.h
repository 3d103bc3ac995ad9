// Minimal logging for code that has no PluginHost at hand (tools, tests). Plugins log
// through PluginHost::log so that the host owns the format and destination.
#pragma once

#include <string_view>

#include "sluice/host.h"

namespace sluice {

// Writes "2026-12-02T12:00:00.123Z LEVEL component: message\n" to stderr atomically
// (one write(2) per line).
void log_line(LogLevel level, std::string_view component, std::string_view message);

}  // namespace sluice
