// The plugin entry point: SLUICE_PLUGIN(api, "http-api"). Nothing throws across it.
#include <exception>
#include <string>

#include "config.h"
#include "server.h"
#include "sluice/plugin.h"

namespace {

void* create(sluice::PluginHost& host, std::string* error) {
  try {
    auto cfg = sluice::http_api::HttpConfig::from_host(host);
    auto* server = new sluice::http_api::HttpServer(std::move(cfg), &host);
    return static_cast<void*>(static_cast<sluice::ApiServer*>(server));
  } catch (const std::exception& e) {
    if (error) *error = std::string("http-api: ") + e.what();
  } catch (...) {
    if (error) *error = "http-api: unknown error in create()";
  }
  return nullptr;
}

void destroy(void* object) {
  delete static_cast<sluice::ApiServer*>(object);
}

}  // namespace

SLUICE_PLUGIN(sluice::PluginKind::api, "http-api", &create, &destroy)
