// The fixture of the cluster transport's tests over loopback TCP (cluster_transport_test.cc,
// cluster_transport_raft_test.cc): transports on one uv loop in the test thread, what each
// reported, raw sockets, and a loop runner that polls conditions with a generous deadline.
#pragma once

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cluster_transport.h"

extern "C" {
#include <raft.h>
#include <raft/uv.h>
}

namespace sluice::raft_meta::transport_test {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

inline constexpr auto kPatience = 30s;

inline std::uint16_t free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sa.sin_port = 0;
  EXPECT_EQ(::bind(fd, reinterpret_cast<struct sockaddr*>(&sa), sizeof sa), 0);
  socklen_t len = sizeof sa;
  ::getsockname(fd, reinterpret_cast<struct sockaddr*>(&sa), &len);
  ::close(fd);
  return ntohs(sa.sin_port);
}

inline std::string loopback(std::uint16_t port) { return "127.0.0.1:" + std::to_string(port); }

inline const char* level_name(LogLevel l) {
  switch (l) {
    case LogLevel::debug: return "DEBUG";
    case LogLevel::info: return "INFO";
    case LogLevel::warn: return "WARN";
    case LogLevel::error: return "ERROR";
  }
  return "?";
}

// One transport under test with what it reported.
struct Endpoint {
  std::string name;
  raft_id id = 0;
  std::string address;
  std::string cluster_id;  // read by the transport's getter at every connection
  struct raft_uv_transport transport{};
  struct Line {
    LogLevel level;
    std::string text;
  };
  std::vector<Line> logs;
  struct Accepted {
    raft_id id;
    std::string address;
    uv_stream_t* stream;
  };
  std::vector<Accepted> accepted;
  bool close_called = false;
  bool closed = false;  // the transport's close callback fired
  int closed_order = 0;
  bool freed = false;

  int count(LogLevel level, std::string_view needle) const {
    int n = 0;
    for (const auto& l : logs)
      if (l.level == level && l.text.find(needle) != std::string::npos) n++;
    return n;
  }
  bool logged(LogLevel level, std::string_view needle) const { return count(level, needle) > 0; }
  int warnings() const {
    int n = 0;
    for (const auto& l : logs) n += l.level >= LogLevel::warn;
    return n;
  }
};

inline int g_order = 0;  // sequence of callbacks, to check their order

struct Conn {
  struct raft_uv_connect req{};
  bool done = false;
  int status = -1;
  uv_stream_t* stream = nullptr;
  int order = 0;
  int calls = 0;
};

inline void on_connect(struct raft_uv_connect* req, uv_stream_t* stream, int status) {
  auto* c = static_cast<Conn*>(req->data);
  c->calls++;
  c->done = true;
  c->status = status;
  c->stream = stream;
  c->order = ++g_order;
}

inline void on_accept(struct raft_uv_transport* t, raft_id id, const char* address, uv_stream_t* stream) {
  auto* e = static_cast<Endpoint*>(t->data);
  e->accepted.push_back({id, address, stream});
}

inline void on_transport_closed(struct raft_uv_transport* t) {
  auto* e = static_cast<Endpoint*>(t->data);
  e->closed = true;
  e->closed_order = ++g_order;
}

// Reads everything arriving on a handed-over stream into `got`.
struct Reader {
  std::string got;
  char buf[4096];
  bool eof = false;
};

inline void reader_alloc(uv_handle_t* h, size_t, uv_buf_t* b) {
  auto* r = static_cast<Reader*>(h->data);
  *b = uv_buf_init(r->buf, sizeof r->buf);
}
inline void reader_read(uv_stream_t* s, ssize_t n, const uv_buf_t*) {
  auto* r = static_cast<Reader*>(s->data);
  if (n > 0) r->got.append(r->buf, static_cast<size_t>(n));
  if (n < 0) {
    r->eof = true;
    uv_read_stop(s);
  }
}

// --- raw sockets (blocking connect, non-blocking reads) ---

inline int raw_connect(std::uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sa.sin_port = htons(port);
  EXPECT_EQ(::connect(fd, reinterpret_cast<struct sockaddr*>(&sa), sizeof sa), 0) << strerror(errno);
  return fd;
}

inline void raw_send(int fd, std::string_view bytes) {
  ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
}

// Drains what is readable into `got`; true once the other end closed (EOF or reset).
inline bool raw_closed(int fd, std::string* got = nullptr) {
  char buf[1024];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      if (got) got->append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) return true;
    return errno != EAGAIN && errno != EWOULDBLOCK;
  }
}

inline int raw_listener(std::uint16_t* port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd, reinterpret_cast<struct sockaddr*>(&sa), sizeof sa), 0);
  EXPECT_EQ(::listen(fd, 16), 0);
  socklen_t len = sizeof sa;
  ::getsockname(fd, reinterpret_cast<struct sockaddr*>(&sa), &len);
  *port = ntohs(sa.sin_port);
  ::fcntl(fd, F_SETFL, O_NONBLOCK);
  return fd;
}

