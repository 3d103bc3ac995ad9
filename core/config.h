// Node configuration: documented keys, defaults, a property file and overrides.
//
// Precedence (highest first): `--set key=value` on the command line, the `--config`
// file (Poco property-file syntax: `key = value`, `#` comments), built-in defaults.
// Defaults give the embedded mode: roles controller+broker, raft-meta with one member,
// fs-storage under ./data, http-api on 127.0.0.1:8080.
//
// Every key is listed in kConfigKeys (config_keys.cc) and docs/configuration.md. An
// unknown key is a startup error (a typo must not silently fall back to a default),
// except under `plugins.<name>.`, which belongs to third-party plugins.
//
// Thread-safety: immutable after load(); all getters may be called from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::core {

struct ConfigKey {
  std::string_view key;
  std::string_view default_value;  // "" = no default (optional)
  std::string_view doc;
};
std::span<const ConfigKey> config_keys();

// A libpq connection string or URI with its password replaced by ***.
std::string redact_conninfo(std::string conninfo);

class Config {
 public:
  // Throws std::runtime_error with a one-line message on an unreadable file, an unknown
  // key, or a malformed `--set`.
  static Config load(const std::string& file, const std::vector<std::string>& overrides);

  bool has(std::string_view key) const;
  std::string get_string(std::string_view key, std::string_view def) const;
  // Throw std::invalid_argument naming the key when the value does not parse.
  std::int64_t get_int(std::string_view key, std::int64_t def) const;
  bool get_bool(std::string_view key, bool def) const;
  // Effective values of every documented key that has one, for `--print-config`; the
  // password in metadata.postgres.url is shown as ***.
  std::map<std::string, std::string> effective() const;
  const std::string& source() const { return source_; }

 private:
  std::map<std::string, std::string, std::less<>> values_;  // file + overrides
  std::string source_;
};

}  // namespace sluice::core
