// systemd's readiness protocol (sd_notify(3)) without libsystemd: one datagram of
// "KEY=VALUE" lines to the unix socket named by $NOTIFY_SOCKET ("@..." is the abstract
// namespace). Without the variable (not started by systemd with Type=notify) it does
// nothing. Best effort: a failed send is not an error of the node.
//
// sluiced sends STATUS= at each start phase, READY=1 once it serves, STOPPING=1 when it
// drains (packaging/systemd/sluiced.service, docs/operations.md "systemd").
#pragma once

#include <string>

namespace sluice::core {

// Sends `state` (newline-separated assignments). True if a datagram was sent.
bool systemd_notify(const std::string& state);

}  // namespace sluice::core
