// Socket helpers the controller RPC server and client share (rpc.h).
#pragma once

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <string>

namespace sluice::raft_meta::rpc_socket {

// The longest long poll (`changes_after` wait_ms) a server honours.
inline constexpr std::int64_t kMaxWaitMs = 30000;

// "ip:port" -> ip, port (0..65535). false when malformed.
inline bool split_host_port(const std::string& a, std::string& ip, int& port) {
  auto colon = a.rfind(':');
  if (colon == std::string::npos) return false;
  ip = a.substr(0, colon);
  try {
    port = std::stoi(a.substr(colon + 1));
  } catch (...) {
    return false;
  }
  return port >= 0 && port <= 65535;
}

// Send and receive timeouts of `t`, and TCP_NODELAY.
inline void set_timeouts(int fd, std::chrono::milliseconds t) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(t.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((t.count() % 1000) * 1000);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

}  // namespace sluice::raft_meta::rpc_socket
