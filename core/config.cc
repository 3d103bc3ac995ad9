#include "config.h"

#include <Poco/AutoPtr.h>
#include <Poco/Exception.h>
#include <Poco/Util/PropertyFileConfiguration.h>

#include <charconv>
#include <stdexcept>

namespace sluice::core {

namespace {
const ConfigKey* find_key(std::string_view key) {
  for (const auto& k : config_keys())
    if (k.key == key) return &k;
  return nullptr;
}
bool is_plugin_private(std::string_view key) { return key.starts_with("plugins.") && key != "plugins.dir"; }

void collect(const Poco::Util::AbstractConfiguration& cfg, const std::string& prefix,
             std::map<std::string, std::string, std::less<>>& out) {
  Poco::Util::AbstractConfiguration::Keys keys;
  cfg.keys(prefix, keys);
  for (const auto& k : keys) {
    const std::string full = prefix.empty() ? k : prefix + "." + k;
    if (cfg.hasProperty(full)) out[full] = cfg.getRawString(full);
    collect(cfg, full, out);
  }
}

std::string trim(std::string s) {
  const auto b = s.find_first_not_of(" \t");
  const auto e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}
}  // namespace

Config Config::load(const std::string& file, const std::vector<std::string>& overrides) {
  Config c;
  if (!file.empty()) {
    try {
      Poco::AutoPtr<Poco::Util::PropertyFileConfiguration> pf(
          new Poco::Util::PropertyFileConfiguration(file));
      collect(*pf, "", c.values_);
    } catch (const Poco::Exception& e) {
      throw std::runtime_error("cannot read config file " + file + ": " + e.displayText());
    }
    c.source_ = file;
  } else {
    c.source_ = "(built-in defaults)";
  }
  for (const auto& o : overrides) {
    const auto eq = o.find('=');
    if (eq == std::string::npos || eq == 0)
      throw std::runtime_error("--set expects key=value, got '" + o + "'");
    c.values_[trim(o.substr(0, eq))] = trim(o.substr(eq + 1));
  }
  for (const auto& [k, v] : c.values_) {
    if (!find_key(k) && !is_plugin_private(k))
      throw std::runtime_error("unknown configuration key '" + k + "' (in " + c.source_ +
                               "); see docs/configuration.md or `sluiced --help-config`");
  }
  return c;
}

bool Config::has(std::string_view key) const { return values_.find(key) != values_.end(); }

std::string Config::get_string(std::string_view key, std::string_view def) const {
  if (auto it = values_.find(key); it != values_.end()) return it->second;
  if (const auto* k = find_key(key); k && !k->default_value.empty()) return std::string(k->default_value);
  return std::string(def);
}

std::int64_t Config::get_int(std::string_view key, std::int64_t def) const {
  const std::string s = get_string(key, "");
  if (s.empty()) return def;
  std::int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size())
    throw std::invalid_argument("configuration key '" + std::string(key) +
                                "' must be an integer, got '" + s + "'");
  return v;
}

bool Config::get_bool(std::string_view key, bool def) const {
  const std::string s = get_string(key, "");
  if (s.empty()) return def;
  if (s == "true" || s == "1" || s == "yes" || s == "on") return true;
  if (s == "false" || s == "0" || s == "no" || s == "off") return false;
  throw std::invalid_argument("configuration key '" + std::string(key) +
                              "' must be true or false, got '" + s + "'");
}

std::string redact_conninfo(std::string v) {
  // URI form: scheme://user:PASSWORD@host...
  if (const auto scheme = v.find("://"); scheme != std::string::npos) {
    const auto at = v.find('@', scheme + 3);
    const auto colon = v.find(':', scheme + 3);
    if (at != std::string::npos && colon != std::string::npos && colon < at)
      v.replace(colon + 1, at - colon - 1, "***");
  }
  // key=value form (and a URI's ?password=...): password=VALUE up to a space, & or the end.
  for (std::size_t p = v.find("password="); p != std::string::npos; p = v.find("password=", p + 1)) {
    const std::size_t start = p + 9;
    std::size_t end = start;
    if (end < v.size() && v[end] == '\'') {
      end = v.find('\'', end + 1);
      end = end == std::string::npos ? v.size() : end + 1;
    } else {
      while (end < v.size() && v[end] != ' ' && v[end] != '&') ++end;
    }
    v.replace(start, end - start, "***");
  }
  return v;
}

std::map<std::string, std::string> Config::effective() const {
  std::map<std::string, std::string> out;
  for (const auto& k : config_keys()) {
    const std::string v = get_string(k.key, "");
    if (!v.empty()) out[std::string(k.key)] = v;
  }
  for (const auto& [k, v] : values_) out[k] = v;
  // Never printed: the catalog database's password (docs/security.md).
  if (auto it = out.find("metadata.postgres.url"); it != out.end()) it->second = redact_conninfo(it->second);
  return out;
}

}  // namespace sluice::core
