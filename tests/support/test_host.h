// A PluginHost for unit tests: configuration from a map, identity fixed, a temporary
// data directory removed at destruction, logs captured (and echoed to stderr).
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "sluice/host.h"
#include "sluice/log.h"

namespace sluice::testing {

class TestHost : public PluginHost {
 public:
  explicit TestHost(std::map<std::string, std::string> config = {}) : config_(std::move(config)) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "sluice-test-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    dir_ = tmpl;
  }
  ~TestHost() override {
    std::error_code ec;
    if (!keep_) std::filesystem::remove_all(dir_, ec);
  }

  void set(const std::string& k, const std::string& v) { config_[k] = v; }
  void keep_dir() { keep_ = true; }

  std::string config_string(std::string_view key, std::string_view def) const override {
    auto it = config_.find(std::string(key));
    return it == config_.end() ? std::string(def) : it->second;
  }
  std::int64_t config_int(std::string_view key, std::int64_t def) const override {
    auto it = config_.find(std::string(key));
    return it == config_.end() ? def : std::stoll(it->second);
  }
  bool config_bool(std::string_view key, bool def) const override {
    auto it = config_.find(std::string(key));
    return it == config_.end() ? def : (it->second == "true" || it->second == "1");
  }
  bool config_has(std::string_view key) const override {
    return config_.count(std::string(key)) > 0;
  }
  NodeId node_id() const override { return NodeId{1}; }
  std::string directory_id() const override { return "00000000-0000-4000-8000-000000000001"; }
  std::string data_dir() const override { return dir_; }
  Result<void> adopt_cluster_id(const std::string& id) override {
    std::lock_guard lk(mu_);
    if (!cluster_id_.empty() && cluster_id_ != id)
      return Error(Errc::cluster_id_mismatch, "have " + cluster_id_ + ", offered " + id);
    cluster_id_ = id;
    return {};
  }
  std::string cluster_id() const override {
    std::lock_guard lk(mu_);
    return cluster_id_;
  }
  void log(LogLevel level, std::string_view component, std::string_view message) override {
    log_line(level, component, message);
    std::lock_guard lk(mu_);
    logs_.push_back(std::string(component) + ": " + std::string(message));
  }
  // PluginHost::stop_node: recorded, the process goes on (tests look at stop_requests()).
  void stop_node(std::string_view reason) override {
    log(LogLevel::error, "host", "stop requested: " + std::string(reason));
    std::lock_guard lk(mu_);
    stops_.emplace_back(reason);
  }
  std::vector<std::string> stop_requests() const {
    std::lock_guard lk(mu_);
    return stops_;
  }
  std::vector<std::string> logs() const {
    std::lock_guard lk(mu_);
    return logs_;
  }
  bool logged(std::string_view needle) const {
    std::lock_guard lk(mu_);
    for (auto& l : logs_)
      if (l.find(needle) != std::string::npos) return true;
    return false;
  }

 private:
  std::map<std::string, std::string> config_;
  std::string dir_;
  bool keep_ = false;
  mutable std::mutex mu_;
  std::string cluster_id_;
  std::vector<std::string> logs_;
  std::vector<std::string> stops_;
};

}  // namespace sluice::testing
