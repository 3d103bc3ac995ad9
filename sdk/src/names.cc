#include "sluice/names.h"

#include <string>

namespace sluice {

std::string_view to_string(NameKind k) {
  switch (k) {
    case NameKind::tenant: return "tenant";
    case NameKind::ns: return "namespace";
    case NameKind::stream: return "stream";
    case NameKind::group: return "group";
    case NameKind::cache: return "cache";
    case NameKind::counter: return "counter";
  }
  return "name";
}

namespace {
bool is_alnum(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}
}  // namespace

Result<void> validate_name(NameKind kind, std::string_view name) {
  const std::string what(to_string(kind));
  if (name.empty()) return Error(Errc::invalid_name, what + " name is empty");
  if (name.size() > kMaxNameBytes)
    return Error(Errc::invalid_name, what + " name is " + std::to_string(name.size()) +
                                         " bytes; the limit is " + std::to_string(kMaxNameBytes));
  for (std::size_t i = 0; i < name.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(name[i]);
    const bool ok = is_alnum(c) || c == '_' || (i > 0 && (c == '.' || c == '-'));
    if (!ok) {
      std::string shown;
      if (c >= 0x21 && c < 0x7f) {
        shown = std::string("'") + static_cast<char>(c) + "'";
      } else {
        static const char* hex = "0123456789abcdef";
        shown = std::string("byte 0x") + hex[c >> 4] + hex[c & 15];
      }
      return Error(Errc::invalid_name,
                   what + " name has " + shown + " at position " + std::to_string(i) +
                       "; names use [A-Za-z0-9._-] and start with a letter, digit or '_'");
    }
  }
  return {};
}

Result<void> validate_stream_key(const StreamKey& key) {
  if (auto r = validate_name(NameKind::tenant, key.tenant); !r) return r;
  if (auto r = validate_name(NameKind::ns, key.ns); !r) return r;
  return validate_name(NameKind::stream, key.name);
}

}  // namespace sluice
