// A tiny blocking HTTP/1.1 client over POSIX sockets for the http-api tests (no Beast, to
// keep the test build cheap). One Conn is one TCP connection; responses are read by
// Content-Length, so keep-alive works. A 30 s receive timeout turns a hang into a failure.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cctype>
#include <map>
#include <stdexcept>
#include <string>

namespace sluice::testing {

struct HttpResult {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  std::string header(const std::string& k) const {
    auto it = headers.find(k);
    return it == headers.end() ? "" : it->second;
  }
};

class Conn {
 public:
  explicit Conn(std::uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) throw std::runtime_error("socket");
    timeval tv{30, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
      throw std::runtime_error("connect");
  }
  ~Conn() { ::close(fd_); }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  void send_raw(const std::string& bytes) {
    std::size_t off = 0;
    while (off < bytes.size()) {
      ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) throw std::runtime_error("send");
      off += static_cast<std::size_t>(n);
    }
  }

  HttpResult request(const std::string& method, const std::string& target,
                     const std::string& body = "", const std::string& content_type = "",
                     bool keep_alive = true) {
    std::string req = method + " " + target + " HTTP/1.1\r\nHost: localhost\r\n";
    if (!content_type.empty()) req += "Content-Type: " + content_type + "\r\n";
    if (!body.empty() || method == "POST" || method == "PUT")
      req += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    if (!keep_alive) req += "Connection: close\r\n";
    req += "\r\n" + body;
    send_raw(req);
    return read_response();
  }

  HttpResult read_response() {
    std::size_t hdr_end;
    while ((hdr_end = buf_.find("\r\n\r\n")) == std::string::npos)
      if (!fill()) throw std::runtime_error("connection closed before the response headers");
    HttpResult r;
    const std::string head = buf_.substr(0, hdr_end);
    buf_.erase(0, hdr_end + 4);
    std::size_t line_end = head.find("\r\n");
    const std::string status_line = head.substr(0, line_end);
    r.status = std::stoi(status_line.substr(9, 3));
    std::size_t pos = line_end == std::string::npos ? head.size() : line_end + 2;
    while (pos < head.size()) {
      std::size_t e = head.find("\r\n", pos);
      if (e == std::string::npos) e = head.size();
      const std::string line = head.substr(pos, e - pos);
      const auto colon = line.find(':');
      std::string k = line.substr(0, colon);
      for (auto& c : k) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      std::string v = line.substr(colon + 1);
      while (!v.empty() && v.front() == ' ') v.erase(0, 1);
      r.headers[k] = v;
      pos = e + 2;
    }
    std::size_t len = 0;
    if (auto it = r.headers.find("content-length"); it != r.headers.end())
      len = std::stoull(it->second);
    while (buf_.size() < len)
      if (!fill()) throw std::runtime_error("connection closed inside the body");
    r.body = buf_.substr(0, len);
    buf_.erase(0, len);
    return r;
  }

  // True if the server closed the connection (EOF) with nothing more to read.
  bool at_eof() {
    if (!buf_.empty()) return false;
    return !fill();
  }

 private:
  bool fill() {
    char tmp[65536];
    ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
    if (n <= 0) return false;
    buf_.append(tmp, static_cast<std::size_t>(n));
    return true;
  }
  int fd_ = -1;
  std::string buf_;
};

}  // namespace sluice::testing