inline std::string le32(std::uint32_t v) {
  std::string s;
  for (int i = 0; i < 4; i++) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return s;
}
inline std::string le64(std::uint64_t v) {
  std::string s;
  for (int i = 0; i < 8; i++) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return s;
}

inline ClusterTransportOptions quiet_opts() {
  ClusterTransportOptions o;
  o.log_repeat_interval_ms = 0;  // every refusal logged: tests count them
  return o;
}

class ClusterTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(uv_loop_init(&loop_), 0);
    ASSERT_EQ(uv_timer_init(&loop_, &tick_), 0);
  }

  void TearDown() override {
    close_all();
    for (uv_stream_t* s : streams_)
      uv_close(reinterpret_cast<uv_handle_t*>(s), [](uv_handle_t* h) { raft_free(h); });
    for (int fd : fds_) ::close(fd);
    uv_close(reinterpret_cast<uv_handle_t*>(&tick_), nullptr);
    for (int i = 0; i < 10 && uv_loop_alive(&loop_); i++) uv_run(&loop_, UV_RUN_NOWAIT);
    // Every handle of every transport has been closed: nothing is left on the loop.
    EXPECT_EQ(uv_loop_close(&loop_), 0) << "uv handles left open";
  }

  // Closes (transport->close, then cluster_transport_close) every endpoint still open.
  virtual void close_all() {
    for (auto& e : endpoints_) {
      if (!e->close_called) {
        e->close_called = true;
        e->transport.close(&e->transport, on_transport_closed);
      }
    }
    EXPECT_TRUE(run_until([&] {
      for (auto& e : endpoints_)
        if (!e->closed) return false;
      return true;
    }));
    for (auto& e : endpoints_) {
      if (!e->freed) {
        cluster_transport_close(&e->transport);
        e->freed = true;
      }
    }
  }

  template <class Pred>
  bool run_until(Pred pred, std::chrono::milliseconds patience = kPatience) {
    auto deadline = std::chrono::steady_clock::now() + patience;
    uv_timer_start(&tick_, [](uv_timer_t*) {}, 5, 5);  // UV_RUN_ONCE returns at least every 5 ms
    bool ok = pred();
    while (!ok && std::chrono::steady_clock::now() < deadline) {
      uv_run(&loop_, UV_RUN_ONCE);
      ok = pred();
    }
    uv_timer_stop(&tick_);
    return ok;
  }

  Endpoint& make(std::string name, std::string cluster_id, raft_id id,
                 ClusterTransportOptions opts = quiet_opts(), std::uint16_t port = 0) {
    auto e = std::make_unique<Endpoint>();
    Endpoint* p = e.get();
    p->name = std::move(name);
    p->id = id;
    p->cluster_id = std::move(cluster_id);
    p->address = loopback(port ? port : free_port());
    p->transport.data = p;
    int rv = cluster_transport_init(
        &p->transport, &loop_, [p] { return p->cluster_id; },
        [p](LogLevel level, const std::string& text) {
          p->logs.push_back({level, text});
          if (level >= LogLevel::info)
            std::cerr << "[" << p->name << "] " << level_name(level) << " " << text << "\n";
        },
        opts);
    EXPECT_EQ(rv, 0);
    EXPECT_EQ(p->transport.data, p) << "init must keep transport->data";
    endpoints_.push_back(std::move(e));
    return *p;
  }

  // transport->init + listen, as the uv io does.
  void start(Endpoint& e, bool listen = true) {
    ASSERT_EQ(e.transport.init(&e.transport, e.id, e.address.c_str()), 0) << e.transport.errmsg;
    if (listen) {
      ASSERT_EQ(e.transport.listen(&e.transport, on_accept), 0) << e.transport.errmsg;
    }
  }

  Conn& connect(Endpoint& from, raft_id to_id, const std::string& to_address, int* rv_out = nullptr) {
    conns_.push_back(std::make_unique<Conn>());
    Conn& c = *conns_.back();
    c.req.data = &c;
    int rv = from.transport.connect(&from.transport, &c.req, to_id, to_address.c_str(), on_connect);
    if (rv_out) {
      *rv_out = rv;
    } else {
      EXPECT_EQ(rv, 0) << from.transport.errmsg;
    }
    return c;
  }

  std::uint16_t port_of(const Endpoint& e) { return cluster_transport_listen_port(&e.transport); }

  int track(int fd) {
    fds_.push_back(fd);
    return fd;
  }
  void own(uv_stream_t* s) {
    if (s) streams_.push_back(s);
  }

  uv_loop_t loop_{};
  uv_timer_t tick_{};
  std::deque<std::unique_ptr<Endpoint>> endpoints_;
  std::deque<std::unique_ptr<Conn>> conns_;
  std::vector<uv_stream_t*> streams_;
  std::vector<int> fds_;
};

}  // namespace sluice::raft_meta::transport_test
