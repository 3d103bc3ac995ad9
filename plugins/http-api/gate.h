// Guards every post from a foreign thread (core, storage, admin pool) onto the io_context.
// HttpServer::stop() closes it before it tears the io_context and the pool down, so a late
// Node callback never touches a dead io_context (server.h "Thread model").
#pragma once

#include <mutex>

namespace sluice::http_api {

struct Gate {
  std::mutex mu;
  bool open = true;
};

}  // namespace sluice::http_api
