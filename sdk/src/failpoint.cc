#include "sluice/failpoint.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "sluice/log.h"

namespace sluice {

namespace {
const std::string& armed() {
  static const std::string list = [] {
    const char* v = std::getenv("SLUICE_FAILPOINTS");
    return v ? "," + std::string(v) + "," : std::string();
  }();
  return list;
}
}  // namespace

void failpoint(std::string_view name) {
  const std::string& list = armed();
  if (list.empty()) return;
  if (list.find("," + std::string(name) + ":stop,") != std::string::npos) {
    log_line(LogLevel::warn, "failpoint", "reached " + std::string(name) + ": stopping the process until SIGCONT");
    ::kill(::getpid(), SIGSTOP);
    return;
  }
  if (list.find("," + std::string(name) + ",") == std::string::npos) return;
  log_line(LogLevel::warn, "failpoint", "reached " + std::string(name) + ": killing the process");
  ::kill(::getpid(), SIGKILL);
  ::_exit(137);
}

}  // namespace sluice
